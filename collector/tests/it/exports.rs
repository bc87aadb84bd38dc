//! GET /v1/sites/:id/export in every format, against a dataset whose answers
//! are known: seven sessions over three local days of a Paris site, with
//! devices, countries and variants chosen so that every filter changes the
//! numbers. The files are opened with the tools their users use: a CSV
//! reader, a JSON parser, poppler (`pdftotext`, `pdftoppm`, `pdffonts`) and
//! a ZIP reader.

use std::io::{Cursor, Read};
use std::process::Command;

use chrono::{DateTime, Days, NaiveDate, SecondsFormat, TimeZone, Utc};
use chrono_tz::Europe::Paris;
use serde_json::{json, Value};

use crate::support::*;

/// A Paris site with the known dataset; `days[i]` is the local date of D1, D2, D3.
struct Known {
    app: TestApp,
    site: String,
    days: [NaiveDate; 3],
}

fn at_local(date: NaiveDate, h: u32, m: u32) -> DateTime<Utc> {
    Paris.from_local_datetime(&date.and_hms_opt(h, m, 0).unwrap()).earliest().unwrap().with_timezone(&Utc)
}

fn today() -> NaiveDate {
    Utc::now().with_timezone(&Paris).date_naive()
}

fn spawn_app() -> TestApp {
    TestApp::spawn_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0", "--country-header", "X-Country"])
}

/// Tracks `types` for one session at `when`, from a device and a country (None: unknown).
fn session(app: &TestApp, site: &str, id: &str, when: DateTime<Utc>, (device, country): (&str, Option<&str>), variant: &str, types: &[&str]) {
    for t in types {
        let mut meta = json!({"device_type": device});
        if *t == "wall_displayed" || t.starts_with("conversion") {
            meta["variant"] = json!(variant);
        }
        let body = event(site, id, t, json!({"metadata": meta, "timestamp": when.to_rfc3339_opts(SecondsFormat::Secs, true)}));
        let mut req = app.request(reqwest::Method::POST, "/v1/events/track").bearer_auth(&app.key).json(&body);
        if let Some(c) = country {
            req = req.header("X-Country", c);
        }
        let a = app.send(req);
        assert_eq!(a.status.as_u16(), 201, "track {body} → {}", a.text);
    }
}

/// D1 = 5 days ago, D2 = 4 days ago, D3 = 2 days ago (local dates):
///   s1 D1 12:00 desktop FR control: pageview adblock wall conversion
///   s2 D1 12:00 desktop FR control: pageview adblock wall
///   s3 D1 12:00 mobile  DE        : pageview
///   s4 D2 00:30 mobile  DE emotional: adblock wall conversion (23:30 UTC the day before D2 in winter)
///   s5 D2 12:00 tablet  US        : pageview adblock
///   s6 D3 12:00 desktop ZZ emotional: adblock wall
///   s7 D3 12:00 desktop FR control: adblock wall conversion
fn known() -> Known {
    let app = spawn_app();
    let site = id(&app.create_site("news.example.com", "Europe/Paris"));
    let t = today();
    let days = [t - Days::new(5), t - Days::new(4), t - Days::new(2)];
    let full = ["pageview", "adblock_detected", "wall_displayed", "conversion_allowlist"];
    session(&app, &site, "session-one", at_local(days[0], 12, 0), ("desktop", Some("FR")), "control", &full);
    session(&app, &site, "session-two", at_local(days[0], 12, 0), ("desktop", Some("FR")), "control", &full[..3]);
    session(&app, &site, "session-three", at_local(days[0], 12, 0), ("mobile", Some("DE")), "", &["pageview"]);
    session(&app, &site, "session-four", at_local(days[1], 0, 30), ("mobile", Some("DE")), "emotional", &[
        "adblock_detected",
        "wall_displayed",
        "conversion_subscribe",
    ]);
    session(&app, &site, "session-five", at_local(days[1], 12, 0), ("tablet", Some("US")), "", &["pageview", "adblock_detected"]);
    session(&app, &site, "session-six", at_local(days[2], 12, 0), ("desktop", None), "emotional", &["adblock_detected", "wall_displayed"]);
    session(&app, &site, "session-seven", at_local(days[2], 12, 0), ("desktop", Some("FR")), "control", &full[1..]);
    Known { app, site, days }
}

