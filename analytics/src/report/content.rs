//! The figures of each report type (SPEC "Reports"), computed from the hourly
//! rollups for whole local days of the site's timezone — never from raw events.

use std::collections::{BTreeMap, HashMap};

use chrono::{Datelike, NaiveDate};
use crate::db::{params, Connection};
use serde::{Deserialize, Serialize};

use super::config::{Filters, Metric, Spec};
use crate::ab::{self, percent, round2, VariantResult};
use crate::model::{Device, EventType, Site};
use crate::period::{week_monday, Period};
use crate::query::{self, Counters};
use crate::Result;

/// The headline figures of a period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Kpis {
    pub sessions: u64,
    pub adblock_detected: u64,
    /// adblock_detected ÷ sessions × 100.
    pub adblock_share: f64,
    pub walls_displayed: u64,
    pub conversions: u64,
    /// conversions ÷ walls_displayed × 100.
    pub conversion_rate: f64,
}

impl From<Counters> for Kpis {
    fn from(c: Counters) -> Kpis {
        Kpis {
            sessions: c.sessions,
            adblock_detected: c.adblock,
            adblock_share: c.adblock_share(),
            walls_displayed: c.walls,
            conversions: c.conversions,
            conversion_rate: c.conversion_rate(),
        }
    }
}

/// One local day's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DayRow {
    pub date: NaiveDate,
    #[serde(flatten)]
    pub kpis: Kpis,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub previous: u64,
    pub difference: i64,
    /// Relative change in percent; absent when the previous value is 0.
    pub percent: Option<f64>,
}

