//! Rate limits (DESIGN §5.4): headers on every limited response, 429 after the limit, per key, per address, 0 disables.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::*;

const SMALL: [&str; 4] = ["--rate-limit-api", "5", "--rate-limit-ingest", "8"];

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// The three rate-limit headers as (limit, remaining, reset); panics when one is missing or not an integer.
#[track_caller]
fn rl(a: &Answer) -> (u64, u64, i64) {
    let get = |name: &str| -> String {
        a.header(name).unwrap_or_else(|| panic!("{name} missing on {} {}; headers {:?}", a.status, a.text, a.headers)).to_owned()
    };
    let limit = get("x-ratelimit-limit").parse().expect("X-RateLimit-Limit is an integer");
    let remaining = get("x-ratelimit-remaining").parse().expect("X-RateLimit-Remaining is an integer");
    let reset = get("x-ratelimit-reset").parse().expect("X-RateLimit-Reset is an integer (epoch seconds)");
    (limit, remaining, reset)
}

/// Asserts a 429 RATE_LIMITED with the error shape and a Retry-After of 1..=60 seconds; returns Retry-After.
#[track_caller]
fn assert_limited(a: &Answer) -> u64 {
    a.expect(429);
    let (code, _, _) = a.error();
    assert_eq!(code, "RATE_LIMITED", "{}", a.text);
    let retry: u64 = a
        .header("retry-after")
        .unwrap_or_else(|| panic!("429 without Retry-After: {:?}", a.headers))
        .parse()
        .expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry), "Retry-After {retry} not in 1..=60");
    retry
}

/// An HTTP client whose connections come from `ip` (another loopback address = another client).
fn client_from(ip: &str) -> Client {
    Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

fn send_with(req: reqwest::blocking::RequestBuilder) -> Answer {
    let res = req.send().expect("HTTP request");
    let status = res.status();
    let headers = res.headers().clone();
    let text = res.text().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer { status, headers, body, text }
}

fn unknown_key() -> String {
    format!("pst_{}", uuid::Uuid::new_v4().simple())
}

fn new_site(app: &TestApp, domain: &str) -> String {
    let id = app.admin(&["create-site", "--account", "acme", "--name", "Rate site", "--domain", domain]);
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "create-site printed {id:?}");
    id
}

#[test]
fn api_responses_carry_headers_that_count_down_and_the_request_after_the_limit_is_429() {
    let app = TestApp::spawn_with(&SMALL);
    let site = new_site(&app, "rl-two.example.com");
    let before = now_secs();
    let seq = [app.get("/v1/sites"),
        app.get(&format!("/v1/sites/{site}")),
        app.get(&format!("/v1/sites/{}", uuid::Uuid::new_v4())),
        app.post("/v1/sites", &json!({})),
        app.dashboard(&site, "?days=0")];
    let after = now_secs();
    let statuses: Vec<u16> = seq.iter().map(|a| a.status.as_u16()).collect();
    assert_eq!(statuses, vec![200, 200, 404, 400, 400]);
    let mut reset0 = None;
    for (i, a) in seq.iter().enumerate() {
        let (limit, remaining, reset) = rl(a);
        assert_eq!(limit, 5, "X-RateLimit-Limit on request {}", i + 1);
        assert_eq!(remaining, 4 - i as u64, "X-RateLimit-Remaining on request {} ({})", i + 1, a.status);
        assert!(
            reset >= before + 59 && reset <= after + 61,
            "X-RateLimit-Reset {reset} must be epoch seconds ≈ now+60 (requests between {before} and {after})"
        );
        match reset0 {
            None => reset0 = Some(reset),
            Some(r) => assert_eq!(reset, r, "X-RateLimit-Reset must stay constant within a window"),
        }
    }
    let reset0 = reset0.unwrap();

    // Request limit+1 is refused, with the same headers and the error shape.
    let refused = app.get("/v1/sites");
    let retry = assert_limited(&refused);
    assert_eq!(rl(&refused), (5, 0, reset0));
    let now = now_secs();
    assert!(retry as i64 <= reset0 - now + 2 && retry as i64 >= reset0 - now - 2, "Retry-After {retry} vs reset {reset0} now {now}");

    // A refused write has no effect.
    let refused = app.post("/v1/sites", &json!({"name": "Refused", "domain": "refused.example.com"}));
    assert_limited(&refused);
    assert_eq!(rl(&refused), (5, 0, reset0));
    let other = app.admin(&["create-key", "--account", "acme"]);
    let list = app.get_as(&other, "/v1/sites").expect(200).body.clone();
    assert!(!list.to_string().contains("refused.example.com"), "a refused POST created a site: {list}");
}

