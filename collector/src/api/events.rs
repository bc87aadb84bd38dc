//! Events: ingestion (track, its neutral alias `/v1/e`, batch) and the list of
//! a site's raw events.
//!
//! Ingestion is nearly all the traffic: the gateway serves it itself
//! ([`ingest_route`], [`ingest`]) instead of handing it to warp, whose filter
//! chain, body stream and request extensions cost about a fifth of the
//! instructions an event took on the HTTP threads (BENCHMARKS.md).

use std::collections::HashMap;
use std::fmt::Display;

use analytics::model::{iso, EventType, Scope};
use analytics::query;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};
use warp::reply::Response;

use super::sites::load_site;
use super::{json_reply, read_body, Query, BATCH_BODY_LIMIT, TRACK_BODY_LIMIT};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::ingest::{self, validate, RequestInfo, SiteCache};
use crate::state::Ctx;

/// The answer to a tracked event, `{"id":…,"received_at":…}` plus
/// `"duplicate":true` for a retry, written out directly: it answers nearly
/// every request, and building a `Value` to serialize took several times the
/// instructions.
fn ack_reply(ack: &analytics::model::Ack) -> Response {
    let mut body = String::with_capacity(96);
    body.push_str("{\"id\":\"");
    body.push_str(ack.id.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()));
    body.push_str("\",\"received_at\":\"");
    body.push_str(&iso(ack.received_at));
    body.push('"');
    if ack.duplicate {
        body.push_str(",\"duplicate\":true");
    }
    body.push('}');
    let mut res = Response::new(body.into());
    *res.status_mut() = StatusCode::CREATED;
    res.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    res
}

/// The ingestion endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestRoute {
    /// POST /v1/events/track, and its alias POST /v1/e
    Track,
    /// POST /v1/events/batch
    Batch,
}

/// The ingestion endpoint a path leads to, if any. A trailing slash is
/// allowed, as warp allows it on every other route.
pub fn ingest_route(path: &str) -> Option<IngestRoute> {
    match path.strip_suffix('/').unwrap_or(path) {
        "/v1/events/track" | "/v1/e" => Some(IngestRoute::Track),
        "/v1/events/batch" => Some(IngestRoute::Batch),
        _ => None,
    }
}

/// Serves an ingestion request whose key (if any) the gateway checked.
pub async fn ingest<B>(
    ctx: Ctx,
    route: IngestRoute,
    method: &Method,
    p: Option<Principal>,
    info: &RequestInfo,
    content_length: Option<&str>,
    body: B,
) -> Response
where
    B: http_body::Body + Unpin,
    B::Error: Display,
{
    let outcome = match route {
        _ if method != Method::POST => Err(ApiError::method_not_allowed()),
        IngestRoute::Track => events_track(ctx, p, info, read_body(content_length, body, TRACK_BODY_LIMIT).await).await,
        IngestRoute::Batch => events_batch(ctx, p, info, read_body(content_length, body, BATCH_BODY_LIMIT).await).await,
    };
    outcome.unwrap_or_else(|e| e.into_response())
}

/// POST /v1/events/track (and its alias POST /v1/e)
async fn events_track(ctx: Ctx, p: Option<Principal>, info: &RequestInfo, body: Result<Bytes, ApiError>) -> Result<Response, ApiError> {
    let input = validate::parse_track(&body?)?;
    let site = input.site_id;
    let event = ingest::prepare(&ctx, p.as_ref(), info, &mut SiteCache::default(), input).await?;
    ingest::charge_sites(&ctx, &HashMap::from([(site, 1)]), info.received_at.timestamp()).await?;
    let ack = ctx.writer.track(event).await?;
    Ok(ack_reply(&ack))
}

