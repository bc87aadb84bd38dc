//! Where webhooks may go: a default collector refuses every non-public
//! destination when an integration is created (API and dashboard) and again
//! when a delivery connects, and `--webhook-allow-cidr` opens a range.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::dashboard::{create_user, Browser};
use crate::receivers::HttpReceiver;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);

/// Polls the site's deliveries until `delivery` is no longer pending; returns it.
#[track_caller]
fn finished(app: &TestApp, site: &str, delivery: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let list = app.get(&format!("/v1/sites/{site}/deliveries")).expect(200).body["deliveries"].clone();
        if let Some(d) = list.as_array().unwrap().iter().find(|d| d["id"] == delivery && d["state"] != "pending") {
            return d.clone();
        }
        assert!(Instant::now() < deadline, "delivery {delivery} never finished: {list:#}\nlog:\n{}", app.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn send_test(app: &TestApp, site: &str, integration: &Value) -> String {
    let path = format!("/v1/sites/{site}/integrations/{}/test", integration["id"].as_str().unwrap());
    app.post(&path, &json!({})).expect(201).body["delivery_id"].as_str().unwrap().to_owned()
}

#[test]
fn internal_destinations_are_refused_when_an_integration_is_created() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("hooks.example.com", "UTC"));
    let path = format!("/v1/sites/{site}/integrations");
    let refused = [
        ("IPv4 loopback", "http://127.0.0.1:9/hook"),
        ("IPv4 loopback, short form", "http://127.1/hook"),
        ("IPv6 loopback", "http://[::1]:9/hook"),
        ("link-local: cloud metadata", "http://169.254.169.254/latest/meta-data/"),
        ("private 10/8", "http://10.0.0.5/hook"),
        ("private 172.16/12", "https://172.16.3.4/hook"),
        ("private 192.168/16", "http://192.168.1.10:8080/hook"),
        ("carrier-grade NAT", "http://100.64.0.1/hook"),
        ("unspecified", "http://0.0.0.0:9/hook"),
        ("IPv6 unspecified", "http://[::]:9/hook"),
        ("multicast", "http://224.0.0.251/hook"),
        ("IPv6 multicast", "http://[ff02::1]/hook"),
        ("IPv4-mapped loopback", "http://[::ffff:127.0.0.1]:9/hook"),
        ("NAT64 of loopback", "http://[64:ff9b::7f00:1]/hook"),
        ("6to4 of a private address", "http://[2002:c0a8:101::1]/hook"),
        ("unique local", "http://[fd00::1]/hook"),
        ("unique local fc00::/7", "http://[fc00::1]/hook"),
        ("IPv6 link-local", "http://[fe80::1]/hook"),
        ("documentation", "http://192.0.2.10/hook"),
        ("benchmarking", "http://198.18.0.1/hook"),
        ("credentials before a private host", "http://user:pass@10.1.2.3/hook"),
        ("a name resolving to loopback", "http://localhost:9/hook"),
    ];
    for kind in ["webhook", "slack"] {
        for (what, url) in refused {
            let a = app.post(&path, &json!({"kind": kind, "url": url}));
            assert_eq!(a.status, 400, "{kind} to {what} ({url}) must be refused: {}", a.text);
            let (code, field, reason) = a.error();
            assert_eq!((code.as_str(), field.as_deref(), reason.as_str()), ("INVALID_REQUEST", Some("url"), "invalid"), "{what}: {}", a.text);
            let message = a.body["error"]["message"].as_str().unwrap();
            assert!(message.contains("public address") && message.contains("--webhook-allow-cidr"), "{what}: {message}");
        }
    }
    assert_eq!(app.get(&path).expect(200).body["integrations"], json!([]), "nothing was created");
    // A public destination is accepted (a name that does not resolve here is checked again at each send).
    app.post(&path, &json!({"kind": "webhook", "url": "https://hooks.example.com/postern"})).expect(201);
    app.post(&path, &json!({"kind": "slack", "url": "https://93.184.215.14/services/T/B/X"})).expect(201);

    // The dashboard's form applies the same rule.
    create_user(&app, "ann@example.com", "admin");
    let mut b = Browser::new(&app);
    b.login("ann@example.com");
    let page = format!("/dashboard/sites/{site}/integrations");
    let token = b.token(&page);
    for url in ["http://169.254.169.254/latest/meta-data/", "http://[::ffff:127.0.0.1]/x", "http://localhost:9/x"] {
        let a = b.post(&page, &[("csrf", &token), ("kind", "webhook"), ("name", "Inside"), ("url", url), ("events", "no_data")]);
        assert_eq!(a.status, 400, "{url}: {}", a.text);
        assert!(a.text.contains("url must reach a public address"), "{url}: {}", a.text);
    }
    assert_eq!(app.get(&path).expect(200).body["integrations"].as_array().unwrap().len(), 2);
}

#[test]
fn an_allowed_range_reaches_a_receiver_on_loopback_by_address_and_by_name() {
    let hook = HttpReceiver::start(&[]);
    let app = TestApp::spawn_reaching_loopback();
    let site = id(&app.create_site("hooks.example.com", "UTC"));
    let path = format!("/v1/sites/{site}/integrations");
    let by_address = app.post(&path, &json!({"kind": "webhook", "url": hook.url})).expect(201).body.clone();
    let by_name = hook.url.replace("127.0.0.1", "localhost");
    let by_name = app.post(&path, &json!({"kind": "slack", "url": by_name})).expect(201).body.clone();
    for integration in [&by_address, &by_name] {
        let delivery = send_test(&app, &site, integration);
        let d = finished(&app, &site, &delivery);
        assert_eq!(d["state"], "delivered", "{d:#}");
    }
    assert_eq!(hook.wait_for(2, WAIT).len(), 2);
    // Only the allowed range: IPv6 loopback and private ranges stay refused.
    for url in ["http://[::1]:9/hook", "http://10.0.0.5/hook"] {
        app.post(&path, &json!({"kind": "webhook", "url": url})).expect(400);
    }
}

#[test]
fn a_destination_forbidden_at_send_time_fails_without_a_connection() {
    let hook = HttpReceiver::start(&[]);
    let mut app = TestApp::spawn_reaching_loopback();
    let site = id(&app.create_site("hooks.example.com", "UTC"));
    let path = format!("/v1/sites/{site}/integrations");
    // Created while loopback was allowed; the operator then takes the range away.
    let literal = app.post(&path, &json!({"kind": "webhook", "url": hook.url})).expect(201).body.clone();
    let name = app.post(&path, &json!({"kind": "slack", "url": hook.url.replace("127.0.0.1", "localhost")})).expect(201).body.clone();
    app.restart_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0", "--delivery-retry-base-ms", "100"]);

    for (integration, what) in [(&literal, "127.0.0.1 is not a public address: loopback"), (&name, "localhost resolves to an address that is not public: loopback")] {
        let delivery = send_test(&app, &site, integration);
        let d = finished(&app, &site, &delivery);
        assert_eq!(d["state"], "failed", "{d:#}");
        let attempts = d["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "a forbidden destination is not retried: {d:#}");
        assert!(attempts[0]["status"].is_null(), "nothing answered: {d:#}");
        let error = attempts[0]["error"].as_str().unwrap();
        assert!(error.starts_with(what) && error.ends_with("no connection was made"), "{error}");
        assert!(!error.contains("secret-token"), "errors never carry the URL's path: {error}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(hook.received().is_empty(), "the receiver was never reached: {:#?}", hook.received());
}
