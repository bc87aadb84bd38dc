use thiserror::Error;

/// Everything the store can fail with.
#[derive(Debug, Error)]
pub enum Error {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database error: {}", postgres_detail(.0))]
    Postgres(tokio_postgres::Error),
    #[error("the query returned no row")]
    NoRow,
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    #[error("database schema version {found} is newer than this program supports ({supported})")]
    SchemaTooNew { found: i64, supported: i64 },
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    Conflict(String),
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
    #[error("cannot create the database file: {0}")]
    Create(std::io::Error),
    #[error("writing the output failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("document rendering failed: {0}")]
    Render(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether the store failed to read or write its files (a full disk, an
    /// I/O error, a read-only or locked file) rather than refusing the data.
    pub fn is_storage_failure(&self) -> bool {
        use rusqlite::ErrorCode::*;
        match self {
            Error::Sqlite(e) => matches!(
                e.sqlite_error_code(),
                Some(DiskFull | SystemIoFailure | ReadOnly | DatabaseBusy | DatabaseLocked | CannotOpen | OutOfMemory)
            ),
            // A lost connection or a server refusing work: the data was fine.
            Error::Postgres(e) => {
                e.is_closed()
                    || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
                    || e.as_db_error().is_some_and(|d| is_server_trouble(d.code()))
            }
            Error::Unavailable(_) | Error::Create(_) => true,
            _ => false,
        }
    }
}

/// PostgreSQL's error classes that say the server, not the data, failed:
/// insufficient resources, operator intervention, system and I/O errors,
/// connection exceptions, serialisation failures and deadlocks.
fn is_server_trouble(code: &tokio_postgres::error::SqlState) -> bool {
    let c = code.code();
    ["53", "57", "58", "08", "40"].iter().any(|class| c.starts_with(class))
}

/// The server's own message and code where it sent one: the driver's
/// `Display` says only "db error".
fn postgres_detail(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => e.to_string(),
    }
}
