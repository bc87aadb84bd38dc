//! What one node used to keep in memory, shared by nodes on one PostgreSQL
//! database (DESIGN §12), so that requests spread over them behave as if one
//! node served them all: a key's API and ingestion limits, sign-in
//! throttling, a one-time message after a form, and a wall-preview draft;
//! and a node whose database connections are cut answers 503, never 500.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::blocking::Client;
use reqwest::redirect::Policy;
use reqwest::Method;
use serde_json::json;

use crate::dashboard::{create_user, csrf, shown_secret, Browser, PASSWORD};
use crate::multinode::cluster_with as cluster;
use crate::support::*;


fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// The three rate-limit headers as (limit, remaining, reset).
#[track_caller]
fn rl(a: &Answer) -> (u64, u64, i64) {
    let get = |name: &str| a.header(name).unwrap_or_else(|| panic!("{name} missing on {} {}", a.status, a.text)).parse::<i64>().unwrap();
    (get("x-ratelimit-limit") as u64, get("x-ratelimit-remaining") as u64, get("x-ratelimit-reset"))
}

/// A 429 in the spec's error shape with a Retry-After that agrees with the reset.
#[track_caller]
fn assert_limited(a: &Answer, reset: i64) {
    a.expect(429);
    let (code, _, message) = a.error();
    assert_eq!(code, "RATE_LIMITED", "{}", a.text);
    assert!(!message.is_empty());
    let retry: i64 = a.header("retry-after").expect("Retry-After on a 429").parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    let now = now_secs();
    assert!((reset - now - 2..=reset - now + 2).contains(&retry), "Retry-After {retry} vs reset {reset} at {now}");
}

/// A browser on `node` holding the cookies `from` holds (the same person,
/// sent elsewhere by the load balancer).
fn moved_to<'a>(node: &'a TestApp, from: &Browser) -> Browser<'a> {
    let mut b = Browser::new(node);
    b.cookies = from.cookies.clone();
    b
}

#[test]
fn a_keys_api_limit_is_counted_across_nodes() {
    let Some((_db, nodes)) = cluster(3, &["--rate-limit-api", "6"]) else { return };
    let before = now_secs();
    let answers: Vec<Answer> = (0..6).map(|i| nodes[i % 3].get("/v1/sites")).collect();
    let after = now_secs();
    let reset = rl(&answers[0]).2;
    assert!((before + 59..=after + 61).contains(&reset), "reset {reset} ≈ now + 60");
    for (i, a) in answers.iter().enumerate() {
        a.expect(200);
        assert_eq!(rl(a), (6, 5 - i as u64, reset), "request {} on node {}", i + 1, i % 3);
    }
    // The seventh within the minute is refused on every node, though each saw only two.
    for node in &nodes {
        let refused = node.get("/v1/sites");
        assert_limited(&refused, reset);
        assert_eq!(rl(&refused), (6, 0, reset));
    }
    // Another key has its own budget on every node.
    let other = nodes[0].admin(&["create-key", "--account", "acme"]);
    for node in &nodes {
        node.get_as(&other, "/v1/sites").expect(200);
    }
}

#[test]
fn a_keys_ingestion_limit_is_counted_across_nodes() {
    let Some((_db, nodes)) = cluster(2, &["--rate-limit-ingest", "4"]) else { return };
    let site = id(&nodes[0].create_site("news.example.com", "UTC"));
    // Each node's per-address budget (4) would let all six through; the key's, shared, stops the fifth.
    let statuses: Vec<u16> = (0..6).map(|i| nodes[i % 2].track(&event(&site, &format!("shared-limit-{i}"), "pageview", json!({}))).status.as_u16()).collect();
    assert_eq!(statuses, [201, 201, 201, 201, 429, 429]);
    let events = nodes[1].events(&site, "");
    assert_eq!(events.body["total"], 4, "{}", events.text);
}

/// One sign-in from `address` (sent as `X-Forwarded-For`), with the login form's cookie and token.
fn sign_in(node: &TestApp, address: &str, email: &str, password: &str) -> (u16, Option<String>) {
    let client = Client::builder().redirect(Policy::none()).timeout(Duration::from_secs(30)).build().unwrap();
    let page = node.send(node.request(Method::GET, "/dashboard/login"));
    page.expect(200);
    let token = csrf(&page);
    let res = client
        .post(node.url("/dashboard/login"))
        .header("Cookie", format!("postern_login={token}"))
        .header("X-Forwarded-For", address)
        .form(&[("csrf", token.as_str()), ("email", email), ("password", password), ("next", "/dashboard/")])
        .send()
        .expect("HTTP request");
    (res.status().as_u16(), res.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned()))
}

