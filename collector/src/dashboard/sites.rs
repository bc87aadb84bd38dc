//! The sites list (and creating a site) and a site's overview: KPI tiles,
//! the conversions chart, the A/B table and the recent events.

use analytics::model::{Device, EventType, Site};
use analytics::period::Period;
use analytics::query::{self, Filter, Granularity};
use analytics::sites::{self, NewSite};
use chrono::Utc;
use chrono_tz::Tz;
use http::StatusCode;
use minijinja::Value;
use serde_json::Value as Json;
use uuid::Uuid;
use warp::reply::Response;

use super::{admin_change, chart, form_error, page, redirect, value, Form, Viewer};
use crate::api::analytics::{MAX_DAYS, MAX_HOURLY_DAYS};
use crate::api::{parse_domain, parse_name, parse_timezone, Query};
use crate::error::ApiError;
use crate::state::Ctx;

/// Events shown per page of the recent-events table.
const EVENTS_PER_PAGE: u32 = 25;

/// The viewer's live site with this id; anyone else's is "not found".
pub(super) async fn site_of(ctx: &Ctx, viewer: &Viewer, id: &str) -> Result<Site, ApiError> {
    let not_found = || ApiError::not_found("id", "no site with this id");
    let id = Uuid::parse_str(id).map_err(|_| not_found())?;
    let site = ctx.read(move |c| sites::get(c, id)).await?.ok_or_else(not_found)?;
    if site.account_id != viewer.account_id() {
        return Err(not_found());
    }
    Ok(site)
}

fn site_view(s: &Site) -> minijinja::Value {
    minijinja::context! {
        id => s.id.to_string(),
        name => s.name,
        domain => s.domain,
        status => s.status.as_str(),
        timezone => s.timezone.name(),
        created_at => analytics::model::iso(s.created_at),
    }
}

async fn list_page(ctx: &Ctx, viewer: &Viewer, status: StatusCode, error: Option<Value>, form: Option<&Form>) -> Result<Response, ApiError> {
    let account = viewer.account_id();
    let list = ctx.read(move |c| sites::list(c, account)).await?;
    let views: Vec<_> = list.iter().map(site_view).collect();
    let timezones: Vec<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    let form = form.map(|f| {
        minijinja::context! { name => f.get("name"), domain => f.get("domain"), timezone => f.get("timezone") }
    });
    let ctx = minijinja::context! { nav => "sites", sites => views, timezones => timezones, error => error, form => form };
    page(status, "sites.html", Some(viewer), ctx)
}

/// GET /dashboard/
pub async fn sites_page(ctx: Ctx, viewer: Result<Viewer, ApiError>) -> Result<Response, ApiError> {
    let viewer = viewer?;
    list_page(&ctx, &viewer, StatusCode::OK, None, None).await
}

/// POST /dashboard/sites
pub async fn sites_create(ctx: Ctx, viewer: Result<Viewer, ApiError>, form: Result<Form, ApiError>) -> Result<Response, ApiError> {
    let (viewer, form) = admin_change(viewer, form)?;
    let text = |name: &str| form.get(name).map(|v| Json::String(v.to_owned()));
    let parsed = (|| {
        let name = parse_name(text("name").as_ref())?.ok_or_else(|| ApiError::required("name"))?;
        let domain = parse_domain(text("domain").as_ref())?.ok_or_else(|| ApiError::required("domain"))?;
        let tz = match form.text("timezone") {
            None => Tz::UTC,
            Some(_) => parse_timezone(text("timezone").as_ref())?.unwrap_or(Tz::UTC),
        };
        Ok::<_, ApiError>((name, domain, tz))
    })();
    let (name, domain, timezone) = match parsed {
        Ok(v) => v,
        Err(e) if e.status == StatusCode::BAD_REQUEST => {
            return list_page(&ctx, &viewer, StatusCode::BAD_REQUEST, Some(form_error(&e)), Some(&form)).await;
        }
        Err(e) => return Err(e),
    };
    let account_id = viewer.account_id();
    let site = ctx
        .writer
        .apply(move |c| {
            let new = NewSite { account_id, name: &name, domain: &domain, timezone, revenue_per_mille: None };
            sites::create(c, &new, Utc::now())
        })
        .await?;
    ctx.directory.forget_site(&ctx.store, site.id).await;
    Ok(redirect(&format!("/dashboard/sites/{}", site.id)))
}

/// The period, device, chart granularity and events page a site page shows.
struct Selection {
    days: u32,
    device: Option<Device>,
    granularity: Granularity,
    event_type: Option<EventType>,
    offset: u64,
}

