//! Analytics endpoints: dashboard shape and periods, the conversions timeline buckets, and A/B results.

use chrono::{DateTime, Datelike, Duration, NaiveDate, SecondsFormat, TimeZone, Utc, Weekday};
use chrono_tz::Tz;
use serde_json::{json, Value};

use crate::support::*;

const DOMAIN: &str = "news.example.com";

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn today_in(tz: Tz) -> NaiveDate {
    Utc::now().with_timezone(&tz).date_naive()
}

fn date(v: &Value) -> NaiveDate {
    v.as_str()
        .unwrap_or_else(|| panic!("a date string, got {v}"))
        .parse()
        .unwrap_or_else(|_| panic!("YYYY-MM-DD, got {v}"))
}

#[track_caller]
fn track_ok(app: &TestApp, body: Value) {
    let a = app.track(&body);
    assert_eq!(a.status.as_u16(), 201, "track {body} → {}", a.text);
}

/// Sends events through /v1/events/batch in chunks of 500, asserting every one is accepted.
#[track_caller]
fn batch_all(app: &TestApp, events: &[Value]) {
    for chunk in events.chunks(500) {
        let a = app.batch(&Value::Array(chunk.to_vec()));
        a.expect(201);
        assert_eq!(a.body["accepted"].as_u64(), Some(chunk.len() as u64), "{}", a.text);
        assert_eq!(a.body["rejected"], 0, "{}", a.text);
    }
}

/// `impressions` sessions that saw the wall of `variant`, the first `conversions` of them converting.
fn ab_sessions(site: &str, variant: &str, impressions: usize, conversions: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for i in 0..impressions {
        let s = format!("ab-{variant}-{i:05}");
        let meta = json!({"metadata": {"variant": variant}});
        out.push(event(site, &s, "wall_displayed", meta.clone()));
        if i < conversions {
            out.push(event(site, &s, "conversion_allowlist", meta));
        }
    }
    out
}

fn variant<'a>(ab: &'a Answer, name: &str) -> &'a Value {
    ab.body["variants"]
        .as_array()
        .unwrap_or_else(|| panic!("variants array: {}", ab.text))
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no variant {name}: {}", ab.text))
}

fn names(ab: &Answer) -> Vec<String> {
    ab.body["variants"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap().to_owned()).collect()
}

#[track_caller]
fn expect_invalid(a: &Answer, field: &str, reasons: &[&str]) {
    a.expect(400);
    let (code, f, reason) = a.error();
    assert_eq!(code, "INVALID_REQUEST", "{}", a.text);
    assert_eq!(f.as_deref(), Some(field), "{}", a.text);
    assert!(reasons.contains(&reason.as_str()), "reason {reason} not in {reasons:?}: {}", a.text);
}

// ---------------------------------------------------------------- dashboard

#[test]
fn dashboard_has_exactly_the_spec_shape() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    track_ok(&app, event(&site, "shape-session", "adblock_detected", json!({})));

    let a = app.dashboard(&site, "");
    a.expect(200);
    let top: Vec<&String> = a.body.as_object().expect("an object").keys().collect();
    assert_eq!(top.len(), 2, "only period and metrics: {}", a.text);
    let period = a.body["period"].as_object().expect("period object");
    let mut pkeys: Vec<&String> = period.keys().collect();
    pkeys.sort();
    assert_eq!(pkeys, ["end", "start"], "{}", a.text);
    let m = a.body["metrics"].as_object().expect("metrics object");
    for k in ["sessions", "adblock_detected", "conversions"] {
        assert!(m[k].is_u64(), "{k} must be an integer: {}", a.text);
    }
    assert!(m["conversion_rate"].is_number(), "{}", a.text);
    assert_eq!(m["sessions"], 1);
    assert_eq!(m["adblock_detected"], 1);
    assert_eq!(m["conversions"], 0);
    assert_eq!(m["conversion_rate"].as_f64(), Some(0.0), "no walls: rate 0, not NaN: {}", a.text);
    // Extra metrics (DESIGN §3) when present are consistent.
    if let Some(w) = m.get("walls_displayed") {
        assert_eq!(w, 0);
    }
    if let Some(s) = m.get("adblock_share") {
        assert_eq!(s.as_f64(), Some(100.0));
    }
}

