//! The /v1 route table, the small filters the handlers share, and the one
//! `recover` that answers what warp itself rejects (unknown path, wrong method).
//!
//! Handlers return `Result<Response, ApiError>` as a value (`Filter::then`);
//! they never reject, so warp never tries another route after a handler ran.

pub(crate) mod analytics;
pub(crate) mod events;
pub(crate) mod export;
pub(crate) mod integrations;
mod keys;
pub(crate) mod methods;
mod ops;
mod reports;
mod sdk;
mod sites;

use std::convert::Infallible;
use std::fmt::Display;
use std::pin::Pin;
use std::str::FromStr;
use std::task::{ready, Poll};

use bytes::{Buf, Bytes};
use futures_util::{Stream, StreamExt};
use http::StatusCode;
use serde::Serialize;
use warp::filters::BoxedFilter;
use warp::reply::Response;
use warp::{Filter, Rejection, Reply};

use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Ctx;

pub use sites::normalize_domain;
pub(crate) use sites::{parse_domain, parse_name, parse_revenue, parse_status, parse_timezone, parse_wall};

/// Body limits: ingestion of one event, a batch, and every other JSON body.
pub const TRACK_BODY_LIMIT: usize = 16 * 1024;
pub const BATCH_BODY_LIMIT: usize = 1024 * 1024;
pub const JSON_BODY_LIMIT: usize = 64 * 1024;

/// Every route of the server.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Response,)> {
    use warp::{delete, get, patch, path, post};
    let dashboard_routes = crate::dashboard::routes(ctx.clone());
    let demo = ctx.config.demo;
    let c = move || with_ctx(ctx.clone());

    let site_routes = path!("v1" / "sites")
        .and(get())
        .and(c())
        .and(principal())
        .then(sites::sites_list)
        .or(path!("v1" / "sites").and(post()).and(c()).and(principal()).and(body(JSON_BODY_LIMIT)).then(sites::sites_create))
        .unify()
        .or(path!("v1" / "sites" / String).and(get()).and(c()).and(principal()).then(sites::sites_get))
        .unify()
        .or(path!("v1" / "sites" / String)
            .and(patch())
            .and(c())
            .and(principal())
            .and(body(JSON_BODY_LIMIT))
            .then(sites::sites_update))
        .unify()
        .or(path!("v1" / "sites" / String).and(delete()).and(c()).and(principal()).then(sites::sites_delete))
        .unify()
        .boxed();

    let analytics_routes = path!("v1" / "analytics" / "sites" / String / "dashboard")
        .and(get())
        .and(c())
        .and(principal())
        .and(query())
        .then(analytics::analytics_dashboard)
        .or(path!("v1" / "analytics" / "sites" / String / "conversions")
            .and(get())
            .and(c())
            .and(principal())
            .and(query())
            .then(analytics::analytics_conversions))
        .unify()
        .or(path!("v1" / "analytics" / "sites" / String / "ab-testing")
            .and(get())
            .and(c())
            .and(principal())
            .and(query())
            .then(analytics::analytics_ab_testing))
        .unify()
        .boxed();

    let export_routes = path!("v1" / "sites" / String / "export")
        .and(get())
        .and(c())
        .and(principal())
        .and(query())
        .then(export::export_get)
        .boxed();

    // Ingestion itself (POST track, batch) is served by the gateway.
    let event_routes = path!("v1" / "events" / "sites" / String)
        .and(get())
        .and(c())
        .and(principal())
        .and(query())
        .then(events::events_list)
        .boxed();

    let key_routes = path!("v1" / "keys")
        .and(get())
        .and(c())
        .and(principal())
        .then(keys::keys_list)
        .or(path!("v1" / "keys").and(post()).and(c()).and(principal()).and(body(JSON_BODY_LIMIT)).then(keys::keys_create))
        .unify()
        .or(path!("v1" / "keys" / String).and(delete()).and(c()).and(principal()).then(keys::keys_revoke))
        .unify()
        .boxed();

    let integration_routes = path!("v1" / "sites" / String / "integrations")
        .and(get())
        .and(c())
        .and(principal())
        .then(integrations::integrations_list)
        .or(path!("v1" / "sites" / String / "integrations")
            .and(post())
            .and(c())
            .and(principal())
            .and(body(JSON_BODY_LIMIT))
            .then(integrations::integrations_create))
        .unify()
        .or(path!("v1" / "sites" / String / "integrations" / String)
            .and(delete())
            .and(c())
            .and(principal())
            .then(integrations::integrations_delete))
        .unify()
        .or(path!("v1" / "sites" / String / "integrations" / String / "test")
            .and(post())
            .and(c())
            .and(principal())
            .then(integrations::integrations_test))
        .unify()
        .or(path!("v1" / "sites" / String / "integrations" / String / "deliveries")
            .and(get())
            .and(c())
            .and(principal())
            .and(query())
            .then(integrations::integrations_deliveries))
        .unify()
        .or(path!("v1" / "sites" / String / "deliveries").and(get()).and(c()).and(principal()).and(query()).then(integrations::deliveries_list))
        .unify()
        .boxed();

    let ops_routes = path!("healthz")
        .and(get())
        .then(ops::healthz)
        .or(path!("readyz").and(get()).and(c()).then(ops::readyz))
        .unify()
        .or(path!("metrics").and(get()).and(c()).then(ops::metrics))
        .unify()
        .or(path!("v1" / "openapi.json").and(get()).then(ops::openapi))
        .unify()
        .or(path!("v1" / "sdk" / "sites" / String / "config").and(get()).and(c()).then(sdk::sdk_site_config))
        .unify()
        .boxed();

    let report_routes = path!("v1" / "sites" / String / "reports")
        .and(get())
        .and(c())
        .and(principal())
        .then(reports::reports_list)
        .or(path!("v1" / "sites" / String / "reports")
            .and(post())
            .and(c())
            .and(principal())
            .and(body(JSON_BODY_LIMIT))
            .then(reports::reports_create))
        .unify()
        .or(path!("v1" / "sites" / String / "reports" / String).and(get()).and(c()).and(principal()).then(reports::reports_get))
        .unify()
        .or(path!("v1" / "sites" / String / "reports" / String)
            .and(patch())
            .and(c())
            .and(principal())
            .and(body(JSON_BODY_LIMIT))
            .then(reports::reports_update))
        .unify()
        .or(path!("v1" / "sites" / String / "reports" / String)
            .and(delete())
            .and(c())
            .and(principal())
            .then(reports::reports_delete))
        .unify()
        .or(path!("v1" / "sites" / String / "reports" / String / "send")
            .and(post())
            .and(c())
            .and(principal())
            .then(reports::reports_send))
        .unify()
        .or(path!("v1" / "sites" / String / "reports" / String / "runs")
            .and(get())
            .and(c())
            .and(principal())
            .and(query())
            .then(reports::reports_runs))
        .unify()
        .or(path!("v1" / "report-runs" / String).and(get()).and(c()).and(principal()).and(query()).then(reports::report_runs_get))
        .unify()
        .boxed();

    // The path is matched before the method, so an unknown path is a 404
    // whatever its method, never a 405.
    let asset_routes = warp::path::full()
        .and_then(move |p: warp::path::FullPath| async move {
            if crate::assets::handles(p.as_str(), demo) {
                Ok(p)
            } else {
                Err(warp::reject::not_found())
            }
        })
        .and(warp::get())
        .and(query())
        .and(c())
        .then(crate::assets::assets_get)
        .boxed();

    site_routes
        .or(event_routes)
        .unify()
        .or(report_routes)
        .unify()
        .or(analytics_routes)
        .unify()
        .or(export_routes)
        .unify()
        .or(key_routes)
        .unify()
        .or(integration_routes)
        .unify()
        .or(ops_routes)
        .unify()
        .or(dashboard_routes)
        .unify()
        .or(asset_routes)
        .unify()
        .map(|r: Result<Response, ApiError>| r.unwrap_or_else(ApiError::into_response))
        .recover(recover)
        .unify()
        .boxed()
}

