//! The web dashboard, driven over HTTP like a browser without JavaScript:
//! cookies, forms with their CSRF token, redirects followed by hand.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::blocking::Client;
use reqwest::redirect::Policy;
use serde_json::{json, Value};

use crate::receivers::HttpReceiver;
use crate::support::{event, id, track_ok, Answer, TestApp, BIN};

pub(crate) const PASSWORD: &str = "correct horse battery";

/// Creates a dashboard user in the app's account "acme" with `postern admin create-user`.
#[track_caller]
pub(crate) fn create_user(app: &TestApp, email: &str, role: &str) {
    let mut child = Command::new(BIN)
        .args(["admin", "create-user", "--account", "acme", "--email", email, "--role", role, "--db"])
        .arg(&app.db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{PASSWORD}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "create-user failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A browser: a cookie jar, no automatic redirects.
pub(crate) struct Browser<'a> {
    app: &'a TestApp,
    client: Client,
    pub(crate) cookies: HashMap<String, String>,
}

impl<'a> Browser<'a> {
    pub(crate) fn new(app: &'a TestApp) -> Browser<'a> {
        let client = Client::builder().redirect(Policy::none()).timeout(Duration::from_secs(30)).build().unwrap();
        Browser { app, client, cookies: HashMap::new() }
    }

    pub(crate) fn send(&mut self, req: reqwest::blocking::RequestBuilder) -> Answer {
        let cookie = self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
        let req = if cookie.is_empty() { req } else { req.header("Cookie", cookie) };
        let a = self.app.send(req);
        for set in a.headers.get_all("set-cookie") {
            let set = set.to_str().unwrap();
            let (pair, attrs) = set.split_once(';').unwrap_or((set, ""));
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || attrs.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        a
    }

    pub(crate) fn get(&mut self, path: &str) -> Answer {
        let req = self.client.get(self.app.url(path));
        self.send(req)
    }

    pub(crate) fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Answer {
        let req = self.client.post(self.app.url(path)).form(form);
        self.send(req)
    }

    /// Signs in through the login form; returns the final answer of the POST.
    pub(crate) fn login_as(&mut self, email: &str, password: &str) -> Answer {
        let page = self.get("/dashboard/login");
        page.expect(200);
        let csrf = csrf(&page);
        self.post("/dashboard/login", &[("csrf", &csrf), ("email", email), ("password", password), ("next", "/dashboard/")])
    }

    #[track_caller]
    pub(crate) fn login(&mut self, email: &str) {
        let a = self.login_as(email, PASSWORD);
        assert_eq!(a.status, 303, "login failed: {}", a.text);
        assert_eq!(a.header("location"), Some("/dashboard/"));
    }

    /// The CSRF token of a page the viewer sees.
    #[track_caller]
    pub(crate) fn token(&mut self, path: &str) -> String {
        let page = self.get(path);
        page.expect(200);
        csrf(&page)
    }
}

/// The value of the page's first `csrf` hidden field.
#[track_caller]
pub(crate) fn csrf(page: &Answer) -> String {
    let marker = "name=\"csrf\" value=\"";
    let start = page.text.find(marker).unwrap_or_else(|| panic!("no CSRF field in:\n{}", page.text)) + marker.len();
    page.text[start..].split('"').next().unwrap().to_owned()
}

/// The one-time secret in the read-only field with this id, if the page shows one.
pub(crate) fn shown_secret(page: &Answer, field_id: &str) -> Option<String> {
    let marker = format!("id=\"{field_id}\" class=\"secret\" readonly value=\"");
    let start = page.text.find(&marker)? + marker.len();
    Some(page.text[start..].split('"').next().unwrap().to_owned())
}

/// The text of the element carrying `data-metric="name"`.
#[track_caller]
fn metric(page: &Answer, name: &str) -> String {
    let marker = format!("data-metric=\"{name}\">");
    let start = page.text.find(&marker).unwrap_or_else(|| panic!("no {name} tile")) + marker.len();
    page.text[start..].split('<').next().unwrap().trim().to_owned()
}

/// The rows of the table with this id, as cell texts (header cells included).
pub(crate) fn table_rows(page: &Answer, table_id: &str) -> Vec<Vec<String>> {
    let start = page.text.find(&format!("<table id=\"{table_id}\"")).unwrap_or_else(|| panic!("no table {table_id}"));
    let end = start + page.text[start..].find("</table>").unwrap();
    let body = &page.text[start..end];
    let body = &body[body.find("<tbody>").map_or(0, |i| i + 7)..];
    body.split("<tr").skip(1).map(cells).collect()
}

/// The texts of a row's `<td>` and `<th>` cells.
fn cells(row: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = row;
    while let Some(i) = ["<td", "<th"].iter().filter_map(|t| rest.find(t)).min() {
        let open_end = i + rest[i..].find('>').unwrap() + 1;
        let close = open_end + rest[open_end..].find("</t").unwrap();
        out.push(strip_tags(&rest[open_end..close]));
        rest = &rest[close + 3..];
    }
    out
}

/// Undoes the template's HTML escaping of an attribute value.
pub(crate) fn unescape(s: &str) -> String {
    s.replace("&#x2f;", "/").replace("&amp;", "&")
}

fn strip_tags(s: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for ch in s.chars() {
        match ch {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn sign_in_wrong_password_and_sign_out() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    let mut b = Browser::new(&app);

    let a = b.get("/dashboard/");
    assert_eq!(a.status, 303);
    assert_eq!(a.header("location"), Some("/dashboard/login?next=%2Fdashboard%2F"));
    let a = b.get("/");
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some("/dashboard/")));

    let a = b.login_as("ann@example.com", "wrong password");
    assert_eq!(a.status, 401, "{}", a.text);
    assert!(a.text.contains("Wrong e-mail address or password"), "{}", a.text);
    assert!(!b.cookies.contains_key("postern_session"));
    let a = b.login_as("nobody@example.com", PASSWORD);
    assert_eq!(a.status, 401, "an unknown address is refused like a wrong password");

    let page = b.get("/dashboard/login");
    let token = csrf(&page);
    let a = b.post("/dashboard/login", &[("csrf", &token), ("email", "ANN@example.com"), ("password", PASSWORD), ("next", "/dashboard/settings/api")]);
    assert_eq!(a.status, 303, "{}", a.text);
    assert_eq!(a.header("location"), Some("/dashboard/settings/api"), "back to the page asked for");
    let set = a.headers.get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_owned()).find(|c| c.starts_with("postern_session=")).unwrap();
    for attr in ["HttpOnly", "SameSite=Lax", "Path=/dashboard"] {
        assert!(set.contains(attr), "session cookie lacks {attr}: {set}");
    }
    let session = b.cookies["postern_session"].clone();

    let home = b.get("/dashboard/");
    home.expect(200);
    assert!(home.text.contains("ann@example.com"));
    assert_eq!(home.header("cache-control"), Some("no-store"));
    assert!(home.header("content-security-policy").is_some_and(|c| c.contains("default-src 'self'")));

    // A signed-in visit to the login page goes straight to the dashboard.
    assert_eq!(b.get("/dashboard/login").status, 303);

    assert_eq!(b.post("/dashboard/logout", &[]).status, 403, "sign-out needs the CSRF token too");
    let token = b.token("/dashboard/");
    let a = b.post("/dashboard/logout", &[("csrf", &token)]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some("/dashboard/login")));
    assert!(!b.cookies.contains_key("postern_session"));
    // The session is gone on the server: the old cookie no longer works.
    b.cookies.insert("postern_session".into(), session);
    assert_eq!(b.get("/dashboard/").status, 303);
}

#[test]
fn logins_are_throttled_per_address_and_account() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    create_user(&app, "bob@example.com", "reader");
    let mut b = Browser::new(&app);
    for attempt in 1..=5 {
        let a = b.login_as("ann@example.com", "guess");
        assert_eq!(a.status, 401, "attempt {attempt}: {}", a.text);
    }
    let a = b.login_as("ann@example.com", PASSWORD);
    assert_eq!(a.status, 429, "the right password is refused too once throttled: {}", a.text);
    assert!(a.header("retry-after").and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s > 0 && s <= 900));
    assert!(a.text.contains("Too many failed sign-ins"));
    assert!(!b.cookies.contains_key("postern_session"));
    // Another user is not locked out by someone guessing Ann's password.
    b.login("bob@example.com");
}

