//! Online backup: a consistent copy of a database that a running collector
//! may be writing, made with SQLite's backup API.
//!
//! The whole database is copied in one backup step, which reads one snapshot
//! (a WAL reader never blocks the writer, nor is blocked by it); copied in
//! several steps, the copy would start over each time another connection
//! commits, which a collector under load does every few milliseconds. The
//! copy is written beside its destination under a temporary name, checked
//! with `PRAGMA quick_check`, synced, and only then given its name, so the
//! destination never holds half a backup.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use crate::{Error, Result};

/// What a backup copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    pub pages: u64,
    pub bytes: u64,
}

/// How long the copy waits for a lock another connection holds (a checkpoint
/// or a schema change), as the collector's own writes do.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause before trying a step again that found the source locked.
const BUSY_PAUSE: Duration = Duration::from_millis(50);

/// Copies the database at `source` to `dest`, replacing `dest` when
/// `replace` is true and refusing to otherwise. The copy is a database in
/// rollback-journal mode, one self-contained file readable by its owner only.
pub fn backup(source: &Path, dest: &Path, replace: bool) -> Result<Copied> {
    // Opened without creating: a mistyped source is an error, not an empty backup.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let from = Connection::open_with_flags(source, flags)?;
    from.busy_timeout(BUSY_TIMEOUT)?;
    let partial = partial_path(dest);
    let _ = std::fs::remove_file(&partial);
    super::create_private(&partial)?;
    let copied = copy(&from, &partial).and_then(|copied| {
        std::fs::File::open(&partial)?.sync_all()?;
        publish(&partial, dest, replace)?;
        Ok(copied)
    });
    if copied.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    copied
}

/// The temporary name a copy is written under, in the destination's directory
/// (so the final rename stays on one file system).
fn partial_path(dest: &Path) -> PathBuf {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dest.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

fn copy(from: &Connection, to_path: &Path) -> Result<Copied> {
    let mut to = Connection::open(to_path)?;
    {
        let backup = Backup::new(from, &mut to)?;
        loop {
            match backup.step(-1)? {
                StepResult::Done => break,
                StepResult::More => {}
                _ => std::thread::sleep(BUSY_PAUSE),
            }
        }
    }
    // The pages say WAL like the source's: the copy becomes one file with
    // no -wal beside it, readable wherever it is put.
    to.pragma_update(None, "journal_mode", "DELETE")?;
    let problems = {
        let mut stmt = to.prepare("PRAGMA quick_check")?;
        let lines = stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
        lines
    };
    if problems != ["ok"] {
        return Err(Error::Corrupt(format!("the copy fails its quick_check: {}", problems.join("; "))));
    }
    let pages: u64 = to.pragma_query_value(None, "page_count", |r| r.get(0))?;
    let page_size: u64 = to.pragma_query_value(None, "page_size", |r| r.get(0))?;
    to.close().map_err(|(_, e)| e)?;
    Ok(Copied { pages, bytes: pages * page_size })
}

/// Gives the finished copy its name: a hard link when nothing may be
/// replaced (it fails if the name was taken meanwhile), else a rename.
fn publish(partial: &Path, dest: &Path, replace: bool) -> Result<()> {
    if replace {
        std::fs::rename(partial, dest)?;
    } else {
        std::fs::hard_link(partial, dest)?;
        std::fs::remove_file(partial)?;
    }
    // The new name is durable once its directory is synced.
    let dir = dest.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::store::testing::{pageview, site};
    use crate::store::Durability;

    #[test]
    fn a_copy_made_while_the_writer_commits_holds_every_earlier_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::Store::open(dir.path().join("live.db")).unwrap();
        let mut w = store.open_writer(Durability::Full).unwrap();
        let now = chrono::Utc::now();
        let s = site(&mut w, "a.test", now);
        let mut commit = |n: usize| {
            let mut g = w.begin().unwrap();
            g.ingest(&[pageview(&s, &format!("session-{n:05}"), now)]).unwrap();
            g.commit().unwrap();
        };
        for n in 0..200 {
            commit(n);
        }
        let dest = dir.path().join("copy.db");
        let copied = std::thread::scope(|scope| {
            let copying = scope.spawn(|| backup(&dir.path().join("live.db"), &dest, false));
            for n in 200..400 {
                commit(n);
            }
            copying.join().unwrap()
        })
        .unwrap();
        assert!(copied.pages > 0 && copied.bytes == copied.pages * 4096, "{copied:?}");
        let conn = Connection::open(&dest).unwrap();
        let events: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap();
        assert!((200..=400).contains(&events), "{events} events in the copy");
        let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(mode, "delete");
        assert_eq!(std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o600);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(!left.iter().any(|n| n.to_string_lossy().contains("partial")), "{left:?}");
    }

    #[test]
    fn an_existing_destination_is_replaced_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("live.db");
        crate::Store::open(&source).unwrap();
        let dest = dir.path().join("copy.db");
        std::fs::write(&dest, b"an older backup").unwrap();
        let e = backup(&source, &dest, false).unwrap_err();
        assert!(matches!(&e, Error::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists), "{e:?}");
        assert_eq!(std::fs::read(&dest).unwrap(), b"an older backup");
        backup(&source, &dest, true).unwrap();
        assert!(std::fs::read(&dest).unwrap().starts_with(b"SQLite format 3\0"));
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(!left.iter().any(|n| n.to_string_lossy().contains("partial")), "{left:?}");
    }

    #[test]
    fn a_missing_source_is_an_error_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let e = backup(&dir.path().join("nope.db"), &dir.path().join("copy.db"), false).unwrap_err();
        assert!(matches!(e, Error::Sqlite(_)), "{e:?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
