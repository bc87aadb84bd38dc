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
