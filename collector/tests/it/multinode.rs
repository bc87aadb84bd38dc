//! Several collectors on one PostgreSQL database behave as one: a session's
//! events spread over the nodes count once, an event id raced on two nodes is
//! stored once, a node killed mid-stream loses no acknowledged event, a key
//! revoked on one node is refused by another within a second, deliveries
//! queued through three nodes are each sent once, and a node
//! whose database connections are cut answers 503 until it has new ones.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::receivers::HttpReceiver;
use crate::support::*;

/// `n` collectors on one new PostgreSQL database, sharing a key with every scope.
fn cluster(n: usize) -> Option<(Db, Vec<TestApp>)> {
    cluster_with(n, &[])
}

pub fn cluster_with(n: usize, extra: &[&str]) -> Option<(Db, Vec<TestApp>)> {
    let db = Db::postgres()?;
    let key = admin_key(&db);
    let nodes = (0..n).map(|_| TestApp::spawn_on(db.shared(), &key, extra)).collect();
    Some((db, nodes))
}

#[test]
fn a_session_spread_over_three_nodes_counts_once() {
    let Some((_db, nodes)) = cluster(3) else { return };
    let site = id(&nodes[0].create_site("news.example.com", "UTC"));
    for (i, kind) in ["pageview", "adblock_detected", "wall_displayed", "conversion_allowlist", "pageview", "pageview"].iter().enumerate() {
        track_ok(&nodes[i % 3], event(&site, "spread-session-1", kind, json!({"event_id": uuid::Uuid::new_v4().to_string()})));
    }
    for node in &nodes {
        let d = node.dashboard(&site, "");
        d.expect(200);
        let m = &d.body["metrics"];
        assert_eq!((m["sessions"].as_u64(), m["adblock_detected"].as_u64(), m["walls_displayed"].as_u64(), m["conversions"].as_u64()), (Some(1), Some(1), Some(1), Some(1)), "{}", d.text);
        assert_eq!(node.events(&site, "").body["total"], 6);
    }
}

