//! The outbox worker: sends due rows, records each attempt with the row's new
//! state, and schedules retries with exponential backoff and jitter.
//!
//! Retried: network errors, timeouts, HTTP 408, 429 and 5xx, transient SMTP
//! replies. Not retried: any other 4xx, 3xx, permanent SMTP replies, and a
//! webhook whose host is or resolves to an address it may not reach (see
//! [`super::destination`]; no connection is made then). On stop
//! the worker finishes the sends in flight and records them before exiting,
//! so a graceful restart neither loses nor repeats a delivery.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use analytics::integrations;
use analytics::outbox::{self, Attempt, Channel, Outcome, Pending};
use analytics::write::Writer;
use analytics::Store;
use anyhow::Context;
use chrono::Utc;
use futures_util::future::join_all;
use rand::Rng;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::destination::{self, Destinations, GuardedResolver};
use super::email::Mailer;
use super::webhook;
use crate::config::DeliveryConfig;
use crate::supervisor::{self, Health, Tasks};

/// How often the outbox is looked at when nothing is due.
const POLL: Duration = Duration::from_millis(250);
/// Rows sent concurrently per round.
const BATCH: usize = 16;

/// How long a claimed delivery is this worker's: longer than the slowest
/// attempt (an SMTP exchange's 30 s), after which another node's worker may
/// take it again.
const CLAIM: Duration = Duration::from_secs(90);
/// One HTTP delivery may take this long, connection included.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Further tries to record an attempt when the database is busy.
const RECORD_RETRIES: usize = 3;
/// Stored error messages are cut to this many characters.
const ERROR_MAX: usize = 500;
/// Restarts after a panic wait at most this long.
const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Crashing for longer than this, the worker counts as dead.
const DEAD_AFTER: Duration = Duration::from_secs(60);
/// A round (up to BATCH sends at once, each bounded by its own timeout) taking
/// longer than this is stuck.
const STUCK_AFTER: Duration = Duration::from_secs(300);

/// Why an attempt failed, and whether trying again may help.
#[derive(Debug)]
pub struct Failure {
    status: Option<u16>,
    retryable: bool,
    message: String,
    /// The receiver's `Retry-After`, honoured when longer than the backoff.
    retry_after: Option<Duration>,
}

impl Failure {
    pub fn retry(status: Option<u16>, message: impl Into<String>) -> Failure {
        Failure { status, retryable: true, message: message.into(), retry_after: None }
    }

    pub fn permanent(status: Option<u16>, message: impl Into<String>) -> Failure {
        Failure { status, retryable: false, message: message.into(), retry_after: None }
    }
}

/// The longest `Retry-After` honoured: a receiver cannot park a delivery for days.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(6 * 3600);

pub struct Worker {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Worker {
    /// Starts delivering, recording attempts through `writer`, a write connection of its own.
    pub fn start(store: &Arc<Store>, writer: Writer, config: &DeliveryConfig, tasks: &Tasks) -> anyhow::Result<Worker> {
        let destinations = Destinations::new(&config.webhook_allow);
        let health = tasks.register("delivery", DEAD_AFTER, STUCK_AFTER);
        let sender = Arc::new(Sender {
            store: store.clone(),
            writer: Arc::new(Mutex::new(writer)),
            mailer: Mailer::new(config)?,
            http: reqwest::Client::builder()
                .timeout(HTTP_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("Postern/", env!("CARGO_PKG_VERSION")))
                // Every name is resolved, and its answers checked, by the guard;
                // a proxy from the environment would connect on our behalf unchecked.
                .dns_resolver(Arc::new(GuardedResolver::new(destinations.clone())))
                .no_proxy()
                .build()
                .context("building the HTTP client")?,
            destinations,
            retry_base: config.retry_base,
            max_attempts: config.max_attempts,
            health: health.clone(),
        });
        let (stop, stopped) = watch::channel(false);
        // A panic ends the worker's task; supervision starts a new one.
        let task = tokio::spawn(supervisor::keep_running(health, RESTART_BACKOFF_MAX, stopped.clone(), move || {
            sender.clone().run(stopped.clone())
        }));
        Ok(Worker { stop, task })
    }

    /// Stops taking new rows, lets the sends in flight finish and be recorded.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "the delivery worker ended abnormally");
        }
    }
}

struct Sender {
    store: Arc<Store>,
    /// The worker's own write connection: outbox writes never wait behind ingestion's queue.
    writer: Arc<Mutex<Writer>>,
    mailer: Mailer,
    http: reqwest::Client,
    destinations: Destinations,
    retry_base: Duration,
    max_attempts: u32,
    health: Arc<Health>,
}

