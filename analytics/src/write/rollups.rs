//! Rollup deltas: what a group adds to the hourly rollups, the event counts
//! and the raw totals, and the journal that lets a busy writer write them
//! less often.
//!
//! Each of those five tables costs a page per commit. When more writes are
//! already waiting, a group appends its deltas to `rollup_journal` instead
//! (one small row, on the page the previous commit wrote); the next group that
//! applies takes every journal row, adds them up with its own deltas, writes
//! each rollup row once and deletes the journal, in the same transaction. The
//! journal is applied from the table, never from memory, so any write
//! connection may apply it and a restart after a crash simply applies what is
//! there.

use foldhash::HashMap;
use rusqlite::{params, Connection};

use super::{Name, SessionState};
use crate::Result;

type RollupKey = (i64, i64, i64, Name, Name);
type CountKey = (i64, i64, i64, i64, Name);

/// One journal row: rollup, count and raw-total deltas, with names as `S`.
type Entries<S> = (Vec<(i64, i64, i64, S, S, [i64; 6])>, Vec<(i64, i64, i64, i64, S, i64)>, Vec<(i64, i64, i64)>);

/// The upserts that add deltas to each table, in the SQL both engines accept
/// (the table aliased, as PostgreSQL needs to tell its row from `excluded`).
const UPSERT_HOURLY: &str = "INSERT INTO rollup_hourly AS r (site, hour, device, country, variant,
                                                 sessions, adblock, walls, dismissed, conversions, wall_conversions)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
     ON CONFLICT (site, hour, device, country, variant) DO UPDATE SET
         sessions = r.sessions + excluded.sessions, adblock = r.adblock + excluded.adblock,
         walls = r.walls + excluded.walls, dismissed = r.dismissed + excluded.dismissed,
         conversions = r.conversions + excluded.conversions,
         wall_conversions = r.wall_conversions + excluded.wall_conversions";
const UPSERT_DEVICE: &str = "INSERT INTO rollup_device_hourly AS r (site, hour, device, sessions, adblock, walls, dismissed, conversions, wall_conversions)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
     ON CONFLICT (site, hour, device) DO UPDATE SET
         sessions = r.sessions + excluded.sessions, adblock = r.adblock + excluded.adblock,
         walls = r.walls + excluded.walls, dismissed = r.dismissed + excluded.dismissed,
         conversions = r.conversions + excluded.conversions,
         wall_conversions = r.wall_conversions + excluded.wall_conversions";
const UPSERT_VARIANT: &str = "INSERT INTO rollup_variant_hourly AS r (site, hour, variant, walls, wall_conversions) VALUES (?1, ?2, ?3, ?4, ?5)
     ON CONFLICT (site, hour, variant) DO UPDATE SET
         walls = r.walls + excluded.walls, wall_conversions = r.wall_conversions + excluded.wall_conversions";
const UPSERT_COUNT: &str = "INSERT INTO event_counts_hourly AS c (site, hour, event_type, device, country, events)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
     ON CONFLICT (site, hour, event_type, device, country) DO UPDATE SET events = c.events + excluded.events";
/// Adds `?3` (negative to subtract) to a site's count of stored raw events of type `?2`.
pub(crate) const UPSERT_RAW_TOTAL: &str = "INSERT INTO raw_event_totals AS t (site, event_type, events) VALUES (?1, ?2, ?3)
     ON CONFLICT (site, event_type) DO UPDATE SET events = t.events + excluded.events";

#[derive(Default, Clone)]
pub(super) struct Deltas {
    rollups: HashMap<RollupKey, [i64; 6]>,
    counts: HashMap<CountKey, i64>,
    /// Raw events stored, per (site, event type).
    raw: HashMap<(i64, i64), i64>,
}

impl Deltas {
    pub fn bump_rollup(&mut self, site: i64, s: &SessionState, d: [i64; 6]) {
        let e = self.rollups.entry((site, s.first_hour, s.device, s.country.clone(), s.variant.clone())).or_default();
        for i in 0..6 {
            e[i] += d[i];
        }
    }

