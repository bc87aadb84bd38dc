//! The database file as the server sees it: opened only after
//! `PRAGMA quick_check` found it sound (a damaged store is refused, never
//! served), and the free space of the file system it lives on, which
//! `/readyz` and `/metrics` report.

use std::path::Path;
use std::time::Instant;

use analytics::Store;
use anyhow::Context;

use crate::config::Config;

/// Checks the database (unless told not to), then opens it, migrating its
/// schema. A new database has nothing to check.
pub fn open(config: &Config) -> anyhow::Result<Store> {
    let db = &config.db;
    let shown = analytics::store::describe(db);
    if analytics::store::is_postgres_url(&db.to_string_lossy()) {
        // PostgreSQL checks its own pages; there is no file to check.
        return Store::open(db).with_context(|| format!("opening database {shown}"));
    }
    if config.skip_integrity_check {
        tracing::info!(db = %db.display(), "integrity check skipped");
    } else if db.exists() {
        let started = Instant::now();
        let problems = analytics::store::quick_check(db)
            .with_context(|| format!("the database {} cannot be read: it is damaged or not a Postern database; restore a backup", db.display()))?;
        let took_ms = started.elapsed().as_secs_f64() * 1000.0;
        anyhow::ensure!(
            problems.is_empty(),
            "the database {} failed its integrity check (PRAGMA quick_check), so it is not served; restore a backup. SQLite found: {}",
            db.display(),
            problems.join("; ")
        );
        tracing::info!(db = %db.display(), took_ms, "integrity check passed");
    }
    Store::open(db).with_context(|| format!("opening database {shown}"))
}

/// Bytes an unprivileged writer may still use on the file system holding `path`.
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string and `stat` is written by
    // the call before it is read, only when the call succeeds.
    let stat = unsafe {
        if libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        stat.assume_init()
    };
    Ok(u64::from(stat.f_bavail).saturating_mul(u64::from(stat.f_frsize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_bytes_of_a_real_directory_and_an_error_for_a_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        let e = free_bytes(&dir.path().join("missing")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