impl Sender {
    async fn run(self: Arc<Self>, mut stopped: watch::Receiver<bool>) -> anyhow::Result<()> {
        while !*stopped.borrow() {
            self.health.started();
            let writer = self.writer.clone();
            let due = tokio::task::spawn_blocking(move || {
                let now = Utc::now();
                let until = now + chrono::Duration::from_std(CLAIM).unwrap_or_default();
                writer.lock().unwrap_or_else(|e| e.into_inner()).run(|c| outbox::claim(c, now, until, BATCH))
            })
            .await;
            let read_ok = matches!(due, Ok(Ok(_)));
            let rows = match due {
                Ok(Ok(rows)) => rows,
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "reading the outbox failed");
                    self.health.failed();
                    Vec::new()
                }
                Err(e) => {
                    tracing::error!(error = %e, "reading the outbox panicked");
                    self.health.failed();
                    Vec::new()
                }
            };
            if rows.is_empty() {
                if read_ok {
                    self.health.succeeded();
                }
                tokio::select! {
                    () = tokio::time::sleep(POLL) => {}
                    _ = stopped.changed() => {}
                }
                continue;
            }
            join_all(rows.into_iter().map(|row| self.attempt(row))).await;
            self.health.succeeded();
        }
        Ok(())
    }

    async fn attempt(&self, row: Pending) {
        let started_at = Utc::now();
        let clock = Instant::now();
        let result = self.send(&row).await;
        let latency_ms = i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX);
        let attempt_no = row.attempts + 1;
        let (status, error, outcome) = match result {
            Ok(status) => (Some(status), None, Outcome::Delivered),
            Err(f) => {
                let outcome = if f.retryable && attempt_no < self.max_attempts {
                    let mut wait = backoff(self.retry_base, attempt_no);
                    if let Some(asked) = f.retry_after.and_then(|d| chrono::Duration::from_std(d.min(RETRY_AFTER_MAX)).ok()) {
                        wait = wait.max(asked);
                    }
                    Outcome::Retry(Utc::now() + wait)
                } else {
                    Outcome::Failed
                };
                (f.status, Some(f.message.chars().take(ERROR_MAX).collect::<String>()), outcome)
            }
        };
        match (&outcome, &error) {
            (Outcome::Delivered, _) => tracing::info!(delivery = %row.id, event = %row.event, channel = row.channel.as_str(), attempt = attempt_no, "delivered"),
            (_, Some(e)) => tracing::warn!(delivery = %row.id, channel = row.channel.as_str(), attempt = attempt_no, retry = matches!(outcome, Outcome::Retry(_)), error = %e, "delivery attempt failed"),
            _ => {}
        }
        let attempt = Attempt { started_at, latency_ms, status, error, outcome };
        let writer = self.writer.clone();
        let seq = row.seq;
        // An unrecorded success would be sent again: retry a write that lost to a busy database.
        let recorded = tokio::task::spawn_blocking(move || {
            let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
            let mut result = w.run(|c| outbox::record(c, seq, attempt_no, &attempt));
            for _ in 0..RECORD_RETRIES {
                if !matches!(&result, Err(e) if matches!(e, analytics::Error::Sqlite(_)) || e.is_storage_failure()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
                result = w.run(|c| outbox::record(c, seq, attempt_no, &attempt));
            }
            result
        })
        .await;
        match recorded {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(delivery = %row.id, error = %e, "recording a delivery attempt failed"),
            Err(e) => tracing::error!(delivery = %row.id, error = %e, "recording a delivery attempt panicked"),
        }
    }

    async fn send(&self, row: &Pending) -> Result<u16, Failure> {
        if row.channel == Channel::Email {
            return self.mailer.send(row).await;
        }
        let seq = row.integration.ok_or_else(|| Failure::permanent(None, "the delivery has no integration"))?;
        let store = self.store.clone();
        let integration = tokio::task::spawn_blocking(move || store.read(|c| integrations::get_by_seq(c, seq)))
            .await
            .map_err(|e| Failure::retry(None, format!("reading the integration: {e}")))?
            .map_err(|e| Failure::retry(None, format!("reading the integration: {e}")))?;
        let integration = match integration {
            Some(i) if i.deleted_at.is_none() => i,
            _ => return Err(Failure::permanent(None, "the integration was deleted")),
        };
        let url = reqwest::Url::parse(&integration.target).map_err(|_| Failure::permanent(None, "the integration's URL is not valid"))?;
        // The resolver never sees a host written as an address: check it here.
        self.destinations.check_literal(&url).map_err(|r| Failure::permanent(None, format!("{r}; no connection was made")))?;
        let mut request = self.http.post(url).header(http::header::CONTENT_TYPE, "application/json").body(row.payload.clone());
        if row.channel == Channel::Webhook {
            let timestamp = Utc::now().timestamp();
            let secret = integration.secret.as_deref().unwrap_or_default();
            request = request
                .header("Postern-Event", &row.event)
                .header("Postern-Delivery", row.id.to_string())
                .header("Postern-Timestamp", timestamp.to_string())
                .header("Postern-Signature", webhook::signature(secret, timestamp, &row.payload));
        }
        // The URL itself can be a secret (Slack's are): errors never include it.
        let response = request.send().await.map_err(|e| match destination::refusal_of(&e) {
            Some(r) => Failure::permanent(None, format!("{r}; no connection was made")),
            None => Failure::retry(None, e.without_url().to_string()),
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(status.as_u16());
        }
        let message = format!("the receiver answered {status}");
        if status.is_server_error() || status == http::StatusCode::REQUEST_TIMEOUT || status == http::StatusCode::TOO_MANY_REQUESTS {
            // Only the delay-seconds form: an HTTP date would need the receiver's clock to agree with ours.
            let retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            Err(Failure { retry_after, ..Failure::retry(Some(status.as_u16()), message) })
        } else {
            Err(Failure::permanent(Some(status.as_u16()), message))
        }
    }
}

/// The wait after failed attempt `n` (1-based): `base × 2^(n−1)`, times a
/// random factor in [0.75, 1.25) so many failed deliveries do not retry in step.
fn backoff(base: Duration, n: u32) -> chrono::Duration {
    let exp = base.as_secs_f64() * 2f64.powi(n.saturating_sub(1).min(30) as i32);
    let jittered = exp * rand::rng().random_range(0.75..1.25);
    chrono::Duration::milliseconds((jittered * 1000.0) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_each_attempt_within_the_jitter() {
        let base = Duration::from_secs(660);
        for n in 1..=7 {
            let expected = 660.0 * 2f64.powi(n as i32 - 1);
            let got = backoff(base, n).num_milliseconds() as f64 / 1000.0;
            assert!(got >= expected * 0.75 && got < expected * 1.25, "attempt {n}: {got}s, expected about {expected}s");
        }
    }
}