    /// Counts event `e` that took its session from `old` (none: a new
    /// session) to `new`: the session moves between rollup rows or gains
    /// flags, and the event is counted.
    pub fn count(&mut self, e: &crate::model::NewEvent, old: Option<&SessionState>, new: &SessionState) {
        match old {
            None => self.bump_rollup(e.site_seq, new, new.counters()),
            Some(old) if old.same_row(new) => {
                if old.flags != new.flags {
                    let (o, n) = (old.counters(), new.counters());
                    self.bump_rollup(e.site_seq, new, std::array::from_fn(|i| n[i] - o[i]));
                }
            }
            Some(old) => {
                self.bump_rollup(e.site_seq, old, old.counters().map(|c| -c));
                self.bump_rollup(e.site_seq, new, new.counters());
            }
        }
        self.count_event(e.site_seq, super::hour_of(e.occurred_at), e.event_type.code(), new.device, &new.country);
    }

    /// Counts one stored event of `event_type` at `hour`, for a session of this device and country.
    pub fn count_event(&mut self, site: i64, hour: i64, event_type: i64, device: i64, country: &Name) {
        *self.counts.entry((site, hour, event_type, device, country.clone())).or_default() += 1;
        *self.raw.entry((site, event_type)).or_default() += 1;
    }

    /// Adds what `other` holds, leaving it empty with its capacity.
    pub fn merge(&mut self, other: &mut Deltas) {
        for (k, d) in other.rollups.drain() {
            let e = self.rollups.entry(k).or_default();
            for i in 0..6 {
                e[i] += d[i];
            }
        }
        for (k, n) in other.counts.drain() {
            *self.counts.entry(k).or_default() += n;
        }
        for (k, n) in other.raw.drain() {
            *self.raw.entry(k).or_default() += n;
        }
    }

    /// Entries the largest of its maps holds room for.
    pub fn capacity(&self) -> usize {
        self.rollups.capacity().max(self.counts.capacity()).max(self.raw.capacity())
    }

    pub fn clear(&mut self) {
        self.rollups.clear();
        self.counts.clear();
        self.raw.clear();
    }

    /// Appends these deltas to the journal; false if there were none.
    pub fn journal(&self, conn: &Connection) -> Result<bool> {
        if self.rollups.is_empty() && self.counts.is_empty() && self.raw.is_empty() {
            return Ok(false);
        }
        let entries: Entries<&str> = (
            self.rollups.iter().map(|((s, h, d, c, v), n)| (*s, *h, *d, &**c, &**v, *n)).collect(),
            self.counts.iter().map(|((s, h, t, d, c), n)| (*s, *h, *t, *d, &**c, *n)).collect(),
            self.raw.iter().map(|(&(s, t), &n)| (s, t, n)).collect(),
        );
        let json = serde_json::to_string(&entries).map_err(|e| crate::Error::Conflict(format!("cannot encode rollup deltas: {e}")))?;
        conn.prepare_cached("INSERT INTO rollup_journal (deltas) VALUES (?1)")?.execute([json])?;
        Ok(true)
    }

    /// Adds every journal row to these deltas and empties the journal.
    pub fn take_journal(&mut self, conn: &Connection) -> Result<()> {
        let mut stmt = conn.prepare_cached("DELETE FROM rollup_journal RETURNING deltas")?;
        let mut rows = stmt.query([])?;
        let mut names = super::Names::default();
        while let Some(row) = rows.next()? {
            let json: String = row.get(0)?;
            let (rollups, counts, raw): Entries<String> =
                serde_json::from_str(&json).map_err(|e| crate::Error::Conflict(format!("a rollup journal row is unreadable: {e}")))?;
            for (s, h, d, c, v, n) in rollups {
                let e = self.rollups.entry((s, h, d, names.get(&c), names.get(&v))).or_default();
                for i in 0..6 {
                    e[i] += n[i];
                }
            }
            for (s, h, t, d, c, n) in counts {
                *self.counts.entry((s, h, t, d, names.get(&c))).or_default() += n;
            }
            for (s, t, n) in raw {
                *self.raw.entry((s, t)).or_default() += n;
            }
        }
        Ok(())
    }

