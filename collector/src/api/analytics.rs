//! Read-only analytics of a site: dashboard metrics, the conversions timeline
//! and A/B results.

use analytics::model::{Device, Scope};
use analytics::period::Period;
use analytics::query::{self, Filter, Granularity};
use chrono::Utc;
use http::StatusCode;
use serde_json::json;
use warp::reply::Response;

use super::sites::load_site;
use super::{json_reply, Query};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Ctx;

/// The longest period any analytics query covers: the aggregate retention.
pub const MAX_DAYS: u32 = 730;
/// Hourly buckets are offered up to this many days.
pub const MAX_HOURLY_DAYS: u32 = 31;

fn device_filter(q: &Query) -> Result<Filter, ApiError> {
    let device = q
        .get("device")
        .filter(|d| !d.is_empty())
        .map(|d| Device::parse(d).ok_or_else(|| ApiError::invalid("device", "invalid", "device must be one of desktop, mobile, tablet")))
        .transpose()?;
    Ok(Filter { device })
}

/// GET /v1/analytics/sites/:id/dashboard
pub async fn analytics_dashboard(id: String, ctx: Ctx, p: Result<Principal, ApiError>, q: Query) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let days = q.int("days", 1, MAX_DAYS)?.unwrap_or(7);
    let filter = device_filter(&q)?;
    let site = load_site(&ctx, &p, &id).await?;
    let period = Period::last_days(days, site.timezone, Utc::now());
    let dashboard = ctx.read(move |c| query::dashboard(c, &site, &period, filter)).await?;
    Ok(json_reply(StatusCode::OK, &dashboard))
}

/// GET /v1/analytics/sites/:id/conversions
pub async fn analytics_conversions(id: String, ctx: Ctx, p: Result<Principal, ApiError>, q: Query) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let days = q.int("days", 1, MAX_DAYS)?.unwrap_or(30);
    let granularity = match q.get("granularity").filter(|g| !g.is_empty()) {
        None => Granularity::Day,
        Some(g) => Granularity::parse(g)
            .ok_or_else(|| ApiError::invalid("granularity", "invalid", "granularity must be hour, day or week"))?,
    };
    if granularity == Granularity::Hour && days > MAX_HOURLY_DAYS {
        return Err(ApiError::invalid(
            "granularity",
            "out_of_range",
            format!("granularity=hour is available for days up to {MAX_HOURLY_DAYS}"),
        ));
    }
    let filter = device_filter(&q)?;
    let site = load_site(&ctx, &p, &id).await?;
    let period = Period::last_days(days, site.timezone, Utc::now());
    let timeline = ctx.read(move |c| query::timeline(c, &site, &period, granularity, filter)).await?;
    Ok(json_reply(StatusCode::OK, &timeline))
}

/// GET /v1/analytics/sites/:id/ab-testing
pub async fn analytics_ab_testing(id: String, ctx: Ctx, p: Result<Principal, ApiError>, q: Query) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let days = q.int("days", 1, MAX_DAYS)?;
    let site = load_site(&ctx, &p, &id).await?;
    let hours = days.map(|d| Period::last_days(d, site.timezone, Utc::now()).hour_range());
    let variants = ctx.read(move |c| query::ab_testing(c, &site, hours)).await?;
    Ok(json_reply(StatusCode::OK, &json!({ "variants": variants })))
}
