//! The write path: the one write connection, group transactions, and the
//! per-event pipeline raw insert → session update → rollup delta.
//!
//! A session counts in exactly one `rollup_hourly` row, the one keyed by its
//! first hour, device, country and variant. When an event changes the session
//! (a new flag, a variant, an earlier first hour) the writer takes the session's
//! old contribution out of its old row and puts the new one in, so late events
//! update the right hour exactly once per flag.
//!
//! Within a group transaction the session states and rollup deltas are kept in
//! memory and written once per distinct session and rollup row just before the
//! commit. Sessions are appended in arrival order and found through the
//! writer's memory or an index merged in bulk ([`index`], [`sessions`]); client
//! event ids are found the same way ([`event_ids`]).
//! Under heavy load the rollup deltas of a group may go to a journal instead,
//! written into the rollups by a later group ([`rollups`]).
//! What a failed savepoint or a failed commit staged is thrown away.

mod event_ids;
mod index;
mod postgres;
#[cfg(test)]
mod model_tests;
mod rollups;
mod sessions;

pub(crate) use event_ids::TABLES as EVENT_ID_TABLES;
pub(crate) use index::{register as register_index_key, sql_index_key, IndexHasher};
pub(crate) use sessions::TABLES as SESSION_TABLES;

use std::time::{Duration, Instant};

use rand::Rng;
use rusqlite::{params, CachedStatement};

use crate::db;
use uuid::Uuid;

use crate::model::{flags, Ack, NewEvent};
use crate::Result;
use event_ids::{EventIds, Stored};
pub(crate) use rollups::UPSERT_RAW_TOTAL;
use rollups::Deltas;
use index::KeyMap;
use sessions::{Known, SessionKey, Sessions};

/// A country code or variant name. A session's state is copied several times
/// per event (staged, written, remembered, keyed into rollups): shared, a copy
/// is a reference count instead of an allocation and a free.
pub(crate) type Name = std::sync::Arc<str>;

/// The names the writer has met (a few per site), each allocated once.
#[derive(Default)]
pub(crate) struct Names(foldhash::HashSet<Name>);

impl Names {
    /// Variant names come from clients: past this many the set starts over
    /// (the names in use stay alive where they are held).
    const MAX: usize = 4096;

    pub(crate) fn get(&mut self, s: &str) -> Name {
        if let Some(n) = self.0.get(s) {
            return n.clone();
        }
        if self.0.len() >= Self::MAX {
            self.0.clear();
        }
        let n: Name = s.into();
        self.0.insert(n.clone());
        n
    }
}

/// The write connection of either engine: the collector's writer thread
/// holds one, jobs and the admin CLI open their own.
pub struct Writer(WriterEngine);

enum WriterEngine {
    Sqlite(SqliteWriter),
    Postgres(postgres::PgWriter),
}

/// A group transaction: many commands, one commit.
pub struct Group<'a>(GroupEngine<'a>);

enum GroupEngine<'a> {
    Sqlite(SqliteGroup<'a>),
    Postgres(postgres::PgGroup<'a>),
}

impl Writer {
    pub(crate) fn sqlite(conn: rusqlite::Connection) -> Result<Writer> {
        Ok(Writer(WriterEngine::Sqlite(SqliteWriter::new(conn)?)))
    }

    pub(crate) fn postgres(conn: db::Connection, reconnect: Box<dyn Fn() -> Result<db::Connection> + Send>) -> Result<Writer> {
        Ok(Writer(WriterEngine::Postgres(postgres::PgWriter::new(conn, reconnect)?)))
    }

    /// Starts a group transaction.
    pub fn begin(&mut self) -> Result<Group<'_>> {
        Ok(Group(match &mut self.0 {
            WriterEngine::Sqlite(w) => GroupEngine::Sqlite(w.begin()?),
            WriterEngine::Postgres(w) => GroupEngine::Postgres(w.begin()?),
        }))
    }

    /// Runs one change in its own transaction.
    pub fn run<T>(&mut self, f: impl FnOnce(&db::Connection) -> Result<T>) -> Result<T> {
        let mut group = self.begin()?;
        let out = group.apply(f)?;
        group.commit()?;
        Ok(out)
    }

    #[cfg(test)]
    pub(crate) fn sqlite_writer(&mut self) -> &mut SqliteWriter {
        match &mut self.0 {
            WriterEngine::Sqlite(w) => w,
            WriterEngine::Postgres(_) => panic!("a SQLite writer was expected"),
        }
    }

    #[cfg(test)]
    pub(crate) fn index_at_once(&mut self) {
        self.sqlite_writer().index_at_once();
    }

    #[cfg(test)]
    pub(crate) fn hot_entries(&self) -> [Vec<(i64, i64)>; 2] {
        match &self.0 {
            WriterEngine::Sqlite(w) => w.hot_entries(),
            WriterEngine::Postgres(_) => panic!("a SQLite writer was expected"),
        }
    }
}

impl Group<'_> {
    /// Stores one event and updates its session and the rollups.
    pub fn ingest_event(&mut self, e: &NewEvent) -> Result<Ack> {
        match &mut self.0 {
            GroupEngine::Sqlite(g) => g.ingest_event(e),
            GroupEngine::Postgres(g) => g.ingest_event(e),
        }
    }

    /// Stores events; one answer per event, in order. Nothing of the batch
    /// is kept when one of its events fails.
    pub fn ingest(&mut self, events: &[NewEvent]) -> Result<Vec<Ack>> {
        match &mut self.0 {
            GroupEngine::Sqlite(g) => g.ingest(events),
            GroupEngine::Postgres(g) => g.ingest(events),
        }
    }

    /// Runs `f` in a savepoint of the group transaction; `f` must not change
    /// sessions or rollups (see [`Group::maintain`]).
    pub fn apply<T>(&mut self, f: impl FnOnce(&db::Connection) -> Result<T>) -> Result<T> {
        match &mut self.0 {
            GroupEngine::Sqlite(g) => g.apply(f),
            GroupEngine::Postgres(g) => g.apply(f),
        }
    }

    /// Runs maintenance that may change rollups or sessions (retention).
    pub fn maintain<T>(&mut self, f: impl FnOnce(&db::Connection) -> Result<T>) -> Result<T> {
        match &mut self.0 {
            GroupEngine::Sqlite(g) => g.maintain(f),
            GroupEngine::Postgres(g) => g.apply(f),
        }
    }

    /// Commits, with the rollups written.
    pub fn commit(self) -> Result<Committed> {
        match self.0 {
            GroupEngine::Sqlite(g) => g.commit().map(|()| Committed::default()),
            GroupEngine::Postgres(g) => g.commit(),
        }
    }

    /// Commits while more writes wait (SQLite may journal the rollup deltas).
    pub fn commit_busy(self) -> Result<Committed> {
        match self.0 {
            GroupEngine::Sqlite(g) => g.commit_busy().map(|()| Committed::default()),
            GroupEngine::Postgres(g) => g.commit(),
        }
    }
}

/// What a commit settled about the group's events. PostgreSQL claims client
/// event ids at commit, all at once, so an event [`Group::ingest_event`]
/// answered as new may prove a copy of one stored before; SQLite knows at once.
#[derive(Debug, Default)]
pub struct Committed {
    /// The answers of the events found duplicates, by their provisional ids.
    duplicates: std::collections::HashMap<Uuid, Ack>,
}

impl Committed {
    pub(crate) fn new(duplicates: std::collections::HashMap<Uuid, Ack>) -> Committed {
        Committed { duplicates }
    }

    /// An event's final answer, from the one its group gave before the commit.
    pub fn ack(&self, provisional: Ack) -> Ack {
        match self.duplicates.get(&provisional.id) {
            Some(stored) => stored.clone(),
            None => provisional,
        }
    }
}

/// Owner of a SQLite write connection.
pub(crate) struct SqliteWriter {
    conn: db::Connection,
    sessions: Sessions,
    event_ids: EventIds,
    /// When the oldest rollup deltas still in the journal were committed;
    /// `None` when the journal is empty.
    journaled_since: Option<Instant>,
    apply_every: Duration,
    /// The last group's staged changes and scratch, emptied: their maps'
    /// memory serves the next group instead of growing anew from nothing
    /// (reallocated and rehashed four or five times a group).
    spare: [Staged; 2],
}

