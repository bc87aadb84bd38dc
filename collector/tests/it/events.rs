//! Event ingestion (track, /v1/e, batch), its validation, and the list of stored events.

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::*;

const DOMAIN: &str = "news.example.com";
const ORIGIN: &str = "https://news.example.com";

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn instant(v: &Value) -> DateTime<Utc> {
    let s = v.as_str().unwrap_or_else(|| panic!("a timestamp string, got {v}"));
    assert!(s.ends_with('Z'), "ISO 8601 UTC with Z: {s}");
    DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}")).with_timezone(&Utc)
}

fn uuid_of(v: &Value) -> Uuid {
    Uuid::parse_str(v.as_str().unwrap_or_else(|| panic!("an id string, got {v}")))
        .unwrap_or_else(|e| panic!("{v}: {e}"))
}

#[track_caller]
fn expect_error(a: &Answer, status: u16, code: &str, field: &str, reason: &str) {
    a.expect(status);
    let (c, f, r) = a.error();
    assert_eq!((c.as_str(), f.as_deref(), r.as_str()), (code, Some(field), reason), "{}", a.text);
}

/// POST a raw body to `path` with the app's key.
fn post_raw(app: &TestApp, path: &str, body: impl Into<reqwest::blocking::Body>) -> Answer {
    app.send(
        app.request(reqwest::Method::POST, path)
            .bearer_auth(&app.key)
            .header("Content-Type", "application/json")
            .body(body),
    )
}

fn list(app: &TestApp, site: &str, query: &str) -> Value {
    let a = app.events(site, query);
    a.expect(200);
    a.body
}

fn session_ids(page: &Value) -> Vec<String> {
    page["events"].as_array().unwrap().iter().map(|e| e["session_id"].as_str().unwrap().to_owned()).collect()
}

// ---------------------------------------------------------------- track

#[test]
fn track_answers_201_with_a_uuid_v7_and_received_at() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let before = Utc::now() - Duration::seconds(1);
    let a = app.track(&event(
        &site,
        "track-session-1",
        "adblock_detected",
        json!({"metadata": {"blocker_type": "extension"}}),
    ));
    let after = Utc::now() + Duration::seconds(1);
    a.expect(201);
    let mut keys: Vec<&String> = a.body.as_object().expect("object").keys().collect();
    keys.sort();
    assert_eq!(keys, ["id", "received_at"], "{}", a.text);
    let id1 = uuid_of(&a.body["id"]);
    assert_eq!(id1.get_version_num(), 7, "a UUID v7: {id1}");
    let received = instant(&a.body["received_at"]);
    assert!(received >= before && received <= after, "received_at {received} not within the request");

    // A second event gets a distinct, later v7 id.
    let b = track_ok(&app, event(&site, "track-session-1", "wall_displayed", json!({})));
    let id2 = uuid_of(&b["id"]);
    assert_eq!(id2.get_version_num(), 7);
    assert_ne!(id1, id2);
    assert!(id2 > id1, "v7 ids grow with time: {id1} then {id2}");
}

/// A client may close its side of the connection once it has sent its event
/// (a half-close, as some beacons and proxies do): the event is still stored
/// and answered.
#[test]
fn a_client_that_half_closes_after_sending_still_gets_its_answer() {
    use std::io::{Read, Write};
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let body = event(&site, "half-closed-session", "pageview", json!({})).to_string();
    let mut stream = std::net::TcpStream::connect(app.base.trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "POST /v1/events/track HTTP/1.1\r\nHost: collector\r\nOrigin: {ORIGIN}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201 "), "{answer}");
    let stored = list(&app, &site, "");
    assert_eq!(session_ids(&stored), ["half-closed-session"], "{stored}");
}

