//! Restarts: data survives a graceful restart, SIGTERM loses no acknowledged event, a newer schema is refused.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::{json, Value};

use crate::support::*;

/// Key listings without `last_used_at`, which the server may record at any time.
fn keys_without_usage(app: &TestApp) -> Value {
    let mut keys = app.get("/v1/keys").expect(200).body["keys"].clone();
    for k in keys.as_array_mut().expect("keys array") {
        k.as_object_mut().unwrap().remove("last_used_at");
    }
    keys
}

#[test]
fn sites_keys_events_and_analytics_survive_a_graceful_restart() {
    let mut app = TestApp::spawn();
    let paris = id(&app.create_site("paris.example.com", "Europe/Paris"));
    let utc = id(&app.create_site("utc.example.com", "UTC"));
    app.patch(&format!("/v1/sites/{utc}"), &json!({"status": "paused"})).expect(200);
    let cli_site = app.admin(&["create-site", "--account", "acme", "--name", "From CLI", "--domain", "cli.example.com"]);

    let created = app.post("/v1/keys", &json!({"name": "restart reader", "scopes": ["read"]}));
    created.expect(201);
    let reader = created.body["key"].as_str().expect("new key secret").to_owned();
    let revoked = app.post("/v1/keys", &json!({"name": "to revoke"}));
    revoked.expect(201);
    let revoked_secret = revoked.body["key"].as_str().expect("new key secret").to_owned();
    let revoked_id = revoked.body["id"].as_str().expect("key id").to_owned();
    app.delete(&format!("/v1/keys/{revoked_id}")).expect(204);
    app.get_as(&revoked_secret, "/v1/sites").expect(401);
    app.get_as(&reader, "/v1/sites").expect(200);

    // A few sessions over the last days, with walls, variants and conversions.
    let now = chrono::Utc::now();
    let mut ids = Vec::new();
    for s in 0..12 {
        let session = format!("restart-session-{s:03}");
        let at = |mins: i64| (now - chrono::Duration::hours(s * 7) + chrono::Duration::minutes(mins)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let variant = ["control", "emotional", "offer"][s as usize % 3];
        let device = ["desktop", "mobile", "tablet"][s as usize % 3];
        let mut evs = vec![event(&paris, &session, "pageview", json!({"timestamp": at(-10), "metadata": {"device_type": device}}))];
        if s % 2 == 0 {
            evs.push(event(&paris, &session, "adblock_detected", json!({"timestamp": at(-9), "metadata": {"blocker_type": "extension", "device_type": device}})));
            evs.push(event(&paris, &session, "wall_displayed", json!({"timestamp": at(-8), "metadata": {"variant": variant, "device_type": device}})));
            if s % 4 == 0 {
                evs.push(event(&paris, &session, "conversion_allowlist", json!({"timestamp": at(-7), "metadata": {"variant": variant, "device_type": device}})));
            }
        }
        for e in evs {
            let a = app.track(&e);
            a.expect(201);
            ids.push(a.body["id"].as_str().expect("event id").to_owned());
        }
    }
    app.track(&event(&cli_site, "restart-cli-0001", "pageview", json!({}))).expect(201);

    let snapshot = |app: &TestApp| -> Vec<(String, Value)> {
        let mut out = vec![
            ("sites".to_owned(), app.get("/v1/sites").expect(200).body.clone()),
            ("site paris".to_owned(), app.get(&format!("/v1/sites/{paris}")).expect(200).body.clone()),
            ("site utc".to_owned(), app.get(&format!("/v1/sites/{utc}")).expect(200).body.clone()),
            ("keys".to_owned(), keys_without_usage(app)),
        ];
        for site in [&paris, &cli_site] {
            for q in ["?days=30", "?days=7&device=desktop", "?days=1"] {
                out.push((format!("dashboard {site} {q}"), app.dashboard(site, q).expect(200).body.clone()));
            }
            for q in ["?days=14&granularity=day", "?days=2&granularity=hour", "?days=30&granularity=week"] {
                out.push((format!("conversions {site} {q}"), app.conversions(site, q).expect(200).body.clone()));
            }
            out.push((format!("ab {site}"), app.ab_testing(site, "").expect(200).body.clone()));
            out.push((format!("events {site}"), app.events(site, "?limit=1000").expect(200).body.clone()));
            out.push((format!("conversions list {site}"), app.events(site, "?event_type=conversion_allowlist").expect(200).body.clone()));
        }
        out
    };
    let before = snapshot(&app);
    assert_eq!(before[4].1["metrics"]["sessions"], json!(12), "dashboard before restart: {}", before[4].1);

    app.restart();

    let after = snapshot(&app);
    for ((name, b), (_, a)) in before.iter().zip(&after) {
        assert_eq!(a, b, "{name} changed across a graceful restart");
    }
    let stored = all_event_ids(&app, &paris);
    let mut expected = ids.clone();
    expected.sort();
    let mut got = stored.clone();
    got.sort();
    assert_eq!(got, expected);

    // Keys keep their state: the created key works, the revoked one does not, the CLI key works.
    app.get_as(&reader, "/v1/sites").expect(200);
    app.post_as(&reader, "/v1/sites", &json!({"name": "x", "domain": "x.example.com"})).expect(403);
    app.get_as(&revoked_secret, "/v1/sites").expect(401);
    app.get("/v1/sites").expect(200);
    // A paused site still refuses events; the active one accepts them.
    app.track(&event(&utc, "restart-paused-01", "pageview", json!({}))).expect(403);
    app.track(&event(&paris, "restart-after-001", "pageview", json!({}))).expect(201);
    assert_eq!(app.events(&paris, "?limit=1").body["total"], json!(ids.len() + 1));
}

#[test]
fn sigterm_while_requests_are_in_flight_loses_no_acknowledged_event() {
    let mut app = TestApp::spawn();
    let site = id(&app.create_site("term.example.com", "UTC"));
    const THREADS: usize = 8;
    const PER_THREAD: usize = 25;
    let acked: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let answered = AtomicUsize::new(0);
    let url = app.url("/v1/events/track");
    let key = app.key.clone();

    let exit = std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (acked, answered, url, key, site) = (&acked, &answered, &url, &key, &site);
            scope.spawn(move || {
                let client = Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
                for i in 0..PER_THREAD {
                    let body = event(site, &format!("term-{t:02}-{i:04}"), "pageview", json!({}));
                    let res = client.post(url.as_str()).bearer_auth(key).json(&body).send();
                    answered.fetch_add(1, Ordering::SeqCst);
                    let Ok(res) = res else { continue };
                    let status = res.status().as_u16();
                    let text = res.text().unwrap_or_default();
                    match status {
                        201 => {
                            let v: Value = serde_json::from_str(&text).expect("201 body is JSON");
                            acked.lock().unwrap().push(v["id"].as_str().expect("id in a 201").to_owned());
                        }
                        // Refusals while shutting down are fine; they just must not be counted as acknowledged.
                        503 => {}
                        other => panic!("unexpected status {other} during shutdown: {text}"),
                    }
                }
            });
        }
        // SIGTERM in the middle of the burst.
        let deadline = Instant::now() + Duration::from_secs(60);
        while answered.load(Ordering::SeqCst) < THREADS * PER_THREAD / 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        app.stop()
    });
    assert_eq!(exit, 0, "SIGTERM must end the server with exit code 0; log:\n{}", app.logs());
    let acked = acked.into_inner().unwrap();
    eprintln!("{} of {} track requests acknowledged before the server stopped", acked.len(), THREADS * PER_THREAD);
    assert!(acked.len() >= THREADS * PER_THREAD / 3 - THREADS, "too few events acknowledged before SIGTERM: {}", acked.len());

    app.start_again();
    let stored = all_event_ids(&app, &site);
    let mut count: HashMap<&str, usize> = HashMap::new();
    for id in &stored {
        *count.entry(id.as_str()).or_default() += 1;
    }
    let mut missing = Vec::new();
    for id in &acked {
        match count.get(id.as_str()) {
            None => missing.push(id.clone()),
            Some(1) => {}
            Some(n) => panic!("acknowledged event {id} stored {n} times"),
        }
    }
    assert!(missing.is_empty(), "{} of {} acknowledged events lost after SIGTERM: {missing:?}", missing.len(), acked.len());
    assert!(count.values().all(|&n| n == 1), "an event id appears more than once");
}

