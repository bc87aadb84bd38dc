//! Operations endpoints: /healthz, /readyz, Prometheus /metrics and /v1/openapi.json, all without a key.

use crate::support::*;
use reqwest::Method;
use serde_json::{json, Value};

const RATE_HEADERS: [&str; 3] = ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"];

fn get_plain(app: &TestApp, path: &str) -> Answer {
    app.send(app.request(Method::GET, path))
}

fn ingested(app: &TestApp) -> f64 {
    sample(&app.metrics(), "postern_events_ingested_total")
}

#[test]
fn healthz_and_readyz_answer_200_without_a_key() {
    let app = TestApp::spawn();
    for path in ["/healthz", "/readyz"] {
        let a = get_plain(&app, path);
        assert_eq!(a.status.as_u16(), 200, "{path}: {}", a.text);
        assert!(a.body.is_object(), "{path} answers JSON: {}", a.text);
        assert!(a.body["status"].is_string(), "{path}: {}", a.text);
    }
}

#[test]
fn metrics_is_prometheus_text() {
    let app = TestApp::spawn();
    let a = get_plain(&app, "/metrics");
    a.expect(200);
    let ct = a.header("content-type").expect("content-type");
    assert!(ct.starts_with("text/plain"), "{ct}");
    assert!(a.text.contains("# TYPE postern_events_ingested_total counter"), "{}", a.text);
    assert!(a.text.contains("# HELP postern_events_ingested_total "), "{}", a.text);
    // Every non-comment line is `name{labels} value`.
    for line in a.text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut parts = line.rsplitn(2, ' ');
        let value = parts.next().unwrap();
        let name = parts.next().unwrap_or_else(|| panic!("malformed sample line {line:?}"));
        assert!(value.parse::<f64>().is_ok(), "sample value in {line:?}");
        assert!(name.starts_with("postern_"), "{line:?}");
        assert!(
            name.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) && !name.contains(char::is_whitespace),
            "{line:?}"
        );
    }
    assert_eq!(sample(&a.text, "postern_events_ingested_total"), 0.0, "a fresh server has ingested nothing");
}

#[test]
fn events_ingested_total_counts_acknowledged_events_only() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let start = ingested(&app);

    app.track(&event(&sid, "metrics-session-1", "adblock_detected", json!({}))).expect(201);
    let after_one = ingested(&app);
    assert_eq!(after_one, start + 1.0, "one tracked event");

    app.track_from_browser("https://example.com", &event(&sid, "metrics-session-2", "adblock_detected", json!({})))
        .expect(201);
    assert_eq!(ingested(&app), start + 2.0, "a browser event counts too");

    // Refused events are not counted.
    app.track(&event(&sid, "bad", "adblock_detected", json!({}))).expect(400);
    app.track(&event(&uuid::Uuid::new_v4().to_string(), "metrics-session-3", "adblock_detected", json!({}))).expect(404);
    assert_eq!(ingested(&app), start + 2.0, "refused events are not counted");

    let batch = app.batch(&json!([
        event(&sid, "metrics-session-4", "adblock_detected", json!({})),
        event(&sid, "metrics-session-4", "wall_displayed", json!({})),
        event(&sid, "x", "adblock_detected", json!({})),
    ]));
    batch.expect(201);
    let accepted = batch.body["accepted"].as_f64().expect("accepted");
    assert_eq!(ingested(&app), start + 2.0 + accepted, "batched events count once each: {}", batch.text);
    assert!(accepted >= 1.0, "{}", batch.text);
}

#[test]
fn ops_endpoints_carry_no_rate_limit_headers_while_the_api_does() {
    // Default limits (enabled), unlike TestApp::spawn.
    let app = TestApp::spawn_with(&[]);
    let api = app.get("/v1/sites");
    api.expect(200);
    for h in RATE_HEADERS {
        assert!(api.header(h).is_some(), "the API carries {h}: {:?}", api.headers);
    }
    for path in ["/healthz", "/readyz", "/metrics"] {
        let a = get_plain(&app, path);
        assert_eq!(a.status.as_u16(), 200, "{path}");
        for h in RATE_HEADERS {
            assert!(a.header(h).is_none(), "{path} must carry no {h}: {:?}", a.headers);
        }
        assert!(a.header("retry-after").is_none(), "{path}");
    }
}

