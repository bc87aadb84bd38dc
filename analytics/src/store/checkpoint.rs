//! WAL checkpoints on their own thread and connection.
//!
//! By default SQLite checkpoints inside the commit that pushes the WAL past
//! 1000 pages: that commit then copies the pages back into the database file
//! and syncs it while every request of its group waits. The ingestion writer
//! turns automatic checkpoints off and this thread runs a passive checkpoint
//! every [`INTERVAL`] instead: it never blocks the writer, and a page written
//! by many commits in between is copied back once.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::Durability;
use crate::Result;

const INTERVAL: Duration = Duration::from_millis(100);

/// Stops (after a last checkpoint) when dropped.
pub(crate) struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    pub(crate) fn start(path: &Path, durability: Durability) -> Result<Checkpointer> {
        let conn = super::open_write_connection(path, durability)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("postern-checkpoint".into())
            .spawn(move || loop {
                let last = !matches!(stopped.recv_timeout(INTERVAL), Err(RecvTimeoutError::Timeout));
                // A failed checkpoint (a busy database) is retried on the next
                // tick; meanwhile the WAL only grows.
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                if last {
                    break;
                }
            })
            .map_err(|e| crate::Error::Conflict(format!("cannot start the checkpoint thread: {e}")))?;
        Ok(Checkpointer { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
