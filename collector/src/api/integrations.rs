//! Integrations of a site (e-mail addresses, Slack-type and custom webhooks):
//! list, create, delete, send a test message, and the delivery history with
//! every attempt.
//!
//! A webhook URL must reach a public address (or a range the operator
//! allows): what a `write` key can aim the collector at is what it can probe.
//! For the same reason only keys that can change integrations see each
//! attempt's answer, latency and error; a `read` key sees the outcomes.

use analytics::integrations::{self, Integration, Kind, NewIntegration};
use analytics::model::{iso, Scope};
use analytics::outbox::{self, Delivery};
use bytes::Bytes;
use chrono::Utc;
use http::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;
use warp::reply::Response;

use super::sites::load_site;
use super::{json_object, json_reply, no_content, reject_unknown, Query};
use crate::auth::Principal;
use crate::delivery::destination::Destinations;
use crate::delivery::{self, EVENTS};
use crate::error::ApiError;
use crate::state::Ctx;

const MAX_NAME_LEN: usize = 100;
const MAX_URL_LEN: usize = 2048;

/// The integration as the API shows it. Secrets (the webhook's signing secret,
/// and the URL, which often carries a token: Slack's always do) appear in
/// full only at creation.
fn view(i: &Integration, reveal: bool) -> Value {
    let mut v = json!({
        "id": i.id,
        "kind": i.kind.as_str(),
        "name": i.name,
        "events": i.events,
        "created_at": iso(i.created_at),
    });
    match i.kind {
        Kind::Email => v["email"] = json!(i.target),
        Kind::Slack | Kind::Webhook if !reveal => v["url"] = json!(mask_url(&i.target)),
        Kind::Slack | Kind::Webhook => v["url"] = json!(i.target),
    }
    if let Some(secret) = &i.secret {
        v["secret"] = if reveal { json!(secret) } else { json!(format!("{}…{}", integrations::SECRET_PREFIX, &secret[secret.len() - 4..])) };
    }
    v
}

/// Keeps the scheme, host and port of a URL, hiding the user information,
/// path and query, which carry tokens.
pub(crate) fn mask_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(u) => {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}://{}{port}/…", u.scheme(), u.host_str().unwrap_or_default())
        }
        Err(_) => "…".to_owned(),
    }
}

/// A delivery with its attempts. `detailed` adds what the receiver answered
/// (status, latency, error): shown only to keys that can change
/// integrations, so a `read` key cannot use deliveries to probe a network.
fn delivery_view(d: &Delivery, detailed: bool) -> Value {
    let mut v = json!({
        "id": d.id,
        "event": d.event,
        "channel": d.channel.as_str(),
        "integration_id": d.integration,
        "recipient": d.recipient,
        "state": d.state,
        "attempt_count": d.attempts.len(),
        "attempts": d.attempts.iter().map(|a| {
            let mut attempt = json!({ "attempt": a.attempt, "started_at": iso(a.started_at), "outcome": a.outcome });
            if detailed {
                attempt["latency_ms"] = json!(a.latency_ms);
                attempt["status"] = json!(a.status);
                attempt["error"] = json!(a.error);
            }
            attempt
        }).collect::<Vec<_>>(),
        "next_attempt_at": d.next_attempt_at.map(iso),
        "created_at": iso(d.created_at),
        "finished_at": d.finished_at.map(iso),
    });
    if detailed {
        v["last_error"] = json!(d.last_error);
    }
    v
}

/// GET /v1/sites/:id/integrations
pub async fn integrations_list(id: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let site = load_site(&ctx, &p, &id).await?;
    let list = ctx.read(move |c| integrations::list(c, site.seq)).await?;
    let views: Vec<Value> = list.iter().map(|i| view(i, false)).collect();
    Ok(json_reply(StatusCode::OK, &json!({ "integrations": views })))
}

/// POST /v1/sites/:id/integrations
pub async fn integrations_create(
    id: String,
    ctx: Ctx,
    p: Result<Principal, ApiError>,
    body: Result<Bytes, ApiError>,
) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let site = load_site(&ctx, &p, &id).await?;
    let obj = json_object(&body?)?;
    let kind_error = || ApiError::invalid("kind", "invalid", "kind must be email, slack or webhook");
    let kind = match obj.get("kind") {
        None | Some(Value::Null) => return Err(ApiError::required("kind")),
        Some(Value::String(s)) => Kind::parse(s).ok_or_else(kind_error)?,
        Some(_) => return Err(kind_error()),
    };
    let target_field = if kind == Kind::Email { "email" } else { "url" };
    reject_unknown(&obj, &["kind", "name", target_field, "events"])?;
    let target = match obj.get(target_field) {
        None | Some(Value::Null) => return Err(ApiError::required(target_field)),
        Some(Value::String(s)) if kind == Kind::Email => parse_email(s)?,
        Some(Value::String(s)) => parse_url(s)?,
        Some(_) if kind == Kind::Email => return Err(ApiError::invalid("email", "invalid", "email must be an e-mail address")),
        Some(_) => return Err(ApiError::invalid("url", "invalid", "url must be an absolute http(s) URL")),
    };
    let name = match obj.get("name") {
        None | Some(Value::Null) => kind.as_str().to_owned(),
        Some(Value::String(s)) if !s.trim().is_empty() && s.chars().count() <= MAX_NAME_LEN => s.trim().to_owned(),
        Some(_) => return Err(ApiError::invalid("name", "invalid", format!("name must be a string of 1 to {MAX_NAME_LEN} characters"))),
    };
    let events = parse_events(obj.get("events"))?;
    if kind != Kind::Email {
        check_destination(&ctx, &target).await?;
    }
    let new = ctx
        .writer
        .apply(move |c| {
            integrations::create(c, &NewIntegration { site: site.seq, kind, name: &name, target: &target, events: &events }, Utc::now())
        })
        .await?;
    Ok(json_reply(StatusCode::CREATED, &view(&new, true)))
}