struct File {
    status: u16,
    content_type: String,
    disposition: String,
    bytes: Vec<u8>,
}

impl File {
    fn text(&self) -> String {
        String::from_utf8(self.bytes.clone()).expect("UTF-8")
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

fn export(app: &TestApp, site: &str, query: &str) -> File {
    let res = app
        .request(reqwest::Method::GET, &format!("/v1/sites/{site}/export?{query}"))
        .bearer_auth(&app.key)
        .send()
        .expect("HTTP request");
    let header = |n: &str| res.headers().get(n).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let (status, content_type, disposition) = (res.status().as_u16(), header("content-type"), header("content-disposition"));
    let bytes = res.bytes().expect("body").to_vec();
    File { status, content_type, disposition, bytes }
}

#[track_caller]
fn ok(app: &TestApp, site: &str, query: &str) -> File {
    let f = export(app, site, query);
    assert_eq!(f.status, 200, "{query} → {}", String::from_utf8_lossy(&f.bytes));
    f
}

/// The CSV parsed by an RFC 4180 reader: header, then rows.
fn csv_rows(f: &File) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_reader(f.bytes.as_slice());
    let header = r.headers().expect("header").iter().map(str::to_owned).collect();
    let rows = r.records().map(|rec| rec.expect("record").iter().map(str::to_owned).collect()).collect();
    (header, rows)
}

const HEADER: &str = "date,sessions,adblock_detected,walls_displayed,conversions,conversion_rate,device,country";

fn period(k: &Known) -> String {
    format!("start={}&end={}", k.days[0], k.days[2])
}

#[test]
fn csv_has_one_row_per_date_device_and_country_with_data() {
    let k = known();
    let f = ok(&k.app, &k.site, &format!("format=csv&{}", period(&k)));
    assert_eq!(f.content_type, "text/csv; charset=utf-8");
    assert_eq!(
        f.disposition,
        format!("attachment; filename=\"postern-news.example.com-{}-to-{}.csv\"", k.days[0], k.days[2])
    );
    let text = f.text();
    assert!(text.starts_with(&format!("{HEADER}\n")), "{text}");
    let [d1, d2, d3] = k.days.map(|d| d.to_string());
    let expected = vec![
        format!("{d1},2,2,2,1,50,desktop,FR"),
        format!("{d1},1,0,0,0,0,mobile,DE"),
        // 00:30 in Paris is the day before in UTC: the row belongs to the local date.
        format!("{d2},1,1,1,1,100,mobile,DE"),
        format!("{d2},1,1,0,0,0,tablet,US"),
        format!("{d3},1,1,1,1,100,desktop,FR"),
        format!("{d3},1,1,1,0,0,desktop,ZZ"),
    ];
    let (header, rows) = csv_rows(&f);
    assert_eq!(header.join(","), HEADER);
    assert_eq!(rows.iter().map(|r| r.join(",")).collect::<Vec<_>>(), expected, "{text}");
}

#[test]
fn csv_filters_by_device_and_repeated_countries() {
    let k = known();
    let [d1, d2, d3] = k.days.map(|d| d.to_string());
    let f = ok(&k.app, &k.site, &format!("format=csv&{}&country=fr&country=DE", period(&k)));
    let (_, rows) = csv_rows(&f);
    let lines: Vec<String> = rows.iter().map(|r| r.join(",")).collect();
    assert_eq!(lines, vec![
        format!("{d1},2,2,2,1,50,desktop,FR"),
        format!("{d1},1,0,0,0,0,mobile,DE"),
        format!("{d2},1,1,1,1,100,mobile,DE"),
        format!("{d3},1,1,1,1,100,desktop,FR"),
    ]);
    assert!(f.disposition.contains("-FR-DE.csv"), "{}", f.disposition);

    let f = ok(&k.app, &k.site, &format!("format=csv&{}&device=desktop&country=ZZ", period(&k)));
    let (_, rows) = csv_rows(&f);
    assert_eq!(rows.iter().map(|r| r.join(",")).collect::<Vec<_>>(), vec![format!("{d3},1,1,1,0,0,desktop,ZZ")]);
}

#[test]
fn json_has_the_spec_shape_and_every_day() {
    let k = known();
    let start = k.days[0] - Days::new(1);
    let end = k.days[2] + Days::new(1);
    let f = ok(&k.app, &k.site, &format!("format=json&start={start}&end={end}"));
    assert_eq!(f.content_type, "application/json");
    assert!(f.disposition.starts_with("attachment; filename=\"postern-news.example.com-") && f.disposition.ends_with(".json\""));
    let day = |d: NaiveDate, s: u64, c: u64| json!({"date": d.to_string(), "sessions": s, "conversions": c});
    let daily: Vec<Value> = start
        .iter_days()
        .take_while(|d| *d <= end)
        .map(|d| match d {
            d if d == k.days[0] => day(d, 3, 1),
            d if d == k.days[1] => day(d, 2, 1),
            d if d == k.days[2] => day(d, 2, 1),
            d => day(d, 0, 0),
        })
        .collect();
    assert_eq!(daily.len(), 6);
    assert_eq!(
        f.json(),
        json!({
            "period": {"start": start.to_string(), "end": end.to_string()},
            "metrics": {"sessions": 7, "adblock_detected": 6, "conversions": 3, "conversion_rate": 60.0},
            "daily": daily,
        })
    );

    let f = ok(&k.app, &k.site, &format!("format=json&{}&country=FR&country=de", period(&k)));
    assert_eq!(f.json()["metrics"], json!({"sessions": 5, "adblock_detected": 4, "conversions": 3, "conversion_rate": 75.0}));
    let f = ok(&k.app, &k.site, &format!("format=json&{}&device=Desktop", period(&k)));
    assert_eq!(f.json()["metrics"], json!({"sessions": 4, "adblock_detected": 4, "conversions": 2, "conversion_rate": 50.0}));
}

#[test]
fn totals_equal_the_dashboards_for_the_same_period_and_filters() {
    let k = known();
    for device in ["", "desktop", "mobile", "tablet"] {
        let dash = k.app.dashboard(&k.site, &format!("?days=30&device={device}"));
        dash.expect(200);
        // No start or end: the last 30 days, as the dashboard's days=30.
        let f = ok(&k.app, &k.site, &format!("format=json&device={device}"));
        let json = f.json();
        assert_eq!(json["period"], dash.body["period"], "device {device}");
        for m in ["sessions", "adblock_detected", "conversions", "conversion_rate"] {
            assert_eq!(json["metrics"][m], dash.body["metrics"][m], "{m}, device {device}: {json} vs {}", dash.text);
        }
        // The CSV's rows add up to the same totals, and walls_displayed too.
        let (_, rows) = csv_rows(&ok(&k.app, &k.site, &format!("format=csv&device={device}")));
        let sum = |col: usize| rows.iter().map(|r| r[col].parse::<u64>().unwrap()).sum::<u64>();
        assert_eq!(json!(sum(1)), dash.body["metrics"]["sessions"]);
        assert_eq!(json!(sum(2)), dash.body["metrics"]["adblock_detected"]);
        assert_eq!(json!(sum(3)), dash.body["metrics"]["walls_displayed"]);
        assert_eq!(json!(sum(4)), dash.body["metrics"]["conversions"]);
        // Day by day, as the conversions timeline.
        let timeline = k.app.conversions(&k.site, &format!("?days=30&granularity=day&device={device}"));
        timeline.expect(200);
        let from_timeline: Vec<Value> = timeline.body["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| json!({"date": b["bucket"], "sessions": b["sessions"], "conversions": b["conversions"]}))
            .collect();
        assert_eq!(json["daily"], json!(from_timeline), "device {device}");
    }
}

fn poppler(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| panic!("{tool} (poppler-utils, installed by scripts/test): {e}"));
    assert!(out.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The PDF's text with runs of white space collapsed to one space.
fn pdf_text(dir: &std::path::Path, pdf: &[u8]) -> String {
    let path = dir.join("export.pdf");
    std::fs::write(&path, pdf).unwrap();
    let text = poppler("pdftotext", &["-layout", path.to_str().unwrap(), "-"]);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn pdf_renders_with_embedded_fonts_and_the_right_numbers() {
    let k = known();
    let f = ok(&k.app, &k.site, &format!("format=pdf&{}", period(&k)));
    assert_eq!(f.content_type, "application/pdf");
    assert!(f.disposition.ends_with(".pdf\""), "{}", f.disposition);
    assert!(f.bytes.starts_with(b"%PDF-"));
    let dir = tempfile::tempdir().unwrap();
    let pdf = dir.path().join("export.pdf");
    std::fs::write(&pdf, &f.bytes).unwrap();
    let pdf = pdf.to_str().unwrap();

    // Every font is embedded (a real viewer needs nothing installed).
    let fonts = poppler("pdffonts", &[pdf]);
    let rows: Vec<&str> = fonts.lines().skip(2).collect();
    assert!(!rows.is_empty(), "{fonts}");
    for row in rows {
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[cols.len() - 5], "yes", "font not embedded: {row}");
    }

    // It rasterizes: one PNG per page, with ink on it.
    let prefix = dir.path().join("page");
    poppler("pdftoppm", &["-r", "40", "-png", pdf, prefix.to_str().unwrap()]);
    let pages: Vec<_> = std::fs::read_dir(dir.path()).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().ends_with(".png")).collect();
    let info = poppler("pdfinfo", &[pdf]);
    let count: usize = info.lines().find_map(|l| l.strip_prefix("Pages:")).unwrap().trim().parse().unwrap();
    assert_eq!(pages.len(), count, "{info}");
    assert!(pages.iter().all(|p| p.metadata().unwrap().len() > 1000));

    let text = pdf_text(dir.path(), &f.bytes);
    let [d1, _, d3] = k.days;
    for expected in [
        "Site news.example.com".to_owned(),
        format!("{d1} to {d3} (4 days, dates in Europe/Paris)"),
        "SESSIONS AD BLOCKERS DETECTED WALLS DISPLAYED 7 6 5 85.71% of sessions".to_owned(),
        "CONVERSIONS CONVERSION RATE WALLS DISMISSED 3 60.00% 0".to_owned(),
        "Conversions per day".to_owned(),
        // Device: sessions, share, ad blockers, walls, conversions, rate.
        "desktop 4 57.14% 4 4 2 50.00%".to_owned(),
        "mobile 2 28.57% 1 1 1 100.00%".to_owned(),
        "tablet 1 14.29% 1 0 0 0.00%".to_owned(),
        "FR 3 42.86% 3 3 2 66.67%".to_owned(),
        "DE 2 28.57% 1 1 1 100.00%".to_owned(),
        "US 1 14.29% 1 0 0 0.00%".to_owned(),
        "ZZ 1 14.29% 1 1 0 0.00%".to_owned(),
        // A/B: impressions, conversions, rate (confidence depends on the z-test).
        "control 3 2 66.67%".to_owned(),
        "emotional 2 1 50.00%".to_owned(),
        "No variant is a winner yet".to_owned(),
    ] {
        assert!(text.contains(&expected), "missing {expected:?} in:\n{text}");
    }

    // Filters show on the document and change its numbers.
    let f = ok(&k.app, &k.site, &format!("format=pdf&{}&device=mobile", period(&k)));
    let text = pdf_text(dir.path(), &f.bytes);
    assert!(text.contains("Filtered to device mobile"), "{text}");
    assert!(text.contains("SESSIONS AD BLOCKERS DETECTED WALLS DISPLAYED 2 1 1"), "{text}");
}

fn unzip(bytes: &[u8]) -> Vec<(String, String)> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).expect("a valid ZIP");
    (0..archive.len())
        .map(|i| {
            let mut f = archive.by_index(i).unwrap();
            let mut s = String::new();
            f.read_to_string(&mut s).unwrap();
            (f.name().expect("a UTF-8 file name").to_string(), s)
        })
        .collect()
}

