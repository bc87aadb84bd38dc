//! The wall editor's live preview: the real SDK showing the unsaved draft.
//!
//! The editor posts its form to `POST /dashboard/sites/:id/wall/preview`; the
//! draft is checked by the same rules as saving and kept in the database
//! (whichever node serves the preview finds it; a draft is too big for a
//! cookie, and the SDK's requests carry none) under a random token, of which
//! the database holds only the SHA-256. The preview page (`GET …/wall/preview/:token`) loads the SDK
//! from `/p/v1.js`, the file visitors get, and calls `Postern.init` with
//! `endpoint` set to that page's own URL, then `Postern.forceDisplay()`.
//! Under that prefix this module is the SDK's sandbox collector: it answers
//! the config request with the draft, the bait request as the real bait path
//! does, and accepts and discards events, so a preview never counts.
//!
//! The SDK sends no cookies (`credentials: "omit"`), so the sandbox cannot
//! check the session: the token is the capability. It is 256 random bits,
//! minted only for a signed-in user of the site's account after the CSRF
//! check, tied to one site, and forgotten after [`TTL`]. The gateway counts
//! requests carrying a live token against that token, not the address's
//! public limit, so quick editing cannot run the preview into 429s.

use analytics::accounts::hash_secret;
use analytics::web_sessions::random_token;
use chrono::Utc;
use http::{HeaderValue, StatusCode};
use serde_json::{json, Value as Json};
use uuid::Uuid;
use warp::path::Tail;
use warp::reply::Response;

use super::sites::site_of;
use super::{page, wall, Form, Viewer};
use crate::api::{json_reply, no_content, Query};
use crate::error::ApiError;
use crate::state::Ctx;

/// How long a draft answers the SDK, in seconds; every edit mints a fresh one.
const TTL: i64 = 30 * 60;
/// Drafts kept per signed-in session (a draft is at most ~25 KB): the newest,
/// plus a few for preview pages still loading while the next edit arrives.
const PER_SESSION: u32 = 4;
/// The preview page runs the SDK: its wasm needs `wasm-unsafe-eval` and its
/// bait element an inline style (the wall's styles are a constructed
/// stylesheet, which `style-src` does not govern). Nothing else is loosened.
const PREVIEW_CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; \
script-src 'self' 'wasm-unsafe-eval'; frame-ancestors 'self'; form-action 'none'; base-uri 'none'";

/// Keeps `wall` as a draft of `site` for the viewer's session; its token.
async fn insert(ctx: &Ctx, site: Uuid, viewer: &Viewer, wall: &Json) -> Result<String, ApiError> {
    let token = random_token();
    let (hash, session, wall, now) = (hash_secret(&token), viewer.token.id, wall.to_string(), Utc::now().timestamp());
    ctx.writer
        .apply(move |c| {
            let draft = analytics::shared::Draft { token: &hash, site, session: &session, wall: &wall, expires_at: now + TTL };
            analytics::shared::put_draft(c, &draft, PER_SESSION, now)
        })
        .await?;
    Ok(token)
}

/// The live draft of `site` that `token` opens.
async fn draft(ctx: &Ctx, site: Uuid, token: &str) -> Result<Option<Json>, ApiError> {
    let (hash, now) = (hash_secret(token), Utc::now().timestamp());
    let wall = ctx.read(move |c| analytics::shared::draft(c, &hash, site, now)).await?;
    Ok(wall.and_then(|w| serde_json::from_str(&w).ok()))
}

/// Whether `token` opens a live draft of `site` (the gateway's question,
/// asked before any limit: only a token of the length minted is looked up).
pub async fn live_draft(ctx: &Ctx, site: Uuid, token: &str) -> Result<bool, ApiError> {
    Ok(token.len() == 64 && draft(ctx, site, token).await?.is_some())
}