fn with_ctx(ctx: Ctx) -> impl Filter<Extract = (Ctx,), Error = Infallible> + Clone {
    warp::any().map(move || ctx.clone())
}

/// The API key the gateway authenticated. Every API path has one; a missing
/// one can only mean a route outside the gateway's API class, so it is a 401.
fn principal() -> impl Filter<Extract = (Result<Principal, ApiError>,), Error = Infallible> + Clone {
    warp::ext::optional::<Principal>()
        .map(|p: Option<Principal>| p.ok_or_else(|| ApiError::unauthenticated("required", "an API key is required")))
}

/// The request body, refused with 413 past `limit` bytes (checked against
/// Content-Length first, then while reading a chunked body).
pub(crate) fn body(limit: usize) -> impl Filter<Extract = (Result<Bytes, ApiError>,), Error = Rejection> + Clone {
    warp::header::optional::<String>("content-length")
        .or(warp::any().map(|| None))
        .unify()
        .and(warp::body::stream())
        .then(move |len: Option<String>, stream| async move { read_limited(len.as_deref(), stream, limit).await })
}

/// A request body read as the `body` filter reads it, for the routes the
/// gateway serves itself.
pub(crate) async fn read_body<B>(content_length: Option<&str>, mut body: B, limit: usize) -> Result<Bytes, ApiError>
where
    B: http_body::Body + Unpin,
    B::Error: Display,
{
    // The data frames; trailers are skipped.
    let chunks = futures_util::stream::poll_fn(move |cx| loop {
        match ready!(Pin::new(&mut body).poll_frame(cx)) {
            None => return Poll::Ready(None),
            Some(Err(e)) => return Poll::Ready(Some(Err(e))),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Poll::Ready(Some(Ok(data)));
                }
            }
        }
    });
    read_limited(content_length, chunks, limit).await
}