#[test]
fn zip_holds_csv_json_raw_events_and_a_manifest() {
    let k = known();
    let q = format!("{}&country=FR&country=DE", period(&k));
    let f = ok(&k.app, &k.site, &format!("format=zip&{q}"));
    assert_eq!(f.content_type, "application/zip");
    assert!(f.disposition.ends_with("-FR-DE.zip\""), "{}", f.disposition);
    let files = unzip(&f.bytes);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["metrics.csv", "metrics.json", "events.jsonl", "report-runs.jsonl", "manifest.json"]);
    let get = |n: &str| files.iter().find(|(name, _)| name == n).unwrap().1.clone();

    // The same files as the single-format exports.
    assert_eq!(get("metrics.csv"), ok(&k.app, &k.site, &format!("format=csv&{q}")).text());
    let json: Value = serde_json::from_str(&get("metrics.json")).unwrap();
    assert_eq!(json, ok(&k.app, &k.site, &format!("format=json&{q}")).json());

    // Raw events of the FR and DE sessions, in the order sent: s1 4, s2 3, s3 1, s4 3, s7 3.
    let events: Vec<Value> = get("events.jsonl").lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    assert_eq!(events.len(), 14);
    let mut sessions: Vec<&str> = events.iter().map(|e| e["session_id"].as_str().unwrap()).collect();
    sessions.dedup();
    assert_eq!(sessions, ["session-one", "session-two", "session-three", "session-four", "session-seven"]);
    assert!(events.iter().all(|e| e["site_id"] == json!(k.site) && e["id"].is_string() && e["received_at"].is_string()));

    let manifest: Value = serde_json::from_str(&get("manifest.json")).unwrap();
    assert_eq!(manifest["site"]["id"], json!(k.site));
    assert_eq!(manifest["period"], json!({"start": k.days[0].to_string(), "end": k.days[2].to_string()}));
    assert_eq!(manifest["filters"], json!({"device": null, "countries": ["FR", "DE"]}));
    let rows: Vec<(String, u64)> =
        manifest["files"].as_array().unwrap().iter().map(|f| (f["name"].as_str().unwrap().to_owned(), f["rows"].as_u64().unwrap())).collect();
    assert_eq!(rows, [
        ("metrics.csv".to_owned(), 4),
        ("metrics.json".to_owned(), 4),
        ("events.jsonl".to_owned(), 14),
        ("report-runs.jsonl".to_owned(), 0)
    ]);
}

