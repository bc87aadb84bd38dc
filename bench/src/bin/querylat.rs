//! Query latency: calls each analytics endpoint N times, one request at a time,
//! and prints p50 and p99 per endpoint.
//! Usage: querylat BASE_URL KEY SITE_ID [N]

use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(args.len() >= 3, "usage: querylat BASE_URL KEY SITE_ID [N]");
    let (base, key, site) = (&args[0], &args[1], &args[2]);
    let n: usize = args.get(3).map_or(Ok(200), |s| s.parse())?;
    let client = reqwest::blocking::Client::new();
    let endpoints = [
        ("dashboard days=7", format!("/v1/analytics/sites/{site}/dashboard?days=7")),
        ("dashboard days=90", format!("/v1/analytics/sites/{site}/dashboard?days=90")),
        ("conversions hour days=7", format!("/v1/analytics/sites/{site}/conversions?days=7&granularity=hour")),
        ("conversions day days=30", format!("/v1/analytics/sites/{site}/conversions?days=30&granularity=day")),
        ("conversions week days=90", format!("/v1/analytics/sites/{site}/conversions?days=90&granularity=week")),
        ("ab-testing all time", format!("/v1/analytics/sites/{site}/ab-testing")),
    ];
    for (name, path) in endpoints {
        let url = format!("{base}{path}");
        let mut times = Vec::with_capacity(n);
        for i in 0..n + 5 {
            let t = Instant::now();
            let res = client.get(&url).bearer_auth(key).send()?;
            anyhow::ensure!(res.status().is_success(), "{name}: HTTP {}", res.status());
            let _ = res.bytes()?;
            if i >= 5 {
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
        times.sort_by(f64::total_cmp);
        let p = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
        println!("QUERY {name:<28} p50_ms={:.2} p99_ms={:.2}", p(0.5), p(0.99));
    }
    Ok(())
}
