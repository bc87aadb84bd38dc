//! The durable delivery outbox: notifications waiting to be sent, and every
//! attempt made to send them.
//!
//! A notification is enqueued once per dedupe key, as one row per message (an
//! e-mail to one recipient, or one POST to one integration), in the caller's
//! transaction. The sender reads due rows, sends, and records each attempt
//! together with the row's new state in one short transaction, so a restart
//! finds every unsent row still pending and every sent one marked delivered.

use chrono::{DateTime, Utc};
use crate::db::{params, Connection, Row};
use uuid::Uuid;

use crate::accounts::{from_ms, ms};
use crate::{Error, Result};

pub use crate::model::Channel;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub filename: String,
    pub content_type: String,
    pub bytes: Vec<u8>,
}

/// One message to send: `recipient` is the e-mail address or the integration's
/// URL (for display); `payload` is the JSON the sender for `channel` reads.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub channel: Channel,
    pub integration: Option<i64>,
    pub recipient: String,
    pub payload: String,
    pub attachments: Vec<Attachment>,
}

/// Enqueues the deliveries of one notification, atomically (a savepoint, so it
/// works inside or outside the caller's transaction). Returns the new rows'
/// ids, or `None` when `dedupe_key` was enqueued before (nothing is written).
pub fn enqueue(
    conn: &Connection,
    site: i64,
    event: &str,
    dedupe_key: &str,
    deliveries: &[NewDelivery],
    now: DateTime<Utc>,
) -> Result<Option<Vec<Uuid>>> {
    conn.execute_batch("SAVEPOINT outbox_enqueue")?;
    let result = enqueue_rows(conn, site, event, dedupe_key, deliveries, now);
    match &result {
        Ok(_) => conn.execute_batch("RELEASE outbox_enqueue")?,
        Err(_) => conn.execute_batch("ROLLBACK TO outbox_enqueue; RELEASE outbox_enqueue")?,
    }
    result
}