#[test]
fn the_v1_e_alias_ingests_like_track() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));

    // With the key.
    let a = app.post("/v1/e", &event(&site, "alias-session-1", "pageview", json!({})));
    a.expect(201);
    assert_eq!(uuid_of(&a.body["id"]).get_version_num(), 7);
    instant(&a.body["received_at"]);
    // From a browser: no key, text/plain, an Origin on the site's domain.
    let b = app.send(
        app.request(reqwest::Method::POST, "/v1/e")
            .header("Origin", ORIGIN)
            .header("Content-Type", "text/plain")
            .body(event(&site, "alias-session-2", "adblock_detected", json!({})).to_string()),
    );
    b.expect(201);
    assert_eq!(uuid_of(&b.body["id"]).get_version_num(), 7);
    // And the track path from a browser.
    let c = app.track_from_browser(ORIGIN, &event(&site, "alias-session-3", "wall_displayed", json!({})));
    c.expect(201);
    // A subdomain of the site's domain is the site too.
    let d =
        app.track_from_browser("https://www.news.example.com", &event(&site, "alias-session-4", "pageview", json!({})));
    d.expect(201);

    let page = list(&app, &site, "");
    assert_eq!(page["total"], 4);
    assert_eq!(session_ids(&page), ["alias-session-4", "alias-session-3", "alias-session-2", "alias-session-1"]);
    let ids: Vec<&Value> = page["events"].as_array().unwrap().iter().map(|e| &e["id"]).collect();
    assert_eq!(ids, [&d.body["id"], &c.body["id"], &b.body["id"], &a.body["id"]]);
    let m = app.dashboard(&site, "?days=2").body["metrics"].clone();
    assert_eq!(m["sessions"], 4, "{m}");
    assert_eq!(m["adblock_detected"], 1, "{m}");

    // Validation is the same on the alias.
    let bad =
        app.post("/v1/e", &json!({"site_id": site, "event_type": "pageview", "page_url": "https://news.example.com/"}));
    expect_error(&bad, 400, "INVALID_REQUEST", "session_id", "required");
    // A browser of another origin is not the site.
    let foreign =
        app.track_from_browser("https://evil.example.net", &event(&site, "alias-session-5", "pageview", json!({})));
    foreign.expect(401);
    assert_eq!(foreign.error().0, "UNAUTHENTICATED");
    assert_eq!(list(&app, &site, "")["total"], 4);
}

#[test]
fn only_keyed_clients_may_back_date_and_only_within_90_days() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let now = Utc::now();

    // Without a key the timestamp is refused, on both ingestion paths.
    let body = event(&site, "browser-backdate", "pageview", json!({"timestamp": ts(now - Duration::hours(1))}));
    let a = app.track_from_browser(ORIGIN, &body);
    a.expect(400);
    let (code, field, _) = a.error();
    assert_eq!((code.as_str(), field.as_deref()), ("INVALID_REQUEST", Some("timestamp")), "{}", a.text);
    let a = app.send(
        app.request(reqwest::Method::POST, "/v1/e")
            .header("Origin", ORIGIN)
            .header("Content-Type", "text/plain")
            .body(body.to_string()),
    );
    a.expect(400);
    assert_eq!(a.error().1.as_deref(), Some("timestamp"));

    // With the key: 89 days back and 2 minutes ahead are fine.
    let old = now - Duration::days(89);
    let ok_old = track_ok(&app, event(&site, "keyed-backdate1", "pageview", json!({"timestamp": ts(old)})));
    let soon = now + Duration::minutes(2);
    track_ok(&app, event(&site, "keyed-backdate2", "pageview", json!({"timestamp": ts(soon)})));
    // An explicit offset is accepted and normalised.
    let with_offset =
        (now - Duration::hours(3)).with_timezone(&chrono::FixedOffset::east_opt(5 * 3600 + 1800).unwrap());
    track_ok(
        &app,
        event(
            &site,
            "keyed-backdate3",
            "pageview",
            json!({"timestamp": with_offset.to_rfc3339_opts(SecondsFormat::Secs, false)}),
        ),
    );

    // 91 days back, or an hour ahead: out of range.
    let a = app.track(&event(&site, "keyed-backdate4", "pageview", json!({"timestamp": ts(now - Duration::days(91))})));
    expect_error(&a, 400, "INVALID_REQUEST", "timestamp", "out_of_range");
    let a = app.track(&event(&site, "keyed-backdate5", "pageview", json!({"timestamp": ts(now + Duration::hours(1))})));
    expect_error(&a, 400, "INVALID_REQUEST", "timestamp", "out_of_range");
    // Not a date-time.
    for bad in ["yesterday", "2026-13-45T00:00:00Z", "1700000000"] {
        let a = app.track(&event(&site, "keyed-backdate6", "pageview", json!({"timestamp": bad})));
        expect_error(&a, 400, "INVALID_REQUEST", "timestamp", "invalid");
    }

    let page = list(&app, &site, "");
    assert_eq!(page["total"], 3, "only the three accepted events: {page}");
    let stored =
        page["events"].as_array().unwrap().iter().find(|e| e["id"] == ok_old["id"]).expect("the back-dated event");
    assert_eq!(instant(&stored["timestamp"]).timestamp(), old.timestamp(), "{stored}");
    let stored3 = page["events"].as_array().unwrap().iter().find(|e| e["session_id"] == "keyed-backdate3").unwrap();
    assert_eq!(instant(&stored3["timestamp"]).timestamp(), with_offset.timestamp(), "{stored3}");
}

