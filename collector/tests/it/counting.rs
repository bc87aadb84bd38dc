//! Counting rules (DESIGN §3): sessions, once-per-session flags, late events, event_id retries, devices, timezones and forced variants.

use chrono::{DateTime, Duration, NaiveDate, NaiveTime, SecondsFormat, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use serde_json::{json, Value};

use crate::support::*;

const DOMAIN: &str = "news.example.com";

/// RFC 3339 UTC with seconds, as a keyed client back-dates an event.
fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// One event of `session` at instant `at` (back-dated with the key).
#[track_caller]
fn track_at(app: &TestApp, site: &str, session: &str, event_type: &str, at: DateTime<Utc>, metadata: Value) -> Value {
    track_ok(app, event(site, session, event_type, json!({"timestamp": ts(at), "metadata": metadata})))
}

/// Tracks with the key and a User-Agent header.
#[track_caller]
fn track_with_ua(app: &TestApp, body: &Value, ua: &str) -> Answer {
    app.send(
        app.request(reqwest::Method::POST, "/v1/events/track")
            .bearer_auth(&app.key)
            .header("User-Agent", ua)
            .json(body),
    )
}

/// The dashboard's metrics object, asserting 200.
#[track_caller]
fn metrics(app: &TestApp, site: &str, query: &str) -> Value {
    let a = app.dashboard(site, query);
    a.expect(200);
    a.body["metrics"].clone()
}

/// (sessions, adblock_detected, walls_displayed, conversions) of a metrics or bucket object.
fn counts(m: &Value) -> (u64, u64, u64, u64) {
    (
        m["sessions"].as_u64().unwrap_or_else(|| panic!("sessions in {m}")),
        m["adblock_detected"].as_u64().unwrap_or_else(|| panic!("adblock_detected in {m}")),
        m["walls_displayed"].as_u64().unwrap_or_else(|| panic!("walls_displayed in {m}")),
        m["conversions"].as_u64().unwrap_or_else(|| panic!("conversions in {m}")),
    )
}

fn rate(m: &Value) -> f64 {
    m["conversion_rate"].as_f64().unwrap_or_else(|| panic!("conversion_rate in {m}"))
}

fn floor_hour(t: DateTime<Utc>) -> DateTime<Utc> {
    Utc.timestamp_opt(t.timestamp().div_euclid(3600) * 3600, 0).unwrap()
}

fn today_in(tz: Tz) -> NaiveDate {
    Utc::now().with_timezone(&tz).date_naive()
}

/// The instant of a local wall-clock time (the times used here are never in a DST gap).
fn local(tz: Tz, date: NaiveDate, h: u32, m: u32) -> DateTime<Utc> {
    tz.from_local_datetime(&date.and_time(NaiveTime::from_hms_opt(h, m, 0).unwrap()))
        .single()
        .unwrap_or_else(|| panic!("{date} {h}:{m} is not a single instant in {tz}"))
        .with_timezone(&Utc)
}

/// The label an hour bucket carries: the hour's local start with its offset.
fn hour_label(tz: Tz, t: DateTime<Utc>) -> String {
    floor_hour(t).with_timezone(&tz).format("%Y-%m-%dT%H:%M:%S%:z").to_string()
}

fn bucket<'a>(timeline: &'a Value, label: &str) -> &'a Value {
    timeline["timeline"]
        .as_array()
        .expect("timeline array")
        .iter()
        .find(|b| b["bucket"] == label)
        .unwrap_or_else(|| panic!("no bucket {label} in {timeline}"))
}

