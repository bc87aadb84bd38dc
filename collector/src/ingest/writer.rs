//! The writer thread: the only owner of the write connection. Handlers send it
//! jobs through a bounded queue; it runs as many as are waiting in one group
//! transaction, commits, and only then answers each job.
//!
//! The answers of a group go back to the runtime in one message, and a task
//! there hands them out: waking a request's task from the runtime's own
//! threads is cheap, while waking each one from the writer thread took a lock
//! and often a system call per request, on the thread every request waits for.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use analytics::model::{Ack, EventType, NewEvent};
use analytics::write::{Committed, Group, Writer};
use analytics::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::metrics::Metrics;

/// Runs inside the group transaction and returns what to do once the commit's
/// outcome is known.
type Job = Box<dyn FnOnce(&mut Group<'_>) -> Finish + Send>;
type Finish = Box<dyn FnOnce(Result<(), String>) + Send>;

type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// What a group runs. Events to store, the job of every ingestion request,
/// travel as plain data rather than as two boxed closures; a tracked event,
/// nearly every request, without a vector around it or around its answer.
enum Work {
    Track(NewEvent, Reply<Ack>),
    Ingest(Vec<NewEvent>, Reply<Vec<Ack>>),
    Job(Job),
}

enum Msg {
    Work(Work),
    Stop,
}

/// A job that ran in a group, waiting for the commit's outcome.
enum Ran {
    Track(analytics::Result<Ack>, Reply<Ack>),
    Ingest(analytics::Result<Vec<Ack>>, Reply<Vec<Ack>>),
    Job(Finish),
}

impl Ran {
    fn answer(self, commit: &Result<Committed, String>) {
        let committed = commit.as_ref().map(|_| ()).map_err(Clone::clone);
        match self {
            Ran::Track(outcome, reply) => {
                let outcome = outcome.map(|ack| final_ack(commit, ack));
                let _ = reply.send(settled(outcome.map_err(write_error), &committed));
            }
            Ran::Ingest(outcome, reply) => {
                let outcome = outcome.map(|acks| acks.into_iter().map(|ack| final_ack(commit, ack)).collect());
                let _ = reply.send(settled(outcome.map_err(write_error), &committed));
            }
            Ran::Job(finish) => finish(committed),
        }
    }
}

/// An event's answer as its group's commit settled it (a duplicate found at commit).
fn final_ack(commit: &Result<Committed, String>, ack: Ack) -> Ack {
    match commit {
        Ok(committed) => committed.ack(ack),
        Err(_) => ack,
    }
}

/// What a client hears when its write was not stored for a reason of the
/// store's own (a failed commit, a full disk): the detail is in the log,
/// where the writer thread put it, never in the answer.
const NOT_STORED: &str = "the write could not be stored, retry shortly";

/// A job's answer once its group's commit is known: its own outcome if the
/// commit succeeded.
fn settled<T>(outcome: Result<T, ApiError>, commit: &Result<(), String>) -> Result<T, ApiError> {
    match commit {
        Ok(()) => outcome,
        Err(_) => Err(ApiError::unavailable(NOT_STORED)),
    }
}

/// A job's own error as its answer: the store failing to write (disk full,
/// I/O error) is a 503 like a failed commit; anything else answers as it says.
fn write_error(e: analytics::Error) -> ApiError {
    if e.is_storage_failure() {
        tracing::error!(error = %e, "a write failed");
        ApiError::unavailable(NOT_STORED)
    } else {
        ApiError::from(e)
    }
}

/// Most jobs one group transaction takes.
const MAX_GROUP_JOBS: usize = 1024;

/// Jobs waiting when a group commits from which the writer counts as busy:
/// the group's rollup deltas then go to the journal (`Group::commit_busy`).
/// Above what a few clients of a quiet collector queue, so they read their
/// own writes in the rollups at once.
const BUSY_QUEUE: usize = 8;

/// The sending side, cloned into every handler.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Msg>,
    metrics: Arc<Metrics>,
}

pub struct WriterThread {
    tx: mpsc::Sender<Msg>,
    thread: JoinHandle<()>,
    answers: tokio::task::JoinHandle<()>,
}

/// A committed (or failed) group's answers.
type Answers = (Vec<Ran>, Result<Committed, String>);

/// Starts the writer thread on `writer`, the store's write connection.
pub fn start(writer: Writer, capacity: usize, group_wait: Duration, metrics: Arc<Metrics>) -> analytics::Result<(WriterHandle, WriterThread)> {
    let (tx, rx) = mpsc::channel(capacity);
    let (answers_tx, mut answers_rx) = mpsc::unbounded_channel::<Answers>();
    let thread_metrics = metrics.clone();
    let thread = std::thread::Builder::new()
        .name("postern-writer".into())
        .spawn(move || run(writer, rx, group_wait, &answers_tx, &thread_metrics))
        .map_err(|e| analytics::Error::Conflict(format!("cannot start the writer thread: {e}")))?;
    let answers = tokio::spawn(async move {
        while let Some((ran, commit)) = answers_rx.recv().await {
            for job in ran {
                job.answer(&commit);
            }
        }
    });
    Ok((WriterHandle { tx: tx.clone(), metrics }, WriterThread { tx, thread, answers }))
}

impl WriterThread {
    /// Commits everything queued so far, then stops the thread.
    pub async fn drain_and_stop(self) {
        // `send` waits for room, so the stop message queues behind every job.
        let _ = self.tx.send(Msg::Stop).await;
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        // The thread has ended, so its answers channel is closed: the task
        // ends once it has handed out the last answers.
        let _ = self.answers.await;
    }
}

