//! The front door every request passes: it classifies the path, authenticates
//! API keys, applies the rate limits, answers CORS for the ingestion paths,
//! hands the request to the warp routes, then stamps the rate-limit headers
//! on whatever comes back and logs one line (accepted events at debug level).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Instant;

use analytics::accounts::hash_secret;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use warp::filters::BoxedFilter;
use warp::reply::Response;
use warp::Reply;

use crate::api::events;
use crate::auth::{self, Origin, Principal};
use crate::error::ApiError;
use crate::ingest::RequestInfo;
use crate::rate_limit::{client_network, Bucket, Decision};
use crate::state::Ctx;

/// A wall preview's limit per draft token, as a multiple of `--rate-limit-api`:
/// generous (a draft lives until the next edit), yet not an open door.
const PREVIEW_LIMIT_FACTOR: u32 = 10;

/// How a path is guarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Event ingestion: limited per address (and per key), CORS for site origins.
    Ingest,
    /// The key-protected API.
    Api,
    /// Paths anyone may read (OpenAPI document): limited per address.
    Public,
    /// What every page showing the wall loads (the SDK's files, the bait
    /// script, the site config) and the demo: their own, larger budget per address.
    PublicFiles,
    /// Health and metrics: never limited, so monitoring keeps working under load.
    Ops,
    /// The web dashboard: no API key, a session cookie checked by its pages;
    /// limited per session (per address before signing in).
    Dashboard,
}

pub fn classify(path: &str) -> Class {
    match path {
        "/v1/events/track" | "/v1/events/batch" | "/v1/e" => Class::Ingest,
        "/healthz" | "/readyz" | "/metrics" => Class::Ops,
        "/v1/openapi.json" => Class::Public,
        p if crate::assets::sdk_path(p) || p == "/demo" || p.starts_with("/demo/") => Class::PublicFiles,
        p if p.strip_prefix("/v1/sdk/sites/").and_then(|r| r.strip_suffix("/config")).is_some_and(|id| !id.contains('/')) => {
            Class::PublicFiles
        }
        p if p == "/dashboard" || p.starts_with("/dashboard/") => Class::Dashboard,
        p if p.starts_with("/v1/sdk/") => Class::Public,
        p if p == "/v1" || p.starts_with("/v1/") => Class::Api,
        _ => Class::Public,
    }
}

/// The client address the gateway worked out, handed to the routes (rate
/// limits, login throttling and country lookup use it; it is never stored).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub IpAddr);

/// The client address: the socket peer, or the last entry of the trusted
/// proxy's header when one is configured.
fn client_ip(headers: &HeaderMap, header: Option<&str>, peer: SocketAddr) -> IpAddr {
    header
        .and_then(|h| headers.get(h))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(',').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| peer.ip())
}

pub type Routes = BoxedFilter<(Response,)>;