#[test]
fn sign_in_attempts_are_counted_across_nodes() {
    let Some((_db, nodes)) = cluster(3, &["--rate-limit-api", "0", "--client-ip-header", "X-Forwarded-For"]) else { return };
    create_user(&nodes[0], "ann@example.com", "admin");
    // Five wrong guesses from one place, spread over the nodes...
    for i in 0..5 {
        assert_eq!(sign_in(&nodes[i % 3], "203.0.113.7", "ann@example.com", "guess").0, 401, "guess {}", i + 1);
    }
    // ...and that place is locked out on every node, even with the right password.
    for node in &nodes {
        let (status, retry_after) = sign_in(node, "203.0.113.7", "ann@example.com", PASSWORD);
        assert_eq!(status, 429);
        assert!(retry_after.and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s > 0 && s <= 900));
    }
    // Another place is not.
    assert_eq!(sign_in(&nodes[2], "198.51.100.20", "ann@example.com", PASSWORD).0, 303);
}

#[test]
fn a_new_keys_secret_made_on_one_node_is_shown_once_by_another() {
    let Some((_db, nodes)) = cluster(3, &[]) else { return };
    create_user(&nodes[0], "ann@example.com", "admin");
    let mut here = Browser::new(&nodes[0]);
    here.login("ann@example.com");
    let token = here.token("/dashboard/settings/api");
    let a = here.post("/dashboard/settings/api/keys", &[("csrf", &token), ("name", "Reporting"), ("scopes", "read")]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some("/dashboard/settings/api#created-title")), "{}", a.text);

    let shown = moved_to(&nodes[1], &here).get("/dashboard/settings/api");
    shown.expect(200);
    let secret = shown_secret(&shown, "new-key").expect("the node the redirect reached shows the new key");
    nodes[2].get_as(&secret, "/v1/sites").expect(200);
    for node in &nodes {
        let again = moved_to(node, &here).get("/dashboard/settings/api");
        again.expect(200);
        assert_eq!(shown_secret(&again, "new-key"), None, "shown once, on whichever node");
    }
}

#[test]
fn a_wall_preview_drafted_on_one_node_is_served_by_the_others() {
    let Some((_db, nodes)) = cluster(3, &[]) else { return };
    let site = id(&nodes[0].create_site("news.example.com", "UTC"));
    create_user(&nodes[0], "ann@example.com", "admin");
    let mut here = Browser::new(&nodes[0]);
    here.login("ann@example.com");
    let editor = format!("/dashboard/sites/{site}/wall");
    let token = here.token(&editor);
    let form = [
        ("csrf", token.as_str()),
        ("kind", "banner"),
        ("dismiss_after_seconds", "3"),
        ("color_background", "#fff8e1"),
        ("color_text", "#1a1a1a"),
        ("color_accent", "#8a1c1c"),
        ("v0_original", "control"),
        ("v0_name", "control"),
        ("v0_weight", "1"),
        ("v0_title", "Draft title"),
        ("v0_body", "Draft body."),
    ];
    let a = here.post(&format!("{editor}/preview"), &form);
    a.expect(201);
    let url = a.body["url"].as_str().unwrap().to_owned();

    moved_to(&nodes[1], &here).get(&url).expect(200);
    // The SDK's config request, without cookies, on a third node: the draft.
    let config = nodes[2].send(nodes[2].request(Method::GET, &format!("{url}/v1/sdk/sites/{site}/config")));
    config.expect(200);
    assert_eq!(config.body["wall"]["kind"], "banner");
    assert_eq!(config.body["wall"]["variants"][0]["title"], "Draft title");
    // The draft's own budget is found on every node, not the address's.
    let limit: u64 = rl(&config).0;
    assert!(limit > 100, "counted against the draft's token: {limit}");
    // A made-up token opens nothing anywhere.
    let made_up = format!("/dashboard/sites/{site}/wall/preview/{}", "0".repeat(64));
    moved_to(&nodes[1], &here).get(&made_up).expect(404);
}

#[test]
fn cut_database_connections_answer_503_not_500_then_recover() {
    let Some((db, nodes)) = cluster(1, &["--rate-limit-api", "1000"]) else { return };
    let node = &nodes[0];
    node.get("/v1/sites").expect(200);
    let ended: u32 = sql(&db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        .parse()
        .unwrap();
    assert!(ended >= 1, "the node's connections were ended: {ended}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = node.get("/v1/sites");
        assert!(a.status == 200 || a.status == 503, "a lost connection answers 503, never {}: {}", a.status, a.text);
        if a.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the API does not recover; log:\n{}", node.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!node.logs().contains("panicked"), "{}", node.logs());
}
