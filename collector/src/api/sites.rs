//! Sites: list, create, get, update, delete.

use analytics::model::{Site, SiteStatus};
use analytics::sites::{self, NewSite, SiteChanges};
use bytes::Bytes;
use chrono::Utc;
use chrono_tz::Tz;
use http::StatusCode;
use serde::Serialize;
use serde_json::{json, Map, Value};
use uuid::Uuid;
use warp::reply::Response;

use super::{json_object, json_reply, no_content, reject_unknown};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Ctx;
use analytics::model::{iso, Scope};

const MAX_NAME_LEN: usize = 200;
const MAX_VARIANTS: usize = 10;

/// The Site resource as the API shows it.
#[derive(Serialize)]
pub struct SiteView {
    id: Uuid,
    name: String,
    domain: String,
    status: &'static str,
    timezone: &'static str,
    revenue_per_1000_pageviews: Option<f64>,
    wall: Value,
    keep_utm: bool,
    created_at: String,
}

impl From<&Site> for SiteView {
    fn from(s: &Site) -> Self {
        SiteView {
            id: s.id,
            name: s.name.clone(),
            domain: s.domain.clone(),
            status: s.status.as_str(),
            timezone: s.timezone.name(),
            revenue_per_1000_pageviews: s.revenue_per_mille,
            wall: s.wall.clone(),
            keep_utm: s.keep_utm,
            created_at: iso(s.created_at),
        }
    }
}

/// The caller's site with this id; another account's site is "not found" too.
pub async fn load_site(ctx: &Ctx, p: &Principal, id: &str) -> Result<Site, ApiError> {
    let not_found = || ApiError::not_found("id", "no site with this id");
    let id = Uuid::parse_str(id).map_err(|_| not_found())?;
    let site = ctx.read(move |c| sites::get(c, id)).await?.ok_or_else(not_found)?;
    if site.account_id != p.account_id() {
        return Err(not_found());
    }
    Ok(site)
}

/// GET /v1/sites
pub async fn sites_list(ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let account = p.account_id();
    let list = ctx.read(move |c| sites::list(c, account)).await?;
    let views: Vec<SiteView> = list.iter().map(SiteView::from).collect();
    Ok(json_reply(StatusCode::OK, &json!({ "sites": views })))
}

/// POST /v1/sites
pub async fn sites_create(ctx: Ctx, p: Result<Principal, ApiError>, body: Result<Bytes, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let obj = json_object(&body?)?;
    let name = parse_name(obj.get("name"))?.ok_or_else(|| ApiError::required("name"))?;
    let domain = parse_domain(obj.get("domain"))?.ok_or_else(|| ApiError::required("domain"))?;
    let timezone = parse_timezone(obj.get("timezone"))?.unwrap_or(Tz::UTC);
    let revenue = parse_revenue(obj.get("revenue_per_1000_pageviews"))?.flatten();
    let keep_utm = parse_keep_utm(obj.get("keep_utm"))?;
    reject_unknown(&obj, &["name", "domain", "timezone", "revenue_per_1000_pageviews", "keep_utm"])?;
    let account_id = p.account_id();
    let site = ctx
        .writer
        .apply(move |c| {
            let new = NewSite { account_id, name: &name, domain: &domain, timezone, revenue_per_mille: revenue };
            let site = sites::create(c, &new, Utc::now())?;
            match keep_utm {
                Some(true) => sites::update(c, account_id, site.id, &SiteChanges { keep_utm, ..Default::default() }),
                _ => Ok(site),
            }
        })
        .await?;
    ctx.directory.forget_site(&ctx.store, site.id).await;
    Ok(json_reply(StatusCode::CREATED, &SiteView::from(&site)))
}

/// GET /v1/sites/:id
pub async fn sites_get(id: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Read)?;
    let site = load_site(&ctx, &p, &id).await?;
    Ok(json_reply(StatusCode::OK, &SiteView::from(&site)))
}

