//! PostgreSQL keeps raw events in one partition per UTC day of arrival
//! (`events_YYYYMMDD`), so retention drops a day whole instead of deleting
//! it row by row. A partition is made by the first group that stores an event
//! of its day, whichever node that is; nothing has to run ahead of time.

use crate::db::{params, Connection};
use crate::write::UPSERT_RAW_TOTAL;
use crate::{Error, Result};

const DAY_MS: i64 = 86_400_000;

/// Held while a partition is made, so two nodes make it once.
const PARTITION_LOCK: i64 = 0x706f_7374_6572_6e03;

/// The day (days since the Unix epoch, UTC) a time in milliseconds falls on.
pub(crate) fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

fn name(day: i64) -> Result<String> {
    let date = chrono::DateTime::from_timestamp_millis(day * DAY_MS).ok_or_else(|| Error::Corrupt(format!("day {day}")))?;
    Ok(format!("events_{}", date.format("%Y%m%d")))
}

/// Makes the partition of `day` unless it exists, inside the caller's
/// transaction. It is attached rather than created as a partition: attaching
/// takes a lock that lets other nodes go on inserting events meanwhile.
pub(crate) fn ensure(conn: &Connection, day: i64) -> Result<()> {
    let table = name(day)?;
    // Read from the catalog tables with a fresh snapshot: `to_regclass` may
    // still miss a partition another node attached while this one waited.
    let exists = |c: &Connection| {
        c.query_row(
            "SELECT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                            WHERE i.inhparent = 'events'::regclass AND c.relname = ?1)",
            [table.as_str()],
            |r| r.get::<_, bool>(0),
        )
    };
    if exists(conn)? {
        return Ok(());
    }
    conn.query_row("SELECT pg_advisory_xact_lock(?1)", [PARTITION_LOCK], |_| Ok(()))?;
    if exists(conn)? {
        return Ok(());
    }
    conn.execute_batch(&format!(
        "CREATE TABLE {table} (LIKE events INCLUDING DEFAULTS);
         ALTER TABLE events ATTACH PARTITION {table} FOR VALUES FROM ({}) TO ({})",
        day * DAY_MS,
        (day + 1) * DAY_MS
    ))
}

