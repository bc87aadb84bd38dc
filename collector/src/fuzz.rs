//! Property tests of every parser of untrusted input: the track and batch
//! bodies, query strings, site and wall bodies, report configurations.
//! Arbitrary input never panics and is refused with a 400 naming a field;
//! valid input is read back as it was written. `cargo test` runs a few
//! cases; `scripts/fuzz` runs many for a bounded time (see docs/fuzzing.md).

use analytics::report::config::{Draft, Metric, ReportType};
use http::StatusCode;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::api::export::ExportRequest;
use crate::api::{normalize_domain, parse_domain, parse_wall, Query};
use crate::error::ApiError;
use crate::ingest::validate::{parse_batch, parse_track, MAX_BATCH_EVENTS};

/// Cases per property: `PROPTEST_CASES` (scripts/fuzz sets it), else a few
/// enough for every `cargo test`.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite()).prop_map(Value::from),
        ".{0,40}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(".{0,12}", inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A JSON object whose keys are mostly the given field names, so the parser
/// gets past its unknown-field check and into each field's rules.
fn object_with(fields: &'static [&'static str]) -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(prop_oneof![9 => prop::sample::select(fields).prop_map(str::to_owned), 1 => ".{0,8}"], any_json(), 0..8)
        .prop_map(|m| m.into_iter().collect())
}

/// A refusal is a 400 that names what is wrong.
fn is_a_field_error(e: &ApiError) -> bool {
    e.status == StatusCode::BAD_REQUEST && e.field.as_deref().is_some_and(|f| !f.is_empty()) && !e.message.is_empty()
}

const TRACK_FIELDS: &[&str] = &["site_id", "session_id", "event_type", "page_url", "metadata", "event_id", "timestamp"];
const EVENT_TYPES: &[&str] = &["pageview", "adblock_detected", "wall_displayed", "conversion_allowlist", "conversion_subscribe"];

