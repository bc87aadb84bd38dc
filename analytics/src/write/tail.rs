//! An index by random text key (session ids, client event ids) that does not
//! cost a random B-tree page per new key.
//!
//! The rows themselves are appended (`seq` order). A key is found either in
//! the writer's memory or in one of two index tables, which hold `(h, seq)`:
//! `h` the key's hash ([`IndexHasher`]), `seq` its row, which the caller reads
//! to compare the key itself (two keys may share a hash).
//!
//! - the *tail* holds every key not yet in an index table (complete: a key in
//!   none of them does not exist);
//! - when the tail grows past its limit, whole *slices* of it (keys whose
//!   hashes share their top byte, a contiguous range of the index) are merged
//!   into the *hot* table, sorted, one slice after the other, so each index
//!   page written takes many keys instead of one;
//! - when the hot table holds more than its limit, its keys move on, a chunk
//!   in key order per commit, into the *cold* table, which holds the rest.
//!
//! Why two tables: a merge writes about one page per key once the table is
//! far larger than the batch of keys merged into it, as the tail's slices
//! are beside the index of a store with millions of sessions. The hot table
//! stays small enough for a slice to share its pages, and a chunk of it is
//! large enough to share the cold table's pages: each level costs a fraction
//! of a page per key instead of a page (BENCHMARKS.md).
//!
//! Durable marks say what the index tables hold: per slice, the largest `seq`
//! merged; and a `low` seq at or below which every row is indexed. At start-up
//! the owner rebuilds the tail from the rows above `low` that their slice's
//! mark does not cover ([`Marks::unindexed`]). Moving keys from the hot table
//! to the cold one changes no mark.
//!
//! Memory changes only after the transaction that wrote them commits; after a
//! failed commit the owner clears the tail and rebuilds it.

use std::sync::Arc;

use foldhash::HashMap;

use rusqlite::{params, Connection};

use super::filter::Filter;
use super::key::IndexHasher;
pub(super) use super::keyed::Key;
use super::keyed::ByHash;
use crate::Result;

/// Commits between two moves of `low` when nothing is merged.
const LOW_EVERY: u32 = 1024;
/// Keys the hot table holds before chunks of it move to the cold table: with
/// a tail of 32,768 keys, a slice and a chunk each write about a tenth and a
/// third of a page per key beside a cold table of six million keys.
const HOT_MAX: usize = 1 << 18;
/// Keys moved from the hot table to the cold one per commit, when it is over
/// its limit: at least this many, twice what the commit merged (so that the
/// hot table shrinks back under its limit whatever the load: a seeding or a
/// stream of batches merges hundreds of keys a commit), at most `MAX_DRAIN`
/// (a commit's own latency).
const DRAIN_CHUNK: usize = 256;
const MAX_DRAIN: usize = 4096;
/// Before every (h, seq) of an index table: where moves start.
const FIRST: (i64, i64) = (i64::MIN, i64::MIN);

/// The tables of one index: `hot` and `cold (h, seq)`, `marks (slice, seq)`,
/// `low (seq)`, and the table of the rows (`seq` is its rowid).
pub(crate) struct Tables {
    pub hot: &'static str,
    pub cold: &'static str,
    pub marks: &'static str,
    pub low: &'static str,
    pub rows: &'static str,
}

impl Tables {
    /// The index tables, hot then cold: a merged key is in one of them.
    pub(crate) fn index_tables(&self) -> [&'static str; 2] {
        [self.hot, self.cold]
    }
}

/// Something stored in a row with this `seq`.
pub(super) trait Row {
    fn seq(&self) -> i64;
}

/// The slice of a key: the top byte of its hash (256 slices, each a
/// contiguous range of the index tables' order).
fn slice_of(h: i64) -> u16 {
    ((h as u64) >> 56) as u16
}

const SLICES: usize = 256;

/// The tail's keys of one slice.
struct Slice<V> {
    entries: ByHash<V>,
    /// The smallest `seq` of their rows (rows come in `seq` order).
    first_seq: i64,
}

impl<V> Default for Slice<V> {
    fn default() -> Self {
        Slice { entries: ByHash::default(), first_seq: 0 }
    }
}

pub(super) struct Tail<V> {
    tables: &'static Tables,
    hasher: IndexHasher,
    pub max: usize,
    /// The keys by slice: a merge takes a slice's keys, and drops them once
    /// committed, without looking each key up.
    slices: Vec<Slice<V>>,
    /// The next slice to merge: merging goes round the slices in order.
    cursor: u16,
    /// Commits seen, to move `low` now and then even when nothing is merged.
    commits: u32,
    /// The hot and cold tables, newest first: their lookups and filters.
    levels: [Level; 2],
    pub hot_max: usize,
    pub drain_chunk: usize,
    /// Keys in the hot table, counted when first needed; merges add to it,
    /// moves to the cold table take from it (deletes by retention are not
    /// seen: it may count high until the next start).
    hot_keys: Option<usize>,
    /// The last (h, seq) moved to the cold table: the next chunk follows it.
    drained_to: Option<(i64, i64)>,
    /// The SQL of a move to the cold table, built once: it runs at nearly
    /// every commit once the hot table is full.
    next_chunk: String,
    drop_chunk: String,
}

