//! The JSON export: exactly `{period: {start, end}, metrics: {sessions,
//! adblock_detected, conversions, conversion_rate}, daily: [{date, sessions,
//! conversions}]}` with every day of the period present.

use serde::Serialize;

use super::{Selection, Summary};
use crate::query::PeriodDates;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Export {
    pub period: PeriodDates,
    pub metrics: Metrics,
    pub daily: Vec<Day>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Metrics {
    pub sessions: u64,
    pub adblock_detected: u64,
    pub conversions: u64,
    /// conversions ÷ walls displayed × 100, as on the dashboard.
    pub conversion_rate: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Day {
    pub date: String,
    pub sessions: u64,
    pub conversions: u64,
}

pub fn build(sel: &Selection, summary: &Summary) -> Export {
    let t = &summary.totals;
    Export {
        period: (&sel.period).into(),
        metrics: Metrics {
            sessions: t.sessions,
            adblock_detected: t.adblock,
            conversions: t.conversions,
            conversion_rate: t.conversion_rate(),
        },
        daily: summary
            .daily
            .iter()
            .map(|(d, c)| Day { date: d.to_string(), sessions: c.sessions, conversions: c.conversions })
            .collect(),
    }
}