#[test]
fn the_same_event_id_raced_on_two_nodes_is_stored_once() {
    let Some((_db, nodes)) = cluster(2) else { return };
    let site = id(&nodes[0].create_site("news.example.com", "UTC"));
    let nodes = Arc::new(nodes);
    for round in 0..20 {
        let body = event(&site, &format!("race-session-{round:04}"), "pageview", json!({"event_id": uuid::Uuid::new_v4().to_string()}));
        let start = Arc::new(Barrier::new(2));
        let answers: Vec<Value> = (0..2)
            .map(|n| {
                let (nodes, body, start) = (nodes.clone(), body.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let a = nodes[n].track(&body);
                    a.expect(201);
                    a.body
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert_eq!(answers[0]["id"], answers[1]["id"], "both nodes answer with the one stored event");
        assert_eq!(answers.iter().filter(|a| a["duplicate"] == true).count(), 1, "{answers:?}");
    }
    assert_eq!(nodes[1].events(&site, "").body["total"], 20);
    assert_eq!(nodes[0].dashboard(&site, "").body["metrics"]["sessions"], 20);
}

#[test]
fn a_node_killed_mid_stream_loses_no_acknowledged_event() {
    let Some((_db, mut nodes)) = cluster(3) else { return };
    let site = id(&nodes[0].create_site("news.example.com", "UTC"));
    let urls: Vec<String> = nodes.iter().map(|n| n.url("/v1/events/track")).collect();
    let key = nodes[0].key.clone();
    let acked: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|client| {
            let (urls, key, site, acked, stop) = (urls.clone(), key.clone(), site.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let event_id = uuid::Uuid::new_v4().to_string();
                    let body = event(&site, &format!("kill-{client}-{:04}", n / 3), "pageview", json!({"event_id": event_id}));
                    // A client whose node is gone sends to the next one, as behind a load balancer.
                    for url in urls.iter().cycle().skip(n).take(urls.len()) {
                        let answer = http.post(url).bearer_auth(&key).json(&body).send().ok().filter(|r| r.status().as_u16() == 201);
                        if let Some(id) = answer.and_then(|r| r.json::<Value>().ok()).and_then(|v| v["id"].as_str().map(str::to_owned)) {
                            acked.lock().unwrap().insert(event_id.clone(), id);
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 300 {
        assert!(Instant::now() < deadline, "clients made no progress; log:\n{}", nodes[0].logs());
        std::thread::sleep(Duration::from_millis(5));
    }
    nodes[1].kill();
    let killed_at = acked.lock().unwrap().len();
    while acked.lock().unwrap().len() < killed_at + 300 {
        assert!(Instant::now() < deadline, "the other nodes stopped taking events; log:\n{}", nodes[0].logs());
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let mut stored: HashMap<String, String> = HashMap::new();
    let mut sessions: HashSet<String> = HashSet::new();
    let mut offset = 0;
    loop {
        let page = nodes[2].events(&site, &format!("?limit=1000&offset={offset}"));
        page.expect(200);
        let events = page.body["events"].as_array().unwrap().clone();
        if events.is_empty() {
            assert_eq!(page.body["total"].as_u64(), Some(stored.len() as u64), "the raw total counts each stored event once");
            break;
        }
        offset += events.len();
        for e in events {
            sessions.insert(e["session_id"].as_str().unwrap().to_owned());
            let previous = stored.insert(e["event_id"].as_str().unwrap().to_owned(), e["id"].as_str().unwrap().to_owned());
            assert!(previous.is_none(), "an event stored twice: {e}");
        }
    }
    for (event_id, id) in &acked {
        assert_eq!(stored.get(event_id), Some(id), "acknowledged event {event_id} is not stored as {id}");
    }
    // Counted once: the rollups hold every stored session once (sends that
    // failed may have been stored too; they count like any other).
    let d = nodes[0].dashboard(&site, "");
    assert_eq!(d.body["metrics"]["sessions"].as_u64(), Some(sessions.len() as u64), "{}", d.text);
}

#[test]
fn a_key_revoked_on_one_node_is_refused_by_another_within_a_second() {
    let Some((_db, nodes)) = cluster(2) else { return };
    let created = nodes[0].post("/v1/keys", &json!({"name": "short-lived"}));
    created.expect(201);
    let secret = created.body["key"].as_str().unwrap().to_owned();
    // The other node has the key cached.
    nodes[1].get_as(&secret, "/v1/sites").expect(200);
    nodes[0].delete(&format!("/v1/keys/{}", created.body["id"].as_str().unwrap())).expect(204);
    let revoked = Instant::now();
    loop {
        let a = nodes[1].get_as(&secret, "/v1/sites");
        if a.status == 401 {
            assert_eq!(a.error().2, "revoked");
            break;
        }
        assert!(revoked.elapsed() < Duration::from_secs(1), "node 2 still accepts the revoked key after {:?}", revoked.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_lost_database_connection_answers_503_then_recovers() {
    let Some((db, nodes)) = cluster(1) else { return };
    let node = &nodes[0];
    let site = id(&node.create_site("news.example.com", "UTC"));
    track_ok(node, event(&site, "before-loss-1", "pageview", json!({})));
    // The server ends every connection of the node, as a restart or a failover of PostgreSQL would.
    let ended: u32 = sql(&db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").parse().unwrap();
    assert!(ended >= 2, "the node's connections were ended: {ended}");
    let deadline = Instant::now() + Duration::from_secs(10);
    for n in 0.. {
        let a = node.track(&event(&site, &format!("after-loss-{n}"), "pageview", json!({})));
        assert!(a.status == 201 || a.status == 503, "a lost connection answers 503, never {}: {}", a.status, a.text);
        if a.status == 201 {
            break;
        }
        assert!(Instant::now() < deadline, "events are still refused; log:\n{}", node.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let d = node.dashboard(&site, "");
    assert!(d.status == 200 || d.status == 503, "{}", d.text);
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.dashboard(&site, "").status != 200 {
        assert!(Instant::now() < deadline, "reads do not recover; log:\n{}", node.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!node.logs().contains("panicked"), "{}", node.logs());
}

#[test]
fn a_hundred_deliveries_through_three_workers_are_each_sent_once() {
    let hook = HttpReceiver::start(&[]);
    let Some((_db, nodes)) = cluster_with(3, &["--rate-limit-api", "0", LOOPBACK_HOOKS[0], LOOPBACK_HOOKS[1]]) else { return };
    let site = id(&nodes[0].create_site("hook.example.com", "UTC"));
    let created = nodes[0].post(&format!("/v1/sites/{site}/integrations"), &json!({"kind": "webhook", "url": hook.url, "events": ["daily_report"]}));
    created.expect(201);
    let integration = created.body["id"].as_str().unwrap().to_owned();
    let queued: HashSet<String> = (0..100)
        .map(|n| {
            let a = nodes[n % 3].post(&format!("/v1/sites/{site}/integrations/{integration}/test"), &json!({}));
            a.expect(201);
            a.body["delivery_id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(queued.len(), 100);
    hook.wait_for(100, Duration::from_secs(60));
    // Every node's worker had time to send anything twice.
    std::thread::sleep(Duration::from_secs(3));
    let got: Vec<String> = hook.received().iter().map(|r| r.header("postern-delivery").to_owned()).collect();
    let distinct: HashSet<String> = got.iter().cloned().collect();
    assert_eq!(distinct, queued, "every queued delivery arrives");
    assert_eq!(got.len(), 100, "none arrives twice");
    let listed = nodes[1].get(&format!("/v1/sites/{site}/deliveries?limit=100"));
    listed.expect(200);
    let deliveries = listed.body["deliveries"].as_array().unwrap();
    assert!(deliveries.iter().all(|d| d["state"] == "delivered" && d["attempts"].as_array().unwrap().len() == 1), "{}", listed.text);
}