#[test]
fn ops_endpoints_are_never_rate_limited() {
    let app = TestApp::spawn_with(&["--rate-limit-api", "3", "--rate-limit-ingest", "3"]);
    for i in 0..20 {
        for path in ["/healthz", "/readyz", "/metrics"] {
            let a = get_plain(&app, path);
            assert_eq!(a.status.as_u16(), 200, "{path} request {i}: {}", a.text);
        }
    }
}

#[test]
fn ops_endpoints_need_no_key_even_when_one_is_sent() {
    let app = TestApp::spawn();
    for path in ["/healthz", "/readyz", "/metrics", "/v1/openapi.json"] {
        let with_key = app.get(path);
        assert_eq!(with_key.status.as_u16(), 200, "{path} with a key: {}", with_key.text);
        let without = get_plain(&app, path);
        assert_eq!(without.status.as_u16(), 200, "{path} without a key: {}", without.text);
    }
}

#[test]
fn openapi_needs_no_key_and_is_json() {
    let app = TestApp::spawn();
    let a = get_plain(&app, "/v1/openapi.json");
    a.expect(200);
    let ct = a.header("content-type").expect("content-type");
    assert!(ct.starts_with("application/json"), "{ct}");
    let doc: Value = serde_json::from_str(&a.text).expect("the OpenAPI document parses as JSON");
    let version = doc["openapi"].as_str().expect("openapi version field");
    assert!(version.starts_with("3.1"), "OpenAPI 3.1 expected, got {version}");
    assert!(doc["info"]["title"].is_string(), "info.title");
    let paths = doc["paths"].as_object().expect("paths object");
    for p in ["/v1/sites", "/v1/events/track"] {
        assert!(paths.contains_key(p), "the document describes {p}");
    }
}

#[test]
fn ops_endpoints_answer_only_get() {
    let app = TestApp::spawn();
    for path in ["/healthz", "/readyz", "/metrics"] {
        let a = app.send(app.request(Method::POST, path).body("{}"));
        assert_eq!(a.status.as_u16(), 405, "POST {path}: {}", a.text);
        a.error();
    }
}

#[test]
fn head_is_answered_wherever_get_is() {
    let app = TestApp::spawn();
    let a = app.send(app.request(reqwest::Method::HEAD, "/v1/sites").bearer_auth(&app.key));
    assert_eq!(a.status.as_u16(), 200);
    assert!(a.text.is_empty(), "HEAD must have no body, got {}", a.text);
    let a = app.send(app.request(reqwest::Method::HEAD, "/healthz"));
    assert_eq!(a.status.as_u16(), 200);
}

#[test]
fn accepted_events_are_not_logged_at_info_but_refused_ones_and_other_requests_are() {
    let app = TestApp::spawn();
    let site = app.create_site("news.example.com", "UTC");
    track_ok(&app, event(&id(&site), "s-logged", "pageview", json!({})));
    app.track(&event(&id(&site), "s-logged", "no_such_type", json!({}))).expect(400);
    get_plain(&app, "/healthz").expect(200);
    let logs = app.logs();
    let lines = |path: &str, status: u16| {
        logs.lines().filter(|l| l.contains(&format!("path={path} ")) && l.contains(&format!("status={status} "))).count()
    };
    assert_eq!(lines("/v1/events/track", 201), 0, "an accepted event is logged at debug only:\n{logs}");
    assert_eq!(lines("/v1/events/track", 400), 1, "a refused event is logged:\n{logs}");
    assert_eq!(lines("/healthz", 200), 1, "other requests are logged:\n{logs}");
    assert_eq!(ingested(&app), 1.0, "the metrics still count the accepted event");
}
