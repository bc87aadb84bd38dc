//! The form a session id or client event id takes in the index tables: a
//! 64-bit SipHash-1-3 of (site, key) under the store's own random key.
//!
//! An INTEGER keeps SQLite's B-tree searches on its fast integer comparator
//! and an index entry a third of the size of one holding the text (which the
//! merges, moves and lookups compare at every level). Two keys may share a hash, so an entry only names a candidate row:
//! the caller compares the row's own (site, key). The hash key is random per
//! store, so nobody can choose ids that collide.

use std::hash::Hasher;

use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use siphasher::sip::SipHasher13;

use crate::Result;

/// The SQL function `index_key(k0, k1, site, key)`, registered on every
/// connection: migrations, retention and the ZIP export's session join compute
/// index keys in SQL with it (see [`sql_index_key`]).
const FUNCTION: &str = "index_key";

/// The hashing of one store: its key, read from `index_hash_key`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexHasher {
    k0: u64,
    k1: u64,
    /// All ones, except in tests that want collisions.
    mask: i64,
}

impl IndexHasher {
    pub fn load(conn: &Connection) -> Result<IndexHasher> {
        Ok(conn.query_row("SELECT k0, k1 FROM index_hash_key", [], |r| {
            Ok(IndexHasher { k0: r.get::<_, i64>(0)? as u64, k1: r.get::<_, i64>(1)? as u64, mask: -1 })
        })?)
    }

    /// The index key of (site, key).
    pub fn hash(&self, site: i64, key: &str) -> i64 {
        hash(self.k0, self.k1, site, key.as_bytes()) & self.mask
    }

    /// Keeps only the lowest `bits` of each hash, so that tests meet the
    /// collisions real stores almost never do (the SQL function does not).
    #[cfg(test)]
    pub fn colliding(self, bits: u32) -> IndexHasher {
        IndexHasher { mask: (1 << bits) - 1, ..self }
    }
}

fn hash(k0: u64, k1: u64, site: i64, key: &[u8]) -> i64 {
    let mut h = SipHasher13::new_with_keys(k0, k1);
    h.write(&site.to_le_bytes());
    h.write(key);
    h.finish() as i64
}

/// The SQL expression of the index key of (`site`, `key`), two SQL expressions.
pub(crate) fn sql_index_key(site: &str, key: &str) -> String {
    format!("{FUNCTION}((SELECT k0 FROM index_hash_key), (SELECT k1 FROM index_hash_key), {site}, {key})")
}

/// Registers `index_key(k0, k1, site, key)`: NULL when `key` is NULL.
pub(crate) fn register(conn: &Connection) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC | FunctionFlags::SQLITE_INNOCUOUS;
    conn.create_scalar_function(FUNCTION, 4, flags, |ctx| {
        let key = match ctx.get_raw(3) {
            ValueRef::Null => return Ok(None),
            ValueRef::Text(b) | ValueRef::Blob(b) => b,
            _ => return Err(rusqlite::Error::InvalidFunctionParameterType(3, ctx.get_raw(3).data_type())),
        };
        Ok(Some(hash(ctx.get::<i64>(0)? as u64, ctx.get::<i64>(1)? as u64, ctx.get(2)?, key)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sql_function_and_the_writer_agree() {
        let conn = Connection::open_in_memory().unwrap();
        register(&conn).unwrap();
        conn.execute_batch("CREATE TABLE index_hash_key (k0 INTEGER NOT NULL, k1 INTEGER NOT NULL); INSERT INTO index_hash_key VALUES (-5, 1234567890123)").unwrap();
        let hasher = IndexHasher::load(&conn).unwrap();
        let sql = format!("SELECT {}", sql_index_key("?1", "?2"));
        for (site, key) in [(1, "0192a7f3-5c1e-7d2a-9b3c-4d5e6f708192"), (2, "0192a7f3-5c1e-7d2a-9b3c-4d5e6f708192"), (1, "visitor-ü")] {
            let in_sql: i64 = conn.query_row(&sql, rusqlite::params![site, key], |r| r.get(0)).unwrap();
            assert_eq!(in_sql, hasher.hash(site, key), "{site} {key}");
        }
        assert_ne!(hasher.hash(1, "a"), hasher.hash(2, "a"), "the site is part of the key");
        let null: Option<i64> = conn.query_row(&sql, rusqlite::params![1, None::<String>], |r| r.get(0)).unwrap();
        assert_eq!(null, None);
    }

    #[test]
    fn hashes_are_siphash_1_3_and_never_change() {
        // Stored indexes outlive builds: a hash must be the same in every
        // version. Values from an independent implementation of SipHash-1-3
        // (checked against the SipHash-2-4 reference vector).
        let (k0, k1) = (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
        assert_eq!(hash(k0, k1, 0, b""), 6_681_494_030_261_746_940);
        assert_eq!(hash(k0, k1, 1, b"abc"), 2_747_243_075_906_375_109);
        assert_ne!(hash(k0 + 1, k1, 1, b"abc"), hash(k0, k1, 1, b"abc"), "the store's key changes every hash");
    }
}
