//! Ingestion as a pipeline of named steps: validate the body
//! ([`validate::parse_track`], [`validate::parse_batch`]), resolve and authorize the site, enrich the
//! event (device, country, variant), then hand it to the [`writer`].

pub mod validate;
pub mod writer;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use analytics::model::{Device, NewEvent, Site, SiteStatus};
use chrono::{DateTime, Duration, Utc};
use http::{HeaderMap, HeaderValue};
use uuid::Uuid;

use crate::auth::{self, Origin, Principal};
use crate::error::ApiError;
use crate::rate_limit::{Bucket, Decision};
use crate::state::AppState;
use validate::TrackInput;

/// Clock skew tolerated for client timestamps in the future.
const MAX_FUTURE_SKEW_MINUTES: i64 = 5;

/// What the request itself (not its body) tells about its events: read from
/// the headers once, by the gateway, instead of handing the handler a copy of
/// every header.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    pub origin: Origin,
    /// When the request arrived: the events' `received_at`.
    pub received_at: DateTime<Utc>,
    user_agent: Option<HeaderValue>,
    pub country: String,
    /// The client's network as the rate limits count it (`None` in previews).
    pub network: Option<IpAddr>,
}

impl RequestInfo {
    /// `origin` is the request's, read once by the gateway, as is the time it arrived.
    pub fn new(state: &AppState, headers: &HeaderMap, ip: Option<IpAddr>, origin: Origin, received_at: DateTime<Utc>) -> RequestInfo {
        let country = state.geo.country(headers, ip);
        let network = ip.map(crate::rate_limit::client_network);
        RequestInfo { origin, received_at, user_agent: headers.get(http::header::USER_AGENT).cloned(), country, network }
    }

    pub fn user_agent(&self) -> Option<&str> {
        self.user_agent.as_ref().and_then(|v| v.to_str().ok())
    }
}

/// Resolves sites once per request, however many events name them.
#[derive(Default)]
pub struct SiteCache {
    sites: HashMap<Uuid, Option<Arc<Site>>>,
}

impl SiteCache {
    async fn get(&mut self, state: &AppState, id: Uuid) -> Result<Option<Arc<Site>>, ApiError> {
        if let Some(site) = self.sites.get(&id) {
            return Ok(site.clone());
        }
        let site = state.directory.site(&state.store, id).await?;
        self.sites.insert(id, site.clone());
        Ok(site)
    }
}

/// Authorizes and enriches one validated event.
pub async fn prepare(
    state: &AppState,
    principal: Option<&Principal>,
    info: &RequestInfo,
    cache: &mut SiteCache,
    input: TrackInput,
) -> Result<NewEvent, ApiError> {
    let site = cache
        .get(state, input.site_id)
        .await?
        .ok_or_else(|| ApiError::not_found("site_id", "no site with this site_id"))?;
    match principal {
        Some(p) => {
            p.require(analytics::model::Scope::Ingest)?;
            if p.account_id() != site.account_id {
                return Err(ApiError::not_found("site_id", "no site with this site_id"));
            }
        }
        None => auth::authorize_browser(&info.origin, Some(&input.page_host), &site)?,
    }
    if site.status == SiteStatus::Paused {
        return Err(ApiError::forbidden(Some("site_id"), "paused", "this site is paused and does not accept events"));
    }
    let backfill_days = i64::from(state.config.raw_retention_days);
    let occurred_at = occurred_at(&input, principal.is_some(), info.received_at, backfill_days)?;
    Ok(enrich(input, &site, info, occurred_at))
}

/// Counts `n` more events against each site's optional ceiling
/// (`--rate-limit-site-events`); over it, the request is refused with 429.
pub async fn charge_sites(state: &AppState, per_site: &HashMap<Uuid, u32>, now: i64) -> Result<(), ApiError> {
    let limit = state.config.rate_limit_site_events;
    for (&site, &n) in per_site {
        if let Some(d) = state.limiter.check_n(Bucket::SiteEvents(site), n, limit, now).await?.filter(|d| !d.allowed) {
            state.metrics.site_events_refused.fetch_add(u64::from(n), std::sync::atomic::Ordering::Relaxed);
            return Err(ApiError::rate_limited(d.retry_after(now)));
        }
    }
    Ok(())
}

/// Counts a batch's events beyond the first (which the gateway counted with
/// the request) against the client's network and the key: the ingestion
/// budget is in events, whatever the requests carry them in.
/// Returns the stricter decision, for the answer's rate-limit headers.
pub async fn charge_batch(state: &AppState, principal: Option<&Principal>, info: &RequestInfo, events: usize) -> Result<Option<Decision>, ApiError> {
    let extra = u32::try_from(events.saturating_sub(1)).unwrap_or(u32::MAX);
    if extra == 0 {
        return Ok(None);
    }
    let (limit, now) = (state.config.rate_limit_ingest, info.received_at.timestamp());
    let buckets = info.network.map(Bucket::IngestAddress).into_iter().chain(principal.map(|p| Bucket::IngestKey(p.key.id)));
    let mut reported: Option<Decision> = None;
    for bucket in buckets {
        if let Some(d) = state.limiter.check_n(bucket, extra, limit, now).await? {
            if !d.allowed {
                return Err(ApiError::rate_limited(d.retry_after(now)));
            }
            reported = Some(reported.map_or(d, |r| r.stricter(d)));
        }
    }
    Ok(reported)
}

/// Only keyed (server-side) clients may back-date events, and only within raw retention.
fn occurred_at(input: &TrackInput, keyed: bool, now: DateTime<Utc>, max_days: i64) -> Result<DateTime<Utc>, ApiError> {
    let Some(ts) = input.timestamp else {
        return Ok(now);
    };
    if !keyed {
        return Err(ApiError::invalid("timestamp", "not_allowed", "timestamp is accepted only with an API key"));
    }
    if ts > now + Duration::minutes(MAX_FUTURE_SKEW_MINUTES) || ts < now - Duration::days(max_days) {
        return Err(ApiError::invalid(
            "timestamp",
            "out_of_range",
            format!("timestamp must lie within the last {max_days} days (the raw retention) and not in the future"),
        ));
    }
    Ok(ts)
}

fn enrich(input: TrackInput, site: &Site, info: &RequestInfo, occurred_at: DateTime<Utc>) -> NewEvent {
    let device = input
        .device
        .unwrap_or_else(|| Device::from_user_agent(info.user_agent().unwrap_or_default()));
    NewEvent {
        site_seq: site.seq,
        session_id: input.session_id,
        event_type: input.event_type,
        page_url: validate::stored_page_url(input.page_url, site.keep_utm),
        // The stored metadata shows the device the event was counted under.
        metadata: Some(input.metadata.stored(device)),
        device,
        country: info.country.clone(),
        // A name the site's wall does not define (a typo, or a forger trying
        // to win the A/B test) is stored as no variant, so it is never aggregated.
        variant: input.variant.filter(|v| site.has_variant(v)),
        forced_variant: input.forced_variant,
        client_event_id: input.event_id.map(|id| id.to_string()),
        occurred_at,
        received_at: info.received_at,
    }
}