impl Change {
    fn new(current: u64, previous: u64) -> Change {
        let difference = current as i64 - previous as i64;
        let percent = (previous > 0).then(|| round2(difference as f64 * 100.0 / previous as f64));
        Change { previous, difference, percent }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopEvent {
    pub event_type: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopDevice {
    pub device: String,
    pub sessions: u64,
    /// The device's sessions ÷ all sessions × 100.
    pub share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Daily {
    pub kpis: Kpis,
    pub sessions_change: Change,
    /// The most frequent event type of the day other than `pageview` (which
    /// every session has); absent when there was none.
    pub top_event: Option<TopEvent>,
    pub top_device: Option<TopDevice>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeriodKpis {
    pub start: NaiveDate,
    pub end: NaiveDate,
    pub kpis: Kpis,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weekly {
    pub kpis: Kpis,
    pub previous_week: PeriodKpis,
    /// This week's conversion rate minus the previous week's, in percentage points.
    pub conversion_rate_change_points: f64,
    /// Days ranked by conversion rate among those that displayed the wall;
    /// ties go to the earlier day.
    pub best_day: Option<DayRow>,
    pub worst_day: Option<DayRow>,
    pub ab_winner: Option<VariantResult>,
    pub ab_variants: Vec<VariantResult>,
    pub days: Vec<DayRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeekRow {
    /// The ISO week, e.g. `2026-W44`.
    pub week: String,
    /// The days of that week inside the month.
    pub start: NaiveDate,
    pub end: NaiveDate,
    #[serde(flatten)]
    pub kpis: Kpis,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub sessions: Change,
    pub adblock_detected: Change,
    pub conversions: Change,
    pub adblock_share_change_points: f64,
    pub conversion_rate_change_points: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revenue {
    /// recovered_sessions × pageviews_per_session × revenue_per_1000_pageviews ÷ 1000,
    /// two decimals; 0 when the site has no revenue figure.
    pub estimated_recovered_revenue: f64,
    /// Sessions that converted (got past the wall).
    pub recovered_sessions: u64,
    pub pageviews: u64,
    pub pageviews_per_session: f64,
    pub revenue_per_1000_pageviews: Option<f64>,
    pub configured: bool,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    pub rule: String,
    pub message: String,
    /// The numbers that triggered the rule.
    pub figures: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Monthly {
    pub kpis: Kpis,
    pub weeks: Vec<WeekRow>,
    pub previous_month: PeriodKpis,
    pub comparison: Comparison,
    pub revenue: Revenue,
    pub ab_winner: Option<VariantResult>,
    pub recommendations: Vec<Recommendation>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    /// The device, the country code, or the variant name.
    pub key: String,
    #[serde(flatten)]
    pub kpis: Kpis,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventTotal {
    pub event_type: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Custom {
    pub metrics: Vec<Metric>,
    pub filters: Filters,
    /// The chosen scalar metrics over the period (`sessions`, `conversion_rate` …).
    pub totals: BTreeMap<String, serde_json::Value>,
    /// The chosen scalar metrics per day.
    pub days: Vec<BTreeMap<String, serde_json::Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_device: Option<Vec<Breakdown>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_country: Option<Vec<Breakdown>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_variant: Option<Vec<VariantResult>>,
    /// How many events of the filtered event type happened (filters.event).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<EventTotal>,
}

/// A report's figures, by type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Content {
    Daily(Daily),
    Weekly(Weekly),
    Monthly(Monthly),
    Custom(Custom),
}

impl Content {
    /// Sessions and conversions of the period: every delivery carries them.
    pub fn headline(&self) -> (u64, u64) {
        let k = match self {
            Content::Daily(d) => d.kpis,
            Content::Weekly(w) => w.kpis,
            Content::Monthly(m) => m.kpis,
            Content::Custom(c) => {
                let get = |k: &str| c.totals.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
                return (get("sessions"), get("conversions"));
            }
        };
        (k.sessions, k.conversions)
    }
}

/// Which rollup rows a figure counts: device and countries (custom filters).
#[derive(Debug, Clone, Default)]
struct Scope {
    device: Option<Device>,
    countries: Vec<String>,
}

impl Scope {
    fn of(f: &Filters) -> Scope {
        Scope { device: f.device, countries: f.countries.clone() }
    }

    fn countries_json(&self) -> Option<String> {
        (!self.countries.is_empty()).then(|| serde_json::to_string(&self.countries).unwrap_or_default())
    }
}

const SCOPE_SQL: &str = "site = ?1 AND hour >= ?2 AND hour < ?3 AND (device = ?4 OR ?4 IS NULL)
     AND (country IN (SELECT value FROM json_each(?5)) OR ?5 IS NULL)";

fn counters_row(r: &crate::db::Row<'_>, at: usize) -> crate::Result<Counters> {
    Ok(Counters {
        sessions: r.get(at)?,
        adblock: r.get(at + 1)?,
        walls: r.get(at + 2)?,
        dismissed: r.get(at + 3)?,
        conversions: r.get(at + 4)?,
    })
}

/// Counters per local day of the period, every day present.
fn per_day(conn: &Connection, site: &Site, period: &Period, scope: &Scope) -> Result<Vec<(NaiveDate, Counters)>> {
    let (from, to) = period.hour_range();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT hour, sum(sessions), sum(adblock), sum(walls), sum(dismissed), sum(conversions)
         FROM rollup_hourly WHERE {SCOPE_SQL} GROUP BY hour"
    ))?;
    let mut days: BTreeMap<NaiveDate, Counters> = period.dates().map(|d| (d, Counters::default())).collect();
    let rows = stmt.query_map(
        params![site.seq, from, to, scope.device.map(Device::code), scope.countries_json()],
        |r| Ok((r.get::<_, i64>(0)?, counters_row(r, 1)?)),
    )?;
    for row in rows {
        let (hour, c) = row?;
        days.entry(period.date_of_hour(hour)).or_default().add(&c);
    }
    Ok(days.into_iter().collect())
}

fn total(days: &[(NaiveDate, Counters)]) -> Counters {
    let mut t = Counters::default();
    for (_, c) in days {
        t.add(c);
    }
    t
}

/// Counters grouped by a rollup column (`device`, `country` or `variant`).
fn grouped(conn: &Connection, site: &Site, period: &Period, scope: &Scope, column: &str) -> Result<Vec<(String, Counters, u64)>> {
    let (from, to) = period.hour_range();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT CAST({column} AS TEXT), sum(sessions), sum(adblock), sum(walls), sum(dismissed), sum(conversions), sum(wall_conversions)
         FROM rollup_hourly WHERE {SCOPE_SQL} GROUP BY {column} ORDER BY sum(sessions) DESC, {column}"
    ))?;
    let rows = stmt
        .query_map(params![site.seq, from, to, scope.device.map(Device::code), scope.countries_json()], |r| {
            Ok((r.get::<_, String>(0)?, counters_row(r, 1)?, r.get::<_, u64>(6)?))
        })?
        .collect::<crate::Result<Vec<_>>>()?;
    Ok(rows)
}

fn by_device(conn: &Connection, site: &Site, period: &Period, scope: &Scope) -> Result<Vec<Breakdown>> {
    Ok(grouped(conn, site, period, scope, "device")?
        .into_iter()
        .map(|(code, c, _)| Breakdown {
            key: code.parse().ok().and_then(Device::from_code).map_or("unknown", Device::as_str).to_owned(),
            kpis: c.into(),
        })
        .collect())
}

fn by_country(conn: &Connection, site: &Site, period: &Period, scope: &Scope) -> Result<Vec<Breakdown>> {
    Ok(grouped(conn, site, period, scope, "country")?
        .into_iter()
        .map(|(key, c, _)| Breakdown { key, kpis: c.into() })
        .collect())
}

/// A/B results over the period: the site's variants, then any other seen.
fn variants(conn: &Connection, site: &Site, period: &Period, scope: &Scope) -> Result<Vec<VariantResult>> {
    let seen: HashMap<String, (u64, u64)> = grouped(conn, site, period, scope, "variant")?
        .into_iter()
        .filter(|(name, _, _)| !name.is_empty())
        .map(|(name, c, wall_conversions)| (name, (c.walls, wall_conversions)))
        .collect();
    Ok(query::variant_results(site, &seen))
}

fn winner(results: &[VariantResult]) -> Option<VariantResult> {
    results.iter().find(|v| v.is_winner == Some(true)).cloned()
}

/// Event counts per type over the period.
fn event_counts(conn: &Connection, site: &Site, period: &Period, scope: &Scope) -> Result<BTreeMap<EventType, u64>> {
    let (from, to) = period.hour_range();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT event_type, sum(events) FROM event_counts_hourly WHERE {SCOPE_SQL} GROUP BY event_type"
    ))?;
    let rows = stmt
        .query_map(params![site.seq, from, to, scope.device.map(Device::code), scope.countries_json()], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, u64>(1)?))
        })?
        .collect::<crate::Result<Vec<_>>>()?;
    Ok(rows.into_iter().filter_map(|(code, n)| Some((EventType::from_code(code)?, n))).collect())
}

fn rows(days: &[(NaiveDate, Counters)]) -> Vec<DayRow> {
    days.iter().map(|(date, c)| DayRow { date: *date, kpis: (*c).into() }).collect()
}

fn shifted(period: &Period, days: i64) -> Period {
    let by = chrono::Duration::days(days);
    Period::new(period.start - by, period.end - by, period.tz)
}

pub fn daily(conn: &Connection, site: &Site, period: &Period) -> Result<Daily> {
    let scope = Scope::default();
    let today = total(&per_day(conn, site, period, &scope)?);
    let before = total(&per_day(conn, site, &shifted(period, 1), &scope)?);
    let top_event = event_counts(conn, site, period, &scope)?
        .into_iter()
        .filter(|(t, n)| *t != EventType::Pageview && *n > 0)
        // Highest count; on a tie the type listed first in the vocabulary.
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(t, count)| TopEvent { event_type: t.as_str().to_owned(), count });
    let top_device = by_device(conn, site, period, &scope)?
        .into_iter()
        .find(|b| b.kpis.sessions > 0)
        .map(|b| TopDevice { share: percent(b.kpis.sessions, today.sessions), device: b.key, sessions: b.kpis.sessions });
    Ok(Daily { kpis: today.into(), sessions_change: Change::new(today.sessions, before.sessions), top_event, top_device })
}

