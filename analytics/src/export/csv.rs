//! The CSV export: one row per local date × device × country with data,
//! columns exactly `date,sessions,adblock_detected,walls_displayed,
//! conversions,conversion_rate,device,country`, RFC 4180, UTF-8.
//!
//! Rows are written as the query yields them, one local day at a time: the
//! rollup is read in hour order and a day's (device, country) sums are
//! flushed when the next day starts, so memory holds one day, never the period.

use std::collections::BTreeMap;
use std::io::Write;

use chrono::NaiveDate;
use crate::db::{params, Connection};

use super::{Selection, ROLLUP_FILTER};
use crate::model::{Device, Site};
use crate::query::Counters;
use crate::Result;

pub const HEADER: [&str; 8] =
    ["date", "sessions", "adblock_detected", "walls_displayed", "conversions", "conversion_rate", "device", "country"];

/// Writes the CSV for `sel` to `out` and returns the number of data rows.
pub fn write(conn: &Connection, site: &Site, sel: &Selection, out: impl Write) -> Result<u64> {
    let mut csv = ::csv::Writer::from_writer(out);
    csv.write_record(HEADER).map_err(std::io::Error::from)?;
    let (from, to) = sel.period.hour_range();
    let mut stmt = conn.prepare_cached(&rows_sql())?;
    let mut rows = stmt.query(params![site.seq, from, to, sel.device.map(Device::code), sel.countries_param()])?;
    let mut day: Option<NaiveDate> = None;
    let mut sums: BTreeMap<(i64, String), Counters> = BTreeMap::new();
    let mut written = 0;
    while let Some(r) = rows.next()? {
        let date = sel.period.date_of_hour(r.get(0)?);
        if day != Some(date) {
            if let Some(d) = day {
                written += flush(&mut csv, d, &mut sums)?;
            }
            day = Some(date);
        }
        let c = Counters { sessions: r.get(3)?, adblock: r.get(4)?, walls: r.get(5)?, dismissed: 0, conversions: r.get(6)? };
        sums.entry((r.get(1)?, r.get(2)?)).or_default().add(&c);
    }
    if let Some(d) = day {
        written += flush(&mut csv, d, &mut sums)?;
    }
    csv.flush()?;
    Ok(written)
}

/// The rollup rows in primary-key order, so SQLite groups them as it reads
/// them without sorting the period first (`streams_without_sorting` checks it).
pub(super) fn rows_sql() -> String {
    format!(
        "SELECT hour, device, country, sum(sessions), sum(adblock), sum(walls), sum(conversions)
         FROM rollup_hourly WHERE {ROLLUP_FILTER}
         GROUP BY hour, device, country ORDER BY hour, device, country"
    )
}

/// Writes one day's rows (device order, then country) and empties `sums`.
fn flush<W: Write>(csv: &mut ::csv::Writer<W>, date: NaiveDate, sums: &mut BTreeMap<(i64, String), Counters>) -> Result<u64> {
    let date = date.to_string();
    let mut written = 0;
    for ((device, country), c) in std::mem::take(sums) {
        if c == Counters::default() {
            continue;
        }
        let device = Device::from_code(device).map_or("unknown", Device::as_str);
        csv.write_record([
            date.as_str(),
            &c.sessions.to_string(),
            &c.adblock.to_string(),
            &c.walls.to_string(),
            &c.conversions.to_string(),
            &c.conversion_rate().to_string(),
            device,
            &country,
        ])
        .map_err(std::io::Error::from)?;
        written += 1;
    }
    Ok(written)
}
