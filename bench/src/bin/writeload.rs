//! The benchmark's write workload without HTTP: every event starts a new
//! random UUID v4 session, with the event types, pages and metadata that
//! `bench/track.lua` sends, committed in groups of GROUP with
//! `synchronous=FULL`, as the collector's writer thread does under wrk.
//! Prints events/s and, steadier on a busy machine, the writer's CPU time
//! and bytes written per event, and the CPU time of the whole process per
//! event (the writer plus the checkpoint thread).
//! Every event carries a random `event_id`, as the SDK sends.
//! With `busy`, every group commits as the collector's writer does when more
//! writes wait (its rollup deltas go to the journal).
//! Usage: writeload DB EVENTS [GROUP] [busy]   (GROUP defaults to 48)

use std::time::Instant;

use analytics::accounts;
use analytics::model::{Device, EventType, NewEvent};
use analytics::sites::{self, NewSite};
use analytics::store::Durability;
use analytics::Store;
use chrono::Utc;

/// CPU time this thread has used (ns) and bytes the process asked the kernel
/// to write (the checkpoint thread's writes included).
fn usage() -> anyhow::Result<(u64, u64)> {
    let sched = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    let cpu = sched.split_whitespace().next().unwrap_or("0").parse()?;
    let io = std::fs::read_to_string("/proc/self/io")?;
    let written = io
        .lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .unwrap_or("0")
        .trim()
        .parse()?;
    Ok((cpu, written))
}

/// CPU time of the whole process (ns), from /proc/self/stat (clock ticks of 10 ms).
fn process_cpu() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |p| p.1).split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<u64> { Ok(fields.get(i).ok_or_else(|| anyhow::anyhow!("short /proc/self/stat"))?.parse()?) };
    // utime and stime: fields 14 and 15 of stat(5), 12 and 13 after the command name.
    Ok((ticks(11)? + ticks(12)?) * 10_000_000)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let db = args.next().ok_or_else(|| anyhow::anyhow!("usage: writeload DB EVENTS [GROUP] [busy]"))?;
    let total: usize = args.next().unwrap_or_else(|| "200000".into()).parse()?;
    let group_size: usize = args.next().unwrap_or_else(|| "48".into()).parse()?;
    let busy = args.next().is_some_and(|a| a == "busy");
    let store = Store::open(&db)?;
    let mut writer = store.open_writer(Durability::Full)?;
    let now = Utc::now();
    let site = writer.run(|c| {
        let account = accounts::ensure_account(c, "bench", now)?;
        let new = NewSite { account_id: account, name: "Bench", domain: "news.example.com", timezone: chrono_tz::Europe::Paris, revenue_per_mille: None };
        sites::create(c, &new, now)
    })?;
    let types = [EventType::Pageview, EventType::Pageview, EventType::Pageview, EventType::AdblockDetected, EventType::WallDisplayed];

    let (cpu0, written0) = usage()?;
    let process0 = process_cpu()?;
    let started = Instant::now();
    let mut made = 0usize;
    while made < total {
        let n = group_size.min(total - made);
        let at = Utc::now();
        let events: Vec<NewEvent> = (made..made + n)
            .map(|i| NewEvent {
                site_seq: site.seq,
                session_id: uuid::Uuid::new_v4().to_string(),
                event_type: types[i % types.len()],
                page_url: format!("https://news.example.com/article/{}", i % 50),
                metadata: Some(r#"{"device_type":"desktop","variant":"control"}"#.into()),
                device: Device::Desktop,
                country: "ZZ".into(),
                variant: Some("control".into()),
                forced_variant: false,
                client_event_id: Some(uuid::Uuid::new_v4().to_string()),
                occurred_at: at,
                received_at: at,
            })
            .collect();
        let mut group = writer.begin()?;
        for e in events {
            // One job per event, as the collector receives them.
            group.ingest(std::slice::from_ref(&e))?;
        }
        if busy {
            group.commit_busy()?;
        } else {
            group.commit()?;
        }
        made += n;
    }
    let secs = started.elapsed().as_secs_f64();
    let (cpu1, _) = usage()?;
    // The checkpoint thread stops (after a last checkpoint) with the writer.
    drop(writer);
    let (_, written1) = usage()?;
    let process1 = process_cpu()?;
    let per = |x: u64| x as f64 / total as f64;
    println!(
        "WRITELOAD events={total} group={group_size} busy={busy} events_per_s={:.0} cpu_us_per_event={:.2} bytes_written_per_event={:.0} process_cpu_us_per_event={:.1}",
        total as f64 / secs,
        per(cpu1 - cpu0) / 1000.0,
        per(written1 - written0),
        per(process1 - process0) / 1000.0
    );
    Ok(())
}