pub fn weekly(conn: &Connection, site: &Site, period: &Period) -> Result<Weekly> {
    let scope = Scope::default();
    let days = per_day(conn, site, period, &scope)?;
    let kpis: Kpis = total(&days).into();
    let prev_period = shifted(period, 7);
    let prev: Kpis = total(&per_day(conn, site, &prev_period, &scope)?).into();
    let ranked: Vec<DayRow> = rows(&days).into_iter().filter(|d| d.kpis.walls_displayed > 0).collect();
    // `max_by`/`min_by` keep the last/first of equals: reverse for the best so the earlier day wins.
    let best_day = ranked.iter().rev().max_by(|a, b| a.kpis.conversion_rate.total_cmp(&b.kpis.conversion_rate)).cloned();
    let worst_day = ranked.iter().min_by(|a, b| a.kpis.conversion_rate.total_cmp(&b.kpis.conversion_rate)).cloned();
    let ab_variants = variants(conn, site, period, &scope)?;
    Ok(Weekly {
        kpis,
        previous_week: PeriodKpis { start: prev_period.start, end: prev_period.end, kpis: prev },
        conversion_rate_change_points: round2(kpis.conversion_rate - prev.conversion_rate),
        best_day,
        worst_day,
        ab_winner: winner(&ab_variants),
        ab_variants,
        days: rows(&days),
    })
}

