//! Reports as data: their configurations, when they are due, the figures of a
//! run, and the runs kept forever. Rendering and delivery belong to the collector.
//!
//! A scheduled run is unique per configuration and occurrence (the local date
//! it fires on), enforced by the database: generating the same occurrence twice,
//! after a restart or from two ticks, stores it once.

pub mod config;
pub mod content;
pub mod schedule;

use chrono::{DateTime, NaiveDate, Utc};
use crate::db::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::accounts::{from_ms, ms};
use crate::model::{iso, Site};
use crate::period::Period;
use crate::{Error, Result};
pub use config::{Channel, Draft, Format, Invalid, Metric, Recipient, ReportType, Spec};
pub use content::Content;
pub use schedule::Occurrence;

/// A stored report configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportConfig {
    pub id: Uuid,
    pub site_id: Uuid,
    pub draft: Draft,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const CONFIG_COLUMNS: &str = "id, site_id, name, type, enabled, spec, created_at, updated_at";

fn config_from_row(r: &Row<'_>) -> crate::Result<std::result::Result<ReportConfig, String>> {
    let id: String = r.get(0)?;
    let site_id: String = r.get(1)?;
    let kind: String = r.get(3)?;
    let spec: String = r.get(5)?;
    let parsed = (|| {
        Ok(ReportConfig {
            id: Uuid::parse_str(&id).map_err(|e| e.to_string())?,
            site_id: Uuid::parse_str(&site_id).map_err(|e| e.to_string())?,
            draft: Draft {
                name: r.get(2).map_err(|e| e.to_string())?,
                kind: ReportType::parse(&kind).ok_or_else(|| format!("report type {kind}"))?,
                enabled: r.get(4).map_err(|e| e.to_string())?,
                spec: serde_json::from_str(&spec).map_err(|e| format!("report {id} spec: {e}"))?,
            },
            created_at: from_ms(r.get(6).map_err(|e| e.to_string())?),
            updated_at: from_ms(r.get(7).map_err(|e| e.to_string())?),
        })
    })();
    Ok(parsed)
}

fn collect_configs(rows: impl Iterator<Item = crate::Result<std::result::Result<ReportConfig, String>>>) -> Result<Vec<ReportConfig>> {
    rows.map(|r| r?.map_err(Error::Corrupt)).collect()
}

fn spec_json(d: &Draft) -> String {
    serde_json::to_string(&d.spec).unwrap_or_default()
}

pub fn create(conn: &Connection, site_id: Uuid, draft: Draft, now: DateTime<Utc>) -> Result<ReportConfig> {
    let c = ReportConfig { id: Uuid::new_v4(), site_id, draft, created_at: now, updated_at: now };
    conn.execute(
        "INSERT INTO report_configs (id, site_id, name, type, enabled, spec, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        params![c.id.to_string(), site_id.to_string(), c.draft.name, c.draft.kind.as_str(), c.draft.enabled, spec_json(&c.draft), ms(now)],
    )?;
    Ok(c)
}

/// The site's reports, oldest first.
pub fn list(conn: &Connection, site_id: Uuid) -> Result<Vec<ReportConfig>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CONFIG_COLUMNS} FROM report_configs WHERE site_id = ?1 AND deleted_at IS NULL ORDER BY created_at, id"
    ))?;
    let rows = stmt.query_map([site_id.to_string()], config_from_row)?;
    collect_configs(rows)
}

pub fn get(conn: &Connection, site_id: Uuid, id: Uuid) -> Result<Option<ReportConfig>> {
    let found = conn
        .prepare_cached(&format!(
            "SELECT {CONFIG_COLUMNS} FROM report_configs WHERE id = ?1 AND site_id = ?2 AND deleted_at IS NULL"
        ))?
        .query_row(params![id.to_string(), site_id.to_string()], config_from_row)
        .optional()?;
    found.map(|r| r.map_err(Error::Corrupt)).transpose()
}

pub fn update(conn: &Connection, site_id: Uuid, id: Uuid, draft: Draft, now: DateTime<Utc>) -> Result<ReportConfig> {
    let mut c = get(conn, site_id, id)?.ok_or(Error::NotFound("report"))?;
    conn.execute(
        "UPDATE report_configs SET name = ?2, enabled = ?3, spec = ?4, updated_at = ?5 WHERE id = ?1",
        params![id.to_string(), draft.name, draft.enabled, spec_json(&draft), ms(now)],
    )?;
    c.draft = draft;
    c.updated_at = now;
    Ok(c)
}

