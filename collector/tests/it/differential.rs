//! Both engines, one answer, through the HTTP API: one seeded event stream
//! (several sites in different timezones, sessions spread over days, retried
//! and reused event ids, events arriving out of order, forced and unknown
//! variants, conversions, countries and devices, by track and by batch) is
//! sent to a collector on SQLite and to one on PostgreSQL, and every
//! acknowledgement and analytics read (dashboard, timelines, A/B results, event
//! pages, exports, reports) answers the same bytes on both once each node's own
//! ids and arrival times are given the same names.

use std::collections::HashMap;
use std::io::{Cursor, Read};
use std::time::Instant;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::support::*;

const SEED: u64 = 35;
const SITES: [(&str, &str); 4] = [
    ("utc.example.com", "UTC"),
    ("paris.example.com", "Europe/Paris"),
    ("kolkata.example.com", "Asia/Kolkata"),
    ("stjohns.example.com", "America/St_Johns"),
];
const COUNTRIES: [Option<&str>; 7] = [
    Some("FR"),
    Some("DE"),
    Some("US"),
    Some("BR"),
    Some("in"),
    Some("JP"),
    None,
];
const DEVICES: [Option<&str>; 5] = [
    Some("desktop"),
    Some("mobile"),
    Some("tablet"),
    Some("Mobile"),
    None,
];
const BLOCKERS: [&str; 4] = ["extension", "network", "browser", "unknown"];
/// The site's three default variants, and a name no site defines (stored as no variant).
const VARIANTS: [&str; 4] = ["control", "emotional", "offer", "unheard-of"];

/// One event of the stream: its site (an index into `SITES`) and its body without `site_id`.
#[derive(Clone)]
struct Item {
    site: usize,
    body: Value,
}

/// One HTTP request of the stream: a track of one event or a batch, with the proxy's country header.
struct Request {
    country: Option<&'static str>,
    batch: bool,
    /// Indexes into the stream's items.
    items: Vec<usize>,
}

struct Stream {
    items: Vec<Item>,
    requests: Vec<Request>,
}

fn pick<T: Copy>(rng: &mut StdRng, from: &[T]) -> T {
    from[rng.random_range(0..from.len())]
}

fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The events of one visitor session: a page view, perhaps an ad blocker, a wall and its outcome, more pages.
fn session(rng: &mut StdRng, site: usize, n: usize, now: DateTime<Utc>) -> Vec<Item> {
    let id = format!("s{site}-{n:04}-{:08x}", rng.random::<u32>());
    let device = pick(rng, &DEVICES);
    let mut at = now - Duration::minutes(rng.random_range(60..60 * 24 * 60));
    let mut steps = vec!["pageview"];
    if rng.random_bool(0.6) {
        steps.push("adblock_detected");
        if rng.random_bool(0.75) {
            steps.push("wall_displayed");
            steps.push(pick(
                rng,
                &[
                    "conversion_allowlist",
                    "conversion_subscribe",
                    "wall_dismissed",
                    "wall_help_opened",
                    "verification_failed",
                    "pageview",
                ],
            ));
        }
    } else if rng.random_bool(0.1) {
        steps.push("sdk_blocked");
    }
    steps.extend(std::iter::repeat_n("pageview", rng.random_range(0..3)));
    let variant = pick(rng, &VARIANTS);
    let forced = rng.random_bool(0.1);
    steps
        .into_iter()
        .map(|kind| {
            at = (at + Duration::minutes(rng.random_range(0..300))).min(now);
            let mut metadata = serde_json::Map::new();
            // Keys in no particular order and values of every JSON type: stored and listed as sent.
            if rng.random_bool(0.3) {
                metadata.insert("ref".into(), json!({"z": rng.random_range(0..5), "a": [1.5, null, true, "é\u{0}\u{1F600}\n"]}));
            }
            if let Some(d) = device.filter(|_| rng.random_bool(0.9)) {
                metadata.insert("device_type".into(), json!(d));
            }
            if kind == "adblock_detected" {
                metadata.insert("blocker_type".into(), json!(pick(rng, &BLOCKERS)));
            }
            if kind == "wall_displayed" || kind.starts_with("conversion") {
                metadata.insert("variant".into(), json!(variant));
                if forced {
                    metadata.insert("forced_variant".into(), json!(true));
                }
            }
            let page = match rng.random_range(0..4) {
                0 => format!("https://{}/article/{}?utm_source=news&id=7#top", SITES[site].0, rng.random_range(0..9)),
                _ => format!("https://{}/article/{}", SITES[site].0, rng.random_range(0..9)),
            };
            let mut body = json!({"session_id": id, "event_type": kind, "page_url": page, "timestamp": iso(at)});
            if !metadata.is_empty() {
                body["metadata"] = Value::Object(metadata);
            }
            if rng.random_bool(0.75) {
                body["event_id"] = json!(uuid::Uuid::from_u128(rng.random()).to_string());
            }
            Item { site, body }
        })
        .collect()
}