/// A valid track body: (JSON, site id, session id, event type, page URL).
fn valid_event() -> impl Strategy<Value = Value> {
    (any::<u128>(), "[A-Za-z0-9_-]{8,128}", prop::sample::select(EVENT_TYPES), "[a-z][a-z0-9-]{0,20}(\\.[a-z][a-z0-9-]{0,20}){1,3}", "(/[A-Za-z0-9._~-]{0,20}){0,4}")
        .prop_map(|(site, session, event_type, host, path)| {
            json!({
                "site_id": uuid::Uuid::from_u128(site).to_string(),
                "session_id": session,
                "event_type": event_type,
                "page_url": format!("https://{host}{path}"),
            })
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn track_bodies_of_any_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = parse_track(&bytes) {
            prop_assert!(is_a_field_error(&e), "{e:?}");
        }
    }

    #[test]
    fn track_bodies_of_any_json_are_read_or_refused_with_a_field(obj in object_with(TRACK_FIELDS)) {
        if let Err(e) = parse_track(Value::Object(obj).to_string().as_bytes()) {
            prop_assert!(is_a_field_error(&e), "{e:?}");
        }
    }

    #[test]
    fn valid_track_bodies_round_trip(event in valid_event()) {
        let input = parse_track(event.to_string().as_bytes()).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(input.site_id.to_string(), event["site_id"].as_str().unwrap());
        prop_assert_eq!(input.session_id.as_str(), event["session_id"].as_str().unwrap());
        prop_assert_eq!(input.event_type.as_str(), event["event_type"].as_str().unwrap());
        prop_assert_eq!(input.page_url.as_str(), event["page_url"].as_str().unwrap());
    }

    #[test]
    fn a_session_id_off_its_rules_is_refused_on_that_field(event in valid_event(), session in "([A-Za-z0-9_-]{0,7}|[A-Za-z0-9_-]{129,160}|[A-Za-z0-9]{4,20}[ /.+é][A-Za-z0-9]{4,20})") {
        let mut event = event;
        event["session_id"] = json!(session);
        let e = parse_track(event.to_string().as_bytes()).expect_err("an invalid session_id is refused");
        prop_assert_eq!(e.field.as_deref(), Some("session_id"), "{:?}", e);
    }

    #[test]
    fn batch_bodies_of_any_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = parse_batch(&bytes) {
            prop_assert!(is_a_field_error(&e), "{e:?}");
        }
    }

    #[test]
    fn batches_report_every_item_in_order(items in prop::collection::vec(prop_oneof![valid_event(), any_json()], 1..20)) {
        let results = parse_batch(Value::Array(items.clone()).to_string().as_bytes()).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(results.len(), items.len());
        for (item, result) in items.iter().zip(&results) {
            match result {
                Ok(input) => prop_assert_eq!(input.session_id.as_str(), item["session_id"].as_str().unwrap()),
                Err(e) => prop_assert!(is_a_field_error(e), "{e:?}"),
            }
        }
    }

    #[test]
    fn a_batch_over_the_limit_is_refused_whole(extra in 1usize..20) {
        let items = vec![json!({}); MAX_BATCH_EVENTS + extra];
        let e = parse_batch(Value::Array(items).to_string().as_bytes()).err().expect("too many events are refused");
        prop_assert_eq!((e.field.as_deref(), e.reason), (Some("body"), "too_long"));
    }

    #[test]
    fn query_strings_never_panic(raw in ".{0,200}") {
        let q = Query::parse(&raw);
        for (name, min, max) in [("days", 1u32, 730u32), ("limit", 1, 1000)] {
            if let Err(e) = q.int(name, min, max) {
                prop_assert!(is_a_field_error(&e), "{e:?}");
            }
        }
        if let Err(e) = ExportRequest::parse(&q) {
            prop_assert!(is_a_field_error(&e), "{e:?}");
        }
    }

    #[test]
    fn query_integers_round_trip_and_their_range_is_kept(n in any::<i64>(), extra in "(&[a-z]{1,5}=[a-z0-9%]{0,5}){0,3}") {
        let q = Query::parse(&format!("days={n}{extra}"));
        match q.int("days", 1u32, 730) {
            Ok(v) => prop_assert_eq!(v.map(i64::from), Some(n)),
            Err(e) => {
                prop_assert!(!(1..=730).contains(&n), "{n} refused: {e:?}");
                let want = if n < 0 || n > i64::from(u32::MAX) { "invalid" } else { "out_of_range" };
                prop_assert_eq!((e.field.as_deref(), e.reason), (Some("days"), want));
            }
        }
    }

    #[test]
    fn export_queries_accept_their_documented_values(format in prop::sample::select(&["csv", "json", "pdf", "zip"][..]), device in prop::sample::select(&["", "desktop", "mobile", "tablet"][..]), country in "[a-zA-Z]{2}", day in 1u32..28) {
        let q = Query::parse(&format!("format={format}&device={device}&country={country}&start=2026-01-{day:02}&end=2026-02-{day:02}"));
        prop_assert!(ExportRequest::parse(&q).is_ok());
    }

    #[test]
    fn walls_of_any_json_are_kept_or_refused_with_a_field(wall in any_json()) {
        match parse_wall(Some(&wall)) {
            Ok(kept) => prop_assert_eq!(kept, Some(wall)),
            Err(e) => prop_assert!(is_a_field_error(&e), "{e:?}"),
        }
    }

    #[test]
    fn valid_walls_are_kept(names in prop::collection::hash_set("[A-Za-z0-9_-]{1,64}", 1..=10), weight in 0.0f64..1e6) {
        let variants: Vec<Value> = names.iter().map(|n| json!({"name": n, "weight": weight, "title": "t", "body": "b"})).collect();
        let wall = json!({"kind": "soft", "variants": variants});
        prop_assert_eq!(parse_wall(Some(&wall)).ok(), Some(Some(wall)));
    }

    #[test]
    fn domains_never_panic_and_valid_ones_are_lower_cased(raw in ".{0,80}", host in "[a-zA-Z][a-zA-Z0-9-]{0,20}[a-zA-Z0-9](\\.[a-zA-Z][a-zA-Z0-9]{0,20}){1,3}") {
        if let Err(e) = parse_domain(Some(&json!(raw))) {
            prop_assert!(is_a_field_error(&e), "{e:?}");
        }
        prop_assert_eq!(normalize_domain(&host), Some(host.to_ascii_lowercase()));
    }

    #[test]
    fn report_configs_of_any_json_never_panic(obj in object_with(analytics::report::config::FIELDS)) {
        if let Err(e) = Draft::from_json(&obj, None) {
            // An unknown key is named as sent, the empty key included.
            let named = !e.field.is_empty() || (e.reason == "unknown_field" && obj.contains_key(""));
            prop_assert!(named && !e.message.is_empty(), "{e:?}");
        }
    }

    #[test]
    fn valid_report_configs_round_trip(kind in prop::sample::select(&["daily", "weekly", "monthly", "custom"][..]), name in "[A-Za-z0-9 ]{1,40}", metrics in prop::collection::vec(prop::sample::select(&["sessions", "adblock_detected", "walls_displayed", "conversions", "conversion_rate", "by_device", "by_country", "by_variant"][..]), 1..8)) {
        let name = name.trim().to_owned();
        prop_assume!(!name.is_empty());
        let mut body = json!({"name": name, "type": kind, "channels": ["webhook"], "format": "json"});
        if kind == "custom" {
            body["metrics"] = json!(metrics);
        }
        let draft = Draft::from_json(body.as_object().unwrap(), None).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(draft.kind, ReportType::parse(kind).unwrap());
        prop_assert_eq!(&draft.name, &name);
        if kind == "custom" {
            let mut want: Vec<Metric> = Vec::new();
            for m in &metrics {
                let m = Metric::parse(m).unwrap();
                if !want.contains(&m) {
                    want.push(m);
                }
            }
            prop_assert_eq!(&draft.spec.metrics, &want);
        }
        // An empty update changes nothing.
        prop_assert_eq!(Draft::from_json(&Map::new(), Some(&draft)), Ok(draft.clone()));
    }
}

/// Found by scripts/conformance: a variant whose body was `{}` was stored and
/// served to the SDK, which shows it as text.
#[test]
fn wall_texts_and_settings_of_another_type_are_refused() {
    let cases = [
        (json!({"variants": [{"name": "a", "body": {}}]}), "wall.variants[0].body"),
        (json!({"variants": [{"name": "a", "title": 1}]}), "wall.variants[0].title"),
        (json!({"kind": 5}), "wall.kind"),
        (json!({"dismiss_after_seconds": "5"}), "wall.dismiss_after_seconds"),
    ];
    for (wall, field) in cases {
        let e = parse_wall(Some(&wall)).expect_err("refused");
        assert_eq!((e.field.as_deref(), e.reason), (Some(field), "invalid"), "{wall}");
    }
}