#[test]
fn repeated_events_count_their_session_once_and_each_flag_once() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));

    // s1: every kind of event, most of them several times.
    for t in
        ["pageview", "pageview", "pageview", "adblock_detected", "adblock_detected", "wall_displayed", "wall_displayed"]
    {
        track_ok(&app, event(&site, "sess-one-0001", t, json!({})));
    }
    for t in ["wall_help_opened", "verification_failed", "verification_failed", "wall_dismissed", "wall_dismissed"] {
        track_ok(&app, event(&site, "sess-one-0001", t, json!({})));
    }
    // Both conversion kinds, twice each: still one converted session.
    for t in ["conversion_allowlist", "conversion_subscribe", "conversion_allowlist", "conversion_subscribe"] {
        track_ok(&app, event(&site, "sess-one-0001", t, json!({})));
    }
    // s2: pageviews only. s3: no pageview at all, but an ad blocker and a wall (any event counts the session).
    track_ok(&app, event(&site, "sess-two-0002", "pageview", json!({})));
    track_ok(&app, event(&site, "sess-two-0002", "pageview", json!({})));
    track_ok(&app, event(&site, "sess-three-03", "adblock_detected", json!({})));
    track_ok(&app, event(&site, "sess-three-03", "wall_displayed", json!({})));
    track_ok(&app, event(&site, "sess-three-03", "wall_displayed", json!({})));
    // s4: only a help click (no flag), still a session.
    track_ok(&app, event(&site, "sess-four-004", "wall_help_opened", json!({})));

    // days=2 so that a UTC midnight between tracking and reading cannot drop events.
    let m = metrics(&app, &site, "?days=2");
    assert_eq!(counts(&m), (4, 2, 2, 1), "{m}");
    assert_eq!(rate(&m), 50.0, "1 conversion of 2 walls: {m}");
    assert_eq!(m["adblock_share"].as_f64(), Some(50.0), "2 of 4 sessions: {m}");

    // The raw events are all kept: 16 + 2 + 3 + 1.
    let list = app.events(&site, "?limit=1000");
    list.expect(200);
    assert_eq!(list.body["total"], 22, "{}", list.text);
}

#[test]
fn a_late_conversion_counts_in_the_hour_the_session_started() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let now = Utc::now();
    let (t_a, t_b, t_c) = (now - Duration::hours(3), now - Duration::hours(2), now - Duration::hours(1));

    // Session A starts 3 h ago with an ad blocker and the wall (variant emotional).
    track_at(&app, &site, "session-aaaa", "pageview", t_a, json!({}));
    track_at(&app, &site, "session-aaaa", "adblock_detected", t_a, json!({"blocker_type": "extension"}));
    track_at(&app, &site, "session-aaaa", "wall_displayed", t_a, json!({"variant": "emotional"}));
    // Sessions B and C start in between.
    track_at(&app, &site, "session-bbbb", "pageview", t_b, json!({}));
    track_at(&app, &site, "session-bbbb", "adblock_detected", t_b, json!({}));
    track_at(&app, &site, "session-cccc", "adblock_detected", t_c, json!({}));
    track_at(&app, &site, "session-cccc", "wall_displayed", t_c, json!({"variant": "emotional"}));
    // A converts now (no timestamp: the server's clock).
    track_ok(&app, event(&site, "session-aaaa", "conversion_allowlist", json!({"metadata": {"variant": "emotional"}})));

    // days=2 covers now − 3 h whatever the hour of the day.
    let tl = app.conversions(&site, "?granularity=hour&days=2");
    tl.expect(200);
    assert_eq!(tl.body["granularity"], "hour");
    let buckets = tl.body["timeline"].as_array().expect("timeline");
    assert_eq!(buckets.len(), 48, "a UTC site has 48 hours in 2 days");

    let a = bucket(&tl.body, &hour_label(Tz::UTC, t_a));
    assert_eq!(counts(a), (1, 1, 1, 1), "session A with its late conversion: {a}");
    assert_eq!(rate(a), 100.0);
    let b = bucket(&tl.body, &hour_label(Tz::UTC, t_b));
    assert_eq!(counts(b), (1, 1, 0, 0), "{b}");
    assert_eq!(rate(b), 0.0, "no wall, rate 0: {b}");
    let c = bucket(&tl.body, &hour_label(Tz::UTC, t_c));
    assert_eq!(counts(c), (1, 1, 1, 0), "{c}");
    let n = bucket(&tl.body, &hour_label(Tz::UTC, now));
    assert_eq!(counts(n), (0, 0, 0, 0), "the conversion's own hour counts nothing: {n}");

    // Every other bucket is empty: the buckets add up to 3 sessions and 1 conversion.
    let total: (u64, u64, u64, u64) =
        buckets.iter().map(counts).fold((0, 0, 0, 0), |s, c| (s.0 + c.0, s.1 + c.1, s.2 + c.2, s.3 + c.3));
    assert_eq!(total, (3, 3, 2, 1));

    let m = metrics(&app, &site, "?days=2");
    assert_eq!(counts(&m), (3, 3, 2, 1), "{m}");
    assert_eq!(rate(&m), 50.0);

    // A/B: A and C showed emotional; A converted.
    let ab = app.ab_testing(&site, "");
    ab.expect(200);
    let emotional = ab.body["variants"].as_array().unwrap().iter().find(|v| v["name"] == "emotional").unwrap().clone();
    assert_eq!(
        (emotional["impressions"].as_u64(), emotional["conversions"].as_u64()),
        (Some(2), Some(1)),
        "{emotional}"
    );
    assert_eq!(emotional["conversion_rate"].as_f64(), Some(50.0));
}

