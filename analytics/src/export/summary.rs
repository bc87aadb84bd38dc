//! The aggregates a presentation of a period needs: totals, every day, and
//! the breakdowns by device, country and A/B variant, all under one selection.

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDate;
use rusqlite::{params, Connection};

use super::{Selection, ROLLUP_FILTER};
use crate::ab::VariantResult;
use crate::model::{Device, Site};
use crate::query::{self, Counters};
use crate::Result;

#[derive(Debug, Clone)]
pub struct Summary {
    pub totals: Counters,
    /// Every local date of the period, oldest first, zero-filled.
    pub daily: Vec<(NaiveDate, Counters)>,
    /// Devices with data, in the order desktop, mobile, tablet.
    pub devices: Vec<(Device, Counters)>,
    /// Countries with data, most sessions first.
    pub countries: Vec<(String, Counters)>,
    pub variants: Vec<VariantResult>,
}

impl Summary {
    pub fn load(conn: &Connection, site: &Site, sel: &Selection) -> Result<Summary> {
        let by_hour = grouped(conn, site, sel, "hour")?;
        let mut per_day: HashMap<NaiveDate, Counters> = HashMap::new();
        let mut totals = Counters::default();
        for (hour, c) in &by_hour {
            let hour: i64 = hour.parse().unwrap_or_default();
            per_day.entry(sel.period.date_of_hour(hour)).or_default().add(&c.counters);
            totals.add(&c.counters);
        }
        let daily = sel.period.dates().map(|d| (d, per_day.get(&d).copied().unwrap_or_default())).collect();

        let devices = grouped(conn, site, sel, "device")?
            .into_iter()
            .filter_map(|(code, c)| Some((Device::from_code(code.parse().ok()?)?, c.counters)))
            .filter(|(_, c)| *c != Counters::default())
            .collect();
        let mut countries: Vec<(String, Counters)> = grouped(conn, site, sel, "country")?
            .into_iter()
            .map(|(k, c)| (k, c.counters))
            .filter(|(_, c)| *c != Counters::default())
            .collect();
        countries.sort_by(|a, b| b.1.sessions.cmp(&a.1.sessions).then_with(|| a.0.cmp(&b.0)));

        // Variant '' holds sessions without a (non-forced) variant: never an A/B arm.
        let seen: HashMap<String, (u64, u64)> = grouped(conn, site, sel, "variant")?
            .into_iter()
            .filter(|(name, c)| !name.is_empty() && c.counters.walls > 0)
            .map(|(name, c)| (name, (c.counters.walls, c.wall_conversions)))
            .collect();
        let variants = query::variant_results(site, &seen);
        Ok(Summary { totals, daily, devices, countries, variants })
    }
}

struct Grouped {
    counters: Counters,
    wall_conversions: u64,
}

/// Sums of the selected rollup rows grouped by one column, keyed by its text.
fn grouped(conn: &Connection, site: &Site, sel: &Selection, column: &'static str) -> Result<BTreeMap<String, Grouped>> {
    let sql = format!(
        "SELECT CAST({column} AS TEXT), sum(sessions), sum(adblock), sum(walls), sum(dismissed), sum(conversions), sum(wall_conversions)
         FROM rollup_hourly WHERE {ROLLUP_FILTER} GROUP BY {column}"
    );
    let (from, to) = sel.period.hour_range();
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map(params![site.seq, from, to, sel.device.map(Device::code), sel.countries_param()], |r| {
            Ok((
                r.get::<_, String>(0)?,
                Grouped {
                    counters: Counters {
                        sessions: r.get(1)?,
                        adblock: r.get(2)?,
                        walls: r.get(3)?,
                        dismissed: r.get(4)?,
                        conversions: r.get(5)?,
                    },
                    wall_conversions: r.get(6)?,
                },
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}
