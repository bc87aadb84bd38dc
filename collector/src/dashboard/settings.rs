//! A site's settings: name, domain, timezone, status, revenue figure, whether
//! page URLs keep their `utm_*` parameters, the snippet that installs the SDK,
//! and deleting the site. Validated by the
//! same rules as `PATCH /v1/sites/:id`.

use analytics::model::Site;
use analytics::sites::{self, SiteChanges};
use chrono::Utc;
use http::{HeaderMap, StatusCode};
use serde_json::Value as Json;
use warp::reply::Response;

use super::sites::site_of;
use super::{admin_change, form_error, page, redirect, Form, Viewer};
use crate::api::{parse_domain, parse_name, parse_revenue, parse_status, parse_timezone, Query};
use crate::error::ApiError;
use crate::state::Ctx;

/// The collector's own origin as the browser sees it, for the install snippet.
fn origin(headers: &HeaderMap) -> String {
    let host = headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let https = headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("https"));
    format!("{}://{host}", if https { "https" } else { "http" })
}

fn render(
    viewer: &Viewer,
    headers: &HeaderMap,
    site: &Site,
    status: StatusCode,
    form: minijinja::Value,
    error: Option<minijinja::Value>,
    saved: bool,
) -> Result<Response, ApiError> {
    let snippet = format!(r#"<script async src="{}/p/v1.js" data-site-id="{}"></script>"#, origin(headers), site.id);
    let timezones: Vec<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    let ctx = minijinja::context! {
        nav => "sites",
        site => minijinja::context! { id => site.id.to_string(), name => site.name },
        form => form,
        timezones => timezones,
        snippet => snippet,
        error => error,
        saved => saved,
    };
    page(status, "site_settings.html", Some(viewer), ctx)
}

fn current(site: &Site) -> minijinja::Value {
    minijinja::context! {
        name => site.name,
        domain => site.domain,
        timezone => site.timezone.name(),
        status => site.status.as_str(),
        revenue => site.revenue_per_mille.map(|r| r.to_string()).unwrap_or_default(),
        keep_utm => site.keep_utm,
    }
}

/// GET /dashboard/sites/:id/settings
pub async fn settings_page(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, headers: HeaderMap, q: Query) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let site = site_of(&ctx, &viewer, &id).await?;
    render(&viewer, &headers, &site, StatusCode::OK, current(&site), None, q.get("saved").is_some())
}

fn changes(form: &Form) -> Result<SiteChanges, ApiError> {
    let text = |name: &str| form.get(name).map(|v| Json::String(v.to_owned()));
    let revenue = match form.text("revenue_per_1000_pageviews") {
        None => Some(Json::Null),
        Some(r) => Some(r.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Json::Number).unwrap_or(Json::String(r.to_owned()))),
    };
    Ok(SiteChanges {
        name: parse_name(text("name").as_ref())?,
        domain: parse_domain(text("domain").as_ref())?,
        status: parse_status(text("status").as_ref())?,
        timezone: parse_timezone(text("timezone").as_ref())?,
        revenue_per_mille: parse_revenue(revenue.as_ref())?,
        wall: None,
        // An unchecked box is not sent.
        keep_utm: Some(form.get("keep_utm").is_some()),
    })
}

/// POST /dashboard/sites/:id/settings
pub async fn settings_save(
    id: String,
    ctx: Ctx,
    viewer: Result<Viewer, ApiError>,
    headers: HeaderMap,
    form: Result<Form, ApiError>,
) -> Result<Response, ApiError> {
    let (viewer, form) = admin_change(viewer, form)?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let changes = match changes(&form) {
        Ok(c) => c,
        Err(e) if e.status == StatusCode::BAD_REQUEST => {
            let typed = minijinja::context! {
                name => form.get("name"), domain => form.get("domain"), timezone => form.get("timezone"),
                status => form.get("status"), revenue => form.get("revenue_per_1000_pageviews"),
                keep_utm => form.get("keep_utm").is_some(),
            };
            return render(&viewer, &headers, &site, StatusCode::BAD_REQUEST, typed, Some(form_error(&e)), false);
        }
        Err(e) => return Err(e),
    };
    let (account, site_id) = (viewer.account_id(), site.id);
    ctx.writer.apply(move |c| sites::update(c, account, site_id, &changes)).await?;
    ctx.directory.forget_site(&ctx.store, site_id).await;
    Ok(redirect(&format!("/dashboard/sites/{site_id}/settings?saved=1")))
}

/// POST /dashboard/sites/:id/delete
pub async fn site_delete(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let (viewer, _) = admin_change(viewer, form)?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let (account, site_id) = (viewer.account_id(), site.id);
    ctx.writer.apply(move |c| sites::delete(c, account, site_id, Utc::now())).await?;
    ctx.directory.forget_site(&ctx.store, site_id).await;
    Ok(redirect("/dashboard/"))
}