fn enqueue_rows(
    conn: &Connection,
    site: i64,
    event: &str,
    dedupe_key: &str,
    deliveries: &[NewDelivery],
    now: DateTime<Utc>,
) -> Result<Option<Vec<Uuid>>> {
    let fresh = conn.execute(
        "INSERT INTO notifications (dedupe_key, site, event, created_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (dedupe_key) DO NOTHING",
        params![dedupe_key, site, event, ms(now)],
    )?;
    if fresh == 0 {
        return Ok(None);
    }
    let mut ids = Vec::with_capacity(deliveries.len());
    for d in deliveries {
        let id = Uuid::now_v7();
        let seq: i64 = conn.query_row(
            "INSERT INTO outbox (id, site, dedupe_key, event, channel, integration, recipient, payload, state, next_attempt_at, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9, ?9) RETURNING seq",
            params![id.to_string(), site, dedupe_key, event, d.channel.as_str(), d.integration, d.recipient, d.payload, ms(now)],
            |r| r.get(0),
        )?;
        for (position, a) in d.attachments.iter().enumerate() {
            conn.prepare_cached(
                "INSERT INTO outbox_attachments (outbox, position, filename, content_type, bytes) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![seq, position as i64, a.filename, a.content_type, a.bytes])?;
        }
        ids.push(id);
    }
    Ok(Some(ids))
}

/// A row ready to be sent.
#[derive(Debug, Clone)]
pub struct Pending {
    pub seq: i64,
    pub id: Uuid,
    pub event: String,
    pub channel: Channel,
    pub integration: Option<i64>,
    pub recipient: String,
    pub payload: String,
    /// Attempts made so far.
    pub attempts: u32,
    pub attachments: Vec<Attachment>,
}

/// Takes up to `limit` pending rows due at `now` for one worker until
/// `until`, oldest due first: other workers (on other nodes) skip them, and
/// take them again once `until` has passed with no outcome recorded (the
/// worker's node stopped mid-send). Run it on a write connection.
pub fn claim(conn: &Connection, now: DateTime<Utc>, until: DateTime<Utc>, limit: usize) -> Result<Vec<Pending>> {
    // Rows another node's worker is claiming are skipped, not waited for.
    let skip_locked = match conn.engine() {
        crate::db::Engine::Sqlite => "",
        crate::db::Engine::Postgres => " FOR UPDATE SKIP LOCKED",
    };
    let mut stmt = conn.prepare_cached(&format!(
        "UPDATE outbox SET next_attempt_at = ?2 WHERE seq IN
             (SELECT seq FROM outbox WHERE state = 'pending' AND next_attempt_at <= ?1
              ORDER BY next_attempt_at, seq LIMIT ?3{skip_locked})
         RETURNING seq, id, event, channel, integration, recipient, payload, attempts"
    ))?;
    let mut rows: Vec<Pending> = stmt
        .query_map(params![ms(now), ms(until), limit as i64], |r| {
            Ok(Pending {
                seq: r.get(0)?,
                id: parse_uuid(r, 1)?,
                event: r.get(2)?,
                channel: parse_channel(r, 3)?,
                integration: r.get(4)?,
                recipient: r.get(5)?,
                payload: r.get(6)?,
                attempts: r.get(7)?,
                attachments: Vec::new(),
            })
        })?
        .collect::<crate::Result<_>>()?;
    rows.sort_by_key(|r| r.seq);
    let mut stmt = conn.prepare_cached(
        "SELECT filename, content_type, bytes FROM outbox_attachments WHERE outbox = ?1 ORDER BY position",
    )?;
    for row in &mut rows {
        row.attachments = stmt
            .query_map([row.seq], |r| Ok(Attachment { filename: r.get(0)?, content_type: r.get(1)?, bytes: r.get(2)? }))?
            .collect::<crate::Result<_>>()?;
    }
    Ok(rows)
}

/// When the next pending row is due, if any.
pub fn next_due(conn: &Connection) -> Result<Option<DateTime<Utc>>> {
    let at: Option<i64> =
        conn.query_row("SELECT min(next_attempt_at) FROM outbox WHERE state = 'pending'", (), |r| r.get(0))?;
    Ok(at.map(from_ms))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Failed for now; try again at this time.
    Retry(DateTime<Utc>),
    /// Failed for good: not retryable, or out of attempts.
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Retry(_) => "retry",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub started_at: DateTime<Utc>,
    pub latency_ms: i64,
    /// The HTTP status or SMTP reply code, when the other side answered.
    pub status: Option<u16>,
    pub error: Option<String>,
    pub outcome: Outcome,
}

/// Records attempt number `pending.attempts + 1` and moves the row to its new
/// state, in one transaction. A row no longer pending is left alone.
pub fn record(conn: &Connection, seq: i64, attempt_no: u32, a: &Attempt) -> Result<()> {
    conn.execute_batch("SAVEPOINT outbox_record")?;
    let result = record_in(conn, seq, attempt_no, a);
    match &result {
        Ok(()) => conn.execute_batch("RELEASE outbox_record")?,
        Err(_) => conn.execute_batch("ROLLBACK TO outbox_record; RELEASE outbox_record")?,
    }
    result
}

fn record_in(conn: &Connection, seq: i64, attempt_no: u32, a: &Attempt) -> Result<()> {
    let finished = ms(a.started_at) + a.latency_ms;
    let (state, next, finished_at) = match a.outcome {
        Outcome::Delivered => ("delivered", finished, Some(finished)),
        Outcome::Retry(at) => ("pending", ms(at), None),
        Outcome::Failed => ("failed", finished, Some(finished)),
    };
    let updated = conn.execute(
        "UPDATE outbox SET state = ?2, attempts = ?3, next_attempt_at = ?4, finished_at = ?5, last_error = ?6
         WHERE seq = ?1 AND state = 'pending' AND attempts = ?3 - 1",
        params![seq, state, attempt_no, next, finished_at, a.error],
    )?;
    if updated == 0 {
        return Err(Error::Conflict(format!("outbox row {seq} is not pending attempt {attempt_no}")));
    }
    conn.execute(
        "INSERT INTO delivery_attempts (outbox, attempt, started_at, latency_ms, status, outcome, error)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![seq, attempt_no, ms(a.started_at), a.latency_ms, a.status, a.outcome.as_str(), a.error],
    )?;
    Ok(())
}

/// A delivery as the API lists it, with its attempts.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: Uuid,
    pub event: String,
    pub channel: Channel,
    pub integration: Option<Uuid>,
    pub recipient: String,
    pub state: String,
    pub attempts: Vec<AttemptView>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone)]