#[test]
fn dashboard_period_ends_today_in_the_site_timezone() {
    let app = TestApp::spawn();
    for tz_name in ["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Kolkata"] {
        let tz: Tz = tz_name.parse().unwrap();
        let site =
            id(&app.create_site(&format!("{}.example.com", tz_name.replace(['/', '_'], "-").to_lowercase()), tz_name));
        for (query, days) in [("", 7i64), ("?days=1", 1), ("?days=30", 30), ("?days=730", 730)] {
            let before = today_in(tz);
            let a = app.dashboard(&site, query);
            let after = today_in(tz);
            a.expect(200);
            let end = date(&a.body["period"]["end"]);
            assert!(end == before || end == after, "{tz_name} {query}: end {end}, today {before}");
            let start = date(&a.body["period"]["start"]);
            assert_eq!((end - start).num_days(), days - 1, "{tz_name} {query}: {}", a.text);
        }
    }
}

#[test]
fn dashboard_days_out_of_bounds_or_malformed_is_400() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    for q in ["?days=0", "?days=731", "?days=100000"] {
        expect_invalid(&app.dashboard(&site, q), "days", &["out_of_range"]);
    }
    for q in ["?days=abc", "?days=1.5", "?days=7d"] {
        expect_invalid(&app.dashboard(&site, q), "days", &["invalid"]);
    }
    expect_invalid(&app.dashboard(&site, "?days=-1"), "days", &["invalid", "out_of_range"]);
    // The conversions and A/B endpoints apply the same bounds.
    expect_invalid(&app.conversions(&site, "?days=0"), "days", &["out_of_range"]);
    expect_invalid(&app.conversions(&site, "?days=731"), "days", &["out_of_range"]);
    expect_invalid(&app.conversions(&site, "?days=abc"), "days", &["invalid"]);
    expect_invalid(&app.ab_testing(&site, "?days=0"), "days", &["out_of_range"]);
    expect_invalid(&app.ab_testing(&site, "?days=abc"), "days", &["invalid"]);
    // Unknown parameters are ignored.
    app.dashboard(&site, "?days=3&colour=blue").expect(200);
}

#[test]
fn analytics_of_an_unknown_site_is_404() {
    let app = TestApp::spawn();
    let other_key = app.admin(&["create-key", "--account", "someone-else"]);
    let site = id(&app.create_site(DOMAIN, "UTC"));
    for path in ["dashboard", "conversions", "ab-testing"] {
        for sid in ["3f0c8a4e-1d2b-4c5a-9e8f-7a6b5c4d3e2f", "not-a-uuid"] {
            let a = app.get(&format!("/v1/analytics/sites/{sid}/{path}"));
            a.expect(404);
            assert_eq!(a.error().0, "NOT_FOUND");
        }
        // Another account's site does not exist for this key.
        let a = app.get_as(&other_key, &format!("/v1/analytics/sites/{site}/{path}"));
        a.expect(404);
        assert_eq!(a.error().0, "NOT_FOUND");
    }
}

#[test]
fn dashboard_rates_are_rounded_to_two_decimals() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    // 6 sessions: 3 with an ad blocker and the wall, 1 of them converts (1/3 → 33.33);
    // 3 plain pageviews (adblock share 3/6 → 50).
    for i in 0..3 {
        let s = format!("walled-{i:04}");
        track_ok(&app, event(&site, &s, "adblock_detected", json!({})));
        track_ok(&app, event(&site, &s, "wall_displayed", json!({})));
        track_ok(&app, event(&site, &format!("plain--{i:04}"), "pageview", json!({})));
    }
    track_ok(&app, event(&site, "walled-0000", "conversion_allowlist", json!({})));
    let m = app.dashboard(&site, "?days=2").body["metrics"].clone();
    assert_eq!(
        (m["sessions"].as_u64(), m["adblock_detected"].as_u64(), m["conversions"].as_u64()),
        (Some(6), Some(3), Some(1)),
        "{m}"
    );
    assert_eq!(m["conversion_rate"].as_f64(), Some(33.33), "{m}");
    assert_eq!(m["adblock_share"].as_f64(), Some(50.0), "{m}");

    track_ok(&app, event(&site, "walled-0001", "conversion_subscribe", json!({})));
    let m = app.dashboard(&site, "?days=2").body["metrics"].clone();
    assert_eq!(m["conversions"], 2);
    assert_eq!(m["conversion_rate"].as_f64(), Some(66.67), "{m}");

    // One more plain session: 3/7 → 42.86.
    track_ok(&app, event(&site, "plain--9999", "pageview", json!({})));
    let m = app.dashboard(&site, "?days=2").body["metrics"].clone();
    assert_eq!(m["adblock_share"].as_f64(), Some(42.86), "{m}");
}