#[test]
fn forms_without_the_csrf_token_are_refused() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    let mut b = Browser::new(&app);

    // The login form's token must match its cookie.
    b.get("/dashboard/login").expect(200);
    let a = b.post("/dashboard/login", &[("csrf", "forged"), ("email", "ann@example.com"), ("password", PASSWORD)]);
    assert_eq!(a.status, 403, "{}", a.text);
    let mut fresh = Browser::new(&app);
    let a = fresh.post("/dashboard/login", &[("csrf", "x"), ("email", "ann@example.com"), ("password", PASSWORD)]);
    assert_eq!(a.status, 403, "no login cookie at all");

    b.login("ann@example.com");
    let other_session_token = {
        let mut other = Browser::new(&app);
        other.login("ann@example.com");
        other.token("/dashboard/")
    };
    for token in ["", "0000", other_session_token.as_str()] {
        let a = b.post("/dashboard/sites", &[("csrf", token), ("name", "Forged"), ("domain", "forged.example")]);
        assert_eq!(a.status, 403, "token {token:?}: {}", a.text);
        let a = b.post("/dashboard/settings/api/keys", &[("csrf", token), ("name", "forged"), ("scopes", "read")]);
        assert_eq!(a.status, 403);
    }
    assert_eq!(app.get("/v1/sites").body["sites"].as_array().unwrap().len(), 0, "nothing was created");
    assert_eq!(app.get("/v1/keys").body["keys"].as_array().unwrap().len(), 1, "only the test's own key");
}

#[test]
fn a_reader_can_look_but_every_change_is_refused() {
    let app = TestApp::spawn();
    create_user(&app, "rita@example.com", "reader");
    let site = id(&app.create_site("news.example.com", "UTC"));
    let keys = app.get("/v1/keys").body;
    let key_id = keys["keys"][0]["id"].as_str().unwrap().to_owned();
    let wall_before = app.get(&format!("/v1/sites/{site}")).body["wall"].clone();

    let mut b = Browser::new(&app);
    b.login("rita@example.com");
    let home = b.get("/dashboard/");
    home.expect(200);
    assert!(home.text.contains("news.example.com"));
    assert!(!home.text.contains("Add a site"), "no creation form for a Reader");
    let wall = b.get(&format!("/dashboard/sites/{site}/wall"));
    wall.expect(200);
    assert!(!wall.text.contains("Save wall"));
    let keys_page = b.get("/dashboard/settings/api");
    keys_page.expect(200);
    assert!(!keys_page.text.contains("Generate API Key</button>") && !keys_page.text.contains(">Revoke"));
    b.get(&format!("/dashboard/sites/{site}?days=30")).expect(200);
    let settings = b.get(&format!("/dashboard/sites/{site}/settings"));
    settings.expect(200);
    assert!(!settings.text.contains("Save settings") && !settings.text.contains("Delete site"));

    // With a valid token, every change is still refused on the server.
    let token = b.token("/dashboard/");
    let changes: Vec<(String, Vec<(&str, &str)>)> = vec![
        ("/dashboard/sites".into(), vec![("name", "Mine"), ("domain", "mine.example")]),
        ("/dashboard/settings/api/keys".into(), vec![("name", "mine"), ("scopes", "read")]),
        (format!("/dashboard/settings/api/keys/{key_id}/revoke"), vec![]),
        (format!("/dashboard/sites/{site}/settings"), vec![("name", "Renamed"), ("domain", "news.example.com"), ("status", "paused")]),
        (format!("/dashboard/sites/{site}/delete"), vec![]),
        (
            format!("/dashboard/sites/{site}/wall"),
            vec![("kind", "hard"), ("v0_name", "control"), ("v0_weight", "1"), ("v0_title", "Hacked"), ("v0_body", "Hacked")],
        ),
    ];
    for (path, fields) in &changes {
        let mut form = vec![("csrf", token.as_str())];
        form.extend(fields.iter().copied());
        let a = b.post(path, &form);
        assert_eq!(a.status, 403, "POST {path}: {}", a.text);
        assert!(a.text.contains("only an Admin"), "{}", a.text);
    }
    let sites = app.get("/v1/sites").body;
    assert_eq!(sites["sites"].as_array().unwrap().len(), 1);
    assert_eq!((sites["sites"][0]["name"].as_str(), sites["sites"][0]["status"].as_str()), (Some("Site news.example.com"), Some("active")));
    let keys_after = app.get("/v1/keys").body;
    assert_eq!(keys_after["keys"].as_array().unwrap().len(), 1);
    assert!(keys_after["keys"][0]["revoked_at"].is_null());
    assert_eq!(app.get(&format!("/v1/sites/{site}")).body["wall"], wall_before);
}

