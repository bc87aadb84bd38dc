//! Exports: a form that chooses the format, period, device and countries, and
//! the download itself, answered by the API's own export code.

use analytics::model::Device;
use analytics::period::Period;
use analytics::query;
use chrono::Utc;
use http::StatusCode;
use warp::reply::Response;

use super::sites::site_of;
use super::{page, Viewer};
use crate::api::export::ExportRequest;
use crate::api::Query;
use crate::error::ApiError;
use crate::state::Ctx;

/// The period the form starts with, and how far back the country list looks.
const DEFAULT_DAYS: u32 = 30;
const COUNTRY_DAYS: u32 = 90;

/// GET /dashboard/sites/:id/export
pub async fn export_page(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let now = Utc::now();
    let period = Period::last_days(DEFAULT_DAYS, site.timezone, now);
    let hours = Period::last_days(COUNTRY_DAYS, site.timezone, now).hour_range();
    let s = site.clone();
    let countries = ctx.read(move |c| query::countries(c, &s, hours)).await?;
    let ctx = minijinja::context! {
        nav => "sites",
        site => minijinja::context! { id => site.id.to_string(), name => site.name, timezone => site.timezone.name() },
        start => period.start.to_string(),
        end => period.end.to_string(),
        devices => Device::ALL.map(Device::as_str),
        countries => countries,
    };
    page(StatusCode::OK, "export.html", Some(&viewer), ctx)
}

/// GET /dashboard/sites/:id/export/download — the same parameters and file as
/// `GET /v1/sites/:id/export`, for a signed-in user of either role.
pub async fn export_download(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, q: Query) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let request = ExportRequest::parse(&q)?;
    let site = site_of(&ctx, &viewer, &id).await?;
    request.respond(&ctx, site).await
}