/// The longest a busy writer leaves rollup deltas in the journal: how far the
/// rollups (and so every query) may trail the raw events under heavy load.
const APPLY_EVERY: Duration = Duration::from_millis(100);

impl SqliteWriter {
    pub(crate) fn new(conn: rusqlite::Connection) -> Result<SqliteWriter> {
        let hasher = IndexHasher::load(&conn)?;
        watch_deletes(&conn)?;
        let conn = db::Connection::sqlite(conn);
        // A writer that stopped may have left rows in the journal.
        let journaled_since = Some(Instant::now());
        Ok(SqliteWriter {
            conn,
            sessions: Sessions::new(hasher),
            event_ids: EventIds::new(hasher),
            journaled_since,
            apply_every: APPLY_EVERY,
            spare: Default::default(),
        })
    }

    /// Starts a group transaction: many commands, one commit.
    pub fn begin(&mut self) -> Result<SqliteGroup<'_>> {
        // IMMEDIATE takes the write lock up front, waiting (busy timeout) while
        // another write connection (the outbox sender, the alerts job) commits.
        // A deferred transaction that read first would instead fail at once
        // with "database is locked" when it tries to write after such a commit.
        let tx = Tx::begin_immediate(&self.conn)?;
        let insert_event = sqlite(&self.conn).prepare_cached(INSERT_EVENT)?;
        let [staged, scratch] = std::mem::take(&mut self.spare);
        Ok(SqliteGroup {
            tx,
            insert_event,
            sessions: &mut self.sessions,
            event_ids: &mut self.event_ids,
            journaled_since: &mut self.journaled_since,
            apply_every: self.apply_every,
            staged,
            scratch,
            spare: &mut self.spare,
            written: Vec::new(),
            broken: false,
            journal_applied: false,
            may_delete: false,
        })
    }

    /// Merges every session and event id into their index tables at the
    /// next commit, and moves two per commit on to the cold ones, for tests of
    /// what only indexed keys undergo.
    #[cfg(test)]
    pub(crate) fn index_at_once(&mut self) {
        self.sessions.index.set_limits(0, 2, 2);
        self.event_ids.index.set_limits(0, 2, 2);
    }

    /// The keys in the hot levels of the session and event id indexes (tests).
    #[cfg(test)]
    pub(crate) fn hot_entries(&self) -> [Vec<(i64, i64)>; 2] {
        [self.sessions.index.hot_entries(), self.event_ids.index.hot_entries()]
    }
}

/// A session state waiting to be written: `seq` is `None` for a new session.
#[derive(Clone)]
struct Pending {
    seq: Option<i64>,
    state: SessionState,
    last_seen: i64,
}

/// Changes waiting to be written before the commit.
#[derive(Default)]
struct Staged {
    sessions: KeyMap<Pending>,
    deltas: Deltas,
    /// Events stored with a client event id, by (site, event id).
    event_ids: KeyMap<Stored>,
}

impl Staged {
    /// Moves what `other` staged into `self`, leaving `other` empty with its capacity.
    fn merge(&mut self, other: &mut Staged) {
        other.sessions.drain().for_each(|(k, v)| self.sessions.insert(k, v));
        other.event_ids.drain().for_each(|(k, v)| self.event_ids.insert(k, v));
        self.deltas.merge(&mut other.deltas);
    }

    fn clear(&mut self) {
        self.sessions.clear();
        self.event_ids.clear();
        self.deltas.clear();
    }

    /// Emptied for the next group, unless a group of large batches grew it:
    /// then its memory goes back to the allocator.
    fn recycled(mut self) -> Staged {
        const MAX_KEPT: usize = 4096;
        if self.sessions.capacity().max(self.event_ids.capacity()).max(self.deltas.capacity()) > MAX_KEPT {
            return Staged::default();
        }
        self.clear();
        self
    }
}

/// Sessions a group wrote, for the writer's memory once the group commits:
/// key, row and state, and whether the row is new.
type Written = Vec<(SessionKey, Known, bool)>;

/// A transaction shared by several commands. Each command runs in its own
/// savepoint, so one failing command leaves the others' work in place.
pub(crate) struct SqliteGroup<'a> {
    tx: Tx<'a>,
    /// Taken from the connection's statement cache once per group rather than
    /// once per event (a hash of the statement's text, twice, each time).
    insert_event: CachedStatement<'a>,
    sessions: &'a mut Sessions,
    event_ids: &'a mut EventIds,
    journaled_since: &'a mut Option<Instant>,
    apply_every: Duration,
    staged: Staged,
    /// What the command running now staged, merged into `staged` once its
    /// savepoint is released (kept to reuse its memory).
    scratch: Staged,
    /// Where `staged` and `scratch` go back once the group has committed.
    spare: &'a mut [Staged; 2],
    written: Written,
    /// Staged changes were only partly written: the group must not commit.
    broken: bool,
    /// Maintenance wrote the rollup journal into the rollups.
    journal_applied: bool,
    /// A command may have deleted rows that the writer's memory indexes.
    may_delete: bool,
}

/// Records, on the write connection, the index keys of deleted sessions and
/// events with a client event id (retention, deleted sites), so the writer
/// drops them from the hot levels it keeps in memory.
fn watch_deletes(conn: &rusqlite::Connection) -> Result<()> {
    conn.execute_batch(&format!(
        "CREATE TEMP TABLE index_gone (events INTEGER NOT NULL, h INTEGER NOT NULL, seq INTEGER NOT NULL);
         CREATE TEMP TRIGGER sessions_gone AFTER DELETE ON main.sessions BEGIN
             INSERT INTO index_gone VALUES (0, {}, old.seq);
         END;
         CREATE TEMP TRIGGER event_ids_gone AFTER DELETE ON main.events WHEN old.client_event_id IS NOT NULL BEGIN
             INSERT INTO index_gone VALUES (1, {}, old.seq);
         END;",
        sql_index_key("old.site", "old.session_id"),
        sql_index_key("old.site", "old.client_event_id"),
    ))?;
    Ok(())
}

/// Takes the keys recorded by [`watch_deletes`]: sessions', then event ids'.
fn take_gone(conn: &rusqlite::Connection) -> Result<[Vec<(i64, i64)>; 2]> {
    let mut gone = [Vec::new(), Vec::new()];
    let mut stmt = conn.prepare_cached("SELECT events, h, seq FROM temp.index_gone")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        gone[usize::from(r.get::<_, bool>(0)?)].push((r.get(1)?, r.get(2)?));
    }
    conn.prepare_cached("DELETE FROM temp.index_gone")?.execute([])?;
    Ok(gone)
}

