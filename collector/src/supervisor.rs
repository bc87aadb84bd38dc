//! Background work kept alive and watched: each run of a job, and the
//! delivery worker, runs in a task of its own, so a panic ends that run, not
//! the work. A run that panics or fails is logged and started again after a
//! backoff (one second, doubling up to a ceiling). Every task's [`Health`]
//! says when it last succeeded, since when it has been failing and since when
//! its current run has been going: `/readyz` fails when a task has been
//! failing longer than its period allows (dead) or a run has gone on too long
//! (stuck), and `/metrics` shows the same.

use std::any::Any;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The first wait after a failure; each further failure in a row doubles it.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// One supervised task's health.
pub struct Health {
    pub name: &'static str,
    /// Failing for longer than this makes the task dead.
    dead_after: Duration,
    /// A run going on for longer than this is stuck.
    stuck_after: Duration,
    state: Mutex<State>,
    failures: AtomicU64,
}

#[derive(Default)]
struct State {
    running_since: Option<Instant>,
    failing_since: Option<Instant>,
    failures_in_a_row: u32,
    last_success: Option<SystemTime>,
}

impl Health {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A run starts.
    pub fn started(&self) {
        self.state().running_since = Some(Instant::now());
    }

    /// The run ended well: the task is healthy again.
    pub fn succeeded(&self) {
        let mut s = self.state();
        s.running_since = None;
        s.failing_since = None;
        s.failures_in_a_row = 0;
        s.last_success = Some(SystemTime::now());
    }

    /// The run failed; returns how many runs in a row have.
    pub fn failed(&self) -> u32 {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut s = self.state();
        s.running_since = None;
        s.failing_since.get_or_insert_with(Instant::now);
        s.failures_in_a_row = s.failures_in_a_row.saturating_add(1);
        s.failures_in_a_row
    }

    /// Why the task is not healthy at `now`, if it is not.
    pub fn trouble(&self, now: Instant) -> Option<String> {
        let s = self.state();
        let over = |since: Option<Instant>, limit: Duration| since.map(|t| now.saturating_duration_since(t)).filter(|d| *d > limit);
        if let Some(d) = over(s.failing_since, self.dead_after) {
            return Some(format!("{} has been failing for {} s", self.name, d.as_secs()));
        }
        over(s.running_since, self.stuck_after).map(|d| format!("{} has been running for {} s", self.name, d.as_secs()))
    }
}

/// Every supervised task, for `/readyz` and `/metrics`.
#[derive(Default)]
pub struct Tasks {
    list: Mutex<Vec<Arc<Health>>>,
}

impl Tasks {
    /// A new task's health: `dead_after` is how long it may fail before it
    /// counts as dead (a job's period), `stuck_after` how long one run may take.
    pub fn register(&self, name: &'static str, dead_after: Duration, stuck_after: Duration) -> Arc<Health> {
        let health = Arc::new(Health { name, dead_after, stuck_after, state: Mutex::default(), failures: AtomicU64::new(0) });
        self.list.lock().unwrap_or_else(|e| e.into_inner()).push(health.clone());
        health
    }

    fn all(&self) -> Vec<Arc<Health>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What is wrong with the tasks now: empty when every one is healthy.
    pub fn troubles(&self) -> Vec<String> {
        let now = Instant::now();
        self.all().iter().filter_map(|h| h.trouble(now)).collect()
    }

    /// The tasks' samples in the Prometheus text format.
    pub fn render_metrics(&self, out: &mut String) {
        let now = Instant::now();
        let all = self.all();
        let mut family = |name: &str, kind: &str, help: &str, value: &dyn Fn(&Health) -> f64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for h in &all {
                let _ = writeln!(out, "{name}{{task=\"{}\"}} {}", h.name, value(h));
            }
        };
        family("postern_task_up", "gauge", "1 when the background task is neither dead nor stuck (what /readyz checks).", &|h| {
            f64::from(u8::from(h.trouble(now).is_none()))
        });
        family("postern_task_failures_total", "counter", "Runs of the background task that panicked or failed.", &|h| {
            h.failures.load(Ordering::Relaxed) as f64
        });
        family(
            "postern_task_last_success_timestamp_seconds",
            "gauge",
            "When a run of the background task last succeeded (Unix seconds; 0: not yet).",
            &|h| {
                h.state().last_success.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64())
            },
        );
    }
}

/// The wait after the `n`-th failed run in a row: one second, doubling, at most `ceiling`.
pub fn backoff(n: u32, ceiling: Duration) -> Duration {
    FIRST_BACKOFF.saturating_mul(1 << n.saturating_sub(1).min(20)).min(ceiling)
}

