//! `TestApp`: the real binary on port 0 with a temporary database, and one
//! helper per endpoint. Failures print the server's log.
//!
//! The database is an SQLite file, or with `POSTERN_TEST_ENGINE=postgres` a
//! fresh database on the PostgreSQL cluster named by `POSTERN_TEST_POSTGRES`
//! (`scripts/with-postgres` starts one and sets it): see `Db`.

use std::ffi::OsStr;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_postern");

/// The flags that let webhooks reach the tests' receivers, which listen on
/// loopback: a collector refuses loopback destinations unless allowed.
pub const LOOPBACK_HOOKS: [&str; 2] = ["--webhook-allow-cidr", "127.0.0.0/8"];

/// One HTTP answer: status, headers and the body parsed as JSON (`Null` when empty or not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Answer {
    fn from(res: Response) -> Answer {
        let status = res.status();
        let headers = res.headers().clone();
        let text = res.text().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer { status, headers, body, text }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the spec's error shape and returns (code, field, reason).
    #[track_caller]
    pub fn error(&self) -> (String, Option<String>, String) {
        let e = &self.body["error"];
        assert!(e.is_object(), "expected an error body, got {} {}", self.status, self.text);
        let code = e["code"].as_str().expect("error.code").to_owned();
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "error.message missing: {}", self.text);
        let details = &e["details"];
        assert!(details.is_object(), "error.details must be an object: {}", self.text);
        let reason = details["reason"].as_str().expect("details.reason").to_owned();
        (code, details["field"].as_str().map(str::to_owned), reason)
    }

    #[track_caller]
    pub fn expect(&self, status: u16) -> &Answer {
        assert_eq!(self.status.as_u16(), status, "unexpected status; body: {}", self.text);
        self
    }
}

/// What `--db` names for the binary under test: an SQLite file, or a
/// PostgreSQL database of its own, created empty and dropped with this value.
pub struct Db(Engine);

enum Engine {
    Sqlite(PathBuf),
    Postgres { server: String, name: String, url: String },
    /// A PostgreSQL database another `Db` owns (and drops).
    Shared(String),
}

impl Db {
    /// A new, empty database on the engine the tests run on: `sqlite_file`
    /// (which must not exist yet) on SQLite.
    pub fn fresh(sqlite_file: PathBuf) -> Db {
        let Some(server) = postgres_server() else { return Db(Engine::Sqlite(sqlite_file)) };
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        psql(&format!("{server}/postgres"), &["-c", &format!("CREATE DATABASE {name}")]);
        let url = format!("{server}/{name}");
        Db(Engine::Postgres { server, name, url })
    }

    /// A fresh PostgreSQL database whatever engine the other tests run on,
    /// for tests of several collectors on one database. `None` skips such a
    /// test without a cluster (`POSTERN_TEST_POSTGRES`), saying so, unless
    /// `POSTERN_REQUIRE_POSTGRES` is set (as `scripts/test` sets it).
    pub fn postgres() -> Option<Db> {
        let Ok(server) = std::env::var("POSTERN_TEST_POSTGRES") else {
            assert!(std::env::var_os("POSTERN_REQUIRE_POSTGRES").is_none(), "POSTERN_TEST_POSTGRES is not set");
            eprintln!("skipped: no PostgreSQL cluster (run under scripts/with-postgres)");
            return None;
        };
        let server = server.trim_end_matches('/').to_owned();
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        psql(&format!("{server}/postgres"), &["-c", &format!("CREATE DATABASE {name}")]);
        let url = format!("{server}/{name}");
        Some(Db(Engine::Postgres { server, name, url }))
    }

    /// The same PostgreSQL database for another collector; this `Db` keeps owning it.
    pub fn shared(&self) -> Db {
        match &self.0 {
            Engine::Postgres { url, .. } | Engine::Shared(url) => Db(Engine::Shared(url.clone())),
            Engine::Sqlite(_) => panic!("one SQLite file is never shared by collectors"),
        }
    }

