//! Both engines, one answer: the same generated event stream written to a
//! SQLite store and to a PostgreSQL store, in the same groups, gives the same
//! acknowledgements and reads back the same through every query, report and
//! export.

use chrono::{DateTime, Duration, TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::export::{self, Selection};
use crate::model::{Ack, Device, EventType, NewEvent, Site};
use crate::period::Period;
use crate::query::{self, Filter, Granularity};
use crate::store::testing::{self, postgres_store, temp_store};
use crate::store::Durability;
use crate::{report, Store};

const COUNTRIES: [&str; 5] = ["FR", "DE", "US", "BR", "JP"];
const VARIANTS: [Option<&str>; 4] = [None, Some("control"), Some("offer"), Some("emotional")];

/// `groups` groups of 1 to 30 events over three days before `now`: some
/// back-dated by hours, some retried with the same client event id.
fn stream(seed: u64, groups: usize, now: DateTime<Utc>) -> Vec<Vec<NewEvent>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sent: Vec<String> = Vec::new();
    (0..groups)
        .map(|_| {
            (0..rng.random_range(1..=30))
                .map(|_| {
                    let session = rng.random_range(0..400u32);
                    let client_event_id = match rng.random_range(0..10) {
                        0 if !sent.is_empty() => Some(sent[rng.random_range(0..sent.len())].clone()),
                        0..=6 => {
                            let id = uuid::Uuid::from_u128(rng.random()).to_string();
                            sent.push(id.clone());
                            Some(id)
                        }
                        _ => None,
                    };
                    let occurred = now - Duration::minutes(rng.random_range(0..72 * 60));
                    NewEvent {
                        site_seq: 0,
                        session_id: format!("session-{session}"),
                        event_type: EventType::ALL[rng.random_range(0..EventType::ALL.len())],
                        page_url: format!("https://a.test/page/{}", rng.random_range(0..20)),
                        metadata: rng.random_bool(0.2).then(|| format!("{{\"n\":\"{}\"}}", rng.random_range(0..5))),
                        device: [Device::Desktop, Device::Mobile, Device::Tablet][session as usize % 3],
                        country: COUNTRIES[rng.random_range(0..COUNTRIES.len())].into(),
                        variant: VARIANTS[rng.random_range(0..VARIANTS.len())].map(str::to_owned),
                        forced_variant: rng.random_bool(0.03),
                        client_event_id,
                        occurred_at: occurred,
                        received_at: now,
                    }
                })
                .collect()
        })
        .collect()
}

/// Writes the stream; the acknowledgements (duplicate or not, per event) in order.
fn feed(store: &Store, site: &Site, groups: &[Vec<NewEvent>]) -> Vec<bool> {
    let mut w = store.open_writer(Durability::Normal).unwrap();
    let mut acks = Vec::new();
    let mut first_ids = std::collections::HashMap::new();
    for (i, group) in groups.iter().enumerate() {
        let events: Vec<NewEvent> = group.iter().cloned().map(|e| NewEvent { site_seq: site.seq, ..e }).collect();
        let mut g = w.begin().unwrap();
        let provisional = if i % 2 == 0 { g.ingest(&events).unwrap() } else { events.iter().map(|e| g.ingest_event(e).unwrap()).collect() };
        let committed = g.commit().unwrap();
        let group_acks: Vec<Ack> = provisional.into_iter().map(|a| committed.ack(a)).collect();
        // A duplicate answers the id its first copy was given (here or in an earlier group).
        for (e, ack) in events.iter().zip(&group_acks) {
            let key = e.client_event_id.clone();
            match (ack.duplicate, key) {
                (true, Some(k)) => assert_eq!(first_ids.get(&k), Some(&ack.id), "a duplicate of {k} answered another id"),
                (false, Some(k)) => assert!(first_ids.insert(k, ack.id).is_none(), "an event id stored twice"),
                (true, None) => panic!("an event without a client id answered as a duplicate"),
                (false, None) => {}
            }
        }
        acks.extend(group_acks.iter().map(|a| a.duplicate));
    }
    acks
}

