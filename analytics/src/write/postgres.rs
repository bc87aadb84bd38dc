//! The PostgreSQL write path, safe with several collectors writing at once.
//!
//! A group keeps its events in memory. At commit it claims their client event
//! ids all at once (a second node offering the same id waits for the first to
//! commit, then finds it a duplicate), creates the new sessions and locks the
//! existing ones, each step in one sorted order (so two nodes' groups never
//! wait on each other in a circle), counts every event with the same code as
//! SQLite's writer, writes the events and the changed sessions, adds the
//! rollup deltas in sorted key order, and commits; only then are the events
//! acknowledged, the duplicates with the id stored first.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::rollups::Deltas;
use super::{event_id, Committed, Names, SessionState, INSERT_EVENT};
use crate::db::{self, params, Params, Step, Value};
use crate::model::{Ack, NewEvent};
use crate::store::partitions;
use crate::{Error, Result};

pub(crate) struct PgWriter {
    conn: db::Connection,
    /// Opens a new connection when the server closed this one (a restart, a
    /// failover): the groups in flight fail with 503, the next one reconnects.
    reconnect: Box<dyn Fn() -> Result<db::Connection> + Send>,
    names: Names,
    /// The days whose event partition this writer has seen exist.
    days: HashSet<i64>,
}

pub(crate) struct PgGroup<'a> {
    conn: &'a db::Connection,
    names: &'a mut Names,
    days: &'a mut HashSet<i64>,
    /// The group's events, with the ids given to them, in arrival order.
    events: Vec<(NewEvent, uuid::Uuid)>,
}

impl PgWriter {
    pub fn new(conn: db::Connection, reconnect: Box<dyn Fn() -> Result<db::Connection> + Send>) -> Result<PgWriter> {
        Ok(PgWriter { conn, reconnect, names: Names::default(), days: HashSet::new() })
    }

    pub fn begin(&mut self) -> Result<PgGroup<'_>> {
        if !self.conn.is_usable() {
            self.conn = (self.reconnect)()?;
        }
        pg(&self.conn)?.begin()?;
        Ok(PgGroup { conn: &self.conn, names: &mut self.names, days: &mut self.days, events: Vec::new() })
    }
}

fn pg(conn: &db::Connection) -> Result<&db::PgConn> {
    conn.as_postgres().ok_or_else(|| Error::Conflict("the PostgreSQL writer needs a PostgreSQL connection".into()))
}

impl PgGroup<'_> {
    /// Keeps the event for the commit; its answer is provisional until then
    /// (see [`Committed::ack`]).
    pub fn ingest_event(&mut self, e: &NewEvent) -> Result<Ack> {
        let id = event_id(e.received_at);
        self.events.push((e.clone(), id));
        Ok(Ack { id, received_at: e.received_at, duplicate: false })
    }

    pub fn ingest(&mut self, events: &[NewEvent]) -> Result<Vec<Ack>> {
        events.iter().map(|e| self.ingest_event(e)).collect()
    }

    pub fn apply<T>(&mut self, f: impl FnOnce(&db::Connection) -> Result<T>) -> Result<T> {
        self.conn.transaction(f)
    }

    /// Writes the group and commits it (`write_events` sends the COMMIT with its last steps).
    pub fn commit(mut self) -> Result<Committed> {
        let conn = self.conn;
        let events = std::mem::take(&mut self.events);
        let outcome = ensure_partitions(conn, self.days, &events)
            .and_then(|()| claim_event_ids(conn, events))
            .and_then(|(events, committed)| {
                write_events(conn, self.names, &events)?;
                Ok(committed)
            });
        if let Err(e) = &outcome {
            // Ends the transaction if the failure left it open (a COMMIT sent
            // after a failed step has already ended it).
            if let Err(undo) = pg(conn)?.rollback() {
                tracing::error!(error = %undo, failure = %e, "rolling back a failed group failed");
            }
            // A partition seen may have been dropped since (retention): look again.
            self.days.clear();
        }
        outcome
    }
}

/// Makes sure the partitions of the days the events arrived on exist, before
/// anything else the group does at commit (see [`partitions::ensure`]).
fn ensure_partitions(conn: &db::Connection, known: &mut HashSet<i64>, events: &[(NewEvent, uuid::Uuid)]) -> Result<()> {
    for (e, _) in events {
        let day = partitions::day_of(e.received_at.timestamp_millis());
        if !known.contains(&day) {
            partitions::ensure(conn, day)?;
            known.insert(day);
        }
    }
    Ok(())
}