#[test]
fn dashboard_days_selects_whole_local_days() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    // Sessions at noon UTC 0, 3, 10 and 40 days ago.
    let today = Utc::now().date_naive();
    let noon = |ago: i64| Utc.from_utc_datetime(&(today - Duration::days(ago)).and_hms_opt(12, 0, 0).unwrap());
    for ago in [3, 10, 40] {
        track_ok(
            &app,
            event(&site, &format!("days-ago-{ago:03}"), "wall_displayed", json!({"timestamp": ts(noon(ago))})),
        );
    }
    track_ok(&app, event(&site, "days-ago-000", "wall_displayed", json!({})));
    let got: Vec<u64> = ["?days=1", "?days=3", "?days=4", "?days=11", "?days=41", "?days=730", ""]
        .iter()
        .map(|q| app.dashboard(&site, q).body["metrics"]["sessions"].as_u64().unwrap())
        .collect();
    if Utc::now().date_naive() != today {
        // A UTC midnight passed while the test ran: run it again on the new day.
        return dashboard_days_selects_whole_local_days();
    }
    assert_eq!(got, [1, 1, 2, 3, 4, 4, 2], "days 1, 3, 4, 11, 41, 730 and the default 7");
}

// ---------------------------------------------------------------- conversions

#[test]
fn conversions_day_buckets_are_zero_filled_and_default_to_30_days() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "Europe/Paris"));
    let tz: Tz = "Europe/Paris".parse().unwrap();
    let today = today_in(tz);
    // A converting session at local noon 5 days ago, a walled one 2 days ago.
    let noon = |ago: i64| {
        tz.from_local_datetime(&(today - Duration::days(ago)).and_hms_opt(12, 0, 0).unwrap())
            .single()
            .unwrap()
            .with_timezone(&Utc)
    };
    for t in ["adblock_detected", "wall_displayed", "conversion_allowlist"] {
        track_ok(&app, event(&site, "five-days-ago", t, json!({"timestamp": ts(noon(5))})));
    }
    track_ok(&app, event(&site, "two-days-ago1", "wall_displayed", json!({"timestamp": ts(noon(2))})));
    track_ok(&app, event(&site, "two-days-ago2", "pageview", json!({"timestamp": ts(noon(2))})));

    let a = app.conversions(&site, "");
    a.expect(200);
    if today_in(tz) != today {
        // A local midnight passed while the test ran: run it again on the new day.
        return conversions_day_buckets_are_zero_filled_and_default_to_30_days();
    }
    assert_eq!(a.body["granularity"], "day", "day is the default: {}", a.text);
    let end = date(&a.body["period"]["end"]);
    let start = date(&a.body["period"]["start"]);
    assert_eq!(end, today);
    assert_eq!((end - start).num_days(), 29, "30 days by default");
    let tl = a.body["timeline"].as_array().unwrap();
    assert_eq!(tl.len(), 30);
    for (i, b) in tl.iter().enumerate() {
        let day = start + Duration::days(i as i64);
        assert_eq!(b["bucket"], day.to_string(), "oldest first, consecutive: {b}");
        for k in ["sessions", "adblock_detected", "walls_displayed", "conversions"] {
            assert!(b[k].is_u64(), "{k} in {b}");
        }
        assert!(b["conversion_rate"].is_number(), "{b}");
        let expected = if day == today - Duration::days(5) {
            (1, 1, 1, 1, 100.0)
        } else if day == today - Duration::days(2) {
            (2, 0, 1, 0, 0.0)
        } else {
            (0, 0, 0, 0, 0.0)
        };
        let got = (
            b["sessions"].as_u64().unwrap(),
            b["adblock_detected"].as_u64().unwrap(),
            b["walls_displayed"].as_u64().unwrap(),
            b["conversions"].as_u64().unwrap(),
            b["conversion_rate"].as_f64().unwrap(),
        );
        assert_eq!(got, expected, "{day}: {b}");
    }

    // days=7 keeps the two sessions' days; days=2 only the one two days ago is outside.
    let a = app.conversions(&site, "?days=7&granularity=day");
    assert_eq!(a.body["timeline"].as_array().unwrap().len(), 7);
    let a = app.conversions(&site, "?days=2");
    let tl = a.body["timeline"].as_array().unwrap();
    assert_eq!(tl.len(), 2);
    assert!(tl.iter().all(|b| b["sessions"] == 0), "{}", a.text);
}