impl SqliteGroup<'_> {
    /// Stores one event and updates its session and the rollups.
    pub fn ingest_event(&mut self, e: &NewEvent) -> Result<Ack> {
        // One event writes one row with one statement, which SQLite undoes
        // on its own when it fails, and stages nothing before that statement
        // has succeeded: neither a savepoint (which would only copy the pages
        // it touches into the sub-journal) nor the scratch is needed.
        ingest_one(&self.tx, &mut self.insert_event, e, &mut self.staged, None, self.sessions, self.event_ids)
    }

    /// Stores events and updates sessions and rollups; one answer per event,
    /// in order. Nothing of the batch is kept when one of its events fails.
    pub fn ingest(&mut self, events: &[NewEvent]) -> Result<Vec<Ack>> {
        if let [e] = events {
            return Ok(vec![self.ingest_event(e)?]);
        }
        let (sessions, event_ids) = (&mut *self.sessions, &mut *self.event_ids);
        let (scratch, staged, insert) = (&mut self.scratch, &self.staged, &mut self.insert_event);
        scratch.clear();
        let acks = in_savepoint(self.tx.conn, |conn| {
            events
                .iter()
                .map(|e| ingest_one(sqlite(conn), insert, e, scratch, Some(staged), sessions, event_ids))
                .collect::<Result<Vec<_>>>()
        })?;
        self.staged.merge(&mut self.scratch);
        Ok(acks)
    }

    /// Runs `f` inside a savepoint of the group transaction. `f` must not
    /// change sessions or rollups: use [`Group::maintain`] for that.
    pub fn apply<T>(&mut self, f: impl FnOnce(&db::Connection) -> Result<T>) -> Result<T> {
        self.may_delete = true;
        in_savepoint(self.tx.conn, f)
    }

    /// Runs maintenance that may change rollups or delete deleted sites'
    /// sessions (retention): the staged changes and the rollup journal are
    /// written first. What the writer remembers of a deleted site's sessions
    /// is left: that site takes no more events.
    pub fn maintain<T>(&mut self, f: impl FnOnce(&db::Connection) -> Result<T>) -> Result<T> {
        let mut staged = std::mem::take(&mut self.staged);
        let before = self.written.len();
        let to = Rollups::Tables { journal: self.journaled_since.is_some() };
        if let Err(e) = flush(&self.tx, &mut staged, &mut self.written, to) {
            self.broken = true;
            return Err(e);
        }
        self.journal_applied = true;
        // Event ids stay staged until the commit puts them in memory.
        self.staged.event_ids = std::mem::take(&mut staged.event_ids);
        // Sessions appended here are not in the writer's memory until the
        // commit: later commands of this group find them staged.
        for (key, known, _) in &self.written[before..] {
            let last_seen = staged.sessions.get(key).map_or(0, |p| p.last_seen);
            self.staged.sessions.insert(key.clone(), Pending { seq: Some(known.seq), state: known.state.clone(), last_seen });
        }
        self.apply(f)
    }

    /// Commits, with the rollups written (and whatever the journal held).
    pub fn commit(self) -> Result<()> {
        self.finish(false)
    }

    /// Commits while more writes wait: the rollup deltas go to the journal
    /// instead, unless the oldest journaled ones are [`APPLY_EVERY`] old.
    pub fn commit_busy(self) -> Result<()> {
        self.finish(true)
    }

    fn finish(mut self, busy: bool) -> Result<()> {
        if self.broken {
            self.sessions.reset();
            self.event_ids.reset();
            return Err(crate::Error::Conflict("a write of this transaction failed; nothing was committed".into()));
        }
        let mut staged = std::mem::take(&mut self.staged);
        let mut written = std::mem::take(&mut self.written);
        let mut stored: Vec<(SessionKey, Stored)> = staged.event_ids.drain().collect();
        stored.sort_unstable_by_key(|s| s.1.seq);
        let defer = busy && self.journaled_since.is_none_or(|t| t.elapsed() < self.apply_every);
        let to = if defer { Rollups::Journal } else { Rollups::Tables { journal: self.journaled_since.is_some() } };
        let outcome = flush(&self.tx, &mut staged, &mut written, to).and_then(|journaled| {
            let first_session = written.iter().filter(|w| w.2).map(|w| w.1.seq).min();
            let gone = if self.may_delete { Some(take_gone(&self.tx)?) } else { None };
            let [sessions_gone, event_ids_gone] = match &gone {
                Some([sessions, event_ids]) => [Some(&sessions[..]), Some(&event_ids[..])],
                None => [None, None],
            };
            let sessions = self.sessions.before_commit(&self.tx, first_session, sessions_gone)?;
            let event_ids = self.event_ids.before_commit(&self.tx, stored.first().map(|s| s.1.seq), event_ids_gone)?;
            self.tx.commit()?;
            Ok((sessions, event_ids, journaled))
        });
        *self.spare = [staged.recycled(), std::mem::take(&mut self.scratch).recycled()];
        match outcome {
            Ok((sessions, event_ids, journaled)) => {
                self.sessions.committed(written, sessions);
                self.event_ids.committed(stored, event_ids);
                if !defer || self.journal_applied {
                    *self.journaled_since = None;
                }
                if journaled {
                    self.journaled_since.get_or_insert_with(Instant::now);
                }
                Ok(())
            }
            Err(e) => {
                // What the memory holds may no longer match the database.
                self.sessions.reset();
                self.event_ids.reset();
                Err(e)
            }
        }
    }
}

/// What a session contributes to the rollups, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionState {
    first_hour: i64,
    device: i64,
    country: Name,
    variant: Name,
    forced: bool,
    flags: u8,
}

impl SessionState {
    /// The session's state once `e` is counted in it (`old` is `None` for a new session).
    pub(crate) fn after(old: Option<&SessionState>, e: &NewEvent, names: &mut Names) -> SessionState {
        let hour = hour_of(e.occurred_at);
        let mut new = old.cloned().unwrap_or_else(|| SessionState {
            first_hour: hour,
            device: e.device.code(),
            country: names.get(&e.country),
            variant: names.get(""),
            forced: false,
            flags: 0,
        });
        new.first_hour = new.first_hour.min(hour);
        new.flags |= e.event_type.flag();
        if e.forced_variant {
            new.forced = true;
            new.variant = names.get("");
        } else if !new.forced && new.variant.is_empty() {
            if let Some(v) = &e.variant {
                new.variant = names.get(v);
            }
        }
        new
    }

    pub(crate) fn counters(&self) -> [i64; 6] {
        let has = |f: u8| i64::from(self.flags & f == f);
        [1, has(flags::ADBLOCK), has(flags::WALL), has(flags::DISMISSED), has(flags::CONVERTED), has(flags::WALL | flags::CONVERTED)]
    }

    pub(crate) fn same_row(&self, other: &SessionState) -> bool {
        self.first_hour == other.first_hour
            && self.device == other.device
            && self.country == other.country
            && self.variant == other.variant
    }
}

/// A group's transaction. Its `BEGIN`, `COMMIT` and `ROLLBACK` are prepared
/// once per connection, where rusqlite's `Transaction` parses them every time.
struct Tx<'a> {
    conn: &'a db::Connection,
    committed: bool,
}

impl<'a> Tx<'a> {
    fn begin_immediate(conn: &'a db::Connection) -> Result<Tx<'a>> {
        sqlite(conn).prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Tx { conn, committed: false })
    }

    fn commit(mut self) -> Result<()> {
        sqlite(self.conn).prepare_cached("COMMIT")?.execute([])?;
        self.committed = true;
        Ok(())
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = rusqlite::Connection;

    fn deref(&self) -> &rusqlite::Connection {
        sqlite(self.conn)
    }
}

impl Drop for Tx<'_> {
    /// Rolls back a transaction that did not commit, unless SQLite already
    /// has (after some I/O errors it does so on its own).
    fn drop(&mut self) {
        let conn = sqlite(self.conn);
        if !self.committed && !conn.is_autocommit() {
            if let Err(e) = conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([])) {
                tracing::error!(error = %e, "cannot roll back a group transaction");
            }
        }
    }
}

/// Runs `f` in a savepoint: released when `f` succeeds, rolled back when it
/// fails. The statements are prepared once per connection, not parsed per
/// command as rusqlite's `Savepoint` does.
fn in_savepoint<T>(db: &db::Connection, f: impl FnOnce(&db::Connection) -> Result<T>) -> Result<T> {
    let conn = sqlite(db);
    conn.prepare_cached("SAVEPOINT command")?.execute([])?;
    match f(db) {
        Ok(out) => {
            conn.prepare_cached("RELEASE command")?.execute([])?;
            Ok(out)
        }
        Err(e) => {
            conn.prepare_cached("ROLLBACK TO command")?.execute([])?;
            conn.prepare_cached("RELEASE command")?.execute([])?;
            Err(e)
        }
    }
}

/// The SQLite connection of the SQLite writer, which is only ever built on one.
fn sqlite(conn: &db::Connection) -> &rusqlite::Connection {
    conn.as_sqlite().expect("the SQLite writer holds a SQLite connection")
}

/// A stored event's id: a UUID v7 from its arrival time and the thread's
/// userspace generator (`Uuid::now_v7` asks the kernel for its random bits,
/// a system call per event on the writer thread).
fn event_id(received_at: chrono::DateTime<chrono::Utc>) -> Uuid {
    let random: [u8; 10] = rand::rng().random();
    uuid::Builder::from_unix_timestamp_millis(received_at.timestamp_millis().max(0) as u64, &random).into_uuid()
}

