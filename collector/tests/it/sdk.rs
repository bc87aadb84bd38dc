//! The SDK's public site config: no key, cacheable, readable from any origin, nothing private.

use serde_json::json;

use crate::support::*;

#[test]
fn the_site_config_is_public_cacheable_and_shows_only_the_wall() {
    let app = TestApp::spawn();
    let site = app.create_site("news.example.com", "Europe/Paris");
    let sid = id(&site);
    app.patch(&format!("/v1/sites/{sid}"), &json!({"revenue_per_1000_pageviews": 3.5})).expect(200);
    let a = app.send(app.request(reqwest::Method::GET, &format!("/v1/sdk/sites/{sid}/config")).header("Origin", "https://anywhere.test"));
    a.expect(200);
    assert_eq!(a.body["site_id"], json!(sid));
    assert_eq!(a.body["active"], json!(true));
    assert_eq!(a.body["wall"], site["wall"]);
    let names: Vec<&str> = a.body["wall"]["variants"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["control", "emotional", "offer"]);
    assert_eq!(a.header("cache-control"), Some("public, max-age=300"));
    assert_eq!(a.header("access-control-allow-origin"), Some("*"));
    assert!(!a.text.contains("3.5") && !a.text.contains("revenue"), "private fields leaked: {}", a.text);

    // A wall change is visible at once; a paused site says so.
    let wall = json!({"kind": "hard", "variants": [{"name": "solo", "weight": 1, "title": "T", "body": "B"}]});
    app.patch(&format!("/v1/sites/{sid}"), &json!({"wall": wall, "status": "paused"})).expect(200);
    let a = app.send(app.request(reqwest::Method::GET, &format!("/v1/sdk/sites/{sid}/config")));
    assert_eq!(a.body["wall"], wall);
    assert_eq!(a.body["active"], json!(false));
}

#[test]
fn unknown_and_deleted_sites_are_404() {
    let app = TestApp::spawn();
    for path in ["/v1/sdk/sites/not-a-uuid/config", "/v1/sdk/sites/6f1c2f4e-8f5b-4a57-9a43-2b0c1e0d9a11/config"] {
        let a = app.send(app.request(reqwest::Method::GET, path));
        a.expect(404);
        assert_eq!(a.error().0, "NOT_FOUND");
    }
    let sid = id(&app.create_site("gone.example.com", "UTC"));
    app.delete(&format!("/v1/sites/{sid}")).expect(204);
    app.send(app.request(reqwest::Method::GET, &format!("/v1/sdk/sites/{sid}/config"))).expect(404);
}

/// The loader, glue and wasm embedded by `scripts/build-sdk`, or, in a binary
/// built without them, a clear 503 (`cargo test` must not need wasm tools).
#[test]
fn sdk_files_are_served_cacheable_to_any_origin_or_refused_as_not_built() {
    let app = TestApp::spawn();
    let loader = app.get("/p/v1.js");
    if loader.status == 503 {
        assert_eq!(loader.error(), ("UNAVAILABLE".into(), None, "not_built".into()));
        assert!(loader.text.contains("scripts/build-sdk"), "{}", loader.text);
        return;
    }
    loader.expect(200);
    assert_eq!(loader.header("content-type"), Some("text/javascript; charset=utf-8"));
    assert_eq!(loader.header("cache-control"), Some("public, max-age=300"));
    assert_eq!(loader.header("access-control-allow-origin"), Some("*"));
    assert!(loader.text.len() < 2048, "the loader stays small: {} bytes", loader.text.len());
    let named = |ext: &str| -> String {
        let path = loader.text.split(['\'', '"']).find(|s| s.starts_with("/p/postern-") && s.ends_with(ext));
        path.unwrap_or_else(|| panic!("the loader names no {ext} file: {}", loader.text)).trim_start_matches("/p/").to_owned()
    };
    for (file, mime) in [(named(".js"), "text/javascript; charset=utf-8"), (named(".wasm"), "application/wasm")] {
        let hash = file.trim_start_matches("postern-").split('.').next().unwrap();
        assert!(hash.len() == 8 && hash.bytes().all(|b| b.is_ascii_hexdigit()), "content-hashed name: {file}");
        let a = app.get(&format!("/p/{file}"));
        a.expect(200);
        assert_eq!(a.header("content-type"), Some(mime), "{file}");
        assert_eq!(a.header("cache-control"), Some("public, max-age=31536000, immutable"), "{file}");
        assert_eq!(a.header("access-control-allow-origin"), Some("*"), "{file}");
    }
    let wasm = app.send(app.request(reqwest::Method::GET, &format!("/p/{}", named(".wasm"))));
    assert!(wasm.text.as_bytes().starts_with(b"\0asm"), "a wasm module");
    app.get("/p/postern-00000000.wasm").expect(404);
}

