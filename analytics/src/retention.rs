//! Retention: raw events older than the raw period, rollups older than the
//! aggregate period, and everything of deleted sites are removed in small
//! batches, each its own short transaction, so ingestion keeps flowing between them.

use std::collections::HashMap;

use crate::db::{params, Connection, Engine};

use crate::write::{sql_index_key, EVENT_ID_TABLES, SESSION_TABLES, UPSERT_RAW_TOTAL};
use crate::Result;


/// Deletes up to `batch` raw events that occurred before `before_ms`; returns how many.
///
/// No index covers every event's time (it cost each insert about three
/// pages): an event occurs when it arrives unless a keyed client back-dated
/// it, so the others are read from the head of the table in arrival order,
/// a window of `batch` rows, and back-dated ones through `events_backdated`.
/// A row at the head that does not qualify yet (a timestamp a few minutes
/// ahead, or a clock stepped back) only narrows the window until it does.
pub fn purge_raw_events(conn: &Connection, before_ms: i64, batch: usize) -> Result<usize> {
    let row = |r: &crate::db::Row<'_>| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?));
    let mut rows: Vec<(i64, i64, i64, Option<String>, i64)> = conn
        .prepare_cached(
            "SELECT seq, site, event_type, client_event_id, received_at FROM events
             WHERE occurred_at < ?1 AND occurred_at < received_at ORDER BY occurred_at LIMIT ?2",
        )?
        .query_map(params![before_ms, batch as i64], row)?
        .collect::<crate::Result<_>>()?;
    let head = batch.saturating_sub(rows.len()) as i64;
    let mut stmt = conn.prepare_cached(
        "SELECT seq, site, event_type, client_event_id, received_at
         FROM (SELECT seq, site, event_type, client_event_id, occurred_at, received_at FROM events ORDER BY seq LIMIT ?2) AS head
         WHERE occurred_at < ?1 AND occurred_at >= received_at",
    )?;
    for r in stmt.query_map(params![before_ms, head], row)? {
        rows.push(r?);
    }
    // The client event id is forgotten with its event: a retry after retention is stored anew.
    let sql = match conn.engine() {
        Engine::Sqlite => format!("DELETE FROM {} WHERE h = {} AND seq = ?3", EVENT_ID_TABLES.cold, sql_index_key("?2", "?1")),
        Engine::Postgres => "DELETE FROM event_ids WHERE client_event_id = ?1 AND site = ?2".into(),
    };
    let mut unindex = conn.prepare_cached(&sql)?;
    let engine = conn.engine();
    // The arrival time finds PostgreSQL's partition of the row.
    let mut delete = conn.prepare_cached("DELETE FROM events WHERE seq = ?1 AND received_at = ?2")?;
    let mut deleted: HashMap<(i64, i64), i64> = HashMap::new();
    for (seq, site, event_type, client_event_id, received_at) in &rows {
        if let Some(id) = client_event_id {
            match engine {
                Engine::Sqlite => unindex.execute(params![id, site, seq])?,
                Engine::Postgres => unindex.execute(params![id, site])?,
            };
        }
        delete.execute(params![seq, received_at])?;
        *deleted.entry((*site, *event_type)).or_default() += 1;
    }
    for (&(site, event_type), &n) in &deleted {
        conn.prepare_cached(UPSERT_RAW_TOTAL)?.execute(params![site, event_type, -n])?;
    }
    Ok(rows.len())
}