#[test]
fn a_track_body_over_16_kib_is_413() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let mut body = event(&site, "big-body-session", "pageview", json!({}));
    body["page_url"] = json!(format!("https://news.example.com/{}", "a".repeat(17 * 1024)));
    let a = app.track(&body);
    a.expect(413);
    let (code, _, _) = a.error();
    assert_eq!(code, "PAYLOAD_TOO_LARGE");
    assert_eq!(list(&app, &site, "")["total"], 0);
}

// ---------------------------------------------------------------- validation

#[test]
fn each_missing_required_field_is_named() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    for field in ["session_id", "site_id", "event_type", "page_url"] {
        let mut body = event(&site, "valid-session-1", "pageview", json!({}));
        body.as_object_mut().unwrap().remove(field);
        expect_error(&app.track(&body), 400, "INVALID_REQUEST", field, "required");
        let mut body = event(&site, "valid-session-1", "pageview", json!({}));
        body[field] = Value::Null;
        expect_error(&app.track(&body), 400, "INVALID_REQUEST", field, "required");
        let mut body = event(&site, "valid-session-1", "pageview", json!({}));
        body[field] = json!("");
        expect_error(&app.track(&body), 400, "INVALID_REQUEST", field, "required");
    }
    // The empty object names a field too.
    let a = app.track(&json!({}));
    a.expect(400);
    let (_, field, reason) = a.error();
    assert!(field.is_some(), "{}", a.text);
    assert_eq!(reason, "required");
    assert_eq!(list(&app, &site, "")["total"], 0, "nothing stored");
}

#[test]
fn invalid_track_values_are_400_with_field_and_reason() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        ("event_type", json!("click"), "event_type", "invalid"),
        ("event_type", json!("PAGEVIEW"), "event_type", "invalid"),
        ("event_type", json!(3), "event_type", "invalid"),
        ("session_id", json!("short"), "session_id", "invalid"),
        ("session_id", json!("has space 1234"), "session_id", "invalid"),
        ("session_id", json!("x".repeat(129)), "session_id", "too_long"),
        ("site_id", json!("not-a-uuid"), "site_id", "invalid"),
        ("page_url", json!("/relative/path"), "page_url", "invalid"),
        ("page_url", json!("ftp://news.example.com/file"), "page_url", "invalid"),
        ("page_url", json!(format!("https://news.example.com/{}", "p".repeat(2048))), "page_url", "too_long"),
        ("metadata", json!(["not", "an", "object"]), "metadata", "invalid"),
        ("metadata", json!({"note": "n".repeat(2100)}), "metadata", "too_long"),
        ("metadata", json!({"device_type": "tv"}), "metadata.device_type", "invalid"),
        ("metadata", json!({"blocker_type": "dns"}), "metadata.blocker_type", "invalid"),
        ("event_id", json!("not-a-uuid"), "event_id", "invalid"),
    ];
    for (key, value, field, reason) in cases {
        let mut body = event(&site, "valid-session-1", "pageview", json!({}));
        body[key] = value.clone();
        let a = app.track(&body);
        assert_eq!(a.status.as_u16(), 400, "{key} = {value}: {}", a.text);
        let (code, f, r) = a.error();
        assert_eq!(
            (code.as_str(), f.as_deref(), r.as_str()),
            ("INVALID_REQUEST", Some(field), reason),
            "{key} = {value}"
        );
    }
    // A session_id of exactly 8 and of exactly 128 characters is fine.
    track_ok(&app, event(&site, "abcd-_12", "pageview", json!({})));
    track_ok(&app, event(&site, &"s".repeat(128), "pageview", json!({})));
    assert_eq!(list(&app, &site, "")["total"], 2);
}

