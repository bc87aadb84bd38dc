//! What the writer knows of sessions, and where it finds the rest.
//!
//! Sessions are rows appended to `sessions` in arrival order, found by
//! (site, session id) through a [`KeyIndex`] over `session_index`; merged sessions
//! stay in memory until their slice's next merge.

use rusqlite::{params, Connection};

use super::index::{slice_of, IndexHasher, Key, KeyIndex, KeyList, Merged, Row, Tables, SLICES};
use super::{Names, SessionState};
use crate::Result;

/// Sessions the tail holds before slices are merged into the index (about
/// 4 MB; the recent sessions about twice that).
const TAIL_MAX: usize = 32_768;

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
    pub index: KeyIndex<Known>,
    recent: Recent,
    pub names: Names,
}

/// Merged sessions, by slice: what the slice's last merge took in, and the
/// sessions found through the index and changed since. The next merge of
/// the slice drops them (a session that stays active is read from its row
/// again, once a round of merges).
struct Recent {
    slices: Vec<KeyList<Known>>,
}

impl Default for Recent {
    fn default() -> Self {
        Recent { slices: (0..SLICES).map(|_| KeyList::default()).collect() }
    }
}

impl Recent {
    fn get(&self, key: &SessionKey) -> Option<&Known> {
        self.slices[usize::from(slice_of(key.h))].get(key)
    }

    fn remember(&mut self, key: SessionKey, known: Known) {
        let slice = &mut self.slices[usize::from(slice_of(key.h))];
        match slice.get_mut(&key) {
            Some(k) => *k = known,
            None => slice.push(key, known),
        }
    }

    /// Takes a slice's merged list in place of the one it holds, and gives
    /// that one back emptied.
    fn merged(&mut self, slice: u16, list: KeyList<Known>) -> KeyList<Known> {
        let mut dropped = std::mem::replace(&mut self.slices[usize::from(slice)], list);
        dropped.clear();
        dropped
    }

    fn clear(&mut self) {
        self.slices.iter_mut().for_each(KeyList::clear);
    }
}

impl Sessions {
    pub fn new(hasher: IndexHasher) -> Sessions {
        Sessions {
            loaded: false,
            index: KeyIndex::new(&TABLES, hasher, TAIL_MAX),
            recent: Recent::default(),
            names: Names::default(),
        }
    }

    /// The key of (site, session id).
    pub fn key(&self, site: i64, id: &str) -> SessionKey {
        self.index.key(site, id)
    }

    /// Finds a session: in memory, else through the index.
    pub fn get(&mut self, conn: &Connection, key: &SessionKey) -> Result<Option<Known>> {
        self.ensure_loaded(conn)?;
        if !self.index.may_hold(conn, key) {
            return Ok(None);
        }
        if let Some(k) = self.index.get(key).or_else(|| self.recent.get(key)) {
            return Ok(Some(k.clone()));
        }
        let names = &mut self.names;
        self.index.indexed(conn, key, |seq| {
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

    /// Merges slices of the tail into the index if it is full (see [`KeyIndex`]).
    pub fn before_commit(&mut self, conn: &Connection, first_new: Option<i64>, gone: Option<&[(i64, i64)]>) -> Result<Merged> {
        if !self.loaded {
            if gone.is_some() {
                self.index.after_deletes(conn)?;
            }
            return Ok(Merged::default());
        }
        // A recent session that retention deleted is found no more: its next
        // event starts a new one.
        for &(h, seq) in gone.unwrap_or_default() {
            self.recent.slices[usize::from(slice_of(h))].forget(h, seq);
        }
        self.index.before_commit(conn, first_new, gone)
    }

    /// Takes in what a committed transaction wrote: changed sessions (`new` when
    /// just appended, in `seq` order) and merged slices.
    pub fn committed(&mut self, written: Vec<(SessionKey, Known, bool)>, merged: Merged) {
        if !self.loaded {
            return;
        }
        let recent = &mut self.recent;
        self.index.committed(merged, |slice, list| recent.merged(slice, list));
        for (key, known, new) in written {
            if new {
                self.index.push(key, known);
            } else if let Some(k) = self.index.get_mut(&key) {
                *k = known;
            } else {
                self.recent.remember(key, known);
            }
        }
    }

    /// Forgets everything: the next use rebuilds the index from the database.
    pub fn reset(&mut self) {
        self.loaded = false;
        self.recent.clear();
    }

    fn ensure_loaded(&mut self, conn: &Connection) -> Result<()> {
        if self.loaded {
            return Ok(());
        }
        self.recent.clear();
        let names = &mut self.names;
        self.index.rebuild(
            conn,
            "SELECT seq, site, session_id, first_hour, device, country, variant, forced, flags
             FROM sessions WHERE seq > ?1 ORDER BY seq",
            |r, seq| {
                let state = SessionState {
                    first_hour: r.get(3)?,
                    device: r.get(4)?,
                    country: names.get(r.get_ref(5)?.as_str().map_err(rusqlite::Error::from)?),
                    variant: names.get(r.get_ref(6)?.as_str().map_err(rusqlite::Error::from)?),
                    forced: r.get(7)?,
                    flags: r.get(8)?,
                };
                Ok(Known { seq, state })
            },
        )?;
        self.loaded = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::index::KeyText;
    use super::{Key, KeyList, Known, Recent, SessionState};

    fn key(n: i64, slice: u8) -> Key {
        Key { site: 1, text: KeyText::new(&format!("s{n}")), h: (i64::from(slice) << 56) | n }
    }

    fn known(seq: i64) -> Known {
        let state = SessionState { first_hour: 0, device: 0, country: "FR".into(), variant: "".into(), forced: false, flags: 0 };
        Known { seq, state }
    }

    fn merged(keys: &[(i64, u8)]) -> KeyList<Known> {
        let mut list = KeyList::default();
        keys.iter().for_each(|&(n, slice)| list.push(key(n, slice), known(n)));
        list
    }

    fn seqs(r: &Recent, keys: &[(i64, u8)]) -> Vec<Option<i64>> {
        keys.iter().map(|&(n, slice)| r.get(&key(n, slice)).map(|k| k.seq)).collect()
    }

    #[test]
    fn merged_sessions_stay_until_their_slice_merges_again() {
        let mut r = Recent::default();
        assert!(r.merged(3, merged(&[(1, 3), (2, 3)])).is_empty());
        r.merged(4, merged(&[(10, 4)]));
        assert_eq!(seqs(&r, &[(1, 3), (2, 3), (10, 4), (5, 3)]), [Some(1), Some(2), Some(10), None]);

        // A changed session, whether held or not, is remembered in its slice once.
        let mut changed = known(2);
        changed.state.flags = 1;
        r.remember(key(2, 3), changed);
        r.remember(key(9, 3), known(9));
        assert_eq!(r.get(&key(2, 3)).map(|k| k.state.flags), Some(1));
        assert_eq!(seqs(&r, &[(1, 3), (9, 3)]), [Some(1), Some(9)]);
        assert_eq!(r.slices[3].len(), 3);

        // The next merge of slice 3 drops what it held; slice 4 keeps its own.
        let dropped = r.merged(3, merged(&[(3, 3)]));
        assert!(dropped.is_empty(), "the dropped list is given back empty");
        assert_eq!(seqs(&r, &[(1, 3), (2, 3), (9, 3), (3, 3), (10, 4)]), [None, None, None, Some(3), Some(10)]);
        r.clear();
        assert_eq!(seqs(&r, &[(3, 3), (10, 4)]), [None, None]);
    }
}
