//! Reports: the configuration API, the scheduler (local 08:00 across DST and
//! the year boundary, exactly once across restarts, catch-up after downtime),
//! and each report type's figures against a dataset with known answers.
//!
//! The scheduler runs at start-up, so a test "runs it now" by restarting the
//! collector; `--clock` sets the time it believes it is.

use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, TimeZone, Utc};
use chrono_tz::Europe::Paris;
use serde_json::{json, Value};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::receivers::{HttpReceiver, SmtpReceiver};
use crate::support::*;

fn recipients() -> Value {
    json!([{"email": "ana@example.com", "role": "Admin"}, {"email": "bob@example.com", "role": "Reader"}])
}

#[track_caller]
fn create_report(app: &TestApp, site: &str, body: Value) -> Value {
    let a = app.post(&format!("/v1/sites/{site}/reports"), &body);
    a.expect(201);
    a.body
}

fn runs(app: &TestApp, site: &str, report: &Value) -> Vec<Value> {
    let a = app.get(&format!("/v1/sites/{site}/reports/{}/runs", report["id"].as_str().unwrap()));
    a.expect(200);
    a.body["runs"].as_array().unwrap().clone()
}

/// Waits until the scheduler has completed a pass since the (re)start.
pub(crate) fn wait_for_pass(app: &TestApp) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = app.send(app.request(reqwest::Method::GET, "/metrics"));
        let passes = a
            .text
            .lines()
            .find_map(|l| l.strip_prefix("postern_report_scheduler_passes_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if passes >= 1.0 {
            return;
        }
        assert!(Instant::now() < deadline, "the report scheduler did not complete a pass; log:\n{}", app.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn serve_args(clock: &str) -> Vec<String> {
    ["--rate-limit-api", "0", "--rate-limit-ingest", "0", "--country-header", "X-Country", "--clock", clock]
        .map(String::from)
        .to_vec()
}

fn restart_at(app: &mut TestApp, clock: &str) {
    restart_at_with(app, serve_args(clock));
}

fn restart_at_with(app: &mut TestApp, args: Vec<String>) {
    app.restart_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    wait_for_pass(app);
}

#[test]
fn report_configs_are_validated_and_managed() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "Europe/Paris"));
    let base = format!("/v1/sites/{site}/reports");

    let daily = create_report(&app, &site, json!({"type": "daily", "recipients": recipients()}));
    assert_eq!(daily["name"], "Daily report");
    assert_eq!(daily["schedule"], json!({"frequency": "daily", "time": "08:00"}));
    assert_eq!(daily["timezone"], "Europe/Paris");
    assert_eq!(daily["channels"], json!(["email"]));
    assert_eq!(daily["format"], "html");
    assert_eq!(daily["enabled"], true);
    assert_eq!(daily["recipients"], json!([{"email": "ana@example.com", "role": "admin"}, {"email": "bob@example.com", "role": "reader"}]));
    // The next run is at 08:00 in Paris: 07:00 or 06:00 UTC depending on the season.
    let next: DateTime<Utc> = daily["next_run_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(next.with_timezone(&Paris).format("%H:%M").to_string(), "08:00");
    assert!(next > Utc::now());

    let weekly = create_report(&app, &site, json!({"type": "weekly", "channels": ["slack", "webhook"], "format": "pdf"}));
    assert_eq!(weekly["schedule"], json!({"frequency": "weekly", "weekday": "monday", "time": "08:00"}));
    let monthly = create_report(&app, &site, json!({"type": "monthly", "recipients": recipients(), "format": "csv"}));
    assert_eq!(monthly["schedule"], json!({"frequency": "monthly", "day_of_month": 1, "time": "08:00"}));
    let custom = create_report(
        &app,
        &site,
        json!({
            "type": "custom", "name": "Mobile France",
            "metrics": ["Sessions", "Conversion Rate", "By Country"],
            "filters": {"start": "2026-10-01", "end": "2026-10-31", "device": "Mobile", "countries": ["fr"], "event": "wall_displayed"},
            "schedule": {"frequency": "weekly", "weekday": "friday", "time": "17:30"},
            "recipients": recipients(), "channels": ["email", "webhook"], "format": "json"
        }),
    );
    assert_eq!(custom["metrics"], json!(["sessions", "conversion_rate", "by_country"]));
    assert_eq!(
        custom["filters"],
        json!({"start": "2026-10-01", "end": "2026-10-31", "device": "mobile", "countries": ["FR"], "event": "wall_displayed"})
    );
    let next: DateTime<Utc> = custom["next_run_at"].as_str().unwrap().parse().unwrap();
    let local = next.with_timezone(&Paris);
    assert_eq!((local.weekday(), local.format("%H:%M").to_string()), (chrono::Weekday::Fri, "17:30".to_owned()));

    let list = app.get(&base);
    list.expect(200);
    let ids: Vec<&str> = list.body["reports"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [&daily, &weekly, &monthly, &custom].map(|r| r["id"].as_str().unwrap()));

    let rid = daily["id"].as_str().unwrap();
    let one = format!("{base}/{rid}");
    assert_eq!(app.get(&one).expect(200).body, daily);
    let changed = app.patch(&one, &json!({"schedule": {"time": "06:45"}, "enabled": false}));
    changed.expect(200);
    assert_eq!(changed.body["schedule"]["time"], "06:45");
    assert_eq!(changed.body["enabled"], false);
    assert_eq!(changed.body["next_run_at"], Value::Null);
    assert_eq!(changed.body["recipients"], daily["recipients"]);

    // Bad input names the field and the reason.
    let cases = [
        (json!({}), "type", "required"),
        (json!({"type": "hourly"}), "type", "invalid"),
        (json!({"type": "daily"}), "recipients", "required"),
        (json!({"type": "daily", "recipients": [{"email": "nobody", "role": "Admin"}]}), "recipients[0].email", "invalid"),
        (json!({"type": "daily", "recipients": [{"email": "a@example.com", "role": "Owner"}]}), "recipients[0].role", "invalid"),
        (json!({"type": "daily", "recipients": [{"email": "a@example.com"}]}), "recipients[0].role", "required"),
        (json!({"type": "daily", "channels": ["fax"]}), "channels[0]", "invalid"),
        (json!({"type": "daily", "channels": ["slack"], "format": "docx"}), "format", "invalid"),
        (json!({"type": "daily", "channels": ["slack"], "schedule": {"time": "25:00"}}), "schedule.time", "invalid"),
        (json!({"type": "weekly", "channels": ["slack"], "schedule": {"weekday": "someday"}}), "schedule.weekday", "invalid"),
        (json!({"type": "monthly", "channels": ["slack"], "schedule": {"day_of_month": 30}}), "schedule.day_of_month", "out_of_range"),
        (json!({"type": "custom", "channels": ["slack"]}), "metrics", "required"),
        (json!({"type": "custom", "channels": ["slack"], "metrics": ["revenue"]}), "metrics[0]", "invalid"),
        (json!({"type": "custom", "channels": ["slack"], "metrics": ["sessions"], "filters": {"device": "watch"}}), "filters.device", "invalid"),
        (json!({"type": "custom", "channels": ["slack"], "metrics": ["sessions"], "filters": {"start": "2026-10-01"}}), "filters.end", "required"),
        (json!({"type": "custom", "channels": ["slack"], "metrics": ["sessions"], "filters": {"event": "click"}}), "filters.event", "invalid"),
        (json!({"type": "daily", "channels": ["slack"], "owner": "me"}), "owner", "unknown_field"),
    ];
    for (body, field, reason) in cases {
        let a = app.post(&base, &body);
        a.expect(400);
        assert_eq!(a.error(), ("INVALID_REQUEST".into(), Some(field.into()), reason.into()), "{body}");
    }
    let a = app.patch(&one, &json!({"type": "weekly"}));
    a.expect(400);
    assert_eq!(a.error().1.as_deref(), Some("type"));
    let a = app.send(app.request(reqwest::Method::POST, &base).bearer_auth(&app.key).body("{not json"));
    a.expect(400);
    assert_eq!(a.error().1.as_deref(), Some("body"));
    // Nothing half-written: still the four reports.
    assert_eq!(app.get(&base).body["reports"].as_array().unwrap().len(), 4);

    // Scopes: read for GETs, write for changes.
    let reader = app.admin(&["create-key", "--account", "acme", "--scopes", "read"]);
    app.get_as(&reader, &base).expect(200);
    app.get_as(&reader, &format!("{one}/runs")).expect(200);
    let a = app.post_as(&reader, &base, &json!({"type": "daily", "channels": ["slack"]}));
    a.expect(403);
    assert_eq!(a.error().0, "FORBIDDEN");
    app.post_as(&reader, &format!("{one}/send"), &json!({})).expect(403);

    // Another account sees neither the site's reports nor its runs.
    let other = app.admin(&["create-key", "--account", "other"]);
    app.get_as(&other, &base).expect(404);
    app.get_as(&other, &one).expect(404);
    app.get(&format!("{base}/not-a-uuid")).expect(404);
    app.get(&format!("{base}/{}", uuid_like())).expect(404);

    app.delete(&one).expect(204);
    app.get(&one).expect(404);
    app.delete(&one).expect(404);
    assert_eq!(app.get(&base).body["reports"].as_array().unwrap().len(), 3);
}