/// The calendar month before the one `period` starts in.
fn previous_month(period: &Period) -> Period {
    let first = period.start.with_day(1).unwrap_or(period.start);
    let end = first.pred_opt().unwrap_or(first);
    Period::new(end.with_day(1).unwrap_or(end), end, period.tz)
}

pub fn monthly(conn: &Connection, site: &Site, period: &Period) -> Result<Monthly> {
    let scope = Scope::default();
    let days = per_day(conn, site, period, &scope)?;
    let month = total(&days);
    let kpis: Kpis = month.into();

    // ISO weeks clipped to the month: the first and last may be partial.
    let mut spans: Vec<(NaiveDate, NaiveDate, Counters)> = Vec::new();
    for (date, c) in &days {
        match spans.last_mut() {
            Some((start, end, t)) if week_monday(*start) == week_monday(*date) => {
                t.add(c);
                *end = *date;
            }
            _ => spans.push((*date, *date, *c)),
        }
    }
    let weeks = spans
        .into_iter()
        .map(|(start, end, c)| {
            let iso = start.iso_week();
            WeekRow { week: format!("{}-W{:02}", iso.year(), iso.week()), start, end, kpis: c.into() }
        })
        .collect();

    let prev_period = previous_month(period);
    let prev: Kpis = total(&per_day(conn, site, &prev_period, &scope)?).into();
    let comparison = Comparison {
        sessions: Change::new(kpis.sessions, prev.sessions),
        adblock_detected: Change::new(kpis.adblock_detected, prev.adblock_detected),
        conversions: Change::new(kpis.conversions, prev.conversions),
        adblock_share_change_points: round2(kpis.adblock_share - prev.adblock_share),
        conversion_rate_change_points: round2(kpis.conversion_rate - prev.conversion_rate),
    };

    let pageviews = event_counts(conn, site, period, &scope)?.get(&EventType::Pageview).copied().unwrap_or(0);
    let revenue = revenue(month.conversions, pageviews, month.sessions, site.revenue_per_mille);
    let ab_variants = variants(conn, site, period, &scope)?;
    let recommendations = recommend(&month, &prev, &revenue, &ab_variants);
    Ok(Monthly {
        kpis,
        weeks,
        previous_month: PeriodKpis { start: prev_period.start, end: prev_period.end, kpis: prev },
        comparison,
        revenue,
        ab_winner: winner(&ab_variants),
        recommendations,
    })
}

/// DESIGN §7: recovered sessions × pageviews per session × revenue per 1000 pageviews ÷ 1000.
fn revenue(recovered: u64, pageviews: u64, sessions: u64, per_mille: Option<f64>) -> Revenue {
    let per_session = if sessions == 0 { 0.0 } else { pageviews as f64 / sessions as f64 };
    let (estimate, note) = match per_mille {
        Some(rpm) => (
            round2(recovered as f64 * per_session * rpm / 1000.0),
            format!(
                "{recovered} recovered sessions × {:.2} pageviews per session × {rpm:.2} per 1000 pageviews ÷ 1000",
                per_session
            ),
        ),
        None => (
            0.0,
            "no revenue per 1000 pageviews is configured for this site, so recovered revenue cannot be estimated; set revenue_per_1000_pageviews on the site".to_owned(),
        ),
    };
    Revenue {
        estimated_recovered_revenue: estimate,
        recovered_sessions: recovered,
        pageviews,
        pageviews_per_session: round2(per_session),
        revenue_per_1000_pageviews: per_mille,
        configured: per_mille.is_some(),
        note,
    }
}

/// Walls needed before rates are trusted by the rules below.
const MIN_WALLS: u64 = 100;

fn rule(name: &str, message: String, figures: &[(&str, f64)]) -> Recommendation {
    Recommendation {
        rule: name.to_owned(),
        message,
        figures: figures.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    }
}

