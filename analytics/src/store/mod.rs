//! Opening the SQLite database: pragmas, migrations and the pool of read-only
//! connections. Writes go through [`crate::write::Writer`], which owns the one
//! write connection. A new database file is created readable by its owner
//! only; [`quick_check`] and [`backup`] serve the data-safety commands.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::OpenFlags;

use crate::db::Connection;

use crate::Result;

mod backup;
mod migrations;
pub(crate) mod partitions;
mod postgres;

pub use backup::{backup, Copied};

/// How hard a commit waits for the disk. `Full` is the default: an acknowledged
/// event survives a power cut. `Normal` survives a crash of the process only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    Full,
    Normal,
}

/// How many idle read connections are kept open.
const MAX_IDLE_READERS: usize = 8;

/// The store's database: a SQLite file, or a PostgreSQL database that
/// several collectors may share.
pub struct Store {
    engine: Engine,
}

enum Engine {
    Sqlite { path: PathBuf, idle_readers: Mutex<Vec<Connection>> },
    Postgres(postgres::PgStore),
}

/// Listens for announced changes until dropped.
pub struct Listener(tokio::task::JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether `location` names a PostgreSQL database rather than a SQLite file.
pub fn is_postgres_url(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

/// `location` as logs and messages may show it: a URL's password hidden.
pub fn describe(location: &Path) -> String {
    let text = location.display().to_string();
    if !is_postgres_url(&text) {
        return text;
    }
    match url::Url::parse(&text) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("***"));
            url.to_string()
        }
        Ok(url) => url.to_string(),
        Err(_) => "an unreadable postgres:// URL".into(),
    }
}

impl Store {
    /// Opens (creating if needed) the database and brings its schema up to
    /// date: a file path for SQLite, a `postgres://` URL for PostgreSQL.
    pub fn open(location: impl AsRef<Path>) -> Result<Store> {
        let location = location.as_ref();
        if let Some(url) = location.to_str().filter(|l| is_postgres_url(l)) {
            return Ok(Store { engine: Engine::Postgres(postgres::PgStore::open(url)?) });
        }
        let path = location.to_path_buf();
        create_private(&path)?;
        let mut conn = open_write_connection(&path, Durability::Full)?;
        migrations::run(&mut conn)?;
        Ok(Store { engine: Engine::Sqlite { path, idle_readers: Mutex::new(Vec::new()) } })
    }

    pub fn engine(&self) -> crate::db::Engine {
        match &self.engine {
            Engine::Sqlite { .. } => crate::db::Engine::Sqlite,
            Engine::Postgres(_) => crate::db::Engine::Postgres,
        }
    }

    /// Whether other nodes may serve from this database too (PostgreSQL), so
    /// that what one process would count or keep in memory must be kept in
    /// the database ([`crate::shared`]) for any node to serve any request.
    pub fn is_shared(&self) -> bool {
        matches!(self.engine, Engine::Postgres(_))
    }

