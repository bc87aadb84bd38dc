//! The command-line contract (DESIGN §10): admin commands, serve flags and errors, environment configuration, `--demo`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::{json, Value};

use crate::support::*;

/// Runs `postern <args>` with `stdin` piped in (or closed) and returns its output.
fn postern(args: &[&str], db: Option<&Db>, stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    if let Some(db) = db {
        cmd.arg("--db").arg(db);
    }
    cmd.env_remove("POSTERN_DB").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("running postern");
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            // A command may refuse its arguments before reading stdin: a broken pipe is fine.
            let _ = input.write_all(text.as_bytes());
        }
    }
    wait_output(child, Duration::from_secs(60))
}

fn wait_output(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("postern did not exit within {limit:?}; stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn assert_failed(o: &Output, what: &str) {
    assert!(!o.status.success(), "{what} must fail; stdout: {} stderr: {}", stdout(o), stderr(o));
    assert!(o.status.code().is_some_and(|c| c != 0), "{what} must exit with a non-zero code, not a signal: {:?}", o.status);
    assert!(!stderr(o).contains("panicked"), "{what} must fail with a message, not a panic: {}", stderr(o));
    assert!(!stderr(o).trim().is_empty(), "{what} must explain the failure on stderr");
}

/// The single line printed by a command that prints only a value.
#[track_caller]
fn only_line(o: &Output) -> String {
    assert!(o.status.success(), "command failed: {}", stderr(o));
    let out = stdout(o);
    assert!(out.ends_with('\n'), "the output must be one line: {out:?}");
    let line = out.trim_end_matches('\n');
    assert!(!line.contains('\n') && !line.is_empty(), "the output must be exactly one line: {out:?}");
    assert_eq!(line.trim(), line, "no surrounding whitespace: {out:?}");
    line.to_owned()
}

fn http() -> Client {
    Client::builder().timeout(Duration::from_secs(30)).build().unwrap()
}

fn get(base: &str, key: &str, path: &str) -> (u16, Value) {
    let res = http().get(format!("{base}{path}")).bearer_auth(key).send().expect("HTTP request");
    let status = res.status().as_u16();
    let body = res.json().unwrap_or(Value::Null);
    (status, body)
}

/// A `postern serve` started by hand (own flags and environment), killed on drop.
struct Server {
    child: Child,
    base: String,
    /// Everything printed on stdout up to and including the "listening" line.
    banner: String,
    log: PathBuf,
}

impl Server {
    fn start(args: &[&str], env: &[(&str, &str)], log: PathBuf) -> Server {
        let err = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(args).stdout(Stdio::piped()).stderr(err);
        for var in ["POSTERN_DB", "POSTERN_LISTEN", "POSTERN_RATE_LIMIT_API", "POSTERN_RATE_LIMIT_INGEST", "POSTERN_DEMO", "POSTERN_CONFIG"] {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting postern");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut banner = String::new();
            let mut sent = false;
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if !sent {
                    banner.push_str(&line);
                    banner.push('\n');
                    if let Some(url) = line.strip_prefix("postern listening on ") {
                        let _ = tx.send((url.trim().to_owned(), banner.clone()));
                        sent = true;
                    }
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(180)) {
            Ok((base, banner)) => Server { child, base, banner, log },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("postern did not start; log:\n{}", std::fs::read_to_string(&log).unwrap_or_default())
            }
        }
    }

    fn stop(mut self) -> i32 {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "postern did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- postern log ----\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }
}

#[test]
fn create_key_prints_only_the_key_and_the_key_works() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("keys-cli.example.com", "UTC"));
    let o = postern(&["admin", "create-key", "--account", "acme"], Some(&app.db), None);
    let key = only_line(&o);
    assert!(key.starts_with("pst_"), "the key starts with pst_: {key:?}");
    assert!(key.len() > 20 && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "a bare key: {key:?}");
    assert_ne!(key, app.key, "every call creates a new key");

    // Against the running server: the account's sites, every scope.
    let sites = app.get_as(&key, "/v1/sites");
    sites.expect(200);
    assert!(sites.text.contains(&site), "the CLI key sees account acme's site: {}", sites.text);
    app.post_as(&key, "/v1/sites", &json!({"name": "By CLI key", "domain": "by-cli.example.com"})).expect(201);
    app.post_as(&key, "/v1/events/track", &event(&site, "cli-key-session", "pageview", json!({}))).expect(201);

    // A new account is created on the fly and sees none of acme's sites.
    let other = only_line(&postern(&["admin", "create-key", "--account", "globex"], Some(&app.db), None));
    assert!(other.starts_with("pst_"));
    let a = app.get_as(&other, "/v1/sites");
    a.expect(200);
    assert!(!a.text.contains(&site), "another account must not see acme's sites: {}", a.text);
    app.get_as(&other, &format!("/v1/sites/{site}")).expect(404);
}

