//! Authentication and authorization: bearer keys, scopes, key-less browser ingestion by origin, and CORS.

use crate::support::*;
use reqwest::Method;
use serde_json::{json, Value};

#[track_caller]
fn assert_unauthenticated(a: &Answer, reason: &str) {
    a.expect(401);
    let (code, field, r) = a.error();
    assert_eq!(code, "UNAUTHENTICATED", "{}", a.text);
    assert_eq!(field.as_deref(), Some("Authorization"), "{}", a.text);
    assert_eq!(r, reason, "{}", a.text);
}

#[track_caller]
fn assert_forbidden(a: &Answer) -> (Option<String>, String) {
    a.expect(403);
    let (code, field, reason) = a.error();
    assert_eq!(code, "FORBIDDEN", "{}", a.text);
    (field, reason)
}

/// POST /v1/events/track with no key and no Origin: only the page URL vouches.
fn track_without_origin(app: &TestApp, event: &Value) -> Answer {
    app.send(
        app.request(Method::POST, "/v1/events/track")
            .header("Content-Type", "text/plain")
            .body(event.to_string()),
    )
}

fn preflight(app: &TestApp, origin: &str) -> Answer {
    app.send(
        app.request(Method::OPTIONS, "/v1/events/track")
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .header("Access-Control-Request-Headers", "content-type"),
    )
}

/// An event whose page is on `example.com`.
fn example_event(site: &str, session: &str) -> Value {
    event(site, session, "adblock_detected", json!({"page_url": "https://www.example.com/news/1"}))
}

#[test]
fn a_missing_authorization_header_is_401_required() {
    let app = TestApp::spawn();
    for (method, path) in [
        (Method::GET, "/v1/sites"),
        (Method::POST, "/v1/sites"),
        (Method::GET, "/v1/keys"),
        (Method::GET, "/v1/sites/00000000-0000-0000-0000-000000000000"),
        (Method::GET, "/v1/analytics/sites/00000000-0000-0000-0000-000000000000/dashboard"),
        (Method::GET, "/v1/events/sites/00000000-0000-0000-0000-000000000000"),
    ] {
        let a = app.send(app.request(method.clone(), path));
        assert_unauthenticated(&a, "required");
    }
}

#[test]
fn malformed_authorization_headers_are_401() {
    let app = TestApp::spawn();
    for header in ["Basic x", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Token pst_abc", &app.key.clone(), "Bearer  "] {
        let a = app.send(app.request(Method::GET, "/v1/sites").header("Authorization", header));
        assert_eq!(a.status.as_u16(), 401, "Authorization: {header:?}: {}", a.text);
        let (code, field, _) = a.error();
        assert_eq!(code, "UNAUTHENTICATED", "{header:?}");
        assert_eq!(field.as_deref(), Some("Authorization"), "{header:?}");
    }
}

#[test]
fn unknown_keys_are_401() {
    let app = TestApp::spawn();
    let mut almost = app.key.clone();
    let last = almost.pop().unwrap();
    almost.push(if last == 'a' { 'b' } else { 'a' });
    for key in ["pst_doesnotexist", "sk_live_123", almost.as_str(), &format!("pst_{}", "x".repeat(500))] {
        let a = app.get_as(key, "/v1/sites");
        assert_eq!(a.status.as_u16(), 401, "key {key:?}: {}", a.text);
        let (code, field, reason) = a.error();
        assert_eq!(code, "UNAUTHENTICATED");
        assert_eq!(field.as_deref(), Some("Authorization"));
        assert_eq!(reason, "invalid", "key {key:?}");
    }
    // The real key, for contrast.
    app.get("/v1/sites").expect(200);
}

