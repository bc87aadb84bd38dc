//! The index of session ids and client event ids: [`KeyIndex`], an index by
//! random text key that does not cost a random B-tree page per new key.
//! The writer looks keys up, pushes the keys a committed group stored, runs
//! the merge step inside each group transaction, tells it which keys
//! retention deleted, and rebuilds it after a restart; the levels below are
//! this module's own.
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
//!   into the *hot* level, one slice after the other: `(h, seq)` pairs kept
//!   sorted in memory ([`hot`]);
//! - when the hot level holds more than its limit, its keys move on, a chunk
//!   in key order per commit, into the *cold* table, which holds the rest;
//! - a Bloom filter of every key of the three ([`filter`]) is asked first.
//!
//! Why a hot level: a merge writes about one page per key once the table is
//! far larger than the batch of keys merged into it, as the tail's slices
//! are beside the index of a store with millions of sessions. A chunk of the
//! hot level, many times larger than a slice, shares the cold table's pages:
//! a fraction of a page per key instead of a page.
//!
//! Durable marks say where keys are: per slice, the largest `seq` merged; a
//! `low` seq at or below which every row is merged; and a `cold` seq at or
//! below which every row is in the cold table. [`KeyIndex::rebuild`] rebuilds
//! the tail from the rows above `low` that their slice's mark does not cover,
//! and the hot level from the other rows above `cold` ([`Marks::place`]): some
//! of them may be in the cold table already, and move there again.
//!
//! The tail changes only after the transaction that merged it commits, the
//! hot level as the transaction writes; after a failed commit the owner
//! rebuilds both.

mod filter;
mod hot;
mod key;
mod keyed;

use foldhash::HashMap;

use rusqlite::{params, Connection};

use filter::{Filter, Held};
use hot::Hot;
pub(crate) use key::{register, sql_index_key, IndexHasher};
pub(in crate::write) use keyed::{Key, KeyList, KeyMap, KeyText};
use crate::Result;

/// Commits between two moves of `low` when nothing is merged.
const LOW_EVERY: u32 = 1024;
/// Keys the hot level holds before chunks of it move to the cold table: a
/// chunk writes about a third of a page per key beside a cold table of six
/// million keys (4 MB of memory).
const HOT_MAX: usize = 1 << 18;
/// Keys moved from the hot level to the cold table per commit, when it is
/// over its limit: at least this many, twice what the commit merged (so that
/// the hot level shrinks back under its limit whatever the load: a seeding or a
/// stream of batches merges hundreds of keys a commit), at most `MAX_DRAIN`
/// (a commit's own latency).
const DRAIN_CHUNK: usize = 256;
const MAX_DRAIN: usize = 4096;
/// Where moves start: before every (h, seq) of its slice.
const FIRST: (i64, i64) = (i64::MIN, i64::MIN);

/// The tables of one index: `cold (h, seq)`, `marks (slice, seq)`,
/// `low (seq, cold)`, and the table of the rows (`seq` is its rowid).
pub(crate) struct Tables {
    pub cold: &'static str,
    pub marks: &'static str,
    pub low: &'static str,
    pub rows: &'static str,
}

/// Something stored in a row with this `seq`.
pub(in crate::write) trait Row {
    fn seq(&self) -> i64;
}

/// The slice of a key: the top byte of its hash (256 slices, each a
/// contiguous range of the index tables' order).
pub(in crate::write) fn slice_of(h: i64) -> u16 {
    ((h as u64) >> 56) as u16
}

pub(in crate::write) const SLICES: usize = 256;

pub(in crate::write) struct KeyIndex<V> {
    tables: &'static Tables,
    hasher: IndexHasher,
    max: usize,
    /// The keys by slice, each slice's in `seq` order: a merge takes a
    /// slice's list whole once committed.
    slices: Vec<KeyList<V>>,
    /// The next slice to merge: merging goes round the slices in order.
    cursor: u16,
    /// Commits seen, to move `low` now and then even when nothing is merged.
    commits: u32,
    hot: Hot,
    hot_max: usize,
    drain_chunk: usize,
    /// The last (h, seq) moved to the cold table: the next chunk follows it.
    drained_to: Option<(i64, i64)>,
    cold: Cold,
    /// Which keys the tail, the hot level and the cold table may hold.
    filter: Filter,
}

/// The keys of the tail and the hot level, for the filter.
struct InMemory<'a, V> {
    slices: &'a [KeyList<V>],
    hot: &'a Hot,
}

impl<V> Held for InMemory<'_, V> {
    fn count(&self) -> usize {
        self.slices.iter().map(KeyList::len).sum::<usize>() + self.hot.len()
    }

    fn each(&self, mut f: impl FnMut(u64)) {
        self.slices.iter().flat_map(KeyList::hashes).for_each(|&h| f(h as u64));
        self.hot.hashes().for_each(f);
    }
}