#[test]
fn create_key_scopes_are_enforced_and_unknown_scopes_refused() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("scopes-cli.example.com", "UTC"));
    let reader = only_line(&postern(&["admin", "create-key", "--account", "acme", "--scopes", "read"], Some(&app.db), None));
    assert!(reader.starts_with("pst_"));
    app.get_as(&reader, "/v1/sites").expect(200);
    let a = app.post_as(&reader, "/v1/sites", &json!({"name": "Nope", "domain": "nope.example.com"}));
    a.expect(403);
    assert_eq!(a.error().0, "FORBIDDEN");
    app.post_as(&reader, "/v1/events/track", &event(&site, "reader-session", "pageview", json!({}))).expect(403);

    let ingest = only_line(&postern(&["admin", "create-key", "--account", "acme", "--scopes", "read,ingest"], Some(&app.db), None));
    app.post_as(&ingest, "/v1/events/track", &event(&site, "ingest-session", "pageview", json!({}))).expect(201);
    app.post_as(&ingest, "/v1/sites", &json!({"name": "Nope", "domain": "nope.example.com"})).expect(403);

    for bad in ["admin", "read,everything", ""] {
        let o = postern(&["admin", "create-key", "--account", "acme", "--scopes", bad], Some(&app.db), None);
        assert_failed(&o, &format!("create-key --scopes {bad:?}"));
        assert!(o.stdout.is_empty(), "no key printed for --scopes {bad:?}: {}", stdout(&o));
    }
}

#[test]
fn create_user_reads_the_password_from_stdin_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::fresh(dir.path().join("users.db"));
    let args = ["admin", "create-user", "--account", "acme", "--email", "ada@example.com", "--role", "admin"];
    let o = postern(&args, Some(&db), Some("a long enough password\n"));
    assert!(o.status.success(), "create-user failed: {}", stderr(&o));
    assert!(!stdout(&o).contains("a long enough password") && !stderr(&o).contains("a long enough password"), "the password must not be echoed");

    let o = postern(&args, Some(&db), Some("another good password\n"));
    assert_failed(&o, "a second create-user with the same e-mail");

    let o = postern(&["admin", "create-user", "--account", "acme", "--email", "bob@example.com", "--role", "reader"], Some(&db), Some("short\n"));
    assert_failed(&o, "create-user with a short password");
    let o = postern(&["admin", "create-user", "--account", "acme", "--email", "bob@example.com", "--role", "reader"], Some(&db), Some(""));
    assert_failed(&o, "create-user with no password on stdin");
    let o = postern(&["admin", "create-user", "--account", "acme", "--email", "not-an-email", "--role", "reader"], Some(&db), Some("a long enough password\n"));
    assert_failed(&o, "create-user with an invalid e-mail");
    let o = postern(&["admin", "create-user", "--account", "acme", "--email", "bob@example.com", "--role", "boss"], Some(&db), Some("a long enough password\n"));
    assert_failed(&o, "create-user --role boss");

    // The refusals created nothing: bob can still be created as a reader.
    let o = postern(&["admin", "create-user", "--account", "acme", "--email", "bob@example.com", "--role", "reader"], Some(&db), Some("bobs password 123\n"));
    assert!(o.status.success(), "create-user reader failed: {}", stderr(&o));
}

#[test]
fn create_site_prints_only_the_site_id() {
    let app = TestApp::spawn();
    let o = postern(
        &["admin", "create-site", "--account", "acme", "--name", "Gazette", "--domain", "gazette.example.com", "--timezone", "Europe/Paris"],
        Some(&app.db),
        None,
    );
    let site = only_line(&o);
    assert!(uuid::Uuid::parse_str(&site).is_ok(), "create-site prints a UUID: {site:?}");
    let a = app.get(&format!("/v1/sites/{site}"));
    a.expect(200);
    assert_eq!(a.body["id"], json!(site));
    assert_eq!(a.body["name"], json!("Gazette"));
    assert_eq!(a.body["domain"], json!("gazette.example.com"));
    assert_eq!(a.body["status"], json!("active"));
    app.track(&event(&site, "cli-site-session", "pageview", json!({}))).expect(201);

    let o = postern(
        &["admin", "create-site", "--account", "acme", "--name", "Bad", "--domain", "bad.example.com", "--timezone", "Mars/Olympus"],
        Some(&app.db),
        None,
    );
    assert_failed(&o, "create-site with an unknown timezone");
    assert!(o.stdout.is_empty());
}