/// The stream: sessions of every site over 60 days (across the autumn clock changes), sent out of time order,
/// with retries (the same body again, or the same event id with another
/// body, on the same site or another), by track or in batches.
fn stream(now: DateTime<Utc>) -> Stream {
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut events: Vec<(i64, Item)> = Vec::new();
    for n in 0..160 {
        let site = rng.random_range(0..SITES.len());
        for item in session(&mut rng, site, n, now) {
            let at: DateTime<Utc> = item.body["timestamp"].as_str().unwrap().parse().unwrap();
            // Sent up to three days after it happened: many arrive after later events of their session.
            events.push((at.timestamp() + rng.random_range(0..3 * 24 * 3600), item));
        }
    }
    events.sort_by_key(|(key, _)| *key);
    let mut items: Vec<Item> = Vec::new();
    for (_, item) in events {
        items.push(item);
        let retry = rng.random_range(0..100);
        let earlier: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].body.get("event_id").is_some())
            .collect();
        if retry < 12 && !earlier.is_empty() {
            // Some retries follow their event at once, so a batch may carry both.
            let mut again = if retry < 8 {
                items[*earlier.last().unwrap()].clone()
            } else {
                items[pick(&mut rng, &earlier)].clone()
            };
            if retry < 3 {
                again.body["event_type"] = json!("pageview");
                again.body["page_url"] = json!(format!("https://{}/retried", SITES[again.site].0));
            } else if retry < 5 {
                again.site = (again.site + 1) % SITES.len();
                again.body["page_url"] = json!(format!("https://{}/moved", SITES[again.site].0));
            }
            items.push(again);
        }
    }
    let mut requests = Vec::new();
    let mut next = 0;
    while next < items.len() {
        let n = if rng.random_bool(0.2) {
            rng.random_range(2..=25)
        } else {
            1
        };
        let end = (next + n).min(items.len());
        requests.push(Request {
            country: pick(&mut rng, &COUNTRIES),
            batch: n > 1 || rng.random_bool(0.05),
            items: (next..end).collect(),
        });
        next = end;
    }
    Stream { items, requests }
}

/// A collector and what it named: its sites' ids, the ids it gave the
/// stream's events and the arrival time of each request that stored one.
struct Node {
    app: TestApp,
    sites: Vec<String>,
    /// Server-made id → a name both nodes share.
    names: HashMap<String, String>,
    /// Event id → the request that stored it.
    stored_by: HashMap<String, usize>,
    /// Request → the `received_at` of the events it stored.
    received: HashMap<usize, String>,
}

impl Node {
    fn start(db: Db) -> Node {
        let key = admin_key(&db);
        let app = TestApp::spawn_on(
            db,
            &key,
            &[
                "--rate-limit-api",
                "0",
                "--rate-limit-ingest",
                "0",
                "--country-header",
                "X-Country",
            ],
        );
        let mut node = Node {
            app,
            sites: Vec::new(),
            names: HashMap::new(),
            stored_by: HashMap::new(),
            received: HashMap::new(),
        };
        for (i, (domain, timezone)) in SITES.iter().enumerate() {
            let site = id(&node.app.create_site(domain, timezone));
            node.names.insert(site.clone(), format!("site-{i}"));
            node.sites.push(site);
        }
        node
    }