fn uuid_like() -> &'static str {
    "5b7a3c1e-0000-4000-8000-000000000000"
}

/// Builds the events of one visitor session at `at`.
struct Session<'a> {
    site: &'a str,
    id: String,
    at: DateTime<Utc>,
    device: &'a str,
    variant: Option<&'a str>,
}

impl Session<'_> {
    fn events(&self, steps: &[&str]) -> Vec<Value> {
        steps
            .iter()
            .map(|step| {
                let mut metadata = json!({"device_type": self.device});
                if let Some(v) = self.variant {
                    metadata["variant"] = json!(v);
                }
                event(self.site, &self.id, step, json!({"timestamp": self.at.to_rfc3339(), "metadata": metadata}))
            })
            .collect()
    }
}

/// `n` sessions on `site` at local noon of `date`, each sending `steps`.
#[allow(clippy::too_many_arguments)]
fn sessions(out: &mut Vec<Value>, site: &str, tag: &str, date: NaiveDate, n: usize, device: &str, variant: Option<&str>, steps: &[&str]) {
    let at = noon(date);
    for i in 0..n {
        let s = Session { site, id: format!("{tag}-{date}-{i:04}"), at, device, variant };
        out.extend(s.events(steps));
    }
}

fn noon(date: NaiveDate) -> DateTime<Utc> {
    Paris.from_local_datetime(&date.and_hms_opt(12, 0, 0).unwrap()).single().unwrap().with_timezone(&Utc)
}

