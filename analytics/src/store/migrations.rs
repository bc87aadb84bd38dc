//! Schema migrations keyed by `PRAGMA user_version`: append-only, each run in
//! one transaction at open. A database newer than this code is refused.

use rusqlite::Connection;

use crate::{Error, Result};

const MIGRATIONS: &[&str] = &[
    include_str!("sql/0001_init.sql"),
    include_str!("sql/0002_dashboard_sessions.sql"),
    include_str!("sql/0003_delivery.sql"),
    include_str!("sql/0004_reports.sql"),
    include_str!("sql/0005_sessions_in_arrival_order.sql"),
    include_str!("sql/0006_event_ids_merged_index.sql"),
    include_str!("sql/0007_drop_unused_event_index.sql"),
    include_str!("sql/0008_drop_sessions_site_index.sql"),
    include_str!("sql/0009_retention_in_arrival_order.sql"),
    include_str!("sql/0010_rollup_journal.sql"),
    include_str!("sql/0011_hot_index_tables.sql"),
];

/// The schema version this code writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub(super) fn run(conn: &mut Connection) -> Result<()> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew { found, supported: SCHEMA_VERSION });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", index as i64 + 1)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_a_new_database_and_is_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        run(&mut conn).unwrap();
        run(&mut conn).unwrap();
        let v: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0))
            .unwrap();
        assert!(tables >= 8, "expected the schema's tables, found {tables}");
    }

    #[test]
    fn version_5_keeps_the_sessions_and_indexes_them_all() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute_batch(
            "INSERT INTO sessions (site, session_id, first_hour, device, country, variant, forced, flags, last_seen)
             VALUES (1, 'late-one', 10, 0, 'FR', '', 0, 1, 200), (1, 'early-one', 9, 1, 'DE', 'offer', 0, 3, 100)",
        )
        .unwrap();
        run(&mut conn).unwrap();
        let rows: Vec<(i64, String, i64)> = conn
            .prepare("SELECT s.seq, s.session_id, s.flags FROM sessions s JOIN session_index i ON i.seq = s.seq ORDER BY s.seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(rows, vec![(1, "early-one".to_owned(), 3), (2, "late-one".to_owned(), 1)]);
        let low: i64 = conn.query_row("SELECT seq FROM session_index_low", [], |r| r.get(0)).unwrap();
        assert_eq!(low, 2);
    }

    #[test]
    fn refuses_a_newer_database() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        match run(&mut conn) {
            Err(Error::SchemaTooNew { found, supported }) => {
                assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
            }
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
    }
}