#[test]
fn limits_are_per_key() {
    let app = TestApp::spawn_with(&SMALL);
    for i in 0..5u64 {
        let a = app.get("/v1/sites");
        a.expect(200);
        assert_eq!(rl(&a).1, 4 - i);
    }
    assert_limited(&app.get("/v1/sites"));

    // Another key of the same account, from the same address, has its whole quota.
    let second = app.admin(&["create-key", "--account", "acme"]);
    let a = app.get_as(&second, "/v1/sites");
    a.expect(200);
    assert_eq!(rl(&a).0, 5);
    assert_eq!(rl(&a).1, 4, "a second key must start with its full quota");

    // A read-only key: its 403 carries the headers of its own bucket.
    let reader = app.admin(&["create-key", "--account", "acme", "--scopes", "read"]);
    let a = app.post_as(&reader, "/v1/sites", &json!({"name": "No", "domain": "no.example.com"}));
    a.expect(403);
    assert_eq!(rl(&a).0, 5);
    assert_eq!(rl(&a).1, 4, "403 answers carry the rate-limit headers of the reader key");

    // The first key is still refused.
    assert_limited(&app.get("/v1/sites"));
    // The second key keeps counting down independently.
    let a = app.get_as(&second, "/v1/sites");
    a.expect(200);
    assert_eq!(rl(&a).1, 3);
}

#[test]
fn ingestion_is_limited_separately_from_the_api_and_per_client_address() {
    let app = TestApp::spawn_with(&SMALL);
    let site = new_site(&app, "news.example.com");
    let origin = "https://news.example.com";

    // Spend the API quota of the key.
    for _ in 0..5 {
        app.get("/v1/sites").expect(200);
    }
    assert_limited(&app.get("/v1/sites"));

    // Ingestion with the same key still works: its own limit (8) and counter.
    let mut stored = 0;
    let mut reset0 = None;
    for i in 0..4u64 {
        let a = app.track(&event(&site, &format!("sess-key-{i:04}"), "pageview", json!({})));
        a.expect(201);
        stored += 1;
        let (limit, remaining, reset) = rl(&a);
        assert_eq!(limit, 8, "ingestion uses --rate-limit-ingest");
        assert_eq!(remaining, 7 - i);
        assert_eq!(*reset0.get_or_insert(reset), reset);
    }
    // Browser ingestion (no key) from the same address shares the address counter; a 4xx counts and carries the headers.
    let bad = app.track_from_browser(origin, &event(&site, "sess-browser-bad", "not_a_type", json!({})));
    bad.expect(400);
    assert_eq!(rl(&bad), (8, 3, reset0.unwrap()));
    for i in 0..3u64 {
        let a = app.track_from_browser(origin, &event(&site, &format!("sess-browser-{i:04}"), "pageview", json!({})));
        a.expect(201);
        stored += 1;
        assert_eq!(rl(&a), (8, 2 - i, reset0.unwrap()));
    }
    // Request 9 from this address is refused, with or without a key.
    let refused = app.track_from_browser(origin, &event(&site, "sess-refused-1", "pageview", json!({})));
    assert_limited(&refused);
    assert_eq!(rl(&refused), (8, 0, reset0.unwrap()));
    let refused = app.track(&event(&site, "sess-refused-2", "pageview", json!({})));
    assert_limited(&refused);

    // Another client address has its own ingestion quota.
    let other = client_from("127.0.0.2");
    let a = send_with(
        other
            .post(app.url("/v1/events/track"))
            .header("Origin", origin)
            .header("Content-Type", "text/plain")
            .body(event(&site, "sess-other-addr-1", "pageview", json!({})).to_string()),
    );
    a.expect(201);
    stored += 1;
    assert_eq!(rl(&a).0, 8);
    assert_eq!(rl(&a).1, 7, "a new client address starts with the full ingestion quota");

    // The refused events were not stored.
    let reader = app.admin(&["create-key", "--account", "acme", "--scopes", "read"]);
    let list = app.get_as(&reader, &format!("/v1/events/sites/{site}?limit=1000"));
    list.expect(200);
    assert_eq!(list.body["total"], json!(stored), "only accepted events are stored: {}", list.text);
    assert!(!list.text.contains("sess-refused"), "a 429 event was stored: {}", list.text);

    // The API key is still refused on the API (ingestion did not reset it).
    assert_limited(&app.get("/v1/sites"));
}

