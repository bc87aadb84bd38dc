//! Integrations of a site: Slack-type webhooks with the alerts they receive,
//! custom webhooks with their signing secret (shown once), e-mail addresses;
//! a test button and the delivery log of each. Validation is the API's, and
//! so is what a Reader sees: URLs masked, each delivery's outcome without the
//! receiver's answer.

use analytics::integrations::{self, Integration, Kind, NewIntegration};
use analytics::model::iso;
use analytics::outbox::{self, Delivery};
use std::time::{Duration, Instant};

use chrono::Utc;
use http::StatusCode;
use serde_json::{json, Value as Json};
use uuid::Uuid;
use warp::reply::Response;

use super::sites::site_of;
use super::{admin_change, page, redirect, Flash, FlashPage, Form, Viewer};
use crate::api::integrations::{check_destination, mask_url, parse_email, parse_events, parse_url};
use crate::api::json_reply;
use crate::delivery::{self, EVENTS};
use crate::error::ApiError;
use crate::state::Ctx;

const MAX_NAME_LEN: usize = 100;
/// Deliveries shown in each integration's log.
const LOG_LENGTH: usize = 10;
/// How long "Send a test" waits for the outbox worker's first attempt, so the
/// page it goes back to shows the outcome; past this the log says it is queued.
const TEST_WAIT: Duration = Duration::from_secs(5);
/// How often the outbox is read while waiting.
const TEST_POLL: Duration = Duration::from_millis(100);

/// A row of the delivery log, for the page and for its script's refresh.
/// `detailed` (Admins) adds the receiver's last answer, latency and error.
fn delivery_json(d: &Delivery, detailed: bool) -> Json {
    let last = d.attempts.last().filter(|_| detailed);
    json!({
        "id": d.id,
        "event": d.event,
        "state": d.state,
        // Pending after an attempt: it failed and the worker tries again later.
        "retrying": d.state == "pending" && !d.attempts.is_empty(),
        "queued": d.state == "pending" && d.attempts.is_empty(),
        "created_at": iso(d.created_at),
        "attempts": d.attempts.len(),
        "status": last.and_then(|a| a.status),
        "latency_ms": last.map(|a| a.latency_ms),
        "error": d.last_error.as_ref().filter(|_| detailed),
    })
}

fn integration_view(i: &Integration, log: &[Delivery], detailed: bool) -> minijinja::Value {
    let target = match i.kind {
        Kind::Slack | Kind::Webhook => mask_url(&i.target),
        Kind::Email => i.target.clone(),
    };
    minijinja::context! {
        id => i.id.to_string(),
        kind => i.kind.as_str(),
        name => i.name,
        target => target,
        events => i.events,
        signed => i.secret.is_some(),
        created_at => iso(i.created_at),
        deliveries => log.iter().map(|d| minijinja::Value::from_serialize(delivery_json(d, detailed))).collect::<Vec<_>>(),
        // Something not tried yet: the page says so and how to see the outcome.
        queued => log.iter().any(|d| d.state == "pending" && d.attempts.is_empty()),
    }
}

async fn render(
    ctx: &Ctx,
    viewer: &Viewer,
    site_id: &str,
    status: StatusCode,
    created: Option<minijinja::Value>,
    error: Option<String>,
) -> Result<Response, ApiError> {
    let site = site_of(ctx, viewer, site_id).await?;
    let seq = site.seq;
    let items = ctx
        .read(move |c| {
            integrations::list(c, seq)?
                .into_iter()
                .filter(|i| i.deleted_at.is_none())
                .map(|i| {
                    let log = outbox::list(c, seq, Some(i.seq), LOG_LENGTH)?;
                    Ok((i, log))
                })
                .collect::<analytics::Result<Vec<_>>>()
        })
        .await?;
    let views: Vec<_> = items.iter().map(|(i, log)| integration_view(i, log, viewer.is_admin())).collect();
    let ctx = minijinja::context! {
        nav => "sites",
        site => minijinja::context! { id => site.id.to_string(), name => site.name },
        integrations => views,
        events => EVENTS,
        created => created,
        error => error,
    };
    page(status, "integrations.html", Some(viewer), ctx)
}

/// GET /dashboard/sites/:id/integrations — with the integration just added
/// (and a webhook's signing secret) once.
pub async fn integrations_page(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let site = site_of(&ctx, &viewer, &id).await?.id;
    let created = match viewer.take_flash(&ctx, FlashPage::Integrations(site)).await? {
        Some(Flash::Integration { name, secret, .. }) => Some(minijinja::context! { name => name, secret => secret }),
        _ => None,
    };
    render(&ctx, &viewer, &id, StatusCode::OK, created, None).await
}

/// GET /dashboard/sites/:id/integrations/:iid/log — the integration's
/// delivery log as JSON, which the page's script polls while a delivery is
/// not tried yet (the page says so and offers a Refresh link without it).
pub async fn integration_log(id: String, iid: String, ctx: Ctx, viewer: Result<Viewer, ApiError>) -> Result<Response, ApiError> {
    let log = async {
        let viewer = viewer?;
        let (site, integration) = live_integration(&ctx, &viewer, &id, &iid).await?;
        let (seq, iseq) = (site.seq, integration.seq);
        let log = ctx.read(move |c| outbox::list(c, seq, Some(iseq), LOG_LENGTH)).await?;
        let detailed = viewer.is_admin();
        let mut res = json_reply(StatusCode::OK, &json!({ "deliveries": log.iter().map(|d| delivery_json(d, detailed)).collect::<Vec<_>>() }));
        res.headers_mut().insert("cache-control", http::HeaderValue::from_static("no-store"));
        Ok::<_, ApiError>(res)
    };
    Ok(log.await.unwrap_or_else(ApiError::into_response))
}