pub(crate) fn hour_of(t: chrono::DateTime<chrono::Utc>) -> i64 {
    t.timestamp().div_euclid(3600)
}

const INSERT_EVENT: &str = "INSERT INTO events (id, site, session_id, event_type, page_url, metadata, country,
                                         client_event_id, occurred_at, received_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// Stores one event, staging its changes in `mine`; `group` is what the
/// group staged before, when that is not `mine`. Nothing is staged unless the
/// event's row was written.
fn ingest_one(
    conn: &rusqlite::Connection,
    insert_event: &mut CachedStatement<'_>,
    e: &NewEvent,
    mine: &mut Staged,
    group: Option<&Staged>,
    sessions: &mut Sessions,
    event_ids: &mut EventIds,
) -> Result<Ack> {
    let event_key: Option<SessionKey> = e.client_event_id.as_deref().map(|id| event_ids.key(e.site_seq, id));
    if let Some(key) = &event_key {
        let existing = match mine.event_ids.get(key).or_else(|| group.and_then(|g| g.event_ids.get(key))) {
            Some(s) => Some(*s),
            None => event_ids.get(conn, key)?,
        };
        if let Some(s) = existing {
            return Ok(Ack {
                id: s.id,
                received_at: chrono::DateTime::from_timestamp_millis(s.received_ms).unwrap_or(e.received_at),
                duplicate: true,
            });
        }
    }

    let id = event_id(e.received_at);
    let key = sessions.key(e.site_seq, &e.session_id);
    let (seq, old) = match mine.sessions.get(&key).or_else(|| group.and_then(|g| g.sessions.get(&key))) {
        Some(p) => (p.seq, Some(p.state.clone())),
        None => match sessions.get(conn, &key)? {
            Some(k) => (Some(k.seq), Some(k.state)),
            None => (None, None),
        },
    };
    let new = SessionState::after(old.as_ref(), e, &mut sessions.names);

    insert_event.execute(params![
        id.hyphenated().encode_lower(&mut Uuid::encode_buffer()) as &str,
        e.site_seq,
        e.session_id,
        e.event_type.code(),
        e.page_url,
        e.metadata,
        &*new.country,
        e.client_event_id,
        e.occurred_at.timestamp_millis(),
        e.received_at.timestamp_millis(),
    ])?;
    if let Some(key) = event_key {
        let stored = Stored { seq: conn.last_insert_rowid(), id, received_ms: e.received_at.timestamp_millis() };
        mine.event_ids.insert(key, stored);
    }

    mine.deltas.count(e, old.as_ref(), &new);
    // A session row is written when the session is new or changed.
    if old.as_ref() != Some(&new) {
        mine.sessions.insert(key, Pending { seq, state: new, last_seen: e.occurred_at.timestamp_millis() });
    }

    Ok(Ack { id, received_at: e.received_at, duplicate: false })
}

/// Where a group's rollup deltas go.
#[derive(Clone, Copy)]
enum Rollups {
    Journal,
    /// Into the rollup tables, with the journal's rows if it may hold any.
    Tables { journal: bool },
}