    /// These deltas as upserts for PostgreSQL, table by table (statement and
    /// the parameters of each run), each table's rows in key order: writers
    /// on several nodes then take row locks in one order and never wait on
    /// each other in a circle.
    pub fn sorted_upserts(&self) -> Vec<(&'static str, Vec<Vec<crate::db::Value>>)> {
        use crate::db::{params, Params};
        let rollups: std::collections::BTreeMap<_, _> = self.rollups.iter().filter(|(_, d)| d.iter().any(|&x| x != 0)).collect();
        let mut by_device: std::collections::BTreeMap<(i64, i64, i64), [i64; 6]> = Default::default();
        let mut by_variant: std::collections::BTreeMap<(i64, i64, &str), [i64; 2]> = Default::default();
        let mut hourly = Vec::with_capacity(rollups.len());
        for ((site, hour, device, country, variant), d) in &rollups {
            hourly.push(params![site, hour, device, &**country, &**variant, d[0], d[1], d[2], d[3], d[4], d[5]].values());
            let e = by_device.entry((*site, *hour, *device)).or_default();
            for i in 0..6 {
                e[i] += d[i];
            }
            if !variant.is_empty() {
                let e = by_variant.entry((*site, *hour, &**variant)).or_default();
                e[0] += d[2];
                e[1] += d[5];
            }
        }
        let counts: std::collections::BTreeMap<_, _> = self.counts.iter().collect();
        let raw: std::collections::BTreeMap<_, _> = self.raw.iter().collect();
        vec![
            (UPSERT_HOURLY, hourly),
            (
                UPSERT_DEVICE,
                by_device.iter().map(|((site, hour, dev), d)| params![site, hour, dev, d[0], d[1], d[2], d[3], d[4], d[5]].values()).collect(),
            ),
            (
                UPSERT_VARIANT,
                by_variant
                    .iter()
                    .filter(|(_, d)| d.iter().any(|&x| x != 0))
                    .map(|((site, hour, name), d)| params![site, hour, name, d[0], d[1]].values())
                    .collect(),
            ),
            (
                UPSERT_COUNT,
                counts.iter().map(|((site, hour, event_type, device, country), n)| params![site, hour, event_type, device, &**country, n].values()).collect(),
            ),
            (
                UPSERT_RAW_TOTAL,
                raw.iter().map(|(&&(site, event_type), &&n)| params![site, event_type, n].values()).collect(),
            ),
        ]
    }

    /// Writes these deltas into the rollup, count and raw-total tables.
    pub fn write(&self, conn: &Connection) -> Result<()> {
        let mut rollup = conn.prepare_cached(UPSERT_HOURLY)?;
        let mut by_device: HashMap<(i64, i64, i64), [i64; 6]> = HashMap::default();
        let mut by_variant: HashMap<(i64, i64, &str), [i64; 2]> = HashMap::default();
        for ((site, hour, device, country, variant), d) in &self.rollups {
            if d.iter().all(|&x| x == 0) {
                continue;
            }
            rollup.execute(params![site, hour, device, &**country, &**variant, d[0], d[1], d[2], d[3], d[4], d[5]])?;
            let e = by_device.entry((*site, *hour, *device)).or_default();
            for i in 0..6 {
                e[i] += d[i];
            }
            if !variant.is_empty() {
                let e = by_variant.entry((*site, *hour, &**variant)).or_default();
                e[0] += d[2];
                e[1] += d[5];
            }
        }
        let mut device = conn.prepare_cached(UPSERT_DEVICE)?;
        for ((site, hour, dev), d) in &by_device {
            device.execute(params![site, hour, dev, d[0], d[1], d[2], d[3], d[4], d[5]])?;
        }
        let mut variant = conn.prepare_cached(UPSERT_VARIANT)?;
        for ((site, hour, name), d) in &by_variant {
            if d.iter().any(|&x| x != 0) {
                variant.execute(params![site, hour, name, d[0], d[1]])?;
            }
        }
        let mut count = conn.prepare_cached(UPSERT_COUNT)?;
        for ((site, hour, event_type, device, country), n) in &self.counts {
            count.execute(params![site, hour, event_type, device, &**country, n])?;
        }
        for (&(site, event_type), &n) in &self.raw {
            add_raw_total(conn, site, event_type, n)?;
        }
        Ok(())
    }
}

/// Adds `n` (negative to subtract) to a site's count of stored raw events of a type.
pub(crate) fn add_raw_total(conn: &Connection, site: i64, event_type: i64, n: i64) -> Result<()> {
    conn.prepare_cached(UPSERT_RAW_TOTAL)?
    .execute(params![site, event_type, n])?;
    Ok(())
}