impl WriterHandle {
    /// Stores one event; answers once it is committed.
    pub async fn track(&self, event: NewEvent) -> Result<Ack, ApiError> {
        let sdk_blocked = event.event_type == EventType::SdkBlocked;
        let ack = self.request(|reply| Work::Track(event, reply)).await?;
        self.count(1, u64::from(ack.duplicate), u64::from(sdk_blocked && !ack.duplicate));
        Ok(ack)
    }

    /// Stores events; answers once they are committed.
    pub async fn ingest(&self, events: Vec<NewEvent>) -> Result<Vec<Ack>, ApiError> {
        let n = events.len() as u64;
        let blocked: Vec<bool> = events.iter().map(|e| e.event_type == EventType::SdkBlocked).collect();
        let acks = self.request(|reply| Work::Ingest(events, reply)).await?;
        let sdk_blocked = acks.iter().zip(&blocked).filter(|(a, b)| **b && !a.duplicate).count() as u64;
        self.count(n, acks.iter().filter(|a| a.duplicate).count() as u64, sdk_blocked);
        Ok(acks)
    }

    /// `sdk_blocked` counts events stored once (a retried copy is not counted again).
    fn count(&self, ingested: u64, duplicates: u64, sdk_blocked: u64) {
        self.metrics.events_ingested.fetch_add(ingested, Ordering::Relaxed);
        self.metrics.events_duplicate.fetch_add(duplicates, Ordering::Relaxed);
        self.metrics.sdk_blocked.fetch_add(sdk_blocked, Ordering::Relaxed);
    }

    /// Runs a change on the write connection; answers once it is committed.
    pub async fn apply<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> analytics::Result<T> + Send + 'static,
    {
        self.submit(move |group| group.apply(f)).await
    }

    /// Runs maintenance that may change sessions or rollups (retention).
    pub async fn maintain<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> analytics::Result<T> + Send + 'static,
    {
        self.submit(move |group| group.maintain(f)).await
    }

    /// Queues a change without waiting for it (bookkeeping such as `last_used_at`).
    pub fn apply_later<F>(&self, f: F)
    where
        F: FnOnce(&Connection) -> analytics::Result<()> + Send + 'static,
    {
        let job: Job = Box::new(move |group| {
            if let Err(e) = group.apply(f) {
                tracing::warn!(error = %e, "background write failed");
            }
            Box::new(|_| {})
        });
        let _ = self.tx.try_send(Msg::Work(Work::Job(job)));
    }

    async fn submit<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Group<'_>) -> analytics::Result<T> + Send + 'static,
    {
        self.request(|reply| {
            Work::Job(Box::new(move |group| {
                let outcome = f(group).map_err(write_error);
                Box::new(move |commit: Result<(), String>| {
                    let _ = reply.send(settled(outcome, &commit));
                })
            }))
        })
        .await
    }

    /// Queues the work `make` builds around a reply channel, and waits for the reply.
    async fn request<T>(&self, make: impl FnOnce(Reply<T>) -> Work) -> Result<T, ApiError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.tx.try_send(Msg::Work(make(reply_tx))).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => ApiError::unavailable("the collector is overloaded, retry shortly"),
            mpsc::error::TrySendError::Closed(_) => ApiError::unavailable("the collector is shutting down"),
        })?;
        reply_rx.await.unwrap_or_else(|_| Err(ApiError::unavailable(NOT_STORED)))
    }

    pub fn queue_depth(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

/// How often a group waiting for more events looks at the queue.
const GROUP_WAIT_POLL: Duration = Duration::from_micros(250);

/// Jobs from which a group stops waiting for more (`group_wait`): what a
/// busy node's groups hold without waiting, so its writer never idles.
const GROUP_WAIT_FILL: usize = 32;

fn run(mut writer: Writer, mut rx: mpsc::Receiver<Msg>, group_wait: Duration, answers: &mpsc::UnboundedSender<Answers>, metrics: &Metrics) {
    let mut jobs: Vec<Work> = Vec::new();
    let mut stop = false;
    while !stop {
        match rx.blocking_recv() {
            Some(Msg::Work(work)) => jobs.push(work),
            Some(Msg::Stop) | None => break,
        }
        let until = Instant::now() + group_wait;
        while jobs.len() < MAX_GROUP_JOBS {
            match rx.try_recv() {
                Ok(Msg::Work(work)) => jobs.push(work),
                Ok(Msg::Stop) => {
                    stop = true;
                    break;
                }
                Err(_) if jobs.len() < GROUP_WAIT_FILL && Instant::now() < until => std::thread::sleep(GROUP_WAIT_POLL),
                Err(_) => break,
            }
        }
        let started = Instant::now();
        let mut group = match writer.begin() {
            Ok(g) => g,
            Err(e) => {
                // Dropping the jobs drops their reply channels: each waiting
                // request answers 503, nothing is acknowledged.
                tracing::error!(error = %e, jobs = jobs.len(), "cannot start a write transaction");
                jobs.clear();
                continue;
            }
        };
        let ran: Vec<Ran> = jobs
            .drain(..)
            .map(|work| match work {
                Work::Track(event, reply) => Ran::Track(group.ingest_event(&event), reply),
                Work::Ingest(events, reply) => Ran::Ingest(group.ingest(&events), reply),
                Work::Job(job) => Ran::Job(job(&mut group)),
            })
            .collect();
        let commit = if rx.len() >= BUSY_QUEUE { group.commit_busy() } else { group.commit() };
        let commit = commit.map_err(|e| {
            tracing::error!(error = %e, "commit failed");
            e.to_string()
        });
        metrics.record_commit(started.elapsed(), ran.len());
        // Fails only once the runtime is gone: nobody waits for these answers.
        let _ = answers.send((ran, commit));
    }
}