#[test]
fn a_backdated_earlier_event_moves_the_session_to_its_hour() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let now = Utc::now();
    let earlier = now - Duration::hours(2);

    // First seen now, then an event that happened 2 h ago arrives.
    track_ok(&app, event(&site, "moving-session", "pageview", json!({})));
    track_ok(&app, event(&site, "moving-session", "wall_displayed", json!({})));
    track_at(&app, &site, "moving-session", "adblock_detected", earlier, json!({}));

    let tl = app.conversions(&site, "?granularity=hour&days=2");
    tl.expect(200);
    let e = bucket(&tl.body, &hour_label(Tz::UTC, earlier));
    assert_eq!(counts(e), (1, 1, 1, 0), "the session belongs to its earliest hour: {e}");
    let n = bucket(&tl.body, &hour_label(Tz::UTC, now));
    assert_eq!(counts(n), (0, 0, 0, 0), "nothing left in the later hour: {n}");
    let m = metrics(&app, &site, "?days=2");
    assert_eq!(counts(&m), (1, 1, 1, 0), "{m}");
}

#[test]
fn event_id_retries_are_acknowledged_with_the_same_id_and_counted_once() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let eid = "0b7e4a52-3c1d-4f7a-9d2e-5a1b2c3d4e5f";

    let body = event(&site, "retry-session", "adblock_detected", json!({"event_id": eid}));
    let first = track_ok(&app, body.clone());
    assert_ne!(first.get("duplicate"), Some(&json!(true)), "the first delivery is not a duplicate: {first}");
    let second = track_ok(&app, body.clone());
    assert_eq!(second["id"], first["id"], "a retry is acknowledged with the stored id");
    assert_eq!(second["duplicate"], json!(true), "{second}");
    let third = track_ok(&app, body);
    assert_eq!(third["id"], first["id"]);
    assert_eq!(third["duplicate"], json!(true));

    // Same event_id, different content: still the stored event, nothing new counted.
    let changed = event(&site, "retry-session", "conversion_allowlist", json!({"event_id": eid}));
    let fourth = track_ok(&app, changed);
    assert_eq!(fourth["id"], first["id"]);
    assert_eq!(fourth["duplicate"], json!(true));

    // A different event_id is a different event.
    let other = track_ok(
        &app,
        event(&site, "retry-session", "wall_displayed", json!({"event_id": "6a1f7a0e-2b3c-4d5e-8f90-a1b2c3d4e5f6"})),
    );
    assert_ne!(other["id"], first["id"]);
    assert_ne!(other.get("duplicate"), Some(&json!(true)));

    let list = app.events(&site, "");
    list.expect(200);
    assert_eq!(list.body["total"], 2, "{}", list.text);
    let stored: Vec<&Value> =
        list.body["events"].as_array().unwrap().iter().filter(|e| e["id"] == first["id"]).collect();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["event_type"], "adblock_detected", "the first delivery is the one kept");
    let adblock = app.events(&site, "?event_type=adblock_detected");
    assert_eq!(adblock.body["total"], 1);
    let conv = app.events(&site, "?event_type=conversion_allowlist");
    assert_eq!(conv.body["total"], 0, "the retried id never stored a conversion");

    let m = metrics(&app, &site, "?days=2");
    assert_eq!(counts(&m), (1, 1, 1, 0), "{m}");

    // The same event_id on another site is that site's own first event.
    let site2 = id(&app.create_site("other.example.org", "UTC"));
    let elsewhere = track_ok(&app, event(&site2, "retry-session", "adblock_detected", json!({"event_id": eid})));
    assert_ne!(elsewhere["id"], first["id"]);
    assert_ne!(elsewhere.get("duplicate"), Some(&json!(true)), "event ids are per site: {elsewhere}");
    assert_eq!(app.events(&site2, "").body["total"], 1);
}

