//! Operations endpoints: liveness, readiness, Prometheus metrics and the
//! OpenAPI document. None needs a key.

use http::StatusCode;
use serde_json::json;
use warp::reply::Response;
use warp::Reply;

use super::json_reply;
use crate::error::ApiError;
use crate::state::Ctx;

/// The OpenAPI 3.1 description of the whole API.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// GET /healthz
pub async fn healthz() -> Result<Response, ApiError> {
    Ok(json_reply(StatusCode::OK, &json!({ "status": "ok" })))
}

/// GET /readyz: the database answers and the write queue has room.
pub async fn readyz(ctx: Ctx) -> Result<Response, ApiError> {
    ctx.read(|c| Ok(c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))?)).await?;
    if ctx.writer.queue_depth() >= ctx.config.queue_capacity {
        return Err(ApiError::unavailable("the write queue is full"));
    }
    Ok(json_reply(StatusCode::OK, &json!({ "status": "ready" })))
}

/// GET /metrics
pub async fn metrics(ctx: Ctx) -> Result<Response, ApiError> {
    let text = ctx.metrics.render(ctx.writer.queue_depth());
    Ok(warp::reply::with_header(text, "content-type", "text/plain; version=0.0.4").into_response())
}

/// GET /v1/openapi.json
pub async fn openapi() -> Result<Response, ApiError> {
    Ok(warp::reply::with_header(OPENAPI_JSON, "content-type", "application/json").into_response())
}