/// The site and token of a path under a preview's address
/// (`/dashboard/sites/:id/wall/preview/:token[/…]`), for the gateway.
pub fn preview_token(path: &str) -> Option<(Uuid, &str)> {
    let rest = path.strip_prefix("/dashboard/sites/")?;
    let (site, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("wall/preview/")?;
    let token = rest.split('/').next().filter(|t| !t.is_empty())?;
    Some((Uuid::parse_str(site).ok()?, token))
}

fn expired() -> ApiError {
    ApiError::not_found("token", "this preview has expired; change the wall again to refresh it")
}

fn names(wall: &Json) -> Vec<&str> {
    wall.get("variants").and_then(Json::as_array).into_iter().flatten().filter_map(|v| v.get("name")?.as_str()).collect()
}

/// POST /dashboard/sites/:id/wall/preview — the editor's form in, the
/// preview's address out. Readers may preview (nothing is saved). Errors are
/// the API's JSON, not a page: the editor's script shows their message.
pub async fn preview_create(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let create = async {
        let viewer = viewer?;
        let form = form?;
        viewer.check_csrf(&form)?;
        let site = site_of(&ctx, &viewer, &id).await?;
        let draft = wall::checked_wall(&site.wall, &form)?;
        let variants: Vec<String> = names(&draft).into_iter().map(str::to_owned).collect();
        let token = insert(&ctx, site.id, &viewer, &draft).await?;
        let body = json!({
            "url": format!("/dashboard/sites/{}/wall/preview/{token}", site.id),
            "variants": variants,
            "expires_in": TTL,
        });
        let mut res = json_reply(StatusCode::CREATED, &body);
        res.headers_mut().insert("cache-control", HeaderValue::from_static("no-store"));
        Ok::<_, ApiError>(res)
    };
    Ok(create.await.unwrap_or_else(ApiError::into_response))
}

/// GET /dashboard/sites/:id/wall/preview/:token?variant=NAME — a page with
/// article-like text under the wall, the SDK pointed at this same address.
pub async fn preview_page(id: String, token: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, q: Query) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let draft = draft(&ctx, site.id, &token).await?.ok_or_else(expired)?;
    let variant = q.get("variant").filter(|v| names(&draft).contains(v));
    let ctx = minijinja::context! {
        site => minijinja::context! { id => site.id.to_string(), name => site.name, domain => site.domain },
        endpoint => format!("/dashboard/sites/{}/wall/preview/{token}", site.id),
        variant => variant,
    };
    let mut res = page(StatusCode::OK, "wall_preview.html", None, ctx)?;
    res.headers_mut().insert("content-security-policy", HeaderValue::from_static(PREVIEW_CSP));
    Ok(res)
}

/// GET /dashboard/sites/:id/wall/preview/:token/<SDK path> — the config
/// request gets the draft, the probe requests (bait and control) their answer;
/// nothing else is here.
pub async fn sandbox_get(id: String, token: String, tail: Tail, ctx: Ctx, q: Query) -> Result<Response, ApiError> {
    let answer = async {
        let path = tail.as_str();
        if let Some(res) = crate::assets::probe(&format!("/{path}"), &q) {
            return Ok(res);
        }
        let site = Uuid::parse_str(&id).map_err(|_| expired())?;
        if path != format!("v1/sdk/sites/{id}/config") {
            return Err(ApiError::no_route(path));
        }
        let wall = draft(&ctx, site, &token).await?.ok_or_else(expired)?;
        let mut res = json_reply(StatusCode::OK, &json!({ "site_id": site, "active": true, "wall": wall }));
        res.headers_mut().insert("cache-control", HeaderValue::from_static("no-store"));
        Ok(res)
    };
    Ok(answer.await.unwrap_or_else(ApiError::into_response))
}

/// POST /dashboard/sites/:id/wall/preview/:token/v1/e — the SDK's events,
/// accepted and thrown away (a preview is not a visit). Any token is
/// accepted: an expired preview page still loading must not log errors,
/// and throwing an event away tells nobody anything.
pub async fn sandbox_post(tail: Tail) -> Result<Response, ApiError> {
    Ok(if tail.as_str() == "v1/e" { no_content() } else { ApiError::no_route(tail.as_str()).into_response() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_finds_the_token_in_a_preview_path() {
        let site = Uuid::new_v4();
        let base = format!("/dashboard/sites/{site}/wall/preview/abc");
        assert_eq!(preview_token(&base), Some((site, "abc")));
        assert_eq!(preview_token(&format!("{base}/v1/sdk/sites/{site}/config")), Some((site, "abc")));
        assert_eq!(preview_token(&format!("/dashboard/sites/{site}/wall/preview")), None);
        assert_eq!(preview_token(&format!("/dashboard/sites/{site}/wall/preview/")), None);
        assert_eq!(preview_token("/dashboard/sites/not-a-uuid/wall/preview/abc"), None);
        assert_eq!(preview_token(&format!("/dashboard/sites/{site}/wall")), None);
    }
}