/// Everything a client can read of the site, as JSON with the site's own id
/// and the stored events' ids (random per engine) left out.
fn read_all(store: &Store, site: &Site, now: DateTime<Utc>) -> String {
    let period = Period::last_days(7, chrono_tz::Tz::UTC, now);
    let tz_period = Period::last_days(7, chrono_tz::Tz::America__Sao_Paulo, now);
    store
        .read(|c| {
            let mut all = serde_json::Map::new();
            let mut put = |name: &str, v: serde_json::Value| {
                all.insert(name.into(), v);
            };
            put("dashboard", serde_json::to_value(query::dashboard(c, site, &period, Filter::default())?).unwrap());
            put("dashboard_mobile", serde_json::to_value(query::dashboard(c, site, &period, Filter { device: Some(Device::Mobile) })?).unwrap());
            for g in [Granularity::Hour, Granularity::Day, Granularity::Week] {
                put(&format!("timeline_{g:?}"), serde_json::to_value(query::timeline(c, site, &tz_period, g, Filter::default())?).unwrap());
            }
            put("ab", serde_json::to_value(query::ab_testing(c, site, None)?).unwrap());
            put("ab_period", serde_json::to_value(query::ab_testing(c, site, Some(period.hour_range()))?).unwrap());
            put("countries", serde_json::to_value(query::countries(c, site, period.hour_range())?).unwrap());
            for t in [None, Some(EventType::Pageview)] {
                let (events, total) = query::events(c, site, t, 10_000, 0)?;
                let events: Vec<serde_json::Value> = events
                    .into_iter()
                    .map(|e| {
                        let mut v = serde_json::to_value(e).unwrap();
                        v.as_object_mut().unwrap().remove("id");
                        v
                    })
                    .collect();
                put(&format!("events_{t:?}"), serde_json::json!({ "total": total, "events": events }));
            }
            put("daily", serde_json::to_value(report::content::daily(c, site, &Period::new(period.end, period.end, site.timezone))?).unwrap());
            put("weekly", serde_json::to_value(report::content::weekly(c, site, &period)?).unwrap());
            for countries in [vec![], vec!["FR".to_owned(), "JP".to_owned()]] {
                let sel = Selection { period: period.clone(), device: None, countries };
                let mut csv = Vec::new();
                export::csv::write(c, site, &sel, &mut csv)?;
                put(&format!("csv_{}", sel.countries.len()), String::from_utf8(csv).unwrap().into());
            }
            Ok(serde_json::Value::Object(all).to_string().replace(&site.id.to_string(), "SITE"))
        })
        .unwrap()
}

#[test]
fn both_engines_acknowledge_count_and_read_back_the_same_stream() {
    let Some((_db, pg)) = postgres_store() else { return };
    let (_dir, lite) = temp_store();
    let now = Utc.with_ymd_and_hms(2026, 3, 12, 15, 30, 0).unwrap();
    let groups = stream(7, 120, now);
    let events: usize = groups.iter().map(Vec::len).sum();
    let mut outcomes = Vec::new();
    for store in [&lite, &pg] {
        let mut w = store.open_writer(Durability::Normal).unwrap();
        let site = testing::site(&mut w, "a.test", now - Duration::days(30));
        drop(w);
        let acks = feed(store, &site, &groups);
        outcomes.push((acks, read_all(store, &site, now)));
    }
    let (lite, pg) = (&outcomes[0], &outcomes[1]);
    assert_eq!(lite.0.len(), events);
    assert!(lite.0.iter().any(|d| *d) && lite.0.iter().any(|d| !*d), "the stream retries some ids and not others");
    assert_eq!(lite.0, pg.0, "the same events are acknowledged as duplicates");
    assert!(lite.1.contains("\"sessions\":"), "{}", lite.1);
    for (a, b) in lite.1.split(",\"").zip(pg.1.split(",\"")) {
        assert_eq!(a, b, "SQLite and PostgreSQL differ");
    }
    assert_eq!(lite.1, pg.1);
}
