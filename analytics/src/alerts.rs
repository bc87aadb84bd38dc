//! What the alert job reads and remembers: counters over UTC hours, the hour
//! of a site's last event, and per site and alert whether its condition held
//! at the last check (so an alert fires on the transition, once).

use chrono::{DateTime, Utc};
use crate::db::{params, Connection, OptionalExtension};

use uuid::Uuid;

use crate::accounts::ms;
use crate::model::Site;
use crate::query::Counters;
use crate::{sites, Result};

/// Every site not deleted, of every account.
pub fn live_sites(conn: &Connection) -> Result<Vec<Site>> {
    let ids: Vec<String> = conn
        .prepare_cached("SELECT id FROM sites WHERE deleted_at IS NULL ORDER BY seq")?
        .query_map((), |r| r.get(0))?
        .collect::<crate::Result<_>>()?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids.iter().filter_map(|s| Uuid::parse_str(s).ok()) {
        out.extend(sites::get(conn, id)?);
    }
    Ok(out)
}

/// Session counters of a site over the UTC hours `[from, to)`.
pub fn counters(conn: &Connection, site: i64, from: i64, to: i64) -> Result<Counters> {
    let c = conn.query_row(
        "SELECT coalesce(sum(sessions), 0), coalesce(sum(adblock), 0), coalesce(sum(walls), 0),
                coalesce(sum(dismissed), 0), coalesce(sum(conversions), 0)
         FROM rollup_device_hourly WHERE site = ?1 AND hour >= ?2 AND hour < ?3",
        params![site, from, to],
        |r| Ok(Counters { sessions: r.get(0)?, adblock: r.get(1)?, walls: r.get(2)?, dismissed: r.get(3)?, conversions: r.get(4)? }),
    )?;
    Ok(c)
}

/// The UTC hour (hours since the epoch) of the site's most recent event, if any.
pub fn last_event_hour(conn: &Connection, site: i64) -> Result<Option<i64>> {
    Ok(conn.query_row("SELECT max(hour) FROM event_counts_hourly WHERE site = ?1", [site], |r| r.get(0))?)
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// Whether the condition held at the last check.
    pub active: bool,
    /// What the alert last fired for (e.g. the winning variant).
    pub fired_key: Option<String>,
}

pub fn state(conn: &Connection, site: i64, alert: &str) -> Result<State> {
    let found = conn
        .query_row("SELECT active, fired_key FROM alert_state WHERE site = ?1 AND alert = ?2", params![site, alert], |r| {
            Ok(State { active: r.get(0)?, fired_key: r.get(1)? })
        })
        .optional()?;
    Ok(found.unwrap_or_default())
}

pub fn set_state(conn: &Connection, site: i64, alert: &str, s: &State, now: DateTime<Utc>) -> Result<()> {
    conn.execute(
        "INSERT INTO alert_state (site, alert, active, fired_key, changed_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (site, alert) DO UPDATE SET active = excluded.active, fired_key = excluded.fired_key, changed_at = excluded.changed_at",
        params![site, alert, s.active, s.fired_key, ms(now)],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{testing::temp_store, Durability};

    #[test]
    fn state_round_trips_and_defaults_to_inactive() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        assert_eq!(store.read(|c| state(c, 1, "no_data")).unwrap(), State::default());
        let s = State { active: true, fired_key: Some("offer".into()) };
        w.run(|c| set_state(c, 1, "ab_test_winner", &s, Utc::now())).unwrap();
        assert_eq!(store.read(|c| state(c, 1, "ab_test_winner")).unwrap(), s);
        assert_eq!(store.read(|c| last_event_hour(c, 1)).unwrap(), None);
        assert_eq!(store.read(|c| counters(c, 1, 0, i64::MAX)).unwrap(), Counters::default());
    }
}