/// Sends events in batches from visitors in `country`; every one must be accepted.
#[track_caller]
fn ingest(app: &TestApp, country: &str, events: &[Value]) {
    for chunk in events.chunks(500) {
        let a = app.send(
            app.request(reqwest::Method::POST, "/v1/events/batch")
                .bearer_auth(&app.key)
                .header("X-Country", country)
                .json(&chunk),
        );
        a.expect(201);
        assert_eq!(a.body["accepted"], chunk.len(), "{}", a.text);
    }
}

/// The text of a run's PDF, as poppler's `pdftotext` reads it.
pub(crate) fn pdf_text(bytes: &[u8]) -> String {
    assert!(bytes.starts_with(b"%PDF-"), "not a PDF: {:?}", &bytes[..bytes.len().min(16)]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.pdf");
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new("pdftotext").arg("-layout").arg(&path).arg("-").output().expect("pdftotext (poppler-utils)");
    assert!(out.status.success(), "pdftotext failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[track_caller]
fn fetch_pdf(app: &TestApp, run_id: &str) -> String {
    let res = app
        .request(reqwest::Method::GET, &format!("/v1/report-runs/{run_id}?format=pdf"))
        .bearer_auth(&app.key)
        .send()
        .expect("HTTP request");
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(res.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("application/pdf"));
    pdf_text(&res.bytes().unwrap())
}

fn send_now(app: &TestApp, site: &str, report: &Value) -> Value {
    let a = app.post(&format!("/v1/sites/{site}/reports/{}/send", report["id"].as_str().unwrap()), &json!({}));
    a.expect(201);
    a.body
}

/// The 1st of a month at 10:00 in Paris, at least a day in the past: the
/// collector's clock for the known-answer test, so every period is complete
/// and inside the back-fill window.
fn known_answer_clock() -> DateTime<Utc> {
    let today = Utc::now().date_naive();
    let mut first = today.with_day(1).unwrap();
    if today.signed_duration_since(first).num_days() < 1 {
        first = first.checked_sub_months(Months::new(1)).unwrap();
    }
    Paris.from_local_datetime(&first.and_hms_opt(10, 0, 0).unwrap()).single().unwrap().with_timezone(&Utc)
}

#[test]
fn each_report_type_has_the_known_answers() {
    let clock = known_answer_clock();
    let args = serve_args(&clock.to_rfc3339());
    let app = TestApp::spawn_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let today = clock.with_timezone(&Paris).date_naive();
    let day_before = |d: NaiveDate, n: u64| d.checked_sub_days(Days::new(n)).unwrap();

    // Daily: yesterday had 5 sessions, the day before 4.
    let site_d = id(&app.create_site("daily.example.com", "Europe/Paris"));
    let yesterday = day_before(today, 1);
    let mut ev = Vec::new();
    sessions(&mut ev, &site_d, "prev", day_before(today, 2), 4, "desktop", None, &["pageview"]);
    sessions(&mut ev, &site_d, "conv", yesterday, 1, "mobile", Some("control"), &["pageview", "adblock_detected", "wall_displayed", "conversion_allowlist"]);
    sessions(&mut ev, &site_d, "wall", yesterday, 1, "mobile", Some("control"), &["pageview", "adblock_detected", "wall_displayed"]);
    sessions(&mut ev, &site_d, "block", yesterday, 1, "mobile", None, &["pageview", "adblock_detected"]);
    sessions(&mut ev, &site_d, "clean", yesterday, 2, "desktop", None, &["pageview", "pageview"]);
    ingest(&app, "FR", &ev);
    let report = create_report(&app, &site_d, json!({"type": "daily", "recipients": recipients()}));
    let run = send_now(&app, &site_d, &report);
    assert_eq!(run["type"], "daily");
    assert_eq!(run["trigger"], "manual");
    assert_eq!(run["period"], json!({"start": yesterday.to_string(), "end": yesterday.to_string()}));
    let d = &run["daily"];
    assert_eq!(
        d["kpis"],
        json!({"sessions": 5, "adblock_detected": 3, "adblock_share": 60.0, "walls_displayed": 2, "conversions": 1, "conversion_rate": 50.0})
    );
    assert_eq!(d["sessions_change"], json!({"previous": 4, "difference": 1, "percent": 25.0}));
    assert_eq!(d["top_event"], json!({"event_type": "adblock_detected", "count": 3}));
    assert_eq!(d["top_device"], json!({"device": "mobile", "sessions": 3, "share": 60.0}));

    // The stored run is served as JSON exactly as generated, and as HTML.
    let run_id = run["id"].as_str().unwrap();
    let stored = app.get(&format!("/v1/report-runs/{run_id}?format=json"));
    stored.expect(200);
    let mut without_links = run.clone();
    without_links.as_object_mut().unwrap().remove("links");
    assert_eq!(stored.body, without_links);
    let html = app.get(&format!("/v1/report-runs/{run_id}?format=html"));
    html.expect(200);
    assert_eq!(html.header("content-type"), Some("text/html; charset=utf-8"));
    for needle in ["Daily report", "Site daily.example.com", "3 (60.00% of sessions)", "1 (50.00% of walls)", "+25.00% vs 4", "adblock_detected (3)", "mobile (60.00% of sessions)"] {
        assert!(html.text.contains(needle), "{needle:?} missing from\n{}", html.text);
    }
    // No link to change the report in the API's copy (that is for Admin e-mails).
    assert!(!html.text.contains("Change this report"));
    let pdf = fetch_pdf(&app, run_id);
    for needle in ["Daily report", "daily.example.com", "60.00% of sessions", "50.00% of walls", "+25.00% vs 4", "adblock_detected (3)", "mobile (60.00% of sessions)"] {
        assert!(pdf.contains(needle), "{needle:?} missing from the PDF text:\n{pdf}");
    }
    let a = app.get(&format!("/v1/report-runs/{run_id}?format=docx"));
    a.expect(400);
    assert_eq!(a.error(), ("INVALID_REQUEST".into(), Some("format".into()), "invalid".into()));
    app.get(&format!("/v1/report-runs/{}", uuid_like())).expect(404);
    let other = app.admin(&["create-key", "--account", "other"]);
    app.get_as(&other, &format!("/v1/report-runs/{run_id}")).expect(404);
    let listed = runs(&app, &site_d, &report);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], run["id"]);
    assert_eq!(listed[0]["links"]["html"], format!("/v1/report-runs/{run_id}?format=html"));

    // Weekly: the ISO week before this one.
    let site_w = id(&app.create_site("weekly.example.com", "Europe/Paris"));
    let this_monday = day_before(today, u64::from(today.weekday().num_days_from_monday()));
    let monday = day_before(this_monday, 7);
    let at = |n: u64| monday.checked_add_days(Days::new(n)).unwrap();
    let walled = ["pageview", "adblock_detected", "wall_displayed"];
    let converted = ["pageview", "adblock_detected", "wall_displayed", "conversion_allowlist"];
    let mut ev = Vec::new();
    sessions(&mut ev, &site_w, "mon-c", at(0), 10, "desktop", Some("control"), &converted);
    sessions(&mut ev, &site_w, "mon-w", at(0), 90, "desktop", Some("control"), &walled);
    sessions(&mut ev, &site_w, "wed-c", at(2), 40, "mobile", Some("emotional"), &converted);
    sessions(&mut ev, &site_w, "wed-w", at(2), 60, "mobile", Some("emotional"), &walled);
    sessions(&mut ev, &site_w, "fri", at(4), 50, "desktop", None, &["pageview"]);
    sessions(&mut ev, &site_w, "sun-w", at(6), 10, "tablet", Some("emotional"), &walled);
    // The week before: 50 walls, 10 conversions (20%).
    sessions(&mut ev, &site_w, "prev-c", day_before(monday, 6), 10, "desktop", Some("control"), &converted);
    sessions(&mut ev, &site_w, "prev-w", day_before(monday, 6), 40, "desktop", Some("control"), &walled);
    ingest(&app, "FR", &ev);
    let report = create_report(&app, &site_w, json!({"type": "weekly", "channels": ["webhook"]}));
    let run = send_now(&app, &site_w, &report);
    assert_eq!(run["period"], json!({"start": monday.to_string(), "end": at(6).to_string()}));
    let w = &run["weekly"];
    assert_eq!(
        w["kpis"],
        json!({"sessions": 260, "adblock_detected": 210, "adblock_share": 80.77, "walls_displayed": 210, "conversions": 50, "conversion_rate": 23.81})
    );
    assert_eq!(w["previous_week"]["kpis"]["conversion_rate"], 20.0);
    assert_eq!(w["conversion_rate_change_points"], 3.81);
    assert_eq!(w["best_day"]["date"], at(2).to_string());
    assert_eq!(w["best_day"]["conversion_rate"], 40.0);
    assert_eq!(w["worst_day"]["date"], at(6).to_string());
    assert_eq!(w["worst_day"]["conversion_rate"], 0.0);
    assert_eq!(w["ab_winner"]["name"], "emotional");
    assert_eq!(w["ab_winner"]["conversion_rate"], 36.36);
    assert_eq!(w["ab_winner"]["impressions"], 110);
    assert_eq!(w["days"].as_array().unwrap().len(), 7);
    assert_eq!(w["days"][4]["sessions"], 50);

    // Monthly: last calendar month against the one before, with a revenue figure.
    let site_m = app.post(
        "/v1/sites",
        &json!({"name": "Monthly", "domain": "monthly.example.com", "timezone": "Europe/Paris", "revenue_per_1000_pageviews": 250.0}),
    );
    site_m.expect(201);
    let site_m = id(&site_m.body);
    let month_start = today.checked_sub_months(Months::new(1)).unwrap().with_day(1).unwrap();
    let fifteenth = month_start.with_day(15).unwrap();
    let mut ev = Vec::new();
    sessions(&mut ev, &site_m, "first-c", month_start, 5, "desktop", None, &["pageview", "pageview", "adblock_detected", "wall_displayed", "conversion_allowlist"]);
    sessions(&mut ev, &site_m, "first-d", month_start, 30, "desktop", None, &["pageview", "pageview", "adblock_detected", "wall_displayed", "wall_dismissed"]);
    sessions(&mut ev, &site_m, "first-w", month_start, 15, "desktop", None, &["pageview", "pageview", "adblock_detected", "wall_displayed"]);
    sessions(&mut ev, &site_m, "first-p", month_start, 10, "desktop", None, &["pageview", "pageview"]);
    sessions(&mut ev, &site_m, "mid-c", fifteenth, 15, "mobile", None, &["pageview", "adblock_detected", "wall_displayed", "conversion_subscribe"]);
    sessions(&mut ev, &site_m, "mid-w", fifteenth, 5, "mobile", None, &["pageview", "adblock_detected", "wall_displayed"]);
    sessions(&mut ev, &site_m, "mid-p", fifteenth, 20, "mobile", None, &["pageview"]);
    // The month before: 50 sessions, all walled, half converted.
    let before = day_before(month_start, 1);
    sessions(&mut ev, &site_m, "old-c", before, 25, "desktop", None, &converted);
    sessions(&mut ev, &site_m, "old-w", before, 25, "desktop", None, &walled);
    ingest(&app, "FR", &ev);
    let report = create_report(&app, &site_m, json!({"type": "monthly", "recipients": recipients()}));
    let run = send_now(&app, &site_m, &report);
    assert_eq!(run["period"], json!({"start": month_start.to_string(), "end": day_before(today, 1).to_string()}));
    let m = &run["monthly"];
    assert_eq!(
        m["kpis"],
        json!({"sessions": 100, "adblock_detected": 70, "adblock_share": 70.0, "walls_displayed": 70, "conversions": 20, "conversion_rate": 28.57})
    );
    let weeks = m["weeks"].as_array().unwrap();
    assert_eq!(weeks[0]["start"], month_start.to_string());
    assert_eq!(weeks[0]["sessions"], 60);
    let with_15th = weeks.iter().find(|w| {
        let (s, e): (NaiveDate, NaiveDate) = (w["start"].as_str().unwrap().parse().unwrap(), w["end"].as_str().unwrap().parse().unwrap());
        s <= fifteenth && fifteenth <= e
    });
    assert_eq!(with_15th.unwrap()["sessions"], 40);
    assert_eq!(weeks.iter().map(|w| w["sessions"].as_u64().unwrap()).sum::<u64>(), 100);
    assert_eq!(weeks.last().unwrap()["end"], day_before(today, 1).to_string());
    assert_eq!(m["previous_month"]["kpis"]["sessions"], 50);
    assert_eq!(m["comparison"]["sessions"], json!({"previous": 50, "difference": 50, "percent": 100.0}));
    assert_eq!(m["comparison"]["conversions"], json!({"previous": 25, "difference": -5, "percent": -20.0}));
    assert_eq!(m["comparison"]["adblock_share_change_points"], -30.0);
    assert_eq!(m["comparison"]["conversion_rate_change_points"], -21.43);
    // 20 recovered sessions × 1.6 pageviews per session × 250 per 1000 pageviews ÷ 1000 = 8.
    assert_eq!(m["revenue"]["pageviews"], 160);
    assert_eq!(m["revenue"]["pageviews_per_session"], 1.6);
    assert_eq!(m["revenue"]["estimated_recovered_revenue"], 8.0);
    assert_eq!(m["revenue"]["configured"], true);
    let rules: Vec<&str> = m["recommendations"].as_array().unwrap().iter().map(|r| r["rule"].as_str().unwrap()).collect();
    assert_eq!(rules, ["high_adblock_share"]);
    assert!(m["recommendations"][0]["message"].as_str().unwrap().contains("70.00% of sessions (70 of 100)"));
    assert_eq!(m["recommendations"][0]["figures"]["adblock_share"], 70.0);

    // Without a revenue figure the estimate is 0 and the report says why.
    app.patch(&format!("/v1/sites/{site_m}"), &json!({"revenue_per_1000_pageviews": null})).expect(200);
    let run = send_now(&app, &site_m, &report);
    let r = &run["monthly"]["revenue"];
    assert_eq!((r["estimated_recovered_revenue"].as_f64(), r["configured"].as_bool()), (Some(0.0), Some(false)));
    assert!(r["note"].as_str().unwrap().contains("no revenue per 1000 pageviews is configured"), "{r}");
    let rules: Vec<&str> = run["monthly"]["recommendations"].as_array().unwrap().iter().map(|r| r["rule"].as_str().unwrap()).collect();
    assert_eq!(rules, ["high_adblock_share", "set_revenue_figure"]);
    let html = app.get(&format!("/v1/report-runs/{}?format=html", run["id"].as_str().unwrap()));
    assert!(html.text.contains("Not estimated: no revenue per 1000 pageviews is configured"), "{}", html.text);
    let pdf = fetch_pdf(&app, run["id"].as_str().unwrap());
    for needle in ["Monthly report", "Sessions per week", "Weekly evolution", "Estimated recovered revenue", "Recommendations", "70.00% of sessions (70 of 100)"] {
        assert!(pdf.contains(needle), "{needle:?} missing from the PDF text:\n{pdf}");
    }
    assert_eq!(runs(&app, &site_m, &report).len(), 2);

    // Custom: mobile visitors from France, on a fixed period, with the wall_displayed count.
    let site_c = id(&app.create_site("custom.example.com", "Europe/Paris"));
    let day = day_before(today, 3);
    let mut fr = Vec::new();
    sessions(&mut fr, &site_c, "fr-m-c", day, 1, "mobile", Some("control"), &converted);
    sessions(&mut fr, &site_c, "fr-m-w", day, 2, "mobile", Some("control"), &walled);
    sessions(&mut fr, &site_c, "fr-d-w", day, 4, "desktop", Some("control"), &walled);
    ingest(&app, "FR", &fr);
    let mut de = Vec::new();
    sessions(&mut de, &site_c, "de-m-w", day, 2, "mobile", Some("control"), &walled);
    ingest(&app, "DE", &de);
    let report = create_report(
        &app,
        &site_c,
        json!({
            "type": "custom",
            "metrics": ["sessions", "conversions", "conversion_rate", "by_device", "by_country"],
            "filters": {"start": day_before(day, 1).to_string(), "end": day.to_string(), "device": "mobile", "countries": ["FR"], "event": "wall_displayed"},
            "channels": ["slack"]
        }),
    );
    let run = send_now(&app, &site_c, &report);
    assert_eq!(run["period"], json!({"start": day_before(day, 1).to_string(), "end": day.to_string()}));
    let c = &run["custom"];
    assert_eq!(c["totals"], json!({"sessions": 3, "conversions": 1, "conversion_rate": 33.33}));
    assert_eq!(c["days"][1], json!({"date": day.to_string(), "sessions": 3, "conversions": 1, "conversion_rate": 33.33}));
    assert_eq!(c["by_device"].as_array().unwrap().len(), 1);
    assert_eq!(c["by_device"][0]["key"], "mobile");
    assert_eq!(c["by_country"].as_array().unwrap().len(), 1);
    assert_eq!(c["by_country"][0]["key"], "FR");
    assert_eq!(c["by_country"][0]["sessions"], 3);
    assert_eq!(c["event"], json!({"event_type": "wall_displayed", "count": 3}));
    assert!(c.get("by_variant").is_none());
}

#[test]
fn scheduled_reports_fire_at_local_eight_once_per_period_across_restarts_dst_and_new_year() {
    let args = serve_args("2026-03-08T10:00:00.000Z");
    let mut app = TestApp::spawn_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let ny = id(&app.create_site("ny.example.com", "America/New_York"));
    let paris = id(&app.create_site("paris.example.com", "Europe/Paris"));
    let daily = create_report(&app, &ny, json!({"type": "daily", "recipients": recipients()}));
    let weekly = create_report(&app, &paris, json!({"type": "weekly", "channels": ["webhook"]}));
    // New York springs forward this morning (2026-03-08): 08:00 is 12:00 UTC, not 13:00.
    assert_eq!(daily["next_run_at"], "2026-03-08T12:00:00.000Z");
    assert_eq!(weekly["next_run_at"], "2026-03-09T07:00:00.000Z");
    wait_for_pass(&app);
    assert!(runs(&app, &ny, &daily).is_empty(), "nothing is due before 08:00");

    // 08:00:20 in New York.
    restart_at(&mut app, "2026-03-08T12:00:20Z");
    let r = runs(&app, &ny, &daily);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["scheduled_for"], "2026-03-08T12:00:00.000Z");
    assert_eq!(r[0]["period"], json!({"start": "2026-03-07", "end": "2026-03-07"}));
    assert_eq!(r[0]["trigger"], "schedule");
    assert!(runs(&app, &paris, &weekly).is_empty());

    // The same moment again after a restart: nothing twice.
    restart_at(&mut app, "2026-03-08T12:00:40Z");
    assert_eq!(runs(&app, &ny, &daily).len(), 1);

    // Down for two days: one catch-up run per report for the latest period, no backlog.
    restart_at(&mut app, "2026-03-10T15:00:00.000Z");
    let r = runs(&app, &ny, &daily);
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!((r[0]["scheduled_for"].as_str(), r[0]["trigger"].as_str()), (Some("2026-03-10T12:00:00.000Z"), Some("catch_up")));
    assert_eq!(r[0]["period"], json!({"start": "2026-03-09", "end": "2026-03-09"}));
    let w = runs(&app, &paris, &weekly);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0]["scheduled_for"], "2026-03-09T07:00:00.000Z");
    assert_eq!(w[0]["period"], json!({"start": "2026-03-02", "end": "2026-03-08"}));
    restart_at(&mut app, "2026-03-10T15:00:30Z");
    assert_eq!((runs(&app, &ny, &daily).len(), runs(&app, &paris, &weekly).len()), (2, 1));

    // Paris springs forward on 29 March: the Monday after, 08:00 is 06:00 UTC.
    restart_at(&mut app, "2026-03-30T06:00:30Z");
    let w = runs(&app, &paris, &weekly);
    assert_eq!(w.len(), 2);
    assert_eq!((w[0]["scheduled_for"].as_str(), w[0]["trigger"].as_str()), (Some("2026-03-30T06:00:00.000Z"), Some("schedule")));
    assert_eq!(w[0]["period"], json!({"start": "2026-03-23", "end": "2026-03-29"}));

    // Meanwhile New York's daily report caught up once, for 29 March.
    assert_eq!(runs(&app, &ny, &daily).len(), 3);

    // New Year: the Monday report of 4 January 2027 covers ISO week 53 of 2026.
    restart_at(&mut app, "2027-01-04T07:00:30Z");
    let w = runs(&app, &paris, &weekly);
    assert_eq!(w.len(), 3);
    assert_eq!(w[0]["scheduled_for"], "2027-01-04T07:00:00.000Z");
    assert_eq!(w[0]["period"], json!({"start": "2026-12-28", "end": "2027-01-03"}));
    // In New York it is still 02:00 on 4 January: the due daily report is the one of the 3rd.
    let r = runs(&app, &ny, &daily);
    assert_eq!(r.len(), 4);
    assert_eq!(r[0]["scheduled_for"], "2027-01-03T13:00:00.000Z");
    assert_eq!(r[0]["period"], json!({"start": "2027-01-02", "end": "2027-01-02"}));

    // Every run stays fetchable.
    for run in runs(&app, &ny, &daily).iter().chain(runs(&app, &paris, &weekly).iter()) {
        let a = app.get(run["links"]["json"].as_str().unwrap());
        a.expect(200);
        assert_eq!(a.body["id"], run["id"]);
        assert_eq!(a.body["period"], run["period"]);
    }
    // A paused report is not generated; a deleted one neither, and its runs stay.
    let rid = daily["id"].as_str().unwrap();
    app.patch(&format!("/v1/sites/{ny}/reports/{rid}"), &json!({"enabled": false})).expect(200);
    restart_at(&mut app, "2027-01-05T15:00:00.000Z");
    assert_eq!(runs(&app, &ny, &daily).len(), 4);
    let kept = runs(&app, &ny, &daily)[0]["id"].as_str().unwrap().to_owned();
    app.delete(&format!("/v1/sites/{ny}/reports/{rid}")).expect(204);
    app.get(&format!("/v1/report-runs/{kept}")).expect(200);
}