/// Removes a report from the API and the schedule; its runs stay fetchable.
pub fn delete(conn: &Connection, site_id: Uuid, id: Uuid, now: DateTime<Utc>) -> Result<()> {
    let n = conn.execute(
        "UPDATE report_configs SET deleted_at = ?3 WHERE id = ?1 AND site_id = ?2 AND deleted_at IS NULL",
        params![id.to_string(), site_id.to_string(), ms(now)],
    )?;
    if n == 0 {
        return Err(Error::NotFound("report"));
    }
    Ok(())
}

/// Every enabled report of a live site, with its site: what the scheduler looks at.
pub fn scheduled(conn: &Connection) -> Result<Vec<(ReportConfig, Uuid)>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CONFIG_COLUMNS} FROM report_configs
         WHERE enabled = 1 AND deleted_at IS NULL
           AND site_id IN (SELECT id FROM sites WHERE deleted_at IS NULL)
         ORDER BY created_at, id"
    ))?;
    let rows = stmt.query_map((), config_from_row)?;
    Ok(collect_configs(rows)?.into_iter().map(|c| { let s = c.site_id; (c, s) }).collect())
}

impl ReportConfig {
    /// The occurrence that should have a run by `now`: the latest one at or
    /// before `now`, provided the report existed then (a new report waits for
    /// its next occurrence). Only the latest counts: a collector that was down
    /// for several periods sends the most recent report once, not a backlog.
    pub fn due(&self, site: &Site, now: DateTime<Utc>) -> Option<Occurrence> {
        let o = self.draft.spec.schedule.latest_at_or_before(site.timezone, now);
        (o.at >= self.created_at).then_some(o)
    }

