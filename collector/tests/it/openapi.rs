//! The OpenAPI document served at GET /v1/openapi.json describes the real
//! route table: every route is there, protected operations list 401, and
//! every `$ref` points at something that exists.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::support::*;

/// The route table of `collector/src/api/mod.rs`, in OpenAPI template form.
const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/sites"),
    ("post", "/v1/sites"),
    ("get", "/v1/sites/{id}"),
    ("get", "/v1/sites/{id}/export"),
    ("patch", "/v1/sites/{id}"),
    ("delete", "/v1/sites/{id}"),
    ("get", "/v1/analytics/sites/{id}/dashboard"),
    ("get", "/v1/analytics/sites/{id}/conversions"),
    ("get", "/v1/analytics/sites/{id}/ab-testing"),
    ("post", "/v1/events/track"),
    ("post", "/v1/e"),
    ("post", "/v1/events/batch"),
    ("get", "/v1/events/sites/{id}"),
    ("get", "/v1/keys"),
    ("post", "/v1/keys"),
    ("delete", "/v1/keys/{id}"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/v1/openapi.json"),
    ("get", "/v1/sdk/sites/{id}/config"),
    ("get", "/v1/sites/{id}/integrations"),
    ("post", "/v1/sites/{id}/integrations"),
    ("delete", "/v1/sites/{id}/integrations/{iid}"),
    ("post", "/v1/sites/{id}/integrations/{iid}/test"),
    ("get", "/v1/sites/{id}/integrations/{iid}/deliveries"),
    ("get", "/v1/sites/{id}/deliveries"),
    ("get", "/v1/sites/{id}/reports"),
    ("post", "/v1/sites/{id}/reports"),
    ("get", "/v1/sites/{id}/reports/{rid}"),
    ("patch", "/v1/sites/{id}/reports/{rid}"),
    ("delete", "/v1/sites/{id}/reports/{rid}"),
    ("post", "/v1/sites/{id}/reports/{rid}/send"),
    ("get", "/v1/sites/{id}/reports/{rid}/runs"),
    ("get", "/v1/report-runs/{run_id}"),
    ("get", "/p/echo.js"),
    ("get", "/p/{file}"),
    ("get", "/ads/300x250-banner_300x250.js"),
    ("get", "/ads/160x600-skyscraper_160x600.js"),
];

/// Paths that need no key at all.
const KEYLESS: &[&str] =
    &["/healthz", "/readyz", "/metrics", "/v1/openapi.json", "/v1/sdk/sites/{id}/config", "/p/echo.js", "/p/{file}", "/ads/300x250-banner_300x250.js", "/ads/160x600-skyscraper_160x600.js"];

/// Paths that take a key with the ingest scope or a browser Origin instead.
const INGEST: &[&str] = &["/v1/events/track", "/v1/e", "/v1/events/batch"];

const METHODS: &[&str] = &["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/// Fetches the document without a key (it must not need one).
fn fetch(app: &TestApp) -> Value {
    let a = app.send(app.request(reqwest::Method::GET, "/v1/openapi.json"));
    a.expect(200);
    assert!(
        a.header("content-type").is_some_and(|c| c.starts_with("application/json")),
        "content-type: {:?}",
        a.header("content-type")
    );
    assert!(a.body.is_object(), "the document is not a JSON object: {}", a.text);
    a.body
}

/// Every (method, path, operation) of the document.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths object") {
        for (method, op) in item.as_object().expect("path item object") {
            if METHODS.contains(&method.as_str()) {
                out.push((method.clone(), path.clone(), op.clone()));
            }
        }
    }
    out
}

/// The security requirements in force for an operation (its own, else the document's).
fn effective_security<'a>(doc: &'a Value, op: &'a Value) -> &'a Value {
    op.get("security").unwrap_or(&doc["security"])
}

/// Resolves a local JSON pointer reference (`#/components/...`).
fn resolve<'a>(doc: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    // JSON pointer tokens are already `~0`/`~1` escaped, which `Value::pointer` understands.
    doc.pointer(pointer)
}