#[test]
fn admin_on_an_unreachable_database_fails_with_a_message() {
    let db = Db::sqlite(PathBuf::from("/nonexistent-postern-dir/x.db"));
    let o = postern(&["admin", "create-key", "--account", "acme"], Some(&db), None);
    assert_failed(&o, "create-key on /nonexistent-postern-dir/x.db");
    assert!(stderr(&o).contains("/nonexistent-postern-dir/x.db"), "the message names the file: {}", stderr(&o));
    assert!(o.stdout.is_empty());
    let o = postern(&["serve", "--listen", "127.0.0.1:0"], Some(&db), None);
    assert_failed(&o, "serve on /nonexistent-postern-dir/x.db");
    assert!(stderr(&o).contains("/nonexistent-postern-dir/x.db"), "the message names the file: {}", stderr(&o));
}

#[test]
fn a_toml_config_file_sets_the_limits_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::fresh(dir.path().join("file.db"));
    let dbs = db.to_string();
    let key = only_line(&postern(&["admin", "create-key", "--account", "acme"], Some(&db), None));
    let conf = dir.path().join("postern.toml");
    std::fs::write(&conf, format!("db = {dbs:?}\nrate_limit_api = 2\n")).unwrap();
    let server = Server::start(&["serve", "--config", conf.to_str().unwrap(), "--listen", "127.0.0.1:0"], &[], dir.path().join("file.log"));
    assert_eq!(get(&server.base, &key, "/v1/sites").0, 200);
    assert_eq!(get(&server.base, &key, "/v1/sites").0, 200);
    assert_eq!(get(&server.base, &key, "/v1/sites").0, 429, "rate_limit_api = 2 from the file");
    assert_eq!(server.stop(), 0);
    let server = Server::start(
        &["serve", "--config", conf.to_str().unwrap(), "--listen", "127.0.0.1:0", "--rate-limit-api", "0"],
        &[],
        dir.path().join("file2.log"),
    );
    for i in 0..5 {
        assert_eq!(get(&server.base, &key, "/v1/sites").0, 200, "request {} with --rate-limit-api 0 over the file's 2", i + 1);
    }
    assert_eq!(server.stop(), 0);
}

#[test]
fn serve_on_a_busy_port_exits_with_a_message_naming_the_address() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::fresh(dir.path().join("busy.db"));
    let o = postern(&["serve", "--listen", &addr], Some(&db), None);
    assert_failed(&o, &format!("serve --listen {addr} (busy)"));
    assert!(stderr(&o).contains(&addr), "the message must name {addr}: {}", stderr(&o));
    assert!(!stdout(&o).contains("postern listening on"), "{}", stdout(&o));
    drop(busy);
}

#[test]
fn help_lists_the_stable_serve_flags() {
    for args in [&["--help"][..], &["serve", "--help"][..]] {
        let o = postern(args, None, None);
        assert!(o.status.success(), "postern {args:?} failed: {}", stderr(&o));
        let text = stdout(&o);
        for flag in ["--db", "--listen", "--rate-limit-ingest", "--rate-limit-api"] {
            assert!(text.contains(flag), "postern {args:?} must list {flag}:\n{text}");
        }
    }
    let o = postern(&["admin", "create-key", "--help"], None, None);
    assert!(o.status.success());
    for flag in ["--db", "--account", "--scopes"] {
        assert!(stdout(&o).contains(flag), "admin create-key --help must list {flag}:\n{}", stdout(&o));
    }
    let o = postern(&["admin", "create-user", "--help"], None, None);
    assert!(o.status.success());
    for flag in ["--db", "--account", "--email", "--role"] {
        assert!(stdout(&o).contains(flag), "admin create-user --help must list {flag}:\n{}", stdout(&o));
    }
}

#[test]
fn rate_limit_is_configurable_by_environment_variable_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::fresh(dir.path().join("env.db"));
    let dbs: &str = &db.to_string();
    let key = only_line(&postern(&["admin", "create-key", "--account", "acme"], Some(&db), None));

    let server = Server::start(&["serve", "--db", dbs, "--listen", "127.0.0.1:0"], &[("POSTERN_RATE_LIMIT_API", "3")], dir.path().join("env.log"));
    for i in 0..3 {
        assert_eq!(get(&server.base, &key, "/v1/sites").0, 200, "request {}", i + 1);
    }
    let (status, body) = get(&server.base, &key, "/v1/sites");
    assert_eq!(status, 429, "POSTERN_RATE_LIMIT_API=3 must refuse the 4th request: {body}");
    assert_eq!(body["error"]["code"], json!("RATE_LIMITED"));
    assert_eq!(server.stop(), 0);

    // A flag overrides the environment.
    let server = Server::start(
        &["serve", "--db", dbs, "--listen", "127.0.0.1:0", "--rate-limit-api", "10"],
        &[("POSTERN_RATE_LIMIT_API", "3")],
        dir.path().join("env2.log"),
    );
    for i in 0..5 {
        assert_eq!(get(&server.base, &key, "/v1/sites").0, 200, "request {} with --rate-limit-api 10", i + 1);
    }
    assert_eq!(server.stop(), 0);

    // POSTERN_DB and POSTERN_LISTEN work too.
    let server = Server::start(&["serve"], &[("POSTERN_DB", dbs), ("POSTERN_LISTEN", "127.0.0.1:0")], dir.path().join("env3.log"));
    assert_eq!(get(&server.base, &key, "/v1/sites").0, 200, "the key of POSTERN_DB's database works");
    assert_eq!(server.stop(), 0);
}

