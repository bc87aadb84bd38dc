//! Adds two years of hourly rollups to a site of a seeded store, for the
//! export benchmark: the hours from DAYS days ago up to the oldest hour `seed`
//! wrote (90 days ago), with PAIRS (device, country) rows per hour drawn from
//! 3 devices × 250 countries, so a day has nearly every pair and the CSV of
//! two years has about half a million rows. The three rollup tables are kept
//! consistent, as the real write path keeps them.
//! Usage: exportseed DB SITE_ID [DAYS] [PAIRS]

use std::collections::HashMap;

use analytics::store::Durability;
use analytics::{sites, Store};
use chrono::Utc;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = || anyhow::anyhow!("usage: exportseed DB SITE_ID [DAYS] [PAIRS]");
    let db = args.next().ok_or_else(usage)?;
    let site_id: uuid::Uuid = args.next().ok_or_else(usage)?.parse()?;
    let days: i64 = args.next().unwrap_or_else(|| "730".into()).parse()?;
    let pairs: usize = args.next().unwrap_or_else(|| "150".into()).parse()?;
    let store = Store::open(&db)?;
    let mut writer = store.open_writer(Durability::Normal)?;
    let countries: Vec<String> = (0..250u8).map(|i| format!("{}{}", (b'A' + i / 26) as char, (b'A' + i % 26) as char)).collect();
    let variants = ["control", "emotional", "offer"];
    let now_hour = Utc::now().timestamp() / 3600;
    let (from, to) = (now_hour - days * 24, now_hour - 90 * 24);
    let mut rng = StdRng::seed_from_u64(7);
    let rows = writer.run(|c| {
        let site = sites::get(c, site_id)?.ok_or(analytics::Error::NotFound("site"))?;
        let mut full = c.prepare(
            "INSERT INTO rollup_hourly (site, hour, device, country, variant, sessions, adblock, walls, dismissed, conversions, wall_conversions)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10) ON CONFLICT DO NOTHING",
        )?;
        let mut by_device = c.prepare(
            "INSERT INTO rollup_device_hourly (site, hour, device, sessions, adblock, walls, dismissed, conversions, wall_conversions)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8) ON CONFLICT DO NOTHING",
        )?;
        let mut by_variant = c.prepare(
            "INSERT INTO rollup_variant_hourly (site, hour, variant, walls, wall_conversions)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
        )?;
        let mut rows = 0u64;
        for hour in from..to {
            let mut devices: HashMap<i64, [u64; 5]> = HashMap::new();
            let mut per_variant: HashMap<&str, [u64; 2]> = HashMap::new();
            let mut seen = std::collections::HashSet::new();
            for _ in 0..pairs {
                let device: i64 = rng.random_range(0..3);
                let country = &countries[rng.random_range(0..countries.len())];
                if !seen.insert((device, country)) {
                    continue;
                }
                let variant = variants[rng.random_range(0..3)];
                let sessions: u64 = rng.random_range(1..40);
                let adblock = sessions * 3 / 10;
                let walls = adblock;
                let dismissed = walls / 3;
                let conversions = walls / 6;
                full.execute(analytics::params![site.seq, hour, device, country, variant, sessions, adblock, walls, dismissed, conversions])?;
                let d = devices.entry(device).or_default();
                for (slot, v) in d.iter_mut().zip([sessions, adblock, walls, dismissed, conversions]) {
                    *slot += v;
                }
                let v = per_variant.entry(variant).or_default();
                v[0] += walls;
                v[1] += conversions;
                rows += 1;
            }
            for (device, d) in devices {
                by_device.execute(analytics::params![site.seq, hour, device, d[0], d[1], d[2], d[3], d[4]])?;
            }
            for (variant, v) in per_variant {
                by_variant.execute(analytics::params![site.seq, hour, variant, v[0], v[1]])?;
            }
        }
        Ok(rows)
    })?;
    println!("rollup_rows {rows}");
    Ok(())
}