#[test]
fn unknown_site_is_404_on_site_id() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let a = app.track(&event("5d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a", "valid-session-1", "pageview", json!({})));
    expect_error(&a, 404, "NOT_FOUND", "site_id", "not_found");
    // Another account's key does not see this site either.
    let other = app.admin(&["create-key", "--account", "another-account"]);
    let a = app.post_as(&other, "/v1/events/track", &event(&site, "valid-session-1", "pageview", json!({})));
    a.expect(404);
    let (code, field, _) = a.error();
    assert_eq!((code.as_str(), field.as_deref()), ("NOT_FOUND", Some("site_id")));
    assert_eq!(list(&app, &site, "")["total"], 0);
}

#[test]
fn malformed_track_bodies_are_400_on_body() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    for raw in ["{not json", "[1, 2]", "\"a string\"", "", "   "] {
        let a = post_raw(&app, "/v1/events/track", raw.to_owned());
        a.expect(400);
        let (code, field, _) = a.error();
        assert_eq!((code.as_str(), field.as_deref()), ("INVALID_REQUEST", Some("body")), "{raw:?}: {}", a.text);
    }
    // An unknown top-level field is refused (metadata holds the free-form keys).
    let mut body = event(&site, "valid-session-1", "pageview", json!({}));
    body["siteId"] = json!(site);
    expect_error(&app.track(&body), 400, "INVALID_REQUEST", "siteId", "unknown_field");
    assert_eq!(list(&app, &site, "")["total"], 0);
}

// ---------------------------------------------------------------- batch

#[test]
fn batch_reports_each_item_in_order() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let mut missing = event(&site, "batch-session-2", "pageview", json!({}));
    missing.as_object_mut().unwrap().remove("session_id");
    let items = json!([
        event(&site, "batch-session-1", "pageview", json!({})),
        missing,
        event(&site, "batch-session-3", "click", json!({})),
        event(&site, "batch-session-4", "adblock_detected", json!({})),
        event("0e1d2c3b-4a59-4687-9a6b-5c4d3e2f1a0b", "batch-session-5", "pageview", json!({})),
        42,
        event(&site, "batch-session-7", "wall_displayed", json!({"event_id": "7e57a11c-0000-4000-8000-000000000007"})),
    ]);
    let a = app.batch(&items);
    assert!(a.status.is_success(), "{}", a.text);
    assert_eq!(a.body["accepted"], 3, "{}", a.text);
    assert_eq!(a.body["rejected"], 4, "{}", a.text);
    let results = a.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 7);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i, "{r}");
    }
    let good = [0usize, 3, 6];
    for &i in &good {
        assert!(results[i].get("error").is_none(), "{}", results[i]);
        assert_eq!(uuid_of(&results[i]["id"]).get_version_num(), 7);
    }
    let bad: [(usize, &str, &str); 4] = [
        (1, "INVALID_REQUEST", "session_id"),
        (2, "INVALID_REQUEST", "event_type"),
        (4, "NOT_FOUND", "site_id"),
        (5, "INVALID_REQUEST", "body"),
    ];
    for (i, code, field) in bad {
        let r = &results[i];
        assert!(r.get("id").is_none(), "a refused item has no id: {r}");
        let e = &r["error"];
        assert_eq!(e["code"], code, "{r}");
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
        assert_eq!(e["details"]["field"], field, "{r}");
        assert!(e["details"]["reason"].is_string(), "{r}");
    }
    assert_eq!(results[1]["error"]["details"]["reason"], "required");
    assert_eq!(results[2]["error"]["details"]["reason"], "invalid");

    // Only the accepted ones are stored, with the ids the batch returned, in order.
    let page = list(&app, &site, "");
    assert_eq!(page["total"], 3);
    assert_eq!(session_ids(&page), ["batch-session-7", "batch-session-4", "batch-session-1"]);
    let ids: Vec<&Value> = page["events"].as_array().unwrap().iter().map(|e| &e["id"]).collect();
    assert_eq!(ids, [&results[6]["id"], &results[3]["id"], &results[0]["id"]]);
    let m = app.dashboard(&site, "?days=2").body["metrics"].clone();
    assert_eq!((m["sessions"].as_u64(), m["adblock_detected"].as_u64()), (Some(3), Some(1)), "{m}");
}

