//! Client event ids already stored, so a retried event is stored and counted
//! once: found through a [`KeyIndex`] over `event_id_index`, whose rows are the
//! events themselves (`events.seq`).

use rusqlite::{params, Connection};
use uuid::Uuid;

use super::index::{IndexHasher, Key, KeyIndex, Merged, Row, Tables};
use crate::Result;

/// Event ids the tail holds before slices are merged into the index (about 5 MB).
const TAIL_MAX: usize = 32_768;

pub(crate) const TABLES: Tables = Tables {
    cold: "event_id_index",
    marks: "event_id_index_marks",
    low: "event_id_index_low",
    rows: "events",
};

/// A stored event with a client event id: what a retry is answered.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stored {
    pub seq: i64,
    pub id: Uuid,
    pub received_ms: i64,
}

impl Row for Stored {
    fn seq(&self) -> i64 {
        self.seq
    }
}

pub(super) struct EventIds {
    loaded: bool,
    pub index: KeyIndex<Stored>,
}

fn parse_id(id: &str) -> rusqlite::Result<Uuid> {
    Uuid::parse_str(id).map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e)))
}

impl EventIds {
    pub fn new(hasher: IndexHasher) -> EventIds {
        EventIds { loaded: false, index: KeyIndex::new(&TABLES, hasher, TAIL_MAX) }
    }

    /// The key of (site, client event id).
    pub fn key(&self, site: i64, id: &str) -> Key {
        self.index.key(site, id)
    }

    /// The stored event with this (site, client event id), if any.
    pub fn get(&mut self, conn: &Connection, key: &Key) -> Result<Option<Stored>> {
        self.ensure_loaded(conn)?;
        if !self.index.may_hold(conn, key) {
            return Ok(None);
        }
        if let Some(s) = self.index.get(key) {
            return Ok(Some(*s));
        }
        self.index.indexed(conn, key, |seq| {
            let mut stmt = conn.prepare_cached("SELECT site, client_event_id, id, received_at FROM events WHERE seq = ?1")?;
            let mut rows = stmt.query(params![seq])?;
            let Some(r) = rows.next()? else {
                return Ok(None);
            };
            if r.get::<_, i64>(0)? != key.site || !r.get_ref(1)?.as_str_or_null().map_err(rusqlite::Error::from)?.is_some_and(|t| key.text.is(t)) {
                return Ok(None);
            }
            Ok(Some(Stored { seq, id: parse_id(r.get_ref(2)?.as_str().map_err(rusqlite::Error::from)?)?, received_ms: r.get(3)? }))
        })
    }

    pub fn before_commit(&mut self, conn: &Connection, first_new: Option<i64>, gone: Option<&[(i64, i64)]>) -> Result<Merged> {
        if !self.loaded {
            if gone.is_some() {
                self.index.after_deletes(conn)?;
            }
            return Ok(Merged::default());
        }
        self.index.before_commit(conn, first_new, gone)
    }

    /// Takes in the event ids a committed transaction stored, in `seq` order.
    pub fn committed(&mut self, stored: Vec<(Key, Stored)>, merged: Merged) {
        if !self.loaded {
            return;
        }
        self.index.committed(merged, |_, mut list| {
            list.clear();
            list
        });
        for (key, s) in stored {
            self.index.push(key, s);
        }
    }

    /// Forgets everything: the next use rebuilds the index from the database.
    pub fn reset(&mut self) {
        self.loaded = false;
    }

    fn ensure_loaded(&mut self, conn: &Connection) -> Result<()> {
        if self.loaded {
            return Ok(());
        }
        self.index.rebuild(
            conn,
            "SELECT seq, site, client_event_id, id, received_at FROM events
             WHERE seq > ?1 AND client_event_id IS NOT NULL ORDER BY seq",
            |r, seq| Ok(Stored { seq, id: parse_id(r.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?)?, received_ms: r.get(4)? }),
        )?;
        self.loaded = true;
        Ok(())
    }
}
