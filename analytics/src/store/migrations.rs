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
    include_str!("sql/0012_integer_index_keys.sql"),
    include_str!("sql/0013_hot_index_level_in_memory.sql"),
    include_str!("sql/0014_keep_utm_and_outbox_retention.sql"),
    include_str!("sql/0015_shared_state.sql"),
];

/// The schema version this code writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the schema up to date. Version 12 computes index keys in SQL: the
/// connection has `index_key` (the store's connections are opened with it).
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

    /// An in-memory database, with the SQL function the store's connections have.
    fn memory() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        crate::write::register_index_key(&conn).unwrap();
        conn
    }

    #[test]
    fn migrates_a_new_database_and_is_idempotent() {
        let mut conn = memory();
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
        let mut conn = memory();
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
    fn version_12_indexes_every_session_and_event_id_by_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v11.db");
        let now = chrono::Utc::now();
        let site = {
            let conn = Connection::open(&path).unwrap();
            for (i, sql) in MIGRATIONS[..11].iter().enumerate() {
                conn.execute_batch(sql).unwrap();
                conn.pragma_update(None, "user_version", i as i64 + 1).unwrap();
            }
            let conn = crate::db::Connection::sqlite(conn);
            let account = crate::accounts::ensure_account(&conn, "acme", now).unwrap();
            let new = crate::sites::NewSite { account_id: account, name: "a.test", domain: "a.test", timezone: chrono_tz::Tz::UTC, revenue_per_mille: None };
            let site = crate::sites::create(&conn, &new, now).unwrap();
            // As version 11 left them: one key in each cold table, one in each
            // hot table, one in each writer's tail (above `low`, no mark).
            conn.execute_batch(&format!(
                "INSERT INTO sessions (seq, site, session_id, first_hour, device, country, variant, forced, flags, last_seen)
                     VALUES (1, {s}, 'cold-session', 1, 0, 'FR', '', 0, 1, 0), (2, {s}, 'hot-session', 1, 0, 'FR', '', 0, 1, 0),
                            (3, {s}, 'tail-session', 1, 0, 'FR', '', 0, 1, 0);
                 INSERT INTO session_index (session_id, site, seq) VALUES ('cold-session', {s}, 1);
                 INSERT INTO session_index_hot (session_id, site, seq) VALUES ('hot-session', {s}, 2);
                 UPDATE session_index_low SET seq = 2;
                 INSERT INTO events (seq, id, site, session_id, event_type, page_url, country, client_event_id, occurred_at, received_at)
                     VALUES (1, '0192a7f3-5c1e-7d2a-9b3c-4d5e6f708101', {s}, 'cold-session', 0, 'https://a.test/', 'FR', 'cold-event', 0, 0),
                            (2, '0192a7f3-5c1e-7d2a-9b3c-4d5e6f708102', {s}, 'hot-session', 0, 'https://a.test/', 'FR', 'hot-event', 0, 0),
                            (3, '0192a7f3-5c1e-7d2a-9b3c-4d5e6f708103', {s}, 'tail-session', 0, 'https://a.test/', 'FR', 'tail-event', 0, 0),
                            (4, '0192a7f3-5c1e-7d2a-9b3c-4d5e6f708104', {s}, 'tail-session', 0, 'https://a.test/', 'FR', NULL, 0, 0);
                 INSERT INTO event_id_index (event_id, site, seq) VALUES ('cold-event', {s}, 1);
                 INSERT INTO event_id_index_hot (event_id, site, seq) VALUES ('hot-event', {s}, 2);
                 UPDATE event_id_index_low SET seq = 2;",
                s = site.seq
            ))
            .unwrap();
            site
        };
        let store = crate::Store::open(&path).unwrap();
        let count = |sql: &str| -> i64 { store.read(|c| Ok(c.query_row(sql, [], |r| r.get(0))?)).unwrap() };
        for (index, rows, key) in [("session_index", "sessions", "session_id"), ("event_id_index", "events", "client_event_id")] {
            let matching = format!(
                "SELECT count(*) FROM {index} i JOIN {rows} r ON r.seq = i.seq AND i.h = {}",
                crate::write::sql_index_key("r.site", &format!("r.{key}"))
            );
            assert_eq!((count(&format!("SELECT count(*) FROM {index}")), count(&matching)), (3, 3), "{index}");
            assert_eq!(count(&format!("SELECT count(*) FROM {index}_marks")), 0);
            assert_eq!(count(&format!("SELECT seq FROM {index}_low")), count(&format!("SELECT max(seq) FROM {rows}")));
            assert_eq!(count(&format!("SELECT cold FROM {index}_low")), count(&format!("SELECT max(seq) FROM {rows}")));
        }
        // The writer finds every session and event id where the migration put them.
        let mut writer = store.open_writer(crate::store::Durability::Normal).unwrap();
        for (n, place) in ["cold", "hot", "tail"].iter().enumerate() {
            let e = crate::model::NewEvent {
                client_event_id: Some(format!("{place}-event")),
                ..crate::store::testing::pageview(&site, &format!("{place}-session"), now)
            };
            let again = crate::model::NewEvent { client_event_id: Some(format!("{place}-again")), ..e.clone() };
            let mut g = writer.begin().unwrap();
            let acks = g.ingest(&[e, again]).unwrap();
            g.commit().unwrap();
            assert!(acks[0].duplicate && acks[0].id.to_string().ends_with(&format!("10{}", n + 1)), "{place}-event: {:?}", acks[0]);
            assert!(!acks[1].duplicate);
        }
        assert_eq!(count("SELECT count(*) FROM sessions"), 3, "a stored session was taken for a new one");
        assert_eq!(count("SELECT count(*) FROM events"), 7);
    }

    #[test]
    fn version_13_moves_the_hot_index_tables_into_the_cold_ones() {
        let mut conn = memory();
        for (i, sql) in MIGRATIONS[..12].iter().enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", i as i64 + 1).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO session_index (h, seq) VALUES (5, 1);
             INSERT INTO session_index_hot (h, seq) VALUES (3, 2), (9, 3);
             INSERT INTO event_id_index_hot (h, seq) VALUES (7, 4);
             UPDATE session_index_low SET seq = 3;
             UPDATE event_id_index_low SET seq = 4;",
        )
        .unwrap();
        run(&mut conn).unwrap();
        let pairs = |sql: &str| -> Vec<(i64, i64)> {
            conn.prepare(sql).unwrap().query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<rusqlite::Result<_>>().unwrap()
        };
        assert_eq!(pairs("SELECT h, seq FROM session_index ORDER BY h"), [(3, 2), (5, 1), (9, 3)]);
        assert_eq!(pairs("SELECT h, seq FROM event_id_index"), [(7, 4)]);
        // Every row up to `low` is now in the cold table.
        assert_eq!(pairs("SELECT seq, cold FROM session_index_low"), [(3, 3)]);
        assert_eq!(pairs("SELECT seq, cold FROM event_id_index_low"), [(4, 4)]);
        let hot: i64 = conn.query_row("SELECT count(*) FROM sqlite_master WHERE name LIKE '%_hot'", [], |r| r.get(0)).unwrap();
        assert_eq!(hot, 0);
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