#[test]
fn an_ingest_only_key_cannot_read_or_write() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let ingest = app.admin(&["create-key", "--account", "acme", "--scopes", "ingest"]);
    for path in [
        "/v1/sites".to_owned(),
        format!("/v1/sites/{sid}"),
        format!("/v1/analytics/sites/{sid}/dashboard"),
        format!("/v1/events/sites/{sid}"),
        "/v1/keys".to_owned(),
    ] {
        let a = app.get_as(&ingest, &path);
        let (field, reason) = assert_forbidden(&a);
        assert_eq!(field.as_deref(), Some("Authorization"), "{path}");
        assert_eq!(reason, "insufficient_scope", "{path}");
    }
    assert_forbidden(&app.post_as(&ingest, "/v1/sites", &json!({"name": "x", "domain": "x.com"})));
    // But it can ingest.
    let t = app.post_as(&ingest, "/v1/events/track", &event(&sid, "session-ingest-1", "adblock_detected", json!({})));
    t.expect(201);
    assert!(t.body["id"].is_string(), "{}", t.text);
}

#[test]
fn a_read_only_key_can_read_but_not_write_or_ingest() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let read = app.admin(&["create-key", "--account", "acme", "--scopes", "read"]);
    app.get_as(&read, "/v1/sites").expect(200);
    app.get_as(&read, &format!("/v1/analytics/sites/{sid}/dashboard")).expect(200);
    let (field, reason) = assert_forbidden(&app.post_as(&read, "/v1/sites", &json!({"name": "x", "domain": "x.example.com"})));
    assert_eq!(field.as_deref(), Some("Authorization"));
    assert_eq!(reason, "insufficient_scope");
    assert_eq!(app.get("/v1/sites").body["sites"].as_array().unwrap().len(), 1, "nothing was created");
    assert_forbidden(&app.post_as(&read, "/v1/events/track", &event(&sid, "session-read-1", "adblock_detected", json!({}))));
}

#[test]
fn browsers_may_track_from_the_sites_domain_and_subdomains() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    for (i, origin) in ["https://example.com", "https://www.example.com", "http://a.b.example.com:8080", "https://WWW.EXAMPLE.COM"]
        .iter()
        .enumerate()
    {
        let a = app.track_from_browser(origin, &example_event(&sid, &format!("browser-session-{i}")));
        assert_eq!(a.status.as_u16(), 201, "origin {origin}: {}", a.text);
        assert!(a.body["id"].is_string(), "{}", a.text);
        assert_eq!(a.header("access-control-allow-origin"), Some(*origin), "CORS must echo the origin {origin}");
        assert_ne!(a.header("access-control-allow-origin"), Some("*"));
    }
    let listed = app.events(&sid, "");
    listed.expect(200);
    assert_eq!(listed.body["total"], 4, "{}", listed.text);
}

#[test]
fn lookalike_and_foreign_origins_are_refused() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    for origin in ["https://evil-example.com", "https://badexample.com", "https://example.com.evil.net", "https://com", "https://other.org"] {
        // The page URL claims the right domain; the Origin is what counts.
        let a = app.track_from_browser(origin, &example_event(&sid, "lookalike-session"));
        assert_eq!(a.status.as_u16(), 401, "origin {origin} must be refused: {}", a.text);
        let (code, field, _) = a.error();
        assert_eq!(code, "UNAUTHENTICATED");
        assert_eq!(field.as_deref(), Some("Authorization"));
        assert_eq!(a.header("access-control-allow-origin"), None, "no CORS grant for {origin}");
    }
    assert_eq!(app.events(&sid, "").body["total"], 0, "nothing was stored");
}

#[test]
fn an_origin_of_one_site_cannot_track_for_another_site() {
    let app = TestApp::spawn();
    let _mine = app.create_site("example.com", "UTC");
    let victim = app.create_site("victim.org", "UTC");
    let a = app.track_from_browser(
        "https://example.com",
        &event(&id(&victim), "cross-site-session", "adblock_detected", json!({"page_url": "https://victim.org/"})),
    );
    assert_unauthenticated(&a, "origin_mismatch");
    assert_eq!(app.events(&id(&victim), "").body["total"], 0);
}