pub async fn handle<B>(ctx: Ctx, routes: Routes, peer: SocketAddr, mut req: Request<B>) -> Response
where
    B: http_body::Body + Send + Sync + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
{
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let class = classify(&path);
    let ip = client_ip(req.headers(), ctx.config.client_ip_header.as_deref(), peer);
    let https = ctx.config.https(req.headers());
    // One clock read: the rate limits' second, and ingested events' arrival.
    let arrived = chrono::Utc::now();
    let now = arrived.timestamp();
    // The Origin of an event is read once: for the CORS answer here, and for
    // the site check in `ingest::prepare`.
    let (origin, cors) = match class {
        Class::Ingest => {
            let origin = Origin::read(req.headers());
            let cors = cors_origin(&ctx, &origin, req.headers()).await;
            (Some(origin), cors)
        }
        _ => (None, None),
    };

    let counter = match class {
        Class::Ingest => &ctx.metrics.requests_ingest,
        Class::Api => &ctx.metrics.requests_api,
        Class::Public | Class::PublicFiles | Class::Ops | Class::Dashboard => &ctx.metrics.requests_other,
    };
    counter.fetch_add(1, Ordering::Relaxed);

    let (decision, mut res) = match admit(&ctx, class, &method, &path, req.headers(), ip, now).await {
        Admission::Refuse(decision, err) => (decision, err.into_response()),
        Admission::Preflight(decision) => (decision, preflight(cors.is_some())),
        Admission::Pass(decision, principal) => match events::ingest_route(&path) {
            // Ingestion, nearly all the traffic, is served here rather than by warp.
            Some(route) => {
                let origin = origin.unwrap_or_else(|| Origin::read(req.headers()));
                let info = RequestInfo::new(&ctx, req.headers(), Some(ip), origin, arrived);
                let (parts, body) = req.into_parts();
                let length = parts.headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok());
                (decision, events::ingest(ctx.clone(), route, &method, principal, &info, length, body).await)
            }
            None => {
                if let Some(p) = principal {
                    req.extensions_mut().insert(p);
                }
                req.extensions_mut().insert(ClientAddr(ip));
                // HEAD is answered wherever GET is; hyper leaves the body out.
                if req.method() == Method::HEAD {
                    *req.method_mut() = Method::GET;
                }
                let res = crate::compression::serve(warp::service(routes), req).await;
                (decision, res)
            }
        },
    };

    if res.status() == StatusCode::METHOD_NOT_ALLOWED {
        if let Some(allow) = crate::api::methods::allowed(&path) {
            res.headers_mut().insert(http::header::ALLOW, HeaderValue::from_static(allow));
        }
    }
    // A batch's answer already tells what its events left of the budget.
    if let Some(d) = decision.filter(|_| !res.headers().contains_key("x-ratelimit-remaining")) {
        d.write_headers(res.headers_mut());
    }
    if let Some(origin) = cors {
        write_cors(res.headers_mut(), origin);
    }
    write_security_headers(res.headers_mut(), https);
    let status = res.status();
    if status == StatusCode::TOO_MANY_REQUESTS {
        ctx.metrics.rate_limited.fetch_add(1, Ordering::Relaxed);
    }
    ctx.metrics.record_status(status.as_u16());
    macro_rules! access_log {
        ($level:ident) => {
            tracing::$level!(
                target: "postern::http",
                %method,
                path = %logged_path(&path),
                status = status.as_u16(),
                latency_ms = started.elapsed().as_secs_f64() * 1000.0,
                client = crate::telemetry::client_addr(ip),
            )
        };
    }
    // Accepted events are the bulk of the traffic (thousands a second on a
    // busy site): their lines are debug, `/metrics` counts them. Every other
    // request, and every refused event, is logged at info.
    if class == Class::Ingest && status.is_success() {
        access_log!(debug);
    } else {
        access_log!(info);
    }
    res
}

/// The path as the access log shows it: a wall preview's token opens its
/// draft to whoever holds it, so it is left out.
fn logged_path(path: &str) -> std::borrow::Cow<'_, str> {
    match crate::dashboard::preview_token(path) {
        Some((_, token)) => path.replacen(token, "<token>", 1).into(),
        None => path.into(),
    }
}

enum Admission {
    /// Route the request (with the authenticated key, if any).
    Pass(Option<Decision>, Option<Principal>),
    /// Answer with this error.
    Refuse(Option<Decision>, ApiError),
    /// Answer a CORS preflight without routing.
    Preflight(Option<Decision>),
}

/// What to do with a request; a database that the shared rate windows cannot
/// reach refuses it (503).
async fn admit(ctx: &Ctx, class: Class, method: &Method, path: &str, headers: &HeaderMap, ip: IpAddr, now: i64) -> Admission {
    admit_or_fail(ctx, class, method, path, headers, ip, now).await.unwrap_or_else(|e| Admission::Refuse(None, e))
}

