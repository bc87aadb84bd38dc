//! What the writer knows of sessions, and where it finds the rest.
//!
//! Sessions are rows appended to `sessions` in arrival order. A session is
//! found by id either in the writer's memory or through `session_index`:
//!
//! - the *tail* holds every session not yet in the index (complete: a session
//!   in neither the tail nor the index does not exist);
//! - when the tail grows past [`TAIL_MAX`], whole *slices* of it (sessions
//!   whose ids share their first two bytes, a contiguous range of the index)
//!   are merged into the index, sorted, one slice after the other, so each
//!   index page written takes many sessions instead of one;
//! - merged sessions stay in a two-generation cache of recently seen ones.
//!
//! Durable marks say what the index holds: `session_index_marks` keeps, per
//! slice, the largest `seq` merged; `session_index_low` a `seq` at or below
//! which every session is indexed. At start-up the tail is rebuilt from the
//! sessions above `low` that their slice's mark does not cover.
//!
//! Memory changes only after the transaction that wrote them commits; after a
//! failed commit the memory is rebuilt from the database.

use std::collections::{BTreeMap, HashMap};

use rusqlite::{params, Connection, OptionalExtension};

use super::SessionState;
use crate::Result;

/// Sessions the tail holds before slices are merged into the index (about 13 MB).
const TAIL_MAX: usize = 65_536;
/// Merged sessions kept in each generation of the cache of recent sessions.
const RECENT_GENERATION: usize = 16_384;

pub(super) type SessionKey = (i64, String);

/// A stored session: its row and its state.
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub seq: i64,
    pub state: SessionState,
}

/// The slice of a session id: its first two bytes.
fn slice_of(session_id: &str) -> u16 {
    let b = session_id.as_bytes();
    u16::from(b.first().copied().unwrap_or(0)) << 8 | u16::from(b.get(1).copied().unwrap_or(0))
}

pub(super) struct Sessions {
    /// [`TAIL_MAX`], smaller in tests.
    pub tail_max: usize,
    loaded: bool,
    tail: HashMap<SessionKey, Known>,
    /// The tail's keys by slice, each list in `seq` order.
    slices: BTreeMap<u16, Vec<SessionKey>>,
    /// The next slice to merge: merging goes round the slices in order.
    cursor: u16,
    young: HashMap<SessionKey, Known>,
    old: HashMap<SessionKey, Known>,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions {
            tail_max: TAIL_MAX,
            loaded: false,
            tail: HashMap::new(),
            slices: BTreeMap::new(),
            cursor: 0,
            young: HashMap::new(),
            old: HashMap::new(),
        }
    }
}

/// Slices merged into the index by a transaction not yet committed.
#[derive(Default)]
pub(super) struct Merged(Vec<u16>);

impl Sessions {
    /// Finds a session: in memory, else through the index.
    pub fn get(&mut self, conn: &Connection, key: &SessionKey) -> Result<Option<Known>> {
        self.ensure_loaded(conn)?;
        if let Some(k) = self.tail.get(key).or_else(|| self.young.get(key)) {
            return Ok(Some(k.clone()));
        }
        if let Some(k) = self.old.remove(key) {
            self.remember(key.clone(), k.clone());
            return Ok(Some(k));
        }
        let seq: Option<i64> = conn
            .prepare_cached("SELECT seq FROM session_index WHERE session_id = ?1 AND site = ?2")?
            .query_row(params![key.1, key.0], |r| r.get(0))
            .optional()?;
        let Some(seq) = seq else {
            return Ok(None);
        };
        Ok(conn
            .prepare_cached("SELECT first_hour, device, country, variant, forced, flags FROM sessions WHERE seq = ?1")?
            .query_row([seq], |r| {
                Ok(Known {
                    seq,
                    state: SessionState {
                        first_hour: r.get(0)?,
                        device: r.get(1)?,
                        country: r.get(2)?,
                        variant: r.get(3)?,
                        forced: r.get(4)?,
                        flags: r.get(5)?,
                    },
                })
            })
            .optional()?)
    }