/// The new integration's kind, name, target and events, or why not.
fn parse(form: &Form) -> Result<(Kind, String, String, Vec<String>), ApiError> {
    let kind = form
        .text("kind")
        .and_then(Kind::parse)
        .ok_or_else(|| ApiError::invalid("kind", "invalid", "kind must be email, slack or webhook"))?;
    let target = match kind {
        Kind::Email => parse_email(form.text("email").ok_or_else(|| ApiError::required("email"))?)?,
        Kind::Slack | Kind::Webhook => parse_url(form.text("url").ok_or_else(|| ApiError::required("url"))?)?,
    };
    let name = form.text("name").unwrap_or(kind.as_str()).to_owned();
    if name.chars().count() > MAX_NAME_LEN {
        return Err(ApiError::invalid("name", "invalid", format!("name must be a string of 1 to {MAX_NAME_LEN} characters")));
    }
    let events: Vec<Json> = form.all("events").map(|e| Json::String(e.to_owned())).collect();
    let events = parse_events(Some(&Json::Array(events)))?;
    Ok((kind, name, target, events))
}

/// POST /dashboard/sites/:id/integrations — then 303 to the list, which
/// shows the signing secret once.
pub async fn integrations_create(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let (viewer, form) = admin_change(viewer, form)?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let parsed = match parse(&form) {
        Ok((kind, name, target, events)) if kind != Kind::Email => check_destination(&ctx, &target).await.map(|()| (kind, name, target, events)),
        other => other,
    };
    let (kind, name, target, events) = match parsed {
        Ok(v) => v,
        Err(e) if e.status == StatusCode::BAD_REQUEST => {
            return render(&ctx, &viewer, &id, StatusCode::BAD_REQUEST, None, Some(e.message)).await;
        }
        Err(e) => return Err(e),
    };
    let (seq, site_id) = (site.seq, site.id);
    let flasher = viewer.clone();
    ctx.writer
        .apply(move |c| {
            let new = integrations::create(c, &NewIntegration { site: seq, kind, name: &name, target: &target, events: &events }, Utc::now())?;
            flasher.flash(c, &Flash::Integration { site: site_id, name: new.name, secret: new.secret })
        })
        .await?;
    Ok(redirect(&format!("/dashboard/sites/{site_id}/integrations#created-title")))
}

async fn live_integration(ctx: &Ctx, viewer: &Viewer, id: &str, iid: &str) -> Result<(analytics::model::Site, Integration), ApiError> {
    let site = site_of(ctx, viewer, id).await?;
    let not_found = || ApiError::not_found("iid", "no integration with this id");
    let iid = Uuid::parse_str(iid).map_err(|_| not_found())?;
    let seq = site.seq;
    let integration = ctx.read(move |c| integrations::get(c, seq, iid)).await?.filter(|i| i.deleted_at.is_none()).ok_or_else(not_found)?;
    Ok((site, integration))
}

/// POST /dashboard/sites/:id/integrations/:iid/test — queues a test message
/// and waits (a few seconds at most) for its first attempt before going back
/// to the log, so the log shows whether it arrived.
pub async fn integrations_test(
    id: String,
    iid: String,
    ctx: Ctx,
    viewer: Result<Viewer, ApiError>,
    form: Result<Form, ApiError>,
) -> Result<Response, ApiError> {
    let (viewer, _) = admin_change(viewer, form)?;
    let (site, integration) = live_integration(&ctx, &viewer, &id, &iid).await?;
    let (site_id, site_seq) = (site.id, site.seq);
    let (anchor, iseq) = (integration.id, integration.seq);
    let delivery = ctx.writer.apply(move |c| delivery::enqueue_test(c, site_id, &integration)).await?;
    let deadline = Instant::now() + TEST_WAIT;
    loop {
        let attempted = ctx
            .read(move |c| Ok(outbox::list(c, site_seq, Some(iseq), LOG_LENGTH)?.iter().any(|d| d.id == delivery && !d.attempts.is_empty())))
            .await?;
        if attempted || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(TEST_POLL).await;
    }
    Ok(redirect(&format!("/dashboard/sites/{site_id}/integrations#integration-{anchor}")))
}

/// POST /dashboard/sites/:id/integrations/:iid/delete
pub async fn integrations_delete(
    id: String,
    iid: String,
    ctx: Ctx,
    viewer: Result<Viewer, ApiError>,
    form: Result<Form, ApiError>,
) -> Result<Response, ApiError> {
    let (viewer, _) = admin_change(viewer, form)?;
    let (site, integration) = live_integration(&ctx, &viewer, &id, &iid).await?;
    let (seq, iid) = (site.seq, integration.id);
    ctx.writer.apply(move |c| integrations::delete(c, seq, iid, Utc::now())).await?;
    Ok(redirect(&format!("/dashboard/sites/{}/integrations", site.id)))
}