#[test]
fn a_scheduled_report_arrives_by_email_slack_and_signed_webhook_once() {
    const WAIT: Duration = Duration::from_secs(60);
    let smtp = SmtpReceiver::start();
    let slack = HttpReceiver::start(&[]);
    let hook = HttpReceiver::start(&[]);
    // 07:00 in Paris on a past 1st of the month; the report is due at 08:00.
    let eight = known_answer_clock() - chrono::Duration::hours(2);
    let with = |clock: DateTime<Utc>| {
        let mut args = serve_args(&clock.to_rfc3339());
        args.extend(smtp.flags());
        args.extend(["--delivery-retry-base-ms".to_owned(), "200".to_owned(), "--public-url".to_owned(), "https://stats.example.com".to_owned()]);
        args.extend(LOOPBACK_HOOKS.map(str::to_owned));
        args
    };
    let args = with(eight - chrono::Duration::hours(1));
    let mut app = TestApp::spawn_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let site = id(&app.create_site("courier.example.com", "Europe/Paris"));
    let yesterday = eight.with_timezone(&Paris).date_naive().pred_opt().unwrap();
    let mut ev = Vec::new();
    sessions(&mut ev, &site, "conv", yesterday, 1, "mobile", Some("control"), &["pageview", "adblock_detected", "wall_displayed", "conversion_allowlist"]);
    sessions(&mut ev, &site, "clean", yesterday, 4, "desktop", None, &["pageview"]);
    ingest(&app, "FR", &ev);
    app.post(&format!("/v1/sites/{site}/integrations"), &json!({"kind": "slack", "url": slack.url, "events": ["daily_report"]})).expect(201);
    let webhook = app.post(&format!("/v1/sites/{site}/integrations"), &json!({"kind": "webhook", "url": hook.url, "events": ["daily_report"]})).expect(201).body.clone();
    let secret = webhook["secret"].as_str().unwrap().to_owned();
    let report = create_report(
        &app,
        &site,
        json!({"type": "daily", "recipients": recipients(), "channels": ["email", "slack", "webhook"], "format": "pdf"}),
    );

    restart_at_with(&mut app, with(eight + chrono::Duration::seconds(30)));
    let run = runs(&app, &site, &report);
    assert_eq!(run.len(), 1);
    assert_eq!(run[0]["trigger"], "schedule");
    assert!(run[0]["enqueued_at"].is_string(), "{}", run[0]);
    let subject = format!("Site courier.example.com: Daily report for {}", yesterday.format("%A %-d %B %Y"));

    let mut mails = [smtp.next_message(WAIT), smtp.next_message(WAIT)];
    mails.sort_by_key(|m| m["rcpt_tos"][0].as_str().unwrap().to_owned());
    let link = format!("https://stats.example.com/dashboard/sites/{site}/reports/{}", report["id"].as_str().unwrap());
    for (mail, to, admin) in [(&mails[0], "ana@example.com", true), (&mails[1], "bob@example.com", false)] {
        assert_eq!(mail["rcpt_tos"], json!([to]));
        assert_eq!(mail["subject"], subject);
        let (html, text) = (mail["html"].as_str().unwrap(), mail["text"].as_str().unwrap());
        assert!(text.contains("- Sessions: 5 (+5 vs 0 the day before)"), "{text}");
        assert!(html.contains("1 (100.00% of walls)"), "{html}");
        assert_eq!(html.contains(&link), admin, "only Admins get the link: {html}");
        assert_eq!(text.contains(&link), admin, "{text}");
        let attachments = mail["attachments"].as_array().unwrap();
        assert_eq!(attachments.len(), 1, "{mail:#}");
        assert_eq!(attachments[0]["filename"], format!("postern-daily-{yesterday}-{yesterday}.pdf"));
        assert_eq!(attachments[0]["content_type"], "application/pdf");
        let pdf = pdf_text(&hex::decode(attachments[0]["hex"].as_str().unwrap()).unwrap());
        assert!(pdf.contains("Daily report") && pdf.contains("100.00% of walls"), "{pdf}");
    }

    let got = slack.wait_for(1, WAIT);
    let body = got[0].json();
    assert!(body["text"].as_str().unwrap().contains(&subject), "{body}");
    assert!(body["blocks"].to_string().contains("Sessions"), "{body}");

    let got = hook.wait_for(1, WAIT).remove(0);
    assert_eq!(got.header("postern-event"), "daily_report");
    let timestamp = got.header("postern-timestamp").to_owned();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.{}", got.body).as_bytes());
    assert_eq!(got.header("postern-signature"), format!("v1={}", hex::encode(mac.finalize().into_bytes())));
    let body = got.json();
    assert_eq!((body["event"].as_str(), body["site_id"].as_str()), (Some("daily_report"), Some(site.as_str())));
    assert_eq!((body["data"]["sessions"].as_u64(), body["data"]["conversions"].as_u64()), (Some(5), Some(1)));
    assert_eq!(body["data"]["run_id"], run[0]["id"]);

    // Every delivery is recorded once; a restart at the same moment sends nothing again.
    let deliveries = |app: &TestApp| app.get(&format!("/v1/sites/{site}/deliveries")).expect(200).body["deliveries"].as_array().unwrap().len();
    assert_eq!(deliveries(&app), 4, "two e-mails, the Slack message and the webhook");
    restart_at_with(&mut app, with(eight + chrono::Duration::seconds(50)));
    assert_eq!(runs(&app, &site, &report).len(), 1);
    assert_eq!(deliveries(&app), 4);
    std::thread::sleep(Duration::from_millis(500));
    assert!(smtp.pending().is_empty() && slack.received().len() == 1 && hook.received().len() == 1, "nothing is sent twice");
}