    /// Merges slices into the index, inside the caller's transaction, until the
    /// tail is back under [`TAIL_MAX`]. `first_new` is the smallest `seq` of the
    /// sessions this transaction appended, if any.
    pub fn merge_if_full(&mut self, conn: &Connection, first_new: Option<i64>) -> Result<Merged> {
        let mut merged = Merged::default();
        if !self.loaded || self.tail.len() <= self.tail_max {
            return Ok(merged);
        }
        let mut left = self.tail.len();
        let mut insert = conn.prepare_cached("INSERT OR REPLACE INTO session_index (session_id, site, seq) VALUES (?1, ?2, ?3)")?;
        let mut mark = conn.prepare_cached("INSERT OR REPLACE INTO session_index_marks (slice, seq) VALUES (?1, ?2)")?;
        let mut cursor = self.cursor;
        while left > self.tail_max {
            let Some((&slice, keys)) = self.slices.range(cursor..).next().or_else(|| self.slices.iter().next()) else {
                break;
            };
            let mut rows: Vec<(&str, i64, i64)> = keys.iter().map(|k| (k.1.as_str(), k.0, self.tail[k].seq)).collect();
            rows.sort_unstable();
            for (session_id, site, seq) in &rows {
                insert.execute(params![session_id, site, seq])?;
            }
            let top = rows.iter().map(|r| r.2).max().unwrap_or(0);
            mark.execute(params![slice, top])?;
            merged.0.push(slice);
            left -= keys.len();
            cursor = slice.wrapping_add(1);
            if merged.0.len() == self.slices.len() {
                break;
            }
        }
        let next_seq = match first_new {
            Some(seq) => seq,
            None => conn.query_row("SELECT coalesce(max(seq), 0) + 1 FROM sessions", [], |r| r.get(0))?,
        };
        // Every session still unindexed is newer than the oldest entry left in a
        // slice, or than the last merged one if none is left.
        let low = self
            .slices
            .iter()
            .filter(|(s, _)| !merged.0.contains(s))
            .filter_map(|(_, keys)| keys.first().map(|k| self.tail[k].seq - 1))
            .chain(std::iter::once(next_seq - 1))
            .min()
            .unwrap_or(0);
        conn.prepare_cached("UPDATE session_index_low SET seq = ?1")?.execute([low])?;
        Ok(merged)
    }

    /// Takes in what a committed transaction wrote: changed sessions (`new` when
    /// just appended) and merged slices.
    pub fn committed(&mut self, written: Vec<(SessionKey, Known, bool)>, merged: Merged) {
        if !self.loaded {
            return;
        }
        for slice in merged.0 {
            for key in self.slices.remove(&slice).unwrap_or_default() {
                if let Some(k) = self.tail.remove(&key) {
                    self.remember(key, k);
                }
            }
            self.cursor = slice.wrapping_add(1);
        }
        for (key, known, new) in written {
            if new {
                self.slices.entry(slice_of(&key.1)).or_default().push(key.clone());
                self.tail.insert(key, known);
            } else if let Some(k) = self.tail.get_mut(&key) {
                *k = known;
            } else {
                self.old.remove(&key);
                self.remember(key, known);
            }
        }
    }

    /// Forgets everything: the next use rebuilds the tail from the database.
    pub fn reset(&mut self) {
        *self = Sessions { tail_max: self.tail_max, ..Sessions::default() };
    }

    fn remember(&mut self, key: SessionKey, known: Known) {
        if self.young.len() >= RECENT_GENERATION && !self.young.contains_key(&key) {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(key, known);
    }

    fn ensure_loaded(&mut self, conn: &Connection) -> Result<()> {
        if self.loaded {
            return Ok(());
        }
        self.reset();
        let low: i64 = conn.query_row("SELECT seq FROM session_index_low", [], |r| r.get(0))?;
        let marks: HashMap<u16, i64> = conn
            .prepare("SELECT slice, seq FROM session_index_marks")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut rows = conn.prepare(
            "SELECT seq, site, session_id, first_hour, device, country, variant, forced, flags
             FROM sessions WHERE seq > ?1 ORDER BY seq",
        )?;
        let mut rows = rows.query([low])?;
        while let Some(r) = rows.next()? {
            let seq: i64 = r.get(0)?;
            let key: SessionKey = (r.get(1)?, r.get(2)?);
            let slice = slice_of(&key.1);
            if seq <= marks.get(&slice).copied().unwrap_or(0) {
                continue;
            }
            let state = SessionState {
                first_hour: r.get(3)?,
                device: r.get(4)?,
                country: r.get(5)?,
                variant: r.get(6)?,
                forced: r.get(7)?,
                flags: r.get(8)?,
            };
            self.slices.entry(slice).or_default().push(key.clone());
            self.tail.insert(key, Known { seq, state });
        }
        self.loaded = true;
        Ok(())
    }
}
