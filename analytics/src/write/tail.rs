//! An index by random text key (session ids, client event ids) that does not
//! cost a random B-tree page per new key.
//!
//! The rows themselves are appended (`seq` order). A key is found either in
//! the writer's memory or in an index table:
//!
//! - the *tail* holds every key not yet in the index table (complete: a key in
//!   neither does not exist);
//! - when the tail grows past its limit, whole *slices* of it (keys sharing
//!   their first two bytes, a contiguous range of the index) are merged into
//!   the table, sorted, one slice after the other, so each index page written
//!   takes many keys instead of one.
//!
//! Durable marks say what the table holds: per slice, the largest `seq`
//! merged; and a `low` seq at or below which every row is indexed. At start-up
//! the owner rebuilds the tail from the rows above `low` that their slice's
//! mark does not cover ([`Tail::unindexed`]).
//!
//! Memory changes only after the transaction that wrote them commits.

use std::collections::BTreeMap;

use foldhash::HashMap;

use rusqlite::{params, Connection};

use super::filter::{self, Filter};
use crate::Result;

/// Commits between two moves of `low` when nothing is merged.
const LOW_EVERY: u32 = 1024;

/// (site, key). Shared: the tail holds each key twice (by key, and in its
/// slice's list), and a group passes it through its staging and memory.
pub(super) type Key = (i64, std::sync::Arc<str>);

/// The tables of one index: `index (key, site, seq)`, `marks (slice, seq)`,
/// `low (seq)`, and the table of the rows (`seq` is its rowid).
pub(super) struct Tables {
    pub index: &'static str,
    pub key: &'static str,
    pub marks: &'static str,
    pub low: &'static str,
    pub rows: &'static str,
}

/// Something stored in a row with this `seq`.
pub(super) trait Row {
    fn seq(&self) -> i64;
}

/// The slice of a key: its first two bytes.
fn slice_of(key: &str) -> u16 {
    let b = key.as_bytes();
    u16::from(b.first().copied().unwrap_or(0)) << 8 | u16::from(b.get(1).copied().unwrap_or(0))
}

pub(super) struct Tail<V> {
    tables: &'static Tables,
    pub max: usize,
    entries: HashMap<Key, V>,
    /// The keys by slice, each list in `seq` order.
    slices: BTreeMap<u16, Vec<Key>>,
    /// The next slice to merge: merging goes round the slices in order.
    cursor: u16,
    /// Commits seen, to move `low` now and then even when nothing is merged.
    commits: u32,
    /// The lookup's SQL, built once: it runs for nearly every event.
    lookup: String,
    /// Which keys the index table may hold.
    filter: Filter,
}

/// Slices merged by a transaction not yet committed.
#[derive(Default)]
pub(super) struct Merged(Vec<u16>);

/// What start-up needs to tell indexed rows from the tail.
pub(super) struct Marks {
    pub low: i64,
    marks: HashMap<u16, i64>,
}

impl Marks {
    /// True when a row with this key and `seq` is not in the index table.
    pub fn unindexed(&self, key: &str, seq: i64) -> bool {
        seq > self.low && seq > self.marks.get(&slice_of(key)).copied().unwrap_or(0)
    }
}

impl<V: Row> Tail<V> {
    pub fn new(tables: &'static Tables, max: usize) -> Tail<V> {
        let lookup = format!("SELECT seq FROM {} WHERE {} = ?1 AND site = ?2", tables.index, tables.key);
        let filter = Filter::new(tables.index, tables.key);
        Tail { tables, max, entries: HashMap::default(), slices: BTreeMap::new(), cursor: 0, commits: 0, lookup, filter }
    }

    pub fn get(&self, key: &Key) -> Option<&V> {
        self.entries.get(key)
    }

    pub fn get_mut(&mut self, key: &Key) -> Option<&mut V> {
        self.entries.get_mut(key)
    }

    /// Adds a row not in the index table; rows must come in `seq` order.
    pub fn push(&mut self, key: Key, value: V) {
        self.slices.entry(slice_of(&key.1)).or_default().push(key.clone());
        self.entries.insert(key, value);
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.slices.clear();
        self.cursor = 0;
    }