#[test]
fn batch_body_must_be_a_non_empty_array_of_at_most_500() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let one = event(&site, "batch-limit-1", "pageview", json!({}));

    let a = app.batch(&one);
    expect_error(&a, 400, "INVALID_REQUEST", "body", "invalid");
    let a = app.batch(&json!({"events": [one]}));
    assert_eq!(a.status.as_u16(), 400, "{}", a.text);
    assert_eq!(a.error().1.as_deref(), Some("body"));
    let a = app.batch(&json!([]));
    a.expect(400);
    assert_eq!(a.error().1.as_deref(), Some("body"));
    let a = post_raw(&app, "/v1/events/batch", "[{broken".to_owned());
    a.expect(400);
    assert_eq!(a.error().1.as_deref(), Some("body"));

    let many: Vec<Value> =
        (0..501).map(|i| event(&site, &format!("batch-limit-{i:04}"), "pageview", json!({}))).collect();
    let a = app.batch(&Value::Array(many.clone()));
    a.expect(400);
    let (code, field, _) = a.error();
    assert_eq!((code.as_str(), field.as_deref()), ("INVALID_REQUEST", Some("body")), "{}", a.text);
    assert_eq!(list(&app, &site, "")["total"], 0, "a refused batch stores nothing");

    let a = app.batch(&Value::Array(many[..500].to_vec()));
    a.expect(201);
    assert_eq!(a.body["accepted"], 500);
    assert_eq!(a.body["rejected"], 0);
    assert_eq!(a.body["results"].as_array().unwrap().len(), 500);
    assert_eq!(list(&app, &site, "")["total"], 500);
    assert_eq!(app.dashboard(&site, "?days=2").body["metrics"]["sessions"], 500);
}

#[test]
fn batch_over_1_mib_is_413() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let mut big = event(&site, "batch-huge-01", "pageview", json!({}));
    big["page_url"] = json!(format!("https://news.example.com/{}", "a".repeat(1024 * 1024)));
    let body = Value::Array(vec![big]).to_string();
    assert!(body.len() > 1024 * 1024);
    // The server may answer 413 from Content-Length and close before the upload
    // ends; the client then sometimes sees a reset instead of the answer. Try
    // a few times and require a 413 answer.
    let mut failures = Vec::new();
    let a = loop {
        let req = app
            .request(reqwest::Method::POST, "/v1/events/batch")
            .bearer_auth(&app.key)
            .header("Content-Type", "application/json")
            .body(body.clone());
        match req.send() {
            Ok(res) => {
                let status = res.status();
                let text = res.text().unwrap_or_default();
                break (status, text);
            }
            Err(e) if failures.len() < 4 => failures.push(e.to_string()),
            Err(e) => panic!("no answer to an oversized batch after 5 tries: {e}; earlier: {failures:?}"),
        }
    };
    if !failures.is_empty() {
        eprintln!("oversized batch: {} tries ended without an answer: {failures:?}", failures.len());
    }
    let a = Answer { status: a.0, headers: Default::default(), body: serde_json::from_str(&a.1).unwrap_or(Value::Null), text: a.1 };
    a.expect(413);
    assert_eq!(a.error().0, "PAYLOAD_TOO_LARGE");
    // Just under the limit is read (and here refused per item, not as a whole).
    let mut items = Vec::new();
    for i in 0..400 {
        items.push(event(
            &site,
            &format!("batch-near-{i:04}"),
            "pageview",
            json!({"metadata": {"note": "n".repeat(1900)}}),
        ));
    }
    let body = Value::Array(items).to_string();
    assert!(body.len() < 1024 * 1024 && body.len() > 512 * 1024, "{}", body.len());
    let a = post_raw(&app, "/v1/events/batch", body);
    a.expect(201);
    assert_eq!(a.body["accepted"], 400, "{}", &a.text[..a.text.len().min(500)]);
}