pub struct AttemptView {
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    pub latency_ms: i64,
    pub status: Option<u16>,
    pub outcome: String,
    pub error: Option<String>,
}

/// The site's deliveries, newest first, optionally only one integration's.
pub fn list(conn: &Connection, site: i64, integration: Option<i64>, limit: usize) -> Result<Vec<Delivery>> {
    select(conn, site, integration, None, limit)
}

/// The deliveries of one notification (e.g. `report-run:<run id>`), first queued first.
pub fn of_notification(conn: &Connection, site: i64, dedupe_key: &str) -> Result<Vec<Delivery>> {
    // A notification has at most 50 recipients plus the site's integrations.
    let mut list = select(conn, site, None, Some(dedupe_key), 1000)?;
    list.reverse();
    Ok(list)
}

fn select(conn: &Connection, site: i64, integration: Option<i64>, dedupe_key: Option<&str>, limit: usize) -> Result<Vec<Delivery>> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.seq, o.id, o.event, o.channel, i.id, o.recipient, o.state, o.next_attempt_at, o.created_at, o.finished_at, o.last_error
         FROM outbox o LEFT JOIN integrations i ON i.seq = o.integration
         WHERE o.site = ?1 AND (o.integration = ?2 OR ?2 IS NULL) AND (o.dedupe_key = ?4 OR ?4 IS NULL)
         ORDER BY o.seq DESC LIMIT ?3",
    )?;
    let rows: Vec<(i64, Delivery)> = stmt
        .query_map(params![site, integration, limit as i64, dedupe_key], |r| {
            let state: String = r.get(6)?;
            let integration: Option<String> = r.get(4)?;
            Ok((
                r.get(0)?,
                Delivery {
                    id: parse_uuid(r, 1)?,
                    event: r.get(2)?,
                    channel: parse_channel(r, 3)?,
                    integration: integration.and_then(|s| Uuid::parse_str(&s).ok()),
                    recipient: r.get(5)?,
                    next_attempt_at: (state == "pending").then(|| r.get::<_, i64>(7).map(from_ms)).transpose()?,
                    state,
                    attempts: Vec::new(),
                    created_at: from_ms(r.get(8)?),
                    finished_at: r.get::<_, Option<i64>>(9)?.map(from_ms),
                    last_error: r.get(10)?,
                },
            ))
        })?
        .collect::<crate::Result<_>>()?;
    let mut stmt = conn.prepare_cached(
        "SELECT attempt, started_at, latency_ms, status, outcome, error FROM delivery_attempts WHERE outbox = ?1 ORDER BY attempt",
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for (seq, mut d) in rows {
        d.attempts = stmt
            .query_map([seq], |r| {
                Ok(AttemptView {
                    attempt: r.get(0)?,
                    started_at: from_ms(r.get(1)?),
                    latency_ms: r.get(2)?,
                    status: r.get(3)?,
                    outcome: r.get(4)?,
                    error: r.get(5)?,
                })
            })?
            .collect::<crate::Result<_>>()?;
        out.push(d);
    }
    Ok(out)
}

