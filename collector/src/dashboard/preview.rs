//! The wall editor's live preview: the real SDK showing the unsaved draft.
//!
//! The editor posts its form to `POST /dashboard/sites/:id/wall/preview`; the
//! draft is checked by the same rules as saving and kept in memory under a
//! random token. The preview page (`GET …/wall/preview/:token`) loads the SDK
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

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use analytics::web_sessions::random_token;
use http::{HeaderValue, StatusCode};
use serde_json::{json, Value as Json};
use uuid::Uuid;
use warp::path::Tail;
use warp::reply::Response;

use super::sites::site_of;
use super::{page, same, wall, Form, Viewer};
use crate::api::{json_reply, no_content, Query};
use crate::error::ApiError;
use crate::state::Ctx;

/// How long a draft answers the SDK; every edit mints a fresh one.
const TTL: Duration = Duration::from_secs(30 * 60);
/// Drafts kept per signed-in session: the newest, plus a few for preview
/// pages still loading while the next edit arrives.
const PER_SESSION: usize = 4;
/// Drafts kept in all; the oldest goes first (a draft is at most ~25 KB).
const MAX_DRAFTS: usize = 512;
/// The preview page runs the SDK: its wasm needs `wasm-unsafe-eval` and its
/// bait element an inline style (the wall's styles are a constructed
/// stylesheet, which `style-src` does not govern). Nothing else is loosened.
const PREVIEW_CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; \
script-src 'self' 'wasm-unsafe-eval'; frame-ancestors 'self'; form-action 'none'; base-uri 'none'";

struct Draft {
    token: String,
    site: Uuid,
    /// The CSRF token of the session that made it: one per session.
    session: String,
    wall: Json,
    at: Instant,
}

/// Unsaved walls being previewed, oldest first.
#[derive(Default)]
pub struct Drafts(Mutex<VecDeque<Draft>>);

impl Drafts {
    fn insert(&self, site: Uuid, session: &str, wall: Json) -> String {
        let token = random_token();
        let now = Instant::now();
        let mut drafts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        drafts.retain(|d| now.duration_since(d.at) < TTL);
        let mine: Vec<usize> = drafts.iter().enumerate().filter(|(_, d)| d.session == session).map(|(i, _)| i).collect();
        if mine.len() >= PER_SESSION {
            drafts.remove(mine[0]);
        }
        if drafts.len() >= MAX_DRAFTS {
            drafts.pop_front();
        }
        drafts.push_back(Draft { token: token.clone(), site, session: session.to_owned(), wall, at: now });
        token
    }

    /// Whether `token` opens a live draft of `site`.
    pub fn is_live(&self, site: Uuid, token: &str) -> bool {
        self.get(site, token).is_some()
    }

    fn get(&self, site: Uuid, token: &str) -> Option<Json> {
        let drafts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        drafts
            .iter()
            .find(|d| d.site == site && same(&d.token, token) && d.at.elapsed() < TTL)
            .map(|d| d.wall.clone())
    }
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
pub async fn preview_create(
    id: String,
    ctx: Ctx,
    drafts: Arc<Drafts>,
    viewer: Result<Viewer, ApiError>,
    form: Result<Form, ApiError>,
) -> Result<Response, ApiError> {
    let create = async {
        let viewer = viewer?;
        let form = form?;
        viewer.check_csrf(&form)?;
        let site = site_of(&ctx, &viewer, &id).await?;
        let draft = wall::checked_wall(&site.wall, &form)?;
        let variants: Vec<String> = names(&draft).into_iter().map(str::to_owned).collect();
        let token = drafts.insert(site.id, &viewer.session.csrf_token, draft);
        let body = json!({
            "url": format!("/dashboard/sites/{}/wall/preview/{token}", site.id),
            "variants": variants,
            "expires_in": TTL.as_secs(),
        });
        let mut res = json_reply(StatusCode::CREATED, &body);
        res.headers_mut().insert("cache-control", HeaderValue::from_static("no-store"));
        Ok::<_, ApiError>(res)
    };
    Ok(create.await.unwrap_or_else(ApiError::into_response))
}

/// GET /dashboard/sites/:id/wall/preview/:token?variant=NAME — a page with
/// article-like text under the wall, the SDK pointed at this same address.
pub async fn preview_page(id: String, token: String, ctx: Ctx, drafts: Arc<Drafts>, viewer: Result<Viewer, ApiError>, q: Query) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let draft = drafts.get(site.id, &token).ok_or_else(expired)?;
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
pub async fn sandbox_get(id: String, token: String, tail: Tail, drafts: Arc<Drafts>, q: Query) -> Result<Response, ApiError> {
    let answer = || {
        let path = tail.as_str();
        if let Some(res) = crate::assets::probe(&format!("/{path}"), &q) {
            return Ok(res);
        }
        let site = Uuid::parse_str(&id).map_err(|_| expired())?;
        if path != format!("v1/sdk/sites/{id}/config") {
            return Err(ApiError::no_route(path));
        }
        let wall = drafts.get(site, &token).ok_or_else(expired)?;
        let mut res = json_reply(StatusCode::OK, &json!({ "site_id": site, "active": true, "wall": wall }));
        res.headers_mut().insert("cache-control", HeaderValue::from_static("no-store"));
        Ok(res)
    };
    Ok(answer().unwrap_or_else(ApiError::into_response))
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

    #[test]
    fn drafts_are_per_site_and_bounded_per_session() {
        let drafts = Drafts::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let first = drafts.insert(a, "s1", json!({"kind": "hard"}));
        assert_eq!(drafts.get(a, &first), Some(json!({"kind": "hard"})));
        assert_eq!(drafts.get(b, &first), None, "a token opens its own site's draft only");
        assert_eq!(drafts.get(a, "nope"), None);
        let other = drafts.insert(a, "s2", json!({}));
        let later: Vec<String> = (0..PER_SESSION).map(|i| drafts.insert(a, "s1", json!({ "n": i }))).collect();
        assert_eq!(drafts.get(a, &first), None, "the session's oldest draft made room");
        assert!(later.iter().all(|t| drafts.get(a, t).is_some()));
        assert!(drafts.get(a, &other).is_some(), "another session's draft stays");
    }
}