#[test]
fn a_generated_key_works_against_the_api_until_revoked() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    app.create_site("news.example.com", "UTC");
    let mut b = Browser::new(&app);
    b.login("ann@example.com");

    let token = b.token("/dashboard/settings/api");
    let a = b.post("/dashboard/settings/api/keys", &[("csrf", &token), ("name", "Reporting"), ("scopes", "read")]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some("/dashboard/settings/api#created-title")), "{}", a.text);
    let a = b.get("/dashboard/settings/api");
    a.expect(200);
    assert_eq!(a.header("cache-control"), Some("no-store"), "the secret must not be cached");
    let secret = shown_secret(&a, "new-key").expect("the new key is shown");
    assert!(secret.starts_with("pst_") && secret.len() > 20, "{secret}");

    let sites = app.get_as(&secret, "/v1/sites");
    sites.expect(200);
    assert_eq!(sites.body["sites"][0]["domain"], "news.example.com");
    let (code, _, _) = app.post_as(&secret, "/v1/sites", &json!({"name": "x", "domain": "x.example"})).expect(403).error();
    assert_eq!(code, "FORBIDDEN", "a read-only key cannot write");

    // The list shows the prefix (never the secret) and, soon after use, the last use.
    let mut listed = b.get("/dashboard/settings/api");
    for _ in 0..50 {
        if table_rows(&listed, "keys").iter().any(|r| r[0] == "Reporting" && r[4] != "never") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        listed = b.get("/dashboard/settings/api");
    }
    assert!(!listed.text.contains(&secret), "the secret is shown once only");
    let row = table_rows(&listed, "keys").into_iter().find(|r| r[0] == "Reporting").expect("the new key is listed");
    assert_eq!(row[1], format!("{}…", &secret[..12]));
    assert_eq!(row[2], "read");
    assert_ne!(row[4], "never", "last use is recorded: {row:?}");
    assert_eq!(row[5], "active");

    // Scopes are required; a blank form is explained, not a 500.
    let token = csrf(&listed);
    let a = b.post("/dashboard/settings/api/keys", &[("csrf", &token), ("name", "none")]);
    assert_eq!(a.status, 400);
    assert!(a.text.contains("Choose at least one scope"));

    let key_id = app.get("/v1/keys").body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "Reporting")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = b.post(&format!("/dashboard/settings/api/keys/{key_id}/revoke"), &[("csrf", &token)]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some("/dashboard/settings/api")));
    let (code, _, reason) = app.get_as(&secret, "/v1/sites").expect(401).error();
    assert_eq!((code.as_str(), reason.as_str()), ("UNAUTHENTICATED", "revoked"));
    let row = table_rows(&b.get("/dashboard/settings/api"), "keys").into_iter().find(|r| r[0] == "Reporting").unwrap();
    assert_eq!(row[5], "revoked");
}

#[test]
fn sites_are_created_and_only_the_accounts_own_are_shown() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    let other_key = app.admin(&["create-key", "--account", "globex"]);
    let theirs = app.post_as(&other_key, "/v1/sites", &json!({"name": "Theirs", "domain": "theirs.example"}));
    let theirs = id(&theirs.body);
    let mut b = Browser::new(&app);
    b.login("ann@example.com");

    let token = b.token("/dashboard/");
    let a = b.post("/dashboard/sites", &[("csrf", &token), ("name", "Bad"), ("domain", "https://bad.example/path")]);
    assert_eq!(a.status, 400);
    assert!(a.text.contains("domain must be a host name"), "{}", a.text);
    assert!(a.text.contains("value=\"Bad\""), "the form keeps what was typed");
    let a = b.post("/dashboard/sites", &[("csrf", &token), ("name", "Gazette"), ("domain", "gazette.example"), ("timezone", "Mars/Olympus")]);
    assert_eq!(a.status, 400);

    let a = b.post("/dashboard/sites", &[("csrf", &token), ("name", "Gazette"), ("domain", "Gazette.Example"), ("timezone", "Europe/Paris")]);
    assert_eq!(a.status, 303, "{}", a.text);
    let location = a.header("location").unwrap().to_owned();
    let sites = app.get("/v1/sites").body;
    let created = &sites["sites"][0];
    assert_eq!((created["name"].as_str(), created["domain"].as_str(), created["timezone"].as_str()), (Some("Gazette"), Some("gazette.example"), Some("Europe/Paris")));
    assert_eq!(location, format!("/dashboard/sites/{}", id(created)));
    b.get(&location).expect(200);

    let home = b.get("/dashboard/");
    assert!(home.text.contains("Gazette") && !home.text.contains("Theirs"));
    let a = b.get(&format!("/dashboard/sites/{theirs}"));
    assert_eq!(a.status, 404, "another account's site does not exist here");
    assert_eq!(b.get("/dashboard/sites/not-a-uuid").status, 404);
    let a = b.get("/dashboard/no/such/page");
    assert_eq!(a.status, 404);
    assert!(a.header("content-type").is_some_and(|c| c.starts_with("text/html")));
    assert_eq!(b.get(&format!("{location}?days=0")).status, 400);
    assert_eq!(b.get(&format!("{location}?device=phone")).status, 400);
}