/// Removes a purged site's integrations, outbox, attempts and alert state.
pub(crate) fn purge_site(conn: &Connection, site: i64) -> Result<()> {
    for sql in [
        "DELETE FROM delivery_attempts WHERE outbox IN (SELECT seq FROM outbox WHERE site = ?1)",
        "DELETE FROM outbox_attachments WHERE outbox IN (SELECT seq FROM outbox WHERE site = ?1)",
        "DELETE FROM outbox WHERE site = ?1",
        "DELETE FROM notifications WHERE site = ?1",
        "DELETE FROM integrations WHERE site = ?1",
        "DELETE FROM alert_state WHERE site = ?1",
    ] {
        conn.execute(sql, [site])?;
    }
    Ok(())
}

/// How long a delivered or failed row, with its attempts and attachments,
/// is kept after it settled. Report runs themselves are kept forever.
pub const SETTLED_RETENTION_DAYS: i64 = 90;

/// Deletes up to `batch` rows that settled (delivered or failed) before
/// `before_ms`, with their attempts and attachments; returns how many rows.
/// Pending rows are never deleted, whatever their age. The notification's
/// dedupe key stays, so the same notification is never enqueued again.
pub fn purge_settled(conn: &Connection, before_ms: i64, batch: usize) -> Result<usize> {
    let seqs: Vec<i64> = conn
        .prepare_cached("SELECT seq FROM outbox WHERE state <> 'pending' AND finished_at < ?1 ORDER BY finished_at LIMIT ?2")?
        .query_map(params![before_ms, batch as i64], |r| r.get(0))?
        .collect::<crate::Result<_>>()?;
    for seq in &seqs {
        for sql in [
            "DELETE FROM delivery_attempts WHERE outbox = ?1",
            "DELETE FROM outbox_attachments WHERE outbox = ?1",
            "DELETE FROM outbox WHERE seq = ?1",
        ] {
            conn.prepare_cached(sql)?.execute([seq])?;
        }
    }
    Ok(seqs.len())
}

fn parse_uuid(r: &Row<'_>, i: usize) -> crate::Result<Uuid> {
    let s: String = r.get(i)?;
    Uuid::parse_str(&s).map_err(|_| crate::Error::Corrupt(format!("column {i}: not a {}", "uuid")))
}

