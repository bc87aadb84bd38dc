//! Errors: the spec's error body everywhere, unknown paths, wrong methods, body size limits and garbage input (never a 5xx).

use crate::support::*;
use reqwest::Method;
use serde_json::{json, Value};

/// Asserts the full error contract: JSON content type, the spec's shape, an
/// upper-case code, and nothing else at the top level.
#[track_caller]
fn assert_error_shape(a: &Answer) -> (String, Option<String>, String) {
    assert!(
        a.header("content-type").is_some_and(|c| c.starts_with("application/json")),
        "an error must be JSON: {} {:?}",
        a.status,
        a.headers
    );
    let (code, field, reason) = a.error();
    assert!(!code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'), "code must be an upper-case identifier: {code}");
    assert!(!reason.is_empty(), "{}", a.text);
    let top = a.body.as_object().unwrap();
    assert_eq!(top.len(), 1, "the error body has exactly one key, error: {}", a.text);
    if let Some(f) = &field {
        assert!(!f.is_empty(), "{}", a.text);
    }
    (code, field, reason)
}

/// A deterministic byte generator (xorshift), so failures are reproducible.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() & 0xff) as u8).collect()
    }
}

#[test]
fn error_bodies_have_the_spec_shape_for_every_status() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let answers = vec![
        (400, app.post("/v1/sites", &json!({"domain": "x.com"}))),
        (401, app.send(app.request(Method::GET, "/v1/sites"))),
        (401, app.get_as("pst_nope", "/v1/sites")),
        (403, app.get_as(&app.admin(&["create-key", "--account", "acme", "--scopes", "ingest"]), "/v1/sites")),
        (404, app.get(&format!("/v1/sites/{}", uuid::Uuid::new_v4()))),
        (404, app.get("/v1/nothing-here")),
        (405, app.send(app.request(Method::PUT, "/v1/sites").bearer_auth(&app.key))),
        (413, app.send(app.request(Method::POST, "/v1/events/track").bearer_auth(&app.key).body(vec![b' '; 20_000]))),
        (400, app.dashboard(&sid, "?days=abc")),
    ];
    for (status, a) in &answers {
        assert_eq!(a.status.as_u16(), *status, "{}", a.text);
        assert_error_shape(a);
    }
}

#[test]
fn unknown_paths_are_404_not_found() {
    let app = TestApp::spawn();
    for path in ["/v1/nope", "/v1/sites/x/y/z", "/v1/", "/v1", "/v2/sites", "/v1/analytics/sites", "/nope"] {
        let a = app.get(path);
        assert_eq!(a.status.as_u16(), 404, "{path}: {}", a.text);
        let (code, _, reason) = assert_error_shape(&a);
        assert_eq!(code, "NOT_FOUND", "{path}");
        assert_eq!(reason, "not_found", "{path}");
    }
}

#[test]
fn unknown_api_paths_without_a_key_are_401_not_404() {
    // Unauthenticated callers learn nothing about which paths exist.
    let app = TestApp::spawn();
    let a = app.send(app.request(Method::GET, "/v1/secret-admin"));
    a.expect(401);
    assert_eq!(assert_error_shape(&a).0, "UNAUTHENTICATED");
}

#[test]
fn wrong_methods_are_405() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let cases = [
        (Method::PUT, "/v1/sites".to_owned()),
        (Method::DELETE, "/v1/sites".to_owned()),
        (Method::PATCH, "/v1/sites".to_owned()),
        (Method::POST, format!("/v1/sites/{sid}")),
        (Method::PUT, format!("/v1/sites/{sid}")),
        (Method::PUT, "/v1/keys".to_owned()),
        (Method::DELETE, "/v1/keys".to_owned()),
        (Method::POST, format!("/v1/analytics/sites/{sid}/dashboard")),
        (Method::DELETE, format!("/v1/events/sites/{sid}")),
        (Method::GET, "/v1/events/track".to_owned()),
        (Method::POST, "/healthz".to_owned()),
    ];
    for (method, path) in cases {
        let a = app.send(app.request(method.clone(), &path).bearer_auth(&app.key));
        assert_eq!(a.status.as_u16(), 405, "{method} {path}: {}", a.text);
        assert_error_shape(&a);
    }
    // Nothing was changed by them.
    let got = app.get(&format!("/v1/sites/{sid}"));
    got.expect(200);
    assert_eq!(got.body, site);
}

