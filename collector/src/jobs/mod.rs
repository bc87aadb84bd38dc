//! Background jobs, all in one table: each has a name, a period and a `run`.
//! Every job runs once at start-up (so a restart catches up on what was missed)
//! and then once per period: tests run a job now by restarting the collector.
//! Runs are supervised ([`crate::supervisor`]): a run that panics or fails is
//! logged and run again after a backoff, and a job failing for longer than its
//! period, or a run going on longer than its `stuck_after`, fails `/readyz`.

mod alerts;
mod retention;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::state::Ctx;
use crate::supervisor;

type JobFuture = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

pub struct Job {
    pub name: &'static str,
    pub every: Duration,
    /// A run taking longer than this is stuck.
    pub stuck_after: Duration,
    pub run: fn(Ctx) -> JobFuture,
}

pub const JOBS: &[Job] = &[
    // The first pass after retention periods were shortened deletes much more than an hour's worth.
    Job { name: "retention", every: Duration::from_secs(3600), stuck_after: Duration::from_secs(6 * 3600), run: |ctx| Box::pin(retention::run(ctx)) },
    Job { name: "alerts", every: Duration::from_secs(15 * 60), stuck_after: Duration::from_secs(3600), run: |ctx| Box::pin(alerts::run(ctx)) },
    // Reports fire at a minute of local time: look every 30 seconds.
    Job {
        name: "reports",
        every: Duration::from_secs(30),
        stuck_after: Duration::from_secs(15 * 60),
        run: |ctx| Box::pin(crate::reports::run_due(ctx)),
    },
];

/// Runs a job on the leading node only: on several nodes sharing one
/// PostgreSQL database the others skip their turn (and take over when the
/// leader is gone).
fn led(ctx: Ctx, run: fn(Ctx) -> JobFuture) -> JobFuture {
    Box::pin(async move {
        let store = ctx.store.clone();
        if tokio::task::spawn_blocking(move || store.leads()).await?? {
            run(ctx).await
        } else {
            Ok(())
        }
    })
}

/// Starts every job on its own schedule, under supervision; abort the handles to stop them.
pub fn spawn_all(ctx: &Ctx) -> Vec<tokio::task::JoinHandle<()>> {
    JOBS.iter()
        .map(|job| {
            let health = ctx.tasks.register(job.name, job.every, job.stuck_after);
            let ctx = ctx.clone();
            tokio::spawn(supervisor::run_periodically(health, job.every, move || led(ctx.clone(), job.run)))
        })
        .collect()
}