/// Claims the client event ids of a group's events (one statement, and one
/// more to look up the ids stored before), and returns the events to store
/// (those without an id or whose id was free) with the answers of the others:
/// the id and arrival time their id was stored with.
fn claim_event_ids(conn: &db::Connection, events: Vec<(NewEvent, uuid::Uuid)>) -> Result<(Vec<(NewEvent, uuid::Uuid)>, Committed)> {
    let pg = pg(conn)?;
    // In (site, client id) order on every node; a stable sort, so of two
    // copies in one group the first to arrive is the one stored.
    let mut keyed: Vec<((i64, String), usize)> =
        events.iter().enumerate().filter_map(|(i, (e, _))| Some(((e.site_seq, e.client_event_id.clone()?), i))).collect();
    if keyed.is_empty() {
        return Ok((events, Committed::default()));
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let inserted = pg.insert_all(
        "INSERT INTO event_ids (site, client_event_id, id, received_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO NOTHING RETURNING site, client_event_id",
        keyed
            .iter()
            .map(|(_, i)| {
                let (e, id) = &events[*i];
                params![e.site_seq, e.client_event_id, id.to_string(), e.received_at.timestamp_millis()].values()
            })
            .collect(),
    )?;
    let mut claimed: HashSet<(i64, String)> = HashSet::with_capacity(inserted.len());
    for r in &inserted {
        claimed.insert((db::pg_get(r, 0)?, db::pg_get(r, 1)?));
    }
    // The answer of each id stored, by this group (its first copy) or before it.
    let mut stored: HashMap<(i64, String), Ack> = HashMap::new();
    let mut before: Vec<&(i64, String)> = Vec::new();
    for (k, i) in &keyed {
        let (e, id) = &events[*i];
        if claimed.contains(k) {
            stored.entry(k.clone()).or_insert(Ack { id: *id, received_at: e.received_at, duplicate: true });
        } else if before.last() != Some(&k) {
            before.push(k);
        }
    }
    if !before.is_empty() {
        let rows = pg.query_columns_planned(
            "SELECT site, client_event_id, id, received_at FROM event_ids
             WHERE site = ANY(CAST(?1 AS bigint[])) AND client_event_id = ANY(CAST(?2 AS text[]))
               AND (site, client_event_id) IN (SELECT * FROM unnest(CAST(?1 AS bigint[]), CAST(?2 AS text[])))",
            vec![before.iter().map(|k| Value::Integer(k.0)).collect(), before.iter().map(|k| Value::Text(k.1.clone())).collect()],
        )?;
        for r in &rows {
            let (id, received_ms): (String, i64) = (db::pg_get(r, 2)?, db::pg_get(r, 3)?);
            let ack = Ack {
                id: uuid::Uuid::parse_str(&id).map_err(|_| Error::Corrupt(format!("event id {id}")))?,
                received_at: chrono::DateTime::from_timestamp_millis(received_ms).ok_or_else(|| Error::Corrupt(format!("time {received_ms}")))?,
                duplicate: true,
            };
            stored.insert((db::pg_get(r, 0)?, db::pg_get(r, 1)?), ack);
        }
    }
    let mut duplicates = HashMap::new();
    for (k, i) in &keyed {
        let provisional = events[*i].1;
        let first = stored.get(k).ok_or(Error::NoRow)?;
        if first.id != provisional {
            duplicates.insert(provisional, first.clone());
        }
    }
    let events = events.into_iter().filter(|(_, id)| !duplicates.contains_key(id)).collect();
    Ok((events, Committed::new(duplicates)))
}

impl Drop for PgGroup<'_> {
    /// A group dropped without committing (its commit failed or never ran) is rolled back.
    fn drop(&mut self) {
        if let Ok(c) = pg(self.conn) {
            if c.in_transaction() {
                if let Err(e) = c.rollback() {
                    tracing::error!(error = %e, "cannot roll back a group transaction");
                }
            }
        }
    }
}

/// A session as the group found it (`None`: created by this group) and as it leaves it.
struct Session {
    seq: i64,
    old: Option<SessionState>,
    now: Option<SessionState>,
    last_seen: i64,
    /// What this group's insert stored (the state after the session's first
    /// event, and that event's time), for a session it created.
    created: Option<(SessionState, i64)>,
}