#[test]
fn a_full_write_queue_answers_503_and_stores_nothing_it_refused() {
    // One write may wait for the writer: concurrent clients find the queue
    // full while it commits.
    let app = TestApp::spawn_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0", "--queue-capacity", "1"]);
    // Through the CLI: the API's write could find the queue taken by a job.
    let site = app.admin(&["create-site", "--account", "acme", "--name", "Queue", "--domain", DOMAIN]);
    let acked = std::sync::Mutex::new(Vec::new());
    let refused = std::sync::atomic::AtomicUsize::new(0);
    for _round in 0..20 {
        std::thread::scope(|scope| {
            for _ in 0..32 {
                scope.spawn(|| {
                    for _ in 0..10 {
                        let a = app.track(&event(&site, &Uuid::new_v4().to_string(), "pageview", json!({})));
                        match a.status.as_u16() {
                            201 => acked.lock().unwrap().push(a.body["id"].as_str().expect("id in a 201").to_owned()),
                            503 => {
                                assert_eq!(a.error(), ("UNAVAILABLE".into(), None, "overloaded".into()), "{}", a.text);
                                assert_eq!(a.header("retry-after"), Some("1"), "{}", a.text);
                                refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            other => panic!("track under load answered {other}: {}", a.text),
                        }
                    }
                });
            }
        });
        if refused.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            break;
        }
    }
    let refused = refused.into_inner();
    assert!(refused > 0, "32 concurrent clients never found a one-place write queue full");
    // The collector takes events again once the burst is over, and holds
    // exactly those it acknowledged.
    let mut acked = acked.into_inner().unwrap();
    let after = event(&site, "after-the-burst", "pageview", json!({}));
    let mut a = app.track(&after);
    for _ in 0..50 {
        if a.status.as_u16() != 503 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        a = app.track(&after);
    }
    a.expect(201);
    acked.push(a.body["id"].as_str().expect("id in a 201").to_owned());
    let mut stored = all_event_ids(&app, &site);
    eprintln!("{} events acknowledged, {refused} refused with 503", acked.len());
    acked.sort();
    stored.sort();
    assert_eq!(stored, acked, "the stored events must be exactly the acknowledged ones");
}

// ---------------------------------------------------------------- list

#[test]
fn events_list_is_newest_first_with_filter_and_paging() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let sent = [
        ("list-sess-0", "pageview"),
        ("list-sess-1", "adblock_detected"),
        ("list-sess-2", "pageview"),
        ("list-sess-3", "wall_displayed"),
        ("list-sess-4", "conversion_allowlist"),
    ];
    for (s, t) in sent {
        track_ok(&app, event(&site, s, t, json!({})));
    }

    let page = list(&app, &site, "");
    assert_eq!(page.as_object().unwrap().len(), 4, "events, total, limit, offset: {page}");
    assert_eq!((page["total"].as_u64(), page["limit"].as_u64(), page["offset"].as_u64()), (Some(5), Some(50), Some(0)));
    assert_eq!(session_ids(&page), ["list-sess-4", "list-sess-3", "list-sess-2", "list-sess-1", "list-sess-0"]);

    let p = list(&app, &site, "?limit=2");
    assert_eq!((p["total"].as_u64(), p["limit"].as_u64(), p["offset"].as_u64()), (Some(5), Some(2), Some(0)));
    assert_eq!(session_ids(&p), ["list-sess-4", "list-sess-3"]);
    let p = list(&app, &site, "?limit=2&offset=2");
    assert_eq!(session_ids(&p), ["list-sess-2", "list-sess-1"]);
    assert_eq!((p["total"].as_u64(), p["offset"].as_u64()), (Some(5), Some(2)));
    let p = list(&app, &site, "?limit=2&offset=4");
    assert_eq!(session_ids(&p), ["list-sess-0"]);
    let p = list(&app, &site, "?offset=5");
    assert_eq!(session_ids(&p), Vec::<String>::new());
    assert_eq!(p["total"], 5);
    let p = list(&app, &site, "?offset=1000000");
    assert!(p["events"].as_array().unwrap().is_empty());
    let p = list(&app, &site, "?limit=1000");
    assert_eq!(p["events"].as_array().unwrap().len(), 5);
    assert_eq!(p["limit"], 1000);
    let p = list(&app, &site, "?limit=1");
    assert_eq!(session_ids(&p), ["list-sess-4"]);

    // event_type filter: total counts the matching events only.
    let p = list(&app, &site, "?event_type=pageview");
    assert_eq!(p["total"], 2);
    assert_eq!(session_ids(&p), ["list-sess-2", "list-sess-0"]);
    assert!(p["events"].as_array().unwrap().iter().all(|e| e["event_type"] == "pageview"));
    let p = list(&app, &site, "?event_type=pageview&limit=1&offset=1");
    assert_eq!((p["total"].as_u64(), session_ids(&p)), (Some(2), vec!["list-sess-0".to_owned()]));
    let p = list(&app, &site, "?event_type=wall_dismissed");
    assert_eq!(p["total"], 0);
    assert!(p["events"].as_array().unwrap().is_empty());

    // Bounds and bad values.
    expect_error(&app.events(&site, "?event_type=click"), 400, "INVALID_REQUEST", "event_type", "invalid");
    expect_error(&app.events(&site, "?limit=0"), 400, "INVALID_REQUEST", "limit", "out_of_range");
    expect_error(&app.events(&site, "?limit=1001"), 400, "INVALID_REQUEST", "limit", "out_of_range");
    expect_error(&app.events(&site, "?limit=abc"), 400, "INVALID_REQUEST", "limit", "invalid");
    let a = app.events(&site, "?offset=-1");
    a.expect(400);
    assert_eq!(a.error().1.as_deref(), Some("offset"));
    expect_error(&app.events(&site, "?offset=x"), 400, "INVALID_REQUEST", "offset", "invalid");

    // Unknown or foreign site.
    let a = app.events("1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "");
    a.expect(404);
    assert_eq!(a.error().0, "NOT_FOUND");
    let other = app.admin(&["create-key", "--account", "another-account"]);
    let a = app.get_as(&other, &format!("/v1/events/sites/{site}"));
    a.expect(404);
}