/// The cold table's statements, built once.
struct Cold {
    lookup: String,
    insert: String,
}

/// Slices of the tail merged by a transaction not yet committed.
#[derive(Default)]
pub(in crate::write) struct Merged(Vec<u16>);

/// What start-up needs to tell where a row's key is.
struct Marks {
    low: i64,
    cold: i64,
    marks: HashMap<u16, i64>,
}

/// Where a row's key is.
#[derive(Debug, PartialEq, Eq)]
enum Place {
    Tail,
    Hot,
    Cold,
}

impl Marks {
    /// The rows above this `seq` are in the tail or the hot level (or the cold table).
    pub fn first_unsure(&self) -> i64 {
        self.cold.min(self.low)
    }

    /// Where the key of a row with this key hash and `seq` is. `Hot` may also
    /// be in the cold table already.
    pub fn place(&self, h: i64, seq: i64) -> Place {
        if seq > self.low && seq > self.marks.get(&slice_of(h)).copied().unwrap_or(0) {
            Place::Tail
        } else if seq > self.cold {
            Place::Hot
        } else {
            Place::Cold
        }
    }
}

impl<V: Row> KeyIndex<V> {
    pub fn new(tables: &'static Tables, hasher: IndexHasher, max: usize) -> KeyIndex<V> {
        let cold = tables.cold;
        KeyIndex {
            tables,
            hasher,
            max,
            slices: (0..SLICES).map(|_| KeyList::default()).collect(),
            cursor: 0,
            commits: 0,
            hot: Hot::default(),
            hot_max: HOT_MAX,
            drain_chunk: DRAIN_CHUNK,
            drained_to: None,
            cold: Cold {
                lookup: format!("SELECT seq FROM {cold} WHERE h = ?1"),
                insert: format!("INSERT OR REPLACE INTO {cold} (h, seq) VALUES (?1, ?2)"),
            },
            filter: Filter::new(cold),
        }
    }

    pub fn get(&self, key: &Key) -> Option<&V> {
        self.slices[usize::from(slice_of(key.h))].get(key)
    }

    pub fn get_mut(&mut self, key: &Key) -> Option<&mut V> {
        self.slices[usize::from(slice_of(key.h))].get_mut(key)
    }

    /// The key of (site, text), with its hash in the index tables.
    pub fn key(&self, site: i64, text: &str) -> Key {
        Key { site, h: self.hasher.hash(site, text), text: KeyText::new(text) }
    }

    /// False when no level holds the key: a key new to the store costs a
    /// look at the filter instead of a search of each level. Callers ask
    /// before [`get`](Self::get) and [`indexed`](Self::indexed).
    pub fn may_hold(&mut self, conn: &Connection, key: &Key) -> bool {
        let held = InMemory { slices: &self.slices, hot: &self.hot };
        self.filter.may_hold(conn, key.h as u64, &held)
    }

    /// Adds a row not in the index table; rows must come in `seq` order.
    pub fn push(&mut self, key: Key, value: V) {
        self.filter.add(key.h as u64);
        let slice = usize::from(slice_of(key.h));
        if self.slices[slice].is_empty() {
            let room = self.slice_room();
            self.slices[slice].make_room(room);
        }
        self.slices[slice].push(key, value);
    }

    /// Keys a slice gathers before its merge, but for a rare few: a slice is
    /// merged when the tail is full, and by then it holds about twice its
    /// share of the tail (the slices hold from none to that, by how long ago
    /// each was merged), give or take a square root.
    fn slice_room(&self) -> usize {
        let mean = 2 * self.max / SLICES;
        mean + 4 * mean.isqrt() + 8
    }

    fn clear(&mut self) {
        self.slices.iter_mut().for_each(KeyList::clear);
        self.cursor = 0;
        self.hot.clear();
        self.drained_to = None;
    }

    /// Puts back, at start-up, rows that [`Marks::place`] placed in the hot level.
    fn restore_hot(&mut self, mut rows: Vec<(i64, i64)>) {
        rows.sort_unstable_by_key(|&(h, _)| slice_of(h));
        for run in rows.chunk_by_mut(|a, b| slice_of(a.0) == slice_of(b.0)) {
            self.hot.add(usize::from(slice_of(run[0].0)), run);
        }
    }