#[test]
fn the_bait_scripts_and_the_control_echo_their_nonce_and_are_never_cached() {
    let app = TestApp::spawn();
    for path in ["/ads/300x250-banner_300x250.js", "/ads/160x600-skyscraper_160x600.js", "/p/echo.js"] {
        let a = app.get(&format!("{path}?n=9f3a0c1e5b7d2a48"));
        a.expect(200);
        assert!(a.text.contains("9f3a0c1e5b7d2a48"), "{path}: {}", a.text);
        assert_eq!(a.header("cache-control"), Some("no-store"), "{path}");
        assert_eq!(a.header("access-control-allow-origin"), Some("*"), "{path}");
        assert_eq!(a.header("content-type"), Some("text/javascript; charset=utf-8"), "{path}");
        let b = app.get(&format!("{path}?n=%3Cscript%3E"));
        assert!(!b.text.contains("<script>"), "{path}: {}", b.text);
    }
}

#[test]
fn sdk_blocked_is_stored_counted_once_and_in_metrics() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "UTC"));
    let metric = || {
        let text = app.send(app.request(reqwest::Method::GET, "/metrics")).text;
        let line = text.lines().find(|l| l.starts_with("postern_sdk_blocked_total ")).unwrap_or_else(|| panic!("no counter in:\n{text}")).to_owned();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
    };
    assert_eq!(metric(), 0);
    // As the loader sends it: from the site's page, text/plain, with an event_id.
    let body = json!({
        "event_id": "0b7e4c1e-3f2a-4d5b-9c8e-1a2b3c4d5e6f", "site_id": site, "session_id": "blocked-session-1",
        "event_type": "sdk_blocked", "page_url": "https://news.example.com/article",
    });
    for duplicate in [false, true] {
        let a = app.send(
            app.request(reqwest::Method::POST, "/v1/e")
                .header("Origin", "https://news.example.com")
                .header("Content-Type", "text/plain")
                .body(body.to_string()),
        );
        assert!(a.status.is_success(), "{}", a.text);
        assert_eq!(a.body["duplicate"].as_bool().unwrap_or(false), duplicate, "{}", a.text);
    }
    assert_eq!(metric(), 1, "a retried copy is not counted again");
    let events = app.get(&format!("/v1/events/sites/{site}")).body;
    assert_eq!(events["total"], 1, "{events}");
    assert_eq!(events["events"][0]["event_type"], "sdk_blocked");
    let m = app.dashboard(&site, "?days=1").body["metrics"].clone();
    assert_eq!((m["sessions"].as_u64(), m["adblock_detected"].as_u64(), m["walls_displayed"].as_u64()), (Some(1), Some(0), Some(0)), "{m}");
}

#[test]
fn the_demo_site_exists_only_in_demo_mode() {
    let app = TestApp::spawn();
    app.get("/demo/").expect(404);

    let demo = TestApp::spawn_with(&["--demo"]);
    let page = demo.get("/demo/");
    page.expect(200);
    assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
    let html = &page.text;
    assert!(html.contains("src=\"/p/v1.js\""), "{html}");
    let site = html.split("data-site-id=\"").nth(1).and_then(|r| r.split('"').next()).expect("a data-site-id");
    assert!(uuid::Uuid::parse_str(site).is_ok(), "the demo site's id is filled in: {site}");
    demo.get(&format!("/v1/sdk/sites/{site}/config")).expect(200);
    for file in ["harbour-bridge.html", "night-trains.html", "market-gardens.html", "subscribe.html", "style.css"] {
        demo.get(&format!("/demo/{file}")).expect(200);
    }
    demo.get("/demo/nope.html").expect(404);
    // `/demo` without the slash leads to the site (the client follows the redirect).
    let bare = demo.get("/demo");
    bare.expect(200);
    assert!(bare.text.contains("The Daily Courier"));
}