#[test]
fn a_stored_event_is_the_tracked_event_plus_id_country_and_received_at() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let occurred = Utc::now() - Duration::minutes(90);
    let eid = "c0ffee00-1234-4abc-9def-0123456789ab";
    let body = json!({
        "session_id": "stored-session",
        "site_id": site,
        "event_type": "adblock_detected",
        "page_url": "https://news.example.com/article/42?utm=x#top",
        "metadata": {"blocker_type": "network", "variant": "offer", "custom_key": {"nested": [1, 2]}, "country": "DE"},
        "event_id": eid,
        "timestamp": ts(occurred),
    });
    let ack = track_ok(&app, body);

    let page = list(&app, &site, "");
    assert_eq!(page["total"], 1);
    let e = &page["events"][0];
    assert_eq!(e["id"], ack["id"], "{e}");
    assert_eq!(e["session_id"], "stored-session");
    assert_eq!(e["site_id"], site.as_str());
    assert_eq!(e["event_type"], "adblock_detected");
    assert_eq!(e["page_url"], "https://news.example.com/article/42", "page_url as sent, without its query string and fragment");
    let md = &e["metadata"];
    assert_eq!(md["blocker_type"], "network", "{e}");
    assert_eq!(md["variant"], "offer", "{e}");
    assert_eq!(md["custom_key"], json!({"nested": [1, 2]}), "unknown metadata keys are kept: {e}");
    assert_eq!(md["device_type"], "desktop", "no User-Agent: desktop: {e}");
    assert_eq!(e["country"], "ZZ", "no country header configured; a client-sent country is ignored: {e}");
    assert_eq!(instant(&e["received_at"]), instant(&ack["received_at"]), "{e}");
    // The tracked fields that were sent come back too.
    assert_eq!(instant(&e["timestamp"]).timestamp(), occurred.timestamp(), "{e}");
    assert_eq!(e["event_id"], eid, "{e}");
}