    /// The SQLite file, for what only a file has (free space, integrity check, backups).
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &self.engine {
            Engine::Sqlite { path, .. } => Some(path),
            Engine::Postgres(_) => None,
        }
    }

    /// Opens a write connection. The collector keeps one, owned by its
    /// writer thread; jobs and the admin CLI open their own for their changes.
    pub fn open_writer(&self, durability: Durability) -> Result<crate::write::Writer> {
        match &self.engine {
            Engine::Sqlite { path, .. } => {
                let mut writer = crate::write::Writer::sqlite(open_write_connection(path, durability)?)?;
                // Rollup deltas journaled by a writer that stopped before writing them.
                writer.run(|_| Ok(()))?;
                Ok(writer)
            }
            Engine::Postgres(pg) => crate::write::Writer::postgres(pg.connect()?, pg.connector()),
        }
    }

    /// Announces a change to what nodes cache (a site, the keys) to every
    /// node sharing the database; nothing to do on SQLite, which one node owns.
    /// Blocking: call it off async threads.
    pub fn announce(&self, change: &str) -> Result<()> {
        match &self.engine {
            Engine::Sqlite { .. } => Ok(()),
            Engine::Postgres(pg) => pg.announce(change),
        }
    }

    /// Calls `on` with every change announced by any node, until the
    /// returned listener is dropped; `on("*")` when changes may have been
    /// missed. `None` on SQLite.
    pub fn listen(&self, on: impl Fn(&str) + Send + Sync + 'static) -> Option<Listener> {
        match &self.engine {
            Engine::Sqlite { .. } => None,
            Engine::Postgres(pg) => Some(Listener(pg.listen(std::sync::Arc::new(on)))),
        }
    }

    /// Whether this node runs the jobs that one node at a time should run
    /// (reports, alerts, retention): always on SQLite; on PostgreSQL the
    /// node holding the leader's lock, another one once it is gone.
    /// Blocking: call it off async threads.
    pub fn leads(&self) -> Result<bool> {
        match &self.engine {
            Engine::Sqlite { .. } => Ok(true),
            Engine::Postgres(pg) => pg.leads(),
        }
    }

    /// Runs `f` on a pooled read connection. Blocking: call it off async threads.
    /// Drops the raw events that all occurred before `before_ms` a whole day
    /// at a time where the engine keeps them by day (PostgreSQL's partitions);
    /// returns how many went. What is left goes row by row
    /// ([`crate::retention::purge_raw_events`]), as all of SQLite's do.
    pub fn drop_expired_event_days(&self, before_ms: i64) -> Result<usize> {
        match &self.engine {
            Engine::Sqlite { .. } => Ok(0),
            Engine::Postgres(pg) => pg.read(|c| partitions::drop_expired(c, before_ms)),
        }
    }

    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        match &self.engine {
            Engine::Sqlite { path, idle_readers } => {
                let pooled = idle_readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
                let conn = match pooled {
                    Some(conn) => conn,
                    None => Connection::sqlite(open_read_connection(path)?),
                };
                let result = f(&conn);
                let mut idle = idle_readers.lock().unwrap_or_else(|e| e.into_inner());
                if idle.len() < MAX_IDLE_READERS {
                    idle.push(conn);
                }
                result
            }
            Engine::Postgres(pg) => pg.read(f),
        }
    }
}

/// Creates a database file that does not exist yet, empty (SQLite takes an
/// empty file for an empty database) and readable by its owner only: it holds
/// password hashes and webhook signing secrets. SQLite gives the `-wal` and
/// `-shm` files it creates beside it the database file's mode. An existing
/// file keeps its mode.
pub(crate) fn create_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(crate::Error::Create(e)),
    }
}

/// What `PRAGMA quick_check` found wrong in a database file: nothing when the
/// list is empty. At most [`MAX_PROBLEMS`] are listed.
pub fn quick_check(path: &Path) -> Result<Vec<String>> {
    // Opened without creating: a missing file is not checked into existence.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = rusqlite::Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(WRITE_BUSY_TIMEOUT)?;
    let mut stmt = conn.prepare(&format!("PRAGMA quick_check({MAX_PROBLEMS})"))?;
    let lines = stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(if lines == ["ok"] { Vec::new() } else { lines })
}

/// The most problems [`quick_check`] lists: enough to tell what is damaged.
pub const MAX_PROBLEMS: usize = 10;

/// How long a write waits for another write connection's lock.
const WRITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

fn open_write_connection(path: &Path, durability: Durability) -> Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    // WAL lets readers run while the writer commits.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL syncs the WAL on every commit, so an acknowledged event is on disk.
    let sync = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", sync)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // A WAL that grew during a burst is cut back once it has been checkpointed.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    // Other write connections (the outbox sender, the alerts job, the admin CLI)
    // hold the lock while they commit; on a disk busy with other work one fsync
    // can take seconds. Wait that out rather than failing an ingest with 503.
    conn.busy_timeout(WRITE_BUSY_TIMEOUT)?;
    // Keep more of the rollup and session B-trees in memory (negative = KiB).
    // 12 MB: 16 cost 5 MB more of the collector's RSS on a store of ten
    // million events, where it came within 2 MB of the 100 MB target, and
    // saved no writer CPU there (15412ae).
    conn.pragma_update(None, "cache_size", -12_000)?;
    // The writer runs about twenty statements per group: rusqlite's default
    // cache of 16 would evict and parse some of them again on every group.
    conn.set_prepared_statement_cache_capacity(64);
    crate::write::register_index_key(&conn)?;
    Ok(conn)
}

