//! Background jobs, all in one table: each has a name, a period and a `run`.
//! Every job runs once at start-up (so a restart catches up on what was missed)
//! and then once per period: tests run a job now by restarting the collector.

mod alerts;
mod retention;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::state::Ctx;

type JobFuture = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

pub struct Job {
    pub name: &'static str,
    pub every: Duration,
    pub run: fn(Ctx) -> JobFuture,
}

pub const JOBS: &[Job] = &[
    Job { name: "retention", every: Duration::from_secs(3600), run: |ctx| Box::pin(retention::run(ctx)) },
    Job { name: "alerts", every: Duration::from_secs(15 * 60), run: |ctx| Box::pin(alerts::run(ctx)) },
    // Reports fire at a minute of local time: look every 30 seconds.
    Job { name: "reports", every: Duration::from_secs(30), run: |ctx| Box::pin(crate::reports::run_due(ctx)) },
];

/// Starts every job on its own schedule; abort the handles to stop them.
pub fn spawn_all(ctx: &Ctx) -> Vec<tokio::task::JoinHandle<()>> {
    JOBS.iter()
        .map(|job| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(job.every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    if let Err(e) = (job.run)(ctx.clone()).await {
                        tracing::error!(job = job.name, error = %format!("{e:#}"), "job failed");
                    }
                }
            })
        })
        .collect()
}