    /// Sends one request of the stream; returns its answer with ids and arrival times named.
    fn send(&mut self, stream: &Stream, r: usize) -> String {
        let request = &stream.requests[r];
        let body = |i: usize| {
            let mut b = stream.items[i].body.clone();
            b["site_id"] = json!(self.sites[stream.items[i].site]);
            b
        };
        let path = if request.batch {
            "/v1/events/batch"
        } else {
            "/v1/events/track"
        };
        let payload = if request.batch {
            Value::Array(request.items.iter().map(|&i| body(i)).collect())
        } else {
            body(request.items[0])
        };
        let mut req = self
            .app
            .request(reqwest::Method::POST, path)
            .bearer_auth(&self.app.key)
            .json(&payload);
        if let Some(country) = request.country {
            req = req.header("X-Country", country);
        }
        let a = self.app.send(req);
        assert!(
            a.status == 201,
            "{path} {payload} → {} {}",
            a.status,
            a.text
        );
        let acks: Vec<(usize, &Value)> = if request.batch {
            a.body["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|res| (request.items[res["index"].as_u64().unwrap() as usize], res))
                .collect()
        } else {
            vec![(request.items[0], &a.body)]
        };
        for (item, ack) in acks {
            let id = ack["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{}", a.text))
                .to_owned();
            if ack["duplicate"] != true {
                assert!(
                    self.names
                        .insert(id.clone(), format!("event-{item}"))
                        .is_none(),
                    "{id} stored twice"
                );
                self.stored_by.insert(id.clone(), r);
            }
        }
        if request.batch {
            self.named(&a.text)
        } else {
            self.named_events(&a.text, std::slice::from_ref(&a.body))
        }
    }

    /// The name of the arrival time `at` of event `id`: every event of one
    /// request arrived at the time its answer gave, and a duplicate's
    /// answer gives the stored event's.
    fn arrived(&mut self, id: &str, at: &str) -> String {
        let r = *self
            .stored_by
            .get(id)
            .unwrap_or_else(|| panic!("event {id} was never acknowledged as stored"));
        let known = self.received.entry(r).or_insert_with(|| at.to_owned());
        assert_eq!(known, at, "event {id} of request {r}: arrival time");
        format!("received-{r}")
    }

    /// `text` with each id this node made replaced by its shared name.
    fn named(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some((at, id)) = next_uuid(rest) {
            out.push_str(&rest[..at]);
            out.push_str(self.names.get(id).map_or(id, String::as_str));
            rest = &rest[at + id.len()..];
        }
        out.push_str(rest);
        out
    }

    /// A body whose events carry `received_at`, with ids and arrival times named.
    fn named_events(&mut self, text: &str, events: &[Value]) -> String {
        let ats: Vec<String> = events
            .iter()
            .map(|e| {
                self.arrived(
                    e["id"].as_str().unwrap(),
                    e["received_at"].as_str().unwrap(),
                )
            })
            .collect();
        let text = self.named(text);
        let key = "\"received_at\":\"";
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        for at in ats {
            let start = rest
                .find(key)
                .unwrap_or_else(|| panic!("fewer arrival times than events in {text}"))
                + key.len();
            let end = start + rest[start..].find('"').unwrap();
            out.push_str(&rest[..start]);
            out.push_str(&at);
            rest = &rest[end..];
        }
        assert!(
            !rest.contains(key),
            "more arrival times than events in {text}"
        );
        out.push_str(rest);
        out
    }
}

/// The first lower-case hyphenated UUID in `s`: its position and text.
fn next_uuid(s: &str) -> Option<(usize, &str)> {
    let b = s.as_bytes();
    (0..b.len().saturating_sub(35)).find_map(|i| {
        let candidate = &b[i..i + 36];
        let ok = candidate.iter().enumerate().all(|(j, c)| match j {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        });
        ok.then(|| (i, &s[i..i + 36]))
    })
}