fn open_read_connection(path: &Path) -> Result<rusqlite::Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = rusqlite::Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    // Readers scan the small rollup tables: a modest cache each keeps RSS low.
    conn.pragma_update(None, "cache_size", -2_000)?;
    crate::write::register_index_key(&conn)?;
    Ok(conn)
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A store in a fresh temporary directory, kept alive by the returned guard.
    pub fn temp_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("test.db")).unwrap();
        (dir, store)
    }

    /// A database of its own on the test cluster, dropped with this guard.
    pub struct PgDatabase {
        base: String,
        name: String,
    }

    impl Drop for PgDatabase {
        fn drop(&mut self) {
            let driver = crate::db::Driver::new().unwrap();
            if let Ok(conn) = driver.connect(&format!("{}/postgres", self.base)) {
                let _ = conn.batch(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
            }
        }
    }

    /// A store in a fresh database on the PostgreSQL cluster named by
    /// `POSTERN_TEST_POSTGRES` (`postgres://user@host:port`, which
    /// `scripts/with-postgres` starts). Without one the test is skipped,
    /// saying so, unless `POSTERN_REQUIRE_POSTGRES` is set (as `scripts/test`
    /// sets it): then it fails.
    pub fn postgres_store() -> Option<(PgDatabase, Store)> {
        let Ok(base) = std::env::var("POSTERN_TEST_POSTGRES") else {
            assert!(std::env::var_os("POSTERN_REQUIRE_POSTGRES").is_none(), "POSTERN_TEST_POSTGRES is not set");
            eprintln!("skipped: no PostgreSQL cluster (run under scripts/with-postgres)");
            return None;
        };
        let base = base.trim_end_matches('/').to_owned();
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let driver = crate::db::Driver::new().unwrap();
        let admin = driver.connect(&format!("{base}/postgres")).unwrap();
        admin.batch(&format!("CREATE DATABASE {name}")).unwrap();
        let store = Store::open(format!("{base}/{name}")).unwrap();
        Some((PgDatabase { base, name }, store))
    }

    /// The index entries of sessions (0) or event ids (1): the cold table's
    /// and the writer's hot level's.
    pub fn index_entries(store: &Store, w: &crate::write::Writer, which: usize) -> Vec<(i64, i64)> {
        let cold = [crate::write::SESSION_TABLES.cold, crate::write::EVENT_ID_TABLES.cold][which];
        let mut entries = pairs(store, &format!("SELECT h, seq FROM {cold}"));
        entries.extend(w.hot_entries()[which].iter().copied());
        entries
    }

    /// The index key and `seq` of every row of `rows`, in `seq` order.
    pub fn row_keys(store: &Store, rows: &str, key: &str) -> Vec<(i64, i64)> {
        pairs(store, &format!("SELECT {}, seq FROM {rows} ORDER BY seq", crate::write::sql_index_key("site", key)))
    }

    fn pairs(store: &Store, sql: &str) -> Vec<(i64, i64)> {
        store
            .read(|c| {
                let mut s = c.prepare(sql)?;
                let v = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<crate::Result<_>>()?;
                Ok(v)
            })
            .unwrap()
    }

    /// A site (its domain also its name) in a new account "acme", as of `now`.
    pub fn site(writer: &mut crate::write::Writer, domain: &str, now: chrono::DateTime<chrono::Utc>) -> crate::model::Site {
        writer
            .run(|c| {
                let account = crate::accounts::ensure_account(c, "acme", now)?;
                let new = crate::sites::NewSite { account_id: account, name: domain, domain, timezone: chrono_tz::Tz::UTC, revenue_per_mille: None };
                crate::sites::create(c, &new, now)
            })
            .unwrap()
    }

    /// A desktop pageview from FR with no variant and no event id, occurred
    /// and received at `at`: override fields with `..pageview(..)`.
    pub fn pageview(site: &crate::model::Site, session: &str, at: chrono::DateTime<chrono::Utc>) -> crate::model::NewEvent {
        crate::model::NewEvent {
            site_seq: site.seq,
            session_id: session.into(),
            event_type: crate::model::EventType::Pageview,
            page_url: format!("https://{}/", site.domain),
            metadata: None,
            device: crate::model::Device::Desktop,
            country: "FR".into(),
            variant: None,
            forced_variant: false,
            client_event_id: None,
            occurred_at: at,
            received_at: at,
        }
    }
}