async fn admit_or_fail(ctx: &Ctx, class: Class, method: &Method, path: &str, headers: &HeaderMap, ip: IpAddr, now: i64) -> Result<Admission, ApiError> {
    let limits = (ctx.config.rate_limit_ingest, ctx.config.rate_limit_api);
    let limiter = &ctx.limiter;
    let net = client_network(ip);
    Ok(match class {
        Class::Ops => Admission::Pass(None, None),
        Class::Dashboard => {
            // A wall preview (its page, and the SDK's cookie-less requests to
            // its sandbox) counts against its live draft token: each load
            // makes about four requests, and editing reloads it often.
            let preview = match crate::dashboard::preview_token(path) {
                Some((site, token)) => crate::dashboard::live_draft(ctx, site, token).await?.then_some(token),
                None => None,
            };
            let (bucket, limit) = match preview {
                Some(token) => (Bucket::Preview(hash_secret(token)), limits.1.saturating_mul(PREVIEW_LIMIT_FACTOR)),
                None => match live_session(ctx, headers).await {
                    Some(session) => (Bucket::Session(session), limits.1),
                    None => (Bucket::Public(net), limits.1),
                },
            };
            let d = limiter.check(bucket, limit, now).await?;
            refuse_if_over(d, now).unwrap_or(Admission::Pass(d, None))
        }
        Class::Public => {
            let d = limiter.check(Bucket::Public(net), limits.1, now).await?;
            refuse_if_over(d, now).unwrap_or(Admission::Pass(d, None))
        }
        Class::PublicFiles => {
            let d = limiter.check(Bucket::PublicFiles(net), ctx.config.rate_limit_public_files, now).await?;
            // The SDK's files and probe answers carry the headers only when
            // refused: no script reads them there, and every visitor would
            // download them (85 B an answer). The site config is an API endpoint.
            let shown = d.filter(|_| !crate::assets::sdk_path(path));
            refuse_if_over(d, now).unwrap_or(Admission::Pass(shown, None))
        }
        Class::Ingest => {
            let d = limiter.check(Bucket::IngestAddress(net), limits.0, now).await?;
            let token = match auth::bearer_token(headers) {
                Ok(t) => t,
                Err(e) => return failed_auth(ctx, net, now, e).await,
            };
            if let Some(refusal) = refuse_if_over(d, now) {
                return Ok(refusal);
            }
            if method == Method::OPTIONS {
                return Ok(Admission::Preflight(d));
            }
            let Some(token) = token else {
                return match keyless_refusal(path, headers) {
                    Some(e) => failed_auth(ctx, net, now, e).await,
                    None => Ok(Admission::Pass(d, None)),
                };
            };
            match auth::authenticate(ctx, token).await {
                Ok(p) => {
                    // Only a verified key gets a bucket: made-up tokens cannot grow the table.
                    let per_key = limiter.check(Bucket::IngestKey(p.key.id), limits.0, now).await?;
                    let d = match (d, per_key) {
                        (Some(a), Some(b)) => Some(a.stricter(b)),
                        (a, b) => a.or(b),
                    };
                    refuse_if_over(d, now).unwrap_or(Admission::Pass(d, Some(p)))
                }
                Err(e) => return failed_auth(ctx, net, now, e).await,
            }
        }
        Class::Api => {
            let token = match auth::bearer_token(headers) {
                Ok(Some(t)) => t,
                Ok(None) => {
                    let e = ApiError::unauthenticated("required", "an API key is required: Authorization: Bearer <API key>");
                    return failed_auth(ctx, net, now, e).await;
                }
                Err(e) => return failed_auth(ctx, net, now, e).await,
            };
            match auth::authenticate(ctx, token).await {
                Ok(p) => {
                    let d = limiter.check(Bucket::Key(p.key.id), limits.1, now).await?;
                    refuse_if_over(d, now).unwrap_or(Admission::Pass(d, Some(p)))
                }
                Err(e) => return failed_auth(ctx, net, now, e).await,
            }
        }
    })
}

/// Why an ingestion request without a key is refused before its body is
/// read: a batch is for servers, which hold keys; and `Origin: null` (a
/// sandboxed frame, a `file:` page, or a forger) names no site at all, so its
/// page URL, which anyone can write, must not speak for it.
fn keyless_refusal(path: &str, headers: &HeaderMap) -> Option<ApiError> {
    if events::ingest_route(path) == Some(events::IngestRoute::Batch) {
        return Some(ApiError::unauthenticated("required", "POST /v1/events/batch needs an API key with the ingest scope: Authorization: Bearer <API key>"));
    }
    if headers.get(http::header::ORIGIN).is_some_and(|o| o.as_bytes().eq_ignore_ascii_case(b"null")) {
        return Some(ApiError::unauthenticated("origin_null", "events from an opaque origin (Origin: null) need an API key with the ingest scope"));
    }
    None
}

/// The hash of the session cookie's token when it names a live session: only
/// then does the dashboard count requests per session (else per address), so
/// made-up cookies cannot grow the limiter's table.
async fn live_session(ctx: &Ctx, headers: &HeaderMap) -> Option<[u8; 32]> {
    let token = session_cookie(headers).filter(|t| t.len() <= 128)?.to_owned();
    let now = chrono::Utc::now();
    let hash = hash_secret(&token);
    ctx.read(move |c| analytics::web_sessions::find(c, &token, now)).await.ok().flatten().map(|_| hash)
}