fn collect_refs(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if k == "$ref" {
                    out.push((at.to_owned(), child.as_str().unwrap_or("<not a string>").to_owned()));
                } else {
                    collect_refs(child, &format!("{at}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                collect_refs(child, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_document_is_openapi_3_1_and_needs_no_key() {
    let app = TestApp::spawn();
    let doc = fetch(&app);
    let version = doc["openapi"].as_str().expect("openapi is a string");
    assert!(version.starts_with("3.1"), "openapi = {version}");
    assert!(doc["info"]["title"].as_str().is_some_and(|t| !t.is_empty()), "info.title");
    assert!(doc["info"]["version"].as_str().is_some_and(|v| !v.is_empty()), "info.version");
    assert!(doc["servers"].as_array().is_some_and(|s| !s.is_empty()), "servers");

    // The API key scheme exists and is applied globally.
    let scheme = &doc["components"]["securitySchemes"]["ApiKey"];
    assert_eq!(scheme["type"], "http", "{scheme}");
    assert_eq!(scheme["scheme"], "bearer", "{scheme}");
    assert_eq!(doc["security"], json!([{ "ApiKey": [] }]));
}

#[test]
fn every_route_is_documented_with_a_response_and_nothing_else_is() {
    let app = TestApp::spawn();
    let doc = fetch(&app);
    let documented: BTreeSet<(String, String)> = operations(&doc).into_iter().map(|(m, p, _)| (m, p)).collect();

    for (method, path) in ROUTES {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{} {path} is not documented", method.to_uppercase());
        let responses = op["responses"].as_object().unwrap_or_else(|| panic!("{method} {path} has no responses"));
        assert!(!responses.is_empty(), "{method} {path} lists no response");
        assert!(
            responses.keys().any(|s| s.starts_with('2')),
            "{method} {path} lists no success response: {:?}",
            responses.keys().collect::<Vec<_>>()
        );
    }

    // Beyond the route table, only the CORS preflights the gateway answers.
    let known: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .chain(INGEST.iter().map(|p| ("options".to_owned(), p.to_string())))
        .collect();
    let extra: Vec<_> = documented.difference(&known).collect();
    assert!(extra.is_empty(), "documented operations the server does not have: {extra:?}");
}

#[test]
fn operations_that_need_a_key_list_401_and_the_keyless_ones_need_none() {
    let app = TestApp::spawn();
    let doc = fetch(&app);
    for (method, path, op) in operations(&doc) {
        let security = effective_security(&doc, &op).as_array().unwrap_or_else(|| panic!("{method} {path}: security"));
        let needs_auth = !security.is_empty();
        if KEYLESS.contains(&path.as_str()) || method == "options" {
            assert!(!needs_auth, "{method} {path} needs no key but declares {security:?}");
            continue;
        }
        assert!(needs_auth, "{method} {path} must require the API key");
        assert!(op["responses"]["401"].is_object(), "{method} {path} requires auth but does not list 401");
        let alternatives: Vec<&Value> = security.iter().collect();
        assert!(
            alternatives.iter().any(|r| r.get("ApiKey").is_some()),
            "{method} {path}: the ApiKey scheme is not among {security:?}"
        );
        let keyless_allowed = alternatives.iter().any(|r| r.as_object().is_some_and(|o| o.is_empty()));
        assert_eq!(
            keyless_allowed,
            INGEST.contains(&path.as_str()),
            "{method} {path}: only the ingestion paths may be called without a key ({security:?})"
        );
    }
}

#[test]
fn limited_operations_document_the_rate_limit_headers() {
    let app = TestApp::spawn();
    let doc = fetch(&app);
    for (method, path, op) in operations(&doc) {
        if ["/healthz", "/readyz", "/metrics"].contains(&path.as_str()) {
            assert!(op["responses"]["429"].is_null(), "{method} {path} is never rate limited");
            continue;
        }
        let tmr = resolve_response(&doc, &op["responses"]["429"]).unwrap_or_else(|| panic!("{method} {path} lacks 429"));
        assert!(tmr["headers"]["Retry-After"].is_object(), "{method} {path}: 429 without Retry-After");
        let (status, success) = op["responses"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(s, _)| s.starts_with('2'))
            .expect("a success response");
        let success = resolve_response(&doc, success).unwrap();
        for h in ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"] {
            assert!(success["headers"][h].is_object(), "{method} {path} {status}: header {h} not documented");
        }
    }
}

fn resolve_response<'a>(doc: &'a Value, r: &'a Value) -> Option<&'a Value> {
    match r.get("$ref").and_then(Value::as_str) {
        Some(reference) => resolve(doc, reference),
        None => r.is_object().then_some(r),
    }
}

#[test]
fn every_ref_resolves_to_an_existing_component() {
    let app = TestApp::spawn();
    let doc = fetch(&app);
    let mut refs = Vec::new();
    collect_refs(&doc, "#", &mut refs);
    assert!(refs.len() > 50, "suspiciously few $ref: {}", refs.len());
    for (at, reference) in &refs {
        assert!(reference.starts_with("#/components/"), "{at}: {reference} is not a local component reference");
        assert!(resolve(&doc, reference).is_some_and(Value::is_object), "{at}: {reference} does not resolve");
    }
    for name in [
        "Site",
        "SiteCreate",
        "SiteUpdate",
        "WallConfig",
        "TrackedEvent",
        "StoredEvent",
        "TrackAck",
        "BatchResult",
        "DashboardMetrics",
        "ConversionsTimeline",
        "AbVariantResult",
        "ApiKey",
        "ApiKeyCreated",
        "Error",
    ] {
        assert!(doc["components"]["schemas"][name].is_object(), "components.schemas.{name} is missing");
    }
}

/// The hard-coded route table is the server's: each (method, path) is routed
/// (no "no endpoint" 404, no 405), using requests that change nothing.
#[test]
fn the_route_list_matches_the_server() {
    let app = TestApp::spawn();
    let unknown = "00000000-0000-4000-8000-000000000000";
    for (method, path) in ROUTES {
        let url = path.replace("{id}", unknown);
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let mut req = app.request(m, &url).bearer_auth(&app.key);
        if *method == "post" || *method == "patch" {
            // Invalid bodies: nothing is created.
            let body = match *path {
                "/v1/events/batch" => json!([]),
                "/v1/keys" => json!({ "bogus": true }),
                _ => json!({}),
            };
            req = req.json(&body);
        }
        let a = app.send(req);
        assert_ne!(a.status.as_u16(), 405, "{method} {path}: {}", a.text);
        if a.status.as_u16() == 404 {
            let (_, field, _) = a.error();
            assert!(field.is_some(), "{method} {path} is not routed: {}", a.text);
        }
        // A binary built without the browser SDK (plain `cargo test`) says so on /p/.
        if a.status.as_u16() == 503 && *path == "/p/{file}" {
            assert_eq!(a.error().2, "not_built", "{}", a.text);
            continue;
        }
        assert!(a.status.as_u16() < 500, "{method} {path}: {} {}", a.status, a.text);
    }
}

/// Every documented path answers a method the document does not list for it
/// with 405, the spec's error shape, and an `Allow` header naming exactly the
/// documented methods (HEAD wherever GET is).
#[test]
fn a_wrong_method_is_405_with_the_documented_allow() {
    let app = TestApp::spawn();
    let doc = fetch(&app);
    let unknown = "00000000-0000-4000-8000-000000000000";
    for (path, item) in doc["paths"].as_object().expect("paths object") {
        let mut documented: BTreeSet<String> =
            item.as_object().unwrap().keys().filter(|m| METHODS.contains(&m.as_str())).map(|m| m.to_uppercase()).collect();
        if documented.contains("GET") {
            documented.insert("HEAD".to_owned());
        }
        let allow = documented.iter().cloned().collect::<Vec<_>>().join(", ");
        let url = path.replace("{id}", unknown).replace("{iid}", unknown).replace("{rid}", unknown).replace("{run_id}", unknown).replace("{file}", "x.js");
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"].into_iter().filter(|m| !documented.contains(*m)) {
            let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let a = app.send(app.request(m, &url).bearer_auth(&app.key));
            assert_eq!(a.status.as_u16(), 405, "{method} {path}: {}", a.text);
            assert_eq!(a.header("allow"), Some(allow.as_str()), "{method} {path}");
            assert_eq!(a.error(), ("INVALID_REQUEST".to_owned(), Some("method".to_owned()), "method_not_allowed".to_owned()), "{method} {path}");
        }
    }
    // An unknown path is a 404 and names no methods.
    let a = app.send(app.request(reqwest::Method::PUT, "/v1/nothing-here").bearer_auth(&app.key));
    a.expect(404);
    assert_eq!(a.header("allow"), None);
}

/// A batch answers 201 only when it stored something: one whose every item
/// was refused answers 200 with the per-item errors, as the document says.
#[test]
fn a_batch_of_only_refused_items_is_200_not_201() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "UTC"));
    let good = json!({"site_id": site, "session_id": "batch-status-1", "event_type": "pageview", "page_url": "https://news.example.com/a"});
    let mut bad = good.clone();
    bad["timestamp"] = json!("");

    let a = app.batch(&json!([bad.clone(), bad.clone()]));
    a.expect(200);
    assert_eq!((a.body["accepted"].as_u64(), a.body["rejected"].as_u64()), (Some(0), Some(2)), "{}", a.text);
    assert_eq!(a.body["results"][1]["error"]["details"]["field"], "timestamp", "{}", a.text);

    let a = app.batch(&json!([bad, good]));
    a.expect(201);
    assert_eq!((a.body["accepted"].as_u64(), a.body["rejected"].as_u64()), (Some(1), Some(1)), "{}", a.text);
}

/// The document's timezone names are exactly those the server parses.
#[test]
fn the_timezone_enum_is_the_servers_list() {
    let app = TestApp::spawn();
    let doc = fetch(&app);
    let listed: BTreeSet<&str> =
        doc["components"]["schemas"]["Timezone"]["enum"].as_array().expect("Timezone enum").iter().map(|v| v.as_str().unwrap()).collect();
    let parsed: BTreeSet<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    assert_eq!(listed, parsed);
}
