//! The storage boundary's connection: one type for SQLite and PostgreSQL.
//!
//! Every query above the write path is written once, in the SQL both engines
//! share (numbered `?N` parameters, `ON CONFLICT`, `RETURNING`, `coalesce`),
//! and runs through a [`Connection`] without knowing which engine is behind
//! it; where the dialects differ a query asks [`Connection::engine`]. The
//! method names follow rusqlite's, which the SQLite side calls directly.

mod postgres;
mod value;

pub use postgres::Driver;
pub(crate) use postgres::{get as pg_get, PgConn, Step};
pub use value::{FromValue, ToValue, Value};

use crate::{Error, Result};

/// Which database a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// A connection to the store's database, SQLite or PostgreSQL.
pub struct Connection(Inner);

enum Inner {
    Sqlite(rusqlite::Connection),
    Postgres(PgConn),
}

/// Parameters of one statement.
pub trait Params {
    fn values(self) -> Vec<Value>;
}

impl Params for () {
    fn values(self) -> Vec<Value> {
        Vec::new()
    }
}

impl Params for &[&dyn ToValue] {
    fn values(self) -> Vec<Value> {
        self.iter().map(|p| p.to_value()).collect()
    }
}

/// `[]`: no parameters (its own impl so that `[]` needs no type).
impl Params for [&dyn ToValue; 0] {
    fn values(self) -> Vec<Value> {
        Vec::new()
    }
}

macro_rules! array_params {
    ($($n:literal)*) => {$(
        impl<T: ToValue> Params for [T; $n] {
            fn values(self) -> Vec<Value> {
                self.iter().map(ToValue::to_value).collect()
            }
        }
    )*};
}
array_params!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);

/// `params![a, b]`: parameters of different types for one statement.
#[macro_export]
macro_rules! params {
    () => { () };
    ($($p:expr),+ $(,)?) => { &[$(&$p as &dyn $crate::db::ToValue),+] as &[&dyn $crate::db::ToValue] };
}
pub use crate::params;

/// A column position (the only way the store's queries name columns).
pub trait RowIndex {
    fn index(self) -> usize;
}

impl RowIndex for usize {
    fn index(self) -> usize {
        self
    }
}

/// One row of a result.
pub struct Row<'a>(RowInner<'a>);

enum RowInner<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a tokio_postgres::Row),
}

impl Row<'_> {
    pub fn get<I: RowIndex, T: FromValue>(&self, idx: I) -> Result<T> {
        T::from_value(self.value(idx.index())?)
    }

    pub fn column_count(&self) -> usize {
        match &self.0 {
            RowInner::Sqlite(r) => r.as_ref().column_count(),
            RowInner::Postgres(r) => r.len(),
        }
    }

    pub fn value(&self, idx: usize) -> Result<Value> {
        match &self.0 {
            RowInner::Sqlite(r) => Ok(r.get_ref(idx)?.into()),
            RowInner::Postgres(r) => postgres::column(r, idx),
        }
    }
}