/// `each_report_type_has_the_known_answers` once failed on an ingest answer
/// under heavy load: the outbox sender (which has its own write connection)
/// recorded a delivery attempt of the daily report while the weekly data was
/// ingested, and its commit's fsync, slowed by a disk busy with other work,
/// outlasted the writers' 5 s busy timeout, so the ingest answered 503. Here
/// another connection holds the write lock for longer than that: ingestion
/// must wait for it, not fail.
#[test]
fn ingestion_waits_for_another_writer_holding_the_lock_for_seconds() {
    let app = TestApp::spawn();
    // The lock held here is SQLite's single write lock, which PostgreSQL does not have.
    let Some(db_file) = app.sqlite_file() else { return };
    let site = id(&app.create_site("slow-disk.example.com", "UTC"));
    let mut holder = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3, sys, time\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\nc.execute('BEGIN IMMEDIATE')\nprint('locked', flush=True)\ntime.sleep(7)\nc.execute('COMMIT')\n")
        .arg(db_file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "locked");
    let started = Instant::now();
    let events: Vec<Value> = (0..3).map(|i| event(&site, &format!("slow-disk-{i:04}"), "pageview", json!({}))).collect();
    let a = app.batch(&json!(events));
    assert_eq!(a.status, 201, "ingestion failed while another connection held the write lock: {}\n{}", a.text, app.logs());
    assert_eq!(a.body["accepted"], 3, "{}", a.text);
    assert!(started.elapsed() >= Duration::from_secs(5), "the batch was written while the lock was held?");
    assert!(holder.wait().unwrap().success());
    let totals = app.dashboard(&site, "?days=1");
    assert_eq!(totals.body["metrics"]["sessions"], 3, "{}", totals.text);
}
