use thiserror::Error;

/// Everything the store can fail with.
#[derive(Debug, Error)]
pub enum Error {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
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
            Error::Create(_) => true,
            _ => false,
        }
    }
}