/// Each step is one statement for the whole group, its rows sent as arrays:
/// a group costs a handful of statements and round trips whatever its size.
/// The statements that find rows by key (`= ANY(array)` on their index's
/// columns) are planned for each group's keys; the INSERTs, whose plan never
/// depends on the data, are prepared once and planned once. The events and
/// every rollup upsert are one statement, sent with the session updates and
/// the COMMIT: each statement costs the server a plan, an executor and an
/// answer whatever its rows.
fn write_events(conn: &db::Connection, names: &mut Names, events: &[(NewEvent, uuid::Uuid)]) -> Result<()> {
    let pg = pg(conn)?;
    if events.is_empty() {
        return pg.commit();
    }
    // Sorted by (site, session id): every node creates and locks sessions in this order.
    let mut first: BTreeMap<(i64, &str), &NewEvent> = BTreeMap::new();
    for (e, _) in events {
        first.entry((e.site_seq, &e.session_id)).or_insert(e);
    }
    let created = pg.insert_all(
        "INSERT INTO sessions (site, session_id, first_hour, device, country, variant, forced, flags, last_seen)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (site, session_id) DO NOTHING RETURNING site, session_id, seq",
        first
            .iter()
            .map(|(&(site, session_id), e)| {
                let p = SessionState::after(None, e, names);
                params![site, session_id, p.first_hour, p.device, &*p.country, &*p.variant, p.forced, p.flags, e.occurred_at.timestamp_millis()].values()
            })
            .collect(),
    )?;
    let mut new_seqs: HashMap<(i64, String), i64> = HashMap::with_capacity(created.len());
    for r in &created {
        new_seqs.insert((db::pg_get(r, 0)?, db::pg_get(r, 1)?), db::pg_get(r, 2)?);
    }
    let mut sessions: BTreeMap<(i64, &str), Session> = BTreeMap::new();
    let mut existing = Vec::new();
    for (&key, e) in &first {
        match new_seqs.get(&(key.0, key.1.to_owned())) {
            Some(&seq) => {
                let created = Some((SessionState::after(None, e, names), e.occurred_at.timestamp_millis()));
                sessions.insert(key, Session { seq, old: None, now: None, last_seen: i64::MIN, created });
            }
            None => existing.push(key),
        }
    }
    // Locked in (site, session id) order, bytewise, as they were created.
    let locked = if existing.is_empty() {
        Vec::new()
    } else {
        pg.query_columns_planned(
            "SELECT seq, first_hour, device, country, variant, forced, flags, last_seen, site, session_id FROM sessions
             WHERE site = ANY(CAST(?1 AS bigint[])) AND session_id = ANY(CAST(?2 AS text[]))
               AND (site, session_id) IN (SELECT * FROM unnest(CAST(?1 AS bigint[]), CAST(?2 AS text[])))
             ORDER BY site, session_id COLLATE \"C\" FOR UPDATE",
            vec![existing.iter().map(|k| Value::Integer(k.0)).collect(), existing.iter().map(|k| Value::Text(k.1.to_owned())).collect()],
        )?
    };
    // One gone between the two steps (retention deleted it) fails the group: its clients retry.
    if locked.len() != existing.len() {
        return Err(Error::NoRow);
    }
    // Both in bytewise (site, session id) order: row by row, the same sessions.
    for (&key, r) in existing.iter().zip(&locked) {
        let (site, session_id): (i64, String) = (db::pg_get(r, 8)?, db::pg_get(r, 9)?);
        if (site, session_id.as_str()) != key {
            return Err(Error::NoRow);
        }
        let state = SessionState {
            first_hour: db::pg_get(r, 1)?,
            device: db::pg_get(r, 2)?,
            country: names.get(&db::pg_get::<String>(r, 3)?),
            variant: names.get(&db::pg_get::<String>(r, 4)?),
            forced: db::pg_get(r, 5)?,
            flags: db::pg_get(r, 6)?,
        };
        sessions.insert(key, Session { seq: db::pg_get(r, 0)?, old: Some(state.clone()), now: Some(state), last_seen: db::pg_get(r, 7)?, created: None });
    }

    let mut deltas = Deltas::default();
    let mut rows = Vec::with_capacity(events.len());
    for (e, id) in events {
        let s = sessions.get_mut(&(e.site_seq, e.session_id.as_str())).ok_or(Error::NoRow)?;
        let new = SessionState::after(s.now.as_ref(), e, names);
        deltas.count(e, s.now.as_ref(), &new);
        rows.push(
            params![
                id.to_string(),
                e.site_seq,
                e.session_id,
                e.event_type.code(),
                e.page_url,
                e.metadata,
                &*new.country,
                e.client_event_id,
                e.occurred_at.timestamp_millis(),
                e.received_at.timestamp_millis()
            ]
            .values(),
        );
        s.last_seen = s.last_seen.max(e.occurred_at.timestamp_millis());
        s.now = Some(new);
    }
    let mut steps = vec![Step::InsertAll(INSERT_EVENT, rows)];
    let mut changed = Vec::new();
    for s in sessions.values() {
        let Some(now) = s.now.as_ref() else { continue };
        // A session this group created is written again only when its other
        // events changed what the insert stored: a new visitor's pageview
        // alone costs no update.
        let write = match &s.created {
            Some((state, last_seen)) => state != now || *last_seen != s.last_seen,
            None => s.old.as_ref() != Some(now),
        };
        if !write {
            continue;
        }
        changed.push(params![s.seq, now.first_hour, &*now.variant, now.forced, now.flags, s.last_seen].values());
    }
    steps.push(Step::Planned(
        "UPDATE sessions AS s SET first_hour = u.first_hour, variant = u.variant, forced = u.forced, flags = u.flags,
                                  last_seen = greatest(s.last_seen, u.last_seen)
         FROM unnest(CAST(?1 AS bigint[]), CAST(?2 AS bigint[]), CAST(?3 AS text[]), CAST(?4 AS bigint[]),
                     CAST(?5 AS bigint[]), CAST(?6 AS bigint[])) AS u(seq, first_hour, variant, forced, flags, last_seen)
         WHERE s.seq = ANY(CAST(?1 AS bigint[])) AND s.seq = u.seq",
        changed,
    ));
    // The rollup tables in one order on every node, each one's rows sorted.
    steps.extend(deltas.sorted_upserts().into_iter().map(|(sql, runs)| Step::InsertAll(sql, runs)));
    pg.pipeline_and_commit(steps)
}