/// What one read answers on a node, with its own ids named: status, the headers that describe the body, the body.
fn read(node: &mut Node, site: usize, path: &str, since: DateTime<Utc>) -> String {
    let path = path.replace("SITE", &node.sites[site]);
    let res = node
        .app
        .request(reqwest::Method::GET, &path)
        .bearer_auth(&node.app.key)
        .send()
        .expect("HTTP request");
    let status = res.status();
    let header = |name: &str| {
        res.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let head = format!(
        "{status}\n{}\n{}\n",
        header("content-type"),
        header("content-disposition")
    );
    assert_eq!(
        status,
        200,
        "GET {path}: {}",
        res.text().unwrap_or_default()
    );
    let bytes = res.bytes().unwrap();
    if path.contains("format=zip") {
        return head + &unzipped(node, &bytes, since);
    }
    if path.contains("format=pdf") {
        // Binary: compared as it is (it holds no id), in hex so a difference can be located.
        return head + &hex::encode(&bytes);
    }
    let text = String::from_utf8(bytes.to_vec()).expect("a UTF-8 body");
    if path.starts_with("/v1/events/") {
        let events = serde_json::from_str::<Value>(&text).unwrap()["events"]
            .as_array()
            .unwrap()
            .clone();
        return head + &node.named_events(&text, &events);
    }
    head + &node.named(&text)
}

/// A ZIP export's files, each named and then its text with ids, arrival times and the server's times named.
fn unzipped(node: &mut Node, bytes: &[u8], since: DateTime<Utc>) -> String {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).expect("a valid ZIP");
    let mut out = String::new();
    for i in 0..archive.len() {
        let mut f = archive.by_index(i).unwrap();
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        let name = f.name().expect("a UTF-8 file name").to_string();
        let text = match name.as_str() {
            "events.jsonl" => {
                let events: Vec<Value> = text
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
                node.named_events(&text, &events)
            }
            "manifest.json" | "report-runs.jsonl" => {
                let text = server_times(&text, "generated_at", since);
                node.named(&server_times(&text, "created_at", since))
            }
            _ => node.named(&text),
        };
        out.push_str(&format!("== {name}\n{text}\n"));
    }
    out
}

/// Every analytics read a client can make of a site, as paths with `SITE` for its id;
/// explicit export periods cover the last `days` days.
fn reads(days: u32, now: DateTime<Utc>) -> Vec<String> {
    let mut paths = Vec::new();
    for d in [1, 7, 30, 730] {
        for device in ["", "&device=desktop", "&device=mobile", "&device=tablet"] {
            paths.push(format!(
                "/v1/analytics/sites/SITE/dashboard?days={d}{device}"
            ));
        }
    }
    paths.push("/v1/analytics/sites/SITE/dashboard".to_owned());
    for (granularity, ds) in [
        ("hour", [1, 7, 31]),
        ("day", [7, 30, 90]),
        ("week", [14, 30, 365]),
    ] {
        for d in ds {
            for device in ["", "&device=mobile"] {
                paths.push(format!("/v1/analytics/sites/SITE/conversions?days={d}&granularity={granularity}{device}"));
            }
        }
    }
    paths.push("/v1/analytics/sites/SITE/conversions".to_owned());
    for q in ["", "?days=1", "?days=7", "?days=30"] {
        paths.push(format!("/v1/analytics/sites/SITE/ab-testing{q}"));
    }
    let types = [
        "pageview",
        "adblock_detected",
        "wall_displayed",
        "wall_dismissed",
        "wall_help_opened",
        "verification_failed",
        "conversion_allowlist",
        "conversion_subscribe",
        "sdk_blocked",
    ];
    paths.push("/v1/events/sites/SITE?limit=1000".to_owned());
    for t in types {
        paths.push(format!("/v1/events/sites/SITE?limit=1000&event_type={t}"));
    }
    paths.push("/v1/events/sites/SITE?limit=20&offset=10&event_type=pageview".to_owned());
    for (limit, offset) in [(50, 0), (50, 50), (50, 100), (7, 3), (1, 0), (10, 5000)] {
        paths.push(format!(
            "/v1/events/sites/SITE?limit={limit}&offset={offset}"
        ));
    }
    paths.push("/v1/events/sites/SITE".to_owned());
    let start = (now - Duration::days(i64::from(days))).date_naive();
    let end = now.date_naive();
    for format in ["csv", "json", "pdf"] {
        paths.push(format!("/v1/sites/SITE/export?format={format}"));
        paths.push(format!(
            "/v1/sites/SITE/export?format={format}&start={start}&end={end}"
        ));
        paths.push(format!("/v1/sites/SITE/export?format={format}&start={start}&end={end}&device=mobile&country=FR&country=ZZ&country=IN"));
    }
    paths.push(format!(
        "/v1/sites/SITE/export?format=zip&start={start}&end={end}"
    ));
    paths.push(format!(
        "/v1/sites/SITE/export?format=zip&start={start}&end={end}&device=desktop&country=US"
    ));
    paths
}