#[test]
fn conversions_week_buckets_are_mondays() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let today = Utc::now().date_naive();
    // Sessions 0, 7, 8, 20 days ago (noon UTC; the one "0 days ago" uses the server clock).
    let noon = |ago: i64| Utc.from_utc_datetime(&(today - Duration::days(ago)).and_hms_opt(12, 0, 0).unwrap());
    for ago in [7i64, 8, 20] {
        track_ok(
            &app,
            event(&site, &format!("week-sess-{ago:02}"), "wall_displayed", json!({"timestamp": ts(noon(ago))})),
        );
    }
    track_ok(&app, event(&site, "week-sess-00", "wall_displayed", json!({})));
    track_ok(&app, event(&site, "week-sess-00", "conversion_allowlist", json!({})));

    let a = app.conversions(&site, "?granularity=week&days=30");
    a.expect(200);
    if Utc::now().date_naive() != today {
        // A UTC midnight passed while the test ran: run it again on the new day.
        return conversions_week_buckets_are_mondays();
    }
    assert_eq!(a.body["granularity"], "week");
    let start = date(&a.body["period"]["start"]);
    assert_eq!(start, today - Duration::days(29));
    let monday = |d: NaiveDate| d - Duration::days(d.weekday().num_days_from_monday() as i64);
    let mut expected_labels: Vec<NaiveDate> = Vec::new();
    for d in start.iter_days().take(30) {
        if !expected_labels.contains(&monday(d)) {
            expected_labels.push(monday(d));
        }
    }
    let tl = a.body["timeline"].as_array().unwrap();
    let labels: Vec<NaiveDate> = tl.iter().map(|b| date(&b["bucket"])).collect();
    assert_eq!(labels, expected_labels, "every week of the period, oldest first: {}", a.text);
    assert!(labels.iter().all(|d| d.weekday() == Weekday::Mon));

    // Expected sessions per Monday.
    let mut want: Vec<(NaiveDate, u64, u64)> = expected_labels.iter().map(|m| (*m, 0, 0)).collect();
    for (ago, conv) in [(0i64, 1u64), (7, 0), (8, 0), (20, 0)] {
        let m = monday(today - Duration::days(ago));
        let slot = want.iter_mut().find(|w| w.0 == m).unwrap();
        slot.1 += 1;
        slot.2 += conv;
    }
    for (b, (m, sessions, conv)) in tl.iter().zip(&want) {
        assert_eq!(
            (b["sessions"].as_u64().unwrap(), b["conversions"].as_u64().unwrap()),
            (*sessions, *conv),
            "week of {m}: {b}"
        );
        assert_eq!(b["walls_displayed"].as_u64().unwrap(), *sessions, "{b}");
    }
    let total: u64 = tl.iter().map(|b| b["sessions"].as_u64().unwrap()).sum();
    assert_eq!(total, 4);

    // The first week is partial: a session before the period's start does not count in it.
    let a = app.conversions(&site, "?granularity=week&days=8");
    let tl = a.body["timeline"].as_array().unwrap();
    let total: u64 = tl.iter().map(|b| b["sessions"].as_u64().unwrap()).sum();
    assert_eq!(total, 2, "days=8 covers the sessions 0 and 7 days ago only: {}", a.text);
    assert_eq!(date(&tl[0]["bucket"]), monday(today - Duration::days(7)));
}

