//! Security headers (issue 34 item 7): `X-Content-Type-Options: nosniff` on
//! every answer, and HSTS only when the collector is reached over https.

use reqwest::Method;
use serde_json::json;

use crate::support::*;

#[test]
fn every_answer_says_nosniff_and_plain_http_gets_no_hsts() {
    let app = TestApp::spawn();
    let site = app.create_site("headers.example.com", "UTC");
    let answers = [
        ("health", app.get("/healthz")),
        ("API", app.get("/v1/sites")),
        ("API without a key", app.send(app.request(Method::GET, "/v1/sites").header("Authorization", "Bearer nope"))),
        ("404", app.get("/no/such/page")),
        ("loader", app.get("/p/v1.js")),
        ("site config", app.get(&format!("/v1/sdk/sites/{}/config", id(&site)))),
        ("dashboard", app.get("/dashboard/login")),
        ("bad event", app.track(&json!({"site_id": "nope"}))),
        ("event", app.track(&event(&id(&site), "sess-headers-1", "pageview", json!({})))),
    ];
    for (what, a) in &answers {
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"), "{what}: {} {:?}", a.status, a.headers);
        assert_eq!(a.header("strict-transport-security"), None, "{what} over plain http");
    }
    assert!(answers.iter().any(|(_, a)| a.status.is_client_error()) && answers.iter().any(|(_, a)| a.status.is_success()));
}

#[test]
fn hsts_is_sent_when_a_trusted_proxy_or_the_public_url_says_https() {
    let app = TestApp::spawn();
    let a = app.send(app.request(Method::GET, "/healthz").header("X-Forwarded-Proto", "https"));
    a.expect(200);
    assert_eq!(a.header("strict-transport-security"), Some("max-age=31536000"));
    let app = TestApp::spawn_with(&["--public-url", "https://stats.example.com"]);
    for path in ["/healthz", "/no/such/page", "/dashboard/login"] {
        let a = app.get(path);
        assert_eq!(a.header("strict-transport-security"), Some("max-age=31536000"), "{path}: {:?}", a.headers);
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"), "{path}");
    }
}