/// Aborts the task when dropped: a supervisor that is aborted takes its run with it.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `work` in a task of its own and tells how it ended: a panic becomes
/// an error carrying the panic's message.
pub async fn run_once<F>(work: F) -> Result<(), String>
where
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let mut task = AbortOnDrop(tokio::spawn(work));
    match (&mut task.0).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(e) if e.is_panic() => Err(format!("panicked: {}", panic_message(e.into_panic().as_ref()))),
        Err(e) => Err(e.to_string()),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs the work `start` makes until it ends well or `stopped` turns true,
/// starting it again after a backoff each time it panics or fails.
pub async fn keep_running<S, F>(health: Arc<Health>, ceiling: Duration, mut stopped: watch::Receiver<bool>, start: S)
where
    S: Fn() -> F,
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    loop {
        let why = match run_once(start()).await {
            Ok(()) => return,
            Err(why) => why,
        };
        let wait = backoff(health.failed(), ceiling);
        tracing::error!(task = health.name, error = %why, retry_in_s = wait.as_secs_f64(), "background task failed; restarting it");
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}

/// Runs a periodic job forever: a run every `every` (counted from each run's
/// start), or after the backoff when a run panicked or failed.
pub async fn run_periodically<S, F>(health: Arc<Health>, every: Duration, start: S)
where
    S: Fn() -> F,
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    loop {
        let began = tokio::time::Instant::now();
        health.started();
        match run_once(start()).await {
            Ok(()) => {
                health.succeeded();
                tokio::time::sleep_until(began + every).await;
            }
            Err(why) => {
                // Retried sooner than the next period, though not in a tight loop.
                let wait = backoff(health.failed(), (every / 2).min(Duration::from_secs(300)));
                tracing::error!(job = health.name, error = %why, retry_in_s = wait.as_secs_f64(), "job failed; running it again");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    #[test]
    fn backoff_doubles_from_a_second_up_to_the_ceiling() {
        let ceiling = Duration::from_secs(15);
        let waits: Vec<u64> = (1..=7).map(|n| backoff(n, ceiling).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 15, 15, 15]);
        assert_eq!(backoff(u32::MAX, Duration::from_secs(300)), Duration::from_secs(300));
    }

    #[test]
    fn a_task_failing_longer_than_allowed_is_dead_and_healthy_again_after_a_success() {
        let tasks = Tasks::default();
        let h = tasks.register("reports", Duration::from_secs(30), Duration::from_secs(600));
        h.failed();
        let now = Instant::now();
        assert_eq!(h.trouble(now + Duration::from_secs(29)), None, "failing, within its period");
        assert_eq!(h.trouble(now + Duration::from_secs(31)).as_deref(), Some("reports has been failing for 31 s"));
        h.succeeded();
        assert!(tasks.troubles().is_empty());
        h.started();
        let later = Instant::now() + Duration::from_secs(601);
        assert_eq!(h.trouble(later).as_deref(), Some("reports has been running for 601 s"));
    }

    #[tokio::test]
    async fn a_panicking_run_is_reported_and_the_task_started_again() {
        let tasks = Tasks::default();
        let health = tasks.register("flaky", Duration::from_secs(60), Duration::from_secs(60));
        let (_stop, stopped) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let started = Instant::now();
        keep_running(health.clone(), Duration::from_millis(10), stopped, move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    0 => panic!("a bug in the first run"),
                    1 => anyhow::bail!("an error in the second run"),
                    _ => Ok(()),
                }
            }
        })
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 3, "started again after the panic and after the error");
        assert_eq!(health.failures.load(Ordering::Relaxed), 2);
        assert!(started.elapsed() >= Duration::from_millis(20), "each restart waited its backoff");
        let mut text = String::new();
        tasks.render_metrics(&mut text);
        assert!(text.contains("postern_task_failures_total{task=\"flaky\"} 2\n"), "{text}");
    }

    #[tokio::test]
    async fn run_once_turns_a_panic_into_its_message() {
        assert_eq!(run_once(async { panic!("boom {}", 42) }).await, Err("panicked: boom 42".to_owned()));
        assert_eq!(run_once(async { Ok(()) }).await, Ok(()));
    }

    #[tokio::test]
    async fn a_stop_during_the_backoff_ends_the_task_at_once() {
        let health = Tasks::default().register("worker", Duration::from_secs(60), Duration::from_secs(60));
        let (stop, stopped) = watch::channel(false);
        let supervised = tokio::spawn(keep_running(health, Duration::from_secs(3600), stopped, || async { anyhow::bail!("always") }));
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), supervised).await.expect("stopped during its backoff").unwrap();
    }
}