#[test]
fn conversions_hour_buckets_carry_the_local_offset() {
    let app = TestApp::spawn();
    let tz: Tz = "Europe/Paris".parse().unwrap();
    let site = id(&app.create_site(DOMAIN, "Europe/Paris"));
    let now = Utc::now();
    let earlier = now - Duration::hours(5);
    track_ok(&app, event(&site, "hour-session-1", "wall_displayed", json!({"timestamp": ts(earlier)})));
    track_ok(&app, event(&site, "hour-session-1", "conversion_allowlist", json!({})));

    let a = app.conversions(&site, "?granularity=hour&days=3");
    a.expect(200);
    assert_eq!(a.body["granularity"], "hour");
    let start = date(&a.body["period"]["start"]);
    let end = date(&a.body["period"]["end"]);
    let local_midnight =
        |d: NaiveDate| tz.from_local_datetime(&d.and_hms_opt(0, 0, 0).unwrap()).single().unwrap().with_timezone(&Utc);
    let first = local_midnight(start);
    let hours = (local_midnight(end + Duration::days(1)) - first).num_hours();
    let tl = a.body["timeline"].as_array().unwrap();
    assert_eq!(tl.len() as i64, hours, "one bucket per hour of 3 local days");
    for (i, b) in tl.iter().enumerate() {
        let label = b["bucket"].as_str().unwrap();
        let expected =
            (first + Duration::hours(i as i64)).with_timezone(&tz).format("%Y-%m-%dT%H:%M:%S%:z").to_string();
        assert_eq!(label, expected, "bucket {i}");
        assert!(label.ends_with("+01:00") || label.ends_with("+02:00"), "{label}");
        let parsed = DateTime::parse_from_rfc3339(label).expect("an RFC 3339 instant");
        assert_eq!(parsed.with_timezone(&Utc), first + Duration::hours(i as i64));
    }
    let at = Utc.timestamp_opt(earlier.timestamp().div_euclid(3600) * 3600, 0).unwrap();
    let label = at.with_timezone(&tz).format("%Y-%m-%dT%H:%M:%S%:z").to_string();
    for b in tl {
        let expected = if b["bucket"] == label.as_str() { (1, 1, 1, 100.0) } else { (0, 0, 0, 0.0) };
        let got = (
            b["sessions"].as_u64().unwrap(),
            b["walls_displayed"].as_u64().unwrap(),
            b["conversions"].as_u64().unwrap(),
            b["conversion_rate"].as_f64().unwrap(),
        );
        assert_eq!(got, expected, "{b}");
    }
}

#[test]
fn conversions_hour_granularity_is_limited_to_31_days() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let a = app.conversions(&site, "?granularity=hour&days=31");
    a.expect(200);
    assert_eq!(a.body["timeline"].as_array().unwrap().len(), 31 * 24, "a UTC site: 744 hours");
    let a = app.conversions(&site, "?granularity=hour&days=32");
    a.expect(400);
    let (code, field, _) = a.error();
    assert_eq!(code, "INVALID_REQUEST");
    assert!(matches!(field.as_deref(), Some("granularity") | Some("days")), "{}", a.text);
    // hour with the default 30 days is fine.
    let a = app.conversions(&site, "?granularity=hour");
    a.expect(200);
    assert_eq!(a.body["timeline"].as_array().unwrap().len(), 30 * 24);
    // Unknown granularity.
    expect_invalid(&app.conversions(&site, "?granularity=month"), "granularity", &["invalid"]);
    // The longest day timeline.
    let a = app.conversions(&site, "?days=730");
    a.expect(200);
    assert_eq!(a.body["timeline"].as_array().unwrap().len(), 730);
    // Unknown device filter.
    expect_invalid(&app.conversions(&site, "?device=watch"), "device", &["invalid"]);
}

// ---------------------------------------------------------------- A/B testing

#[test]
fn ab_default_variants_are_listed_without_data() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let ab = app.ab_testing(&site, "");
    ab.expect(200);
    assert_eq!(ab.body.as_object().unwrap().len(), 1, "only variants: {}", ab.text);
    assert_eq!(names(&ab), ["control", "emotional", "offer"]);
    for v in ab.body["variants"].as_array().unwrap() {
        assert_eq!(v["impressions"], 0, "{v}");
        assert_eq!(v["conversions"], 0, "{v}");
        assert_eq!(v["conversion_rate"].as_f64(), Some(0.0), "{v}");
        assert_eq!(v["confidence"].as_f64(), Some(0.0), "{v}");
        assert!(v.get("is_winner").is_none(), "is_winner absent: {v}");
    }
}