#[test]
fn failed_authentication_is_limited_per_address() {
    let app = TestApp::spawn_with(&SMALL);
    let bad_keys = [unknown_key(), unknown_key(), "not-a-key".to_owned(), unknown_key()];
    let mut answers: Vec<Answer> = bad_keys.iter().map(|k| app.get_as(k, "/v1/sites")).collect();
    answers.push(app.send(app.request(Method::GET, "/v1/sites"))); // no Authorization at all
    let mut reset0 = None;
    for (i, a) in answers.iter().enumerate() {
        a.expect(401);
        assert_eq!(a.error().0, "UNAUTHENTICATED");
        let (limit, remaining, reset) = rl(a);
        assert_eq!(limit, 5);
        assert_eq!(remaining, 4 - i as u64, "failed attempt {}", i + 1);
        assert_eq!(*reset0.get_or_insert(reset), reset);
    }
    // The next attempt is refused even with a key never tried before, on any class of path.
    let a = app.get_as(&unknown_key(), "/v1/sites");
    assert_limited(&a);
    assert_eq!(rl(&a), (5, 0, reset0.unwrap()));
    assert_limited(&app.get_as(&unknown_key(), "/v1/keys"));
    assert_limited(&app.send(app.request(Method::GET, "/v1/sites")));
    let site = new_site(&app, "auth.example.com");
    assert_limited(&app.post_as(&unknown_key(), "/v1/events/track", &event(&site, "sess-unknown-key", "pageview", json!({}))));

    // A request that does authenticate is not a failed attempt.
    app.get("/v1/sites").expect(200);

    // Another address may still fail authentication (401, not 429).
    let other = client_from("127.0.0.2");
    let a = send_with(other.get(app.url("/v1/sites")).bearer_auth(unknown_key()));
    a.expect(401);
    assert_eq!(rl(&a).1, 4, "failed authentication is counted per address");
}

#[test]
fn zero_disables_the_limits() {
    let app = TestApp::spawn_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0"]);
    let site = id(&app.create_site("zero.example.com", "UTC"));
    for i in 0..150 {
        let a = app.get("/v1/sites");
        assert_eq!(a.status.as_u16(), 200, "API request {} with limits disabled: {}", i + 1, a.text);
    }
    for i in 0..120 {
        let a = app.get_as(&unknown_key(), "/v1/sites");
        assert_eq!(a.status.as_u16(), 401, "failed auth {} with limits disabled: {}", i + 1, a.text);
    }
    // More ingestion requests than the default limit of 1000 (cheap ones: a 400 counts like any other).
    for i in 0..1050 {
        let a = app.send(
            app.request(Method::POST, "/v1/events/track")
                .header("Origin", "https://zero.example.com")
                .header("Content-Type", "text/plain")
                .body("{not json"),
        );
        assert_eq!(a.status.as_u16(), 400, "ingest request {} with limits disabled: {}", i + 1, a.text);
    }
    app.track(&event(&site, "sess-zero-last", "pageview", json!({}))).expect(201);
}

#[test]
fn default_limits_are_100_for_the_api_and_1000_for_ingestion() {
    let app = TestApp::spawn_with(&[]);
    let site = new_site(&app, "defaults.example.com");
    let a = app.get("/v1/sites");
    a.expect(200);
    assert_eq!(rl(&a).0, 100);
    assert_eq!(rl(&a).1, 99);
    let a = app.track(&event(&site, "sess-defaults", "pageview", json!({})));
    a.expect(201);
    assert_eq!(rl(&a).0, 1000);
    assert_eq!(rl(&a).1, 999);
}

#[test]
fn health_endpoints_are_never_limited() {
    let app = TestApp::spawn_with(&["--rate-limit-api", "2", "--rate-limit-ingest", "2"]);
    // Exhaust every per-address bucket this client could fall into.
    for _ in 0..3 {
        let _ = app.get_as(&unknown_key(), "/v1/sites");
        let _ = app.send(app.request(Method::GET, "/v1/openapi.json"));
        let _ = app.send(
            app.request(Method::POST, "/v1/events/track")
                .header("Content-Type", "text/plain")
                .body("{}"),
        );
    }
    assert_limited(&app.get_as(&unknown_key(), "/v1/sites"));
    for _ in 0..3 {
        let _ = app.get("/v1/sites");
    }
    assert_limited(&app.get("/v1/sites"));
    for i in 0..30 {
        for path in ["/healthz", "/readyz"] {
            let a = app.send(app.request(Method::GET, path));
            assert_eq!(a.status.as_u16(), 200, "{path} request {} must never be limited: {}", i + 1, a.text);
        }
        // With a key that is rate limited on the API, too.
        let a = app.get("/healthz");
        assert_eq!(a.status.as_u16(), 200, "/healthz with an exhausted key: {}", a.text);
    }
}