    /// Reads the marks, to rebuild the tail from the rows they do not cover.
    pub fn marks(&self, conn: &Connection) -> Result<Marks> {
        let t = self.tables;
        let low = conn.query_row(&format!("SELECT seq FROM {}", t.low), [], |r| r.get(0))?;
        let marks = conn
            .prepare(&format!("SELECT slice, seq FROM {}", t.marks))?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(Marks { low, marks })
    }

    /// Waits for the index filter being built (tests).
    #[cfg(test)]
    pub fn wait_for_filter(&mut self) -> bool {
        self.filter.wait();
        self.filter.is_ready()
    }

    /// Finds the `seq` of an indexed key.
    pub fn indexed(&mut self, conn: &Connection, key: &Key) -> Result<Option<i64>> {
        if !self.filter.may_hold(conn, filter::hash(key.0, &key.1)) {
            return Ok(None);
        }
        let mut stmt = conn.prepare_cached(&self.lookup)?;
        let mut rows = stmt.query(params![&*key.1, key.0])?;
        Ok(match rows.next()? {
            Some(r) => Some(r.get(0)?),
            None => None,
        })
    }

    /// Merges slices into the index table, inside the caller's transaction,
    /// until the tail is back under its limit, and moves `low` up. `first_new`
    /// is the smallest `seq` of the rows this transaction appended, if any.
    pub fn before_commit(&mut self, conn: &Connection, first_new: Option<i64>) -> Result<Merged> {
        let mut merged = Merged::default();
        self.commits = self.commits.wrapping_add(1);
        // Without merges `low` would stay behind when few rows carry a key,
        // and the start-up scan would grow: move it every so often.
        if self.entries.len() <= self.max && !self.commits.is_multiple_of(LOW_EVERY) {
            return Ok(merged);
        }
        let t = self.tables;
        let mut insert = conn.prepare_cached(&format!("INSERT OR REPLACE INTO {} ({}, site, seq) VALUES (?1, ?2, ?3)", t.index, t.key))?;
        let mut mark = conn.prepare_cached(&format!("INSERT OR REPLACE INTO {} (slice, seq) VALUES (?1, ?2)", t.marks))?;
        let mut left = self.entries.len();
        let mut cursor = self.cursor;
        while left > self.max && merged.0.len() < self.slices.len() {
            let Some((&slice, keys)) = self.slices.range(cursor..).next().or_else(|| self.slices.iter().next()) else {
                break;
            };
            let mut rows: Vec<(&str, i64, i64)> = keys.iter().map(|k| (&*k.1, k.0, self.entries[k].seq())).collect();
            rows.sort_unstable();
            for (key, site, seq) in &rows {
                insert.execute(params![key, site, seq])?;
                self.filter.add(filter::hash(*site, key));
            }
            mark.execute(params![slice, rows.iter().map(|r| r.2).max().unwrap_or(0)])?;
            merged.0.push(slice);
            left -= keys.len();
            cursor = slice.wrapping_add(1);
        }
        let next_seq = match first_new {
            Some(seq) => seq,
            None => conn.query_row(&format!("SELECT coalesce(max(seq), 0) + 1 FROM {}", t.rows), [], |r| r.get(0))?,
        };
        // Every row still unindexed is newer than the oldest one left in a
        // slice, or than the newest merged one if none is left.
        let low = self
            .slices
            .iter()
            .filter(|(s, _)| !merged.0.contains(s))
            .filter_map(|(_, keys)| keys.first().map(|k| self.entries[k].seq() - 1))
            .chain(std::iter::once(next_seq - 1))
            .min()
            .unwrap_or(0);
        conn.prepare_cached(&format!("UPDATE {} SET seq = ?1", t.low))?.execute([low])?;
        Ok(merged)
    }

    /// Drops the slices a committed transaction merged; returns their entries.
    pub fn committed(&mut self, merged: Merged) -> Vec<(Key, V)> {
        let mut out = Vec::new();
        for slice in merged.0 {
            for key in self.slices.remove(&slice).unwrap_or_default() {
                if let Some(v) = self.entries.remove(&key) {
                    out.push((key, v));
                }
            }
            self.cursor = slice.wrapping_add(1);
        }
        out
    }
}