#[test]
fn site_pages_show_the_same_numbers_as_the_api() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    let site = id(&app.create_site("news.example.com", "Europe/Paris"));
    let meta = |device: &str, variant: Option<&str>| {
        let mut m = json!({"device_type": device});
        if let Some(v) = variant {
            m["variant"] = json!(v);
        }
        json!({ "metadata": m })
    };
    for i in 0..12 {
        let device = ["desktop", "mobile", "tablet"][i % 3];
        let variant = ["control", "emotional"][i % 2];
        let s = format!("session-{i:04}");
        track_ok(&app, event(&site, &s, "pageview", meta(device, None)));
        if i % 4 != 3 {
            track_ok(&app, event(&site, &s, "adblock_detected", meta(device, None)));
            track_ok(&app, event(&site, &s, "wall_displayed", meta(device, Some(variant))));
            if i % 3 != 1 {
                track_ok(&app, event(&site, &s, "conversion_allowlist", meta(device, Some(variant))));
            }
        }
    }
    let mut b = Browser::new(&app);
    b.login("ann@example.com");

    for (days, device) in [(7, ""), (30, "desktop"), (1, "mobile")] {
        let q = if device.is_empty() { format!("?days={days}") } else { format!("?days={days}&device={device}") };
        let api = app.dashboard(&site, &q).body;
        let page = b.get(&format!("/dashboard/sites/{site}{q}"));
        page.expect(200);
        let m = &api["metrics"];
        for name in ["sessions", "adblock_detected", "walls_displayed", "conversions"] {
            assert_eq!(metric(&page, name), m[name].to_string(), "{name} for {q}");
        }
        assert_eq!(metric(&page, "conversion_rate"), format!("{} %", m["conversion_rate"]), "rate for {q}");
        assert!(page.text.contains(&format!("{} to {}", api["period"]["start"].as_str().unwrap(), api["period"]["end"].as_str().unwrap())));
    }
    assert_ne!(app.dashboard(&site, "?days=7").body["metrics"]["conversions"], 0, "the test has data");

    for (q, granularity) in [("?days=7&granularity=day", "day"), ("?days=2&granularity=hour", "hour"), ("?days=30&granularity=week", "week")] {
        let api = app.conversions(&site, q).body;
        let page = b.get(&format!("/dashboard/sites/{site}{q}"));
        let rows = table_rows(&page, "timeline");
        let timeline = api["timeline"].as_array().unwrap();
        assert_eq!(rows.len(), timeline.len(), "{granularity} buckets");
        for (row, bucket) in rows.iter().zip(timeline) {
            assert_eq!(row[0], bucket["bucket"].as_str().unwrap());
            assert_eq!(row[4], bucket["conversions"].to_string(), "{granularity} {}", row[0]);
            assert_eq!(row[5], format!("{} %", bucket["conversion_rate"]));
        }
        assert_eq!(page.text.matches("<rect class=\"bar\"").count(), timeline.len(), "one bar per bucket");
    }
    // Hours over a long period are shown by day, with a word about it.
    let page = b.get(&format!("/dashboard/sites/{site}?days=90&granularity=hour"));
    page.expect(200);
    assert!(page.text.contains("Hourly buckets are available for periods up to 31 days"));
    assert_eq!(table_rows(&page, "timeline").len(), 90);

    let api = app.ab_testing(&site, "?days=7").body;
    let page = b.get(&format!("/dashboard/sites/{site}?days=7"));
    let rows = table_rows(&page, "ab");
    let variants = api["variants"].as_array().unwrap();
    assert_eq!(rows.len(), variants.len());
    for (row, v) in rows.iter().zip(variants) {
        assert_eq!(row[0], v["name"].as_str().unwrap());
        assert_eq!(row[1..5], [v["impressions"].to_string(), v["conversions"].to_string(), format!("{} %", v["conversion_rate"]), format!("{} %", v["confidence"])]);
        assert_eq!(row[5] == "Winner", v["is_winner"] == json!(true));
    }

    let api = app.events(&site, "?event_type=wall_displayed").body;
    let page = b.get(&format!("/dashboard/sites/{site}?event_type=wall_displayed"));
    let total = api["total"].as_u64().unwrap();
    assert!(page.text.contains(&format!("of {total} events")), "{}", page.text);
    let rows = table_rows(&page, "event-list");
    assert_eq!(rows.len() as u64, total.min(25));
    assert!(rows.iter().all(|r| r[1] == "wall_displayed"));
    let newest: &Value = &api["events"][0];
    assert_eq!(rows[0][2], newest["session_id"].as_str().unwrap());

    // Pagination: 25 per page, newest first, the second page continues the first.
    let all = app.events(&site, "?limit=50").body;
    let all_total = all["total"].as_u64().unwrap();
    assert!(all_total > 25, "enough events for two pages");
    let first = b.get(&format!("/dashboard/sites/{site}"));
    assert!(first.text.contains(&format!("Showing 1–25 of {all_total} events")));
    let next = first.text.split("href=\"").filter_map(|s| s.split('"').next()).find(|h| h.contains("offset=25")).expect("a next link");
    let next = unescape(next);
    let second = b.get(&next);
    let rows = table_rows(&second, "event-list");
    assert_eq!(rows[0][2], all["events"][25]["session_id"].as_str().unwrap());
    assert!(second.text.contains("rel=\"prev\""));
}