/// Rule-based advice; each message cites the numbers that triggered it.
fn recommend(month: &Counters, prev: &Kpis, revenue: &Revenue, variants: &[VariantResult]) -> Vec<Recommendation> {
    let mut out = Vec::new();
    if month.sessions == 0 {
        out.push(rule(
            "no_traffic",
            "No session was recorded this month: check that the Postern script is still on your pages.".into(),
            &[("sessions", 0.0)],
        ));
        return out;
    }
    let share = month.adblock_share();
    if share >= 30.0 {
        out.push(rule(
            "high_adblock_share",
            format!(
                "{share:.2}% of sessions ({} of {}) used an ad blocker: the wall matters for a large part of your audience.",
                month.adblock, month.sessions
            ),
            &[("adblock_share", share), ("adblock_detected", month.adblock as f64), ("sessions", month.sessions as f64)],
        ));
    }
    let coverage = percent(month.walls, month.adblock);
    if month.adblock >= 20 && coverage < 80.0 {
        out.push(rule(
            "low_wall_coverage",
            format!(
                "Only {coverage:.2}% of the {} ad-blocking sessions saw the wall ({} walls displayed): review the wall's excluded paths and frequency cap.",
                month.adblock, month.walls
            ),
            &[("wall_coverage", coverage), ("adblock_detected", month.adblock as f64), ("walls_displayed", month.walls as f64)],
        ));
    }
    let rate = month.conversion_rate();
    if month.walls >= MIN_WALLS && rate < 10.0 {
        out.push(rule(
            "low_conversion_rate",
            format!(
                "The wall converted {rate:.2}% of {} displays ({} conversions): try clearer allow-listing instructions or the best A/B variant.",
                month.walls, month.conversions
            ),
            &[("conversion_rate", rate), ("walls_displayed", month.walls as f64), ("conversions", month.conversions as f64)],
        ));
    }
    let drop = round2(rate - prev.conversion_rate);
    if prev.walls_displayed >= MIN_WALLS && drop <= -2.0 {
        out.push(rule(
            "conversion_rate_drop",
            format!(
                "The conversion rate fell by {:.2} points, from {:.2}% to {rate:.2}%: check recent changes to the wall or the site.",
                -drop, prev.conversion_rate
            ),
            &[("conversion_rate", rate), ("previous_conversion_rate", prev.conversion_rate), ("change_points", drop)],
        ));
    }
    let dismissed = percent(month.dismissed, month.walls);
    if month.walls >= MIN_WALLS && dismissed >= 50.0 {
        out.push(rule(
            "high_dismissal",
            format!(
                "{dismissed:.2}% of the {} walls were dismissed ({} sessions): a longer delay before the dismiss link, or a hard wall, would keep more visitors on the wall.",
                month.walls, month.dismissed
            ),
            &[("dismissed_share", dismissed), ("walls_dismissed", month.dismissed as f64), ("walls_displayed", month.walls as f64)],
        ));
    }
    if let Some(w) = variants.iter().find(|v| v.is_winner == Some(true) && v.name != ab::CONTROL) {
        let control = variants.iter().find(|v| v.name == ab::CONTROL).map_or(0.0, |c| c.conversion_rate);
        out.push(rule(
            "ab_winner",
            format!(
                "Variant {} converted {:.2}% against {control:.2}% for control ({:.2}% confidence over {} impressions): make it the default wall.",
                w.name, w.conversion_rate, w.confidence, w.impressions
            ),
            &[("conversion_rate", w.conversion_rate), ("control_conversion_rate", control), ("confidence", w.confidence), ("impressions", w.impressions as f64)],
        ));
    }
    if !revenue.configured {
        out.push(rule(
            "set_revenue_figure",
            format!(
                "{} sessions were recovered this month, but the site has no revenue per 1000 pageviews: set it to see the revenue they bring.",
                revenue.recovered_sessions
            ),
            &[("recovered_sessions", revenue.recovered_sessions as f64)],
        ));
    }
    out
}

