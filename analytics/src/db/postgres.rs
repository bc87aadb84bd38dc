//! PostgreSQL through tokio-postgres, called synchronously like SQLite: the
//! store's callers already run queries off the async threads (a blocking task,
//! the writer thread). The driver's connections are driven by a runtime of
//! their own, so the store works the same whoever calls it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::BytesMut;
use futures_util::StreamExt;
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};
use tokio_postgres::{NoTls, RowStream, Statement};

use super::Value;
use crate::{Error, Result};

/// The runtime that drives every PostgreSQL connection of a store; each
/// connection holds it, so it lives as long as the last of them.
#[derive(Clone)]
pub struct Driver(Arc<Runtime>);

struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    /// Without waiting: the last connection may be dropped on an async thread.
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Driver {
    pub fn new() -> Result<Driver> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("postern-pg")
            .enable_all()
            .build()
            .map_err(Error::Io)?;
        Ok(Driver(Arc::new(Runtime(Some(runtime)))))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0 .0.as_ref().expect("the runtime is shut down only when dropped").handle()
    }

    /// Opens a connection to `url` (`postgres://user[:password]@host[:port]/db`).
    pub(crate) fn connect(&self, url: &str) -> Result<PgConn> {
        let (client, connection) = self.handle().block_on(tokio_postgres::connect(url, NoTls)).map_err(Error::Postgres)?;
        self.handle().spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "a PostgreSQL connection ended");
            }
        });
        Ok(PgConn { driver: self.clone(), client, statements: RefCell::default(), in_transaction: Cell::new(false) })
    }
}

