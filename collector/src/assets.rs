//! Files served from the binary itself (embedded by `build.rs` with their
//! brotli and gzip forms, which `compression` chooses from): the browser SDK
//! under `/p/`, the dashboard's CSS and JavaScript, and in demo mode the demo
//! publisher site under `/demo/`; and the bait scripts and the control
//! request (`/p/echo.js`) the SDK's request probe compares them with.

use std::sync::Once;

use http::{HeaderValue, StatusCode};
use warp::reply::Response;
use warp::Reply;

use crate::api::Query;
use crate::compression::{Embedded, Form};
use crate::error::ApiError;
use crate::state::Ctx;

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// The loader's URL never changes, so browsers re-check it every few minutes
/// (a 304 when it has not changed) to pick up a new SDK; the files it names
/// change name when they change.
const LOADER_CACHE: &str = "public, max-age=300";
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
const LOADER: &str = "v1.js";
const JS: &str = "text/javascript; charset=utf-8";
/// The demo site's pages name the demo site's id in place of this.
const SITE_ID_SLOT: &str = "{{POSTERN_SITE_ID}}";
/// Longest nonce echoed by the bait script.
const MAX_NONCE: usize = 64;

/// True for the paths this module answers (the router asks before routing here).
pub fn handles(path: &str, demo: bool) -> bool {
    sdk_path(path) || (demo && (path == "/demo" || path.starts_with("/demo/")))
}

/// The SDK's files (`/p/…`, the probe control among them) and its bait scripts.
pub fn sdk_path(path: &str) -> bool {
    path.starts_with("/p/") || BAIT_PATHS.contains(&path)
}

/// GET /p/:file, GET <bait path>, GET /p/echo.js, and in demo mode GET /demo/:file
pub async fn assets_get(path: warp::path::FullPath, q: Query, ctx: Ctx) -> Result<Response, ApiError> {
    let path = path.as_str();
    if let Some(res) = probe(path, &q) {
        return Ok(res);
    }
    if let Some(file) = path.strip_prefix("/p/") {
        return sdk_file(file);
    }
    if path == "/demo" {
        return Ok(redirect("/demo/"));
    }
    let file = path.strip_prefix("/demo/").map(|f| if f.is_empty() { "index.html" } else { f }).unwrap_or_default();
    demo_file(file, &ctx)
}

fn sdk_file(file: &str) -> Result<Response, ApiError> {
    static WARNED: Once = Once::new();
    if SDK.is_empty() {
        WARNED.call_once(|| tracing::warn!("the browser SDK is not in this binary: run scripts/build-sdk, then rebuild postern"));
        return Err(ApiError::not_built("this postern binary was built without the browser SDK; run scripts/build-sdk, then rebuild"));
    }
    let embedded = find(SDK, file).ok_or_else(|| ApiError::not_found("file", "no SDK file with this name (the loader names the current ones)"))?;
    let cache = if file == LOADER { LOADER_CACHE } else { IMMUTABLE };
    let mut res = embedded.reply(content_type(file), cache);
    public(res.headers_mut());
    Ok(res)
}

/// GET /dashboard/assets/:name: the dashboard's CSS and JavaScript.
pub fn dashboard_file(name: &str) -> Result<Response, ApiError> {
    let embedded = find(DASHBOARD, name).ok_or_else(|| ApiError::not_found("path", "there is no such file"))?;
    // Short enough that an upgrade shows up soon, long enough to spare the rate limit.
    let mut res = embedded.reply(content_type(name), "private, max-age=3600");
    res.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    Ok(res)
}

fn find(files: &'static [(&str, Embedded)], name: &str) -> Option<&'static Embedded> {
    files.iter().find(|(n, _)| *n == name).map(|(_, e)| e)
}

fn content_type(file: &str) -> &'static str {
    match file.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => JS,
        Some("svg") => "image/svg+xml",
        Some("wasm") => "application/wasm",
        _ => "application/octet-stream",
    }
}

/// The SDK is loaded by pages of other origins (as a module and by
/// `instantiateStreaming`, both CORS requests), whose Resource Timing may
/// report its sizes and times.
fn public(h: &mut http::HeaderMap) {
    h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    h.insert("timing-allow-origin", HeaderValue::from_static("*"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
}

/// The answer to one of the SDK's probe requests (a bait script or the
/// control), when `path` is one; `path` starts with `/`.
pub(crate) fn probe(path: &str, q: &Query) -> Option<Response> {
    (BAIT_PATHS.contains(&path) || path == CONTROL_PATH).then(|| bait(q.get("n")))
}

/// A bait script, or the control: harmless JavaScript whose body carries the
/// request's nonce, so the SDK can tell this answer from a blocker's stand-in
/// script. Never cached: a cached answer would say the collector is reachable
/// when it is not. No `Timing-Allow-Origin`: nobody measures a probe, and
/// every visitor downloads its headers.
fn bait(nonce: Option<&str>) -> Response {
    let mut res = Response::new(bait_body(nonce).into());
    let h = res.headers_mut();
    h.insert("content-type", HeaderValue::from_static(JS));
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    res
}

fn bait_body(nonce: Option<&str>) -> String {
    let nonce = nonce.filter(|n| n.len() <= MAX_NONCE && n.bytes().all(|b| b.is_ascii_alphanumeric())).unwrap_or("");
    format!("/* postern bait {nonce} */\n")
}

fn redirect(to: &'static str) -> Response {
    let mut res = warp::reply::with_status(warp::reply(), StatusCode::FOUND).into_response();
    res.headers_mut().insert("location", HeaderValue::from_static(to));
    res
}

/// The demo site's pages are templates (the demo site's id is filled in), so
/// they are compressed as they are sent; its other files are embedded with
/// their compressed forms.
fn demo_file(file: &str, ctx: &Ctx) -> Result<Response, ApiError> {
    let embedded = find(DEMO, file).ok_or_else(|| ApiError::no_route("this path"))?;
    let mime = content_type(file);
    if !mime.starts_with("text/html") {
        return Ok(embedded.reply(mime, "no-cache"));
    }
    let site = ctx.demo_site.get().map(|id| id.to_string()).unwrap_or_default();
    let body = String::from_utf8_lossy(embedded.identity.bytes).replace(SITE_ID_SLOT, &site);
    let mut res = Response::new(body.into());
    let h = res.headers_mut();
    h.insert("content-type", HeaderValue::from_static(mime));
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_its_own_paths_are_handled() {
        assert!(handles("/p/v1.js", false));
        for path in BAIT_PATHS {
            assert!(handles(path, false));
        }
        assert!(handles(CONTROL_PATH, false));
        assert!(!handles("/demo/", false), "the demo site exists only in demo mode");
        assert!(handles("/demo/", true));
        assert!(!handles("/", true), "the dashboard owns /");
        assert!(!handles("/v1/sites", true));
    }

    #[test]
    fn the_bait_echoes_only_a_plain_nonce() {
        assert!(bait_body(Some("9f3a0c")).contains("9f3a0c"));
        assert!(!bait_body(Some("<script>")).contains("<script>"));
        assert!(!bait_body(Some(&"a".repeat(65))).contains("aaaa"));
    }
}
