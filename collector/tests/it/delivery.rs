//! Delivery: integrations API, e-mail to a real SMTP server, the Slack-type
//! message and the signed webhook to real HTTP receivers, retries recorded
//! attempt by attempt, and exactly-once delivery across a restart.

use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::receivers::{HttpReceiver, Options, SmtpReceiver};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);

/// A collector with rate limits off, fast retries, webhooks allowed to reach
/// the receivers on loopback, and these extra flags.
fn spawn(retry_base_ms: u64, extra: &[String]) -> TestApp {
    let mut args: Vec<String> = ["--rate-limit-api", "0", "--rate-limit-ingest", "0", LOOPBACK_HOOKS[0], LOOPBACK_HOOKS[1], "--delivery-retry-base-ms"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(retry_base_ms.to_string());
    args.extend(extra.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    TestApp::spawn_with(&refs)
}

fn create_integration(app: &TestApp, site: &str, body: Value) -> Value {
    let a = app.post(&format!("/v1/sites/{site}/integrations"), &body);
    a.expect(201);
    a.body.clone()
}

fn send_test(app: &TestApp, site: &str, integration: &str) -> String {
    let a = app.post(&format!("/v1/sites/{site}/integrations/{integration}/test"), &json!({}));
    a.expect(201);
    a.body["delivery_id"].as_str().expect("delivery_id").to_owned()
}

/// Polls the site's deliveries until `delivery` satisfies `done`; returns it.
#[track_caller]
fn wait_delivery(app: &TestApp, site: &str, delivery: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let list = app.get(&format!("/v1/sites/{site}/deliveries")).expect(200).body["deliveries"].clone();
        let found = list.as_array().unwrap().iter().find(|d| d["id"] == delivery).cloned();
        if let Some(d) = found.filter(|d| done(d)) {
            return d;
        }
        assert!(Instant::now() < deadline, "delivery {delivery} did not reach the expected state: {list:#}\nlog:\n{}", app.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn finished(d: &Value) -> bool {
    d["state"] != "pending"
}

fn statuses(d: &Value) -> Vec<(u64, String)> {
    d["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["status"].as_u64().unwrap_or(0), a["outcome"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn an_email_integration_receives_html_text_and_the_attachment_over_real_smtp() {
    let smtp = SmtpReceiver::start();
    let app = spawn(200, &smtp.flags());
    let site = id(&app.create_site("mail.example.com", "Europe/Paris"));
    let integration = create_integration(&app, &site, json!({"kind": "email", "email": "ops@example.com", "events": ["no_data"]}));
    assert_eq!(integration["email"], "ops@example.com");
    assert!(integration.get("secret").is_none(), "{integration}");
    let delivery = send_test(&app, &site, integration["id"].as_str().unwrap());

    let mail = smtp.next_message(WAIT);
    assert_eq!(mail["rcpt_tos"], json!(["ops@example.com"]));
    assert_eq!(mail["mail_from"], "reports@postern.test");
    assert_eq!(mail["from"], "Postern Reports <reports@postern.test>");
    assert_eq!(mail["subject"], "Postern test message");
    assert_eq!(mail["content_type"], "multipart/mixed");
    assert_eq!(mail["message_id"], format!("<{delivery}@postern>"));
    let text = mail["text"].as_str().expect("a plain-text part");
    assert!(text.contains("test message from Postern"), "{text}");
    let html = mail["html"].as_str().expect("an HTML part");
    assert!(html.contains("<h1>Postern test message</h1>"), "{html}");
    let attachments = mail["attachments"].as_array().unwrap();
    assert_eq!(attachments.len(), 1, "{mail:#}");
    assert_eq!(attachments[0]["filename"], "postern-test.txt");
    assert_eq!(attachments[0]["content_type"], "text/plain");
    let bytes = hex::decode(attachments[0]["hex"].as_str().unwrap()).unwrap();
    assert_eq!(bytes, b"Attachments from Postern reach you.\n");

    let d = wait_delivery(&app, &site, &delivery, finished);
    assert_eq!(d["state"], "delivered");
    assert_eq!(d["channel"], "email");
    assert_eq!(d["recipient"], "ops@example.com");
    assert_eq!(statuses(&d), vec![(250, "delivered".to_owned())]);
    assert!(smtp.pending().is_empty(), "one e-mail only");
}

#[test]
fn a_transient_smtp_reply_is_retried_and_a_permanent_one_is_not() {
    for (reply, expected) in [
        ("451 4.3.0 Try again later", vec![(451, "retry".to_owned()), (250, "delivered".to_owned())]),
        ("550 5.1.1 No such user", vec![(550, "failed".to_owned())]),
    ] {
        let smtp = SmtpReceiver::refusing(&[reply]);
        let app = spawn(100, &smtp.flags());
        let site = id(&app.create_site("smtp.example.com", "UTC"));
        let integration = create_integration(&app, &site, json!({"kind": "email", "email": "ops@example.com"}));
        let delivery = send_test(&app, &site, integration["id"].as_str().unwrap());
        let d = wait_delivery(&app, &site, &delivery, finished);
        assert_eq!(statuses(&d), expected, "{reply}: {d:#}");
        assert!(d["attempts"][0]["error"].as_str().unwrap().contains(&reply[..3]), "{d:#}");
        if d["state"] == "delivered" {
            assert_eq!(smtp.next_message(WAIT)["subject"], "Postern test message");
        }
        std::thread::sleep(Duration::from_millis(500));
        assert!(smtp.pending().is_empty(), "{reply}: no other message");
    }
}

#[test]
fn the_slack_message_has_text_and_blocks_and_its_url_is_masked_after_creation() {
    let hook = HttpReceiver::start(&[]);
    let app = spawn(200, &[]);
    let site = id(&app.create_site("slack.example.com", "UTC"));
    let created = create_integration(&app, &site, json!({"kind": "slack", "name": "#growth", "url": hook.url}));
    assert_eq!(created["url"], hook.url, "the full URL is shown once, at creation");
    assert_eq!(created["events"].as_array().unwrap().len(), 8, "every event by default: {created}");
    let listed = app.get(&format!("/v1/sites/{site}/integrations")).expect(200).body["integrations"].clone();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let shown = listed[0]["url"].as_str().unwrap();
    assert!(!shown.contains("secret-token"), "a Slack URL is a credential: {shown}");

    let delivery = send_test(&app, &site, created["id"].as_str().unwrap());
    let got = hook.wait_for(1, WAIT);
    assert_eq!((got[0].method.as_str(), got[0].path.as_str()), ("POST", "/hook/secret-token"));
    assert_eq!(got[0].header("content-type"), "application/json");
    let body = got[0].json();
    assert!(body["text"].as_str().unwrap().contains("Postern test message"), "{body}");
    let blocks = body["blocks"].as_array().expect("blocks");
    assert_eq!(blocks[0]["type"], "header");
    assert_eq!(blocks[0]["text"]["text"], "Postern test message");
    assert_eq!(blocks[1]["type"], "section");
    assert!(blocks[1]["text"]["text"].as_str().unwrap().contains("#growth"), "{body}");
    let d = wait_delivery(&app, &site, &delivery, finished);
    assert_eq!(statuses(&d), vec![(200, "delivered".to_owned())]);
    assert_eq!(d["integration_id"], created["id"]);
}

#[test]
fn the_webhook_carries_the_four_headers_and_a_signature_the_receiver_can_verify() {
    let hook = HttpReceiver::start(&[]);
    let app = spawn(200, &[]);
    let site = id(&app.create_site("hook.example.com", "UTC"));
    let created = create_integration(&app, &site, json!({"kind": "webhook", "url": hook.url, "events": ["daily_report", "no_data"]}));
    let secret = created["secret"].as_str().expect("the secret, shown once").to_owned();
    assert!(secret.starts_with("whsec_") && secret.len() > 40, "{secret}");
    let listed = app.get(&format!("/v1/sites/{site}/integrations")).expect(200).body["integrations"][0].clone();
    assert_ne!(listed["secret"], secret, "the secret is masked in listings");
    assert!(listed["secret"].as_str().unwrap().ends_with(&secret[secret.len() - 4..]));

    let before = chrono::Utc::now().timestamp();
    let delivery = send_test(&app, &site, created["id"].as_str().unwrap());
    let got = hook.wait_for(1, WAIT).remove(0);
    assert_eq!(got.header("content-type"), "application/json");
    assert_eq!(got.header("postern-event"), "test");
    assert_eq!(got.header("postern-delivery"), delivery);
    let timestamp: i64 = got.header("postern-timestamp").parse().expect("a Unix timestamp");
    assert!(timestamp >= before - 1 && timestamp <= chrono::Utc::now().timestamp() + 1, "{timestamp}");
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.{}", got.body).as_bytes());
    assert_eq!(got.header("postern-signature"), format!("v1={}", hex::encode(mac.finalize().into_bytes())));
    let mut wrong = Hmac::<Sha256>::new_from_slice(b"whsec_other").unwrap();
    wrong.update(format!("{timestamp}.{}", got.body).as_bytes());
    assert_ne!(got.header("postern-signature"), format!("v1={}", hex::encode(wrong.finalize().into_bytes())));
    let body = got.json();
    assert_eq!(body["event"], "test");
    assert_eq!(body["site_id"], site);
    assert!(body["data"].is_object(), "{body}");
    let d = wait_delivery(&app, &site, &delivery, finished);
    assert_eq!(d["state"], "delivered");
}

#[test]
fn webhook_urls_are_masked_after_creation_and_read_keys_see_outcomes_without_the_answers() {
    let hook = HttpReceiver::start(&[404]);
    let app = spawn(100, &[]);
    let site = id(&app.create_site("masked.example.com", "UTC"));
    let url = hook.url.replace("http://", "http://robot:hunter2@") + "?token=abc";
    let created = create_integration(&app, &site, json!({"kind": "webhook", "url": url}));
    assert_eq!(created["url"], url, "the full URL is shown once, at creation");
    let port = hook.url.trim_start_matches("http://127.0.0.1:").split('/').next().unwrap().to_owned();
    let reader = app.post("/v1/keys", &json!({"scopes": ["read"]})).body["key"].as_str().unwrap().to_owned();
    for key in [&app.key, &reader] {
        let listed = app.get_as(key, &format!("/v1/sites/{site}/integrations")).expect(200).body["integrations"][0].clone();
        assert_eq!(listed["url"], format!("http://127.0.0.1:{port}/…"), "scheme, host and port only: {listed}");
    }

    let delivery = send_test(&app, &site, created["id"].as_str().unwrap());
    let d = wait_delivery(&app, &site, &delivery, finished);
    assert_eq!(statuses(&d), vec![(404, "failed".to_owned())], "a write key sees the answer");
    assert!(d["attempts"][0]["latency_ms"].is_i64() && d["last_error"].as_str().unwrap().contains("404"), "{d:#}");
    let iid = created["id"].as_str().unwrap();
    for path in [format!("/v1/sites/{site}/deliveries"), format!("/v1/sites/{site}/integrations/{iid}/deliveries")] {
        let seen = app.get_as(&reader, &path).expect(200).body["deliveries"][0].clone();
        assert_eq!((seen["id"].as_str(), seen["state"].as_str(), seen["attempt_count"].as_u64()), (Some(delivery.as_str()), Some("failed"), Some(1)), "{seen:#}");
        let attempt = seen["attempts"][0].as_object().unwrap();
        assert_eq!(attempt.get("outcome"), Some(&json!("failed")));
        for hidden in ["status", "latency_ms", "error"] {
            assert!(!attempt.contains_key(hidden), "a read key must not see {hidden}: {seen:#}");
        }
        assert!(seen.get("last_error").is_none(), "{seen:#}");
    }
}

#[test]
fn a_receiver_failing_three_times_gets_the_delivery_once_with_four_attempts_recorded() {
    let hook = HttpReceiver::start(&[500, 503, 429]);
    let app = spawn(100, &[]);
    let site = id(&app.create_site("retry.example.com", "UTC"));
    let created = create_integration(&app, &site, json!({"kind": "webhook", "url": hook.url}));
    let iid = created["id"].as_str().unwrap();
    let delivery = send_test(&app, &site, iid);
    let d = wait_delivery(&app, &site, &delivery, finished);
    assert_eq!(d["state"], "delivered", "{d:#}");
    assert_eq!(statuses(&d), vec![
        (500, "retry".to_owned()),
        (503, "retry".to_owned()),
        (429, "retry".to_owned()),
        (200, "delivered".to_owned())
    ]);
    for a in d["attempts"].as_array().unwrap() {
        assert!(a["latency_ms"].as_i64().unwrap() >= 0 && a["started_at"].is_string(), "{a}");
    }
    assert!(d["attempts"][0]["error"].as_str().unwrap().contains("500"), "{d:#}");
    // Well past the next backoff: nothing more is sent.
    std::thread::sleep(Duration::from_millis(1500));
    let got = hook.received();
    assert_eq!(got.len(), 4, "{got:#?}");
    assert_eq!(got.iter().filter(|r| r.answered == 200).count(), 1);
    assert!(got.iter().all(|r| r.header("postern-delivery") == delivery), "retries keep the delivery id");
    let per_integration = app.get(&format!("/v1/sites/{site}/integrations/{iid}/deliveries")).expect(200).body["deliveries"].clone();
    assert_eq!(per_integration.as_array().unwrap().len(), 1);
    assert_eq!(per_integration[0]["attempt_count"], 4);
}

#[test]
fn a_client_error_is_not_retried_and_the_last_attempt_fails_for_good() {
    let refusing = HttpReceiver::start(&[404]);
    let down = HttpReceiver::start(&[500, 500]);
    let app = spawn(100, &["--delivery-max-attempts".to_owned(), "2".to_owned()]);
    let site = id(&app.create_site("fail.example.com", "UTC"));
    let a = create_integration(&app, &site, json!({"kind": "webhook", "url": refusing.url}));
    let b = create_integration(&app, &site, json!({"kind": "slack", "url": down.url}));
    let da = send_test(&app, &site, a["id"].as_str().unwrap());
    let db = send_test(&app, &site, b["id"].as_str().unwrap());
    let d = wait_delivery(&app, &site, &da, finished);
    assert_eq!(d["state"], "failed");
    assert_eq!(statuses(&d), vec![(404, "failed".to_owned())]);
    let d = wait_delivery(&app, &site, &db, finished);
    assert_eq!(d["state"], "failed");
    assert_eq!(statuses(&d), vec![(500, "retry".to_owned()), (500, "failed".to_owned())]);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(refusing.received().len(), 1);
    assert_eq!(down.received().len(), 2);
}

#[test]
fn an_unreachable_receiver_is_a_network_error_retried_with_the_error_recorded() {
    // A port that was free a moment ago: connection refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let app = spawn(100, &["--delivery-max-attempts".to_owned(), "2".to_owned()]);
    let site = id(&app.create_site("net.example.com", "UTC"));
    let created = create_integration(&app, &site, json!({"kind": "webhook", "url": format!("http://127.0.0.1:{port}/x")}));
    let delivery = send_test(&app, &site, created["id"].as_str().unwrap());
    let d = wait_delivery(&app, &site, &delivery, finished);
    assert_eq!(statuses(&d), vec![(0, "retry".to_owned()), (0, "failed".to_owned())]);
    assert!(d["attempts"][0]["status"].is_null());
    let error = d["attempts"][0]["error"].as_str().unwrap();
    assert!(!error.is_empty() && !error.contains(&port.to_string()), "errors never carry the URL: {error}");
}

#[test]
fn a_collector_killed_between_attempts_still_delivers_exactly_once() {
    let hook = HttpReceiver::start(&[503]);
    // The retry waits at least 0.75 × 6 s: time to kill and restart in between.
    let mut app = spawn(6000, &[]);
    let site = id(&app.create_site("restart.example.com", "UTC"));
    let created = create_integration(&app, &site, json!({"kind": "webhook", "url": hook.url}));
    let delivery = send_test(&app, &site, created["id"].as_str().unwrap());
    let first = wait_delivery(&app, &site, &delivery, |d| d["attempts"].as_array().unwrap().len() == 1);
    assert_eq!(first["state"], "pending");
    assert!(first["next_attempt_at"].is_string());
    app.kill();
    app.start_again();
    let d = wait_delivery(&app, &site, &delivery, finished);
    assert_eq!(statuses(&d), vec![(503, "retry".to_owned()), (200, "delivered".to_owned())]);
    // A graceful restart after delivery sends nothing again.
    app.restart();
    std::thread::sleep(Duration::from_millis(1000));
    let got = hook.received();
    assert_eq!(got.len(), 2, "{got:#?}");
    assert_eq!(got.iter().filter(|r| r.answered == 200).count(), 1);
}

#[test]
fn a_retry_after_longer_than_the_backoff_is_honoured() {
    let hook = HttpReceiver::start_with(&[429], Options { retry_after: Some(2), held: false });
    let app = spawn(100, &[]);
    let site = id(&app.create_site("later.example.com", "UTC"));
    let created = create_integration(&app, &site, json!({"kind": "webhook", "url": hook.url}));
    let delivery = send_test(&app, &site, created["id"].as_str().unwrap());
    let d = wait_delivery(&app, &site, &delivery, finished);
    assert_eq!(statuses(&d), vec![(429, "retry".to_owned()), (200, "delivered".to_owned())]);
    let at = |i: usize| chrono::DateTime::parse_from_rfc3339(d["attempts"][i]["started_at"].as_str().unwrap()).unwrap();
    let waited = at(1) - at(0);
    assert!(waited >= chrono::Duration::seconds(2), "the second attempt came after {waited}, before Retry-After: {d:#}");
}

#[test]
fn a_graceful_stop_finishes_the_send_in_flight_and_never_repeats_it() {
    let hook = std::sync::Arc::new(HttpReceiver::start_with(&[], Options { retry_after: None, held: true }));
    let mut app = spawn(100, &[]);
    let site = id(&app.create_site("inflight.example.com", "UTC"));
    let created = create_integration(&app, &site, json!({"kind": "webhook", "url": hook.url}));
    let delivery = send_test(&app, &site, created["id"].as_str().unwrap());
    // The request is in flight (received, not answered) when SIGTERM arrives;
    // the receiver answers 200 half a second later.
    hook.wait_for(1, WAIT);
    let releaser = {
        let hook = hook.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            hook.release();
        })
    };
    assert_eq!(app.stop(), 0, "log:\n{}", app.logs());
    releaser.join().unwrap();
    app.start_again();
    let d = wait_delivery(&app, &site, &delivery, finished);
    assert_eq!(statuses(&d), vec![(200, "delivered".to_owned())]);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(hook.received().len(), 1, "sent once");
}

#[test]
fn integrations_are_validated_scoped_to_the_account_and_deleted() {
    let app = spawn(200, &[]);
    let site = id(&app.create_site("valid.example.com", "UTC"));
    let path = format!("/v1/sites/{site}/integrations");
    let cases = [
        (json!({"url": "http://127.0.0.1/x"}), "kind", "required"),
        (json!({"kind": "pager", "url": "http://127.0.0.1/x"}), "kind", "invalid"),
        (json!({"kind": "webhook"}), "url", "required"),
        (json!({"kind": "webhook", "url": "ftp://example.com/x"}), "url", "invalid"),
        (json!({"kind": "webhook", "url": "not a url"}), "url", "invalid"),
        (json!({"kind": "email", "email": "nobody"}), "email", "invalid"),
        (json!({"kind": "email", "url": "http://127.0.0.1/x"}), "url", "unknown_field"),
        (json!({"kind": "slack", "url": "http://127.0.0.1/x", "events": ["sometimes"]}), "events", "invalid"),
        (json!({"kind": "slack", "url": "http://127.0.0.1/x", "events": []}), "events", "invalid"),
        (json!({"kind": "slack", "url": "http://127.0.0.1/x", "colour": "red"}), "colour", "unknown_field"),
    ];
    for (body, field, reason) in cases {
        let a = app.post(&path, &body);
        a.expect(400);
        let (code, f, r) = a.error();
        assert_eq!((code.as_str(), f.as_deref(), r.as_str()), ("INVALID_REQUEST", Some(field), reason), "{body}");
    }
    assert_eq!(app.get(&path).expect(200).body["integrations"], json!([]), "nothing half-written");

    let other = app.admin(&["create-key", "--account", "other"]);
    app.get_as(&other, &path).expect(404);
    let reader = app.post("/v1/keys", &json!({"scopes": ["read"]})).body["key"].as_str().unwrap().to_owned();
    let a = app.post_as(&reader, &path, &json!({"kind": "slack", "url": "http://127.0.0.1/x"}));
    a.expect(403);

    let created = create_integration(&app, &site, json!({"kind": "slack", "url": "http://127.0.0.1/x", "events": ["no_data", "no_data"]}));
    assert_eq!(created["events"], json!(["no_data"]));
    let iid = created["id"].as_str().unwrap();
    app.delete(&format!("{path}/{iid}")).expect(204);
    app.delete(&format!("{path}/{iid}")).expect(404);
    app.post(&format!("{path}/{iid}/test"), &json!({})).expect(404);
    assert_eq!(app.get(&path).expect(200).body["integrations"], json!([]));
    app.get(&format!("{path}/00000000-0000-0000-0000-000000000000/deliveries")).expect(404);
}

#[test]
fn alerts_fire_once_per_condition_with_the_numbers_behind_them() {
    let hook = HttpReceiver::start(&[]);
    let smtp = SmtpReceiver::start();
    let mut flags = smtp.flags();
    flags.extend(["--alert-no-data-hours".to_owned(), "3".to_owned()]);
    let mut app = spawn(200, &flags);
    let spiking = id(&app.create_site("spike.example.com", "UTC"));
    let quiet = id(&app.create_site("quiet.example.com", "UTC"));
    let events = json!(["adblock_rate_spike", "conversion_rate_drop", "no_data"]);
    for site in [&spiking, &quiet] {
        create_integration(&app, site, json!({"kind": "webhook", "url": hook.url, "events": events}));
    }
    create_integration(&app, &quiet, json!({"kind": "email", "email": "oncall@example.com", "events": ["no_data"]}));
    let at = |hours: i64| (chrono::Utc::now() - chrono::Duration::hours(hours)).to_rfc3339();
    // Baseline three days ago: 10 of 100 sessions blocked; the last hours: 30 of 60.
    let mut batch = Vec::new();
    for i in 0..100 {
        let kind = if i < 10 { "adblock_detected" } else { "pageview" };
        batch.push(event(&spiking, &format!("base-session-{i}"), kind, json!({"timestamp": at(72)})));
    }
    for i in 0..60 {
        let kind = if i < 30 { "adblock_detected" } else { "pageview" };
        batch.push(event(&spiking, &format!("recent-session-{i}"), kind, json!({"timestamp": at(2)})));
    }
    batch.push(event(&quiet, "quiet-session-1", "pageview", json!({"timestamp": at(6)})));
    let a = app.batch(&Value::Array(batch));
    assert!(a.status.is_success(), "{}", a.text);

    // The alerts job runs at start-up.
    app.restart();
    let got = hook.wait_for(2, WAIT);
    let by_event = |name: &str| got.iter().find(|r| r.header("postern-event") == name).unwrap_or_else(|| panic!("no {name}: {got:#?}")).json();
    let spike = by_event("adblock_rate_spike");
    assert_eq!(spike["site_id"], spiking);
    assert_eq!(spike["data"]["adblock_share"], 50.0);
    assert_eq!(spike["data"]["baseline_adblock_share"], 10.0);
    assert_eq!(spike["data"]["last_24h"]["sessions"], 60);
    assert_eq!(spike["data"]["previous_7_days"]["adblock_detected"], 10);
    let silent = by_event("no_data");
    assert_eq!(silent["site_id"], quiet);
    assert_eq!(silent["data"]["threshold_hours"], 3);
    let hours = silent["data"]["hours_without_data"].as_i64().unwrap();
    assert!(hours >= 3, "{silent}");
    let mail = smtp.next_message(WAIT);
    assert_eq!(mail["rcpt_tos"], json!(["oncall@example.com"]));
    assert_eq!(mail["subject"], format!("No data from Site quiet.example.com for {hours} hours"));
    let text = mail["text"].as_str().unwrap();
    assert!(text.contains(&format!("Hours without events: {hours}")) && text.contains("Threshold: 3 h"), "{text}");
    let html = mail["html"].as_str().unwrap();
    assert!(html.contains(&format!("<th align=\"left\">Hours without events</th><td>{hours}</td>")), "{html}");

    // The conditions still hold, but each alert fired already.
    app.restart();
    std::thread::sleep(Duration::from_millis(1500));
    let again = hook.received();
    assert_eq!(again.len(), 2, "{again:#?}");
    assert!(smtp.pending().is_empty(), "one e-mail only");
    let deliveries = app.get(&format!("/v1/sites/{quiet}/deliveries")).expect(200).body["deliveries"].clone();
    let mut seen: Vec<(String, String, String)> = deliveries
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["event"].as_str().unwrap().into(), d["channel"].as_str().unwrap().into(), d["state"].as_str().unwrap().into()))
        .collect();
    seen.sort();
    assert_eq!(seen, vec![
        ("no_data".to_owned(), "email".to_owned(), "delivered".to_owned()),
        ("no_data".to_owned(), "webhook".to_owned(), "delivered".to_owned())
    ]);
}