pub(crate) fn parse_url(s: &str) -> Result<String, ApiError> {
    let invalid = |reason| ApiError::invalid("url", reason, "url must be an absolute http(s) URL of at most 2048 characters");
    if s.len() > MAX_URL_LEN {
        return Err(invalid("too_long"));
    }
    let u = url::Url::parse(s.trim()).map_err(|_| invalid("invalid"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(invalid("invalid"));
    }
    Ok(u.to_string())
}

/// Refuses a URL whose host is, or now resolves to, an address webhooks may
/// not reach (each send checks again, when it connects).
pub(crate) async fn check_destination(ctx: &Ctx, url: &str) -> Result<(), ApiError> {
    let url = url::Url::parse(url).map_err(|_| ApiError::invalid("url", "invalid", "url must be an absolute http(s) URL"))?;
    Destinations::new(&ctx.config.delivery.webhook_allow).check_url(&url).await.map_err(|refused| {
        ApiError::invalid(
            "url",
            "invalid",
            format!("url must reach a public address: {refused}; the operator can allow a range with --webhook-allow-cidr"),
        )
    })
}

pub(crate) fn parse_email(s: &str) -> Result<String, ApiError> {
    let s = s.trim();
    if s.len() > 254 {
        return Err(ApiError::invalid("email", "too_long", "email must be at most 254 characters"));
    }
    s.parse::<lettre::Address>().map_err(|_| ApiError::invalid("email", "invalid", "email must be an e-mail address"))?;
    Ok(s.to_owned())
}

/// The events to receive: a non-empty list from [`EVENTS`]; all of them when absent.
pub(crate) fn parse_events(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let invalid = || ApiError::invalid("events", "invalid", format!("events must be a non-empty list of: {}", EVENTS.join(", ")));
    match v {
        None | Some(Value::Null) => Ok(EVENTS.iter().map(|e| (*e).to_owned()).collect()),
        Some(Value::Array(items)) if !items.is_empty() => {
            let mut out: Vec<String> = Vec::with_capacity(items.len());
            for item in items {
                let e = item.as_str().filter(|e| EVENTS.contains(e)).ok_or_else(invalid)?;
                if !out.iter().any(|o| o == e) {
                    out.push(e.to_owned());
                }
            }
            Ok(out)
        }
        Some(_) => Err(invalid()),
    }
}

async fn load_integration(ctx: &Ctx, site: i64, iid: &str) -> Result<Integration, ApiError> {
    let not_found = || ApiError::not_found("iid", "no integration with this id");
    let iid = Uuid::parse_str(iid).map_err(|_| not_found())?;
    ctx.read(move |c| integrations::get(c, site, iid)).await?.ok_or_else(not_found)
}

/// DELETE /v1/sites/:id/integrations/:iid
pub async fn integrations_delete(id: String, iid: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let site = load_site(&ctx, &p, &id).await?;
    let integration = load_integration(&ctx, site.seq, &iid).await?;
    if integration.deleted_at.is_some() {
        return Err(ApiError::not_found("iid", "no integration with this id"));
    }
    let iid = integration.id;
    ctx.writer.apply(move |c| integrations::delete(c, site.seq, iid, Utc::now())).await?;
    Ok(no_content())
}

/// POST /v1/sites/:id/integrations/:iid/test
///
/// Queues a test message through the outbox like any delivery; the answer
/// carries the delivery id to follow in the deliveries list.
pub async fn integrations_test(id: String, iid: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let site = load_site(&ctx, &p, &id).await?;
    let integration = load_integration(&ctx, site.seq, &iid).await?;
    if integration.deleted_at.is_some() {
        return Err(ApiError::not_found("iid", "no integration with this id"));
    }
    let site_id = site.id;
    let delivery_id = ctx.writer.apply(move |c| delivery::enqueue_test(c, site_id, &integration)).await?;
    Ok(json_reply(StatusCode::CREATED, &json!({ "delivery_id": delivery_id, "state": "pending" })))
}

/// GET /v1/sites/:id/integrations/:iid/deliveries
pub async fn integrations_deliveries(
    id: String,
    iid: String,
    ctx: Ctx,
    p: Result<Principal, ApiError>,
    q: Query,
) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let site = load_site(&ctx, &p, &id).await?;
    let integration = load_integration(&ctx, site.seq, &iid).await?;
    let limit = q.int("limit", 1usize, 500)?.unwrap_or(50);
    let list = ctx.read(move |c| outbox::list(c, site.seq, Some(integration.seq), limit)).await?;
    let detailed = p.key.has_scope(Scope::Write);
    Ok(json_reply(StatusCode::OK, &json!({ "deliveries": list.iter().map(|d| delivery_view(d, detailed)).collect::<Vec<_>>() })))
}

/// GET /v1/sites/:id/deliveries: every channel's deliveries, e-mail included.
pub async fn deliveries_list(id: String, ctx: Ctx, p: Result<Principal, ApiError>, q: Query) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let site = load_site(&ctx, &p, &id).await?;
    let limit = q.int("limit", 1usize, 500)?.unwrap_or(50);
    let list = ctx.read(move |c| outbox::list(c, site.seq, None, limit)).await?;
    let detailed = p.key.has_scope(Scope::Write);
    Ok(json_reply(StatusCode::OK, &json!({ "deliveries": list.iter().map(|d| delivery_view(d, detailed)).collect::<Vec<_>>() })))
}
