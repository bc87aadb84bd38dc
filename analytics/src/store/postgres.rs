//! A PostgreSQL database as the store: a bounded pool of connections, and
//! migrations that several collectors starting at once run exactly once.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::db::{params, Connection, Driver};
use crate::{Error, Result};

const MIGRATIONS: &[&str] = &[include_str!("sql/postgres/0001_init.sql"), include_str!("sql/postgres/0002_shared_state.sql")];

/// The schema version this code writes.
const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Most connections one collector opens for reads (its writer thread and
/// jobs hold their own): what a server's default `max_connections` of 100
/// allows for several nodes.
const MAX_READERS: usize = 16;

/// How long a read waits for a free connection before answering 503.
const WAIT_FOR_CONNECTION: Duration = Duration::from_secs(5);

/// Any fixed numbers: the keys of the advisory locks migrations and the
/// leading node hold.
/// The channel on which nodes announce changes to what they cache.
const CHANGES: &str = "postern_changes";

const MIGRATION_LOCK: i64 = 0x706f_7374_6572_6e01;
const LEADER_LOCK: i64 = 0x706f_7374_6572_6e02;

pub(super) struct PgStore {
    url: String,
    driver: Driver,
    pool: Mutex<Pool>,
    freed: Condvar,
    /// The connection holding the leader's lock, once this node has it.
    leader: Mutex<Option<Connection>>,
}

#[derive(Default)]
struct Pool {
    idle: Vec<Connection>,
    open: usize,
}

impl PgStore {
    pub fn open(url: &str) -> Result<PgStore> {
        let store = PgStore {
            url: url.to_owned(),
            driver: Driver::new()?,
            pool: Mutex::default(),
            freed: Condvar::new(),
            leader: Mutex::default(),
        };
        let conn = store.connect()?;
        migrate(&conn)?;
        Ok(store)
    }

    /// A connection of its own (a writer's, a job's), outside the pool.
    pub fn connect(&self) -> Result<Connection> {
        Ok(Connection::postgres(self.driver.connect(&self.url)?))
    }

    /// What opens such a connection again, for a writer whose connection the server closed.
    pub fn connector(&self) -> Box<dyn Fn() -> Result<Connection> + Send> {
        let (driver, url) = (self.driver.clone(), self.url.clone());
        Box::new(move || Ok(Connection::postgres(driver.connect(&url)?)))
    }

    /// Tells every node's listener (this one's too) about `change`.
    pub fn announce(&self, change: &str) -> Result<()> {
        self.read(|c| c.query_row("SELECT pg_notify(?1, ?2)", params![CHANGES, change], |_| Ok(())))
    }

    pub fn listen(&self, on: std::sync::Arc<dyn Fn(&str) + Send + Sync>) -> tokio::task::JoinHandle<()> {
        self.driver.listen(&self.url, CHANGES, on)
    }

    /// Whether this node leads: it holds a session advisory lock on a
    /// connection of its own, which the server releases when the node's
    /// connection ends (the node stopped or died), for another node to take.
    pub fn leads(&self) -> Result<bool> {
        let mut leader = self.leader.lock().unwrap_or_else(|e| e.into_inner());
        if leader.as_ref().is_some_and(Connection::is_usable) {
            return Ok(true);
        }
        let conn = self.connect()?;
        let got: bool = conn.query_row("SELECT pg_try_advisory_lock(?1)", [LEADER_LOCK], |r| r.get(0))?;
        if got {
            *leader = Some(conn);
        }
        Ok(got)
    }

    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.take()?;
        let result = f(&conn);
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if conn.is_usable() {
            pool.idle.push(conn);
        } else {
            pool.open -= 1;
        }
        self.freed.notify_one();
        result
    }

    fn take(&self) -> Result<Connection> {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            while let Some(conn) = pool.idle.pop() {
                if conn.is_usable() {
                    return Ok(conn);
                }
                pool.open -= 1;
            }
            if pool.open < MAX_READERS {
                pool.open += 1;
                drop(pool);
                return self.connect().inspect_err(|_| {
                    self.pool.lock().unwrap_or_else(|e| e.into_inner()).open -= 1;
                });
            }
            let (guard, timeout) = self.freed.wait_timeout(pool, WAIT_FOR_CONNECTION).unwrap_or_else(|e| e.into_inner());
            pool = guard;
            if timeout.timed_out() && pool.idle.is_empty() {
                return Err(Error::Unavailable("every database connection is busy".into()));
            }
        }
    }
}

/// Brings the schema up to date under an advisory lock, so that nodes
/// starting together migrate once; refuses a schema newer than this code.
fn migrate(conn: &Connection) -> Result<()> {
    conn.transaction(|c| {
        c.query_row("SELECT pg_advisory_xact_lock(?1)", [MIGRATION_LOCK], |_| Ok(()))?;
        let versioned: bool = c.query_row("SELECT to_regclass('schema_version') IS NOT NULL", [], |r| r.get(0))?;
        if !versioned {
            c.execute_batch("CREATE TABLE schema_version (version BIGINT NOT NULL)")?;
        }
        let found: i64 = c.query_row("SELECT coalesce(max(version), 0) FROM schema_version", [], |r| r.get(0))?;
        if found > SCHEMA_VERSION {
            return Err(Error::SchemaTooNew { found, supported: SCHEMA_VERSION });
        }
        for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            c.execute_batch(sql)?;
            c.execute("DELETE FROM schema_version", [])?;
            c.execute("INSERT INTO schema_version (version) VALUES (?1)", [index as i64 + 1])?;
        }
        Ok(())
    })
}