#[test]
fn sigterm_right_after_the_listening_line_is_a_graceful_stop() {
    // A supervisor may stop the server as soon as it reports that it listens.
    let mut app = TestApp::spawn();
    for _ in 0..10 {
        app.restart();
    }
    app.get("/v1/sites").expect(200);
}

/// Sets `PRAGMA user_version` of an SQLite file with the sqlite3 CLI, or python3 when it is missing.
fn set_user_version(db: &Path, version: i64) {
    let sql = format!("PRAGMA user_version = {version};");
    let ok = Command::new("sqlite3").arg(db).arg(&sql).status().map(|s| s.success()).unwrap_or(false);
    if !ok {
        let script = format!("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('{sql}'); c.commit(); c.close()");
        let s = Command::new("python3").args(["-c", &script]).arg(db).status().expect("python3");
        assert!(s.success(), "could not set user_version");
    }
}

#[test]
fn a_database_from_a_newer_schema_is_refused() {
    let mut app = TestApp::spawn();
    app.create_site("schema.example.com", "UTC");
    assert_eq!(app.stop(), 0);
    // SQLite keeps the schema version in `user_version`, PostgreSQL in a table.
    let version = || match app.sqlite_file() {
        Some(file) => sql(&Db::sqlite(file.to_owned()), "PRAGMA user_version"),
        None => sql(&app.db, "SELECT version FROM schema_version"),
    };
    match app.sqlite_file() {
        Some(file) => set_user_version(file, 9999),
        None => sql_exec(&app.db, "UPDATE schema_version SET version = 9999"),
    }
    assert_eq!(version(), "9999");

    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--db")
        .arg(&app.db)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting postern");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("postern kept running on a database with a newer schema");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success(), "serve must exit non-zero on a newer schema; stderr: {stderr}");
    assert!(!stdout.contains("postern listening on"), "it must not start listening: {stdout}");
    assert!(!stderr.contains("panicked"), "a refusal, not a panic: {stderr}");
    let lower = stderr.to_lowercase();
    assert!(lower.contains("newer") && lower.contains("9999"), "the message must say the schema (9999) is newer: {stderr}");

    // The admin commands refuse it as well, and nothing was changed.
    let out = Command::new(BIN).args(["admin", "create-key", "--account", "acme", "--db"]).arg(&app.db).output().unwrap();
    assert!(!out.status.success(), "admin create-key must refuse a newer schema");
    assert!(out.stdout.is_empty(), "no key printed: {}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).to_lowercase().contains("newer"));
    assert_eq!(version(), "9999", "the refused database must not be migrated");
}
