//! What the browser SDK reads without a key: a site's public wall configuration.

use http::StatusCode;
use serde_json::json;
use uuid::Uuid;
use warp::reply::Response;

use super::json_reply;
use crate::error::ApiError;
use crate::state::Ctx;

/// How long browsers and proxies may keep a site's config.
const CONFIG_MAX_AGE_SECS: u32 = 300;

/// GET /v1/sdk/sites/:id/config
///
/// Public and cacheable: only the wall (kind, texts, variants, weights) and
/// whether the site is active. Nothing about the account or revenue.
pub async fn sdk_site_config(id: String, ctx: Ctx) -> Result<Response, ApiError> {
    let not_found = || ApiError::not_found("id", "no site with this id");
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    let site = ctx.directory.site(&ctx.store, id).await?.ok_or_else(not_found)?;
    let body = json!({
        "site_id": site.id,
        "active": site.status == analytics::model::SiteStatus::Active,
        "wall": site.wall,
    });
    let mut res = json_reply(StatusCode::OK, &body);
    let h = res.headers_mut();
    h.insert("cache-control", format!("public, max-age={CONFIG_MAX_AGE_SECS}").parse().map_err(ApiError::internal)?);
    h.insert("access-control-allow-origin", http::HeaderValue::from_static("*"));
    Ok(res)
}