#[test]
fn zip_holds_the_report_runs_generated_in_the_period() {
    let k = known();
    let report = k.app.post(&format!("/v1/sites/{}/reports", k.site), &json!({"type": "daily", "channels": ["webhook"]}));
    report.expect(201);
    let send = |k: &Known| {
        let a = k.app.post(&format!("/v1/sites/{}/reports/{}/send", k.site, report.body["id"].as_str().unwrap()), &json!({}));
        a.expect(201);
        a.body
    };
    let (first, second) = (send(&k), send(&k));

    // Runs are generated today: a period ending today has both, oldest first.
    let f = ok(&k.app, &k.site, &format!("format=zip&start={}&end={}", k.days[0], today()));
    let files = unzip(&f.bytes);
    let runs: Vec<Value> = files.iter().find(|(n, _)| n == "report-runs.jsonl").unwrap().1.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!((&runs[0]["id"], &runs[1]["id"]), (&first["id"], &second["id"]));
    assert_eq!(runs[0]["type"], "daily");
    assert_eq!(runs[0]["period"], first["period"]);
    assert_eq!(runs[0]["content"]["daily"], first["daily"], "{}", runs[0]);
    let manifest: Value = serde_json::from_str(&files.iter().find(|(n, _)| n == "manifest.json").unwrap().1).unwrap();
    let entry = manifest["files"].as_array().unwrap().iter().find(|f| f["name"] == "report-runs.jsonl").cloned();
    assert_eq!(entry.map(|e| e["rows"].clone()), Some(json!(2)));

    // A period that ended before they were generated has none.
    let f = ok(&k.app, &k.site, &format!("format=zip&{}", period(&k)));
    let files = unzip(&f.bytes);
    assert_eq!(files.iter().find(|(n, _)| n == "report-runs.jsonl").unwrap().1, "");
}