/// `text` with the value of each field `key` (a time the server took from
/// its clock during the test, in the API's format) replaced by `key` itself.
fn server_times(text: &str, key: &str, since: DateTime<Utc>) -> String {
    let field = format!("\"{key}\":");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&field) {
        // Compact or pretty-printed JSON: the value's opening quote after any spaces.
        let start = at + field.len() + rest[at + field.len()..].find('"').unwrap() + 1;
        let value = &rest[start..start + rest[start..].find('"').unwrap()];
        let t: DateTime<Utc> = value
            .parse()
            .unwrap_or_else(|e| panic!("{key} {value:?}: {e}"));
        assert!(
            value.len() == 24 && t >= since - Duration::seconds(1) && t <= Utc::now(),
            "{key} {value:?} is not a time of this test"
        );
        out.push_str(&rest[..start]);
        out.push_str(key);
        rest = &rest[start + value.len()..];
    }
    out.push_str(rest);
    out
}

/// The reports of every type, created alike on both nodes; each is sent
/// now, and its run read back as JSON and HTML. Returns what each node answered.
fn reports(nodes: &mut [Node; 2], s: usize, since: DateTime<Utc>) -> Vec<(String, [String; 2])> {
    let (start, end) = (
        (since - Duration::days(12)).date_naive(),
        (since - Duration::days(2)).date_naive(),
    );
    let configs = [
        json!({"type": "daily", "channels": ["webhook"]}),
        json!({"type": "weekly", "channels": ["webhook"], "format": "json"}),
        json!({"type": "monthly", "channels": ["webhook"]}),
        json!({
            "type": "custom", "name": "Mobile in France and India", "channels": ["webhook"],
            "metrics": ["sessions", "adblock_detected", "walls_displayed", "conversions", "conversion_rate", "by_device", "by_country", "by_variant"],
            "filters": {"start": start.to_string(), "end": end.to_string(), "device": "mobile", "countries": ["FR", "IN"], "event": "wall_displayed"}
        }),
        json!({"type": "custom", "name": "Everything", "channels": ["webhook"], "metrics": ["sessions", "conversions", "by_device", "by_country", "by_variant"]}),
    ];
    let mut answers = Vec::new();
    for (k, config) in configs.iter().enumerate() {
        let mut got: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
        for (n, node) in nodes.iter_mut().enumerate() {
            let site = node.sites[s].clone();
            let created = node.app.post(&format!("/v1/sites/{site}/reports"), config);
            created.expect(201);
            node.names.insert(
                created.body["id"].as_str().unwrap().to_owned(),
                format!("report-{k}"),
            );
            let sent = node.app.post(
                &format!(
                    "/v1/sites/{site}/reports/{}/send",
                    created.body["id"].as_str().unwrap()
                ),
                &json!({}),
            );
            sent.expect(201);
            let run = sent.body["id"].as_str().unwrap().to_owned();
            node.names.insert(run.clone(), format!("run-{k}"));
            let generated = sent.body["generated_at"].as_str().unwrap().to_owned();
            got[n].push(server_times(&node.named(&sent.text), "generated_at", since));
            for format in ["json", "html"] {
                let a = node
                    .app
                    .get(&format!("/v1/report-runs/{run}?format={format}"));
                a.expect(200);
                let text = if format == "html" {
                    a.text.replace(&generated, "generated_at")
                } else {
                    a.text.clone()
                };
                got[n].push(server_times(&node.named(&text), "generated_at", since));
            }
        }
        let [a, b] = [got[0].clone(), got[1].clone()];
        for (i, (x, y)) in a.into_iter().zip(b).enumerate() {
            answers.push((
                format!("site {s} report {k} ({}) answer {i}", config["type"]),
                [x, y],
            ));
        }
    }
    answers
}

