//! The complete-history ZIP of a period: the CSV, the JSON, the raw events as
//! JSON Lines (those still within raw retention), the report runs generated in
//! the period, and a `manifest.json` listing every file with its row count.
//!
//! The archive is written as a stream (data descriptors, no seeking back), so
//! it can go straight to an HTTP body; the manifest comes last because only
//! then are the row counts known.

use std::io::Write;

use chrono::{DateTime, Utc};
use crate::db::{params, Connection, Engine};
use serde::Serialize;
use serde_json::json;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::{csv, json, Selection, Summary};
use crate::model::{iso, Device, Site};
use crate::period::hour_start;
use crate::query::stored_event;
use crate::report;
use crate::Result;

/// What the archive describes besides the selection.
#[derive(Debug, Clone, Copy)]
pub struct Archive<'a> {
    pub site: &'a Site,
    pub selection: &'a Selection,
    pub generated_at: DateTime<Utc>,
    /// How long raw events are kept: older days of the period have none.
    pub raw_retention_days: u32,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Manifest {
    pub site: ManifestSite,
    pub period: crate::query::PeriodDates,
    pub filters: ManifestFilters,
    pub generated_at: String,
    pub raw_retention_days: u32,
    pub files: Vec<ManifestFile>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ManifestSite {
    pub id: String,
    pub name: String,
    pub domain: String,
    pub timezone: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ManifestFilters {
    pub device: Option<&'static str>,
    pub countries: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ManifestFile {
    pub name: String,
    /// Data rows: CSV rows after the header, JSON `daily` entries, JSON Lines lines.
    pub rows: u64,
    pub description: String,
}

/// Writes the archive to `out` and returns its manifest.
pub fn write(conn: &Connection, a: &Archive<'_>, out: impl Write) -> Result<Manifest> {
    let (site, sel) = (a.site, a.selection);
    let mut zip = ZipWriter::new_stream(out);
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated).large_file(true);
    let mut files = Vec::new();

    zip.start_file("metrics.csv", options).map_err(std::io::Error::from)?;
    let rows = csv::write(conn, site, sel, &mut zip)?;
    files.push(file("metrics.csv", rows, "one row per date, device and country with data (the CSV export)"));

    let export = json::build(sel, &Summary::load(conn, site, sel)?);
    zip.start_file("metrics.json", options).map_err(std::io::Error::from)?;
    serde_json::to_writer_pretty(&mut zip, &export).map_err(std::io::Error::from)?;
    files.push(file("metrics.json", export.daily.len() as u64, "period totals and every day (the JSON export)"));

    zip.start_file("events.jsonl", options).map_err(std::io::Error::from)?;
    let rows = write_events(conn, site, sel, &mut zip)?;
    files.push(file(
        "events.jsonl",
        rows,
        &format!("raw events, one JSON object per line, in the order received; kept {} days", a.raw_retention_days),
    ));

    let (from, to) = sel.period.hour_range();
    let runs = report::runs_between(conn, &site.id.to_string(), hour_start(from), hour_start(to))?;
    zip.start_file("report-runs.jsonl", options).map_err(std::io::Error::from)?;
    for run in &runs {
        let line = json!({
            "id": run.id,
            "type": run.kind.as_str(),
            "period": {"start": run.period_start.to_string(), "end": run.period_end.to_string()},
            "created_at": iso(run.created_at),
            "content": run.json,
        });
        serde_json::to_writer(&mut zip, &line).map_err(std::io::Error::from)?;
        zip.write_all(b"\n")?;
    }
    files.push(file(
        "report-runs.jsonl",
        runs.len() as u64,
        "every report run generated in the period (whatever its filters), oldest first: id, type, period, created_at, content",
    ));

    let manifest = Manifest {
        site: ManifestSite {
            id: site.id.to_string(),
            name: site.name.clone(),
            domain: site.domain.clone(),
            timezone: site.timezone.name().to_owned(),
        },
        period: (&sel.period).into(),
        filters: ManifestFilters { device: sel.device.map(Device::as_str), countries: sel.countries.clone() },
        generated_at: iso(a.generated_at),
        raw_retention_days: a.raw_retention_days,
        files,
    };
    zip.start_file("manifest.json", options).map_err(std::io::Error::from)?;
    serde_json::to_writer_pretty(&mut zip, &manifest).map_err(std::io::Error::from)?;
    zip.finish().map_err(std::io::Error::from)?.flush()?;
    Ok(manifest)
}

fn file(name: &str, rows: u64, description: &str) -> ManifestFile {
    ManifestFile { name: name.to_owned(), rows, description: description.to_owned() }
}

/// The raw events of the period's hours whose session matches the filters,
/// in the order received: the order of the `events_site` index, so nothing is
/// sorted in memory (`streams_without_sorting` checks it). A session is found
/// through the cold session index table (candidates by the hash of (site,
/// session id), the session row compared), or among the newest sessions,
/// which the writer keeps in its memory until they reach that table
/// (analytics::write): those above the `cold` mark. On PostgreSQL a session
/// is found by its unique (site, session id).
pub(super) fn events_sql(engine: Engine) -> String {
    let session = match engine {
        Engine::Sqlite => format!(
            "WITH tail AS MATERIALIZED (SELECT seq, site, session_id FROM sessions WHERE seq > (SELECT cold FROM session_index_low))
             SELECT {EVENT_COLUMNS}
             FROM events e
             LEFT JOIN sessions s ON s.seq = coalesce(
                 (SELECT c.seq FROM sessions c
                  WHERE c.seq IN (SELECT seq FROM session_index WHERE h = {h})
                    AND c.site = e.site AND c.session_id = e.session_id),
                 (SELECT t.seq FROM tail t WHERE t.site = e.site AND t.session_id = e.session_id))",
            h = crate::write::sql_index_key("e.site", "e.session_id")
        ),
        Engine::Postgres => format!(
            "SELECT {EVENT_COLUMNS}
             FROM events e
             LEFT JOIN sessions s ON s.site = e.site AND s.session_id = e.session_id"
        ),
    };
    format!(
        "{session}
         WHERE e.site = ?1 AND e.occurred_at >= ?2 AND e.occurred_at < ?3
           AND (s.device = ?4 OR ?4 IS NULL)
           AND (coalesce(s.country, e.country) IN (SELECT value FROM json_each(?5)) OR ?5 IS NULL)
         ORDER BY e.seq"
    )
}

const EVENT_COLUMNS: &str = "e.id, e.client_event_id, e.session_id, e.event_type, e.page_url, e.metadata, e.country, e.occurred_at, e.received_at";

/// Writes the selected raw events, one JSON object per line (the shape
/// `GET /v1/events/sites/:id` returns).
fn write_events(conn: &Connection, site: &Site, sel: &Selection, mut out: impl Write) -> Result<u64> {
    let (from, to) = sel.period.hour_range();
    let mut stmt = conn.prepare_cached(&events_sql(conn.engine()))?;
    let mut rows = stmt.query(params![
        site.seq,
        from * 3_600_000,
        to * 3_600_000,
        sel.device.map(Device::code),
        sel.countries_param()
    ])?;
    let mut written = 0;
    while let Some(r) = rows.next()? {
        serde_json::to_writer(&mut out, &stored_event(site, &r)?).map_err(std::io::Error::from)?;
        out.write_all(b"\n")?;
        written += 1;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::model::NewEvent;
    use crate::period::Period;
    use crate::store::testing::{self, temp_store};
    use crate::store::Durability;

    #[test]
    fn raw_events_are_filtered_by_their_session_wherever_the_writer_keeps_it() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        w.index_at_once();
        let now = Utc.with_ymd_and_hms(2026, 11, 20, 9, 0, 0).unwrap();
        let site = testing::site(&mut w, "a.test", now);
        // One session a commit: each commit merges the sessions before it
        // into the hot level and moves two on to the cold table, so the
        // first are in the cold table, the next in the hot level, the last in
        // the writer's tail.
        for i in 0..8 {
            let device = if i % 2 == 0 { Device::Mobile } else { Device::Desktop };
            let mut g = w.begin().unwrap();
            g.ingest(&[NewEvent { device, ..testing::pageview(&site, &format!("s{i}"), now) }]).unwrap();
            g.commit().unwrap();
        }
        let count = |sql: &str| -> i64 { store.read(|c| Ok(c.query_row(sql, (), |r| r.get(0))?)).unwrap() };
        let (cold, hot) = (count("SELECT count(*) FROM session_index") as usize, w.hot_entries()[0].len());
        assert!(cold > 0 && hot > 0 && cold + hot < 8, "cold {cold}, hot {hot}, tail {}", 8 - cold - hot);

        let day = now.date_naive();
        let sessions = |device: Option<Device>| -> Vec<String> {
            let sel = Selection { period: Period::new(day, day, chrono_tz::Tz::UTC), device, countries: Vec::new() };
            let mut out = Vec::new();
            store.read(|c| write_events(c, &site, &sel, &mut out)).unwrap();
            String::from_utf8(out)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["session_id"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(sessions(Some(Device::Mobile)), ["s0", "s2", "s4", "s6"]);
        assert_eq!(sessions(Some(Device::Desktop)), ["s1", "s3", "s5", "s7"]);
        assert_eq!(sessions(None).len(), 8);
    }
}