/// Deletes the sessions last seen before `before_ms` among the `window`
/// sessions that follow `after` in arrival order, with their index entries.
/// Only sessions already merged into an index table are looked at: the
/// others live in the writer's memory. Returns how many went and the last
/// `seq` looked at, to start the next window from (`None`: nothing follows).
///
/// A session's rollup contribution stays; its row only served to update that
/// contribution when more of its events came, and none come after raw retention.
pub fn purge_old_sessions(conn: &Connection, after: i64, before_ms: i64, window: usize) -> Result<(usize, Option<i64>)> {
    // PostgreSQL's writers find every session through its unique key, with
    // nothing held in memory: every session may go, and there is no index to clean.
    let (select, unindex) = match conn.engine() {
        Engine::Sqlite => (
            "SELECT seq, site, session_id, last_seen FROM sessions
             WHERE seq > ?1 AND seq <= (SELECT seq FROM session_index_low) ORDER BY seq LIMIT ?2",
            Some(format!("DELETE FROM {} WHERE h = {} AND seq = ?3", SESSION_TABLES.cold, sql_index_key("?2", "?1"))),
        ),
        Engine::Postgres => ("SELECT seq, site, session_id, last_seen FROM sessions WHERE seq > ?1 ORDER BY seq LIMIT ?2", None),
    };
    let rows: Vec<(i64, i64, String, i64)> = conn
        .prepare_cached(select)?
        .query_map(params![after, window as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<crate::Result<_>>()?;
    let mut unindex = unindex.map(|sql| conn.prepare_cached(&sql)).transpose()?;
    let mut delete = conn.prepare_cached("DELETE FROM sessions WHERE seq = ?1")?;
    let mut n = 0;
    for (seq, site, session_id, last_seen) in &rows {
        if *last_seen < before_ms {
            if let Some(unindex) = &mut unindex {
                unindex.execute(params![session_id, site, seq])?;
            }
            n += delete.execute([seq])?;
        }
    }
    Ok((n, rows.last().map(|r| r.0)))
}

/// Deletes up to `batch` rows of the hourly tables of `site` older than `before_hour`.
pub fn purge_rollups(conn: &Connection, site: i64, before_hour: i64, batch: usize) -> Result<usize> {
    let mut n = conn.execute(
        "DELETE FROM rollup_hourly WHERE (site, hour, device, country, variant) IN
             (SELECT site, hour, device, country, variant FROM rollup_hourly
              WHERE site = ?1 AND hour < ?2 LIMIT ?3)",
        params![site, before_hour, batch as i64],
    )?;
    n += conn.execute(
        "DELETE FROM rollup_device_hourly WHERE (site, hour, device) IN
             (SELECT site, hour, device FROM rollup_device_hourly WHERE site = ?1 AND hour < ?2 LIMIT ?3)",
        params![site, before_hour, batch as i64],
    )?;
    n += conn.execute(
        "DELETE FROM rollup_variant_hourly WHERE (site, hour, variant) IN
             (SELECT site, hour, variant FROM rollup_variant_hourly WHERE site = ?1 AND hour < ?2 LIMIT ?3)",
        params![site, before_hour, batch as i64],
    )?;
    n += conn.execute(
        "DELETE FROM event_counts_hourly WHERE (site, hour, event_type, device, country) IN
             (SELECT site, hour, event_type, device, country FROM event_counts_hourly
              WHERE site = ?1 AND hour < ?2 LIMIT ?3)",
        params![site, before_hour, batch as i64],
    )?;
    Ok(n)
}

/// Every site's compact key, deleted or not.
pub fn all_site_seqs(conn: &Connection) -> Result<Vec<i64>> {
    let mut stmt = conn.prepare("SELECT seq FROM sites")?;
    let seqs = stmt.query_map((), |r| r.get(0))?.collect::<crate::Result<_>>()?;
    Ok(seqs)
}

/// Deleted sites whose data still has to go.
pub fn deleted_site_seqs(conn: &Connection) -> Result<Vec<i64>> {
    let mut stmt = conn.prepare("SELECT seq FROM sites WHERE deleted_at IS NOT NULL")?;
    let seqs = stmt.query_map((), |r| r.get(0))?.collect::<crate::Result<_>>()?;
    Ok(seqs)
}

/// Deletes the sessions of deleted sites among the `window` sessions that
/// follow `after` in arrival order, with their index entries. Returns how many
/// went and the last `seq` looked at, to start the next window from (`None`:
/// nothing follows, the pass is complete). Sessions have no index by site (it
/// cost every new session a page write): a pass reads them all, a window per
/// write, so ingestion goes on between windows.
pub fn purge_deleted_sites_sessions(conn: &Connection, after: i64, window: usize) -> Result<(usize, Option<i64>)> {
    let last: Option<i64> = conn
        .prepare_cached("SELECT max(seq) FROM (SELECT seq FROM sessions WHERE seq > ?1 ORDER BY seq LIMIT ?2) AS w")?
        .query_row(params![after, window as i64], |r| r.get(0))?;
    let Some(last) = last else {
        return Ok((0, None));
    };
    if conn.engine() == Engine::Sqlite {
        let sql = format!(
            "DELETE FROM {} WHERE (h, seq) IN
                 (SELECT {}, seq FROM sessions WHERE seq > ?1 AND seq <= ?2
                      AND site IN (SELECT seq FROM sites WHERE deleted_at IS NOT NULL))",
            SESSION_TABLES.cold,
            sql_index_key("site", "session_id")
        );
        conn.prepare_cached(&sql)?.execute(params![after, last])?;
    }
    let n = conn
        .prepare_cached(
            "DELETE FROM sessions WHERE seq > ?1 AND seq <= ?2
                 AND site IN (SELECT seq FROM sites WHERE deleted_at IS NOT NULL)",
        )?
        .execute(params![after, last])?;
    Ok((n, Some(last)))
}

/// Deletes up to `batch` rows of a deleted site's events and rollups; once
/// nothing is left, removes the site row itself. Returns how many rows went.
/// Its sessions go first, in a pass of [`purge_deleted_sites_sessions`].
pub fn purge_deleted_site(conn: &Connection, site: i64, batch: usize) -> Result<usize> {
    let limit = batch as i64;
    let sql = match conn.engine() {
        Engine::Sqlite => format!(
            "DELETE FROM {} WHERE (h, seq) IN
                 (SELECT {}, seq FROM events WHERE site = ?1 ORDER BY seq LIMIT ?2)",
            EVENT_ID_TABLES.cold,
            sql_index_key("site", "client_event_id")
        ),
        Engine::Postgres => "DELETE FROM event_ids WHERE (site, client_event_id) IN
                 (SELECT site, client_event_id FROM event_ids WHERE site = ?1 LIMIT ?2)"
            .into(),
    };
    conn.prepare_cached(&sql)?.execute(params![site, limit])?;
    let mut n = conn.execute(
        "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE site = ?1 ORDER BY seq LIMIT ?2)",
        params![site, limit],
    )?;
    n += purge_rollups(conn, site, i64::MAX, batch)?;
    if n == 0 {
        crate::outbox::purge_site(conn, site)?;
        conn.execute("DELETE FROM raw_event_totals WHERE site = ?1", [site])?;
        conn.execute("DELETE FROM sites WHERE seq = ?1 AND deleted_at IS NOT NULL", [site])?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, Utc};

    use super::*;
    use crate::model::NewEvent;
    use crate::store::testing::{self, temp_store};
    use crate::store::Durability;
    use crate::sites;
    use crate::store::testing::{index_entries, row_keys};

    #[test]
    fn old_rows_go_in_batches_and_recent_ones_stay() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        let now = Utc::now();
        let site = testing::site(&mut w, "a.test", now);
        let events: Vec<NewEvent> = (0..10)
            .map(|i| NewEvent {
                // Half of them 100 days old.
                occurred_at: now - Duration::days(if i < 5 { 100 } else { 1 }),
                ..testing::pageview(&site, &format!("session{i:04}"), now)
            })
            .collect();
        let mut g = w.begin().unwrap();
        g.ingest(&events).unwrap();
        g.commit().unwrap();

        let cutoff = (now - Duration::days(90)).timestamp_millis();
        assert_eq!(w.run(|c| purge_raw_events(c, cutoff, 3)).unwrap(), 3);
        assert_eq!(w.run(|c| purge_raw_events(c, cutoff, 3)).unwrap(), 2);
        assert_eq!(w.run(|c| purge_raw_events(c, cutoff, 3)).unwrap(), 0);
        let left: i64 = store.read(|c| Ok(c.query_row("SELECT count(*) FROM events", (), |r| r.get(0))?)).unwrap();
        assert_eq!(left, 5);
        let total: i64 = store.read(|c| Ok(c.query_row("SELECT sum(events) FROM raw_event_totals", (), |r| r.get(0))?)).unwrap();
        assert_eq!(total, 5, "the kept total follows the deletions");

        let hour_cutoff = (now - Duration::days(90)).timestamp() / 3600;
        let mut removed = 0;
        while let n @ 1.. = w.run(|c| purge_rollups(c, site.seq, hour_cutoff, 1)).unwrap() {
            removed += n;
        }
        assert!(removed >= 2, "old rollup and count rows removed, got {removed}");
        let sessions: i64 = store
            .read(|c| Ok(c.query_row("SELECT coalesce(sum(sessions), 0) FROM rollup_hourly", (), |r| r.get(0))?))
            .unwrap();
        assert_eq!(sessions, 5);

        w.run(|c| sites::delete(c, site.account_id, site.id, now)).unwrap();
        let mut after = 0;
        while let (_, Some(last)) = w.run(|c| purge_deleted_sites_sessions(c, after, 3)).unwrap() {
            after = last;
        }
        while w.run(|c| purge_deleted_site(c, site.seq, 2)).unwrap() > 0 {}
        let rows: i64 = store
            .read(|c| {
                Ok(c.query_row(
                    "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM sessions)
                          + (SELECT count(*) FROM rollup_hourly) + (SELECT count(*) FROM sites)
                          + (SELECT count(*) FROM raw_event_totals)",
                    [],
                    |r| r.get(0),
                )?)
            })
            .unwrap();
        assert_eq!(rows, 0);
    }

    #[test]
    fn events_that_arrived_before_the_cutoff_go_from_the_head_and_back_dated_ones_through_their_index() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        w.index_at_once();
        let now = Utc::now();
        let site = testing::site(&mut w, "a.test", now);
        let event = |n: usize, occurred: i64, received: i64| NewEvent {
            client_event_id: Some(format!("{n:02}-event")),
            occurred_at: now - Duration::days(occurred),
            received_at: now - Duration::days(received),
            ..testing::pageview(&site, &format!("session{n}"), now)
        };
        // In arrival order: two that arrived (and occurred) 100 and 95 days
        // ago, one 89 days ago, one that arrived now back-dated 100 days, one
        // of today.
        let events = [event(0, 100, 100), event(1, 95, 95), event(2, 89, 89), event(3, 100, 0), event(4, 0, 0)];
        let mut g = w.begin().unwrap();
        g.ingest(&events).unwrap();
        g.commit().unwrap();
        w.run(|_| Ok(())).unwrap();
        let count = |sql: &str| -> i64 { store.read(|c| Ok(c.query_row(sql, (), |r| r.get(0))?)).unwrap() };
        assert_eq!(index_entries(&store, &w, 1).len(), 5);

        let cutoff = (now - Duration::days(90)).timestamp_millis();
        // The back-dated one and a head window of one; then a head window of two.
        assert_eq!(w.run(|c| purge_raw_events(c, cutoff, 2)).unwrap(), 2);
        assert_eq!(w.run(|c| purge_raw_events(c, cutoff, 2)).unwrap(), 1);
        assert_eq!(w.run(|c| purge_raw_events(c, cutoff, 2)).unwrap(), 0);
        let left: Vec<String> = store
            .read(|c| {
                let mut s = c.prepare("SELECT client_event_id FROM events ORDER BY seq")?;
                let v = s.query_map((), |r| r.get(0))?.collect::<crate::Result<_>>()?;
                Ok(v)
            })
            .unwrap();
        assert_eq!(left, ["02-event", "04-event"]);
        let mut entries = index_entries(&store, &w, 1);
        entries.sort_unstable_by_key(|e| e.1);
        assert_eq!(entries, row_keys(&store, "events", "client_event_id"), "the index entries are those of the events kept");
        assert_eq!(count("SELECT sum(events) FROM raw_event_totals"), 2);

        // Neither query walks the table: the back-dated rows through their
        // partial index, the others a window from the head of the rowid order.
        let plan = |sql: &str| -> String {
            store
                .read(|c| {
                    let mut s = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                    let v: Vec<String> = s.query_map(params![cutoff, 2], |r| r.get(3))?.collect::<crate::Result<_>>()?;
                    Ok(v.join("; "))
                })
                .unwrap()
        };
        let backdated = plan(
            "SELECT seq FROM events WHERE occurred_at < ?1 AND occurred_at < received_at ORDER BY occurred_at LIMIT ?2",
        );
        assert!(backdated.contains("USING INDEX events_backdated"), "{backdated}");
    }

    #[test]
    fn sessions_last_seen_before_the_raw_retention_go_with_their_index_entries() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        w.index_at_once();
        let now = Utc::now();
        let site = testing::site(&mut w, "a.test", now);
        let event = |session: String, days: i64| NewEvent { occurred_at: now - Duration::days(days), ..testing::pageview(&site, &session, now) };
        // Six sessions last seen 100 days ago, six yesterday, interleaved.
        let events: Vec<NewEvent> = (0..12).map(|i| event(format!("s{i:02}"), if i % 2 == 0 { 100 } else { 1 })).collect();
        let mut g = w.begin().unwrap();
        g.ingest(&events).unwrap();
        g.commit().unwrap();
        // The next commit merges them into the index.
        w.run(|_| Ok(())).unwrap();
        let count = |sql: &str| -> i64 { store.read(|c| Ok(c.query_row(sql, (), |r| r.get(0))?)).unwrap() };
        assert_eq!(index_entries(&store, &w, 0).len(), 12);

        let cutoff = (now - Duration::days(90)).timestamp_millis();
        let (mut after, mut purged, mut windows) = (0, 0, 0);
        while let (n, Some(last)) = w.run(|c| purge_old_sessions(c, after, cutoff, 5)).unwrap() {
            purged += n;
            after = last;
            windows += 1;
        }
        assert_eq!((purged, windows), (6, 3), "windows of 5 over 12 sessions");
        assert_eq!(count("SELECT count(*) FROM sessions"), 6);
        assert_eq!(count("SELECT count(*) FROM sessions WHERE session_id IN ('s01', 's03', 's05', 's07', 's09', 's11')"), 6);
        let mut entries = index_entries(&store, &w, 0);
        entries.sort_unstable_by_key(|e| e.1);
        assert_eq!(entries, row_keys(&store, "sessions", "session_id"), "the index entries are those of the sessions kept");

        // A kept session is still found: its next event does not count it again.
        let mut g = w.begin().unwrap();
        g.ingest(&[event("s01".into(), 0)]).unwrap();
        g.commit().unwrap();
        assert_eq!(count("SELECT sum(sessions) FROM rollup_hourly"), 12);
        assert_eq!(count("SELECT count(*) FROM sessions"), 6);
    }
}