/// One index table.
struct Level {
    /// The lookup's SQL, built once: it runs for nearly every event whose
    /// key the filter lets through.
    lookup: String,
    insert: String,
    /// Which keys the table may hold.
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
    /// True when a row with this key hash and `seq` is not in the index table.
    pub fn unindexed(&self, h: i64, seq: i64) -> bool {
        seq > self.low && seq > self.marks.get(&slice_of(h)).copied().unwrap_or(0)
    }
}

impl<V: Row> Tail<V> {
    pub fn new(tables: &'static Tables, hasher: IndexHasher, max: usize) -> Tail<V> {
        let level = |table: &'static str| Level {
            lookup: format!("SELECT seq FROM {table} WHERE h = ?1"),
            insert: format!("INSERT OR REPLACE INTO {table} (h, seq) VALUES (?1, ?2)"),
            filter: Filter::new(table),
        };
        let hot = tables.hot;
        Tail {
            tables,
            hasher,
            max,
            slices: (0..SLICES).map(|_| Slice::default()).collect(),
            cursor: 0,
            commits: 0,
            levels: [level(tables.hot), level(tables.cold)],
            hot_max: HOT_MAX,
            drain_chunk: DRAIN_CHUNK,
            hot_keys: None,
            drained_to: None,
            next_chunk: format!("SELECT h, seq FROM {hot} WHERE (h, seq) > (?1, ?2) ORDER BY h, seq LIMIT ?3"),
            drop_chunk: format!("DELETE FROM {hot} WHERE (h, seq) > (?1, ?2) AND (h, seq) <= (?3, ?4)"),
        }
    }

    pub fn get(&self, key: &Key) -> Option<&V> {
        self.slices[usize::from(slice_of(key.h))].entries.get(key)
    }

    pub fn get_mut(&mut self, key: &Key) -> Option<&mut V> {
        self.slices[usize::from(slice_of(key.h))].entries.get_mut(key)
    }

    /// The key of (site, text), with its hash in the index tables.
    pub fn key(&self, site: i64, text: Arc<str>) -> Key {
        Key { site, h: self.hasher.hash(site, &text), text }
    }

    /// Adds a row not in the index table; rows must come in `seq` order.
    pub fn push(&mut self, key: Key, value: V) {
        let slice = &mut self.slices[usize::from(slice_of(key.h))];
        if slice.entries.is_empty() {
            slice.first_seq = value.seq();
        }
        slice.entries.insert(key, value);
    }

    pub fn clear(&mut self) {
        self.slices.iter_mut().for_each(|s| s.entries.clear());
        self.cursor = 0;
        self.hot_keys = None;
        self.drained_to = None;
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

    /// Merges every key at the next commit, and moves two per commit on to
    /// the cold table (tests).
    #[cfg(test)]
    pub fn index_at_once(&mut self) {
        (self.max, self.hot_max, self.drain_chunk) = (0, 2, 2);
    }

    /// Keeps only the lowest `bits` of each key's hash, so that keys collide (tests).
    #[cfg(test)]
    pub fn collide(&mut self, bits: u32) {
        self.hasher = self.hasher.colliding(bits);
    }

    /// Waits for the index filters being built (tests): true when both are ready.
    #[cfg(test)]
    pub fn wait_for_filter(&mut self) -> bool {
        self.levels.iter_mut().all(|l| {
            l.filter.wait();
            l.filter.is_ready()
        })
    }

    /// Finds an indexed key, in the hot table, else in the cold one: `read`
    /// reads the row of each candidate `seq` and answers `None` unless the row
    /// holds this very key (another key may share its hash).
    pub fn indexed<T>(&mut self, conn: &Connection, key: &Key, mut read: impl FnMut(i64) -> Result<Option<T>>) -> Result<Option<T>> {
        let h = key.h;
        for level in &mut self.levels {
            if !level.filter.may_hold(conn, h as u64) {
                continue;
            }
            let mut stmt = conn.prepare_cached(&level.lookup)?;
            let mut rows = stmt.query([h])?;
            while let Some(r) = rows.next()? {
                if let Some(found) = read(r.get(0)?)? {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    /// Inside the caller's transaction: merges slices into the hot table until
    /// the tail is back under its limit, moves `low` up, and moves a chunk of
    /// the hot table into the cold one if it is over its own. `first_new` is
    /// the smallest `seq` of the rows this transaction appended, if any.
    pub fn before_commit(&mut self, conn: &Connection, first_new: Option<i64>) -> Result<Merged> {
        let (merged, keys) = self.merge(conn, first_new)?;
        self.drain(conn, keys)?;
        Ok(merged)
    }

    /// Returns the slices merged and how many keys they held.
    fn merge(&mut self, conn: &Connection, first_new: Option<i64>) -> Result<(Merged, usize)> {
        let mut merged = Merged::default();
        self.commits = self.commits.wrapping_add(1);
        let mut left: usize = self.slices.iter().map(|s| s.entries.len()).sum();
        // Without merges `low` would stay behind when few rows carry a key,
        // and the start-up scan would grow: move it every so often.
        if left <= self.max && !self.commits.is_multiple_of(LOW_EVERY) {
            return Ok((merged, 0));
        }
        let t = self.tables;
        let mut insert = conn.prepare_cached(&self.levels[0].insert)?;
        let mut mark = conn.prepare_cached(&format!("INSERT OR REPLACE INTO {} (slice, seq) VALUES (?1, ?2)", t.marks))?;
        let mut keys_merged = 0;
        for step in 0..SLICES {
            if left <= self.max {
                break;
            }
            let slice = (usize::from(self.cursor) + step) % SLICES;
            let keys = &self.slices[slice].entries;
            if keys.is_empty() {
                continue;
            }
            let mut rows: Vec<(i64, i64)> = keys.iter().map(|(k, v)| (k.h, v.seq())).collect();
            rows.sort_unstable();
            for &(h, seq) in &rows {
                insert.execute([h, seq])?;
                self.levels[0].filter.add(h as u64);
            }
            self.hot_keys = self.hot_keys.map(|n| n + rows.len());
            keys_merged += rows.len();
            mark.execute(params![slice, rows.iter().map(|r| r.1).max().unwrap_or(0)])?;
            merged.0.push(slice as u16);
            left -= rows.len();
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
            .enumerate()
            .filter(|(i, s)| !s.entries.is_empty() && !merged.0.contains(&(*i as u16)))
            .map(|(_, s)| s.first_seq - 1)
            .chain(std::iter::once(next_seq - 1))
            .min()
            .unwrap_or(0);
        conn.prepare_cached(&format!("UPDATE {} SET seq = ?1", t.low))?.execute([low])?;
        Ok((merged, keys_merged))
    }

    /// Moves the next chunk of the hot table's keys, in key order and going
    /// round, into the cold table when the hot one holds more than `hot_max`.
    /// `merged` is how many keys this commit merged into the hot table.
    fn drain(&mut self, conn: &Connection, merged: usize) -> Result<()> {
        let hot_keys = match self.hot_keys {
            Some(n) => n,
            None => conn.query_row(&format!("SELECT count(*) FROM {}", self.tables.hot), [], |r| r.get::<_, i64>(0))? as usize,
        };
        self.hot_keys = Some(hot_keys);
        if hot_keys <= self.hot_max {
            return Ok(());
        }
        let chunk = (2 * merged).max(self.drain_chunk).min(hot_keys - self.hot_max + self.drain_chunk).min(MAX_DRAIN);
        let mut after = self.drained_to.take().unwrap_or(FIRST);
        let mut left = chunk;
        loop {
            let (moved, last) = self.move_chunk(conn, after, left)?;
            left -= moved;
            if left == 0 {
                self.drained_to = Some(last);
                break;
            }
            // Past the last key: go on from the first, once.
            if after == FIRST {
                break;
            }
            after = FIRST;
        }
        self.hot_keys = Some(hot_keys - (chunk - left));
        Ok(())
    }

    /// Moves up to `n` keys following `after` from the hot table to the cold
    /// one; returns how many, and the last.
    fn move_chunk(&mut self, conn: &Connection, after: (i64, i64), n: usize) -> Result<(usize, (i64, i64))> {
        let cold = &mut self.levels[1];
        let mut insert = conn.prepare_cached(&cold.insert)?;
        let mut next = conn.prepare_cached(&self.next_chunk)?;
        let mut rows = next.query([after.0, after.1, n as i64])?;
        let (mut moved, mut last) = (0, after);
        while let Some(r) = rows.next()? {
            let (h, seq) = (r.get(0)?, r.get(1)?);
            insert.execute([h, seq])?;
            cold.filter.add(h as u64);
            moved += 1;
            last = (h, seq);
        }
        drop(rows);
        if moved > 0 {
            conn.prepare_cached(&self.drop_chunk)?.execute([after.0, after.1, last.0, last.1])?;
        }
        Ok((moved, last))
    }

    /// Drops the slices a committed transaction merged, handing their entries to `take`.
    pub fn committed(&mut self, merged: Merged, mut take: impl FnMut(Key, V)) {
        for slice in merged.0 {
            self.slices[usize::from(slice)].entries.drain().for_each(|(k, v)| take(k, v));
            self.cursor = slice.wrapping_add(1);
        }
    }
}