    /// The same PostgreSQL database for another collector whose sessions
    /// carry `application` as their `application_name`, so that the test can
    /// tell from `pg_stat_activity` which node a session belongs to.
    pub fn shared_as(&self, application: &str) -> Db {
        match &self.0 {
            Engine::Postgres { url, .. } | Engine::Shared(url) => Db(Engine::Shared(format!("{url}?application_name={application}"))),
            Engine::Sqlite(_) => panic!("one SQLite file is never shared by collectors"),
        }
    }

    /// This SQLite file, whatever engine the other tests run on.
    pub fn sqlite(file: PathBuf) -> Db {
        Db(Engine::Sqlite(file))
    }

    /// The file, when the database is SQLite. Tests about the SQLite file
    /// itself (its mode, WAL, backups, damage) return early when this is `None`.
    pub fn sqlite_file(&self) -> Option<&Path> {
        match &self.0 {
            Engine::Sqlite(file) => Some(file),
            Engine::Postgres { .. } | Engine::Shared(_) => None,
        }
    }
}

impl AsRef<OsStr> for Db {
    fn as_ref(&self) -> &OsStr {
        match &self.0 {
            Engine::Sqlite(file) => file.as_os_str(),
            Engine::Postgres { url, .. } | Engine::Shared(url) => OsStr::new(url),
        }
    }
}

impl fmt::Display for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Engine::Sqlite(file) => write!(f, "{}", file.display()),
            Engine::Postgres { url, .. } | Engine::Shared(url) => f.write_str(url),
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Engine::Postgres { server, name, .. } = &self.0 {
            // FORCE: a server killed by the test may leave connections behind for a moment.
            let out = psql_command(&format!("{server}/postgres"))
                .args(["-c", &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")])
                .output();
            // A panic here would abort a test that is already failing; a leftover database goes with the cluster.
            if !out.as_ref().is_ok_and(|o| o.status.success()) {
                eprintln!("could not drop test database {name}: {out:?}");
            }
        }
    }
}

/// The PostgreSQL cluster to run on, or `None` for SQLite.
fn postgres_server() -> Option<String> {
    match std::env::var("POSTERN_TEST_ENGINE").as_deref() {
        Err(_) | Ok("") | Ok("sqlite") => None,
        Ok("postgres") => {
            let server = std::env::var("POSTERN_TEST_POSTGRES")
                .expect("POSTERN_TEST_ENGINE=postgres needs POSTERN_TEST_POSTGRES=postgres://user@host:port (scripts/with-postgres sets it)");
            Some(server.trim_end_matches('/').to_owned())
        }
        Ok(other) => panic!("POSTERN_TEST_ENGINE={other}: expected sqlite or postgres"),
    }
}

/// A PostgreSQL client program, Debian's PostgreSQL 15 one when installed.
fn pg_program(name: &str) -> PathBuf {
    let debian = Path::new("/usr/lib/postgresql/15/bin").join(name);
    if debian.exists() { debian } else { PathBuf::from(name) }
}

/// psql on one database: unaligned tuples only, no command tags, no ~/.psqlrc, stop at the first error.
fn psql_command(url: &str) -> Command {
    let mut cmd = Command::new(pg_program("psql"));
    cmd.args(["-Atq", "-X", "-v", "ON_ERROR_STOP=1", "-d", url]);
    cmd
}

