//! Rate limiters with bounded memory (issue 34 item 3): made-up bearer tokens
//! and session cookies get no bucket of their own, so 100,000 of them grow
//! neither the limiter nor the process, nor slow a normal client down.

use std::time::{Duration, Instant};

use reqwest::blocking::Client;

use crate::support::*;

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn median_latency(app: &TestApp, n: usize) -> Duration {
    let mut took: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            app.get("/v1/sites").expect(200);
            t.elapsed()
        })
        .collect();
    took.sort();
    took[n / 2]
}

fn windows(app: &TestApp) -> u64 {
    sample(&app.metrics(), "postern_rate_limit_windows") as u64
}

#[test]
fn a_hundred_thousand_made_up_tokens_and_cookies_leave_memory_and_latency_alone() {
    let app = TestApp::spawn_with(&["--rate-limit-api", "10000000", "--rate-limit-ingest", "10000000"]);
    let before_latency = median_latency(&app, 200);
    let before_rss = rss_kb(app.pid());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let base = app.base.clone();
            std::thread::spawn(move || {
                let client = Client::builder().timeout(Duration::from_secs(30)).redirect(reqwest::redirect::Policy::none()).build().unwrap();
                for i in 0..25_000 {
                    let token = format!("pst_{:032x}", (t as u128) << 64 | i as u128);
                    let res = if i % 2 == 0 {
                        client.get(format!("{base}/v1/sites")).bearer_auth(&token).send().unwrap()
                    } else {
                        client.get(format!("{base}/dashboard/")).header("Cookie", format!("postern_session={token}")).send().unwrap()
                    };
                    assert!(res.status().is_client_error() || res.status().is_redirection(), "{}", res.status());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let after_rss = rss_kb(app.pid());
    let after_latency = median_latency(&app, 200);
    // The windows kept: this one client's few buckets, not one per token.
    assert!(windows(&app) < 10, "{} windows", windows(&app));
    // Even a table at its cap (65,536 windows of about 100 bytes) is 7 MB;
    // 16 MB leaves room for the allocator's and the connection pool's slack.
    let grown = after_rss.saturating_sub(before_rss);
    assert!(grown < 16 * 1024, "RSS grew by {grown} kB ({before_rss} → {after_rss} kB)");
    assert!(
        after_latency < before_latency * 3 + Duration::from_millis(5),
        "median latency {before_latency:?} before, {after_latency:?} after"
    );
}