pub fn custom(conn: &Connection, site: &Site, period: &Period, spec: &Spec) -> Result<Custom> {
    let scope = Scope::of(&spec.filters);
    let days = per_day(conn, site, period, &scope)?;
    // Counts as integers, the rate as a number with two decimals.
    let scalar = |k: &Kpis, m: Metric| -> Option<serde_json::Value> {
        Some(match m {
            Metric::Sessions => k.sessions.into(),
            Metric::AdblockDetected => k.adblock_detected.into(),
            Metric::WallsDisplayed => k.walls_displayed.into(),
            Metric::Conversions => k.conversions.into(),
            Metric::ConversionRate => k.conversion_rate.into(),
            Metric::ByDevice | Metric::ByCountry | Metric::ByVariant => return None,
        })
    };
    let whole: Kpis = total(&days).into();
    let totals = spec.metrics.iter().filter_map(|m| Some((m.as_str().to_owned(), scalar(&whole, *m)?))).collect();
    let day_rows = rows(&days)
        .into_iter()
        .map(|d| {
            let mut row = BTreeMap::new();
            row.insert("date".to_owned(), serde_json::json!(d.date));
            for m in &spec.metrics {
                if let Some(v) = scalar(&d.kpis, *m) {
                    row.insert(m.as_str().to_owned(), v);
                }
            }
            row
        })
        .collect();
    let has = |m: Metric| spec.metrics.contains(&m);
    let event = match spec.filters.event {
        Some(t) => Some(EventTotal {
            event_type: t.as_str().to_owned(),
            count: event_counts(conn, site, period, &scope)?.get(&t).copied().unwrap_or(0),
        }),
        None => None,
    };
    Ok(Custom {
        metrics: spec.metrics.clone(),
        filters: spec.filters.clone(),
        totals,
        days: day_rows,
        by_device: if has(Metric::ByDevice) { Some(by_device(conn, site, period, &scope)?) } else { None },
        by_country: if has(Metric::ByCountry) { Some(by_country(conn, site, period, &scope)?) } else { None },
        by_variant: if has(Metric::ByVariant) { Some(variants(conn, site, period, &scope)?) } else { None },
        event,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revenue_follows_the_design_formula_and_says_when_it_cannot() {
        // 40 recovered sessions, 3 pageviews per session, 12.50 per 1000 pageviews.
        let r = revenue(40, 300, 100, Some(12.5));
        assert_eq!(r.estimated_recovered_revenue, 1.5);
        assert_eq!(r.pageviews_per_session, 3.0);
        assert!(r.configured);
        let r = revenue(40, 300, 100, None);
        assert_eq!(r.estimated_recovered_revenue, 0.0);
        assert!(!r.configured);
        assert!(r.note.contains("no revenue per 1000 pageviews"), "{}", r.note);
    }

    #[test]
    fn recommendations_cite_their_numbers() {
        let month = Counters { sessions: 1000, adblock: 400, walls: 200, dismissed: 120, conversions: 10 };
        let prev = Kpis { walls_displayed: 300, conversion_rate: 12.0, ..Kpis::default() };
        let rev = revenue(10, 3000, 1000, None);
        let recs = recommend(&month, &prev, &rev, &[]);
        let names: Vec<&str> = recs.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(
            names,
            ["high_adblock_share", "low_wall_coverage", "low_conversion_rate", "conversion_rate_drop", "high_dismissal", "set_revenue_figure"]
        );
        assert!(recs[0].message.contains("40.00% of sessions (400 of 1000)"), "{}", recs[0].message);
        assert!(recs[1].message.contains("Only 50.00% of the 400"), "{}", recs[1].message);
        assert!(recs[3].message.contains("from 12.00% to 5.00%"), "{}", recs[3].message);
        assert_eq!(recs[3].figures["change_points"], -7.0);
        assert!(recs[4].message.contains("60.00% of the 200 walls"), "{}", recs[4].message);
        let quiet = recommend(&Counters::default(), &Kpis::default(), &rev, &[]);
        assert_eq!(quiet.len(), 1);
        assert_eq!(quiet[0].rule, "no_traffic");
    }

    #[test]
    fn content_reads_back_from_its_stored_form() {
        let c = Content::Daily(Daily {
            kpis: Kpis { sessions: 3, ..Kpis::default() },
            sessions_change: Change::new(3, 2),
            top_event: Some(TopEvent { event_type: "adblock_detected".into(), count: 2 }),
            top_device: None,
        });
        let stored = serde_json::to_value(&c).unwrap();
        assert_eq!(stored["daily"]["sessions_change"]["percent"], 50.0);
        assert_eq!(serde_json::from_value::<Content>(stored).unwrap(), c);
    }
}