#[test]
fn ab_declares_a_significant_winner() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    // control 200 / 20 (10 %), emotional 200 / 60 (30 %): pooled 0.2, se 0.04, z = 5, p ≈ 5.7e-7.
    let mut events = ab_sessions(&site, "control", 200, 20);
    events.extend(ab_sessions(&site, "emotional", 200, 60));
    assert_eq!(events.len(), 480);
    batch_all(&app, &events);
    // offer: 10 impressions, 2 conversions (not enough data to matter).
    batch_all(&app, &ab_sessions(&site, "offer", 10, 2));

    let ab = app.ab_testing(&site, "");
    ab.expect(200);
    assert_eq!(names(&ab), ["control", "emotional", "offer"]);
    let (c, e, o) = (variant(&ab, "control"), variant(&ab, "emotional"), variant(&ab, "offer"));
    assert_eq!((c["impressions"].as_u64(), c["conversions"].as_u64()), (Some(200), Some(20)), "{c}");
    assert_eq!((e["impressions"].as_u64(), e["conversions"].as_u64()), (Some(200), Some(60)), "{e}");
    assert_eq!((o["impressions"].as_u64(), o["conversions"].as_u64()), (Some(10), Some(2)), "{o}");
    assert_eq!(c["conversion_rate"].as_f64(), Some(10.0));
    assert_eq!(e["conversion_rate"].as_f64(), Some(30.0));
    assert_eq!(o["conversion_rate"].as_f64(), Some(20.0));
    assert_eq!(e["is_winner"], json!(true), "{}", ab.text);
    assert!(c.get("is_winner").is_none(), "{c}");
    assert!(o.get("is_winner").is_none(), "{o}");
    let ce = e["confidence"].as_f64().unwrap();
    assert!((99.99..=100.0).contains(&ce), "z = 5 gives 100 × (1 − 5.7e-7): {e}");
    // Control is compared with the best other variant (emotional): the same test.
    let cc = c["confidence"].as_f64().unwrap();
    assert!((99.99..=100.0).contains(&cc), "{c}");
    // offer vs control: p1 0.2 (n 10), p2 0.1 (n 200): pooled 22/210, se 0.09924, z 1.0077, p 0.3136 → 68.64.
    let co = o["confidence"].as_f64().unwrap();
    assert!((co - 68.64).abs() <= 0.05, "{o}");

    // The dashboard sees the same sessions.
    let m = app.dashboard(&site, "?days=2").body["metrics"].clone();
    assert_eq!(
        (m["sessions"].as_u64(), m["walls_displayed"].as_u64(), m["conversions"].as_u64()),
        (Some(410), Some(410), Some(82)),
        "{m}"
    );
    assert_eq!(m["conversion_rate"].as_f64(), Some(20.0));
}

#[test]
fn ab_control_can_win() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let mut events = ab_sessions(&site, "control", 150, 60);
    events.extend(ab_sessions(&site, "offer", 150, 15));
    batch_all(&app, &events);
    let ab = app.ab_testing(&site, "");
    let (c, e, o) = (variant(&ab, "control"), variant(&ab, "emotional"), variant(&ab, "offer"));
    assert_eq!(c["is_winner"], json!(true), "{}", ab.text);
    assert_eq!(c["conversion_rate"].as_f64(), Some(40.0));
    assert_eq!(o["conversion_rate"].as_f64(), Some(10.0));
    assert!(e.get("is_winner").is_none() && o.get("is_winner").is_none(), "{}", ab.text);
    assert!(c["confidence"].as_f64().unwrap() >= 95.0);
}

#[test]
fn ab_no_winner_with_small_samples_or_equal_rates() {
    let app = TestApp::spawn();
    // Small samples: control 50 / 5, emotional 50 / 15: z = 2.5, p = 0.0124 → 98.76, but < 100 impressions.
    let small = id(&app.create_site(DOMAIN, "UTC"));
    let mut events = ab_sessions(&small, "control", 50, 5);
    events.extend(ab_sessions(&small, "emotional", 50, 15));
    batch_all(&app, &events);
    let ab = app.ab_testing(&small, "");
    ab.expect(200);
    let e = variant(&ab, "emotional");
    assert_eq!(e["conversion_rate"].as_f64(), Some(30.0));
    assert!((e["confidence"].as_f64().unwrap() - 98.76).abs() <= 0.011, "{e}");
    assert!((variant(&ab, "control")["confidence"].as_f64().unwrap() - 98.76).abs() <= 0.011, "{}", ab.text);
    assert!(ab.body["variants"].as_array().unwrap().iter().all(|v| v.get("is_winner").is_none()), "{}", ab.text);

    // Equal rates on large samples: z = 0, confidence 0, no winner.
    let equal = id(&app.create_site("equal.example.com", "UTC"));
    let mut events = ab_sessions(&equal, "control", 120, 12);
    events.extend(ab_sessions(&equal, "emotional", 120, 12));
    events.extend(ab_sessions(&equal, "offer", 120, 12));
    batch_all(&app, &events);
    let ab = app.ab_testing(&equal, "");
    for v in ab.body["variants"].as_array().unwrap() {
        assert_eq!(v["conversion_rate"].as_f64(), Some(10.0), "{v}");
        assert_eq!(v["confidence"].as_f64(), Some(0.0), "{v}");
        assert!(v.get("is_winner").is_none(), "{v}");
    }

    // Significant but a small control side: control 60 / 3, emotional 300 / 120.
    let lopsided = id(&app.create_site("lopsided.example.com", "UTC"));
    let mut events = ab_sessions(&lopsided, "control", 60, 3);
    events.extend(ab_sessions(&lopsided, "emotional", 300, 120));
    batch_all(&app, &events);
    let ab = app.ab_testing(&lopsided, "");
    assert!(variant(&ab, "emotional")["confidence"].as_f64().unwrap() >= 95.0, "{}", ab.text);
    assert!(ab.body["variants"].as_array().unwrap().iter().all(|v| v.get("is_winner").is_none()), "{}", ab.text);
}