#[test]
fn the_wall_editor_saves_what_the_sdk_config_serves() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    let site = id(&app.create_site("news.example.com", "UTC"));
    let mut b = Browser::new(&app);
    b.login("ann@example.com");
    let path = format!("/dashboard/sites/{site}/wall");
    let page = b.get(&path);
    page.expect(200);
    for v in ["control", "emotional", "offer"] {
        assert!(page.text.contains(&format!("value=\"{v}\"")), "variant {v} is editable");
    }
    let token = csrf(&page);

    let form = [
        ("csrf", token.as_str()),
        ("kind", "hard"),
        ("dismiss_after_seconds", "0"),
        ("color_background", "#FFF8E1"),
        ("color_text", "#1a1a1a"),
        ("color_accent", "#8a1c1c"),
        ("v0_original", "control"), ("v0_name", "control"), ("v0_weight", "3"), ("v0_title", "Please allow us"), ("v0_body", "Ads pay our reporters."),
        ("v1_original", "emotional"), ("v1_name", "emotional"), ("v1_weight", "1"), ("v1_title", "We need you"), ("v1_body", "Really."),
        ("v2_original", "offer"), ("v2_name", "offer"), ("v2_weight", "1"), ("v2_title", "x"), ("v2_body", "y"), ("v2_remove", "on"),
        ("v3_name", "short"), ("v3_weight", "0.5"), ("v3_title", "Allow us?"), ("v3_body", "Two clicks."),
    ];
    let a = b.post(&path, &form);
    assert_eq!(a.status, 303, "{}", a.text);
    assert_eq!(a.header("location").unwrap(), format!("{path}?saved=1"));
    assert!(b.get(&format!("{path}?saved=1")).text.contains("The wall is saved"));

    let config = app.send(app.request(reqwest::Method::GET, &format!("/v1/sdk/sites/{site}/config"))).body;
    let wall = &config["wall"];
    assert_eq!(wall["kind"], "hard");
    assert_eq!(wall["dismiss_after_seconds"], 0);
    assert_eq!(wall["colors"], json!({"background": "#fff8e1", "text": "#1a1a1a", "accent": "#8a1c1c"}));
    let names: Vec<&str> = wall["variants"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["control", "emotional", "short"]);
    assert_eq!(wall["variants"][0]["weight"], 3.0);
    assert_eq!(wall["variants"][0]["title"], "Please allow us");
    assert_eq!(wall["variants"][2]["weight"], 0.5);
    // The A/B table follows the configured variants.
    let rows = table_rows(&b.get(&format!("/dashboard/sites/{site}")), "ab");
    assert_eq!(rows.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(), ["control", "emotional", "short"]);

    // Invalid walls are explained and change nothing.
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[("kind", "popup"), ("v0_name", "a"), ("v0_title", "t"), ("v0_body", "b")], "kind must be one of"),
        (&[("v0_name", "a b"), ("v0_title", "t"), ("v0_body", "b")], "a variant needs a name"),
        (&[("v0_name", "a"), ("v0_title", "t"), ("v0_body", "b"), ("color_text", "red")], "text colour"),
        (&[("v0_name", "a"), ("v0_title", ""), ("v0_body", "b")], "needs a title"),
    ];
    for (pairs, message) in cases {
        let mut form = vec![("csrf", token.as_str())];
        if !pairs.iter().any(|(k, _)| *k == "kind") {
            form.push(("kind", "soft"));
        }
        form.extend_from_slice(pairs);
        let a = b.post(&path, &form);
        assert_eq!(a.status, 400, "{pairs:?}: {}", a.text);
        assert!(a.text.contains(message), "{pairs:?} should say {message:?}: {}", a.text);
    }
    let again = app.send(app.request(reqwest::Method::GET, &format!("/v1/sites/{site}")).bearer_auth(&app.key)).body;
    assert_eq!(&again["wall"], wall);
}

#[test]
fn site_settings_change_the_site_and_deleting_removes_it() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    let site = id(&app.create_site("news.example.com", "UTC"));
    let mut b = Browser::new(&app);
    b.login("ann@example.com");
    let path = format!("/dashboard/sites/{site}/settings");
    let page = b.get(&path);
    page.expect(200);
    assert!(page.text.contains(&format!("data-site-id=&quot;{site}&quot;")), "the install snippet names the site");
    let token = csrf(&page);

    let form = |name: &'static str, domain: &'static str, revenue: &'static str| {
        vec![("name", name), ("domain", domain), ("timezone", "America/New_York"), ("status", "paused"), ("revenue_per_1000_pageviews", revenue)]
    };
    for (fields, message) in [(form("News", "not a domain", "2"), "domain must be a host name"), (form("News", "news.example.com", "-1"), "must be zero or more")] {
        let mut f = vec![("csrf", token.as_str())];
        f.extend(fields);
        let a = b.post(&path, &f);
        assert_eq!(a.status, 400, "{}", a.text);
        assert!(a.text.contains(message), "{}", a.text);
    }
    assert_eq!(app.get(&format!("/v1/sites/{site}")).body["status"], "active", "nothing changed");

    let mut f = vec![("csrf", token.as_str())];
    f.extend(form("The News", "www.news.example.com", "3.5"));
    let a = b.post(&path, &f);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some(format!("{path}?saved=1").as_str())));
    let s = app.get(&format!("/v1/sites/{site}")).body;
    assert_eq!(
        (s["name"].as_str(), s["domain"].as_str(), s["timezone"].as_str(), s["status"].as_str(), s["revenue_per_1000_pageviews"].as_f64()),
        (Some("The News"), Some("www.news.example.com"), Some("America/New_York"), Some("paused"), Some(3.5))
    );
    // A paused site's events are refused, as the page says.
    assert_eq!(app.track(&event(&site, "session-0001", "pageview", json!({}))).status, 403);
    // An empty revenue clears the figure.
    let mut f = vec![("csrf", token.as_str())];
    f.extend(form("The News", "www.news.example.com", ""));
    assert_eq!(b.post(&path, &f).status, 303);
    assert!(app.get(&format!("/v1/sites/{site}")).body["revenue_per_1000_pageviews"].is_null());

    let a = b.post(&format!("/dashboard/sites/{site}/delete"), &[("csrf", &token)]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some("/dashboard/")));
    assert_eq!(app.get(&format!("/v1/sites/{site}")).status, 404);
    assert_eq!(b.get(&path).status, 404);
}