#[track_caller]
fn psql(url: &str, args: &[&str]) -> String {
    let out = psql_command(url).args(args).output().expect("psql");
    assert!(out.status.success(), "psql {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

pub struct TestApp {
    pub base: String,
    pub db: Db,
    /// A key with every scope, in account "acme".
    pub key: String,
    /// Keeps the temporary directory (database, log) alive as long as the app.
    _dir: tempfile::TempDir,
    args: Vec<String>,
    /// Environment variables set for the server, after the default `RUST_LOG=info`.
    env: Vec<(String, String)>,
    child: Option<Child>,
    log: PathBuf,
    client: Client,
}

impl TestApp {
    /// A collector with rate limits disabled.
    pub fn spawn() -> TestApp {
        TestApp::spawn_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0"])
    }

    /// A collector with rate limits disabled whose webhooks may reach loopback
    /// (for tests that deliver to receivers on this machine).
    pub fn spawn_reaching_loopback() -> TestApp {
        TestApp::spawn_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0", LOOPBACK_HOOKS[0], LOOPBACK_HOOKS[1]])
    }

    /// A collector with these extra `serve` flags.
    pub fn spawn_with(extra: &[&str]) -> TestApp {
        let mut app = TestApp::new(None, extra, &[]);
        app.key = app.admin(&["create-key", "--account", "acme"]);
        app.start();
        app
    }

    /// A collector with these extra `serve` flags and environment variables (`RUST_LOG=debug`).
    pub fn spawn_with_env(extra: &[&str], env: &[(&str, &str)]) -> TestApp {
        let mut app = TestApp::new(None, extra, env);
        app.key = app.admin(&["create-key", "--account", "acme"]);
        app.start();
        app
    }

    /// A collector serving an existing database, in which `key` is a key
    /// with every scope; its log stays in a temporary directory of its own.
    pub fn spawn_on(db: Db, key: &str, extra: &[&str]) -> TestApp {
        let mut app = TestApp::new(Some(db), extra, &[]);
        app.key = key.to_owned();
        app.start();
        app
    }

    fn new(db: Option<Db>, extra: &[&str], env: &[(&str, &str)]) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        TestApp {
            base: String::new(),
            db: db.unwrap_or_else(|| Db::fresh(dir.path().join("postern.db"))),
            key: String::new(),
            log: dir.path().join("server.log"),
            _dir: dir,
            args: extra.iter().map(|s| s.to_string()).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            child: None,
            client: Client::builder().timeout(Duration::from_secs(30)).build().unwrap(),
        }
    }

    /// Runs `postern admin …` on this app's database and returns its stdout, trimmed.
    #[track_caller]
    pub fn admin(&self, args: &[&str]) -> String {
        let out = Command::new(BIN)
            .arg("admin")
            .args(args)
            .arg("--db")
            .arg(&self.db)
            .output()
            .expect("running postern admin");
        assert!(out.status.success(), "postern admin {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--db")
            .arg(&self.db)
            .args(["--listen", "127.0.0.1:0"])
            .args(&self.args)
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("starting postern");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("postern listening on ") {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        });
        self.child = Some(child);
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => self.base = url,
            Err(_) => panic!("postern did not start; log:\n{}", self.logs()),
        }
    }

    /// The database file, when the tests run on SQLite (see `Db::sqlite_file`).
    pub fn sqlite_file(&self) -> Option<&Path> {
        self.db.sqlite_file()
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit; returns the exit code.
    pub fn stop(&mut self) -> i32 {
        let mut child = self.child.take().expect("running");
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_timeout(&mut child, Duration::from_secs(30)).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("postern did not exit after SIGTERM; log:\n{}", self.logs())
        });
        status.code().unwrap_or(-1)
    }

    /// Kills the process with SIGKILL (no chance to clean up).
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops gracefully (asserting exit 0) and starts again on the same database.
    pub fn restart(&mut self) {
        assert_eq!(self.stop(), 0, "graceful stop must exit 0; log:\n{}", self.logs());
        self.start();
    }

    /// Stops gracefully and starts again with other `serve` flags.
    pub fn restart_with(&mut self, extra: &[&str]) {
        assert_eq!(self.stop(), 0, "graceful stop must exit 0; log:\n{}", self.logs());
        self.args = extra.iter().map(|s| s.to_string()).collect();
        self.start();
    }

    /// Starts again after `kill`/`stop`.
    pub fn start_again(&mut self) {
        self.start();
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        self.client.request(method, self.url(path))
    }

    pub fn send(&self, req: RequestBuilder) -> Answer {
        Answer::from(req.send().expect("HTTP request"))
    }

    /// GET with this app's key.
    pub fn get(&self, path: &str) -> Answer {
        self.get_as(&self.key, path)
    }

    pub fn get_as(&self, key: &str, path: &str) -> Answer {
        self.send(self.request(reqwest::Method::GET, path).bearer_auth(key))
    }

    pub fn post(&self, path: &str, body: &Value) -> Answer {
        self.post_as(&self.key, path, body)
    }

    pub fn post_as(&self, key: &str, path: &str, body: &Value) -> Answer {
        self.send(self.request(reqwest::Method::POST, path).bearer_auth(key).json(body))
    }

    pub fn patch(&self, path: &str, body: &Value) -> Answer {
        self.send(self.request(reqwest::Method::PATCH, path).bearer_auth(&self.key).json(body))
    }

    pub fn delete(&self, path: &str) -> Answer {
        self.send(self.request(reqwest::Method::DELETE, path).bearer_auth(&self.key))
    }

    /// Creates a site through the API and returns its JSON.
    #[track_caller]
    pub fn create_site(&self, domain: &str, timezone: &str) -> Value {
        let a = self.post("/v1/sites", &json!({"name": format!("Site {domain}"), "domain": domain, "timezone": timezone}));
        a.expect(201);
        a.body
    }

    /// POST /v1/events/track with this app's key (so `timestamp` may back-date).
    pub fn track(&self, event: &Value) -> Answer {
        self.post("/v1/events/track", event)
    }

    /// POST /v1/events/track as a browser would: no key, text/plain, an Origin.
    pub fn track_from_browser(&self, origin: &str, event: &Value) -> Answer {
        self.send(
            self.request(reqwest::Method::POST, "/v1/events/track")
                .header("Origin", origin)
                .header("Content-Type", "text/plain")
                .body(event.to_string()),
        )
    }

    pub fn batch(&self, events: &Value) -> Answer {
        self.post("/v1/events/batch", events)
    }

    pub fn dashboard(&self, site: &str, query: &str) -> Answer {
        self.get(&format!("/v1/analytics/sites/{site}/dashboard{query}"))
    }

    pub fn conversions(&self, site: &str, query: &str) -> Answer {
        self.get(&format!("/v1/analytics/sites/{site}/conversions{query}"))
    }

    pub fn ab_testing(&self, site: &str, query: &str) -> Answer {
        self.get(&format!("/v1/analytics/sites/{site}/ab-testing{query}"))
    }

    pub fn events(&self, site: &str, query: &str) -> Answer {
        self.get(&format!("/v1/events/sites/{site}{query}"))
    }

    /// The Prometheus text of `/metrics`, fetched without a key (a keyed
    /// request would queue a `last_used_at` write).
    #[track_caller]
    pub fn metrics(&self) -> String {
        let a = self.send(self.request(reqwest::Method::GET, "/metrics"));
        a.expect(200);
        a.text
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- postern log ----\n{}", self.logs());
        }
    }
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The value of a sample in Prometheus text (`series` with its labels, if any).
#[track_caller]
pub fn sample(text: &str, series: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| !l.starts_with('#') && l.split_whitespace().next() == Some(series))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"));
    let value = line.split_whitespace().nth(1).unwrap_or_else(|| panic!("no value in {line:?}"));
    value.parse().unwrap_or_else(|_| panic!("{series} value {value:?} is not a number"))
}

