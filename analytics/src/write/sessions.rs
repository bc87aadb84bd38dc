//! What the writer knows of sessions, and where it finds the rest.
//!
//! Sessions are rows appended to `sessions` in arrival order, found by
//! (site, session id) through a [`Tail`] over `session_index`; merged sessions
//! stay in a two-generation cache of recently seen ones.

use rusqlite::{params, Connection};

use super::key::IndexHasher;
use super::keyed::ByHash;
use super::tail::{Key, Merged, Place, Row, Tables, Tail};
use super::{Names, SessionState};
use crate::Result;

/// Sessions the tail holds before slices are merged into the index (about 7 MB).
const TAIL_MAX: usize = 32_768;
/// Merged sessions kept in each generation of the cache of recent sessions.
const RECENT_GENERATION: usize = 16_384;

pub(crate) const TABLES: Tables = Tables {
    cold: "session_index",
    marks: "session_index_marks",
    low: "session_index_low",
    rows: "sessions",
};

pub(super) type SessionKey = Key;

/// A stored session: its row and its state.
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub seq: i64,
    pub state: SessionState,
}

impl Row for Known {
    fn seq(&self) -> i64 {
        self.seq
    }
}

pub(super) struct Sessions {
    loaded: bool,
    pub tail: Tail<Known>,
    recent: Recent,
    pub names: Names,
}

/// Merged sessions seen lately, in two generations: a session seen again
/// moves to the young one; when it is full, the old one is dropped.
#[derive(Default)]
struct Recent {
    young: ByHash<Known>,
    old: ByHash<Known>,
}

impl Recent {
    fn remember(&mut self, key: SessionKey, known: Known) {
        if self.young.len() >= RECENT_GENERATION && !self.young.contains_key(&key) {
            self.old = std::mem::replace(&mut self.young, ByHash::with_capacity(RECENT_GENERATION));
        }
        self.young.insert(key, known);
    }
}

impl Sessions {
    pub fn new(hasher: IndexHasher) -> Sessions {
        Sessions {
            loaded: false,
            tail: Tail::new(&TABLES, hasher, TAIL_MAX),
            recent: Recent::default(),
            names: Names::default(),
        }
    }

    /// The key of (site, session id).
    pub fn key(&self, site: i64, id: &str) -> SessionKey {
        self.tail.key(site, id)
    }

    /// Finds a session: in memory, else through the index.
    pub fn get(&mut self, conn: &Connection, key: &SessionKey) -> Result<Option<Known>> {
        self.ensure_loaded(conn)?;
        if !self.tail.may_hold(conn, key) {
            return Ok(None);
        }
        if let Some(k) = self.tail.get(key).or_else(|| self.recent.young.get(key)) {
            return Ok(Some(k.clone()));
        }
        if let Some(k) = self.recent.old.remove(key) {
            self.recent.remember(key.clone(), k.clone());
            return Ok(Some(k));
        }
        let names = &mut self.names;
        self.tail.indexed(conn, key, |seq| {
            let mut stmt = conn.prepare_cached(
                "SELECT site, session_id, first_hour, device, country, variant, forced, flags FROM sessions WHERE seq = ?1",
            )?;
            let mut rows = stmt.query(params![seq])?;
            let Some(r) = rows.next()? else {
                return Ok(None);
            };
            if r.get::<_, i64>(0)? != key.site || !key.text.is(r.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?) {
                return Ok(None);
            }
            let state = SessionState {
                first_hour: r.get(2)?,
                device: r.get(3)?,
                country: names.get(r.get_ref(4)?.as_str().map_err(rusqlite::Error::from)?),
                variant: names.get(r.get_ref(5)?.as_str().map_err(rusqlite::Error::from)?),
                forced: r.get(6)?,
                flags: r.get(7)?,
            };
            Ok(Some(Known { seq, state }))
        })
    }

    /// Merges slices of the tail into the index if it is full (see [`Tail`]).
    pub fn before_commit(&mut self, conn: &Connection, first_new: Option<i64>, gone: &[(i64, i64)]) -> Result<Merged> {
        if !self.loaded {
            return Ok(Merged::default());
        }
        self.tail.before_commit(conn, first_new, gone)
    }

    /// Takes in what a committed transaction wrote: changed sessions (`new` when
    /// just appended, in `seq` order) and merged slices.
    pub fn committed(&mut self, written: Vec<(SessionKey, Known, bool)>, merged: Merged) {
        if !self.loaded {
            return;
        }
        let recent = &mut self.recent;
        self.tail.committed(merged, |key, known| recent.remember(key, known));
        for (key, known, new) in written {
            if new {
                self.tail.push(key, known);
            } else if let Some(k) = self.tail.get_mut(&key) {
                *k = known;
            } else {
                self.recent.old.remove(&key);
                self.recent.remember(key, known);
            }
        }
    }

    /// Forgets everything: the next use rebuilds the tail from the database.
    pub fn reset(&mut self) {
        self.loaded = false;
        self.tail.clear();
        self.recent.young.clear();
        self.recent.old.clear();
    }

    fn ensure_loaded(&mut self, conn: &Connection) -> Result<()> {
        if self.loaded {
            return Ok(());
        }
        self.reset();
        let marks = self.tail.marks(conn)?;
        let mut stmt = conn.prepare(
            "SELECT seq, site, session_id, first_hour, device, country, variant, forced, flags
             FROM sessions WHERE seq > ?1 ORDER BY seq",
        )?;
        let mut rows = stmt.query([marks.first_unsure()])?;
        let mut hot = Vec::new();
        while let Some(r) = rows.next()? {
            let seq: i64 = r.get(0)?;
            let key = self.tail.key(r.get(1)?, r.get_ref(2)?.as_str().map_err(rusqlite::Error::from)?);
            match marks.place(key.h, seq) {
                Place::Tail => {}
                Place::Hot => {
                    hot.push((key.h, seq));
                    continue;
                }
                Place::Cold => continue,
            }
            let state = SessionState {
                first_hour: r.get(3)?,
                device: r.get(4)?,
                country: self.names.get(r.get_ref(5)?.as_str().map_err(rusqlite::Error::from)?),
                variant: self.names.get(r.get_ref(6)?.as_str().map_err(rusqlite::Error::from)?),
                forced: r.get(7)?,
                flags: r.get(8)?,
            };
            self.tail.push(key, Known { seq, state });
        }
        self.tail.restore_hot(hot);
        self.loaded = true;
        Ok(())
    }
}
