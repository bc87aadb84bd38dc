//! Report configurations of a site (list, create, get, update, delete, send
//! now, runs) and stored report runs (`GET /v1/report-runs/:run_id`).

use analytics::model::{iso, Scope, Site};
use analytics::report::{self, Draft, Invalid, ReportConfig};
use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;
use warp::reply::Response;
use warp::Reply as _;

use super::sites::load_site;
use super::{json_object, json_reply, no_content, Query};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::reports::{self, render};
use crate::state::Ctx;

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> ApiError {
        ApiError::invalid(e.field, e.reason, e.message)
    }
}

/// The report resource as the API shows it.
fn view(ctx: &Ctx, site: &Site, c: &ReportConfig) -> Value {
    let spec = &c.draft.spec;
    let next = c.draft.enabled.then(|| iso(spec.schedule.next_after(site.timezone, ctx.config.now()).at));
    json!({
        "id": c.id,
        "site_id": c.site_id,
        "name": c.draft.name,
        "type": c.draft.kind,
        "enabled": c.draft.enabled,
        "metrics": spec.metrics,
        "filters": spec.filters,
        "schedule": spec.schedule,
        "timezone": site.timezone.name(),
        "recipients": spec.recipients,
        "channels": spec.channels,
        "format": spec.format,
        "next_run_at": next,
        "created_at": iso(c.created_at),
        "updated_at": iso(c.updated_at),
    })
}

fn run_links(id: Uuid) -> Value {
    json!({
        "json": format!("/v1/report-runs/{id}?format=json"),
        "html": format!("/v1/report-runs/{id}?format=html"),
        "pdf": format!("/v1/report-runs/{id}?format=pdf"),
    })
}

async fn load_report(ctx: &Ctx, site: &Site, rid: &str) -> Result<ReportConfig, ApiError> {
    let not_found = || ApiError::not_found("rid", "no report with this id on this site");
    let rid = Uuid::parse_str(rid).map_err(|_| not_found())?;
    let site_id = site.id;
    ctx.read(move |c| report::get(c, site_id, rid)).await?.ok_or_else(not_found)
}

/// GET /v1/sites/:id/reports
pub async fn reports_list(id: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let site = load_site(&ctx, &p, &id).await?;
    let site_id = site.id;
    let list = ctx.read(move |c| report::list(c, site_id)).await?;
    let views: Vec<Value> = list.iter().map(|c| view(&ctx, &site, c)).collect();
    Ok(json_reply(StatusCode::OK, &json!({ "reports": views })))
}

/// POST /v1/sites/:id/reports
pub async fn reports_create(
    id: String,
    ctx: Ctx,
    p: Result<Principal, ApiError>,
    body: Result<Bytes, ApiError>,
) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let site = load_site(&ctx, &p, &id).await?;
    let draft = Draft::from_json(&json_object(&body?)?, None)?;
    let (site_id, now) = (site.id, ctx.config.now());
    let created = ctx.writer.apply(move |c| report::create(c, site_id, draft, now)).await?;
    Ok(json_reply(StatusCode::CREATED, &view(&ctx, &site, &created)))
}

/// GET /v1/sites/:id/reports/:rid
pub async fn reports_get(id: String, rid: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let site = load_site(&ctx, &p, &id).await?;
    let config = load_report(&ctx, &site, &rid).await?;
    Ok(json_reply(StatusCode::OK, &view(&ctx, &site, &config)))
}

/// PATCH /v1/sites/:id/reports/:rid
pub async fn reports_update(
    id: String,
    rid: String,
    ctx: Ctx,
    p: Result<Principal, ApiError>,
    body: Result<Bytes, ApiError>,
) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let site = load_site(&ctx, &p, &id).await?;
    let config = load_report(&ctx, &site, &rid).await?;
    let draft = Draft::from_json(&json_object(&body?)?, Some(&config.draft))?;
    let (site_id, now) = (site.id, ctx.config.now());
    let updated = ctx.writer.apply(move |c| report::update(c, site_id, config.id, draft, now)).await?;
    Ok(json_reply(StatusCode::OK, &view(&ctx, &site, &updated)))
}

/// DELETE /v1/sites/:id/reports/:rid
pub async fn reports_delete(id: String, rid: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let site = load_site(&ctx, &p, &id).await?;
    let config = load_report(&ctx, &site, &rid).await?;
    let (site_id, now) = (site.id, ctx.config.now());
    ctx.writer.apply(move |c| report::delete(c, site_id, config.id, now)).await?;
    Ok(no_content())
}

/// POST /v1/sites/:id/reports/:rid/send
pub async fn reports_send(id: String, rid: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let site = load_site(&ctx, &p, &id).await?;
    let config = load_report(&ctx, &site, &rid).await?;
    let doc = reports::send_now(&ctx, site, config).await?;
    let mut body = serde_json::to_value(&doc).map_err(ApiError::internal)?;
    body["links"] = run_links(doc.id);
    Ok(json_reply(StatusCode::CREATED, &body))
}

/// GET /v1/sites/:id/reports/:rid/runs
pub async fn reports_runs(
    id: String,
    rid: String,
    ctx: Ctx,
    p: Result<Principal, ApiError>,
    q: Query,
) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let site = load_site(&ctx, &p, &id).await?;
    let config = load_report(&ctx, &site, &rid).await?;
    let limit = q.int("limit", 1u32, 100)?.unwrap_or(50);
    let offset = q.int("offset", 0u64, u64::from(u32::MAX))?.unwrap_or(0);
    let (runs, total) = ctx.read(move |c| report::list_runs(c, config.id, limit, offset)).await?;
    let runs: Vec<Value> = runs
        .into_iter()
        .map(|r| {
            let links = run_links(r.id);
            let mut v = serde_json::to_value(r).unwrap_or_default();
            v["links"] = links;
            v
        })
        .collect();
    Ok(json_reply(StatusCode::OK, &json!({ "runs": runs, "total": total, "limit": limit, "offset": offset })))
}

/// GET /v1/report-runs/:run_id?format=json|html|pdf
pub async fn report_runs_get(run_id: String, ctx: Ctx, p: Result<Principal, ApiError>, q: Query) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let format = q.get("format").unwrap_or("json");
    if !["json", "html", "pdf"].contains(&format) {
        return Err(ApiError::invalid("format", "invalid", "format must be json, html or pdf"));
    }
    let not_found = || ApiError::not_found("run_id", "no report run with this id");
    let run_id = Uuid::parse_str(&run_id).map_err(|_| not_found())?;
    let doc = ctx.read(move |c| report::get_run(c, run_id)).await?.ok_or_else(not_found)?;
    // The run is visible to the account that owns its site.
    load_site(&ctx, &p, &doc.site.id.to_string()).await.map_err(|_| not_found())?;
    match format {
        "json" => Ok(json_reply(StatusCode::OK, &doc)),
        "html" => {
            let mut res = warp::reply::html(render::html(&doc, None)).into_response();
            res.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/html; charset=utf-8"));
            Ok(res)
        }
        _ => {
            let bytes = tokio::task::spawn_blocking(move || render::pdf(&doc)).await.map_err(ApiError::internal)??;
            let mut res = Response::new(bytes.into());
            res.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/pdf"));
            Ok(res)
        }
    }
}