#[test]
fn empty_periods_produce_valid_files() {
    let app = spawn_app();
    let site = id(&app.create_site("quiet.example.com", "UTC"));
    let q = "start=2026-01-01&end=2026-01-03";

    let (header, rows) = csv_rows(&ok(&app, &site, &format!("format=csv&{q}")));
    assert_eq!(header.join(","), HEADER);
    assert!(rows.is_empty());

    let day = |d: &str| json!({"date": d, "sessions": 0, "conversions": 0});
    assert_eq!(
        ok(&app, &site, &format!("format=json&{q}")).json(),
        json!({
            "period": {"start": "2026-01-01", "end": "2026-01-03"},
            "metrics": {"sessions": 0, "adblock_detected": 0, "conversions": 0, "conversion_rate": 0.0},
            "daily": [day("2026-01-01"), day("2026-01-02"), day("2026-01-03")],
        })
    );

    let dir = tempfile::tempdir().unwrap();
    let text = pdf_text(dir.path(), &ok(&app, &site, &format!("format=pdf&{q}")).bytes);
    assert!(text.contains("SESSIONS AD BLOCKERS DETECTED WALLS DISPLAYED 0 0 0"), "{text}");
    assert!(text.contains("No data in this period."), "{text}");
    assert!(text.contains("Conversions per day"), "{text}");
    // Two years are charted by week.
    let text = pdf_text(dir.path(), &ok(&app, &site, "format=pdf&start=2024-01-02&end=2025-12-31").bytes);
    assert!(text.contains("2024-01-02 to 2025-12-31 (730 days") && text.contains("Conversions per week"), "{text}");

    let files = unzip(&ok(&app, &site, &format!("format=zip&{q}")).bytes);
    assert_eq!(files[0].1, format!("{HEADER}\n"));
    assert_eq!(files[2], ("events.jsonl".to_owned(), String::new()));
    assert_eq!(files[3], ("report-runs.jsonl".to_owned(), String::new()));
    let manifest: Value = serde_json::from_str(&files[4].1).unwrap();
    let rows: Vec<u64> = manifest["files"].as_array().unwrap().iter().map(|f| f["rows"].as_u64().unwrap()).collect();
    assert_eq!(rows, [0, 3, 0, 0]);
}