#[test]
fn without_origin_the_page_url_must_be_on_the_domain() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let ok = track_without_origin(&app, &example_event(&sid, "no-origin-session-1"));
    ok.expect(201);
    assert!(ok.body["id"].is_string(), "{}", ok.text);
    assert!(ok.body["received_at"].is_string(), "{}", ok.text);

    for page in [
        "https://evil-example.com/x",
        "https://example.com@evil.net/",
        "https://evil.net/?ref=example.com",
        "https://evil.net/#example.com",
        "https://example.com.evil.net/",
    ] {
        let refused = track_without_origin(&app, &event(&sid, "no-origin-session-2", "adblock_detected", json!({"page_url": page})));
        assert_eq!(refused.status.as_u16(), 401, "page_url {page}: {}", refused.text);
        let (code, field, _) = refused.error();
        assert_eq!(code, "UNAUTHENTICATED");
        assert_eq!(field.as_deref(), Some("Authorization"));
    }
    assert_eq!(app.events(&sid, "").body["total"], 1);
}

#[test]
fn keyless_ingestion_for_an_unknown_site_is_404() {
    let app = TestApp::spawn();
    app.create_site("example.com", "UTC");
    let a = app.track_from_browser("https://example.com", &example_event(&uuid::Uuid::new_v4().to_string(), "unknown-site-1"));
    a.expect(404);
    let (code, field, _) = a.error();
    assert_eq!(code, "NOT_FOUND");
    assert_eq!(field.as_deref(), Some("site_id"));
}

#[test]
fn cors_preflight_is_answered_for_site_origins_only() {
    let app = TestApp::spawn();
    app.create_site("example.com", "UTC");
    let a = preflight(&app, "https://www.example.com");
    a.expect(204);
    let methods = a.header("access-control-allow-methods").expect("access-control-allow-methods");
    assert!(methods.to_ascii_uppercase().contains("POST"), "{methods}");
    assert_eq!(a.header("access-control-allow-origin"), Some("https://www.example.com"));
    let allowed_headers = a.header("access-control-allow-headers").unwrap_or_default().to_ascii_lowercase();
    assert!(allowed_headers.contains("content-type"), "{allowed_headers}");

    for origin in ["https://evil-example.com", "https://unknown.net"] {
        let refused = preflight(&app, origin);
        refused.expect(403);
        let (code, _, _) = refused.error();
        assert_eq!(code, "FORBIDDEN");
        assert_eq!(refused.header("access-control-allow-origin"), None, "{origin}");
        assert_eq!(refused.header("access-control-allow-methods"), None, "{origin}");
    }
    let no_origin = app.send(app.request(Method::OPTIONS, "/v1/events/track"));
    no_origin.expect(403);
    no_origin.error();
}

#[test]
fn preflight_works_on_the_neutral_alias_and_batch_too() {
    let app = TestApp::spawn();
    app.create_site("example.com", "UTC");
    for path in ["/v1/e", "/v1/events/batch"] {
        let a = app.send(
            app.request(Method::OPTIONS, path)
                .header("Origin", "https://example.com")
                .header("Access-Control-Request-Method", "POST"),
        );
        assert_eq!(a.status.as_u16(), 204, "{path}: {}", a.text);
        assert_eq!(a.header("access-control-allow-origin"), Some("https://example.com"), "{path}");
    }
}

#[test]
fn non_ingestion_responses_carry_no_cors_headers() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let origin = "https://example.com";
    let answers = [
        app.send(app.request(Method::GET, "/v1/sites").bearer_auth(&app.key).header("Origin", origin)),
        app.send(app.request(Method::GET, &format!("/v1/sites/{sid}")).bearer_auth(&app.key).header("Origin", origin)),
        app.send(app.request(Method::GET, &format!("/v1/events/sites/{sid}")).bearer_auth(&app.key).header("Origin", origin)),
        app.send(app.request(Method::GET, "/v1/keys").bearer_auth(&app.key).header("Origin", origin)),
        app.send(app.request(Method::GET, "/v1/sites").header("Origin", origin)),
        app.send(
            app.request(Method::OPTIONS, "/v1/sites")
                .header("Origin", origin)
                .header("Access-Control-Request-Method", "GET"),
        ),
    ];
    for a in &answers {
        assert!(a.status.as_u16() != 204 || a.header("access-control-allow-methods").is_none(), "{:?}", a.headers);
        assert_eq!(a.header("access-control-allow-origin"), None, "status {}: {:?}", a.status, a.headers);
    }
    assert_eq!(answers[0].status.as_u16(), 200);
    assert_eq!(answers[4].status.as_u16(), 401);
}