    /// The local days a run sent on `date` covers.
    pub fn period_on(&self, site: &Site, date: NaiveDate) -> Period {
        let s = &self.draft.spec;
        let (start, end) = schedule::period_for(self.draft.kind, &s.schedule, &s.filters, date);
        Period::new(start, end, site.timezone)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// Generated at its scheduled time.
    Schedule,
    /// Generated late, at start-up or after a pause: the collector was down at the scheduled time.
    CatchUp,
    /// "Send now".
    Manual,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::CatchUp => "catch_up",
            Trigger::Manual => "manual",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteRef {
    pub id: Uuid,
    pub name: String,
    pub domain: String,
    pub timezone: String,
    pub revenue_per_1000_pageviews: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dates {
    pub start: NaiveDate,
    pub end: NaiveDate,
}

/// A generated report, exactly as stored and served as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDocument {
    pub id: Uuid,
    pub report_id: Uuid,
    pub report_name: String,
    #[serde(rename = "type")]
    pub kind: ReportType,
    pub format: Format,
    pub site: SiteRef,
    pub period: Dates,
    pub trigger: Trigger,
    /// The scheduled instant, for scheduled runs.
    pub scheduled_for: Option<String>,
    pub generated_at: String,
    /// The figures, under the type's name (`"daily": {…}`).
    #[serde(flatten)]
    pub content: Content,
}

/// Computes a run of `config` for `period` (reads rollups only; stores nothing).
pub fn build(
    conn: &Connection,
    site: &Site,
    config: &ReportConfig,
    period: &Period,
    trigger: Trigger,
    scheduled_for: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<RunDocument> {
    let content = match config.draft.kind {
        ReportType::Daily => Content::Daily(content::daily(conn, site, period)?),
        ReportType::Weekly => Content::Weekly(content::weekly(conn, site, period)?),
        ReportType::Monthly => Content::Monthly(content::monthly(conn, site, period)?),
        ReportType::Custom => Content::Custom(content::custom(conn, site, period, &config.draft.spec)?),
    };
    Ok(RunDocument {
        id: Uuid::now_v7(),
        report_id: config.id,
        report_name: config.draft.name.clone(),
        kind: config.draft.kind,
        format: config.draft.spec.format,
        site: SiteRef {
            id: site.id,
            name: site.name.clone(),
            domain: site.domain.clone(),
            timezone: site.timezone.name().to_owned(),
            revenue_per_1000_pageviews: site.revenue_per_mille,
        },
        period: Dates { start: period.start, end: period.end },
        trigger,
        scheduled_for: scheduled_for.map(iso),
        generated_at: iso(now),
        content,
    })
}

/// Whether the occurrence already has its run.
pub fn has_run(conn: &Connection, config_id: Uuid, occurrence: NaiveDate) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM report_runs WHERE config_id = ?1 AND occurrence = ?2")?
        .query_row(params![config_id.to_string(), occurrence.to_string()], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Stores a run; `false` (and nothing stored) when its occurrence already has one.
pub fn insert_run(conn: &Connection, doc: &RunDocument, occurrence: Option<NaiveDate>, now: DateTime<Utc>) -> Result<bool> {
    let json = serde_json::to_string(doc).map_err(|e| Error::Corrupt(e.to_string()))?;
    let scheduled: Option<i64> = doc
        .scheduled_for
        .as_deref()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.timestamp_millis());
    let n = conn.execute(
        "INSERT INTO report_runs (id, config_id, site_id, type, occurrence, period_start, period_end, trigger, scheduled_for, created_at, content)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT DO NOTHING",
        params![
            doc.id.to_string(),
            doc.report_id.to_string(),
            doc.site.id.to_string(),
            doc.kind.as_str(),
            occurrence.map(|d| d.to_string()),
            doc.period.start.to_string(),
            doc.period.end.to_string(),
            doc.trigger.as_str(),
            scheduled,
            ms(now),
            json
        ],
    )?;
    Ok(n == 1)
}

/// Records that a run was handed to the delivery outbox.
pub fn mark_enqueued(conn: &Connection, run_id: Uuid, now: DateTime<Utc>) -> Result<()> {
    conn.execute("UPDATE report_runs SET enqueued_at = ?2 WHERE id = ?1", params![run_id.to_string(), ms(now)])?;
    Ok(())
}

fn parse_doc(json: &str) -> Result<RunDocument> {
    serde_json::from_str(json).map_err(|e| Error::Corrupt(format!("report run: {e}")))
}

/// Runs of live sites stored but not yet handed to delivery, oldest first.
pub fn unenqueued(conn: &Connection) -> Result<Vec<RunDocument>> {
    let mut stmt = conn.prepare_cached(
        "SELECT content FROM report_runs WHERE enqueued_at IS NULL
           AND site_id IN (SELECT id FROM sites WHERE deleted_at IS NULL)
         ORDER BY created_at, id",
    )?;
    let docs = stmt.query_map((), |r| r.get::<_, String>(0))?.collect::<crate::Result<Vec<_>>>()?;
    docs.iter().map(|j| parse_doc(j)).collect()
}

pub fn get_run(conn: &Connection, run_id: Uuid) -> Result<Option<RunDocument>> {
    let json: Option<String> = conn
        .prepare_cached("SELECT content FROM report_runs WHERE id = ?1")?
        .query_row([run_id.to_string()], |r| r.get(0))
        .optional()?;
    json.map(|j| parse_doc(&j)).transpose()
}

/// A run as listed: what it is, not its figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub id: Uuid,
    pub report_id: Uuid,
    #[serde(rename = "type")]
    pub kind: String,
    pub period: Dates,
    pub trigger: String,
    pub scheduled_for: Option<String>,
    pub created_at: String,
    /// When the run was handed to delivery; null while it has not been.
    pub enqueued_at: Option<String>,
}

/// A report's runs, newest first, and how many there are.
pub fn list_runs(conn: &Connection, config_id: Uuid, limit: u32, offset: u64) -> Result<(Vec<RunSummary>, u64)> {
    let total: u64 = conn
        .prepare_cached("SELECT count(*) FROM report_runs WHERE config_id = ?1")?
        .query_row([config_id.to_string()], |r| r.get(0))?;
    let mut stmt = conn.prepare_cached(
        "SELECT id, type, period_start, period_end, trigger, scheduled_for, created_at, enqueued_at
         FROM report_runs WHERE config_id = ?1 ORDER BY created_at DESC, id DESC LIMIT ?2 OFFSET ?3",
    )?;
    let runs = stmt
        .query_map(params![config_id.to_string(), limit, offset], |r| {
            let id: String = r.get(0)?;
            let start: String = r.get(2)?;
            let end: String = r.get(3)?;
            Ok(RunSummary {
                id: Uuid::parse_str(&id).unwrap_or_default(),
                report_id: config_id,
                kind: r.get(1)?,
                period: Dates { start: start.parse().unwrap_or_default(), end: end.parse().unwrap_or_default() },
                trigger: r.get(4)?,
                scheduled_for: r.get::<_, Option<i64>>(5)?.map(|t| iso(from_ms(t))),
                created_at: iso(from_ms(r.get(6)?)),
                enqueued_at: r.get::<_, Option<i64>>(7)?.map(|t| iso(from_ms(t))),
            })
        })?
        .collect::<crate::Result<_>>()?;
    Ok((runs, total))
}

/// A stored run for exports: its identity, period and the JSON document.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRun {
    pub id: Uuid,
    pub kind: ReportType,
    pub period_start: NaiveDate,
    pub period_end: NaiveDate,
    pub created_at: DateTime<Utc>,
    pub json: serde_json::Value,
}

/// Every run of a site generated in `[from, to)`, oldest first (for the ZIP export).
pub fn runs_between(conn: &Connection, site_id: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<StoredRun>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, type, period_start, period_end, created_at, content FROM report_runs
         WHERE site_id = ?1 AND created_at >= ?2 AND created_at < ?3 ORDER BY created_at, id",
    )?;
    let rows = stmt
        .query_map(params![site_id, ms(from), ms(to)], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?, r.get::<_, i64>(4)?, r.get::<_, String>(5)?))
        })?
        .collect::<crate::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(id, kind, start, end, created, json)| {
            let corrupt = |what: &str| Error::Corrupt(format!("report run {id}: {what}"));
            Ok(StoredRun {
                id: Uuid::parse_str(&id).map_err(|_| corrupt("id"))?,
                kind: ReportType::parse(&kind).ok_or_else(|| corrupt("type"))?,
                period_start: start.parse().map_err(|_| corrupt("period"))?,
                period_end: end.parse().map_err(|_| corrupt("period"))?,
                created_at: from_ms(created),
                json: serde_json::from_str(&json).map_err(|_| corrupt("content"))?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;
    use crate::sites::{self, NewSite};
    use crate::store::testing::temp_store;

    #[test]
    fn an_occurrence_is_stored_once_and_runs_stay_listed() {
        let (_dir, store) = temp_store();
        let mut writer = store.open_writer(crate::store::Durability::Normal).unwrap();
        let now = Utc.with_ymd_and_hms(2026, 11, 23, 7, 0, 30).unwrap();
        let (site, config) = writer
            .run(|c| {
                let account = crate::accounts::ensure_account(c, "acme", now)?;
                let new = NewSite { account_id: account, name: "Acme", domain: "acme.test", timezone: chrono_tz::Europe::Paris, revenue_per_mille: None };
                let site = sites::create(c, &new, now - chrono::Duration::days(30))?;
                let body = json!({"type": "weekly", "channels": ["webhook"]});
                let draft = Draft::from_json(body.as_object().unwrap(), None).map_err(|e| Error::Conflict(e.message))?;
                let config = create(c, site.id, draft, now - chrono::Duration::days(1))?;
                Ok((site, config))
            })
            .unwrap();
        let o = config.due(&site, now).expect("Monday 08:00 in Paris is due");
        assert_eq!(o.at, Utc.with_ymd_and_hms(2026, 11, 23, 7, 0, 0).unwrap());
        let period = config.period_on(&site, o.date);
        let build_one = || store.read(|c| build(c, &site, &config, &period, Trigger::Schedule, Some(o.at), now)).unwrap();
        let (first, second) = (build_one(), build_one());
        assert!(writer.run(|c| insert_run(c, &first, Some(o.date), now)).unwrap());
        assert!(!writer.run(|c| insert_run(c, &second, Some(o.date), now)).unwrap(), "the same occurrence twice");
        assert!(store.read(|c| has_run(c, config.id, o.date)).unwrap());
        // A manual run has no occurrence and never conflicts.
        let manual = store.read(|c| build(c, &site, &config, &period, Trigger::Manual, None, now)).unwrap();
        assert!(writer.run(|c| insert_run(c, &manual, None, now)).unwrap());

        let (listed, total) = store.read(|c| list_runs(c, config.id, 10, 0)).unwrap();
        assert_eq!(total, 2);
        // Newest first: the manual run was stored last.
        assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), vec![manual.id, first.id]);
        assert_eq!(store.read(|c| get_run(c, first.id)).unwrap(), Some(first.clone()));
        assert_eq!(store.read(unenqueued).unwrap().len(), 2);
        writer.run(|c| mark_enqueued(c, first.id, now)).unwrap();
        assert_eq!(store.read(unenqueued).unwrap(), vec![manual.clone()]);

        let site_id = site.id.to_string();
        let all = store.read(|c| runs_between(c, &site_id, now - chrono::Duration::hours(1), now + chrono::Duration::hours(1))).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].kind, all[0].period_start, all[0].period_end), (ReportType::Weekly, period.start, period.end));
        assert_eq!(all[0].json["id"], json!(all[0].id));
        assert!(store.read(|c| runs_between(c, &site_id, now + chrono::Duration::seconds(1), now + chrono::Duration::hours(1))).unwrap().is_empty());
        // Deleting the report keeps its runs.
        writer.run(|c| delete(c, site.id, config.id, now)).unwrap();
        assert_eq!(store.read(|c| get(c, site.id, config.id)).unwrap(), None);
        assert!(store.read(|c| get_run(c, first.id)).unwrap().is_some());
    }
}
