//! The WAL-batching VFS (`store::wal_writes`) must be registered before SQLite
//! starts, so it has this test binary, and its one test, to itself.

use analytics::store::{wal_writes, Durability, Store};
use rusqlite::{params, Connection, OpenFlags};

fn rows_and_sum(store: &Store) -> (i64, i64) {
    store.read(|c| Ok(c.query_row("SELECT count(*), coalesce(sum(k), 0) FROM t", [], |r| Ok((r.get(0)?, r.get(1)?)))?)).unwrap()
}

#[test]
fn commits_through_the_batching_vfs_are_seen_by_readers_and_survive_a_reopen() {
    // SAFETY: the only test of this binary, run before SQLite is used.
    assert!(unsafe { wal_writes::install() }, "registered before SQLite starts");
    assert!(!unsafe { wal_writes::install() }, "registered once");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let store = Store::open(&path).unwrap();
    let mut writer = store.open_writer(Durability::Full).unwrap();
    writer
        .run(|c| Ok(c.execute_batch("CREATE TABLE t (seq INTEGER PRIMARY KEY, k INTEGER NOT NULL, pad TEXT NOT NULL); CREATE INDEX t_k ON t(k);")?))
        .unwrap();

    let (mut rows, mut sum) = (0i64, 0i64);
    let saved_before = wal_writes::writes_saved();
    let mut x: i64 = 0x2545_f491;
    for round in 0..200 {
        // Group commits of a few pages, as the collector's writer makes.
        let n = 20 + round % 30;
        writer
            .run(|c| {
                let mut insert = c.prepare_cached("INSERT INTO t (k, pad) VALUES (?1, ?2)")?;
                for _ in 0..n {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    insert.execute(params![x >> 40, "p".repeat(100)])?;
                    rows += 1;
                    sum += x >> 40;
                }
                Ok(())
            })
            .unwrap();
        // Another connection sees every commit as soon as it returns: its
        // frames were in the file before the commit was published.
        assert_eq!(rows_and_sum(&store), (rows, sum), "round {round}");
        if round % 50 == 49 {
            // The log starts again from its header after a full checkpoint.
            let other = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), wal_writes::NAME).unwrap();
            let busy: i64 = other.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).unwrap();
            assert_eq!(busy, 0, "the checkpoint ran to the end");
        }
    }
    let saved = wal_writes::writes_saved() - saved_before;
    assert!(saved > 200 * 8, "frames of a commit joined into one write: {saved} writes saved");

    // A transaction larger than the buffer, and one larger than the page
    // cache that spills pages into the log before it rolls back.
    writer
        .run(|c| {
            let mut insert = c.prepare_cached("INSERT INTO t (k, pad) VALUES (?1, ?2)")?;
            for i in 0..6_000i64 {
                insert.execute(params![i, "q".repeat(1_000)])?;
            }
            Ok(())
        })
        .unwrap();
    (rows, sum) = (rows + 6_000, sum + (0..6_000i64).sum::<i64>());
    let rolled_back = writer.run(|c| {
        let mut insert = c.prepare_cached("INSERT INTO t (k, pad) VALUES (?1, ?2)")?;
        for i in 0..30_000i64 {
            insert.execute(params![i, "r".repeat(1_000)])?;
        }
        Err::<(), _>(analytics::Error::Conflict("roll back".into()))
    });
    assert!(rolled_back.is_err());
    assert_eq!(rows_and_sum(&store), (rows, sum));

    // A writer at NORMAL does not use the VFS (its commits are not synced).
    let saved_before_normal = wal_writes::writes_saved();
    drop(writer);
    let mut normal = store.open_writer(Durability::Normal).unwrap();
    normal.run(|c| Ok(c.execute("INSERT INTO t (k, pad) VALUES (1, 'n')", [])?)).unwrap();
    assert_eq!(wal_writes::writes_saved(), saved_before_normal);
    (rows, sum) = (rows + 1, sum + 1);
    drop(normal);
    drop(store);

    let store = Store::open(&path).unwrap();
    assert_eq!(rows_and_sum(&store), (rows, sum));
    let check: String = store.read(|c| Ok(c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?)).unwrap();
    assert_eq!(check, "ok");
}
