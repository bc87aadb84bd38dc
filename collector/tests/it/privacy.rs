//! Privacy: page URLs are stored without their query string and fragment
//! (a site may keep `utm_*` parameters), and `--log-client-ip off` keeps client
//! addresses out of the logs.

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{json, Value};

use crate::dashboard::{create_user, csrf, Browser};
use crate::support::*;

const SENT: &str = "https://news.example.com/path?token=x&utm_source=y#frag";

/// Sends one event each way (keyed track, browser track, batch) in session `tag`.
fn track_every_way(app: &TestApp, site: &str, tag: &str) {
    track_ok(app, event(site, &format!("{tag}-keyed"), "pageview", json!({"page_url": SENT})));
    app.track_from_browser("https://news.example.com", &event(site, &format!("{tag}-browser"), "pageview", json!({"page_url": SENT})))
        .expect(201);
    let batch = app.batch(&json!([event(site, &format!("{tag}-batch"), "pageview", json!({"page_url": SENT}))]));
    batch.expect(201);
    assert_eq!(batch.body["accepted"], 1, "{}", batch.text);
}

/// The stored page URLs of the events of session `tag`'s three ways.
fn stored_urls(app: &TestApp, site: &str, tag: &str) -> Vec<String> {
    let listed = app.events(site, "?limit=100").expect(200).body["events"].clone();
    let mut urls: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["session_id"].as_str().unwrap().starts_with(&format!("{tag}-")))
        .map(|e| (e["session_id"].as_str().unwrap().to_owned(), e["page_url"].as_str().unwrap().to_owned()))
        .collect();
    urls.sort();
    assert_eq!(urls.len(), 3, "{listed:#}");
    urls.into_iter().map(|(_, u)| u).collect()
}

#[test]
fn page_urls_lose_their_query_and_fragment_and_keep_utm_only_when_the_site_says_so() {
    let app = TestApp::spawn();
    let site = app.create_site("news.example.com", "UTC");
    assert_eq!(site["keep_utm"], false, "{site}");
    let site = id(&site);
    track_every_way(&app, &site, "without-utm");
    assert_eq!(stored_urls(&app, &site, "without-utm"), vec!["https://news.example.com/path"; 3]);

    let patched = app.patch(&format!("/v1/sites/{site}"), &json!({"keep_utm": true}));
    patched.expect(200);
    assert_eq!(patched.body["keep_utm"], true);
    assert_eq!(app.get(&format!("/v1/sites/{site}")).expect(200).body["keep_utm"], true);
    track_every_way(&app, &site, "with-utm");
    assert_eq!(stored_urls(&app, &site, "with-utm"), vec!["https://news.example.com/path?utm_source=y"; 3]);
    assert_eq!(stored_urls(&app, &site, "without-utm"), vec!["https://news.example.com/path"; 3], "stored events are not changed");

    let refused = app.patch(&format!("/v1/sites/{site}"), &json!({"keep_utm": "yes"}));
    refused.expect(400);
    assert_eq!(refused.error(), ("INVALID_REQUEST".to_owned(), Some("keep_utm".to_owned()), "invalid".to_owned()));
    let created = app.post("/v1/sites", &json!({"name": "Kept", "domain": "kept.example.com", "keep_utm": true}));
    created.expect(201);
    assert_eq!(created.body["keep_utm"], true);
    assert_eq!(app.get(&format!("/v1/sites/{}", id(&created.body))).body["keep_utm"], true);
}

#[test]
fn the_dashboard_settings_form_turns_keep_utm_on_and_off() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    let site = id(&app.create_site("news.example.com", "UTC"));
    let mut b = Browser::new(&app);
    b.login("ann@example.com");
    let path = format!("/dashboard/sites/{site}/settings");
    let checkbox = |page: &Answer| -> String {
        let start = page.text.find("id=\"keep-utm\"").unwrap_or_else(|| panic!("no keep_utm box in:\n{}", page.text));
        page.text[start..].split('>').next().unwrap().to_owned()
    };
    let page = b.get(&path);
    page.expect(200);
    assert!(!checkbox(&page).contains("checked"), "{}", checkbox(&page));
    let token = csrf(&page);
    let fields = [("csrf", token.as_str()), ("name", "News"), ("domain", "news.example.com"), ("timezone", "UTC"), ("status", "active"), ("revenue_per_1000_pageviews", "")];

    let mut on = fields.to_vec();
    on.push(("keep_utm", "on"));
    assert_eq!(b.post(&path, &on).status, 303);
    assert_eq!(app.get(&format!("/v1/sites/{site}")).body["keep_utm"], true);
    assert!(checkbox(&b.get(&path)).contains("checked"));
    // An unchecked box is not sent at all.
    assert_eq!(b.post(&path, &fields).status, 303);
    assert_eq!(app.get(&format!("/v1/sites/{site}")).body["keep_utm"], false);
}

/// A request, an unauthenticated one, an event, and a connection that sends no
/// HTTP at all (its error line names the peer).
fn traffic(app: &TestApp, site: &str) {
    app.get("/v1/sites").expect(200);
    app.get_as("pst_not_a_key", "/v1/sites").expect(401);
    track_ok(app, event(site, "logged-session-1", "pageview", json!({})));
    let mut raw = std::net::TcpStream::connect(app.base.trim_start_matches("http://")).unwrap();
    raw.write_all(b"NOT HTTP AT ALL\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = raw.read_to_end(&mut answer);
}

#[track_caller]
fn wait_for_log(app: &TestApp, text: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let logs = app.logs();
        if logs.contains(text) {
            return logs;
        }
        assert!(std::time::Instant::now() < deadline, "no {text:?} in the log:\n{logs}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn log_client_ip_off_keeps_client_addresses_out_of_every_log_line() {
    // Debug: accepted events' lines and connection errors are written too.
    let env = [("RUST_LOG", "info,postern=debug")];
    let on = TestApp::spawn_with_env(&["--rate-limit-api", "0"], &env);
    let off = TestApp::spawn_with_env(&["--rate-limit-api", "0", "--log-client-ip", "off"], &env);
    for app in [&on, &off] {
        let site: Value = app.create_site("logs.example.com", "UTC");
        traffic(app, &id(&site));
    }
    let logs = wait_for_log(&on, "connection ended with an error");
    assert!(logs.contains("client=127.0.0.1") && logs.contains("peer=127.0.0.1:"), "{logs}");

    let logs = wait_for_log(&off, "connection ended with an error");
    let requests: Vec<&str> = logs.lines().filter(|l| l.contains("status=")).collect();
    assert!(requests.len() >= 4, "every request is still logged:\n{logs}");
    for line in logs.lines() {
        assert!(!line.contains("127.0.0.1") && !line.contains("client=") && !line.contains("peer="), "an address in: {line}");
    }
}