/// Drops each partition whose events all occurred before `before_ms`, in one
/// transaction per partition: its client event ids are forgotten and the raw
/// totals lowered with it. A partition holding an event not yet due (a clock
/// ahead) is left to the row-by-row purge. Returns how many events went.
pub(crate) fn drop_expired(conn: &Connection, before_ms: i64) -> Result<usize> {
    let mut days: Vec<i64> = conn
        .prepare(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = to_regclass('events')",
        )?
        .query_map((), |r| r.get::<_, String>(0))?
        .filter_map(|name| match name {
            Ok(name) => parse(&name).map(Ok),
            Err(e) => Some(Err(e)),
        })
        .collect::<Result<_>>()?;
    days.sort_unstable();
    let mut dropped = 0;
    for day in days.into_iter().take_while(|d| (d + 1) * DAY_MS <= before_ms) {
        let table = name(day)?;
        dropped += conn.transaction(|c| {
            let counts: Vec<(i64, i64, i64, i64)> = c
                .prepare(&format!("SELECT site, event_type, count(*), max(occurred_at) FROM {table} GROUP BY site, event_type"))?
                .query_map((), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<Result<_>>()?;
            if counts.iter().any(|&(_, _, _, latest)| latest >= before_ms) {
                return Ok(0);
            }
            c.execute(
                &format!(
                    "DELETE FROM event_ids e USING {table} p
                     WHERE p.client_event_id IS NOT NULL AND e.site = p.site AND e.client_event_id = p.client_event_id"
                ),
                (),
            )?;
            for &(site, event_type, n, _) in &counts {
                c.execute(UPSERT_RAW_TOTAL, params![site, event_type, -n])?;
            }
            c.execute_batch(&format!("DROP TABLE {table}"))?;
            Ok(counts.iter().map(|&(_, _, n, _)| n as usize).sum::<usize>())
        })?;
    }
    Ok(dropped)
}

/// The day of a partition's name; `None` for a table not named by this module.
fn parse(table: &str) -> Option<i64> {
    let digits = table.strip_prefix("events_").filter(|d| d.len() == 8)?;
    let date = chrono::NaiveDate::parse_from_str(digits, "%Y%m%d").ok()?;
    Some(date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis().div_euclid(DAY_MS))
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone, Utc};

    use super::*;
    use crate::model::NewEvent;
    use crate::store::testing::{self, postgres_store};
    use crate::store::Durability;

    /// Days arrived 100, 99 and 89 days ago; a day whose events all occurred
    /// long ago but one occurred after the cutoff; then retention at 90 days.
    #[test]
    fn retention_drops_whole_days_forgets_their_ids_and_lowers_the_totals() {
        let Some((_db, store)) = postgres_store() else {
            return;
        };
        let mut w = store.open_writer(Durability::Normal).unwrap();
        let now = Utc::now();
        let site = testing::site(&mut w, "a.test", now);
        let event = |n: usize, received: i64, occurred: Duration| NewEvent {
            client_event_id: Some(format!("id-{n}")),
            received_at: now - Duration::days(received),
            occurred_at: now - Duration::days(received) + occurred,
            ..testing::pageview(&site, &format!("session{n}"), now)
        };
        let events = [
            event(0, 100, Duration::zero()),
            event(1, 100, Duration::zero()),
            event(2, 99, Duration::zero()),
            event(3, 95, Duration::zero()),
            event(4, 95, Duration::days(10)),
            event(5, 89, Duration::zero()),
        ];
        let mut g = w.begin().unwrap();
        g.ingest(&events).unwrap();
        g.commit().unwrap();
        let count = |sql: &str| -> i64 { store.read(|c| c.query_row(sql, (), |r| r.get(0))).unwrap() };
        let partitions = "SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass('events')";
        assert_eq!(count(partitions), 4, "one partition a day");

        let cutoff = (now - Duration::days(90)).timestamp_millis();
        assert_eq!(store.drop_expired_event_days(cutoff).unwrap(), 3, "the days 100 and 99 days ago");
        assert_eq!(count(partitions), 2, "the day with an event not yet due stays, and the recent one");
        assert_eq!(count("SELECT count(*) FROM events"), 3);
        assert_eq!(count("SELECT sum(events) FROM raw_event_totals"), 3, "the totals follow");
        assert_eq!(count("SELECT count(*) FROM event_ids"), 3, "the ids of the dropped events are forgotten");
        assert_eq!(store.drop_expired_event_days(cutoff).unwrap(), 0);

        // The row-by-row purge takes the due event of the kept day.
        assert_eq!(w.run(|c| crate::retention::purge_raw_events(c, cutoff, 100)).unwrap(), 1);
        assert_eq!(count("SELECT count(*) FROM events"), 2);

        // An id of a dropped day, retried today, is stored anew; one of a kept day is a duplicate.
        let mut g = w.begin().unwrap();
        let provisional = g.ingest(&[event(0, 0, -Duration::days(100)), event(5, 0, -Duration::days(89))]).unwrap();
        let committed = g.commit().unwrap();
        let acks: Vec<bool> = provisional.into_iter().map(|a| committed.ack(a).duplicate).collect();
        assert_eq!(acks, [false, true]);
        assert_eq!(count("SELECT count(*) FROM events"), 3);
    }

    #[test]
    fn a_day_is_named_by_its_utc_date_and_read_back() {
        let day = day_of(chrono::Utc.with_ymd_and_hms(2026, 3, 12, 23, 59, 59).unwrap().timestamp_millis());
        assert_eq!(name(day).unwrap(), "events_20260312");
        assert_eq!(parse("events_20260312"), Some(day));
        assert_eq!(day_of(-1), -1, "the millisecond before the epoch is the day before it");
        assert_eq!(parse("events_2026031"), None);
        assert_eq!(parse("event_ids"), None);
    }
}