/// A tracked event body with sensible defaults; `extra` fields are merged in.
pub fn event(site: &str, session: &str, event_type: &str, extra: Value) -> Value {
    let mut e = json!({
        "session_id": session,
        "site_id": site,
        "event_type": event_type,
        "page_url": "https://news.example.com/article/1",
    });
    if let Value::Object(m) = extra {
        for (k, v) in m {
            e[k] = v;
        }
    }
    e
}

/// Tracks with the app's key and asserts 201; returns the answer body.
#[track_caller]
pub fn track_ok(app: &TestApp, body: Value) -> Value {
    let a = app.track(&body);
    assert_eq!(a.status.as_u16(), 201, "track {body} → {}", a.text);
    a.body
}

/// The site's id from its JSON.
pub fn id(site: &Value) -> String {
    site["id"].as_str().expect("site id").to_owned()
}

/// Every event id of a site, paging through GET /v1/events/sites/:id with limit=1000.
pub fn all_event_ids(app: &TestApp, site: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut offset = 0;
    loop {
        let a = app.events(site, &format!("?limit=1000&offset={offset}"));
        a.expect(200);
        let events = a.body["events"].as_array().expect("events array").clone();
        let total = a.body["total"].as_u64().expect("total") as usize;
        for e in &events {
            ids.push(e["id"].as_str().expect("event id").to_owned());
        }
        offset += events.len();
        if events.is_empty() || offset >= total {
            assert_eq!(ids.len(), total, "paging must return exactly `total` events");
            return ids;
        }
    }
}