#[test]
fn exports_download_the_same_files_as_the_api_for_either_role() {
    let app = TestApp::spawn_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0", "--country-header", "X-Country"]);
    create_user(&app, "rita@example.com", "reader");
    let site = id(&app.create_site("news.example.com", "UTC"));
    for (i, country) in ["FR", "DE", "FR"].iter().enumerate() {
        let s = format!("session-{i:04}");
        for t in ["pageview", "adblock_detected"] {
            let e = event(&site, &s, t, json!({"metadata": {"device_type": "mobile"}}));
            let req = app.request(reqwest::Method::POST, "/v1/events/track").bearer_auth(&app.key).header("X-Country", *country).json(&e);
            app.send(req).expect(201);
        }
    }
    let mut b = Browser::new(&app);
    b.login("rita@example.com");
    let page = b.get(&format!("/dashboard/sites/{site}/export"));
    page.expect(200);
    for format in ["csv", "json", "pdf", "zip"] {
        assert!(page.text.contains(&format!("name=\"format\" value=\"{format}\"")), "{format} offered");
    }
    for country in ["DE", "FR"] {
        assert!(page.text.contains(&format!("name=\"country\" value=\"{country}\"")), "{country} offered");
    }

    let today = chrono::Utc::now().date_naive();
    let start = (today - chrono::Duration::days(6)).to_string();
    let end = today.to_string();
    for format in ["csv", "json", "pdf", "zip"] {
        let q = format!("?format={format}&start={start}&end={end}&device=mobile");
        let mine = b.get(&format!("/dashboard/sites/{site}/export/download{q}"));
        mine.expect(200);
        let api = app.get(&format!("/v1/sites/{site}/export{q}"));
        api.expect(200);
        assert_eq!(mine.header("content-type"), api.header("content-type"), "{format}");
        assert_eq!(mine.header("content-disposition"), api.header("content-disposition"), "{format}");
        assert!(mine.header("content-disposition").unwrap().starts_with("attachment"));
        match format {
            // Text formats carry no generation time: byte for byte the API's file.
            "csv" | "json" => assert_eq!(mine.text, api.text, "{format}"),
            "pdf" => assert!(mine.text.starts_with("%PDF-"), "a PDF"),
            _ => assert!(mine.text.starts_with("PK"), "a ZIP"),
        }
    }
    let csv = b.get(&format!("/dashboard/sites/{site}/export/download?format=csv&start={start}&end={end}&country=fr"));
    let rows: Vec<&str> = csv.text.lines().skip(1).collect();
    assert!(!rows.is_empty() && rows.iter().all(|r| r.ends_with(",FR")), "{}", csv.text);

    let a = b.get(&format!("/dashboard/sites/{site}/export/download?format=xls"));
    assert_eq!(a.status, 400);
    assert!(a.text.contains("format must be csv, json, pdf or zip"));
    let a = b.get(&format!("/dashboard/sites/{site}/export/download?format=csv&start={end}&end={start}"));
    assert_eq!(a.status, 400);
}