#[test]
fn event_id_retries_inside_one_batch_and_across_batches_count_once() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let x = "11111111-2222-4333-8444-555555555555";
    let y = "99999999-8888-4777-8666-555555555555";
    let ex = event(&site, "batch-session", "wall_displayed", json!({"event_id": x}));
    let ey = event(&site, "batch-session", "conversion_subscribe", json!({"event_id": y}));

    let a = app.batch(&json!([ex, ex, ey, ex]));
    a.expect(201);
    assert_eq!(a.body["accepted"], 4, "{}", a.text);
    assert_eq!(a.body["rejected"], 0);
    let r = a.body["results"].as_array().unwrap();
    assert_eq!(r.len(), 4);
    for (i, item) in r.iter().enumerate() {
        assert_eq!(item["index"], i, "{item}");
        assert!(item.get("error").is_none(), "{item}");
    }
    assert_eq!(r[1]["id"], r[0]["id"]);
    assert_eq!(r[3]["id"], r[0]["id"]);
    assert_ne!(r[2]["id"], r[0]["id"]);
    assert_ne!(r[0].get("duplicate"), Some(&json!(true)), "{}", a.text);
    assert_ne!(r[2].get("duplicate"), Some(&json!(true)), "{}", a.text);
    assert_eq!(r[1]["duplicate"], json!(true), "{}", a.text);
    assert_eq!(r[3]["duplicate"], json!(true), "{}", a.text);

    // The whole batch retried: everything is a duplicate with the same ids.
    let again = app.batch(&json!([ex, ey]));
    again.expect(201);
    let r2 = again.body["results"].as_array().unwrap();
    assert_eq!(r2[0]["id"], r[0]["id"]);
    assert_eq!(r2[1]["id"], r[2]["id"]);
    assert_eq!(r2[0]["duplicate"], json!(true));
    assert_eq!(r2[1]["duplicate"], json!(true));
    // And one by one through track.
    let t = track_ok(&app, ey.clone());
    assert_eq!(t["id"], r[2]["id"]);
    assert_eq!(t["duplicate"], json!(true));

    let list = app.events(&site, "");
    assert_eq!(list.body["total"], 2, "{}", list.text);
    let m = metrics(&app, &site, "?days=2");
    assert_eq!(counts(&m), (1, 0, 1, 1), "{m}");
    assert_eq!(rate(&m), 100.0);
}

