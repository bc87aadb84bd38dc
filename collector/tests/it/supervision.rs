//! Supervised background work: a job that fails is run again after a backoff,
//! `/metrics` counts its failures, and `/readyz` fails once it has been failing
//! longer than its period, until it succeeds again.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::support::*;

#[track_caller]
fn wait_until(what: &str, limit: Duration, app: &TestApp, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}; log:\n{}", app.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_failing_job_is_run_again_after_a_backoff_and_readyz_fails_while_it_stays_down() {
    let mut app = TestApp::spawn();
    let site = id(&app.create_site("jobs.example.com", "UTC"));
    let report = app.post(&format!("/v1/sites/{site}/reports"), &json!({"type": "daily", "recipients": [{"email": "ana@example.com", "role": "admin"}]}));
    report.expect(201);
    let report_id = report.body["id"].as_str().unwrap().to_owned();
    let before = app.metrics();
    for task in ["retention", "alerts", "reports", "delivery"] {
        assert_eq!(sample(&before, &format!("postern_task_up{{task=\"{task}\"}}")), 1.0, "{task}");
    }
    assert_eq!(sample(&before, "postern_task_failures_total{task=\"reports\"}"), 0.0);

    // A stored report configuration that no longer reads (a hand edit, or
    // another version's write) makes every pass of the report scheduler fail;
    // a restart runs the job at once.
    let spec = sql(&app.db, &format!("SELECT spec FROM report_configs WHERE id = '{report_id}'"));
    sql_exec(&app.db, &format!("UPDATE report_configs SET spec = 'not json' WHERE id = '{report_id}'"));
    app.restart();
    let failures = || sample(&app.metrics(), "postern_task_failures_total{task=\"reports\"}");
    wait_until("a failed run of the reports job", Duration::from_secs(30), &app, || failures() >= 1.0);
    let first_failure = Instant::now();
    wait_until("three failed runs of the reports job", Duration::from_secs(30), &app, || failures() >= 3.0);
    let logs = app.logs();
    let retries: Vec<&str> = logs.lines().filter(|l| l.contains("job failed; running it again") && l.contains("job=\"reports\"")).collect();
    assert!(retries.len() >= 3, "{logs}");
    assert!(retries[0].contains("retry_in_s=1") && retries[1].contains("retry_in_s=2") && retries[2].contains("retry_in_s=4"), "the backoff doubles: {retries:#?}");
    assert!(logs.contains(&format!("corrupt stored value: report {report_id} spec")), "the log says why:\n{logs}");
    // Failing for a few seconds only: still ready.
    app.send(app.request(Method::GET, "/readyz")).expect(200);

    // Failing for longer than its 30-second period, the job is down.
    wait_until("readyz failing", Duration::from_secs(60), &app, || app.send(app.request(Method::GET, "/readyz")).status.as_u16() == 503);
    assert!(first_failure.elapsed() >= Duration::from_secs(29), "down {:?} after the first failure, before its period", first_failure.elapsed());
    let a = app.send(app.request(Method::GET, "/readyz"));
    assert_eq!(a.error(), ("UNAVAILABLE".to_owned(), None, "task_down".to_owned()));
    assert!(a.body["error"]["message"].as_str().unwrap().contains("reports has been failing for"), "{}", a.text);
    let down = app.metrics();
    assert_eq!(sample(&down, "postern_task_up{task=\"reports\"}"), 0.0);
    assert_eq!(sample(&down, "postern_task_up{task=\"delivery\"}"), 1.0);
    assert_eq!(sample(&down, "postern_task_last_success_timestamp_seconds{task=\"reports\"}"), 0.0, "no run succeeded since the restart");

    // Repaired, the next run (at most the 15-second backoff ceiling away) succeeds.
    sql_exec(&app.db, &format!("UPDATE report_configs SET spec = '{}' WHERE id = '{report_id}'", spec.replace('\'', "''")));
    wait_until("readyz ready again", Duration::from_secs(30), &app, || app.send(app.request(Method::GET, "/readyz")).status.as_u16() == 200);
    let up = app.metrics();
    assert_eq!(sample(&up, "postern_task_up{task=\"reports\"}"), 1.0);
    assert!(sample(&up, "postern_task_last_success_timestamp_seconds{task=\"reports\"}") > 0.0);
    app.get(&format!("/v1/sites/{site}/reports/{report_id}")).expect(200);
}
