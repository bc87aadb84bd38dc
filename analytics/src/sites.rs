//! Sites: the websites an account measures.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use crate::db::{params, Connection, OptionalExtension, Row};
use serde_json::json;
use uuid::Uuid;

use crate::accounts::{from_ms, ms};
use crate::model::{Site, SiteStatus};
use crate::{Error, Result};

/// The wall every new site starts with: three variants with equal weights.
pub fn default_wall() -> serde_json::Value {
    json!({
        "kind": "soft",
        "dismiss_after_seconds": 5,
        "variants": [
            {
                "name": "control",
                "weight": 1,
                "title": "Please allow this site",
                "body": "We rely on advertising to keep our journalism free. Please allow this site in your blocker."
            },
            {
                "name": "emotional",
                "weight": 1,
                "title": "Our reporters need you",
                "body": "Every story here is written by people who need to be paid. Allowing this site keeps them writing."
            },
            {
                "name": "offer",
                "weight": 1,
                "title": "Allow this site, or go ad-free",
                "body": "Allow this site in your blocker, or subscribe for an ad-free experience."
            }
        ]
    })
}

pub struct NewSite<'a> {
    pub account_id: i64,
    pub name: &'a str,
    pub domain: &'a str,
    pub timezone: Tz,
    pub revenue_per_mille: Option<f64>,
}

pub fn create(conn: &Connection, s: &NewSite<'_>, now: DateTime<Utc>) -> Result<Site> {
    let site = Site {
        seq: 0,
        id: Uuid::new_v4(),
        account_id: s.account_id,
        name: s.name.to_owned(),
        domain: s.domain.to_owned(),
        status: SiteStatus::Active,
        timezone: s.timezone,
        revenue_per_mille: s.revenue_per_mille,
        wall: default_wall(),
        keep_utm: false,
        created_at: now,
    };
    let seq = conn.query_row(
        "INSERT INTO sites (id, account_id, name, domain, status, timezone, revenue_per_mille, wall, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING seq",
        params![
            site.id.to_string(),
            site.account_id,
            site.name,
            site.domain,
            site.status.as_str(),
            site.timezone.name(),
            site.revenue_per_mille,
            site.wall.to_string(),
            ms(now)
        ],
        |r| r.get(0),
    )?;
    Ok(Site { seq, ..site })
}

const SITE_COLUMNS: &str =
    "seq, id, account_id, name, domain, status, timezone, revenue_per_mille, wall, created_at, keep_utm";

fn site_from_row(r: &Row<'_>) -> crate::Result<Site> {
    let id: String = r.get(1)?;
    let status: String = r.get(5)?;
    let tz: String = r.get(6)?;
    let wall: String = r.get(8)?;
    Ok(Site {
        seq: r.get(0)?,
        id: Uuid::parse_str(&id).unwrap_or_default(),
        account_id: r.get(2)?,
        name: r.get(3)?,
        domain: r.get(4)?,
        status: SiteStatus::parse(&status).unwrap_or(SiteStatus::Paused),
        timezone: tz.parse().unwrap_or(Tz::UTC),
        revenue_per_mille: r.get(7)?,
        wall: serde_json::from_str(&wall).unwrap_or_else(|_| default_wall()),
        created_at: from_ms(r.get(9)?),
        keep_utm: r.get(10)?,
    })
}

/// A live (not deleted) site by its public id, whatever its account.
pub fn get(conn: &Connection, id: Uuid) -> Result<Option<Site>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {SITE_COLUMNS} FROM sites WHERE id = ?1 AND deleted_at IS NULL"))?
        .query_row([id.to_string()], site_from_row)
        .optional()?)
}

/// The account's live sites, oldest first.
pub fn list(conn: &Connection, account_id: i64) -> Result<Vec<Site>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {SITE_COLUMNS} FROM sites WHERE account_id = ?1 AND deleted_at IS NULL ORDER BY created_at, seq"
    ))?;
    let sites = stmt.query_map([account_id], site_from_row)?.collect::<crate::Result<_>>()?;
    Ok(sites)
}

/// Every live site, for matching browser origins.
pub fn all_domains(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT DISTINCT domain FROM sites WHERE deleted_at IS NULL")?;
    let domains = stmt.query_map((), |r| r.get(0))?.collect::<crate::Result<_>>()?;
    Ok(domains)
}

/// The changes a PATCH may make; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub struct SiteChanges {
    pub name: Option<String>,
    pub domain: Option<String>,
    pub status: Option<SiteStatus>,
    pub timezone: Option<Tz>,
    /// `Some(None)` clears the revenue figure.
    pub revenue_per_mille: Option<Option<f64>>,
    pub wall: Option<serde_json::Value>,
    pub keep_utm: Option<bool>,
}

pub fn update(conn: &Connection, account_id: i64, id: Uuid, c: &SiteChanges) -> Result<Site> {
    let mut site = get(conn, id)?.filter(|s| s.account_id == account_id).ok_or(Error::NotFound("site"))?;
    if let Some(v) = &c.name {
        site.name = v.clone();
    }
    if let Some(v) = &c.domain {
        site.domain = v.clone();
    }
    if let Some(v) = c.status {
        site.status = v;
    }
    if let Some(v) = c.timezone {
        site.timezone = v;
    }
    if let Some(v) = c.revenue_per_mille {
        site.revenue_per_mille = v;
    }
    if let Some(v) = &c.wall {
        site.wall = v.clone();
    }
    if let Some(v) = c.keep_utm {
        site.keep_utm = v;
    }
    conn.execute(
        "UPDATE sites SET name = ?2, domain = ?3, status = ?4, timezone = ?5, revenue_per_mille = ?6, wall = ?7, keep_utm = ?8
         WHERE seq = ?1",
        params![
            site.seq,
            site.name,
            site.domain,
            site.status.as_str(),
            site.timezone.name(),
            site.revenue_per_mille,
            site.wall.to_string(),
            site.keep_utm
        ],
    )?;
    Ok(site)
}

/// Marks a site deleted: it disappears from the API at once; its events,
/// sessions and rollups are removed by the retention job in small batches.
pub fn delete(conn: &Connection, account_id: i64, id: Uuid, now: DateTime<Utc>) -> Result<()> {
    let n = conn.execute(
        "UPDATE sites SET deleted_at = ?3 WHERE id = ?1 AND account_id = ?2 AND deleted_at IS NULL",
        params![id.to_string(), account_id, ms(now)],
    )?;
    if n == 0 {
        return Err(Error::NotFound("site"));
    }
    Ok(())
}