/// POST /v1/events/batch
///
/// Each event is validated on its own; the accepted ones are stored in one
/// write, and the answer lists every event's outcome in order (201 when at
/// least one was stored, else 200).
async fn events_batch(ctx: Ctx, p: Option<Principal>, info: &RequestInfo, body: Result<Bytes, ApiError>) -> Result<Response, ApiError> {
    // A key that may not ingest is refused as a whole, not item by item (the
    // gateway refuses a batch without a key).
    let Some(key) = &p else {
        return Err(ApiError::unauthenticated("required", "POST /v1/events/batch needs an API key with the ingest scope"));
    };
    key.require(analytics::model::Scope::Ingest)?;
    let items = validate::parse_batch(&body?)?;
    let n_items = items.len();
    let budget = ingest::charge_batch(&ctx, p.as_ref(), info, n_items).await?;
    let mut per_site: HashMap<uuid::Uuid, u32> = HashMap::new();
    let mut cache = SiteCache::default();
    let mut results: Vec<Value> = Vec::with_capacity(items.len());
    let mut accepted = Vec::new();
    let mut accepted_at = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let outcome = match item {
            Ok(input) => {
                let site = input.site_id;
                ingest::prepare(&ctx, p.as_ref(), info, &mut cache, input).await.map(|e| (site, e))
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok((site, event)) => {
                *per_site.entry(site).or_default() += 1;
                accepted_at.push(results.len());
                accepted.push(event);
                results.push(json!({ "index": index }));
            }
            Err(e) => {
                if e.status.is_server_error() {
                    return Err(e);
                }
                let mut error = e.body();
                error["error"]["status"] = json!(e.status.as_u16());
                results.push(json!({ "index": index, "error": error["error"] }));
            }
        }
    }
    let n_accepted = accepted.len();
    ingest::charge_sites(&ctx, &per_site, info.received_at.timestamp()).await?;
    if !accepted.is_empty() {
        let acks = ctx.writer.ingest(accepted).await?;
        for (slot, ack) in accepted_at.into_iter().zip(acks) {
            let r = &mut results[slot];
            r["id"] = json!(ack.id);
            if ack.duplicate {
                r["duplicate"] = json!(true);
            }
        }
    }
    let out = json!({ "accepted": n_accepted, "rejected": n_items - n_accepted, "results": results });
    // 201 only when something was stored; a batch whose every item was
    // refused created nothing, and its results say why.
    let status = if n_accepted == 0 { StatusCode::OK } else { StatusCode::CREATED };
    let mut res = json_reply(status, &out);
    if let Some(d) = budget {
        d.write_headers(res.headers_mut());
    }
    Ok(res)
}

/// GET /v1/events/sites/:id
pub async fn events_list(id: String, ctx: Ctx, p: Result<Principal, ApiError>, q: Query) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let event_type = q
        .get("event_type")
        .map(|t| EventType::parse(t).ok_or_else(|| ApiError::invalid("event_type", "invalid", format!("unknown event_type {t:?}"))))
        .transpose()?;
    let limit = q.int("limit", 1u32, 1000)?.unwrap_or(50);
    let offset = q.int("offset", 0u64, i64::MAX as u64)?.unwrap_or(0);
    let site = load_site(&ctx, &p, &id).await?;
    let (events, total) = ctx.read(move |c| query::events(c, &site, event_type, limit, offset)).await?;
    Ok(json_reply(StatusCode::OK, &json!({ "events": events, "total": total, "limit": limit, "offset": offset })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[tokio::test]
    async fn the_ack_is_the_json_a_value_would_give() {
        let received_at = chrono::DateTime::parse_from_rfc3339("2026-11-25T20:18:14.171Z").unwrap().with_timezone(&Utc);
        for duplicate in [false, true] {
            let ack = analytics::model::Ack { id: uuid::Uuid::now_v7(), received_at, duplicate };
            let res = ack_reply(&ack);
            assert_eq!(res.status(), StatusCode::CREATED);
            assert_eq!(res.headers()[http::header::CONTENT_TYPE], "application/json");
            let body = read_body(None, res.into_body(), 1024).await.unwrap();
            let mut expected = json!({ "id": ack.id, "received_at": iso(ack.received_at) });
            if duplicate {
                expected["duplicate"] = json!(true);
            }
            assert_eq!(body, expected.to_string().as_bytes());
        }
    }
}