#[test]
fn device_comes_from_metadata_or_the_user_agent_and_filters_the_dashboard() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let iphone =
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148 Safari/604.1";
    let ipad = "Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148 Safari/604.1";
    let mac = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_0) AppleWebKit/605.1.15 Version/17.0 Safari/605.1.15";

    let send = |session: &str, t: &str, meta: Value, ua: &str| {
        let a = track_with_ua(&app, &event(&site, session, t, json!({"metadata": meta})), ua);
        assert_eq!(a.status.as_u16(), 201, "{}", a.text);
    };
    // m1: mobile by metadata (desktop UA ignored); ad blocker, wall, conversion.
    for t in ["adblock_detected", "wall_displayed", "conversion_allowlist"] {
        send("mobile-meta-1", t, json!({"device_type": "mobile"}), mac);
    }
    // m2: mobile from an iPhone User-Agent; ad blocker and wall.
    for t in ["adblock_detected", "wall_displayed"] {
        send("mobile-ua-002", t, json!({}), iphone);
    }
    // t1: tablet from an iPad User-Agent; wall. t2: tablet by metadata, capitalised as in the spec.
    send("tablet-ua-001", "wall_displayed", json!({}), ipad);
    send("tablet-meta-2", "pageview", json!({"device_type": "Tablet"}), mac);
    // d1: desktop UA; ad blocker. d2: metadata desktop beats an iPhone UA; ad blocker, wall, conversion.
    send("desktop-ua-01", "adblock_detected", json!({}), mac);
    for t in ["adblock_detected", "wall_displayed", "conversion_subscribe"] {
        send("desktop-meta2", t, json!({"device_type": "desktop"}), iphone);
    }

    let mobile = metrics(&app, &site, "?days=2&device=mobile");
    assert_eq!(counts(&mobile), (2, 2, 2, 1), "{mobile}");
    assert_eq!(rate(&mobile), 50.0);
    assert_eq!(mobile["adblock_share"].as_f64(), Some(100.0));
    let tablet = metrics(&app, &site, "?days=2&device=tablet");
    assert_eq!(counts(&tablet), (2, 0, 1, 0), "{tablet}");
    assert_eq!(rate(&tablet), 0.0);
    let desktop = metrics(&app, &site, "?days=2&device=desktop");
    assert_eq!(counts(&desktop), (2, 2, 1, 1), "{desktop}");
    assert_eq!(rate(&desktop), 100.0);
    let all = metrics(&app, &site, "?days=2");
    assert_eq!(counts(&all), (6, 4, 4, 2), "{all}");
    assert_eq!(all["adblock_share"].as_f64(), Some(66.67));

    // The conversions timeline honours the filter too.
    let tl = app.conversions(&site, "?days=2&device=mobile");
    tl.expect(200);
    let sum: u64 = tl.body["timeline"].as_array().unwrap().iter().map(|b| b["sessions"].as_u64().unwrap()).sum();
    assert_eq!(sum, 2, "{}", tl.text);

    // The stored events show the device they were counted under.
    let list = app.events(&site, "?limit=100");
    for e in list.body["events"].as_array().unwrap() {
        let expected = match e["session_id"].as_str().unwrap() {
            "mobile-meta-1" | "mobile-ua-002" => "mobile",
            "tablet-ua-001" | "tablet-meta-2" => "tablet",
            _ => "desktop",
        };
        let got = e["metadata"]["device_type"].as_str().unwrap_or_default().to_ascii_lowercase();
        assert_eq!(got, expected, "{e}");
    }

    // An unknown device is refused.
    let bad = app.dashboard(&site, "?device=tv");
    bad.expect(400);
    let (code, field, reason) = bad.error();
    assert_eq!((code.as_str(), field.as_deref(), reason.as_str()), ("INVALID_REQUEST", Some("device"), "invalid"));
}