/// PATCH /v1/sites/:id
pub async fn sites_update(
    id: String,
    ctx: Ctx,
    p: Result<Principal, ApiError>,
    body: Result<Bytes, ApiError>,
) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let site = load_site(&ctx, &p, &id).await?;
    let obj = json_object(&body?)?;
    let changes = SiteChanges {
        name: parse_name(obj.get("name"))?,
        domain: parse_domain(obj.get("domain"))?,
        status: parse_status(obj.get("status"))?,
        timezone: parse_timezone(obj.get("timezone"))?,
        revenue_per_mille: parse_revenue(obj.get("revenue_per_1000_pageviews"))?,
        wall: parse_wall(obj.get("wall"))?,
        keep_utm: parse_keep_utm(obj.get("keep_utm"))?,
    };
    reject_unknown(&obj, &["name", "domain", "status", "timezone", "revenue_per_1000_pageviews", "wall", "keep_utm"])?;
    let account_id = p.account_id();
    let updated = ctx.writer.apply(move |c| sites::update(c, account_id, site.id, &changes)).await?;
    ctx.directory.forget_site(&ctx.store, updated.id).await;
    Ok(json_reply(StatusCode::OK, &SiteView::from(&updated)))
}

/// DELETE /v1/sites/:id
pub async fn sites_delete(id: String, ctx: Ctx, p: Result<Principal, ApiError>) -> Result<Response, ApiError> {
    let p = p?;
    p.require(Scope::Write)?;
    let site = load_site(&ctx, &p, &id).await?;
    let account_id = p.account_id();
    let id = site.id;
    ctx.writer.apply(move |c| sites::delete(c, account_id, id, Utc::now())).await?;
    ctx.directory.forget_site(&ctx.store, id).await;
    Ok(no_content())
}

fn string_field<'a>(v: Option<&'a Value>, field: &str) -> Result<Option<&'a str>, ApiError> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim())),
        Some(_) => Err(ApiError::invalid(field, "invalid", format!("{field} must be a string"))),
    }
}

pub(crate) fn parse_name(v: Option<&Value>) -> Result<Option<String>, ApiError> {
    let too_long = || ApiError::invalid("name", "too_long", "name is longer than 200 characters");
    // The documented limit is the name as sent, the spaces trimmed after it included.
    if matches!(v, Some(Value::String(raw)) if raw.chars().count() > MAX_NAME_LEN) {
        return Err(too_long());
    }
    match string_field(v, "name")? {
        None => Ok(None),
        Some("") => Err(ApiError::required("name")),
        Some(s) => Ok(Some(s.to_owned())),
    }
}

/// A bare host name (`example.com`, `localhost`) or an IP address; no scheme,
/// port or path. Other single-label names (`com`) are refused: browser origins
/// under them would all match the site.
pub fn normalize_domain(raw: &str) -> Option<String> {
    let d = raw.trim().trim_end_matches('.').to_ascii_lowercase();
    if d.parse::<std::net::IpAddr>().is_ok() {
        return Some(d);
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let multi_label = d.contains('.') || d == "localhost";
    (multi_label && d.len() <= 253 && d.split('.').all(label_ok)).then_some(d)
}

pub(crate) fn parse_domain(v: Option<&Value>) -> Result<Option<String>, ApiError> {
    match string_field(v, "domain")? {
        None => Ok(None),
        Some("") => Err(ApiError::required("domain")),
        Some(s) => normalize_domain(s).map(Some).ok_or_else(|| {
            ApiError::invalid("domain", "invalid", "domain must be a host name such as example.com, without scheme, port or path")
        }),
    }
}

pub(crate) fn parse_timezone(v: Option<&Value>) -> Result<Option<Tz>, ApiError> {
    string_field(v, "timezone")?
        .map(|s| {
            s.parse::<Tz>()
                .map_err(|_| ApiError::invalid("timezone", "invalid", "timezone must be an IANA name such as Europe/Paris"))
        })
        .transpose()
}

pub(crate) fn parse_status(v: Option<&Value>) -> Result<Option<SiteStatus>, ApiError> {
    string_field(v, "status")?
        .map(|s| SiteStatus::parse(s).ok_or_else(|| ApiError::invalid("status", "invalid", "status must be active or paused")))
        .transpose()
}

pub(crate) fn parse_keep_utm(v: Option<&Value>) -> Result<Option<bool>, ApiError> {
    match v {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::invalid("keep_utm", "invalid", "keep_utm must be true or false")),
    }
}