#[test]
fn track_batch_and_the_sdk_alias_share_the_ingestion_quota_and_a_batch_counts_each_event() {
    let app = TestApp::spawn_with(&SMALL);
    let site = new_site(&app, "batch.example.com");
    let events: Vec<Value> = (0..3).map(|i| event(&site, &format!("sess-batch-{i:04}"), "pageview", json!({}))).collect();
    let a = app.batch(&Value::Array(events));
    a.expect(201);
    let (limit, remaining, reset) = rl(&a);
    assert_eq!((limit, remaining), (8, 5), "a batch of 3 events counts 3 against the ingestion budget");
    let a = app.track(&event(&site, "sess-batch-track", "pageview", json!({})));
    a.expect(201);
    assert_eq!(rl(&a), (8, 4, reset));
    let a = app.send(
        app.request(Method::POST, "/v1/e")
            .header("Origin", "https://batch.example.com")
            .header("Content-Type", "text/plain")
            .body(event(&site, "sess-batch-alias", "pageview", json!({})).to_string()),
    );
    assert!(a.status.is_success(), "POST /v1/e: {} {}", a.status, a.text);
    assert_eq!(rl(&a), (8, 3, reset), "/v1/e counts against the same ingestion quota");
    // A batch larger than what is left is refused whole.
    let events: Vec<Value> = (0..4).map(|i| event(&site, &format!("sess-batch-over-{i:04}"), "pageview", json!({}))).collect();
    assert_limited(&app.batch(&Value::Array(events)));
}

#[test]
fn the_sdk_files_have_their_own_budget_per_address() {
    let app = TestApp::spawn_with(&["--rate-limit-api", "5"]);
    let site = new_site(&app, "files.example.com");
    // A busy office behind one address loads the loader on every page view.
    for i in 0..300 {
        let a = app.send(app.request(Method::GET, "/p/v1.js"));
        assert_eq!(a.status, 200, "loader request {i}: {}", a.text);
        // Counted all the same (the config's answer below shows it), but every
        // visitor downloads the SDK's files: the headers come only with a 429.
        assert_eq!(a.header("x-ratelimit-limit"), None, "loader request {i}");
    }
    let a = app.send(app.request(Method::GET, &format!("/v1/sdk/sites/{site}/config")));
    a.expect(200);
    assert_eq!(rl(&a), (6000, 5699, rl(&a).2), "the site config shares the files' budget");
    // The API's small limit was not touched by any of it.
    assert_eq!(rl(&app.get("/v1/sites").expect(200)).1, 4);
    // The budget is a limit all the same.
    let app = TestApp::spawn_with(&["--rate-limit-public-files", "3"]);
    for _ in 0..3 {
        app.send(app.request(Method::GET, "/p/v1.js")).expect(200);
    }
    let refused = app.send(app.request(Method::GET, "/p/v1.js"));
    assert_limited(&refused);
    assert_eq!(rl(&refused).0, 3, "a refusal says which limit applies");
}

#[test]
fn the_public_openapi_document_is_limited_per_address() {
    let app = TestApp::spawn_with(&["--rate-limit-api", "3", "--rate-limit-ingest", "8"]);
    let mut reset0 = None;
    for i in 0..3u64 {
        let a = app.send(app.request(Method::GET, "/v1/openapi.json"));
        a.expect(200);
        let (limit, remaining, reset) = rl(&a);
        assert_eq!((limit, remaining), (3, 2 - i));
        assert_eq!(*reset0.get_or_insert(reset), reset);
    }
    assert_limited(&app.send(app.request(Method::GET, "/v1/openapi.json")));
    // Another address may still read it.
    let other = client_from("127.0.0.2");
    let a = send_with(other.get(app.url("/v1/openapi.json")));
    a.expect(200);
    assert_eq!(rl(&a).1, 2);
    // Reading the public document does not spend the key's API quota.
    let a = app.get("/v1/sites");
    a.expect(200);
    assert_eq!(rl(&a).1, 2);
}

#[test]
fn ingestion_with_a_key_is_also_limited_per_key_across_addresses() {
    let app = TestApp::spawn_with(&SMALL);
    let site = new_site(&app, "perkey.example.com");
    let track_from = |ip: &str, n: usize| -> Answer {
        let c = client_from(ip);
        send_with(c.post(app.url("/v1/events/track")).bearer_auth(&app.key).json(&event(&site, &format!("sess-perkey-{n:04}"), "pageview", json!({}))))
    };
    let mut n = 0;
    for ip in ["127.0.0.1", "127.0.0.2"] {
        for _ in 0..4 {
            n += 1;
            let a = track_from(ip, n);
            a.expect(201);
            assert_eq!(rl(&a).1, 8 - n as u64, "the key's ingestion counter spans addresses (request {n} from {ip})");
        }
    }
    // Request 9 of this key, from a third address that has sent nothing yet.
    assert_limited(&track_from("127.0.0.3", 9));
    // Without the key, that address is not limited.
    let c = client_from("127.0.0.3");
    let a = send_with(
        c.post(app.url("/v1/events/track"))
            .header("Origin", "https://perkey.example.com")
            .header("Content-Type", "text/plain")
            .body(event(&site, "sess-perkey-anon", "pageview", json!({})).to_string()),
    );
    a.expect(201);
}