impl Driver {
    /// Calls `on` with the payload of every notification on `channel`, from a
    /// connection of its own, connecting again after a lost connection (and
    /// then calling `on("*")`: anything may have changed meanwhile). Ends when
    /// the returned handle is aborted.
    pub(crate) fn listen(&self, url: &str, channel: &'static str, on: Arc<dyn Fn(&str) + Send + Sync>) -> tokio::task::JoinHandle<()> {
        let url = url.to_owned();
        self.handle().spawn(async move {
            loop {
                match tokio_postgres::connect(&url, NoTls).await {
                    Ok((client, mut connection)) => {
                        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
                        let driving = tokio::spawn(async move {
                            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                            while let Some(Ok(message)) = messages.next().await {
                                if let tokio_postgres::AsyncMessage::Notification(n) = message {
                                    let _ = tx.send(n.payload().to_owned());
                                }
                            }
                        });
                        match client.batch_execute(&format!("LISTEN {channel}")).await {
                            Ok(()) => {
                                on("*");
                                while let Some(payload) = rx.recv().await {
                                    on(&payload);
                                }
                            }
                            Err(e) => tracing::warn!(error = %e, "cannot listen for changes"),
                        }
                        driving.abort();
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot connect to listen for changes"),
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        })
    }
}

/// One PostgreSQL connection with its prepared statements.
pub struct PgConn {
    driver: Driver,
    client: tokio_postgres::Client,
    statements: RefCell<HashMap<String, Statement>>,
    in_transaction: Cell<bool>,
}

impl PgConn {
    fn wait<F: Future>(&self, f: F) -> F::Output {
        self.driver.handle().block_on(f)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    pub(crate) fn in_transaction(&self) -> bool {
        self.in_transaction.get()
    }

    pub(crate) fn begin(&self) -> Result<()> {
        self.batch("BEGIN")?;
        self.in_transaction.set(true);
        Ok(())
    }

    pub(crate) fn commit(&self) -> Result<()> {
        self.in_transaction.set(false);
        self.batch("COMMIT")
    }

    pub(crate) fn rollback(&self) -> Result<()> {
        self.in_transaction.set(false);
        self.batch("ROLLBACK")
    }

    pub(crate) fn batch(&self, sql: &str) -> Result<()> {
        self.wait(self.client.batch_execute(sql)).map_err(Error::Postgres)
    }

    /// The statement for `sql` (written with SQLite's `?N` parameters), prepared once.
    pub(crate) fn prepare(&self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let statement = self.wait(self.client.prepare(&numbered_parameters(&dialect(sql)))).map_err(|e| {
            tracing::error!(error = %e, sql, "PostgreSQL refused a statement");
            Error::Postgres(e)
        })?;
        self.statements.borrow_mut().insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    pub(crate) fn execute(&self, s: &Statement, values: &[Value]) -> Result<usize> {
        let n = self.wait(self.client.execute_raw(s, values.iter())).map_err(Error::Postgres)?;
        Ok(n as usize)
    }

    /// Runs `sql`, an INSERT of one row `VALUES (?1, …, ?N)`, once for every
    /// run at once: the values go as N arrays and the rows come from
    /// `unnest`, so many rows cost the server one statement, not one each.
    /// Rows are inserted in the runs' order (what sorted locking relies on).
    pub(crate) fn insert_all(&self, sql: &str, runs: Vec<Vec<Value>>) -> Result<Vec<tokio_postgres::Row>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let statement = self.prepare_unnest(sql)?;
        let columns = columns_of(runs, 0);
        self.wait(self.client.query(&statement, &array_params(&columns))).map_err(Error::Postgres)
    }

    /// `sql`, a one-row INSERT, as the statement `insert_all` runs.
    fn prepare_unnest(&self, sql: &str) -> Result<Statement> {
        let key = format!("unnest\n{sql}");
        if let Some(s) = self.statements.borrow().get(&key) {
            return Ok(s.clone());
        }
        let unnest = self.unnest_sql(sql, 0)?;
        let statement = self.prepare(&unnest)?;
        self.statements.borrow_mut().insert(key, statement.clone());
        Ok(statement)
    }

    /// `sql`, a one-row INSERT, reading its rows from arrays (`unnest_values`),
    /// its parameters numbered from `offset + 1`.
    fn unnest_sql(&self, sql: &str, offset: usize) -> Result<String> {
        // The one-row statement tells the type of each value, hence of each array.
        let types: Vec<String> = self.prepare(sql)?.params().iter().map(|t| format!("{}[]", t.name())).collect();
        unnest_values(sql, &types, offset).ok_or_else(|| Error::Corrupt(format!("not a one-row INSERT: {sql}")))
    }

    /// One-row INSERTs (`VALUES (?1, …)`) run together as one statement, each
    /// reading its rows from arrays: all but the last in a `WITH`, in order.
    /// Prepared once for the set of statements.
    fn prepare_inserts(&self, sqls: &[&str]) -> Result<Statement> {
        let key = format!("inserts\n{}", sqls.join("\n;\n"));
        if let Some(s) = self.statements.borrow().get(&key) {
            return Ok(s.clone());
        }
        let mut text = String::new();
        let mut offset = 0;
        for (i, sql) in sqls.iter().enumerate() {
            let unnest = self.unnest_sql(sql, offset)?;
            offset += self.prepare(sql)?.params().len();
            if i + 1 < sqls.len() {
                text.push_str(if i == 0 { "WITH " } else { ", " });
                text.push_str(&format!("step{i} AS ({unnest})"));
            } else {
                text.push_str(&format!(" {unnest}"));
            }
        }
        let statement = self.prepare(&text)?;
        self.statements.borrow_mut().insert(key, statement.clone());
        Ok(statement)
    }

    /// Runs a transaction's last steps and commits it, sent at once and
    /// answered in one round trip: the statements planned for their rows
    /// (`Step::Planned`, those without rows skipped), then every
    /// `Step::InsertAll` as one statement (rows inserted step by step, in the
    /// steps' order), then `COMMIT`.
    pub(crate) fn pipeline_and_commit(&self, steps: Vec<Step<'_>>) -> Result<()> {
        let mut planned = Vec::new();
        let mut inserts = Vec::new();
        let mut insert_columns = Vec::new();
        for step in steps {
            match step {
                Step::InsertAll(sql, runs) => {
                    let width = self.prepare(sql)?.params().len();
                    inserts.push(sql);
                    insert_columns.extend(columns_of(runs, width));
                }
                // A step without rows has nothing to do.
                Step::Planned(_, runs) if runs.is_empty() => {}
                Step::Planned(sql, runs) => planned.push(self.typed(sql, columns_of(runs, 0))?),
            }
        }
        let insert = if inserts.is_empty() { None } else { Some(self.prepare_inserts(&inserts)?) };
        type Answer<'f> = Pin<Box<dyn Future<Output = std::result::Result<(), tokio_postgres::Error>> + 'f>>;
        let mut queries: Vec<Answer<'_>> = Vec::new();
        for (text, columns, types) in &planned {
            let params = typed_params(columns, types);
            queries.push(Box::pin(async move { self.client.query_typed(text, &params).await.map(drop) }));
        }
        if let Some(statement) = &insert {
            let params = array_params(&insert_columns);
            queries.push(Box::pin(async move { self.client.query(statement, &params).await.map(drop) }));
        }
        self.in_transaction.set(false);
        queries.push(Box::pin(self.client.batch_execute("COMMIT")));
        // Every answer is read before the first error is returned: a COMMIT
        // after a failed statement ends the transaction without committing it.
        for result in self.wait(futures_util::future::join_all(queries)) {
            result.map_err(Error::Postgres)?;
        }
        Ok(())
    }

    /// `sql` as PostgreSQL reads it, its arrays and their types, for
    /// `query_typed`: sent unnamed, so it is planned for these values.
    fn typed(&self, sql: &str, columns: Vec<Vec<Value>>) -> Result<(String, Vec<Vec<Value>>, Vec<Type>)> {
        let types = self.prepare(sql)?.params().to_vec();
        Ok((numbered_parameters(&dialect(sql)), columns, types))
    }

    /// Runs `sql`, whose parameters are arrays (`CAST(?1 AS bigint[])`), with
    /// `columns` as them: for a statement whose best plan depends on the rows
    /// it looks up, so it is sent unnamed (parsed, planned for these arrays and
    /// run in one round trip), and a plan made for other rows, or for the table
    /// as it was when small, is never reused.
    pub(crate) fn query_columns_planned(&self, sql: &str, columns: Vec<Vec<Value>>) -> Result<Vec<tokio_postgres::Row>> {
        let (text, columns, types) = self.typed(sql, columns)?;
        self.wait(self.client.query_typed(&text, &typed_params(&columns, &types))).map_err(Error::Postgres)
    }

    pub(crate) fn query(&self, s: &Statement, values: Vec<Value>) -> Result<RowReader<'_>> {
        let stream = self.wait(self.client.query_raw(s, values)).map_err(Error::Postgres)?;
        Ok(RowReader { conn: self, stream: Box::pin(stream) })
    }
}

/// A statement of [`PgConn::pipeline`].
pub(crate) enum Step<'a> {
    /// As [`PgConn::insert_all`]: a one-row INSERT and the rows.
    InsertAll(&'a str, Vec<Vec<Value>>),
    /// As [`PgConn::query_columns_planned`]: a statement of array parameters
    /// (`CAST(?1 AS bigint[])`), and the rows whose values, parameter by
    /// parameter, make the arrays.
    Planned(&'a str, Vec<Vec<Value>>),
}

/// Each column as one array parameter.
fn array_params(columns: &[Vec<Value>]) -> Vec<&(dyn ToSql + Sync)> {
    columns.iter().map(|c| c as &(dyn ToSql + Sync)).collect()
}

/// Each column as one array parameter of its type, for `query_typed`.
fn typed_params<'c>(columns: &'c [Vec<Value>], types: &[Type]) -> Vec<(&'c (dyn ToSql + Sync), Type)> {
    array_params(columns).into_iter().zip(types.iter().cloned()).collect()
}

/// Rows (one value per parameter each) turned into one array per parameter;
/// `width` empty arrays when there are no rows.
fn columns_of(runs: Vec<Vec<Value>>, width: usize) -> Vec<Vec<Value>> {
    let width = runs.first().map_or(width, Vec::len);
    let mut columns: Vec<Vec<Value>> = (0..width).map(|_| Vec::with_capacity(runs.len())).collect();
    for run in runs {
        for (column, value) in columns.iter_mut().zip(run) {
            column.push(value);
        }
    }
    columns
}

/// Rows streamed from the server as they are read.
pub(crate) struct RowReader<'c> {
    conn: &'c PgConn,
    stream: Pin<Box<RowStream>>,
}

impl RowReader<'_> {
    pub(crate) fn next(&mut self) -> Result<Option<tokio_postgres::Row>> {
        self.conn.wait(self.stream.next()).transpose().map_err(Error::Postgres)
    }
}

/// A column of `row` as `T`.
pub(crate) fn get<T: super::FromValue>(row: &tokio_postgres::Row, idx: usize) -> Result<T> {
    T::from_value(column(row, idx)?)
}

/// A column of `row` as a [`Value`].
pub(crate) fn column(row: &tokio_postgres::Row, idx: usize) -> Result<Value> {
    if idx >= row.len() {
        return Err(Error::Corrupt(format!("no column {idx}")));
    }
    row.try_get::<_, Any>(idx).map(|a| a.0).map_err(Error::Postgres)
}

/// The one SQLite function the shared queries use, as PostgreSQL says it:
/// `json_each(?N)`, the elements of a JSON array given as text.
fn dialect(sql: &str) -> std::borrow::Cow<'_, str> {
    const SQLITE: &str = "FROM json_each(";
    if !sql.contains(SQLITE) {
        return std::borrow::Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len() + 32);
    let mut rest = sql;
    while let Some(at) = rest.find(SQLITE) {
        out.push_str(&rest[..at]);
        let after = &rest[at + SQLITE.len()..];
        let end = after.find(')').unwrap_or(after.len());
        out.push_str(&format!("FROM jsonb_array_elements_text(CAST({} AS jsonb)) AS j(value)", &after[..end]));
        rest = after.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// `sql` with its `VALUES (?1, …, ?N)` as `SELECT * FROM unnest(CAST(?1 AS T1), …)`,
/// `types` being the arrays' types, the parameters numbered from `offset + 1`;
/// `None` when the values are not `?1` to `?N` in order.
fn unnest_values(sql: &str, types: &[String], offset: usize) -> Option<String> {
    let start = sql.find("VALUES (")?;
    let inner = start + "VALUES (".len();
    let end = inner + sql[inner..].find(')')?;
    let values: Vec<&str> = sql[inner..end].split(',').map(str::trim).collect();
    let in_order = values.len() == types.len() && values.iter().enumerate().all(|(i, v)| *v == format!("?{}", i + 1));
    if !in_order {
        return None;
    }
    let arrays: Vec<String> = types.iter().enumerate().map(|(i, t)| format!("CAST(?{} AS {t})", offset + i + 1)).collect();
    Some(format!("{}SELECT * FROM unnest({}){}", &sql[..start], arrays.join(", "), &sql[end + 1..]))
}

/// SQLite's `?N` (and `?`) parameters as PostgreSQL's `$N`, outside quotes.
pub(crate) fn numbered_parameters(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut next = 1;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '?') => {
                out.push('$');
                if chars.peek().is_some_and(char::is_ascii_digit) {
                    while let Some(d) = chars.next_if(char::is_ascii_digit) {
                        out.push(d);
                    }
                } else {
                    out.push_str(&next.to_string());
                    next += 1;
                }
                continue;
            }
            (None, _) => {}
        }
        out.push(c);
    }
    out
}