#[test]
fn ab_conversions_count_only_sessions_that_saw_the_wall() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    // Both sessions in the same UTC hour, same device and country, same variant.
    let at = Utc.timestamp_opt((Utc::now() - Duration::hours(2)).timestamp().div_euclid(3600) * 3600 + 300, 0).unwrap();
    let meta = json!({"variant": "emotional", "device_type": "desktop"});
    let with = |t: &str, s: &str| event(&site, s, t, json!({"metadata": meta, "timestamp": ts(at)}));
    // x: saw the wall and converted.
    track_ok(&app, with("wall_displayed", "saw-the-wall-x"));
    track_ok(&app, with("conversion_allowlist", "saw-the-wall-x"));
    // y: converted with the variant noted, but never saw the wall.
    track_ok(&app, with("pageview", "no-wall-seen-y"));
    track_ok(&app, with("conversion_subscribe", "no-wall-seen-y"));

    // Control: the same two kinds of session, in different hours.
    let other = id(&app.create_site("apart.example.com", "UTC"));
    let apart =
        |t: &str, s: &str, when: DateTime<Utc>| event(&other, s, t, json!({"metadata": meta, "timestamp": ts(when)}));
    track_ok(&app, apart("wall_displayed", "saw-the-wall-x", at));
    track_ok(&app, apart("conversion_allowlist", "saw-the-wall-x", at));
    track_ok(&app, apart("pageview", "no-wall-seen-y", at - Duration::hours(1)));
    track_ok(&app, apart("conversion_subscribe", "no-wall-seen-y", at - Duration::hours(1)));
    let ab = app.ab_testing(&other, "");
    let e = variant(&ab, "emotional");
    assert_eq!(
        (e["impressions"].as_u64(), e["conversions"].as_u64()),
        (Some(1), Some(1)),
        "sessions in different hours: {e}"
    );

    let ab = app.ab_testing(&site, "");
    let e = variant(&ab, "emotional");
    assert_eq!(e["impressions"], 1, "{e}");
    assert_eq!(e["conversions"], 1, "only sessions that displayed the wall count as A/B conversions: {e}");
    assert_eq!(e["conversion_rate"].as_f64(), Some(100.0), "{e}");
}

#[test]
fn ab_days_limits_the_period_and_defaults_to_all_time() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let old = Utc::now() - Duration::days(20);
    for t in ["wall_displayed", "conversion_allowlist"] {
        track_ok(
            &app,
            event(&site, "old-ab-session", t, json!({"metadata": {"variant": "offer"}, "timestamp": ts(old)})),
        );
    }
    track_ok(&app, event(&site, "new-ab-session", "wall_displayed", json!({"metadata": {"variant": "offer"}})));

    let all = app.ab_testing(&site, "");
    assert_eq!(variant(&all, "offer")["impressions"], 2, "{}", all.text);
    assert_eq!(variant(&all, "offer")["conversions"], 1);
    assert_eq!(variant(&all, "offer")["conversion_rate"].as_f64(), Some(50.0));
    let recent = app.ab_testing(&site, "?days=7");
    recent.expect(200);
    assert_eq!(variant(&recent, "offer")["impressions"], 1, "{}", recent.text);
    assert_eq!(variant(&recent, "offer")["conversions"], 0);
    let wide = app.ab_testing(&site, "?days=30");
    assert_eq!(variant(&wide, "offer")["impressions"], 2);
}