fn parse_channel(r: &Row<'_>, i: usize) -> crate::Result<Channel> {
    let s: String = r.get(i)?;
    Channel::parse(&s).ok_or_else(|| crate::Error::Corrupt(format!("column {i}: not a {}", "channel")))
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::store::{testing::temp_store, Durability};

    fn mail(to: &str) -> NewDelivery {
        NewDelivery {
            channel: Channel::Email,
            integration: None,
            recipient: to.to_owned(),
            payload: "{}".to_owned(),
            attachments: vec![Attachment { filename: "r.pdf".into(), content_type: "application/pdf".into(), bytes: vec![1, 2, 3] }],
        }
    }

    #[test]
    fn a_dedupe_key_enqueues_once_and_attempts_move_the_state() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        let now = Utc::now();
        let ids = w.run(|c| enqueue(c, 1, "daily_report", "k1", &[mail("a@x.test"), mail("b@x.test")], now)).unwrap().unwrap();
        assert_eq!(ids.len(), 2);
        assert_eq!(w.run(|c| enqueue(c, 1, "daily_report", "k1", &[mail("c@x.test")], now)).unwrap(), None);

        let lease = now + Duration::seconds(60);
        let due_rows = w.run(|c| claim(c, now, lease, 10)).unwrap();
        assert_eq!(due_rows.len(), 2);
        assert_eq!(due_rows[0].attachments[0].bytes, vec![1, 2, 3]);
        assert!(w.run(|c| claim(c, now, lease, 10)).unwrap().is_empty(), "claimed rows are not handed out twice");
        let first = &due_rows[0];
        let later = now + Duration::seconds(30);
        let retry = Attempt { started_at: now, latency_ms: 5, status: Some(503), error: Some("503".into()), outcome: Outcome::Retry(later) };
        w.run(|c| record(c, first.seq, 1, &retry)).unwrap();
        // The same attempt number twice is refused: nothing is recorded twice.
        assert!(w.run(|c| record(c, first.seq, 1, &retry)).is_err());
        assert_eq!(store.read(next_due).unwrap().map(|t| t.timestamp_millis()), Some(later.timestamp_millis()));
        let again = w.run(|c| claim(c, later, later + Duration::seconds(60), 10)).unwrap();
        assert_eq!(again.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![first.seq], "the retry is due, the other is still claimed");
        let expired = w.run(|c| claim(c, lease, lease + Duration::seconds(60), 10)).unwrap();
        assert_eq!(expired.len(), 1, "a claim whose time passed with no outcome is taken again");
        assert_ne!(expired[0].seq, first.seq);
        let ok = Attempt { started_at: later, latency_ms: 7, status: Some(200), error: None, outcome: Outcome::Delivered };
        w.run(|c| record(c, first.seq, 2, &ok)).unwrap();

        let listed = store.read(|c| list(c, 1, None, 10)).unwrap();
        let done = listed.iter().find(|d| d.id == first.id).unwrap();
        assert_eq!(done.state, "delivered");
        assert_eq!(done.attempts.iter().map(|a| (a.attempt, a.status, a.outcome.as_str())).collect::<Vec<_>>(), vec![
            (1, Some(503), "retry"),
            (2, Some(200), "delivered")
        ]);
    }

    #[test]
    fn settled_rows_go_after_their_retention_and_pending_ones_never() {
        let (_dir, store) = temp_store();
        let mut w = store.open_writer(Durability::Normal).unwrap();
        let now = Utc::now();
        let old = now - Duration::days(SETTLED_RETENTION_DAYS + 1);
        let recent = now - Duration::days(SETTLED_RETENTION_DAYS - 1);
        let mut rows = |key: &str, at| w.run(|c| enqueue(c, 1, "daily_report", key, &[mail("a@x.test")], at)).unwrap().unwrap();
        let (delivered_old, failed_old, delivered_recent, pending_old) = (rows("k1", old), rows("k2", old), rows("k3", recent), rows("k4", old));
        let settle = |w: &mut crate::write::Writer, id: Uuid, at: DateTime<Utc>, outcome: Outcome| {
            let seq = store.read(|c| Ok(c.query_row("SELECT seq FROM outbox WHERE id = ?1", [id.to_string()], |r| r.get::<_, i64>(0))?)).unwrap();
            let a = Attempt { started_at: at, latency_ms: 5, status: Some(200), error: None, outcome };
            w.run(|c| record(c, seq, 1, &a)).unwrap();
        };
        settle(&mut w, delivered_old[0], old, Outcome::Delivered);
        settle(&mut w, failed_old[0], old, Outcome::Failed);
        settle(&mut w, delivered_recent[0], recent, Outcome::Delivered);
        let count = |table: &str| store.read(|c| Ok(c.query_row(&format!("SELECT count(*) FROM {table}"), (), |r| r.get::<_, i64>(0))?)).unwrap();
        assert_eq!((count("outbox"), count("delivery_attempts"), count("outbox_attachments")), (4, 3, 4));

        let cutoff = (now - Duration::days(SETTLED_RETENTION_DAYS)).timestamp_millis();
        // One row per batch: the caller repeats until a batch comes back short.
        assert_eq!(w.run(|c| purge_settled(c, cutoff, 1)).unwrap(), 1);
        assert_eq!(w.run(|c| purge_settled(c, cutoff, 1)).unwrap(), 1);
        assert_eq!(w.run(|c| purge_settled(c, cutoff, 1)).unwrap(), 0);
        let left: Vec<Uuid> = store.read(|c| list(c, 1, None, 10)).unwrap().into_iter().map(|d| d.id).collect();
        assert_eq!(left, vec![pending_old[0], delivered_recent[0]], "newest first: the old pending row and the recent delivered one");
        assert_eq!((count("outbox"), count("delivery_attempts"), count("outbox_attachments")), (2, 1, 2));
        assert_eq!(count("notifications"), 4, "dedupe keys stay");
        assert_eq!(w.run(|c| enqueue(c, 1, "daily_report", "k1", &[mail("a@x.test")], now)).unwrap(), None);
    }
}