#[test]
fn integrations_are_added_tested_with_their_delivery_log_and_deleted() {
    let app = TestApp::spawn_reaching_loopback();
    create_user(&app, "ann@example.com", "admin");
    create_user(&app, "rita@example.com", "reader");
    let site = id(&app.create_site("news.example.com", "UTC"));
    let hook = HttpReceiver::start(&[200]);
    let mut b = Browser::new(&app);
    b.login("ann@example.com");
    let path = format!("/dashboard/sites/{site}/integrations");
    let token = b.token(&path);

    let a = b.post(&path, &[("csrf", &token), ("kind", "webhook"), ("name", "Ops"), ("url", "ftp://example.com/x"), ("events", "no_data")]);
    assert_eq!(a.status, 400);
    assert!(a.text.contains("url must be an absolute http(s) URL"), "{}", a.text);
    let a = b.post(&path, &[("csrf", &token), ("kind", "webhook"), ("name", "Ops"), ("url", &hook.url), ("events", "bogus")]);
    assert_eq!(a.status, 400);
    assert!(a.text.contains("events must be a non-empty list"));

    let a = b.post(&path, &[("csrf", &token), ("kind", "webhook"), ("name", "Ops"), ("url", &hook.url), ("events", "daily_report"), ("events", "no_data")]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some(format!("{path}#created-title").as_str())), "{}", a.text);
    let secret = shown_secret(&b.get(&path), "new-secret").expect("the signing secret is shown once");
    assert!(secret.starts_with("whsec_"), "{secret}");
    let slack = "https://hooks.slack.example/services/T000/B000/SECRETTOKEN";
    let a = b.post(&path, &[("csrf", &token), ("kind", "slack"), ("name", "Growth"), ("url", slack), ("events", "ab_test_winner")]);
    assert_eq!(a.status, 303);
    let a = b.get(&path);
    assert!(a.text.contains("Integration “Growth” added") && shown_secret(&a, "new-secret").is_none(), "a Slack-type webhook has no secret");

    let listed = app.get(&format!("/v1/sites/{site}/integrations")).body;
    let list = listed["integrations"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    let webhook = list.iter().find(|i| i["kind"] == "webhook").unwrap();
    assert_eq!(webhook["events"], json!(["daily_report", "no_data"]));
    let iid = webhook["id"].as_str().unwrap().to_owned();

    let page = b.get(&path);
    assert!(!page.text.contains(&secret) && !page.text.contains("SECRETTOKEN"), "secrets are not shown again");
    assert!(!page.text.contains("secret-token") && unescape(&page.text).contains(&format!("{}/…", hook.url.split("/hook").next().unwrap())), "webhook URLs are masked too");
    assert!(page.text.contains("Nothing sent yet"));

    let a = b.post(&format!("{path}/{iid}/test"), &[("csrf", &token)]);
    assert_eq!(a.status, 303, "{}", a.text);
    let got = hook.wait_for(1, Duration::from_secs(60));
    assert_eq!(got[0].json()["event"], "test");
    assert!(!got[0].header("postern-signature").is_empty());
    // The log shows the delivery once the worker has recorded it.
    let mut rows = Vec::new();
    for _ in 0..100 {
        let page = b.get(&path);
        rows = page.text.split("<table class=\"deliveries\">").nth(1).map(|t| cells(t.split("<tbody>").nth(1).unwrap())).unwrap_or_default();
        if rows.get(2).is_some_and(|s| s == "delivered") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(rows[1..5], ["test".to_owned(), "delivered".to_owned(), "1".to_owned(), rows[4].clone()]);
    assert!(rows[4].starts_with("HTTP 200"), "{rows:?}");

    // A Reader sees the log but can neither add, test nor delete.
    let mut r = Browser::new(&app);
    r.login("rita@example.com");
    let page = r.get(&path);
    assert!(page.text.contains("delivered") && !page.text.contains("Add an integration") && !page.text.contains("Send a test"));
    assert!(!page.text.contains("HTTP 200") && !page.text.contains("Last answer"), "a Reader sees the outcome, not the receiver's answer");
    let log = r.get(&format!("{path}/{iid}/log"));
    assert_eq!(log.body["deliveries"][0]["state"], "delivered", "{}", log.text);
    assert!(log.body["deliveries"][0]["status"].is_null() && log.body["deliveries"][0]["latency_ms"].is_null(), "{}", log.text);
    let rt = csrf(&page);
    for (p, f) in [
        (path.clone(), vec![("csrf", rt.as_str()), ("kind", "slack"), ("url", slack)]),
        (format!("{path}/{iid}/test"), vec![("csrf", rt.as_str())]),
        (format!("{path}/{iid}/delete"), vec![("csrf", rt.as_str())]),
    ] {
        assert_eq!(r.post(&p, &f).status, 403, "{p}");
    }
    assert_eq!(hook.received().len(), 1, "the Reader's test was not sent");

    let a = b.post(&format!("{path}/{iid}/delete"), &[("csrf", &token)]);
    assert_eq!(a.status, 303);
    assert_eq!(app.get(&format!("/v1/sites/{site}/integrations")).body["integrations"].as_array().unwrap().len(), 1);
    assert_eq!(b.post(&format!("{path}/{iid}/test"), &[("csrf", &token)]).status, 404, "a deleted integration is gone");
}

/// The delivery-log rows (as cell texts) of one integration's section.
fn log_rows(page: &Answer, iid: &str) -> Vec<Vec<String>> {
    let section = page.text.split(&format!("id=\"integration-{iid}\"")).nth(1).unwrap_or_else(|| panic!("no integration {iid}"));
    let section = section.split("</section>").next().unwrap();
    match section.split("<table class=\"deliveries\">").nth(1) {
        None => Vec::new(),
        Some(t) => t.split("<tbody>").nth(1).unwrap().split("</tbody>").next().unwrap().split("<tr").skip(1).map(cells).collect(),
    }
}

#[test]
fn reloading_the_page_a_form_leads_to_creates_nothing_and_shows_a_secret_once() {
    let app = TestApp::spawn_reaching_loopback();
    create_user(&app, "ann@example.com", "admin");
    let site = id(&app.create_site("news.example.com", "UTC"));
    let other = id(&app.create_site("other.example.com", "UTC"));
    let hook = HttpReceiver::start(&[]);
    let mut b = Browser::new(&app);
    b.login("ann@example.com");
    let mut second = Browser::new(&app);
    second.login("ann@example.com");
    let count = |path: &str, field: &str| app.get(path).body[field].as_array().unwrap().len();

    // Generate API Key: POST → 303 → GET; the secret on that page only, in this session only.
    let keys = count("/v1/keys", "keys");
    let token = b.token("/dashboard/settings/api");
    let a = b.post("/dashboard/settings/api/keys", &[("csrf", &token), ("name", "Reload"), ("scopes", "read")]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some("/dashboard/settings/api#created-title")));
    assert!(!a.text.contains("pst_"));
    assert!(shown_secret(&second.get("/dashboard/settings/api"), "new-key").is_none(), "another session of the same user sees no secret");
    let secret = shown_secret(&b.get("/dashboard/settings/api"), "new-key").expect("the secret is shown after the redirect");
    let reload = b.get("/dashboard/settings/api");
    reload.expect(200);
    assert!(!reload.text.contains(&secret) && shown_secret(&reload, "new-key").is_none(), "a reload does not show the secret again");
    assert_eq!(count("/v1/keys", "keys"), keys + 1, "one key, however often the page is reloaded");
    app.get_as(&secret, "/v1/sites").expect(200);

    // Adding a signed webhook: the same, and the secret belongs to its site's page.
    let path = format!("/dashboard/sites/{site}/integrations");
    let token = b.token(&path);
    let a = b.post(&path, &[("csrf", &token), ("kind", "webhook"), ("name", "CRM"), ("url", &hook.url), ("events", "no_data")]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some(format!("{path}#created-title").as_str())));
    let elsewhere = b.get(&format!("/dashboard/sites/{other}/integrations"));
    assert!(shown_secret(&elsewhere, "new-secret").is_none() && !elsewhere.text.contains("added"), "another site's page does not take it");
    let page = b.get(&path);
    assert!(page.text.contains("Integration “CRM” added"));
    let whsec = shown_secret(&page, "new-secret").expect("the signing secret is shown after the redirect");
    let reload = b.get(&path);
    assert!(!reload.text.contains(&whsec) && !reload.text.contains("Integration “CRM” added"), "shown once");
    assert_eq!(count(&format!("/v1/sites/{site}/integrations"), "integrations"), 1);

    // Creating a site, a report and "send now" already answer 303 to a page a reload only reads.
    let sites = count("/v1/sites", "sites");
    let a = b.post("/dashboard/sites", &[("csrf", &token), ("name", "Third"), ("domain", "third.example.com"), ("timezone", "UTC")]);
    assert_eq!(a.status, 303);
    let location = a.header("location").unwrap().to_owned();
    b.get(&location).expect(200);
    b.get(&location).expect(200);
    assert_eq!(count("/v1/sites", "sites"), sites + 1);
    let reports = format!("/dashboard/sites/{site}/reports");
    let a = b.post(&reports, &[("csrf", &token), ("name", "Daily"), ("type", "daily"), ("enabled", "on"), ("time", "07:00"), ("channels", "webhook"), ("format", "json")]);
    assert_eq!(a.status, 303, "{}", a.text);
    let location = a.header("location").unwrap().to_owned();
    b.get(&location).expect(200);
    b.get(&location).expect(200);
    let listed = app.get(&format!("/v1/sites/{site}/reports")).body;
    assert_eq!(listed["reports"].as_array().unwrap().len(), 1);
    let rid = listed["reports"][0]["id"].as_str().unwrap().to_owned();
    let a = b.post(&format!("{reports}/{rid}/send"), &[("csrf", &token)]);
    assert_eq!(a.status, 303);
    let location = a.header("location").unwrap().to_owned();
    b.get(&location).expect(200);
    b.get(&location).expect(200);
    let runs = app.get(&format!("/v1/sites/{site}/reports/{rid}/runs")).body;
    assert_eq!(runs["total"], 1, "one run: {runs}");

    let logs = app.logs();
    assert!(!logs.contains(&secret) && !logs.contains(&whsec), "secrets are never logged");
}