/// Sessions just before and just after a local midnight land on the right
/// local day, for dashboard periods and day/hour buckets alike.
fn check_local_midnight(tz_name: &str) {
    let tz: Tz = tz_name.parse().unwrap();
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, tz_name));

    // D is the day after the midnight. Use today only when it is already past
    // 01:00 locally (so every event below lies in the past), else yesterday.
    let now_local = Utc::now().with_timezone(&tz);
    let d = if now_local.hour() >= 1 { now_local.date_naive() } else { now_local.date_naive().pred_opt().unwrap() };
    let prev = d.pred_opt().unwrap();

    // Before midnight: two sessions; one converts after midnight but belongs to the day before.
    track_at(&app, &site, "before-full-1", "pageview", local(tz, prev, 23, 30), json!({}));
    track_at(&app, &site, "before-full-1", "adblock_detected", local(tz, prev, 23, 31), json!({}));
    track_at(&app, &site, "before-full-1", "wall_displayed", local(tz, prev, 23, 32), json!({}));
    track_at(&app, &site, "before-full-1", "conversion_allowlist", local(tz, prev, 23, 35), json!({}));
    track_at(&app, &site, "cross-night-2", "adblock_detected", local(tz, prev, 23, 50), json!({}));
    track_at(&app, &site, "cross-night-2", "wall_displayed", local(tz, prev, 23, 51), json!({}));
    track_at(&app, &site, "cross-night-2", "conversion_subscribe", local(tz, d, 0, 20), json!({}));
    // After midnight: two sessions.
    track_at(&app, &site, "after-night-3", "pageview", local(tz, d, 0, 30), json!({}));
    track_at(&app, &site, "after-night-3", "adblock_detected", local(tz, d, 0, 31), json!({}));
    track_at(&app, &site, "after-night-3", "wall_displayed", local(tz, d, 0, 32), json!({}));
    track_at(&app, &site, "after-night-4", "pageview", local(tz, d, 0, 45), json!({}));

    // Read; retry once if the local date turned between computing it and reading.
    for attempt in 0..2 {
        let today = today_in(tz);
        let k = (today - d).num_days(); // 0 or 1
        assert!((0..=1).contains(&k), "D = {d}, today = {today}");
        let only_after = app.dashboard(&site, &format!("?days={}", k + 1));
        only_after.expect(200);
        if only_after.body["period"]["end"] != today.to_string() {
            assert_eq!(attempt, 0, "period.end {} is not today {today} in {tz_name}", only_after.body["period"]["end"]);
            continue;
        }
        assert_eq!(only_after.body["period"]["start"], d.to_string(), "{}", only_after.text);
        let m = &only_after.body["metrics"];
        assert_eq!(counts(m), (2, 1, 1, 0), "days={} in {tz_name} holds only the after-midnight sessions: {m}", k + 1);
        assert_eq!(rate(m), 0.0);
        assert_eq!(m["adblock_share"].as_f64(), Some(50.0));

        let both = metrics(&app, &site, &format!("?days={}", k + 2));
        assert_eq!(counts(&both), (4, 3, 3, 2), "days={} in {tz_name}: {both}", k + 2);
        assert_eq!(rate(&both), 66.67);
        assert_eq!(both["adblock_share"].as_f64(), Some(75.0));

        if k == 1 {
            let none = metrics(&app, &site, "?days=1");
            assert_eq!(counts(&none), (0, 0, 0, 0), "today holds nothing: {none}");
        }

        // Day buckets: prev then D (then today when D is yesterday).
        let days = app.conversions(&site, &format!("?granularity=day&days={}", k + 2));
        days.expect(200);
        let labels: Vec<String> = days.body["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["bucket"].as_str().unwrap().to_owned())
            .collect();
        let expected: Vec<String> = prev.iter_days().take(k as usize + 2).map(|x| x.to_string()).collect();
        assert_eq!(labels, expected, "{}", days.text);
        let b_prev = bucket(&days.body, &prev.to_string());
        assert_eq!(counts(b_prev), (2, 2, 2, 2), "{tz_name} {prev}: {b_prev}");
        assert_eq!(rate(b_prev), 100.0);
        let b_d = bucket(&days.body, &d.to_string());
        assert_eq!(counts(b_d), (2, 1, 1, 0), "{tz_name} {d}: {b_d}");

        // Hour buckets: local 23:00 of prev and local 00:00 of D, labelled with the local offset.
        let hours = app.conversions(&site, &format!("?granularity=hour&days={}", k + 2));
        hours.expect(200);
        let hb = hours.body["timeline"].as_array().unwrap();
        let span_hours = (local(tz, today.succ_opt().unwrap(), 0, 0) - local(tz, prev, 0, 0)).num_hours();
        assert_eq!(hb.len() as i64, span_hours, "one bucket per hour of the local days");
        assert_eq!(hb[0]["bucket"], hour_label(tz, local(tz, prev, 0, 0)), "oldest first");
        let late = bucket(&hours.body, &hour_label(tz, local(tz, prev, 23, 0)));
        assert!(late["bucket"].as_str().unwrap().starts_with(&format!("{prev}T23:00:00")), "{late}");
        assert_eq!(counts(late), (2, 2, 2, 2), "{late}");
        let early = bucket(&hours.body, &hour_label(tz, local(tz, d, 0, 0)));
        assert!(early["bucket"].as_str().unwrap().starts_with(&format!("{d}T00:00:00")), "{early}");
        assert_eq!(counts(early), (2, 1, 1, 0), "{early}");
        return;
    }
}