/// The first column of the first row a query returns, as text: read from
/// the SQLite file with Python's sqlite3 module, or with psql.
#[track_caller]
pub fn sql(db: &Db, query: &str) -> String {
    match &db.0 {
        Engine::Sqlite(file) => {
            let script = format!("import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=30); print(c.execute({query:?}).fetchone()[0])");
            let out = Command::new("python3").args(["-c", &script]).arg(file).output().expect("python3");
            assert!(out.status.success(), "{query}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        }
        Engine::Postgres { url, .. } | Engine::Shared(url) => {
            // A field separator no value holds, so the first column is cut off cleanly.
            let out = psql(url, &["-F", "\u{1f}", "-c", query]);
            let row = out.lines().next().unwrap_or_else(|| panic!("{query}: no row"));
            row.split('\u{1f}').next().unwrap().trim().to_owned()
        }
    }
}

/// Every byte the database holds: the SQLite file and its write-ahead log
/// (deleted rows included), or a `pg_dump` of the PostgreSQL database
/// (its rows as text, binary values in hex).
#[track_caller]
pub fn stored_bytes(db: &Db) -> Vec<u8> {
    match &db.0 {
        Engine::Sqlite(file) => {
            let mut bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let mut wal = file.as_os_str().to_owned();
            wal.push("-wal");
            bytes.extend(std::fs::read(wal).unwrap_or_default());
            bytes
        }
        Engine::Postgres { url, .. } | Engine::Shared(url) => {
            let out = Command::new(pg_program("pg_dump")).args(["--no-owner", "-d", url]).output().expect("pg_dump");
            assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
            out.stdout
        }
    }
}

/// Runs statements in one transaction: with Python's sqlite3 module on the SQLite file, or with psql.
#[track_caller]
pub fn sql_exec(db: &Db, statements: &str) {
    match &db.0 {
        Engine::Sqlite(file) => {
            let script = format!("import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=30); c.executescript({statements:?}); c.commit()");
            let out = Command::new("python3").args(["-c", &script]).arg(file).output().expect("python3");
            assert!(out.status.success(), "{statements}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Engine::Postgres { url, .. } | Engine::Shared(url) => {
            psql(url, &["--single-transaction", "-c", statements]);
        }
    }
}

/// A key with every scope for account `acme`, made by `postern admin` on `db`
/// before any collector runs on it.
pub fn admin_key(db: &Db) -> String {
    let out = Command::new(BIN).arg("admin").arg("create-key").args(["--account", "acme", "--db"]).arg(db).output().expect("postern admin");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
