//! Ingestion abuse (issue 34 item 2): batches need an ingest key, `Origin:
//! null` is refused, IPv6 clients are counted per /64, variants the site has
//! not configured never count, and a per-site ceiling of events a minute.

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::*;

#[test]
fn a_batch_needs_a_key_with_the_ingest_scope() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("batch-abuse.example.com", "UTC"));
    let events = json!([event(&site, "sess-abuse-batch-1", "pageview", json!({}))]);
    let a = app.send(
        app.request(Method::POST, "/v1/events/batch")
            .header("Origin", "https://batch-abuse.example.com")
            .header("Content-Type", "text/plain")
            .body(events.to_string()),
    );
    a.expect(401);
    assert_eq!(a.error().0, "UNAUTHENTICATED", "{}", a.text);
    let read_only = app.admin(&["create-key", "--account", "acme", "--scopes", "read"]);
    let a = app.post_as(&read_only, "/v1/events/batch", &events);
    a.expect(403);
    assert_eq!(a.error().0, "FORBIDDEN", "{}", a.text);
    app.batch(&events).expect(201);
    assert_eq!(app.events(&site, "").body["total"], 1, "only the keyed batch was stored");
}

#[test]
fn an_opaque_origin_cannot_send_keyless_events() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("null.example.com", "UTC"));
    // The page URL names the site, but anyone can write one.
    let body = event(&site, "sess-abuse-null-1", "pageview", json!({"page_url": "https://null.example.com/a"}));
    let a = app.send(app.request(Method::POST, "/v1/e").header("Origin", "null").header("Content-Type", "text/plain").body(body.to_string()));
    a.expect(401);
    assert_eq!(a.error().0, "UNAUTHENTICATED", "{}", a.text);
    // With a key, the same event is accepted.
    app.send(app.request(Method::POST, "/v1/events/track").header("Origin", "null").bearer_auth(&app.key).json(&body)).expect(201);
    assert_eq!(app.events(&site, "").body["total"], 1);
}

#[test]
fn ipv6_clients_share_one_budget_per_64() {
    let app = TestApp::spawn_with(&["--rate-limit-ingest", "3", "--client-ip-header", "X-Forwarded-For"]);
    let site = id(&app.create_site("six.example.com", "UTC"));
    let from = |ip: &str, n: u32| {
        app.send(
            app.request(Method::POST, "/v1/e")
                .header("Origin", "https://six.example.com")
                .header("X-Forwarded-For", ip)
                .header("Content-Type", "text/plain")
                .body(event(&site, &format!("sess-abuse-six-{n:04}"), "pageview", json!({})).to_string()),
        )
    };
    // Three addresses of one /64 (a subscriber's block) spend one budget.
    for (n, ip) in ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff:ffff:ffff:ffff"].iter().enumerate() {
        from(ip, n as u32).expect(201);
    }
    let a = from("2001:db8:1:2::99", 10);
    a.expect(429);
    assert!(a.header("retry-after").is_some());
    // The next /64 is another client.
    from("2001:db8:1:3::1", 11).expect(201);
}

#[test]
fn variants_the_site_has_not_configured_are_never_aggregated_nor_win() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("rigged.example.com", "UTC"));
    let mut events: Vec<Value> = Vec::new();
    for i in 0..30 {
        let s = format!("sess-abuse-rigged-{i:04}");
        events.push(event(&site, &s, "wall_displayed", json!({"metadata": {"variant": "rigged"}})));
        events.push(event(&site, &s, "conversion_allowlist", json!({"metadata": {"variant": "rigged"}})));
    }
    for i in 0..10 {
        events.push(event(&site, &format!("sess-abuse-honest-{i:04}"), "wall_displayed", json!({"metadata": {"variant": "control"}})));
    }
    let a = app.batch(&Value::Array(events));
    a.expect(201);
    assert_eq!(a.body["accepted"], 70, "{}", a.text);
    let ab = app.ab_testing(&site, "");
    ab.expect(200);
    let variants = ab.body["variants"].as_array().unwrap_or_else(|| panic!("{}", ab.text));
    assert!(variants.iter().all(|v| v["name"] != "rigged"), "{}", ab.text);
    let control = variants.iter().find(|v| v["name"] == "control").unwrap_or_else(|| panic!("{}", ab.text));
    assert_eq!(control["impressions"], 10, "{}", ab.text);
}

#[test]
fn a_site_over_its_ceiling_is_refused_with_429_and_counted() {
    let app = TestApp::spawn_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0", "--rate-limit-site-events", "3"]);
    let busy = id(&app.create_site("busy.example.com", "UTC"));
    let calm = id(&app.create_site("calm.example.com", "UTC"));
    for i in 0..3 {
        app.track(&event(&busy, &format!("sess-abuse-busy-{i:04}"), "pageview", json!({}))).expect(201);
    }
    let a = app.track(&event(&busy, "sess-abuse-busy-over", "pageview", json!({})));
    a.expect(429);
    assert_eq!(a.error().0, "RATE_LIMITED", "{}", a.text);
    let retry: u64 = a.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=60).contains(&retry));
    // A batch for the full site is refused too; the other site is not held back.
    app.batch(&json!([event(&busy, "sess-abuse-busy-b", "pageview", json!({}))])).expect(429);
    app.track(&event(&calm, "sess-abuse-calm-1", "pageview", json!({}))).expect(201);
    assert_eq!(app.events(&busy, "").body["total"], 3);
    let metrics = app.send(app.request(Method::GET, "/metrics")).text;
    assert!(metrics.contains("postern_site_events_refused_total 2\n"), "{metrics}");
}