/// A JSON track body of exactly `len` bytes (an otherwise valid event padded by an unknown field).
fn padded_event(sid: &str, len: usize) -> String {
    let base = event(sid, "padded-session", "adblock_detected", json!({"pad": ""})).to_string();
    let pad = len.checked_sub(base.len()).expect("len too small");
    let body = base.replace("\"pad\":\"\"", &format!("\"pad\":\"{}\"", "x".repeat(pad)));
    assert_eq!(body.len(), len);
    body
}

#[test]
fn track_bodies_over_16_kib_are_413() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);

    // Exactly 16 KiB is read (and refused for its unknown field, not its size).
    let at_limit = app.send(
        app.request(Method::POST, "/v1/events/track")
            .bearer_auth(&app.key)
            .header("Content-Type", "application/json")
            .body(padded_event(&sid, 16 * 1024)),
    );
    at_limit.expect(400);
    let (_, field, reason) = assert_error_shape(&at_limit);
    assert_eq!((field.as_deref(), reason.as_str()), (Some("pad"), "unknown_field"));

    for len in [16 * 1024 + 1, 17_000, 200_000] {
        let a = app.send(
            app.request(Method::POST, "/v1/events/track")
                .bearer_auth(&app.key)
                .header("Content-Type", "application/json")
                .body(padded_event(&sid, len)),
        );
        assert_eq!(a.status.as_u16(), 413, "{len} bytes: {}", a.text);
        let (code, _, _) = assert_error_shape(&a);
        assert_eq!(code, "PAYLOAD_TOO_LARGE");
    }

    // A browser (no key) and the neutral alias are limited alike.
    let big = json!({"session_id": "x".repeat(20_000)});
    let a = app.track_from_browser("https://example.com", &big);
    a.expect(413);
    assert_eq!(assert_error_shape(&a).0, "PAYLOAD_TOO_LARGE");
    let a = app.post("/v1/e", &big);
    a.expect(413);
    assert_eq!(assert_error_shape(&a).0, "PAYLOAD_TOO_LARGE");

    assert_eq!(app.events(&sid, "").body["total"], 0, "nothing was stored");
}

/// POST /v1/events/track with a body of unknown length: a reader body is sent chunked,
/// without Content-Length.
fn track_chunked(app: &TestApp, body: Vec<u8>) -> Answer {
    let reader = reqwest::blocking::Body::new(std::io::Cursor::new(body));
    app.send(
        app.request(Method::POST, "/v1/events/track")
            .bearer_auth(&app.key)
            .header("Content-Type", "application/json")
            .body(reader),
    )
}

#[test]
fn chunked_track_bodies_over_16_kib_are_413_too() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let a = track_chunked(&app, padded_event(&id(&site), 40_000).into_bytes());
    a.expect(413);
    assert_eq!(assert_error_shape(&a).0, "PAYLOAD_TOO_LARGE");
}

#[test]
fn a_small_chunked_track_body_is_accepted() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let body = event(&id(&site), "chunked-session", "adblock_detected", json!({})).to_string().into_bytes();
    track_chunked(&app, body).expect(201);
}

#[test]
fn batch_bodies_over_1_mib_are_413() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let one = event(&id(&site), "batch-session", "adblock_detected", json!({"metadata": {"note": "y".repeat(1500)}}));
    let many: Vec<Value> = (0..700).map(|_| one.clone()).collect();
    let body = serde_json::to_vec(&many).unwrap();
    assert!(body.len() > 1024 * 1024);
    let a = app.send(
        app.request(Method::POST, "/v1/events/batch")
            .bearer_auth(&app.key)
            .header("Content-Type", "application/json")
            .body(body),
    );
    a.expect(413);
    assert_eq!(assert_error_shape(&a).0, "PAYLOAD_TOO_LARGE");
}

struct Case {
    method: Method,
    path: String,
    body: Option<Vec<u8>>,
    status: u16,
    /// The expected `details.field`, when the case pins it.
    field: Option<&'static str>,
}

fn case(method: Method, path: impl Into<String>, body: Option<Vec<u8>>, status: u16, field: Option<&'static str>) -> Case {
    Case { method, path: path.into(), body, status, field }
}

