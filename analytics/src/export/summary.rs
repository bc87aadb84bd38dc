//! The aggregates a presentation of a period needs: totals, every day, and
//! the breakdowns by device, country and A/B variant, all under one selection.
//! One pass over the selected rollup rows, in primary-key order, feeds them
//! all; only the small per-key sums are kept.

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDate;
use crate::db::{params, Connection};

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
        let (from, to) = sel.period.hour_range();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT hour, device, country, variant, sessions, adblock, walls, dismissed, conversions, wall_conversions
             FROM rollup_hourly WHERE {ROLLUP_FILTER}"
        ))?;
        let mut rows = stmt.query(params![site.seq, from, to, sel.device.map(Device::code), sel.countries_param()])?;
        let mut totals = Counters::default();
        let mut per_day: HashMap<NaiveDate, Counters> = HashMap::new();
        let mut per_device: BTreeMap<i64, Counters> = BTreeMap::new();
        let mut per_country: HashMap<String, Counters> = HashMap::new();
        let mut seen: HashMap<String, (u64, u64)> = HashMap::new();
        let mut last_hour = None;
        let mut day = sel.period.start;
        while let Some(r) = rows.next()? {
            let hour: i64 = r.get(0)?;
            if last_hour != Some(hour) {
                day = sel.period.date_of_hour(hour);
                last_hour = Some(hour);
            }
            let c = Counters {
                sessions: r.get(4)?,
                adblock: r.get(5)?,
                walls: r.get(6)?,
                dismissed: r.get(7)?,
                conversions: r.get(8)?,
            };
            totals.add(&c);
            per_day.entry(day).or_default().add(&c);
            per_device.entry(r.get(1)?).or_default().add(&c);
            let country: String = r.get(2)?;
            match per_country.get_mut(&country) {
                Some(sum) => sum.add(&c),
                None => {
                    per_country.insert(country, c);
                }
            }
            // Variant '' holds sessions without a (non-forced) variant: never an A/B arm.
            let variant: String = r.get(3)?;
            if !variant.is_empty() {
                let wall_conversions: u64 = r.get(9)?;
                let v = seen.entry(variant).or_default();
                v.0 += c.walls;
                v.1 += wall_conversions;
            }
        }

        let daily = sel.period.dates().map(|d| (d, per_day.get(&d).copied().unwrap_or_default())).collect();
        let devices = per_device
            .into_iter()
            .filter(|(_, c)| *c != Counters::default())
            .filter_map(|(code, c)| Some((Device::from_code(code)?, c)))
            .collect();
        let mut countries: Vec<(String, Counters)> =
            per_country.into_iter().filter(|(_, c)| *c != Counters::default()).collect();
        countries.sort_by(|a, b| b.1.sessions.cmp(&a.1.sessions).then_with(|| a.0.cmp(&b.0)));
        seen.retain(|_, (walls, _)| *walls > 0);
        let variants = query::variant_results(site, &seen);
        Ok(Summary { totals, daily, devices, countries, variants })
    }
}