/// The dashboard's session token, if the request carries one.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, v)| *k == crate::dashboard::SESSION_COOKIE && !v.is_empty())
        .map(|(_, v)| v)
}

/// Failed authentication is limited per address, so keys cannot be guessed at speed.
async fn failed_auth(ctx: &Ctx, net: IpAddr, now: i64, err: ApiError) -> Result<Admission, ApiError> {
    if err.status.is_server_error() {
        return Ok(Admission::Refuse(None, err));
    }
    let d = ctx.limiter.check(Bucket::FailedAuth(net), ctx.config.rate_limit_api, now).await?;
    Ok(refuse_if_over(d, now).unwrap_or(Admission::Refuse(d, err)))
}

fn refuse_if_over(d: Option<Decision>, now: i64) -> Option<Admission> {
    d.filter(|d| !d.allowed).map(|d| Admission::Refuse(Some(d), ApiError::rate_limited(d.retry_after(now))))
}

/// The Origin header to echo in the CORS answer: present when its host is
/// the domain (or a subdomain) of a live site.
async fn cors_origin(ctx: &Ctx, origin: &Origin, headers: &HeaderMap) -> Option<HeaderValue> {
    if let Origin::Host(Some(_)) = origin {
        let domains = ctx.directory.domains(&ctx.store).await.ok()?;
        origin.site_host(&domains)?;
        return headers.get(http::header::ORIGIN).cloned();
    }
    None
}

/// On every answer: browsers must not guess a type other than the one sent
/// (an uploaded or echoed text run as script); and over https, they must not
/// come back over plain http for a year.
fn write_security_headers(headers: &mut HeaderMap, https: bool) {
    headers.insert(http::header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if https {
        headers.insert(http::header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000"));
    }
}

fn write_cors(headers: &mut HeaderMap, origin: HeaderValue) {
    use http::header::{ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, VARY};
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(VARY, HeaderValue::from_static("Origin"));
    headers.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After"),
    );
}

/// Answers a CORS preflight on an ingestion path. Browsers only preflight
/// when a page sends JSON or an Authorization header; the SDK avoids both.
fn preflight(origin_allowed: bool) -> Response {
    if !origin_allowed {
        return ApiError::forbidden(Some("Origin"), "origin_not_allowed", "this origin is not the domain of any site").into_response();
    }
    let mut res = warp::reply::with_status(warp::reply(), StatusCode::NO_CONTENT).into_response();
    let h = res.headers_mut();
    h.insert("access-control-allow-methods", HeaderValue::from_static("POST, OPTIONS"));
    h.insert("access-control-allow-headers", HeaderValue::from_static("Content-Type, Authorization"));
    h.insert("access-control-max-age", HeaderValue::from_static("86400"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_classified() {
        assert_eq!(classify("/v1/events/track"), Class::Ingest);
        assert_eq!(classify("/v1/e"), Class::Ingest);
        assert_eq!(classify("/v1/events/sites/x"), Class::Api);
        assert_eq!(classify("/v1/nope"), Class::Api);
        assert_eq!(classify("/v1/openapi.json"), Class::Public);
        assert_eq!(classify("/healthz"), Class::Ops);
        assert_eq!(classify("/"), Class::Public);
        assert_eq!(classify("/dashboard/"), Class::Dashboard);
        assert_eq!(classify("/dashboard/sites/x"), Class::Dashboard);
        assert_eq!(classify("/dashboardx"), Class::Public);
        // The SDK's files, its bait script, site configs and the demo site: their own budget.
        assert_eq!(classify("/p/v1.js"), Class::PublicFiles);
        for bait in crate::assets::BAIT_PATHS {
            assert_eq!(classify(bait), Class::PublicFiles);
        }
        assert_eq!(classify("/demo/"), Class::PublicFiles);
        assert_eq!(classify("/v1/sdk/sites/abc/config"), Class::PublicFiles);
        assert_eq!(classify("/v1/sdk/sites/abc/config/x"), Class::Public);
        assert_eq!(classify("/ads/other.js"), Class::Public);
    }

    #[test]
    fn the_proxy_header_is_used_only_when_configured() {
        let peer: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "203.0.113.9, 198.51.100.7".parse().unwrap());
        assert_eq!(client_ip(&h, None, peer), peer.ip());
        assert_eq!(client_ip(&h, Some("x-forwarded-for"), peer), "198.51.100.7".parse::<IpAddr>().unwrap());
    }
}