/// Where `a` and `b` first differ, with 200 bytes either side.
fn first_difference(a: &str, b: &str) -> String {
    let at = a
        .bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let from = at.saturating_sub(200);
    let window = |s: &str| {
        String::from_utf8_lossy(&s.as_bytes()[from.min(s.len())..(at + 200).min(s.len())])
            .into_owned()
    };
    format!(
        "at byte {at}:\n  SQLite:     {:?}\n  PostgreSQL: {:?}",
        window(a),
        window(b)
    )
}

#[test]
fn one_stream_reads_the_same_through_the_api_on_sqlite_and_postgresql() {
    let Some(pg_db) = Db::postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = [
        Node::start(Db::sqlite(dir.path().join("postern.db"))),
        Node::start(pg_db),
    ];
    let (started, since) = (Instant::now(), Utc::now());
    let now = Utc::now() - Duration::minutes(2);
    let stream = stream(now);
    let mut differences = Vec::new();
    let mut compare = |what: String, answers: [String; 2]| {
        if answers[0] != answers[1] {
            differences.push(format!(
                "{what}: {}",
                first_difference(&answers[0], &answers[1])
            ));
        }
    };

    for r in 0..stream.requests.len() {
        let answers = [nodes[0].send(&stream, r), nodes[1].send(&stream, r)];
        compare(format!("request {r}"), answers);
    }
    let duplicates = stream.items.len() - nodes[0].stored_by.len();
    assert!(
        duplicates > 10 && stream.requests.iter().any(|r| r.batch),
        "the stream retries ids and batches: {duplicates}"
    );

    for s in 0..SITES.len() {
        for (what, answers) in reports(&mut nodes, s, since) {
            compare(what, answers);
        }
        for path in reads(60, now) {
            let answers = [
                read(&mut nodes[0], s, &path, since),
                read(&mut nodes[1], s, &path, since),
            ];
            compare(format!("site {s} GET {path}"), answers);
        }
    }
    // The stream reaches every counter on every site, and each stored event is listed once.
    let mut listed = 0;
    for s in 0..SITES.len() {
        let d = nodes[0].app.dashboard(&nodes[0].sites[s], "?days=730");
        let m = &d.body["metrics"];
        assert!(
            [
                "sessions",
                "adblock_detected",
                "walls_displayed",
                "conversions"
            ]
            .iter()
            .all(|k| m[k].as_u64() > Some(0)),
            "site {s}: {}",
            d.text
        );
        let ab = nodes[0].app.ab_testing(&nodes[0].sites[s], "");
        assert!(
            ab.body["variants"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["impressions"].as_u64() > Some(0)),
            "site {s}: {}",
            ab.text
        );
        listed += nodes[0].app.events(&nodes[0].sites[s], "?limit=1").body["total"]
            .as_u64()
            .unwrap() as usize;
    }
    assert_eq!(listed, nodes[0].stored_by.len());
    eprintln!(
        "{} requests, {} events, compared in {:?}",
        stream.requests.len(),
        stream.items.len(),
        started.elapsed()
    );
    assert!(
        differences.is_empty(),
        "SQLite and PostgreSQL answer differently:\n{}",
        differences.join("\n\n")
    );
}