    /// Reads the marks, to rebuild the tail and the hot level from the rows they do not cover.
    fn marks(&self, conn: &Connection) -> Result<Marks> {
        let t = self.tables;
        let (low, cold) = conn.query_row(&format!("SELECT seq, cold FROM {}", t.low), [], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let marks = conn
            .prepare(&format!("SELECT slice, seq FROM {}", t.marks))?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(Marks { low, cold, marks })
    }

    /// Forgets what memory holds and rebuilds the tail and the hot level from
    /// the rows the durable marks do not cover: at start-up, and after a
    /// failed commit. `select` reads `seq, site, key, …` of the rows with a
    /// key whose `seq` is above `?1`, in `seq` order; `value` makes a tail
    /// entry of such a row.
    pub fn rebuild(&mut self, conn: &Connection, select: &str, mut value: impl FnMut(&rusqlite::Row<'_>, i64) -> Result<V>) -> Result<()> {
        self.clear();
        let marks = self.marks(conn)?;
        let mut stmt = conn.prepare(select)?;
        let mut rows = stmt.query([marks.first_unsure()])?;
        let mut hot = Vec::new();
        while let Some(r) = rows.next()? {
            let seq: i64 = r.get(0)?;
            let key = self.key(r.get(1)?, r.get_ref(2)?.as_str().map_err(rusqlite::Error::from)?);
            match marks.place(key.h, seq) {
                Place::Tail => {
                    let v = value(r, seq)?;
                    self.push(key, v);
                }
                Place::Hot => hot.push((key.h, seq)),
                Place::Cold => {}
            }
        }
        self.restore_hot(hot);
        Ok(())
    }

    /// Sets the tail's and the hot level's limits and the keys moved to the
    /// cold table per commit, small enough for tests to cross every level.
    #[cfg(test)]
    pub fn set_limits(&mut self, tail: usize, hot: usize, drain_chunk: usize) {
        (self.max, self.hot_max, self.drain_chunk) = (tail, hot, drain_chunk);
    }

    /// Keeps only the lowest `bits` of each key's hash, so that keys collide (tests).
    #[cfg(test)]
    pub fn collide(&mut self, bits: u32) {
        self.hasher = self.hasher.colliding(bits);
    }

    /// Waits for the filter being built (tests): true when it is ready.
    #[cfg(test)]
    pub fn wait_for_filter(&mut self) -> bool {
        self.filter.wait(&InMemory { slices: &self.slices, hot: &self.hot });
        self.filter.is_ready()
    }

    /// The keys in the hot level (tests).
    #[cfg(test)]
    pub fn hot_entries(&self) -> Vec<(i64, i64)> {
        self.hot.entries()
    }

    /// Finds a merged key, in the hot level, else in the cold table: `read`
    /// reads the row of each candidate `seq` and answers `None` unless the row
    /// holds this very key (another key may share its hash).
    pub fn indexed<T>(&self, conn: &Connection, key: &Key, mut read: impl FnMut(i64) -> Result<Option<T>>) -> Result<Option<T>> {
        let h = key.h;
        for seq in self.hot.seqs(h) {
            if let Some(found) = read(seq)? {
                return Ok(Some(found));
            }
        }
        let mut stmt = conn.prepare_cached(&self.cold.lookup)?;
        let mut rows = stmt.query([h])?;
        while let Some(r) = rows.next()? {
            if let Some(found) = read(r.get(0)?)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// Inside the caller's transaction: merges slices of the tail into the hot
    /// level until the tail is back under its limit, moves a chunk of the hot
    /// level into the cold table if it is over its own, and moves the marks.
    /// `first_new` is the smallest `seq` of the rows this transaction
    /// appended, if any; `gone`, when the transaction may have deleted rows,
    /// the keys of those deleted (rows without a key may have gone too). The
    /// hot level and the tail's deleted keys change at once; the tail drops
    /// the merged slices at [`committed`](Self::committed).
    pub fn before_commit(&mut self, conn: &Connection, first_new: Option<i64>, gone: Option<&[(i64, i64)]>) -> Result<Merged> {
        // Before choosing what moves: a key that has no row must not reach
        // the cold table, where nothing would delete it. Raw retention deletes
        // events by age, which may still be in the tail (back-dated ones).
        let deleted = gone.unwrap_or_default();
        self.hot.forget(deleted);
        for &(h, seq) in deleted {
            self.slices[usize::from(slice_of(h))].forget(h, seq);
        }
        self.commits = self.commits.wrapping_add(1);
        let (merged, keys) = self.merge(conn)?;
        let moved = self.drain(conn, keys)?;
        if keys > 0 || moved || self.commits.is_multiple_of(LOW_EVERY) {
            self.move_marks(conn, &merged, first_new)?;
        }
        if gone.is_some() {
            self.after_deletes(conn)?;
        }
        Ok(merged)
    }

    /// Inside a transaction that may have deleted rows, whether or not the
    /// index is loaded: brings the durable marks down to the largest `seq`
    /// left. `seq` is a plain rowid, so once the newest rows are deleted the
    /// next rows appended take their `seq`s again, and a mark above them
    /// would tell [`rebuild`](Self::rebuild) that they were merged: their
    /// keys would be in no level after a restart (a retried event stored
    /// again, a session's next event counted as a new session). Only rows
    /// that had a `seq` at or below the old mark can be at or below the new
    /// one, so what it says of them stays true.
    pub fn after_deletes(&self, conn: &Connection) -> Result<()> {
        let t = self.tables;
        let last: i64 = conn.prepare_cached(&format!("SELECT coalesce(max(seq), 0) FROM {}", t.rows))?.query_row([], |r| r.get(0))?;
        // The conditions leave the pages untouched when no mark is above it.
        conn.prepare_cached(&format!("UPDATE {} SET seq = min(seq, ?1), cold = min(cold, ?1) WHERE seq > ?1 OR cold > ?1", t.low))?.execute([last])?;
        conn.prepare_cached(&format!("UPDATE {} SET seq = ?1 WHERE seq > ?1", t.marks))?.execute([last])?;
        Ok(())
    }

    /// Merges slices until the tail is back under its limit, and writes their
    /// marks. Returns the slices and how many keys they held.
    fn merge(&mut self, conn: &Connection) -> Result<(Merged, usize)> {
        let mut merged = Merged::default();
        let mut left: usize = self.slices.iter().map(KeyList::len).sum();
        if left <= self.max {
            return Ok((merged, 0));
        }
        let mut mark = conn.prepare_cached(&format!("INSERT OR REPLACE INTO {} (slice, seq) VALUES (?1, ?2)", self.tables.marks))?;
        let mut keys_merged = 0;
        for step in 0..SLICES {
            if left <= self.max {
                break;
            }
            let slice = (usize::from(self.cursor) + step) % SLICES;
            let keys = &self.slices[slice];
            if keys.is_empty() {
                continue;
            }
            let mut rows: Vec<(i64, i64)> = keys.iter().map(|(k, v)| (k.h, v.seq())).collect();
            mark.execute(params![slice, rows.iter().map(|r| r.1).max().unwrap_or(0)])?;
            self.hot.add(slice, &mut rows);
            keys_merged += rows.len();
            left -= rows.len();
            merged.0.push(slice as u16);
        }
        Ok((merged, keys_merged))
    }

    /// Moves `low` (every row at or below it merged) and `cold` (every row at
    /// or below it in the cold table) up.
    fn move_marks(&mut self, conn: &Connection, merged: &Merged, first_new: Option<i64>) -> Result<()> {
        let t = self.tables;
        let next_seq = match first_new {
            Some(seq) => seq,
            None => conn.query_row(&format!("SELECT coalesce(max(seq), 0) + 1 FROM {}", t.rows), [], |r| r.get(0))?,
        };
        // Every row still in the tail is newer than the oldest one left in a
        // slice, or than the newest merged one if none is left.
        let low = self
            .slices
            .iter()
            .enumerate()
            .filter(|(i, _)| !merged.0.contains(&(*i as u16)))
            .filter_map(|(_, s)| s.first().map(|v| v.seq() - 1))
            .chain(std::iter::once(next_seq - 1))
            .min()
            .unwrap_or(0);
        let cold = self.hot.oldest().map_or(low, |seq| low.min(seq - 1));
        conn.prepare_cached(&format!("UPDATE {} SET seq = ?1, cold = ?2", t.low))?.execute([low, cold])?;
        Ok(())
    }

    /// Moves the next chunk of the hot level's keys, in key order and going
    /// round, into the cold table when the hot level holds more than
    /// `hot_max`. `merged` is how many keys this commit merged into it.
    /// Returns whether any moved.
    fn drain(&mut self, conn: &Connection, merged: usize) -> Result<bool> {
        let hot_keys = self.hot.len();
        if hot_keys <= self.hot_max {
            return Ok(false);
        }
        let chunk = (2 * merged).max(self.drain_chunk).min(hot_keys - self.hot_max + self.drain_chunk).min(MAX_DRAIN);
        let keys = self.hot.following(self.drained_to.unwrap_or(FIRST), chunk);
        let mut insert = conn.prepare_cached(&self.cold.insert)?;
        for &(h, seq) in &keys {
            insert.execute([h, seq])?;
            self.filter.moved(h as u64);
        }
        self.hot.remove(&keys);
        self.drained_to = keys.last().copied().or(self.drained_to);
        Ok(!keys.is_empty())
    }

    /// Hands the lists of the slices a committed transaction merged to
    /// `take`, which gives back an empty list (its memory reused) in their place.
    pub fn committed(&mut self, merged: Merged, mut take: impl FnMut(u16, KeyList<V>) -> KeyList<V>) {
        for slice in merged.0 {
            let list = &mut self.slices[usize::from(slice)];
            *list = take(slice, std::mem::take(list));
            debug_assert!(list.is_empty());
            self.cursor = slice.wrapping_add(1);
        }
    }
}