/// `Some(None)` when explicitly null (clears the figure).
pub(crate) fn parse_revenue(v: Option<&Value>) -> Result<Option<Option<f64>>, ApiError> {
    const FIELD: &str = "revenue_per_1000_pageviews";
    match v {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(Some(Some(x))),
            _ => Err(ApiError::invalid(FIELD, "out_of_range", format!("{FIELD} must be zero or more"))),
        },
        Some(_) => Err(ApiError::invalid(FIELD, "invalid", format!("{FIELD} must be a number"))),
    }
}

/// The wall configuration: an object whose `variants` (when given) are 1 to 10
/// objects with a unique `name` and a `weight` of zero or more.
pub(crate) fn parse_wall(v: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    let obj: &Map<String, Value> = v.as_object().ok_or_else(|| ApiError::invalid("wall", "invalid", "wall must be an object"))?;
    // The SDK reads these as text and a number: another type would break the wall.
    if obj.get("kind").is_some_and(|k| !k.is_string()) {
        return Err(ApiError::invalid("wall.kind", "invalid", "wall.kind must be a string"));
    }
    if obj.get("dismiss_after_seconds").is_some_and(|d| !d.is_number()) {
        return Err(ApiError::invalid("wall.dismiss_after_seconds", "invalid", "wall.dismiss_after_seconds must be a number"));
    }
    if let Some(variants) = obj.get("variants") {
        let list = variants
            .as_array()
            .filter(|l| !l.is_empty() && l.len() <= MAX_VARIANTS)
            .ok_or_else(|| ApiError::invalid("wall.variants", "invalid", "wall.variants must be an array of 1 to 10 variants"))?;
        let mut names = Vec::new();
        for (i, variant) in list.iter().enumerate() {
            let field = format!("wall.variants[{i}]");
            let name = variant
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .ok_or_else(|| ApiError::invalid(format!("{field}.name"), "invalid", "a variant needs a name of 1 to 64 characters of A-Z, a-z, 0-9, _ and -"))?;
            if names.contains(&name) {
                return Err(ApiError::invalid(format!("{field}.name"), "invalid", format!("variant name {name} appears twice")));
            }
            names.push(name);
            for text in ["title", "body"] {
                if variant.get(text).is_some_and(|t| !t.is_string()) {
                    return Err(ApiError::invalid(format!("{field}.{text}"), "invalid", format!("a variant's {text} must be a string")));
                }
            }
            if let Some(w) = variant.get("weight") {
                if !w.as_f64().is_some_and(|w| w.is_finite() && w >= 0.0) {
                    return Err(ApiError::invalid(format!("{field}.weight"), "invalid", "weight must be a number of zero or more"));
                }
            }
        }
    }
    Ok(Some(v.clone()))
}

#[cfg(test)]
mod tests {
    use super::normalize_domain;

    #[test]
    fn domains_are_bare_hosts() {
        assert_eq!(normalize_domain(" News.Example.COM. ").as_deref(), Some("news.example.com"));
        assert_eq!(normalize_domain("localhost").as_deref(), Some("localhost"));
        assert_eq!(normalize_domain("127.0.0.1").as_deref(), Some("127.0.0.1"));
        for bad in ["https://example.com", "example.com/path", "example.com:8080", "-a.com", "a..com", "", "com"] {
            assert_eq!(normalize_domain(bad), None, "{bad}");
        }
    }
}