/// `query_row(..).optional()`: no row is `None` rather than an error.
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoRow) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Connection {
    pub(crate) fn sqlite(conn: rusqlite::Connection) -> Connection {
        Connection(Inner::Sqlite(conn))
    }

    pub(crate) fn postgres(conn: PgConn) -> Connection {
        Connection(Inner::Postgres(conn))
    }

    pub fn engine(&self) -> Engine {
        match &self.0 {
            Inner::Sqlite(_) => Engine::Sqlite,
            Inner::Postgres(_) => Engine::Postgres,
        }
    }

    /// The SQLite connection behind this one, for the SQLite engine's own code.
    pub(crate) fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match &self.0 {
            Inner::Sqlite(c) => Some(c),
            Inner::Postgres(_) => None,
        }
    }

    pub(crate) fn as_postgres(&self) -> Option<&PgConn> {
        match &self.0 {
            Inner::Sqlite(_) => None,
            Inner::Postgres(c) => Some(c),
        }
    }

    /// Whether the connection can still be used (a PostgreSQL server may have gone).
    pub(crate) fn is_usable(&self) -> bool {
        match &self.0 {
            Inner::Sqlite(_) => true,
            Inner::Postgres(c) => !c.is_closed(),
        }
    }

    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// Runs statements separated by semicolons, without parameters.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match &self.0 {
            Inner::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Inner::Postgres(c) => c.batch(sql),
        }
    }

    pub fn query_row<T, P: Params>(&self, sql: &str, params: P, f: impl FnOnce(&Row<'_>) -> Result<T>) -> Result<T> {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement(match &self.0 {
            Inner::Sqlite(c) => StatementInner::Sqlite(c.prepare(sql)?),
            Inner::Postgres(c) => StatementInner::Postgres(c, c.prepare(sql)?),
        }))
    }

    /// A statement kept prepared on this connection for the next call.
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement(match &self.0 {
            Inner::Sqlite(c) => StatementInner::SqliteCached(c.prepare_cached(sql)?),
            Inner::Postgres(c) => StatementInner::Postgres(c, c.prepare(sql)?),
        }))
    }

    /// Runs `f` in a transaction: committed when it returns `Ok`, rolled back otherwise.
    /// Inside another transaction it is a savepoint.
    pub fn transaction<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let outer = match &self.0 {
            // SQLite's SAVEPOINT outside a transaction begins one.
            Inner::Sqlite(_) => None,
            Inner::Postgres(c) if c.in_transaction() => None,
            Inner::Postgres(c) => Some(c),
        };
        match outer {
            Some(c) => c.begin()?,
            None => self.execute_batch("SAVEPOINT postern_tx")?,
        }
        let outcome = f(self);
        let end = match (&outcome, outer) {
            (Ok(_), Some(c)) => c.commit(),
            (Ok(_), None) => self.execute_batch("RELEASE postern_tx"),
            (Err(_), Some(c)) => c.rollback(),
            (Err(_), None) => self.execute_batch("ROLLBACK TO postern_tx; RELEASE postern_tx"),
        };
        match (outcome, end) {
            (Ok(v), Ok(())) => Ok(v),
            (Ok(_), Err(e)) => Err(e),
            (Err(e), Err(undo)) => {
                tracing::error!(error = %undo, "rolling back a failed change failed");
                Err(e)
            }
            (Err(e), Ok(())) => Err(e),
        }
    }
}

/// A prepared statement.
pub struct Statement<'c>(StatementInner<'c>);

enum StatementInner<'c> {
    Sqlite(rusqlite::Statement<'c>),
    SqliteCached(rusqlite::CachedStatement<'c>),
    Postgres(&'c PgConn, tokio_postgres::Statement),
}

impl Statement<'_> {
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        let values = params.values();
        match &mut self.0 {
            StatementInner::Sqlite(s) => Ok(s.execute(rusqlite::params_from_iter(values))?),
            StatementInner::SqliteCached(s) => Ok(s.execute(rusqlite::params_from_iter(values))?),
            StatementInner::Postgres(c, s) => c.execute(s, &values),
        }
    }

    pub fn query_row<T, P: Params>(&mut self, params: P, f: impl FnOnce(&Row<'_>) -> Result<T>) -> Result<T> {
        let mut rows = self.query(params)?;
        match rows.next()? {
            Some(row) => f(&row),
            None => Err(Error::NoRow),
        }
    }

    /// Every row mapped by `f`.
    pub fn query_map<T, P: Params>(&mut self, params: P, mut f: impl FnMut(&Row<'_>) -> Result<T>) -> Result<std::vec::IntoIter<Result<T>>> {
        let mut rows = self.query(params)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(f(&row));
        }
        Ok(out.into_iter())
    }

    /// The rows one at a time, for results too large to hold (exports).
    pub fn query<P: Params>(&mut self, params: P) -> Result<Rows<'_>> {
        let values = params.values();
        Ok(Rows(match &mut self.0 {
            StatementInner::Sqlite(s) => RowsInner::Sqlite(s.query(rusqlite::params_from_iter(values))?),
            StatementInner::SqliteCached(s) => RowsInner::Sqlite(s.query(rusqlite::params_from_iter(values))?),
            StatementInner::Postgres(c, s) => RowsInner::Postgres(c.query(s, values)?, None),
        }))
    }
}

/// Rows read one at a time.
pub struct Rows<'s>(RowsInner<'s>);

enum RowsInner<'s> {
    Sqlite(rusqlite::Rows<'s>),
    Postgres(postgres::RowReader<'s>, Option<tokio_postgres::Row>),
}

impl Rows<'_> {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Row<'_>>> {
        match &mut self.0 {
            RowsInner::Sqlite(rows) => Ok(rows.next()?.map(|r| Row(RowInner::Sqlite(r)))),
            RowsInner::Postgres(reader, current) => {
                *current = reader.next()?;
                Ok(current.as_ref().map(|r| Row(RowInner::Postgres(r))))
            }
        }
    }
}