#[test]
fn send_a_test_goes_back_to_a_log_that_shows_the_outcome() {
    let app = TestApp::spawn_reaching_loopback();
    create_user(&app, "ann@example.com", "admin");
    let site = id(&app.create_site("news.example.com", "UTC"));
    let path = format!("/dashboard/sites/{site}/integrations");
    let mut b = Browser::new(&app);
    b.login("ann@example.com");
    let token = b.token(&path);
    let add = |b: &mut Browser, name: &str, url: &str| {
        let a = b.post(&path, &[("csrf", &token), ("kind", "slack"), ("name", name), ("url", url), ("events", "no_data")]);
        assert_eq!(a.status, 303, "{}", a.text);
        let listed = app.get(&format!("/v1/sites/{site}/integrations")).body;
        listed["integrations"].as_array().unwrap().iter().find(|i| i["name"] == name).unwrap()["id"].as_str().unwrap().to_owned()
    };
    let (ok, gone, busy) = (HttpReceiver::start(&[200]), HttpReceiver::start(&[404]), HttpReceiver::start(&[503]));
    let ok_id = add(&mut b, "Works", &ok.url);
    let gone_id = add(&mut b, "Gone", &gone.url);
    let busy_id = add(&mut b, "Busy", &busy.url);

    for (iid, state, answer) in [(&ok_id, "delivered", "HTTP 200"), (&gone_id, "failed", "HTTP 404"), (&busy_id, "pending (will retry)", "HTTP 503")] {
        let a = b.post(&format!("{path}/{iid}/test"), &[("csrf", &token)]);
        assert_eq!((a.status.as_u16(), a.header("location")), (303, Some(format!("{path}#integration-{iid}").as_str())));
        // One GET, as the browser follows the redirect: no reload.
        let page = b.get(a.header("location").unwrap());
        let rows = log_rows(&page, iid);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0][1..4], ["test".to_owned(), state.to_owned(), "1".to_owned()], "{rows:?}");
        assert!(rows[0][4].starts_with(&format!("{answer} in ")), "{rows:?}");
        if state != "delivered" {
            assert!(rows[0][5].starts_with("the receiver answered"), "the failure is shown: {rows:?}");
        }
        assert!(!page.text.contains("Not sent yet"), "nothing is left queued");
    }
    assert_eq!((ok.received().len(), gone.received().len(), busy.received().len()), (1, 1, 1));

    // A receiver slower than the wait: the log says the test is not sent yet and how to see it.
    let slow = HttpReceiver::start_with(&[200], crate::receivers::Options { held: true, ..Default::default() });
    let slow_id = add(&mut b, "Slow", &slow.url);
    let a = b.post(&format!("{path}/{slow_id}/test"), &[("csrf", &token)]);
    assert_eq!(a.status, 303);
    let page = b.get(a.header("location").unwrap());
    assert_eq!(log_rows(&page, &slow_id)[0][2], "pending");
    let section = page.text.split(&format!("id=\"integration-{slow_id}\"")).nth(1).unwrap().split("</section>").next().unwrap();
    assert!(section.contains("Not sent yet") && section.contains(&format!("href=\"{path}#integration-{slow_id}\"")), "{section}");
    assert!(section.contains(&format!("data-queued=\"{path}/{slow_id}/log\"")), "the page's script polls the log: {section}");
    let log = b.get(&format!("{path}/{slow_id}/log"));
    log.expect(200);
    assert_eq!(log.header("cache-control"), Some("no-store"));
    assert_eq!((log.body["deliveries"][0]["state"].as_str(), log.body["deliveries"][0]["queued"].as_bool()), (Some("pending"), Some(true)), "{}", log.text);
    let (code, _, _) = Browser::new(&app).get(&format!("{path}/{slow_id}/log")).expect(401).error();
    assert_eq!(code, "UNAUTHENTICATED", "the script gets the API's error, not the login page");
    slow.release();
    slow.wait_for(1, Duration::from_secs(30));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let delivered = loop {
        let log = b.get(&format!("{path}/{slow_id}/log")).body;
        if log["deliveries"][0]["state"] == "delivered" || std::time::Instant::now() > deadline {
            break log["deliveries"][0].clone();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!((delivered["state"].as_str(), delivered["status"].as_u64(), delivered["queued"].as_bool()), (Some("delivered"), Some(200), Some(false)), "{delivered}");
}
