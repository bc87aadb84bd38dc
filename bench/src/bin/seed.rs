//! Seeds a store with synthetic events for one site through the real write
//! path (sessions, rollups), spread over the last DAYS days, and prints the
//! writer's throughput as the store grows.
//! Usage: seed DB EVENTS DAYS  (prints "site <uuid>" and "key <secret>" at the end).

use std::time::Instant;

use analytics::accounts;
use analytics::model::{Device, EventType, NewEvent, Scope};
use analytics::sites::{self, NewSite};
use analytics::store::Durability;
use analytics::Store;
use chrono::{Duration, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const GROUP: usize = 1000;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let db = args.next().ok_or_else(|| anyhow::anyhow!("usage: seed DB EVENTS DAYS"))?;
    let total: usize = args.next().unwrap_or_else(|| "1000000".into()).parse()?;
    let days: i64 = args.next().unwrap_or_else(|| "90".into()).parse()?;
    let store = Store::open(&db)?;
    let mut writer = store.open_writer(Durability::Normal)?;
    let now = Utc::now();
    let (site, key) = writer.run(|c| {
        let account = accounts::ensure_account(c, "bench", now)?;
        let new = NewSite { account_id: account, name: "Bench", domain: "news.example.com", timezone: chrono_tz::Europe::Paris, revenue_per_mille: Some(2.0) };
        let site = sites::create(c, &new, now)?;
        let key = accounts::create_key(c, account, "bench", &Scope::ALL, now)?;
        Ok((site, key.secret))
    })?;

    let mut rng = StdRng::seed_from_u64(42);
    let variants = ["control", "emotional", "offer"];
    let countries = ["FR", "US", "DE", "GB", "BE", "CA", "ES", "IT", "CH", "ZZ"];
    let start = now - Duration::days(days);
    let span_secs = (now - start).num_seconds();
    let mut made = 0usize;
    let started = Instant::now();
    let mut last = Instant::now();
    let mut batch = Vec::with_capacity(GROUP);
    while made < total {
        // One session: 1 to 5 events at one point in time, in time order overall.
        let t = start + Duration::seconds(span_secs * made as i64 / total as i64);
        let session = uuid::Uuid::new_v4().to_string();
        let device = [Device::Desktop, Device::Desktop, Device::Mobile, Device::Tablet][rng.random_range(0..4)];
        let country = countries[rng.random_range(0..countries.len())];
        let variant = variants[rng.random_range(0..3)];
        let mut kinds = vec![EventType::Pageview];
        if rng.random_bool(0.3) {
            kinds.push(EventType::AdblockDetected);
            kinds.push(EventType::WallDisplayed);
            if rng.random_bool(0.15) {
                kinds.push(EventType::ConversionAllowlist);
            } else if rng.random_bool(0.4) {
                kinds.push(EventType::WallDismissed);
            }
        }
        for kind in kinds {
            let walled = kind != EventType::Pageview && kind != EventType::AdblockDetected;
            batch.push(NewEvent {
                site_seq: site.seq,
                session_id: session.clone(),
                event_type: kind,
                page_url: format!("https://news.example.com/article/{}", rng.random_range(0..500)),
                metadata: Some(format!("{{\"device_type\":\"{}\"}}", device.as_str())),
                device,
                country: country.to_owned(),
                variant: walled.then(|| variant.to_owned()),
                forced_variant: false,
                client_event_id: None,
                occurred_at: t,
                received_at: t,
            });
            made += 1;
        }
        if batch.len() >= GROUP || made >= total {
            let mut group = writer.begin()?;
            group.ingest(&batch)?;
            group.commit()?;
            batch.clear();
        }
        if last.elapsed().as_secs() >= 10 {
            eprintln!("seeded {made} events, {:.0} events/s overall", made as f64 / started.elapsed().as_secs_f64());
            last = Instant::now();
        }
    }
    eprintln!("seeded {made} events in {:.1}s", started.elapsed().as_secs_f64());
    println!("site {}", site.id);
    println!("key {key}");
    Ok(())
}
