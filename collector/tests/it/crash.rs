//! Crash safety: every acknowledged event survives SIGKILL and is counted exactly once, retries included.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

/// One event a client wants stored: its body, and the id the collector gave it (if acknowledged).
struct Sent {
    body: Value,
    acked_id: Option<String>,
}

#[test]
fn acknowledged_events_survive_sigkill_and_retries_count_once() {
    let mut app = TestApp::spawn();
    let site = id(&app.create_site("news.example.com", "UTC"));
    let url = app.url("/v1/events/track");
    let key = app.key.clone();
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));

    let clients: Vec<_> = (0..8)
        .map(|client| {
            let (url, key, site, sent, stop) = (url.clone(), key.clone(), site.clone(), sent.clone(), stop.clone());
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
                for n in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    // Each session: a pageview, then for every third one an ad-blocker detection.
                    let session = format!("crash-{client}-{n:06}");
                    let kinds: &[&str] = if n % 3 == 0 { &["pageview", "adblock_detected"] } else { &["pageview"] };
                    for kind in kinds {
                        let body = event(&site, &session, kind, json!({"event_id": uuid::Uuid::new_v4().to_string()}));
                        let acked_id = http
                            .post(&url)
                            .bearer_auth(&key)
                            .json(&body)
                            .send()
                            .ok()
                            .filter(|r| r.status().as_u16() == 201)
                            .and_then(|r| r.json::<Value>().ok())
                            .and_then(|v| v["id"].as_str().map(str::to_owned));
                        let failed = acked_id.is_none();
                        sent.lock().unwrap().push(Sent { body, acked_id });
                        if failed {
                            return;
                        }
                    }
                }
            })
        })
        .collect();

    // Kill once a good number of events has been acknowledged, mid-stream.
    let deadline = Instant::now() + Duration::from_secs(60);
    while sent.lock().unwrap().iter().filter(|s| s.acked_id.is_some()).count() < 300 {
        assert!(Instant::now() < deadline, "clients made no progress; log:\n{}", app.logs());
        std::thread::sleep(Duration::from_millis(5));
    }
    app.kill();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let sent = std::mem::take(&mut *sent.lock().unwrap());
    let acked: HashMap<String, String> = sent
        .iter()
        .filter_map(|s| Some((s.body["event_id"].as_str()?.to_owned(), s.acked_id.clone()?)))
        .collect();
    assert!(acked.len() >= 300);

    app.start_again();
    // Every acknowledged event is on disk.
    let mut stored: HashMap<String, usize> = HashMap::new();
    for id in all_event_ids(&app, &site) {
        *stored.entry(id).or_default() += 1;
    }
    for (event_id, id) in &acked {
        assert_eq!(stored.get(id), Some(&1), "acknowledged event {event_id} (id {id}) missing after SIGKILL");
    }

    // Clients retry everything they are unsure of, and some acknowledged ones too:
    // acknowledged events come back as duplicates with the same id.
    for s in &sent {
        let a = app.track(&s.body);
        a.expect(201);
        if let Some(id) = &s.acked_id {
            assert_eq!(a.body["id"].as_str(), Some(id.as_str()), "retry of an acknowledged event got another id");
            assert_eq!(a.body["duplicate"], json!(true));
        }
    }
    // Now every event sent is stored exactly once, and every session counted once with its flags.
    let total = app.events(&site, "?limit=1").body["total"].as_u64().unwrap();
    assert_eq!(total as usize, sent.len());
    let sessions: HashSet<&str> = sent.iter().map(|s| s.body["session_id"].as_str().unwrap()).collect();
    let adblock: HashSet<&str> = sent
        .iter()
        .filter(|s| s.body["event_type"] == "adblock_detected")
        .map(|s| s.body["session_id"].as_str().unwrap())
        .collect();
    let d = app.dashboard(&site, "?days=1");
    assert_eq!(d.body["metrics"]["sessions"].as_u64().unwrap() as usize, sessions.len(), "{}", d.text);
    assert_eq!(d.body["metrics"]["adblock_detected"].as_u64().unwrap() as usize, adblock.len(), "{}", d.text);
}