/// Writes what a group staged: changed sessions (listed in `written`), then
/// the rollup deltas; true if they went to the journal.
fn flush(conn: &rusqlite::Connection, staged: &mut Staged, written: &mut Written, to: Rollups) -> Result<bool> {
    let mut append = conn.prepare_cached(
        "INSERT INTO sessions (site, session_id, first_hour, device, country, variant, forced, flags, last_seen)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    let mut update = conn.prepare_cached(
        "UPDATE sessions SET first_hour = ?2, variant = ?3, forced = ?4, flags = ?5, last_seen = max(last_seen, ?6)
         WHERE seq = ?1",
    )?;
    for (key, p) in staged.sessions.iter() {
        let s = &p.state;
        let seq = match p.seq {
            Some(seq) => {
                update.execute(params![seq, s.first_hour, &*s.variant, s.forced, s.flags, p.last_seen])?;
                seq
            }
            None => {
                let mut text = Uuid::encode_buffer();
                let text = key.text.as_str(&mut text);
                append.execute(params![key.site, text, s.first_hour, s.device, &*s.country, &*s.variant, s.forced, s.flags, p.last_seen])?;
                conn.last_insert_rowid()
            }
        };
        written.push((key.clone(), Known { seq, state: s.clone() }, p.seq.is_none()));
    }
    match to {
        Rollups::Journal => staged.deltas.journal(conn),
        Rollups::Tables { journal } => {
            if journal {
                staged.deltas.take_journal(conn)?;
            }
            staged.deltas.write(conn)?;
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeZone, Utc};

    use crate::model::{EventType, NewEvent, Site};
    use crate::period::Period;
    use crate::query::{self, Filter};
    use crate::store::testing::{self, temp_store};
    use crate::store::Durability;
    use crate::Store;

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
        writer: super::Writer,
        site: Site,
    }

    fn fixture() -> Fixture {
        let (dir, store) = temp_store();
        let mut writer = store.open_writer(Durability::Normal).unwrap();
        // Busy commits journal until a test says otherwise, however slow the machine.
        writer.sqlite_writer().apply_every = std::time::Duration::from_secs(3600);
        let site = testing::site(&mut writer, "acme.test", Utc::now());
        Fixture { _dir: dir, store, writer, site }
    }

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 20, h, m, 0).unwrap()
    }

    impl Fixture {
        fn send(&mut self, session: &str, t: EventType, when: DateTime<Utc>, variant: Option<&str>) -> crate::model::Ack {
            self.send_full(session, t, when, variant, false, None)
        }

        fn send_full(
            &mut self,
            session: &str,
            t: EventType,
            when: DateTime<Utc>,
            variant: Option<&str>,
            forced: bool,
            event_id: Option<&str>,
        ) -> crate::model::Ack {
            let e = NewEvent {
                event_type: t,
                variant: variant.map(str::to_owned),
                forced_variant: forced,
                client_event_id: event_id.map(str::to_owned),
                ..testing::pageview(&self.site, session, when)
            };
            let mut g = self.writer.begin().unwrap();
            let ack = g.ingest(&[e]).unwrap().remove(0);
            g.commit().unwrap();
            ack
        }

        /// Sends one event in a group committed as if more writes waited.
        fn send_busy(&mut self, session: &str, t: EventType, when: DateTime<Utc>) {
            let e = NewEvent { event_type: t, ..testing::pageview(&self.site, session, when) };
            let mut g = self.writer.begin().unwrap();
            g.ingest(&[e]).unwrap();
            g.commit_busy().unwrap();
        }

        fn count(&self, sql: &str) -> i64 {
            self.store.read(|c| Ok(c.query_row(sql, [], |r| r.get(0))?)).unwrap()
        }

        fn hour_rows(&self) -> Vec<(i64, i64, i64, i64, i64, String)> {
            self.store
                .read(|c| {
                    let mut s = c.prepare(
                        "SELECT hour, sessions, adblock, walls, conversions, variant FROM rollup_hourly
                         WHERE sessions <> 0 OR walls <> 0 ORDER BY hour, variant",
                    )?;
                    let rows = s
                        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
                        .collect::<crate::Result<_>>()?;
                    Ok(rows)
                })
                .unwrap()
        }
    }

    #[test]
    fn a_group_leaves_its_emptied_maps_to_the_next_unless_they_grew_large() {
        let mut f = fixture();
        f.send("s1", EventType::Pageview, at(9, 0), None);
        let staged = &f.writer.sqlite_writer().spare[0];
        assert!(staged.sessions.is_empty() && staged.deltas.capacity() > 0);
        assert!(staged.sessions.capacity() > 0, "a small group's memory is kept");

        let batch: Vec<NewEvent> = (0..5000).map(|i| testing::pageview(&f.site, &format!("b{i}"), at(9, 1))).collect();
        let mut g = f.writer.begin().unwrap();
        g.ingest(&batch).unwrap();
        g.commit().unwrap();
        assert_eq!(f.writer.sqlite_writer().spare[0].sessions.capacity(), 0, "a large group's memory is given back");
        assert_eq!(f.count("SELECT sum(sessions) FROM rollup_hourly"), 5001);
    }

    #[test]
    fn a_session_counts_once_and_each_flag_once() {
        let mut f = fixture();
        f.send("s1", EventType::Pageview, at(9, 0), None);
        f.send("s1", EventType::Pageview, at(9, 5), None);
        f.send("s1", EventType::AdblockDetected, at(9, 6), None);
        f.send("s1", EventType::AdblockDetected, at(9, 7), None);
        let h9 = at(9, 0).timestamp() / 3600;
        assert_eq!(f.hour_rows(), vec![(h9, 1, 1, 0, 0, String::new())]);
    }

    #[test]
    fn a_late_conversion_updates_the_first_hour_and_moves_to_the_variant_row() {
        let mut f = fixture();
        f.send("s1", EventType::Pageview, at(9, 50), None);
        f.send("s1", EventType::AdblockDetected, at(9, 51), None);
        f.send("s2", EventType::Pageview, at(10, 1), None);
        f.send("s1", EventType::WallDisplayed, at(10, 2), Some("emotional"));
        f.send("s1", EventType::ConversionAllowlist, at(11, 30), Some("emotional"));
        let (h9, h10) = (at(9, 0).timestamp() / 3600, at(10, 0).timestamp() / 3600);
        assert_eq!(
            f.hour_rows(),
            vec![(h9, 1, 1, 1, 1, "emotional".to_owned()), (h10, 1, 0, 0, 0, String::new())]
        );
        let period = Period::new(at(0, 0).date_naive(), at(0, 0).date_naive(), chrono_tz::Tz::UTC);
        let d = f.store.read(|c| query::dashboard(c, &f.site, &period, Filter::default())).unwrap();
        assert_eq!((d.metrics.sessions, d.metrics.adblock_detected, d.metrics.conversions), (2, 1, 1));
        assert_eq!(d.metrics.conversion_rate, 100.0);
        let ab = f.store.read(|c| query::ab_testing(c, &f.site, None)).unwrap();
        let emotional = ab.iter().find(|v| v.name == "emotional").unwrap();
        assert_eq!((emotional.impressions, emotional.conversions), (1, 1));
    }

    #[test]
    fn an_earlier_backfilled_event_moves_the_session_to_its_hour() {
        let mut f = fixture();
        f.send("s1", EventType::Pageview, at(12, 0), None);
        f.send("s1", EventType::AdblockDetected, at(8, 0), None);
        assert_eq!(f.hour_rows(), vec![(at(8, 0).timestamp() / 3600, 1, 1, 0, 0, String::new())]);
    }

    #[test]
    fn repeated_event_ids_are_stored_once() {
        let mut f = fixture();
        let a = f.send_full("s1", EventType::Pageview, at(9, 0), None, false, Some("e-1"));
        let b = f.send_full("s1", EventType::Pageview, at(9, 1), None, false, Some("e-1"));
        assert!(!a.duplicate);
        assert!(b.duplicate);
        assert_eq!(a.id, b.id);
        let n: i64 = f.store.read(|c| Ok(c.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?)).unwrap();
        assert_eq!(n, 1);
        let counted: i64 = f
            .store
            .read(|c| Ok(c.query_row("SELECT sum(events) FROM event_counts_hourly", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(counted, 1);
    }

    #[test]
    fn forced_variant_sessions_stay_out_of_ab_results() {
        let mut f = fixture();
        f.send_full("s1", EventType::WallDisplayed, at(9, 0), Some("offer"), true, None);
        f.send_full("s1", EventType::ConversionAllowlist, at(9, 1), Some("offer"), true, None);
        f.send("s2", EventType::WallDisplayed, at(9, 2), Some("offer"));
        let ab = f.store.read(|c| query::ab_testing(c, &f.site, None)).unwrap();
        let offer = ab.iter().find(|v| v.name == "offer").unwrap();
        assert_eq!((offer.impressions, offer.conversions), (1, 0));
        let period = Period::new(at(0, 0).date_naive(), at(0, 0).date_naive(), chrono_tz::Tz::UTC);
        let d = f.store.read(|c| query::dashboard(c, &f.site, &period, Filter::default())).unwrap();
        assert_eq!((d.metrics.walls_displayed, d.metrics.conversions), (2, 1));
    }

    #[test]
    fn narrow_rollups_always_equal_the_full_one_regrouped() {
        let mut f = fixture();
        f.send("s1", EventType::Pageview, at(9, 50), None);
        f.send("s1", EventType::WallDisplayed, at(9, 51), Some("emotional"));
        f.send("s2", EventType::WallDisplayed, at(10, 5), Some("control"));
        f.send("s2", EventType::ConversionAllowlist, at(10, 6), Some("control"));
        f.send("s3", EventType::ConversionSubscribe, at(11, 0), Some("offer"));
        f.send("s1", EventType::ConversionAllowlist, at(12, 0), Some("emotional"));
        f.send("s1", EventType::Pageview, at(8, 0), None);
        let q = |sql: &str| -> Vec<(i64, String, i64, i64)> {
            f.store
                .read(|c| {
                    let mut s = c.prepare(sql)?;
                    let v = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect::<crate::Result<_>>()?;
                    Ok(v)
                })
                .unwrap()
        };
        let full_by_device = q("SELECT hour, CAST(device AS TEXT), sum(sessions), sum(wall_conversions) FROM rollup_hourly
                                GROUP BY hour, device HAVING sum(sessions) <> 0 ORDER BY 1, 2");
        let device = q("SELECT hour, CAST(device AS TEXT), sessions, wall_conversions FROM rollup_device_hourly
                        WHERE sessions <> 0 ORDER BY 1, 2");
        assert_eq!(full_by_device, device);
        let full_by_variant = q("SELECT hour, variant, sum(walls), sum(wall_conversions) FROM rollup_hourly
                                 WHERE variant <> '' GROUP BY hour, variant HAVING sum(walls) <> 0 ORDER BY 1, 2");
        let variant = q("SELECT hour, variant, walls, wall_conversions FROM rollup_variant_hourly WHERE walls <> 0 ORDER BY 1, 2");
        assert_eq!(full_by_variant, variant);
        // s3 converted without a wall: it is a conversion, but not an A/B one.
        let ab = f.store.read(|c| query::ab_testing(c, &f.site, None)).unwrap();
        let offer = ab.iter().find(|v| v.name == "offer").unwrap();
        assert_eq!((offer.impressions, offer.conversions), (0, 0));
        let emotional = ab.iter().find(|v| v.name == "emotional").unwrap();
        assert_eq!((emotional.impressions, emotional.conversions), (1, 1));
    }

    fn rollup_totals(store: &Store) -> (i64, i64) {
        store
            .read(|c| Ok(c.query_row("SELECT sum(sessions), sum(adblock) FROM rollup_hourly", [], |r| Ok((r.get(0)?, r.get(1)?)))?))
            .unwrap()
    }

    /// Small limits, so that keys reach the hot level and the cold index table.
    fn small_index_limits(writer: &mut super::Writer, tail: usize) {
        writer.sqlite_writer().sessions.index.set_limits(tail, 3, 2);
        writer.sqlite_writer().event_ids.index.set_limits(tail, 2, 1);
    }

    #[test]
    fn sessions_in_the_tail_the_hot_or_the_cold_index_are_found_after_a_restart() {
        let mut f = fixture();
        small_index_limits(&mut f.writer, 3);
        // Ids over several slices, in separate commits, so slices get merged.
        let ids: Vec<String> = (0..12).map(|i| format!("{}{}-session", ["aa", "ab", "ba", "zz"][i % 4], i)).collect();
        for id in &ids {
            f.send(id, EventType::Pageview, at(9, 0), None);
        }
        let (hot, cold) = (f.writer.hot_entries()[0].len() as i64, f.count("SELECT count(*) FROM session_index"));
        assert!(hot > 0 && cold > 0 && hot + cold < 12, "sessions in each place: tail {}, hot {hot}, cold {cold}", 12 - hot - cold);
        // A new writer knows nothing in memory: the marks must tell it which sessions are where.
        f.writer = f.store.open_writer(Durability::Normal).unwrap();
        small_index_limits(&mut f.writer, 3);
        for id in &ids {
            f.send(id, EventType::AdblockDetected, at(9, 1), None);
        }
        assert_eq!(rollup_totals(&f.store), (12, 12));
        let rows: i64 = f.store.read(|c| Ok(c.query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))?)).unwrap();
        assert_eq!(rows, 12);
        // And once more in the same writer, after more merging.
        for id in &ids {
            f.send(id, EventType::WallDisplayed, at(9, 2), None);
        }
        assert_eq!(rollup_totals(&f.store), (12, 12));
        let walls: i64 = f.store.read(|c| Ok(c.query_row("SELECT sum(walls) FROM rollup_hourly", [], |r| r.get(0))?)).unwrap();
        assert_eq!(walls, 12);
    }

    #[test]
    fn the_hot_index_stays_near_its_limit_when_commits_merge_more_than_a_chunk() {
        let mut f = fixture();
        small_index_limits(&mut f.writer, 0);
        f.writer.sqlite_writer().sessions.index.set_limits(0, 4, 1);
        for commit in 0..10 {
            let events: Vec<NewEvent> = (0..6).map(|i| testing::pageview(&f.site, &format!("{commit:02x}{i}-session"), at(9, 0))).collect();
            let mut g = f.writer.begin().unwrap();
            g.ingest(&events).unwrap();
            g.commit().unwrap();
            let hot = f.writer.hot_entries()[0].len();
            assert!(hot <= 4, "after commit {commit} the hot level holds {hot}");
        }
        // A commit merges the sessions the one before it appended: the last six are in the tail.
        assert_eq!(f.writer.hot_entries()[0].len() as i64 + f.count("SELECT count(*) FROM session_index"), 54);
    }

    /// [`small_index_limits`], with room for `hot` keys in each hot level.
    fn index_limits(writer: &mut super::Writer, tail: usize, hot: usize) {
        writer.sqlite_writer().sessions.index.set_limits(tail, hot, 2);
        writer.sqlite_writer().event_ids.index.set_limits(tail, hot, 1);
    }

    /// Sends a pageview with a client event id in a session of its own, per name.
    fn send_each(f: &mut Fixture, names: &[String]) {
        for n in names {
            f.send_full(&format!("{n}-session"), EventType::Pageview, at(9, 0), None, false, Some(&format!("{n}-event")));
        }
    }

    /// Limits that move every key of the tail and the hot level into the cold table at the next commit.
    fn drain_everything(writer: &mut super::Writer) {
        writer.sqlite_writer().sessions.index.set_limits(0, 0, 1000);
        writer.sqlite_writer().event_ids.index.set_limits(0, 0, 1000);
    }

    /// The cold tables hold exactly one entry per session and per event, nothing else.
    fn assert_cold_tables_hold_every_row_once(f: &Fixture) {
        assert_eq!(f.writer.hot_entries(), [vec![], vec![]]);
        for (which, rows, key) in [(0, "sessions", "session_id"), (1, "events", "client_event_id")] {
            let mut entries = testing::index_entries(&f.store, &f.writer, which);
            entries.sort_unstable_by_key(|e| e.1);
            assert_eq!(entries, testing::row_keys(&f.store, rows, key), "{rows}");
        }
    }

    #[test]
    fn a_restarted_writer_rebuilds_its_hot_level_and_every_key_reaches_the_cold_table_once() {
        let mut f = fixture();
        index_limits(&mut f.writer, 3, 8);
        let names: Vec<String> = (0..30).map(|i| format!("k{i}")).collect();
        send_each(&mut f, &names);
        let held = f.writer.hot_entries();
        assert!(held.iter().all(|h| h.len() >= 4), "keys in the hot levels: {held:?}");
        // A new writer's memory holds nothing until its first write rebuilds it from the marks.
        f.writer = f.store.open_writer(Durability::Normal).unwrap();
        index_limits(&mut f.writer, 3, 8);
        send_each(&mut f, &["new".to_owned()]);
        let rebuilt = f.writer.hot_entries();
        for which in 0..2 {
            let cold = testing::index_entries(&f.store, &f.writer, which);
            let lost: Vec<_> = held[which].iter().filter(|k| !rebuilt[which].contains(k) && !cold.contains(k)).collect();
            assert!(lost.is_empty(), "keys of the hot level neither rebuilt nor in the cold table: {lost:?}");
        }
        // Every key, rebuilt or not, still finds its row.
        for n in &names {
            let again = f.send_full(&format!("{n}-session"), EventType::AdblockDetected, at(9, 1), None, false, Some(&format!("{n}-event")));
            assert!(again.duplicate, "{n}-event was stored again");
        }
        assert_eq!(rollup_totals(&f.store), (31, 0), "a session was counted twice");
        drain_everything(&mut f.writer);
        f.writer.run(|_| Ok(())).unwrap();
        assert_cold_tables_hold_every_row_once(&f);
    }

    #[test]
    fn keys_of_rows_that_maintenance_deletes_leave_the_hot_level_and_never_reach_the_cold_table() {
        let mut f = fixture();
        index_limits(&mut f.writer, 0, 100);
        let names: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        send_each(&mut f, &names);
        f.writer.run(|_| Ok(())).unwrap();
        assert_eq!(f.writer.hot_entries().map(|h| h.len()), [10, 10]);
        assert_eq!(f.count("SELECT count(*) FROM session_index") + f.count("SELECT count(*) FROM event_id_index"), 0);
        let mut g = f.writer.begin().unwrap();
        g.maintain(|c| {
            c.execute("DELETE FROM events WHERE session_id IN ('k1-session', 'k3-session', 'k5-session')", [])?;
            c.execute("DELETE FROM sessions WHERE session_id IN ('k1-session', 'k2-session')", [])?;
            Ok(())
        })
        .unwrap();
        g.commit().unwrap();
        assert_eq!(f.writer.hot_entries().map(|h| h.len()), [8, 7]);
        drain_everything(&mut f.writer);
        f.writer.run(|_| Ok(())).unwrap();
        assert_cold_tables_hold_every_row_once(&f);
    }

    #[test]
    fn an_event_id_deleted_while_in_the_tail_is_stored_anew_and_leaves_no_index_entry() {
        // Found by the model-based test: the tail kept the deleted row's key,
        // answered its retry as a duplicate and later merged it into the cold
        // table, where nothing deleted it.
        let mut f = fixture();
        index_limits(&mut f.writer, 100, 100);
        let names: Vec<String> = (0..3).map(|i| format!("t{i}")).collect();
        send_each(&mut f, &names);
        let mut g = f.writer.begin().unwrap();
        g.maintain(|c| Ok(c.execute("DELETE FROM events WHERE client_event_id = 't1-event'", [])?)).unwrap();
        g.commit().unwrap();
        let again = f.send_full("t1-session", EventType::Pageview, at(9, 5), None, false, Some("t1-event"));
        assert!(!again.duplicate, "the deleted event's retry is stored");
        assert_eq!(f.count("SELECT count(*) FROM events WHERE client_event_id = 't1-event'"), 1);
        drain_everything(&mut f.writer);
        f.writer.run(|_| Ok(())).unwrap();
        assert_cold_tables_hold_every_row_once(&f);
    }

    #[test]
    fn a_merged_session_that_retention_deletes_starts_anew_at_its_next_event() {
        // Found by the model-based test: the merged slice's recent sessions
        // kept the deleted row, which the next event updated in vain.
        let mut f = fixture();
        index_limits(&mut f.writer, 0, 100);
        f.send("r-session", EventType::Pageview, at(9, 0), None);
        f.send("other-session", EventType::Pageview, at(9, 0), None);
        let mut g = f.writer.begin().unwrap();
        g.maintain(|c| Ok(c.execute("DELETE FROM sessions WHERE session_id = 'r-session'", [])?)).unwrap();
        g.commit().unwrap();
        f.send("r-session", EventType::AdblockDetected, at(9, 1), None);
        assert_eq!(f.count("SELECT count(*) FROM sessions WHERE session_id = 'r-session'"), 1);
        assert_eq!(rollup_totals(&f.store), (3, 1), "the new session counts");
    }

    #[test]
    fn event_ids_in_the_tail_the_hot_or_the_cold_index_are_found_after_a_restart() {
        let mut f = fixture();
        small_index_limits(&mut f.writer, 2);
        let ids: Vec<String> = (0..9).map(|i| format!("{}{i}-event", ["0a", "1b", "2c"][i % 3])).collect();
        let send = |f: &mut Fixture, i: usize, id: &str| f.send_full(&format!("s{i}"), EventType::Pageview, at(9, 0), None, false, Some(id));
        let first: Vec<_> = ids.iter().enumerate().map(|(i, id)| send(&mut f, i, id)).collect();
        let count = |f: &Fixture, sql: &str| -> i64 { f.count(sql) };
        let (hot, cold) = (f.writer.hot_entries()[1].len() as i64, count(&f, "SELECT count(*) FROM event_id_index"));
        assert!(hot > 0 && cold > 0 && hot + cold < 9, "ids in each place: tail {}, hot {hot}, cold {cold}", 9 - hot - cold);
        f.writer = f.store.open_writer(Durability::Normal).unwrap();
        small_index_limits(&mut f.writer, 2);
        for (i, id) in ids.iter().enumerate() {
            let again = send(&mut f, i, id);
            assert!(again.duplicate, "{id} was stored again");
            assert_eq!(again.id, first[i].id);
        }
        assert_eq!(count(&f, "SELECT count(*) FROM events"), 9);
        assert_eq!(count(&f, "SELECT sum(events) FROM event_counts_hourly"), 9);
    }

    #[test]
    fn uuid_keys_are_told_from_other_spellings_and_found_after_a_restart() {
        let mut f = fixture();
        small_index_limits(&mut f.writer, 2);
        let ids: Vec<String> = (0..8u32).map(|i| format!("{:08x}-5c1e-4d2a-9b3c-4d5e6f70819{i}", i.wrapping_mul(0x9e37_79b9))).collect();
        // The same UUIDs in capitals are other sessions and other event ids.
        let all: Vec<String> = ids.iter().cloned().chain(ids.iter().map(|id| id.to_uppercase())).collect();
        let first: Vec<_> = all.iter().map(|id| f.send_full(id, EventType::Pageview, at(9, 0), None, false, Some(id))).collect();
        assert!(first.iter().all(|a| !a.duplicate));
        f.writer = f.store.open_writer(Durability::Normal).unwrap();
        small_index_limits(&mut f.writer, 2);
        for (id, a) in all.iter().zip(&first) {
            let again = f.send_full(id, EventType::AdblockDetected, at(9, 1), None, false, Some(id));
            assert!(again.duplicate && again.id == a.id, "{id} was stored again");
            f.send(id, EventType::AdblockDetected, at(9, 2), None);
        }
        assert_eq!(rollup_totals(&f.store), (16, 16));
        let stored: Vec<String> = f
            .store
            .read(|c| Ok(c.prepare("SELECT session_id FROM sessions ORDER BY seq")?.query_map([], |r| r.get(0))?.collect::<crate::Result<_>>()?))
            .unwrap();
        assert_eq!(stored, all, "session ids are stored as sent");
    }

    #[test]
    fn with_the_index_filters_built_every_stored_session_and_event_id_is_found() {
        let mut f = fixture();
        small_index_limits(&mut f.writer, 2);
        let ids: Vec<String> = (0..20).map(|i| format!("{:02x}{i}-id", i * 37 % 256)).collect();
        let send = |f: &mut Fixture, i: usize, t: EventType, id: &str| {
            f.send_full(&format!("{}-session", ids[i]), t, at(9, 0), None, false, Some(id))
        };
        let first: Vec<_> = (0..ids.len()).map(|i| send(&mut f, i, EventType::Pageview, &ids[i])).collect();
        assert!(f.count("SELECT count(*) FROM session_index") > 0 && f.count("SELECT count(*) FROM event_id_index") > 0);
        f.writer = f.store.open_writer(Durability::Normal).unwrap();
        small_index_limits(&mut f.writer, 2);
        // The first lookups start the builds.
        f.send_full("warm-up-session", EventType::Pageview, at(9, 0), None, false, Some("ff-warm-up"));
        assert!(f.writer.sqlite_writer().sessions.index.wait_for_filter() && f.writer.sqlite_writer().event_ids.index.wait_for_filter());
        let mut second = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let again = send(&mut f, i, EventType::Pageview, id);
            assert!(again.duplicate && again.id == first[i].id, "{id} was not found");
            let ack = send(&mut f, i, EventType::AdblockDetected, &format!("{id}-2"));
            assert!(!ack.duplicate);
            second.push(ack);
        }
        // Keys stored once the filters were ready: in the tail, merged into
        // the hot level or moved on to the cold table since.
        for (i, id) in ids.iter().enumerate() {
            let again = send(&mut f, i, EventType::Pageview, &format!("{id}-2"));
            assert!(again.duplicate && again.id == second[i].id, "{id}-2 was not found");
        }
        let brand_new = f.send_full("brand-new-session", EventType::Pageview, at(9, 0), None, false, Some("brand-new-id"));
        assert!(!brand_new.duplicate);
        assert_eq!(rollup_totals(&f.store), (22, 20), "a stored session was counted again");
    }

    #[test]
    fn keys_sharing_a_hash_are_told_apart_by_their_rows() {
        let mut f = fixture();
        // Four hash values for all keys: six sessions and six event ids share each.
        let colliding = |w: &mut super::Writer| {
            small_index_limits(w, 2);
            w.sqlite_writer().sessions.index.collide(2);
            w.sqlite_writer().event_ids.index.collide(2);
        };
        colliding(&mut f.writer);
        let send = |f: &mut Fixture, i: usize, t: EventType, id: &str| f.send_full(&format!("s{i}"), t, at(9, 0), None, false, Some(id));
        let first: Vec<_> = (0..24).map(|i| send(&mut f, i, EventType::Pageview, &format!("e{i}"))).collect();
        let mut hashes: Vec<i64> = testing::index_entries(&f.store, &f.writer, 0).iter().map(|e| e.0).collect();
        let entries = hashes.len();
        hashes.sort_unstable();
        hashes.dedup();
        assert!(entries >= 20 && hashes.len() <= 4, "{entries} sessions indexed under {} hashes", hashes.len());
        // A new writer finds them through the index (the cold table, or the
        // hot level it rebuilds), not its tail.
        f.writer = f.store.open_writer(Durability::Normal).unwrap();
        colliding(&mut f.writer);
        for (i, ack) in first.iter().enumerate() {
            let again = send(&mut f, i, EventType::Pageview, &format!("e{i}"));
            assert!(again.duplicate && again.id == ack.id, "e{i} was not found, or another event was");
            let new = send(&mut f, i, EventType::AdblockDetected, &format!("e{i}-2"));
            assert!(!new.duplicate, "e{i}-2 was taken for an event sharing its hash");
        }
        assert_eq!(f.count("SELECT count(*) FROM events"), 48);
        assert_eq!(rollup_totals(&f.store), (24, 24), "each session counted once, and flagged once");
    }

    /// Every rollup and count table, in one comparable text. Rows of zeros
    /// are left out: writing deltas one by one leaves them where a session
    /// moved away, adding them up first does not write them.
    fn all_rollups(f: &Fixture) -> String {
        const COUNTERS: &str = "sessions OR adblock OR walls OR dismissed OR conversions OR wall_conversions";
        f.store
            .read(|c| {
                let mut out = String::new();
                for sql in [
                    format!("SELECT hour, device, country, variant, {} FROM rollup_hourly WHERE {COUNTERS} ORDER BY 1, 2, 3, 4", COUNTERS.replace(" OR", ",")),
                    format!("SELECT hour, device, {} FROM rollup_device_hourly WHERE {COUNTERS} ORDER BY 1, 2", COUNTERS.replace(" OR", ",")),
                    "SELECT hour, variant, walls, wall_conversions FROM rollup_variant_hourly WHERE walls OR wall_conversions ORDER BY 1, 2".into(),
                    "SELECT hour, event_type, device, country, events FROM event_counts_hourly WHERE events ORDER BY 1, 2, 3, 4".into(),
                    "SELECT event_type, events FROM raw_event_totals WHERE events ORDER BY 1".into(),
                ] {
                    let mut s = c.prepare(&sql)?;
                    let mut rows = s.query([])?;
                    while let Some(r) = rows.next()? {
                        let cells: Vec<String> = (0..r.column_count()).map(|i| format!("{:?}", r.value(i).unwrap())).collect();
                        out += &cells.join(",");
                        out.push('\n');
                    }
                    out.push('|');
                }
                Ok(out)
            })
            .unwrap()
    }

    /// A session's life over several hours: new, flags, a variant, an earlier hour.
    fn script(f: &mut Fixture, send: fn(&mut Fixture, &str, EventType, DateTime<Utc>)) {
        send(f, "s1", EventType::Pageview, at(9, 50));
        send(f, "s1", EventType::AdblockDetected, at(9, 51));
        send(f, "s2", EventType::Pageview, at(10, 1));
        send(f, "s1", EventType::WallDisplayed, at(10, 2));
        send(f, "s1", EventType::ConversionAllowlist, at(11, 30));
        send(f, "s2", EventType::Pageview, at(8, 0));
    }

    fn send_plain(f: &mut Fixture, session: &str, t: EventType, when: DateTime<Utc>) {
        f.send(session, t, when, Some("emotional"));
    }

    fn send_busy_variant(f: &mut Fixture, session: &str, t: EventType, when: DateTime<Utc>) {
        let e = NewEvent { event_type: t, variant: Some("emotional".into()), ..testing::pageview(&f.site, session, when) };
        let mut g = f.writer.begin().unwrap();
        g.ingest(&[e]).unwrap();
        g.commit_busy().unwrap();
    }

    #[test]
    fn busy_commits_journal_the_rollups_and_the_next_plain_commit_writes_them_all() {
        let mut inline = fixture();
        script(&mut inline, send_plain);
        let expected = all_rollups(&inline);

        let mut f = fixture();
        let before = all_rollups(&f);
        script(&mut f, send_busy_variant);
        assert_eq!(all_rollups(&f), before, "busy commits leave the rollups to the journal");
        assert_eq!(f.count("SELECT count(*) FROM rollup_journal"), 6);
        assert_eq!(f.count("SELECT count(*) FROM events"), 6, "the raw events are committed at once");
        f.writer.run(|_| Ok(())).unwrap();
        assert_eq!(all_rollups(&f), expected);
        assert_eq!(f.count("SELECT count(*) FROM rollup_journal"), 0);
    }

    #[test]
    fn a_busy_writer_writes_the_journal_once_its_oldest_row_is_old_enough() {
        let mut f = fixture();
        f.send_busy("s1", EventType::Pageview, at(9, 0));
        f.send_busy("s2", EventType::Pageview, at(9, 1));
        assert_eq!(f.count("SELECT count(*) FROM rollup_journal"), 2);
        f.writer.sqlite_writer().apply_every = std::time::Duration::ZERO;
        f.send_busy("s3", EventType::Pageview, at(9, 2));
        assert_eq!(f.count("SELECT count(*) FROM rollup_journal"), 0);
        assert_eq!(rollup_totals(&f.store), (3, 0));
        // The clock starts again with the next journaled row.
        f.writer.sqlite_writer().apply_every = std::time::Duration::from_secs(3600);
        f.send_busy("s4", EventType::Pageview, at(9, 3));
        f.send_busy("s5", EventType::Pageview, at(9, 4));
        assert_eq!(f.count("SELECT count(*) FROM rollup_journal"), 2);
    }

    #[test]
    fn journaled_rollups_are_written_when_a_writer_opens_after_a_crash() {
        let mut inline = fixture();
        script(&mut inline, send_plain);
        let mut f = fixture();
        script(&mut f, send_busy_variant);
        // A writer dropped without another commit is a process killed.
        f.writer = f.store.open_writer(Durability::Normal).unwrap();
        assert_eq!(f.count("SELECT count(*) FROM events"), 6);
        assert_eq!(all_rollups(&f), all_rollups(&inline));
        assert_eq!(f.count("SELECT count(*) FROM rollup_journal"), 0);
    }

    #[test]
    fn maintenance_writes_the_journal_before_it_runs() {
        let mut f = fixture();
        f.send_busy("s1", EventType::Pageview, at(9, 0));
        let mut g = f.writer.begin().unwrap();
        let seen: i64 = g.maintain(|c| Ok(c.query_row("SELECT sum(sessions) FROM rollup_hourly", [], |r| r.get(0))?)).unwrap();
        g.commit_busy().unwrap();
        assert_eq!(seen, 1);
        assert_eq!(f.count("SELECT count(*) FROM rollup_journal"), 0);
    }

    #[test]
    fn a_session_written_by_maintenance_inside_a_group_is_not_counted_twice() {
        let mut f = fixture();
        let event = |t| NewEvent { event_type: t, ..testing::pageview(&f.site, "s1", at(9, 0)) };
        let (first, second) = (event(EventType::Pageview), event(EventType::AdblockDetected));
        let mut g = f.writer.begin().unwrap();
        g.ingest(&[first]).unwrap();
        g.maintain(|_| Ok(())).unwrap();
        g.ingest(&[second]).unwrap();
        g.commit().unwrap();
        assert_eq!(rollup_totals(&f.store), (1, 1));
    }

    #[test]
    fn an_event_whose_row_cannot_be_written_leaves_nothing_staged() {
        let mut f = fixture();
        f.writer
            .sqlite_writer()
            .conn
            .execute_batch("CREATE TEMP TRIGGER refuse BEFORE INSERT ON main.events WHEN new.session_id = 'bad' BEGIN SELECT RAISE(ABORT, 'refused'); END")
            .unwrap();
        let event = |session: &str, id: &str| NewEvent {
            event_type: EventType::AdblockDetected,
            client_event_id: Some(id.into()),
            ..testing::pageview(&f.site, session, at(9, 0))
        };
        let mut g = f.writer.begin().unwrap();
        g.ingest(&[event("good", "e1")]).unwrap();
        assert!(g.ingest(&[event("bad", "e2")]).is_err(), "one event");
        assert!(g.ingest(&[event("good-too", "e3"), event("bad", "e4")]).is_err(), "a batch");
        g.commit().unwrap();
        assert_eq!((f.count("SELECT count(*) FROM events"), f.count("SELECT count(*) FROM sessions")), (1, 1));
        assert_eq!(rollup_totals(&f.store), (1, 1));
        // Their event ids were not taken as stored: sent again, they are.
        f.writer.sqlite_writer().conn.execute_batch("DROP TRIGGER temp.refuse").unwrap();
        assert!(!f.send_full("bad", EventType::Pageview, at(9, 5), None, false, Some("e2")).duplicate);
        assert!(!f.send_full("good-too", EventType::Pageview, at(9, 5), None, false, Some("e3")).duplicate);
        assert_eq!(rollup_totals(&f.store), (3, 1));
    }

    #[test]
    fn a_failed_command_leaves_the_rest_of_the_group() {
        let mut f = fixture();
        let mut g = f.writer.begin().unwrap();
        let failed: crate::Result<()> = g.apply(|c| {
            c.execute("INSERT INTO accounts (name, created_at) VALUES ('x', 0)", [])?;
            Err(crate::Error::Conflict("boom".into()))
        });
        assert!(failed.is_err());
        g.apply(|c| Ok(c.execute("INSERT INTO accounts (name, created_at) VALUES ('y', 0)", [])?)).unwrap();
        g.commit().unwrap();
        let names: Vec<String> = f
            .store
            .read(|c| {
                let mut s = c.prepare("SELECT name FROM accounts ORDER BY name")?;
                let v = s.query_map([], |r| r.get(0))?.collect::<crate::Result<_>>()?;
                Ok(v)
            })
            .unwrap();
        assert_eq!(names, vec!["acme", "y"]);
    }
}