/// An oversized body up to this size is read and discarded before the 413 is
/// sent, so the client (still uploading) sees the answer instead of a reset
/// connection. Larger ones are refused at once.
const DRAIN_LIMIT: u64 = 8 * 1024 * 1024;

async fn read_limited<S, B, E>(len: Option<&str>, stream: S, limit: usize) -> Result<Bytes, ApiError>
where
    S: Stream<Item = Result<B, E>>,
    B: Buf,
    E: Display,
{
    let declared = len
        .map(|l| l.trim().parse::<u64>().map_err(|_| ApiError::invalid("Content-Length", "invalid", "invalid Content-Length")))
        .transpose()?;
    let mut stream = Box::pin(stream);
    if declared.is_some_and(|l| l > DRAIN_LIMIT) {
        return Err(ApiError::payload_too_large(limit));
    }
    let mut out = Vec::new();
    let mut seen: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid("body", "invalid", format!("the body could not be read: {e}")))?;
        seen += chunk.remaining() as u64;
        if seen > DRAIN_LIMIT {
            break;
        }
        if seen <= limit as u64 && declared.is_none_or(|l| l <= limit as u64) {
            out.extend_from_slice(chunk.chunk());
        }
    }
    if seen > limit as u64 || declared.is_some_and(|l| l > limit as u64) {
        return Err(ApiError::payload_too_large(limit));
    }
    Ok(out.into())
}

/// The raw query string's pairs, in order (a parameter may repeat).
pub(crate) fn query() -> impl Filter<Extract = (Query,), Error = Infallible> + Clone {
    warp::query::raw()
        .or(warp::any().map(String::new))
        .unify()
        .map(|raw: String| Query::parse(&raw))
}

#[derive(Debug, Clone, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// The pairs of a raw (still percent-encoded) query string.
    pub fn parse(raw: &str) -> Query {
        Query(url::form_urlencoded::parse(raw.as_bytes()).into_owned().collect())
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Every value of a parameter that may repeat, in order.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.0.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// An integer parameter within `min..=max`, or `None` when absent.
    pub fn int<T>(&self, name: &str, min: T, max: T) -> Result<Option<T>, ApiError>
    where
        T: FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        let Some(raw) = self.get(name) else { return Ok(None) };
        let v: T = raw
            .trim()
            .parse()
            .map_err(|_| ApiError::invalid(name, "invalid", format!("{name} must be a whole number")))?;
        if v < min || v > max {
            return Err(ApiError::invalid(name, "out_of_range", format!("{name} must be between {min} and {max}")));
        }
        Ok(Some(v))
    }
}

/// Parses a JSON object body; malformed JSON is a 400 on field `body`.
pub fn json_object(bytes: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, ApiError> {
    match parse_json::<serde_json::Value>(bytes)? {
        serde_json::Value::Object(m) => Ok(m),
        _ => Err(ApiError::invalid("body", "invalid", "the body must be a JSON object")),
    }
}

/// Parses a JSON body into `T`: an empty body and malformed JSON are 400s on field `body`.
pub fn parse_json<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid("body", "required", "a JSON body is required"));
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::invalid("body", "invalid", format!("malformed JSON: {e}")))
}

/// Refuses fields a body may not carry.
pub fn reject_unknown(obj: &serde_json::Map<String, serde_json::Value>, known: &[&str]) -> Result<(), ApiError> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(ApiError::invalid(k.clone(), "unknown_field", format!("unknown field {k}"))),
        None => Ok(()),
    }
}

pub fn json_reply<T: Serialize>(status: StatusCode, value: &T) -> Response {
    warp::reply::with_status(warp::reply::json(value), status).into_response()
}

pub fn no_content() -> Response {
    warp::reply::with_status(warp::reply(), StatusCode::NO_CONTENT).into_response()
}

async fn recover(rejection: Rejection) -> Result<Response, Infallible> {
    let err = if rejection.is_not_found() {
        ApiError::no_route("this path")
    } else if rejection.find::<warp::reject::MethodNotAllowed>().is_some() {
        ApiError::method_not_allowed()
    } else if let Some(e) = rejection.find::<warp::reject::InvalidHeader>() {
        ApiError::invalid(e.name().to_owned(), "invalid", e.to_string())
    } else if rejection.find::<warp::reject::InvalidQuery>().is_some() {
        ApiError::invalid("query", "invalid", "the query string is malformed")
    } else {
        ApiError::internal(format!("unhandled rejection: {rejection:?}"))
    };
    Ok(err.into_response())
}