#[test]
fn bad_parameters_are_clear_400s() {
    let app = spawn_app();
    let site = id(&app.create_site("news.example.com", "UTC"));
    for (query, field, reason) in [
        ("", "format", "required"),
        ("format=xlsx", "format", "invalid"),
        ("format=csv&start=2026-02-30", "start", "invalid"),
        ("format=csv&end=yesterday", "end", "invalid"),
        ("format=csv&start=2026-03-02&end=2026-03-01", "start", "out_of_range"),
        ("format=zip&start=2024-01-01&end=2026-01-01", "start", "out_of_range"),
        ("format=json&device=phone", "device", "invalid"),
        ("format=pdf&country=FRA", "country", "invalid"),
        ("format=csv&country=F1", "country", "invalid"),
    ] {
        let f = export(&app, &site, query);
        assert_eq!(f.status, 400, "{query}: {}", String::from_utf8_lossy(&f.bytes));
        let body = f.json();
        assert_eq!(body["error"]["code"], "INVALID_REQUEST", "{query}: {body}");
        assert_eq!(body["error"]["details"], json!({"field": field, "reason": reason}), "{query}: {body}");
    }
    // Two years is the longest period (the aggregate retention).
    ok(&app, &site, "format=csv&start=2024-01-02&end=2025-12-31");

    // Unknown or foreign sites are 404; a key without the read scope is 403.
    assert_eq!(export(&app, "00000000-0000-4000-8000-000000000000", "format=csv").status, 404);
    let ingest = app.post("/v1/keys", &json!({"name": "ingest only", "scopes": ["ingest"]}));
    ingest.expect(201);
    let secret = ingest.body["key"].as_str().expect("the new key's secret").to_owned();
    let a = app.get_as(&secret, &format!("/v1/sites/{site}/export?format=csv"));
    assert_eq!(a.status.as_u16(), 403, "{}", a.text);
}
