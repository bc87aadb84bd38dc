//! Events: ingestion (track, its neutral alias `/v1/e`, batch) and the list of
//! a site's raw events.

use std::sync::Arc;

use analytics::model::{iso, EventType, Scope};
use analytics::query;
use bytes::Bytes;
use chrono::Utc;
use http::StatusCode;
use serde_json::{json, Value};
use warp::reply::Response;

use super::sites::load_site;
use super::{json_reply, Query};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::ingest::{self, validate, RequestInfo, SiteCache};
use crate::state::Ctx;

fn ack_json(ack: &analytics::model::Ack) -> Value {
    let mut v = json!({ "id": ack.id, "received_at": iso(ack.received_at) });
    if ack.duplicate {
        v["duplicate"] = json!(true);
    }
    v
}

/// POST /v1/events/track (and its alias POST /v1/e)
pub async fn events_track(
    ctx: Ctx,
    p: Option<Principal>,
    info: Arc<RequestInfo>,
    body: Result<Bytes, ApiError>,
) -> Result<Response, ApiError> {
    let input = validate::parse_track(&body?)?;
    let event = ingest::prepare(&ctx, p.as_ref(), &info, Utc::now(), &mut SiteCache::default(), input).await?;
    let ack = ctx.writer.ingest(vec![event]).await?.remove(0);
    Ok(json_reply(StatusCode::CREATED, &ack_json(&ack)))
}

/// POST /v1/events/batch
///
/// Each event is validated on its own; the accepted ones are stored in one
/// write, and the answer lists every event's outcome in order.
pub async fn events_batch(
    ctx: Ctx,
    p: Option<Principal>,
    info: Arc<RequestInfo>,
    body: Result<Bytes, ApiError>,
) -> Result<Response, ApiError> {
    // A key that may not ingest is refused as a whole, not item by item.
    if let Some(p) = &p {
        p.require(analytics::model::Scope::Ingest)?;
    }
    let items = validate::parse_batch(&body?)?;
    let n_items = items.len();
    let received_at = Utc::now();
    let mut cache = SiteCache::default();
    let mut results: Vec<Value> = Vec::with_capacity(items.len());
    let mut accepted = Vec::new();
    let mut accepted_at = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let outcome = match item {
            Ok(input) => ingest::prepare(&ctx, p.as_ref(), &info, received_at, &mut cache, input).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(event) => {
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
    Ok(json_reply(StatusCode::CREATED, &out))
}

/// GET /v1/events/sites/:id
pub async fn events_list(id: String, ctx: Ctx, p: Result<Principal, ApiError>, q: Query) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let event_type = q
        .get("event_type")
        .filter(|t| !t.is_empty())
        .map(|t| EventType::parse(t).ok_or_else(|| ApiError::invalid("event_type", "invalid", format!("unknown event_type {t}"))))
        .transpose()?;
    let limit = q.int("limit", 1u32, 1000)?.unwrap_or(50);
    let offset = q.int("offset", 0u64, i64::MAX as u64)?.unwrap_or(0);
    let site = load_site(&ctx, &p, &id).await?;
    let (events, total) = ctx.read(move |c| query::events(c, &site, event_type, limit, offset)).await?;
    Ok(json_reply(StatusCode::OK, &json!({ "events": events, "total": total, "limit": limit, "offset": offset })))
}
