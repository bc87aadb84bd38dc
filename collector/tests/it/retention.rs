//! Retention: old raw events and rollups, and deleted sites' data, are removed by the job.

use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::json;

use crate::support::*;

#[test]
fn old_events_and_rollups_are_deleted_and_recent_ones_kept() {
    let mut app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "UTC"));
    let old = (Utc::now() - chrono::Duration::days(5)).to_rfc3339();
    for i in 0..7 {
        app.track(&event(&site, &format!("old-session-{i}"), "pageview", json!({"timestamp": old}))).expect(201);
    }
    for i in 0..3 {
        app.track(&event(&site, &format!("new-session-{i}"), "pageview", json!({}))).expect(201);
    }
    assert_eq!(app.events(&site, "?limit=100").body["total"], 10);
    assert_eq!(app.dashboard(&site, "?days=30").body["metrics"]["sessions"], 10);

    // The job runs at start-up: restart with shorter retention periods.
    app.restart_with(&["--rate-limit-api", "0", "--raw-retention-days", "2", "--rollup-retention-days", "3"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let total = app.events(&site, "?limit=100").body["total"].as_u64().unwrap();
        let sessions = app.dashboard(&site, "?days=30").body["metrics"]["sessions"].as_u64().unwrap();
        if (total, sessions) == (3, 3) {
            break;
        }
        assert!(Instant::now() < deadline, "retention did not run: {total} events, {sessions} sessions left");
        std::thread::sleep(Duration::from_millis(100));
    }
    let listed = app.events(&site, "?limit=100").body;
    for e in listed["events"].as_array().unwrap() {
        assert!(e["session_id"].as_str().unwrap().starts_with("new-session-"), "{e}");
    }
    // Back-filling beyond the raw retention period is refused.
    let too_old = (Utc::now() - chrono::Duration::days(3)).to_rfc3339();
    let a = app.track(&event(&site, "late-session", "pageview", json!({"timestamp": too_old})));
    a.expect(400);
    assert_eq!(a.error(), ("INVALID_REQUEST".into(), Some("timestamp".into()), "out_of_range".into()));
}

#[test]
fn a_deleted_sites_data_is_purged() {
    let mut app = TestApp::spawn();
    let keep = id(&app.create_site("keep.example.com", "UTC"));
    let gone = id(&app.create_site("gone.example.com", "UTC"));
    for i in 0..4 {
        app.track(&event(&keep, &format!("keep-session-{i}"), "pageview", json!({}))).expect(201);
        app.track(&event(&gone, &format!("gone-session-{i}"), "pageview", json!({}))).expect(201);
    }
    app.delete(&format!("/v1/sites/{gone}")).expect(204);
    app.restart();
    let count = |query: &str| -> i64 { sql(&app.db, query).parse().unwrap_or(-1) };
    let deadline = Instant::now() + Duration::from_secs(20);
    while count("SELECT count(*) FROM sites") != 1 {
        assert!(Instant::now() < deadline, "the deleted site was not purged");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(count("SELECT count(*) FROM events"), 4);
    assert_eq!(count("SELECT count(*) FROM sessions"), 4);
    assert_eq!(count("SELECT sum(sessions) FROM rollup_hourly"), 4);
    assert_eq!(app.dashboard(&keep, "?days=1").body["metrics"]["sessions"], 4);
}