#[test]
fn local_midnight_in_auckland_splits_the_days() {
    check_local_midnight("Pacific/Auckland");
}

#[test]
fn local_midnight_in_new_york_splits_the_days() {
    check_local_midnight("America/New_York");
}

#[test]
fn a_site_timezone_moves_utc_instants_to_other_local_days() {
    // The same instants land on different days for a UTC site and a Tokyo site.
    let app = TestApp::spawn();
    let utc_site = id(&app.create_site(DOMAIN, "UTC"));
    let tokyo_site = id(&app.create_site("tokyo.example.com", "Asia/Tokyo"));
    // Two days ago at 20:30 UTC is the next day 05:30 in Tokyo (UTC+9, no DST).
    let day = Utc::now().date_naive() - Duration::days(3);
    let at = Utc.from_utc_datetime(&day.and_hms_opt(20, 30, 0).unwrap());
    for site in [&utc_site, &tokyo_site] {
        track_at(&app, site, "tz-session-1", "adblock_detected", at, json!({}));
    }
    let utc = app.conversions(&utc_site, "?days=10");
    utc.expect(200);
    assert_eq!(bucket(&utc.body, &day.to_string())["sessions"], 1, "{}", utc.text);
    let tokyo = app.conversions(&tokyo_site, "?days=10");
    tokyo.expect(200);
    let tokyo_day = day.succ_opt().unwrap();
    assert_eq!(bucket(&tokyo.body, &tokyo_day.to_string())["sessions"], 1, "{}", tokyo.text);
    assert_eq!(bucket(&tokyo.body, &day.to_string())["sessions"], 0, "{}", tokyo.text);
}

#[test]
fn forced_variant_sessions_count_in_the_dashboard_but_not_in_ab() {
    let app = TestApp::spawn();
    let site = id(&app.create_site(DOMAIN, "UTC"));
    let forced = |v: &str| json!({"variant": v, "forced_variant": true});
    let normal = |v: &str| json!({"variant": v});
    let send = |s: &str, t: &str, meta: Value| {
        track_ok(&app, event(&site, s, t, json!({"metadata": meta})));
    };
    // f1: forced offer, wall + conversion. f2: forced emotional, wall + conversion.
    send("forced-sess-1", "adblock_detected", forced("offer"));
    send("forced-sess-1", "wall_displayed", forced("offer"));
    send("forced-sess-1", "conversion_allowlist", forced("offer"));
    send("forced-sess-2", "wall_displayed", forced("emotional"));
    send("forced-sess-2", "conversion_subscribe", forced("emotional"));
    // n1: offer, wall, no conversion. n2: control, wall + conversion. n3: control, wall.
    send("normal-sess-1", "wall_displayed", normal("offer"));
    send("normal-sess-2", "wall_displayed", normal("control"));
    send("normal-sess-2", "conversion_allowlist", normal("control"));
    send("normal-sess-3", "wall_displayed", normal("control"));

    let m = metrics(&app, &site, "?days=2");
    assert_eq!(counts(&m), (5, 1, 5, 3), "forced sessions still count in the dashboard: {m}");
    assert_eq!(rate(&m), 60.0);

    let ab = app.ab_testing(&site, "");
    ab.expect(200);
    let get = |name: &str| -> Value {
        ab.body["variants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {}", ab.text))
            .clone()
    };
    let (c, e, o) = (get("control"), get("emotional"), get("offer"));
    assert_eq!((c["impressions"].as_u64(), c["conversions"].as_u64()), (Some(2), Some(1)), "{c}");
    assert_eq!(c["conversion_rate"].as_f64(), Some(50.0));
    assert_eq!((e["impressions"].as_u64(), e["conversions"].as_u64()), (Some(0), Some(0)), "{e}");
    assert_eq!(e["conversion_rate"].as_f64(), Some(0.0));
    assert_eq!((o["impressions"].as_u64(), o["conversions"].as_u64()), (Some(1), Some(0)), "{o}");
    assert_eq!(o["conversion_rate"].as_f64(), Some(0.0));
    assert!(ab.body["variants"].as_array().unwrap().iter().all(|v| v.get("is_winner").is_none()), "{}", ab.text);
}
