//! Counters exported at `GET /metrics` in the Prometheus text format.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct Metrics {
    pub requests_ingest: AtomicU64,
    pub requests_api: AtomicU64,
    pub requests_other: AtomicU64,
    pub responses_2xx: AtomicU64,
    pub responses_4xx: AtomicU64,
    pub responses_5xx: AtomicU64,
    pub rate_limited: AtomicU64,
    /// Events refused because their site was over `--rate-limit-site-events`.
    pub site_events_refused: AtomicU64,
    pub events_ingested: AtomicU64,
    pub events_duplicate: AtomicU64,
    /// `sdk_blocked` events stored: pages where a blocker stopped the SDK's own files.
    pub sdk_blocked: AtomicU64,
    /// Report scheduler passes completed, and report runs generated.
    pub report_passes: AtomicU64,
    pub report_runs: AtomicU64,
    /// Dashboard passwords checked (argon2), and sign-ins turned away because
    /// every password-check slot was taken.
    pub password_verifications: AtomicU64,
    pub password_checks_refused: AtomicU64,
    commits: AtomicU64,
    commit_jobs: AtomicU64,
    commit_micros: AtomicU64,
    commit_micros_max: AtomicU64,
}

impl Metrics {
    pub fn record_commit(&self, took: Duration, jobs: usize) {
        let micros = took.as_micros() as u64;
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.commit_jobs.fetch_add(jobs as u64, Ordering::Relaxed);
        self.commit_micros.fetch_add(micros, Ordering::Relaxed);
        self.commit_micros_max.fetch_max(micros, Ordering::Relaxed);
    }

    pub fn record_status(&self, status: u16) {
        let counter = match status {
            200..=399 => &self.responses_2xx,
            400..=499 => &self.responses_4xx,
            _ => &self.responses_5xx,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn render(&self, queue_depth: usize) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, f64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        metric(
            "postern_http_requests_total",
            "counter",
            "HTTP requests by class of endpoint.",
            &[
                ("{class=\"ingest\"}", get(&self.requests_ingest) as f64),
                ("{class=\"api\"}", get(&self.requests_api) as f64),
                ("{class=\"other\"}", get(&self.requests_other) as f64),
            ],
        );
        metric(
            "postern_http_responses_total",
            "counter",
            "HTTP responses by status class.",
            &[
                ("{status=\"2xx\"}", get(&self.responses_2xx) as f64),
                ("{status=\"4xx\"}", get(&self.responses_4xx) as f64),
                ("{status=\"5xx\"}", get(&self.responses_5xx) as f64),
            ],
        );
        metric("postern_rate_limited_total", "counter", "Requests refused with 429.", &[("", get(&self.rate_limited) as f64)]);
        metric(
            "postern_site_events_refused_total",
            "counter",
            "Events refused because their site was over its events-a-minute ceiling.",
            &[("", get(&self.site_events_refused) as f64)],
        );
        metric("postern_events_ingested_total", "counter", "Events acknowledged.", &[("", get(&self.events_ingested) as f64)]);
        metric(
            "postern_events_duplicate_total",
            "counter",
            "Events acknowledged again for an already stored event_id.",
            &[("", get(&self.events_duplicate) as f64)],
        );
        metric(
            "postern_sdk_blocked_total",
            "counter",
            "sdk_blocked events stored: pages where a blocker stopped the SDK's own files while the collector answered.",
            &[("", get(&self.sdk_blocked) as f64)],
        );
        metric("postern_ingest_queue_depth", "gauge", "Writes waiting for the writer thread.", &[("", queue_depth as f64)]);
        metric("postern_commits_total", "counter", "Group transactions committed.", &[("", get(&self.commits) as f64)]);
        metric("postern_commit_jobs_total", "counter", "Writes carried by those commits.", &[("", get(&self.commit_jobs) as f64)]);
        metric(
            "postern_commit_seconds_sum",
            "counter",
            "Time spent in group transactions.",
            &[("", get(&self.commit_micros) as f64 / 1e6)],
        );
        metric(
            "postern_commit_seconds_max",
            "gauge",
            "Longest group transaction since start.",
            &[("", get(&self.commit_micros_max) as f64 / 1e6)],
        );
        metric(
            "postern_report_scheduler_passes_total",
            "counter",
            "Completed passes of the report scheduler.",
            &[("", get(&self.report_passes) as f64)],
        );
        metric("postern_report_runs_total", "counter", "Report runs generated (scheduled and sent now).", &[("", get(&self.report_runs) as f64)]);
        metric(
            "postern_password_verifications_total",
            "counter",
            "Dashboard sign-in passwords checked (unknown e-mails included).",
            &[("", get(&self.password_verifications) as f64)],
        );
        metric(
            "postern_password_checks_refused_total",
            "counter",
            "Sign-ins answered 503 because every password-check slot was taken.",
            &[("", get(&self.password_checks_refused) as f64)],
        );
        out
    }
}
