//! Operations endpoints: liveness, readiness, Prometheus metrics and the
//! OpenAPI document. None needs a key.

use std::fmt::Write as _;

use http::StatusCode;
use serde_json::json;
use warp::reply::Response;
use warp::Reply;

use super::json_reply;
use crate::error::ApiError;
use crate::state::Ctx;
use crate::storage;

/// The OpenAPI 3.1 description of the whole API.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// GET /healthz
pub async fn healthz() -> Result<Response, ApiError> {
    Ok(json_reply(StatusCode::OK, &json!({ "status": "ok" })))
}

/// GET /readyz: the database answers, the write queue has room, the
/// database's file system has the free space asked for, and no background
/// task is dead or stuck.
pub async fn readyz(ctx: Ctx) -> Result<Response, ApiError> {
    ctx.read(|c| Ok(c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))?)).await?;
    if ctx.writer.queue_depth() >= ctx.config.queue_capacity {
        return Err(ApiError::unavailable("the write queue is full"));
    }
    let min_free = ctx.config.min_free_disk_bytes;
    if let (true, Some(db)) = (min_free > 0, ctx.store.sqlite_path()) {
        let free = storage::free_bytes(db).map_err(ApiError::internal)?;
        if free < min_free {
            return Err(ApiError::not_ready(
                "disk_low",
                format!("the database's file system has {} MiB free, less than the {} MiB required", free >> 20, min_free >> 20),
            ));
        }
    }
    let troubles = ctx.tasks.troubles();
    if !troubles.is_empty() {
        return Err(ApiError::not_ready("task_down", format!("background work is down: {}", troubles.join("; "))));
    }
    Ok(json_reply(StatusCode::OK, &json!({ "status": "ready" })))
}

/// GET /metrics
pub async fn metrics(ctx: Ctx) -> Result<Response, ApiError> {
    let mut text = ctx.metrics.render(ctx.writer.queue_depth());
    match ctx.store.sqlite_path().map(storage::free_bytes).transpose() {
        Ok(None) => {}
        Ok(Some(free)) => {
            let _ = write!(
                text,
                "# HELP postern_disk_free_bytes Free bytes on the database's file system.\n# TYPE postern_disk_free_bytes gauge\npostern_disk_free_bytes {free}\n"
            );
        }
        Err(e) => tracing::warn!(error = %e, "cannot read the database's free space"),
    }
    let _ = write!(
        text,
        "# HELP postern_rate_limit_windows Rate-limit windows kept in memory.\n# TYPE postern_rate_limit_windows gauge\npostern_rate_limit_windows {}\n\
         # HELP postern_rate_limit_evicted_total Rate-limit windows dropped early because the table was full.\n# TYPE postern_rate_limit_evicted_total counter\npostern_rate_limit_evicted_total {}\n",
        ctx.limiter.windows(),
        ctx.limiter.evicted(),
    );
    ctx.tasks.render_metrics(&mut text);
    Ok(warp::reply::with_header(text, "content-type", "text/plain; version=0.0.4").into_response())
}

/// GET /v1/openapi.json
pub async fn openapi() -> Result<Response, ApiError> {
    Ok(warp::reply::with_header(OPENAPI_JSON, "content-type", "application/json").into_response())
}
