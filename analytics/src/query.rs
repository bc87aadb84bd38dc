//! Read-side queries. Analytics read the hourly rollups only, so their cost
//! grows with the hours in the period, never with traffic.

use std::collections::HashMap;

use crate::db::{params, Connection};
use serde::Serialize;
use uuid::Uuid;

use crate::ab::{self, percent, VariantCounts, VariantResult};
use crate::accounts::from_ms;
use crate::model::{iso, Device, EventType, Site, StoredEvent};
use crate::period::{hour_start, week_monday, Period};
use crate::Result;

/// Session counters over some slice of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub sessions: u64,
    pub adblock: u64,
    pub walls: u64,
    pub dismissed: u64,
    pub conversions: u64,
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        self.sessions += o.sessions;
        self.adblock += o.adblock;
        self.walls += o.walls;
        self.dismissed += o.dismissed;
        self.conversions += o.conversions;
    }

    /// conversions ÷ walls displayed × 100: how well the wall converts.
    pub fn conversion_rate(&self) -> f64 {
        percent(self.conversions, self.walls)
    }

    /// adblock sessions ÷ sessions × 100.
    pub fn adblock_share(&self) -> f64 {
        percent(self.adblock, self.sessions)
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PeriodDates {
    pub start: String,
    pub end: String,
}

impl From<&Period> for PeriodDates {
    fn from(p: &Period) -> Self {
        PeriodDates { start: p.start.to_string(), end: p.end.to_string() }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DashboardMetrics {
    pub sessions: u64,
    pub adblock_detected: u64,
    pub walls_displayed: u64,
    pub conversions: u64,
    pub conversion_rate: f64,
    pub adblock_share: f64,
}

impl From<Counters> for DashboardMetrics {
    fn from(c: Counters) -> Self {
        DashboardMetrics {
            sessions: c.sessions,
            adblock_detected: c.adblock,
            walls_displayed: c.walls,
            conversions: c.conversions,
            conversion_rate: c.conversion_rate(),
            adblock_share: c.adblock_share(),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Dashboard {
    pub period: PeriodDates,
    pub metrics: DashboardMetrics,
}

/// Optional narrowing of the rollups a query reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter {
    pub device: Option<Device>,
}

/// Per-UTC-hour session counters of a site over `[from, to)`.
fn hourly(conn: &Connection, site: i64, (from, to): (i64, i64), f: Filter) -> Result<Vec<(i64, Counters)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT hour, sum(sessions), sum(adblock), sum(walls), sum(dismissed), sum(conversions)
         FROM rollup_device_hourly
         WHERE site = ?1 AND hour >= ?2 AND hour < ?3 AND (device = ?4 OR ?4 IS NULL)
         GROUP BY hour ORDER BY hour",
    )?;
    let rows = stmt
        .query_map(params![site, from, to, f.device.map(Device::code)], |r| {
            Ok((
                r.get(0)?,
                Counters {
                    sessions: r.get(1)?,
                    adblock: r.get(2)?,
                    walls: r.get(3)?,
                    dismissed: r.get(4)?,
                    conversions: r.get(5)?,
                },
            ))
        })?
        .collect::<crate::Result<_>>()?;
    Ok(rows)
}

pub fn totals(conn: &Connection, site: &Site, period: &Period, f: Filter) -> Result<Counters> {
    let mut total = Counters::default();
    for (_, c) in hourly(conn, site.seq, period.hour_range(), f)? {
        total.add(&c);
    }
    Ok(total)
}

pub fn dashboard(conn: &Connection, site: &Site, period: &Period, f: Filter) -> Result<Dashboard> {
    Ok(Dashboard { period: period.into(), metrics: totals(conn, site, period, f)?.into() })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    Hour,
    Day,
    Week,
}

impl Granularity {
    pub fn parse(s: &str) -> Option<Granularity> {
        match s {
            "hour" => Some(Granularity::Hour),
            "day" => Some(Granularity::Day),
            "week" => Some(Granularity::Week),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Hour => "hour",
            Granularity::Day => "day",
            Granularity::Week => "week",
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelineBucket {
    pub bucket: String,
    pub sessions: u64,
    pub adblock_detected: u64,
    pub walls_displayed: u64,
    pub conversions: u64,
    pub conversion_rate: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Timeline {
    pub period: PeriodDates,
    pub granularity: &'static str,
    pub timeline: Vec<TimelineBucket>,
}

/// Every bucket of the period, oldest first, zero-filled.
pub fn timeline(conn: &Connection, site: &Site, period: &Period, g: Granularity, f: Filter) -> Result<Timeline> {
    let range = period.hour_range();
    let data: HashMap<i64, Counters> = hourly(conn, site.seq, range, f)?.into_iter().collect();

    // Buckets in order, each with the hours that fall into it.
    let mut buckets: Vec<(String, Counters)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for hour in range.0..range.1 {
        let label = match g {
            Granularity::Hour => hour_start(hour)
                .with_timezone(&period.tz)
                .format("%Y-%m-%dT%H:%M:%S%:z")
                .to_string(),
            Granularity::Day => period.date_of_hour(hour).to_string(),
            Granularity::Week => week_monday(period.date_of_hour(hour)).to_string(),
        };
        let slot = *index.entry(label.clone()).or_insert_with(|| {
            buckets.push((label, Counters::default()));
            buckets.len() - 1
        });
        if let Some(c) = data.get(&hour) {
            buckets[slot].1.add(c);
        }
    }
    let timeline = buckets
        .into_iter()
        .map(|(bucket, c)| TimelineBucket {
            bucket,
            sessions: c.sessions,
            adblock_detected: c.adblock,
            walls_displayed: c.walls,
            conversions: c.conversions,
            conversion_rate: c.conversion_rate(),
        })
        .collect();
    Ok(Timeline { period: period.into(), granularity: g.as_str(), timeline })
}

/// A/B results over the given UTC hours (all time when `None`). Lists the
/// site's configured variants, then any other variant seen in the data.
pub fn ab_testing(conn: &Connection, site: &Site, hours: Option<(i64, i64)>) -> Result<Vec<VariantResult>> {
    let (from, to) = hours.unwrap_or((i64::MIN, i64::MAX));
    let mut stmt = conn.prepare_cached(
        "SELECT variant, sum(walls), sum(wall_conversions) FROM rollup_variant_hourly
         WHERE site = ?1 AND hour >= ?2 AND hour < ?3
         GROUP BY variant",
    )?;
    let seen: HashMap<String, (u64, u64)> = stmt
        .query_map(params![site.seq, from, to], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))?
        .collect::<crate::Result<_>>()?;
    Ok(variant_results(site, &seen))
}

/// A/B results from (impressions, conversions) per variant name: the site's
/// configured variants first, then any other variant seen in the data.
pub fn variant_results(site: &Site, seen: &HashMap<String, (u64, u64)>) -> Vec<VariantResult> {
    let mut names = site.variant_names();
    let mut extra: Vec<&String> = seen.keys().filter(|n| !names.contains(n)).collect();
    extra.sort();
    names.extend(extra.into_iter().cloned());
    let counts: Vec<VariantCounts> = names
        .into_iter()
        .map(|name| {
            let (impressions, conversions) = seen.get(&name).copied().unwrap_or_default();
            VariantCounts { name, impressions, conversions }
        })
        .collect();
    ab::evaluate(&counts)
}

/// A page of a site's raw events, newest first, and how many match in all.
pub fn events(
    conn: &Connection,
    site: &Site,
    event_type: Option<EventType>,
    limit: u32,
    offset: u64,
) -> Result<(Vec<StoredEvent>, u64)> {
    let code = event_type.map(EventType::code);
    let total: u64 = conn
        .prepare_cached("SELECT coalesce(sum(events), 0) FROM raw_event_totals WHERE site = ?1 AND (event_type = ?2 OR ?2 IS NULL)")?
        .query_row(params![site.seq, code], |r| r.get(0))?;
    let mut stmt = conn.prepare_cached(
        "SELECT id, client_event_id, session_id, event_type, page_url, metadata, country, occurred_at, received_at
         FROM events WHERE site = ?1 AND (event_type = ?2 OR ?2 IS NULL)
         ORDER BY seq DESC LIMIT ?3 OFFSET ?4",
    )?;
    let events = stmt
        .query_map(params![site.seq, code, limit, offset], |r| stored_event(site, r))?
        .collect::<crate::Result<_>>()?;
    Ok((events, total))
}

/// One row of `events`, selected as `id, client_event_id, session_id,
/// event_type, page_url, metadata, country, occurred_at, received_at`.
pub(crate) fn stored_event(site: &Site, r: &crate::db::Row<'_>) -> crate::Result<StoredEvent> {
    let id: String = r.get(0)?;
    let metadata: Option<String> = r.get(5)?;
    Ok(StoredEvent {
        id: Uuid::parse_str(&id).unwrap_or_default(),
        event_id: r.get(1)?,
        session_id: r.get(2)?,
        site_id: site.id,
        event_type: EventType::from_code(r.get(3)?).map_or("unknown", EventType::as_str),
        page_url: r.get(4)?,
        metadata: metadata
            .and_then(|m| serde_json::from_str(&m).ok())
            .unwrap_or_else(|| serde_json::Value::Object(Default::default())),
        country: r.get(6)?,
        timestamp: iso(from_ms(r.get(7)?)),
        received_at: iso(from_ms(r.get(8)?)),
    })
}

/// The countries a site's sessions came from over the UTC hours `[from, to)`,
/// in alphabetical order (for choosing export filters).
pub fn countries(conn: &Connection, site: &Site, (from, to): (i64, i64)) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT country FROM rollup_hourly WHERE site = ?1 AND hour >= ?2 AND hour < ?3 ORDER BY country",
    )?;
    let countries = stmt.query_map(params![site.seq, from, to], |r| r.get(0))?.collect::<crate::Result<_>>()?;
    Ok(countries)
}