/// (API key, site id) printed by `serve --demo`.
fn demo_banner(banner: &str) -> (String, String) {
    let key_line = banner.lines().find(|l| l.contains("API key")).unwrap_or_else(|| panic!("no API key line in:\n{banner}"));
    let key = key_line
        .split_whitespace()
        .find(|w| w.starts_with("pst_"))
        .unwrap_or_else(|| panic!("no pst_ key in {key_line:?}"))
        .to_owned();
    let site = banner
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .find(|w| w.len() == 36 && uuid::Uuid::parse_str(w).is_ok())
        .unwrap_or_else(|| panic!("no site id in:\n{banner}"))
        .to_owned();
    (key, site)
}

fn dashboard_sessions(base: &str, key: &str, site: &str) -> (i64, Value) {
    let (status, body) = get(base, key, &format!("/v1/analytics/sites/{site}/dashboard?days=30"));
    assert_eq!(status, 200, "{body}");
    (body["metrics"]["sessions"].as_i64().expect("metrics.sessions"), body)
}

#[test]
fn serve_demo_seeds_a_site_and_prints_a_working_key_once_per_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::fresh(dir.path().join("demo.db"));
    let dbs = db.to_string();
    let args = ["serve", "--demo", "--db", &dbs, "--listen", "127.0.0.1:0"];

    let server = Server::start(&args, &[], dir.path().join("demo1.log"));
    let (key, site) = demo_banner(&server.banner);
    let base = server.base.clone();

    let (status, sites) = get(&base, &key, "/v1/sites");
    assert_eq!(status, 200, "the printed key must work: {sites}");
    assert!(sites.to_string().contains("The Daily Courier"), "{sites}");
    assert!(sites.to_string().contains(&site), "the printed site id is listed: {sites}");

    let (sessions, dash) = dashboard_sessions(&base, &key, &site);
    assert!(sessions > 5000, "30 days of demo history has more than 5000 sessions: {dash}");
    assert!(dash["metrics"]["conversions"].as_i64().expect("metrics.conversions") > 0, "{dash}");
    assert!(dash["metrics"]["adblock_detected"].as_i64().unwrap_or(0) > 0, "{dash}");

    let (status, ab) = get(&base, &key, &format!("/v1/analytics/sites/{site}/ab-testing"));
    assert_eq!(status, 200, "{ab}");
    let variants = ab["variants"].as_array().unwrap_or_else(|| panic!("variants array: {ab}"));
    for name in ["control", "emotional", "offer"] {
        let v = variants.iter().find(|v| v["name"] == json!(name)).unwrap_or_else(|| panic!("variant {name} missing: {ab}"));
        assert!(v["impressions"].as_i64().unwrap_or(0) > 0, "variant {name} has impressions: {v}");
    }

    let (status, events) = get(&base, &key, &format!("/v1/events/sites/{site}?limit=1"));
    assert_eq!(status, 200, "{events}");
    let total = events["total"].as_i64().expect("total");
    assert!(total > 5000, "{events}");
    assert_eq!(server.stop(), 0);

    // A second start on the same database: a new key, the old one revoked, the history kept as is.
    let server = Server::start(&args, &[], dir.path().join("demo2.log"));
    let (key2, site2) = demo_banner(&server.banner);
    assert_ne!(key2, key, "each demo start prints a new key");
    assert_eq!(site2, site, "the same demo site");
    let (status, body) = get(&server.base, &key, "/v1/sites");
    assert_eq!(status, 401, "the previous demo key must be revoked: {body}");
    let (status, sites) = get(&server.base, &key2, "/v1/sites");
    assert_eq!(status, 200, "{sites}");
    assert_eq!(sites.to_string().matches("The Daily Courier").count(), 1, "one demo site, not two: {sites}");

    let (status, events) = get(&server.base, &key2, &format!("/v1/events/sites/{site}?limit=1"));
    assert_eq!(status, 200);
    assert_eq!(events["total"].as_i64(), Some(total), "the history must not be seeded twice");
    let (sessions2, dash2) = dashboard_sessions(&server.base, &key2, &site);
    if dash2["period"] == dash["period"] {
        assert_eq!(sessions2, sessions, "same sessions for days=30 on the same day: {dash} vs {dash2}");
    }
    assert_eq!(server.stop(), 0);
}