#[test]
fn an_ingest_key_cannot_track_for_another_accounts_site() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let other_ingest = app.admin(&["create-key", "--account", "other", "--scopes", "ingest"]);
    let a = app.post_as(&other_ingest, "/v1/events/track", &event(&sid, "foreign-session", "adblock_detected", json!({})));
    a.expect(404);
    let (code, field, _) = a.error();
    assert_eq!(code, "NOT_FOUND");
    assert_eq!(field.as_deref(), Some("site_id"));
    assert_eq!(app.events(&sid, "").body["total"], 0);
}

#[test]
fn a_paused_site_refuses_events_until_resumed() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    app.patch(&format!("/v1/sites/{sid}"), &json!({"status": "paused"})).expect(200);

    let keyed = app.track(&event(&sid, "paused-session-1", "adblock_detected", json!({})));
    let (field, _) = assert_forbidden(&keyed);
    assert_eq!(field.as_deref(), Some("site_id"), "{}", keyed.text);
    let browser = app.track_from_browser("https://example.com", &example_event(&sid, "paused-session-2"));
    assert_forbidden(&browser);
    assert_eq!(app.events(&sid, "").body["total"], 0);

    app.patch(&format!("/v1/sites/{sid}"), &json!({"status": "active"})).expect(200);
    app.track(&event(&sid, "paused-session-3", "adblock_detected", json!({}))).expect(201);
    assert_eq!(app.events(&sid, "").body["total"], 1);
}

#[test]
fn a_deleted_sites_domain_no_longer_grants_cors() {
    let app = TestApp::spawn();
    let site = app.create_site("gone.example", "UTC");
    preflight(&app, "https://gone.example").expect(204);
    app.delete(&format!("/v1/sites/{}", id(&site))).expect(204);
    preflight(&app, "https://gone.example").expect(403);
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    // RFC 9110 §11.1: the authentication scheme is a case-insensitive token.
    let app = TestApp::spawn();
    for scheme in ["Bearer", "bearer", "BEARER", "BeArEr"] {
        let a = app.send(app.request(Method::GET, "/v1/sites").header("Authorization", format!("{scheme} {}", app.key)));
        assert_eq!(a.status.as_u16(), 200, "Authorization: {scheme} <key>: {}", a.text);
    }
}

#[test]
fn a_key_vouches_for_server_side_ingestion_whatever_the_origin() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    let a = app.send(
        app.request(Method::POST, "/v1/events/track")
            .bearer_auth(&app.key)
            .header("Origin", "https://elsewhere.net")
            .json(&event(&sid, "server-side-1", "adblock_detected", json!({"page_url": "https://elsewhere.net/"}))),
    );
    a.expect(201);
    assert_eq!(a.header("access-control-allow-origin"), None, "no CORS grant for a foreign origin");
}

#[test]
fn browser_ingestion_follows_a_domain_change() {
    let app = TestApp::spawn();
    let site = app.create_site("example.com", "UTC");
    let sid = id(&site);
    app.patch(&format!("/v1/sites/{sid}"), &json!({"domain": "example.org"})).expect(200);

    let old = app.track_from_browser("https://www.example.com", &example_event(&sid, "moved-session-1"));
    old.expect(401);
    assert_eq!(old.error().0, "UNAUTHENTICATED");
    preflight(&app, "https://www.example.com").expect(403);

    let new = app.track_from_browser(
        "https://www.example.org",
        &event(&sid, "moved-session-2", "adblock_detected", json!({"page_url": "https://www.example.org/"})),
    );
    new.expect(201);
    assert_eq!(new.header("access-control-allow-origin"), Some("https://www.example.org"));
    preflight(&app, "https://www.example.org").expect(204);
}