impl Selection {
    /// Parsed like the API's query parameters, with the same bounds.
    fn parse(q: &Query) -> Result<(Selection, Option<&'static str>), ApiError> {
        let days = q.int("days", 1, MAX_DAYS)?.unwrap_or(7);
        let device = q
            .get("device")
            .filter(|d| !d.is_empty())
            .map(|d| Device::parse(d).ok_or_else(|| ApiError::invalid("device", "invalid", "device must be one of desktop, mobile, tablet")))
            .transpose()?;
        let mut granularity = match q.get("granularity").filter(|g| !g.is_empty()) {
            None => Granularity::Day,
            Some(g) => Granularity::parse(g).ok_or_else(|| ApiError::invalid("granularity", "invalid", "granularity must be hour, day or week"))?,
        };
        // The period selector and the granularity are chosen separately, so a
        // long period with hours is shown by day rather than refused.
        let mut note = None;
        if granularity == Granularity::Hour && days > MAX_HOURLY_DAYS {
            granularity = Granularity::Day;
            note = Some("Hourly buckets are available for periods up to 31 days; showing days.");
        }
        let event_type = q
            .get("event_type")
            .filter(|t| !t.is_empty())
            .map(|t| EventType::parse(t).ok_or_else(|| ApiError::invalid("event_type", "invalid", format!("unknown event_type {t}"))))
            .transpose()?;
        let offset = q.int("offset", 0u64, i64::MAX as u64)?.unwrap_or(0);
        Ok((Selection { days, device, granularity, event_type, offset }, note))
    }

    fn url(&self, site: Uuid, offset: u64) -> String {
        let mut url = format!("/dashboard/sites/{site}?days={}&granularity={}", self.days, self.granularity.as_str());
        if let Some(d) = self.device {
            url.push_str(&format!("&device={}", d.as_str()));
        }
        if let Some(t) = self.event_type {
            url.push_str(&format!("&event_type={}", t.as_str()));
        }
        url.push_str(&format!("&offset={offset}#events"));
        url
    }
}

/// GET /dashboard/sites/:id
///
/// Reads through the same `analytics::query` functions, with the same period
/// rules, as the API's dashboard, conversions, A/B and events endpoints.
pub async fn site_page(id: String, ctx: Ctx, viewer: Result<Viewer, ApiError>, q: Query) -> Result<Response, ApiError> {
    let viewer = viewer?;
    let site = site_of(&ctx, &viewer, &id).await?;
    let (sel, note) = Selection::parse(&q)?;
    let period = Period::last_days(sel.days, site.timezone, Utc::now());
    let filter = Filter { device: sel.device };
    let (granularity, event_type, offset) = (sel.granularity, sel.event_type, sel.offset);
    let s = site.clone();
    let (dashboard, timeline, variants, (events, total)) = ctx
        .read(move |c| {
            Ok((
                query::dashboard(c, &s, &period, filter)?,
                query::timeline(c, &s, &period, granularity, filter)?,
                query::ab_testing(c, &s, Some(period.hour_range()))?,
                query::events(c, &s, event_type, EVENTS_PER_PAGE, offset)?,
            ))
        })
        .await?;

    let per_page = u64::from(EVENTS_PER_PAGE);
    let prev_url = (offset > 0).then(|| sel.url(site.id, offset.saturating_sub(per_page)));
    let next_url = (offset + per_page < total).then(|| sel.url(site.id, offset + per_page));
    let day_choices: Vec<_> = [(1, "Today"), (7, "Last 7 days"), (30, "Last 30 days"), (90, "Last 90 days"), (365, "Last 12 months")]
        .into_iter()
        .chain((![1, 7, 30, 90, 365].contains(&sel.days)).then_some((sel.days, "")))
        .map(|(d, label)| {
            let label = if label.is_empty() { format!("Last {d} days") } else { label.to_owned() };
            minijinja::context! { value => d, label => label }
        })
        .collect();
    let ctx = minijinja::context! {
        nav => "sites",
        site => site_view(&site),
        days => sel.days,
        day_choices => day_choices,
        device => sel.device.map(Device::as_str),
        devices => Device::ALL.map(Device::as_str),
        granularity => granularity.as_str(),
        note => note,
        dashboard => value(&dashboard),
        chart => minijinja::Value::from_safe_string(chart::conversions_svg(&timeline.timeline, granularity)),
        timeline => value(&timeline.timeline),
        variants => value(&variants),
        event_types => EventType::ALL.map(EventType::as_str),
        event_type => event_type.map(EventType::as_str),
        events => value(&events),
        total => total,
        offset => offset,
        prev_url => prev_url,
        next_url => next_url,
    };
    page(StatusCode::OK, "site.html", Some(&viewer), ctx)
}