#[test]
fn country_comes_from_the_configured_header() {
    let app =
        TestApp::spawn_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0", "--country-header", "X-Country"]);
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let send = |session: &str, country: Option<&str>| {
        let mut req = app.request(reqwest::Method::POST, "/v1/events/track").bearer_auth(&app.key).json(&event(
            &site,
            session,
            "pageview",
            json!({"metadata": {"country": "DE"}}),
        ));
        if let Some(c) = country {
            req = req.header("X-Country", c);
        }
        let a = app.send(req);
        assert_eq!(a.status.as_u16(), 201, "{}", a.text);
    };
    send("country-fr-01", Some("fr"));
    send("country-jp-02", Some("JP"));
    send("country-none3", None);
    send("country-bad-4", Some("france"));
    // A batch takes the request's country for every event.
    let a = app.send(
        app.request(reqwest::Method::POST, "/v1/events/batch").bearer_auth(&app.key).header("X-Country", "ca").json(
            &json!([
                event(&site, "country-ca-05", "pageview", json!({})),
                event(&site, "country-ca-06", "pageview", json!({}))
            ]),
        ),
    );
    a.expect(201);
    // The browser path too.
    let b = app.send(
        app.request(reqwest::Method::POST, "/v1/events/track")
            .header("Origin", ORIGIN)
            .header("Content-Type", "text/plain")
            .header("X-Country", "br")
            .body(event(&site, "country-br-07", "pageview", json!({})).to_string()),
    );
    b.expect(201);

    let page = list(&app, &site, "");
    let country = |s: &str| -> String {
        page["events"].as_array().unwrap().iter().find(|e| e["session_id"] == s).unwrap_or_else(|| panic!("{s}"))
            ["country"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(country("country-fr-01"), "FR");
    assert_eq!(country("country-jp-02"), "JP");
    assert_eq!(country("country-none3"), "ZZ");
    assert_eq!(country("country-bad-4"), "ZZ");
    assert_eq!(country("country-ca-05"), "CA");
    assert_eq!(country("country-ca-06"), "CA");
    assert_eq!(country("country-br-07"), "BR");
}

#[test]
fn a_paused_site_refuses_events_with_403() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    track_ok(&app, event(&site, "before-pause1", "pageview", json!({})));
    app.patch(&format!("/v1/sites/{site}"), &json!({"status": "paused"})).expect(200);

    let a = app.track(&event(&site, "after-pause-2", "pageview", json!({})));
    a.expect(403);
    assert_eq!(a.error().0, "FORBIDDEN");
    let b = app.track_from_browser(ORIGIN, &event(&site, "after-pause-3", "pageview", json!({})));
    b.expect(403);
    let c = app.batch(&json!([event(&site, "after-pause-4", "pageview", json!({}))]));
    assert!(c.status.is_success() || c.status.as_u16() == 403, "{}", c.text);
    if c.status.is_success() {
        assert_eq!(c.body["accepted"], 0, "{}", c.text);
        assert_eq!(c.body["results"][0]["error"]["code"], "FORBIDDEN", "{}", c.text);
    }
    // Nothing new was stored; reading still works while paused.
    assert_eq!(list(&app, &site, "")["total"], 1);
    assert_eq!(app.dashboard(&site, "?days=2").body["metrics"]["sessions"], 1);

    app.patch(&format!("/v1/sites/{site}"), &json!({"status": "active"})).expect(200);
    track_ok(&app, event(&site, "after-resume5", "pageview", json!({})));
    assert_eq!(list(&app, &site, "")["total"], 2);
}

#[test]
fn an_event_route_reached_by_an_api_path_reads_the_request_alike() {
    // `/v1/e/` is an API path to the gateway (a key is required), yet it
    // reaches the track route: the user agent and country still count.
    let app = TestApp::spawn_with(&["--country-header", "X-Country"]);
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let a = app.send(
        app.request(reqwest::Method::POST, "/v1/e/")
            .bearer_auth(&app.key)
            .header("User-Agent", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148")
            .header("X-Country", "fr")
            .json(&event(&site, "api-path-session", "pageview", json!({}))),
    );
    a.expect(201);
    let e = &list(&app, &site, "")["events"][0];
    assert_eq!(e["metadata"]["device_type"], "mobile", "{e}");
    assert_eq!(e["country"], "FR", "{e}");
}

#[test]
fn a_lone_event_waits_out_the_group_wait_before_its_commit() {
    // What --group-wait-ms buys a busy PostgreSQL node is measured by
    // bench/pg-ingest.sh; here, that the writer honours it on either engine.
    let app = TestApp::spawn_with(&["--group-wait-ms", "100"]);
    let site = id(&app.create_site(DOMAIN, "UTC"));
    // Any other write (the start-up jobs', the key's `last_used_at`) would
    // open the group earlier and shorten the event's wait: start from a writer
    // that has committed nothing for a while.
    let commits = || sample(&app.metrics(), "postern_commits_total");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = commits();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = commits();
        if now == seen {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the writer never went quiet: {now} commits");
        seen = now;
    }
    let started = std::time::Instant::now();
    let a = app.track(&event(&site, "session-group-wait", "pageview", json!({})));
    let waited = started.elapsed();
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(commits(), seen + 1.0, "the event was committed alone, in one group");
    assert!(waited >= std::time::Duration::from_millis(100), "acknowledged after {waited:?}");
    let stored = list(&app, &site, "");
    assert_eq!(session_ids(&stored), vec!["session-group-wait".to_owned()]);
}
