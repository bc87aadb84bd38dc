//! `ApiError`: every error the API answers, and the only place that knows the
//! spec's error body `{"error": {"code", "message", "details": {"field", "reason"}}}`.

use http::StatusCode;
use serde_json::json;
use warp::reply::Response;

#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    pub reason: &'static str,
    /// Seconds, for 429 and 503 answers.
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), field: None, reason, retry_after: None }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> ApiError {
        self.field = Some(field.into());
        self
    }

    /// 400 INVALID_REQUEST about one field.
    pub fn invalid(field: impl Into<String>, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", reason, message).with_field(field)
    }

    pub fn required(field: &str) -> ApiError {
        ApiError::invalid(field, "required", format!("{field} is required"))
    }

    pub fn unauthenticated(reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", reason, message).with_field("Authorization")
    }

    pub fn forbidden(field: Option<&str>, reason: &'static str, message: impl Into<String>) -> ApiError {
        let e = ApiError::new(StatusCode::FORBIDDEN, "FORBIDDEN", reason, message);
        match field {
            Some(f) => e.with_field(f),
            None => e,
        }
    }

    pub fn not_found(field: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "not_found", message).with_field(field)
    }

    pub fn no_route(path: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "not_found", format!("no endpoint at {path}"))
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "INVALID_REQUEST", "method_not_allowed", "method not allowed on this path")
            .with_field("method")
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "CONFLICT", "conflict", message)
    }

    pub fn payload_too_large(limit: usize) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE", "too_long", format!("the body is larger than {limit} bytes"))
            .with_field("body")
    }

    pub fn rate_limited(retry_after: u64) -> ApiError {
        let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED", "rate_limited", "rate limit exceeded, retry later");
        e.retry_after = Some(retry_after);
        e
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", "overloaded", message);
        e.retry_after = Some(1);
        e
    }

    /// 503 from `/readyz`: the collector runs but should not be sent traffic;
    /// `reason` says why (`disk_low`, `task_down`).
    pub fn not_ready(reason: &'static str, message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", reason, message);
        e.retry_after = Some(1);
        e
    }

    /// 503 for a part this binary was built without (the browser SDK).
    pub fn not_built(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", "not_built", message)
    }

    /// An unexpected failure: logged in full, answered with a generic body.
    pub fn internal(err: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %err, "internal error");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", "internal", "internal error")
    }

    pub fn body(&self) -> serde_json::Value {
        let mut details = json!({ "reason": self.reason });
        if let Some(field) = &self.field {
            details["field"] = json!(field);
        }
        json!({ "error": { "code": self.code, "message": self.message, "details": details } })
    }

    pub fn into_response(self) -> Response {
        let mut res = warp::reply::with_status(warp::reply::json(&self.body()), self.status).into_response();
        if let Some(secs) = self.retry_after {
            res.headers_mut().insert(http::header::RETRY_AFTER, secs.into());
        }
        res
    }
}

impl From<analytics::Error> for ApiError {
    fn from(e: analytics::Error) -> ApiError {
        match e {
            analytics::Error::NotFound(what) => ApiError::not_found("id", format!("{what} not found")),
            analytics::Error::Conflict(msg) => ApiError::conflict(msg),
            // The database is down, unreachable or out of room: the request was fine, retry.
            other if other.is_storage_failure() => {
                tracing::error!(error = %other, "the database failed");
                ApiError::unavailable("the database is unavailable, retry shortly")
            }
            other => ApiError::internal(other),
        }
    }
}

use warp::Reply as _;
