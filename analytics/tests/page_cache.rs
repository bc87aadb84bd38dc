//! The page-cache wrapper (`store::page_cache`) must be installed before
//! SQLite starts, so it has this test binary, and its one test, to itself.

use analytics::store::page_cache;
use rusqlite::{params, Connection};

/// A deterministic stream of random-looking keys, so that index pages split
/// out of order and balances park pages at the lock page's number.
fn keys(seed: u64) -> impl Iterator<Item = i64> {
    let mut x = seed;
    std::iter::from_fn(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        Some(x as i64)
    })
}

fn count_and_sum(conn: &Connection) -> (i64, i64) {
    conn.query_row("SELECT count(*), coalesce(sum(k % 1000), 0) FROM t", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap()
}

#[test]
fn commits_and_rollbacks_keep_the_database_intact_behind_the_wrapper() {
    // SAFETY: the only test of this binary, run before SQLite is used.
    assert!(unsafe { page_cache::install() }, "installed before SQLite starts");

    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join("t.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "cache_size", -4_000).unwrap();
    conn.execute_batch("CREATE TABLE t (seq INTEGER PRIMARY KEY, k INTEGER NOT NULL, pad TEXT NOT NULL); CREATE INDEX t_k ON t(k);").unwrap();
    // SQLite has started: it takes no other page cache now.
    assert!(!unsafe { page_cache::install() });

    let mut kept = keys(0x9e37_79b9_7f4a_7c15);
    let mut dropped = keys(0x2545_f491_4f6c_dd1d);
    let (mut rows, mut sum) = (0i64, 0i64);
    let pages = |c: &Connection| c.query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0)).unwrap();
    for round in 0..300 {
        let before = pages(&conn);
        // Transactions and savepoints that grow the file and roll back leave
        // pages past the end: the truncations that the wrapper passes on.
        if round % 10 == 0 {
            conn.execute_batch("BEGIN").unwrap();
            for k in dropped.by_ref().take(400) {
                conn.execute("INSERT INTO t (k, pad) VALUES (?1, ?2)", params![k, "x".repeat(200)]).unwrap();
            }
            assert!(pages(&conn) > before);
            conn.execute_batch("ROLLBACK").unwrap();
        }
        conn.execute_batch("BEGIN").unwrap();
        for k in kept.by_ref().take(40) {
            conn.execute("INSERT INTO t (k, pad) VALUES (?1, ?2)", params![k, "y".repeat(60)]).unwrap();
            rows += 1;
            sum += k % 1000;
        }
        // And the same inside a savepoint of a transaction that commits.
        if round % 10 == 5 {
            conn.execute_batch("SAVEPOINT s").unwrap();
            for k in dropped.by_ref().take(400) {
                conn.execute("INSERT INTO t (k, pad) VALUES (?1, ?2)", params![k, "z".repeat(200)]).unwrap();
            }
            conn.execute_batch("ROLLBACK TO s; RELEASE s").unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    assert_eq!(count_and_sum(&conn), (rows, sum));
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    // What this connection wrote, read by another one from the file.
    let other = Connection::open(dir.path().join("t.db")).unwrap();
    assert_eq!(count_and_sum(&other), (rows, sum));
    // The commits after balances that parked a page had nothing to drop.
    assert!(page_cache::skipped_truncations() >= 200, "skipped {}", page_cache::skipped_truncations());
}