type BoxError = Box<dyn StdError + Sync + Send>;

/// A parameter becomes the type PostgreSQL inferred for its place, as SQLite
/// takes any value anywhere: an integer for a `bigint`, `integer` or
/// `boolean` column, text for `text`, bytes for `bytea`.
impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Integer(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => i.to_string().to_sql(ty, out),
                _ => Err(format!("an integer cannot be a {ty} parameter").into()),
            },
            Value::Real(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                _ => Err(format!("a real cannot be a {ty} parameter").into()),
            },
            Value::Text(s) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => s.to_sql(ty, out),
                // citext (e-mail addresses) is sent as text.
                _ if ty.name() == "citext" => {
                    out.extend_from_slice(s.as_bytes());
                    Ok(IsNull::No)
                }
                Type::JSONB => {
                    out.extend_from_slice(&[1]);
                    out.extend_from_slice(s.as_bytes());
                    Ok(IsNull::No)
                }
                Type::JSON => {
                    out.extend_from_slice(s.as_bytes());
                    Ok(IsNull::No)
                }
                _ => Err(format!("text cannot be a {ty} parameter").into()),
            },
            Value::Blob(b) => match *ty {
                Type::BYTEA => b.as_slice().to_sql(ty, out),
                _ => Err(format!("bytes cannot be a {ty} parameter").into()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Any column as a [`Value`]: integers, reals, text, bytes and booleans as
/// they are; `numeric` (what `sum` of integers gives) as an integer when it
/// has no fraction, as a real otherwise.
struct Any(Value);

impl<'a> FromSql<'a> for Any {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Any, BoxError> {
        Ok(Any(match *ty {
            Type::INT8 => Value::Integer(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Integer(i64::from(i32::from_sql(ty, raw)?)),
            Type::INT2 => Value::Integer(i64::from(i16::from_sql(ty, raw)?)),
            Type::OID => Value::Integer(i64::from(u32::from_sql(ty, raw)?)),
            Type::BOOL => Value::Integer(i64::from(bool::from_sql(ty, raw)?)),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f64::from(f32::from_sql(ty, raw)?)),
            Type::NUMERIC => numeric(raw)?,
            Type::BYTEA => Value::Blob(raw.to_vec()),
            Type::JSONB => Value::Text(std::str::from_utf8(raw.get(1..).unwrap_or_default())?.to_owned()),
            _ => Value::Text(std::str::from_utf8(raw)?.to_owned()),
        }))
    }

    fn from_sql_null(_: &Type) -> std::result::Result<Any, BoxError> {
        Ok(Any(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// PostgreSQL's binary `numeric`: digit count, weight, sign, display scale,
/// then base-10000 digits, the first worth 10000^weight.
fn numeric(raw: &[u8]) -> std::result::Result<Value, BoxError> {
    let word = |i: usize| -> std::result::Result<i16, BoxError> {
        raw.get(i * 2..i * 2 + 2).map(|b| i16::from_be_bytes([b[0], b[1]])).ok_or_else(|| "short numeric".into())
    };
    let (ndigits, weight, sign, scale) = (word(0)? as usize, i32::from(word(1)?), word(2)? as u16, word(3)?);
    if sign == 0xC000 {
        return Ok(Value::Null);
    }
    let negative = sign == 0x4000;
    let digits: Vec<i64> = (0..ndigits).map(|i| word(4 + i).map(i64::from)).collect::<std::result::Result<_, _>>()?;
    if scale == 0 && weight < 5 {
        let mut v: i64 = 0;
        for k in 0..=weight.max(-1) {
            let d = digits.get(k as usize).copied().unwrap_or(0);
            v = v.checked_mul(10_000).and_then(|v| v.checked_add(d)).ok_or("numeric out of range")?;
        }
        return Ok(Value::Integer(if negative { -v } else { v }));
    }
    let v: f64 = digits.iter().enumerate().map(|(i, d)| *d as f64 * 10_000f64.powi(weight - i as i32)).sum();
    Ok(Value::Real(if negative { -v } else { v }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_numbered_outside_quotes() {
        assert_eq!(numbered_parameters("SELECT ?1, '?2', \"a?\" FROM t WHERE a = ?12 AND b = ?"), "SELECT $1, '?2', \"a?\" FROM t WHERE a = $12 AND b = $1");
    }

    #[test]
    fn a_one_row_insert_becomes_an_insert_of_arrays() {
        let types = ["int8[]".to_owned(), "text[]".to_owned()];
        assert_eq!(
            unnest_values("INSERT INTO t AS r (a, b)\n  VALUES (?1, ?2)\n ON CONFLICT (a) DO UPDATE SET b = excluded.b", &types, 0).as_deref(),
            Some("INSERT INTO t AS r (a, b)\n  SELECT * FROM unnest(CAST(?1 AS int8[]), CAST(?2 AS text[]))\n ON CONFLICT (a) DO UPDATE SET b = excluded.b")
        );
        assert_eq!(unnest_values("INSERT INTO t (a, b) VALUES (?2, ?1)", &types, 0), None, "values out of order");
        assert_eq!(unnest_values("INSERT INTO t (a) VALUES (?1)", &types, 0), None, "a type for each value");
        assert_eq!(unnest_values("UPDATE t SET a = ?1", &types, 0), None);
        // The second statement of a combined INSERT takes the parameters after the first's.
        assert_eq!(
            unnest_values("INSERT INTO t (a, b) VALUES (?1, ?2)", &types, 3).as_deref(),
            Some("INSERT INTO t (a, b) SELECT * FROM unnest(CAST(?4 AS int8[]), CAST(?5 AS text[]))")
        );
    }

    #[test]
    fn json_each_becomes_jsonb_array_elements() {
        assert_eq!(
            dialect("SELECT 1 WHERE (c IN (SELECT value FROM json_each(?5)) OR ?5 IS NULL)"),
            "SELECT 1 WHERE (c IN (SELECT value FROM jsonb_array_elements_text(CAST(?5 AS jsonb)) AS j(value)) OR ?5 IS NULL)"
        );
    }

    fn encoded(ndigits: i16, weight: i16, sign: u16, scale: i16, digits: &[i16]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [ndigits, weight, sign as i16, scale].iter().chain(digits) {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v
    }

    #[test]
    fn numeric_sums_read_as_integers_and_fractions_as_reals() {
        assert_eq!(numeric(&encoded(2, 1, 0, 0, &[12, 3456])).unwrap(), Value::Integer(123_456));
        assert_eq!(numeric(&encoded(1, 1, 0, 0, &[5])).unwrap(), Value::Integer(50_000));
        assert_eq!(numeric(&encoded(0, 0, 0, 0, &[])).unwrap(), Value::Integer(0));
        assert_eq!(numeric(&encoded(1, 0, 0x4000, 0, &[7])).unwrap(), Value::Integer(-7));
        assert_eq!(numeric(&encoded(2, 0, 0, 2, &[1, 2500])).unwrap(), Value::Real(1.25));
    }
}