#[test]
fn garbage_input_is_always_a_4xx_with_the_error_shape_never_a_5xx() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
    let track = "/v1/events/track";
    let valid = |extra: Value| event(&sid, "fuzz-session-1", "adblock_detected", extra);
    let json_bytes = |v: Value| Some(v.to_string().into_bytes());
    let text = |s: &str| Some(s.as_bytes().to_vec());

    let nested_arrays = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let nested_objects = format!("{}1{}", "{\"a\":".repeat(2000), "}".repeat(2000));
    let nested_wall = format!(
        "{{\"wall\":{}1{}}}",
        "{\"a\":".repeat(300),
        "}".repeat(300)
    );
    let dashboard = format!("/v1/analytics/sites/{sid}/dashboard");
    let conversions = format!("/v1/analytics/sites/{sid}/conversions");
    let ab = format!("/v1/analytics/sites/{sid}/ab-testing");
    let events = format!("/v1/events/sites/{sid}");

    let cases = vec![
        // Ingestion bodies.
        case(Method::POST, track, Some(noise.bytes(200)), 400, Some("body")),
        case(Method::POST, track, Some(noise.bytes(5000)), 400, Some("body")),
        case(Method::POST, track, text(&nested_arrays), 400, Some("body")),
        case(Method::POST, track, text(&nested_objects), 400, Some("body")),
        case(Method::POST, track, text("\0\0\0\0"), 400, Some("body")),
        case(Method::POST, track, text("null"), 400, Some("body")),
        case(Method::POST, track, text("[]"), 400, Some("body")),
        case(Method::POST, track, text("\"adblock_detected\""), 400, Some("body")),
        case(Method::POST, track, text("<event><site_id/></event>"), 400, Some("body")),
        case(Method::POST, track, text("{\"session_id\": 1e999999}"), 400, Some("body")),
        case(Method::POST, track, text("{\"session_id\": \"\\ud800abcdefgh\"}"), 400, None),
        case(Method::POST, track, json_bytes(valid(json!({"session_id": 123456789012345678901234567890.0_f64}))), 400, Some("session_id")),
        case(Method::POST, track, json_bytes(valid(json!({"session_id": "séssion-ünïcode-😀"}))), 400, Some("session_id")),
        case(Method::POST, track, json_bytes(valid(json!({"session_id": "x".repeat(129)}))), 400, Some("session_id")),
        case(Method::POST, track, json_bytes(valid(json!({"event_type": "💥"}))), 400, Some("event_type")),
        case(Method::POST, track, json_bytes(valid(json!({"site_id": "'; DROP TABLE sites; --"}))), 400, Some("site_id")),
        case(Method::POST, track, json_bytes(valid(json!({"page_url": "javascript:alert(1)"}))), 400, Some("page_url")),
        case(Method::POST, track, json_bytes(valid(json!({"page_url": "ftp://example.com/x"}))), 400, Some("page_url")),
        case(Method::POST, track, json_bytes(valid(json!({"page_url": format!("https://example.com/{}", "p".repeat(3000))}))), 400, Some("page_url")),
        case(Method::POST, track, json_bytes(valid(json!({"metadata": [1, 2, 3]}))), 400, Some("metadata")),
        case(Method::POST, track, json_bytes(valid(json!({"metadata": {"blocker_type": 42}}))), 400, Some("metadata.blocker_type")),
        case(Method::POST, track, json_bytes(valid(json!({"metadata": {"device_type": "tv"}}))), 400, Some("metadata.device_type")),
        case(Method::POST, track, json_bytes(valid(json!({"metadata": {"blob": "z".repeat(3000)}}))), 400, Some("metadata")),
        case(Method::POST, track, json_bytes(valid(json!({"timestamp": "yesterday"}))), 400, Some("timestamp")),
        case(Method::POST, track, json_bytes(valid(json!({"timestamp": "1970-01-01T00:00:00Z"}))), 400, Some("timestamp")),
        case(Method::POST, track, json_bytes(valid(json!({"event_id": "not-a-uuid"}))), 400, Some("event_id")),
        case(Method::POST, track, json_bytes(valid(json!({"site_id": uuid::Uuid::new_v4().to_string()}))), 404, Some("site_id")),
        case(Method::POST, "/v1/events/batch", text("{}"), 400, Some("body")),
        case(Method::POST, "/v1/events/batch", text("[]"), 400, Some("body")),
        case(Method::POST, "/v1/events/batch", Some(noise.bytes(300)), 400, Some("body")),
        // Query strings.
        case(Method::GET, format!("{dashboard}?days=-1"), None, 400, Some("days")),
        case(Method::GET, format!("{dashboard}?days=abc"), None, 400, Some("days")),
        case(Method::GET, format!("{dashboard}?days=0"), None, 400, Some("days")),
        case(Method::GET, format!("{dashboard}?days=731"), None, 400, Some("days")),
        case(Method::GET, format!("{dashboard}?days=1.5"), None, 400, Some("days")),
        case(Method::GET, format!("{dashboard}?days=99999999999999999999999999"), None, 400, Some("days")),
        case(Method::GET, format!("{dashboard}?days=%F0%9F%92%A5"), None, 400, Some("days")),
        case(Method::GET, format!("{dashboard}?device=tv"), None, 400, Some("device")),
        case(Method::GET, format!("{dashboard}?device=%00"), None, 400, Some("device")),
        case(Method::GET, format!("{conversions}?granularity=minute"), None, 400, Some("granularity")),
        case(Method::GET, format!("{conversions}?granularity=hour&days=60"), None, 400, Some("granularity")),
        case(Method::GET, format!("{conversions}?days=-30"), None, 400, Some("days")),
        case(Method::GET, format!("{ab}?days=abc"), None, 400, Some("days")),
        case(Method::GET, format!("{events}?limit=0"), None, 400, Some("limit")),
        case(Method::GET, format!("{events}?limit=1001"), None, 400, Some("limit")),
        case(Method::GET, format!("{events}?limit=%FF%FE"), None, 400, Some("limit")),
        case(Method::GET, format!("{events}?offset=-5"), None, 400, Some("offset")),
        case(Method::GET, format!("{events}?offset=1e3"), None, 400, Some("offset")),
        case(Method::GET, format!("{events}?event_type=nope"), None, 400, Some("event_type")),
        case(Method::GET, format!("{events}?event_type="), None, 400, Some("event_type")),
        // Ids in paths.
        case(Method::GET, "/v1/sites/%00", None, 404, None),
        case(Method::GET, "/v1/sites/..%2F..%2Fetc%2Fpasswd", None, 404, None),
        case(Method::GET, format!("/v1/sites/{}", "9".repeat(5000)), None, 404, None),
        case(Method::GET, "/v1/analytics/sites/%F0%9F%92%A5/dashboard", None, 404, None),
        // Site and key bodies.
        case(Method::POST, "/v1/sites", Some(noise.bytes(500)), 400, Some("body")),
        case(Method::POST, "/v1/sites", text("{\"name\": \"x\", \"domain\": \"example.com\", \"revenue_per_1000_pageviews\": 1e400}"), 400, Some("body")),
        case(Method::POST, "/v1/sites", json_bytes(json!({"name": "\u{0}\u{7f}", "domain": "exämple.com"})), 400, Some("domain")),
        case(Method::POST, "/v1/sites", json_bytes(json!({"name": ["x"], "domain": {"host": "x"}})), 400, Some("name")),
        case(Method::PATCH, format!("/v1/sites/{sid}"), text(&nested_wall), 400, Some("body")),
        case(Method::PATCH, format!("/v1/sites/{sid}"), json_bytes(json!({"timezone": "😀/😀"})), 400, Some("timezone")),
        case(Method::POST, "/v1/keys", Some(noise.bytes(64)), 400, Some("body")),
        case(Method::POST, "/v1/keys", json_bytes(json!({"scopes": [null]})), 400, Some("scopes")),
    ];
    assert!(cases.len() >= 40);

    for c in &cases {
        let mut req = app.request(c.method.clone(), &c.path).bearer_auth(&app.key);
        if let Some(body) = &c.body {
            req = req.header("Content-Type", "application/json").body(body.clone());
        }
        let a = app.send(req);
        let label = format!("{} {} ({} body bytes)", c.method, &c.path[..c.path.len().min(120)], c.body.as_ref().map_or(0, Vec::len));
        assert!(!a.status.is_server_error(), "{label}: a server error for bad input: {} {}", a.status, a.text);
        assert!(a.status.is_client_error(), "{label}: expected a 4xx, got {} {}", a.status, a.text);
        assert_eq!(a.status.as_u16(), c.status, "{label}: {}", a.text);
        let (_, field, _) = assert_error_shape(&a);
        if let Some(f) = c.field {
            assert_eq!(field.as_deref(), Some(f), "{label}: {}", a.text);
        }
    }

    // None of it was stored, and the site is unchanged.
    assert_eq!(app.events(&sid, "").body["total"], 0);
    assert_eq!(app.get(&format!("/v1/sites/{sid}")).body, site);
    assert_eq!(app.get("/v1/sites").body["sites"].as_array().unwrap().len(), 1);
    // And the server is still healthy.
    app.get("/v1/sites").expect(200);
    app.send(app.request(Method::GET, "/healthz")).expect(200);
    assert!(!app.logs().contains("internal error"), "the server logged an internal error:\n{}", app.logs());
}
