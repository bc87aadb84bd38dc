//! Jobs on several collectors sharing one PostgreSQL database: a weekly
//! report due on three nodes at once is generated once and mailed once per
//! recipient; when the node that generated it is killed, a surviving node
//! generates the next occurrence, again once. Without any restart too: when
//! the leading node is killed shortly before a report is due, one of the two
//! nodes running beside it takes the leader's lock at its next scheduler turn
//! (at most the reports job's 30 s period later) and generates the report
//! once, counting the visits sent through the survivors meanwhile.

use std::thread;
use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike, Days, SecondsFormat, TimeZone, Utc};
use chrono_tz::Europe::Paris;
use serde_json::{json, Value};

use crate::receivers::{HttpReceiver, SmtpReceiver};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);

/// The reports job's period (collector/src/jobs): a node that does not lead
/// asks for the leader's lock again at each of its turns, so a survivor
/// takes over at most this long after the leader's sessions ended.
const SCHEDULER_PERIOD: Duration = Duration::from_secs(30);

/// How long before the report is due the nodes of the takeover test start:
/// time enough to find and kill the leader first, and less than a scheduler
/// period, so that the survivors' next turn finds the report due.
const LEAD: Duration = Duration::from_secs(20);

/// The rows of pg_locks that are the leader's advisory lock on this
/// database (the store's key 0x706f_7374_6572_6e02, as pg_locks splits it;
/// the view shows every database of the cluster, where other tests' nodes lead).
macro_rules! leader_lock {
    () => {
        "locktype = 'advisory' AND granted
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND classid = 1886352244 AND objid = 1701998082 AND objsubid = 1"
    };
}

/// Sessions holding the leader's advisory lock on this database.
const LEADER_LOCK_HOLDERS: &str = concat!("SELECT count(*) FROM pg_locks WHERE ", leader_lock!());

/// The `application_name` of each session holding the leader's lock, space-separated.
const LEADER_LOCK_HOLDER_NAMES: &str = concat!(
    "SELECT coalesce(string_agg(application_name, ' '), '') FROM pg_stat_activity
    WHERE pid IN (SELECT pid FROM pg_locks WHERE ",
    leader_lock!(),
    ")"
);

/// Monday 08:00 in Paris, `weeks_ago` weeks before this week's Monday.
fn monday_eight(weeks_ago: u64) -> DateTime<Utc> {
    let today = Utc::now().with_timezone(&Paris).date_naive();
    let monday = today
        .checked_sub_days(Days::new(
            u64::from(today.weekday().num_days_from_monday()) + 7 * weeks_ago,
        ))
        .unwrap();
    Paris
        .from_local_datetime(&monday.and_hms_opt(8, 0, 0).unwrap())
        .single()
        .unwrap()
        .with_timezone(&Utc)
}

/// `serve` flags for a node whose scheduler lives at `clock`, mailing and posting to the receivers.
fn node_args(smtp: &SmtpReceiver, clock: DateTime<Utc>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--rate-limit-api",
        "0",
        "--delivery-retry-base-ms",
        "200",
        "--clock",
    ]
    .map(String::from)
    .to_vec();
    args.push(clock.to_rfc3339());
    args.extend(smtp.flags());
    args.extend(LOOPBACK_HOOKS.map(str::to_owned));
    args
}

fn str_args(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Sets up, on a node of its own living at `clock`, a site whose weekly
/// report goes by e-mail to two recipients and to `hook`; returns the ids
/// of the site and the report.
fn weekly_report(
    db: &Db,
    key: &str,
    smtp: &SmtpReceiver,
    hook: &HttpReceiver,
    clock: DateTime<Utc>,
) -> (String, String) {
    let mut setup = TestApp::spawn_on(db.shared(), key, &str_args(&node_args(smtp, clock)));
    let site = id(&setup.create_site("weekly.example.com", "Europe/Paris"));
    setup
        .post(
            &format!("/v1/sites/{site}/integrations"),
            &json!({"kind": "webhook", "url": hook.url, "events": ["weekly_report"]}),
        )
        .expect(201);
    let created = setup.post(
        &format!("/v1/sites/{site}/reports"),
        &json!({
            "type": "weekly",
            "recipients": [{"email": "ana@example.com", "role": "Admin"}, {"email": "bob@example.com", "role": "Reader"}],
            "channels": ["email", "webhook"]
        }),
    );
    created.expect(201);
    let report = created.body["id"].as_str().unwrap().to_owned();
    assert_eq!(setup.stop(), 0, "{}", setup.logs());
    (site, report)
}

/// The report's runs as `node` lists them, newest first.
fn runs(node: &TestApp, site: &str, report: &str) -> Vec<Value> {
    let a = node.get(&format!("/v1/sites/{site}/reports/{report}/runs"));
    a.expect(200);
    a.body["runs"].as_array().unwrap().clone()
}

/// When `node`'s scheduler job last finished a turn (led or skipped), in Unix seconds; 0 before its first.
fn scheduler_turn(node: &TestApp) -> f64 {
    let metrics = node.send(node.request(reqwest::Method::GET, "/metrics"));
    metrics
        .text
        .lines()
        .find_map(|l| {
            l.strip_prefix("postern_task_last_success_timestamp_seconds{task=\"reports\"} ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no scheduler turn in /metrics:\n{}", metrics.text))
}

/// The names of the nodes (`Db::shared_as`) whose sessions hold the leader's lock.
fn leader_lock_holders(db: &Db) -> Vec<String> {
    sql(db, LEADER_LOCK_HOLDER_NAMES)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Waits until some node holds the leader's lock, and returns its name.
fn wait_for_leader(db: &Db) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let holders = leader_lock_holders(db);
        assert!(holders.len() <= 1, "several sessions lead: {holders:?}");
        if let Some(leader) = holders.into_iter().next() {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "no node took the leader's lock within {WAIT:?}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// How many times `node` logged generating the occurrence of `day`.
fn generated(node: &TestApp, day: &str) -> usize {
    node.logs()
        .lines()
        .filter(|l| l.contains("report generated") && l.contains(day))
        .count()
}

/// Waits until every node lists `n` runs of the report, and returns the newest.
fn wait_for_runs(nodes: &[&TestApp], site: &str, report: &str, n: usize) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let listed: Vec<Vec<Value>> = nodes.iter().map(|node| runs(node, site, report)).collect();
        assert!(
            listed.iter().all(|r| r.len() <= n),
            "more than {n} runs: {listed:#?}"
        );
        if listed.iter().all(|r| r.len() == n) {
            assert!(
                listed.iter().all(|r| r[0]["id"] == listed[0][0]["id"]),
                "the nodes list different runs: {listed:#?}"
            );
            return listed[0][0].clone();
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = nodes.iter().map(|node| node.logs()).collect();
            panic!(
                "no run {n} within {WAIT:?}; logs:\n{}",
                logs.join("\n----\n")
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Receives the run's e-mail to each recipient.
fn mails_for(smtp: &SmtpReceiver, run: &Value) {
    let mut mails = vec![smtp.next_message(WAIT), smtp.next_message(WAIT)];
    mails.sort_by_key(|m| m["rcpt_tos"][0].as_str().unwrap().to_owned());
    let to: Vec<&Value> = mails.iter().map(|m| &m["rcpt_tos"]).collect();
    assert_eq!(
        to,
        [&json!(["ana@example.com"]), &json!(["bob@example.com"])],
        "one e-mail per recipient"
    );
    for m in &mails {
        let subject = m["subject"].as_str().unwrap();
        let period = format!(
            "({} to {})",
            run["period"]["start"].as_str().unwrap(),
            run["period"]["end"].as_str().unwrap()
        );
        assert!(
            subject.starts_with("Site weekly.example.com: Weekly report")
                && subject.ends_with(&period),
            "{subject}"
        );
        assert!(m["text"].as_str().unwrap().contains("Sessions"), "{m:#}");
        assert!(
            m["html"].as_str().unwrap().contains("Weekly report"),
            "{m:#}"
        );
    }
}

/// Checks that `run` is the scheduled occurrence due at `due`, and receives its e-mails.
fn scheduled_and_mailed(smtp: &SmtpReceiver, run: &Value, due: DateTime<Utc>) {
    assert_eq!(
        run["scheduled_for"],
        due.to_rfc3339_opts(SecondsFormat::Millis, true),
        "{run}"
    );
    assert_eq!(run["trigger"], "schedule", "{run}");
    mails_for(smtp, run);
}

/// Once the deliveries of `n` runs have settled (`settle`, from `since`):
/// no e-mail and no webhook arrived twice, and the newest run is still `run`.
fn nothing_twice(
    nodes: &[&TestApp],
    (site, report): (&str, &str),
    smtp: &SmtpReceiver,
    hook: &HttpReceiver,
    n: usize,
    since: f64,
    run: &Value,
) {
    settle(nodes, site, 3 * n, since);
    assert!(smtp.pending().is_empty(), "an e-mail arrived twice");
    assert_eq!(hook.received().len(), n, "the webhook arrived twice");
    assert_eq!(wait_for_runs(nodes, site, report, n)["id"], run["id"]);
}

/// Waits until the site's deliveries are `n`, each delivered at its first
/// attempt, and every node's scheduler has taken a turn since `since`
/// (Unix seconds); then lets every node's scheduler and delivery worker
/// have time to do anything twice.
fn settle(nodes: &[&TestApp], site: &str, n: usize, since: f64) {
    let deadline = Instant::now() + WAIT;
    loop {
        let listed = nodes[0].get(&format!("/v1/sites/{site}/deliveries?limit=100"));
        listed.expect(200);
        let deliveries = listed.body["deliveries"].as_array().unwrap();
        assert!(deliveries.len() <= n, "{}", listed.text);
        let delivered =
            deliveries.len() == n && deliveries.iter().all(|d| d["state"] == "delivered");
        if delivered && nodes.iter().all(|node| scheduler_turn(node) >= since) {
            assert!(
                deliveries
                    .iter()
                    .all(|d| d["attempts"].as_array().unwrap().len() == 1),
                "{}",
                listed.text
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "deliveries or scheduler turns missing: {}",
            listed.text
        );
        thread::sleep(Duration::from_millis(100));
    }
    thread::sleep(Duration::from_secs(2));
}

#[test]
fn a_weekly_report_due_on_three_nodes_runs_and_mails_once_even_after_its_node_dies() {
    let Some(db) = Db::postgres() else { return };
    let smtp = SmtpReceiver::start();
    let hook = HttpReceiver::start(&[]);
    let key = admin_key(&db);
    let (first, second) = (monday_eight(2), monday_eight(1));

    // The report is set up the week before, so it is due when the three nodes start.
    let (site, report) = weekly_report(&db, &key, &smtp, &hook, first - chrono::Duration::days(1));

    // Three nodes start together, each with the first occurrence due at its first scheduler turn.
    let args = node_args(&smtp, first + chrono::Duration::seconds(30));
    let started = Utc::now().timestamp() as f64;
    let mut nodes: Vec<TestApp> = thread::scope(|s| {
        let spawned: Vec<_> = (0..3)
            .map(|_| s.spawn(|| TestApp::spawn_on(db.shared(), &key, &str_args(&args))))
            .collect();
        spawned.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<&TestApp> = nodes.iter().collect();
    let run = wait_for_runs(&all, &site, &report, 1);
    scheduled_and_mailed(&smtp, &run, first);
    let got = hook.wait_for(1, WAIT);
    assert_eq!(got[0].header("postern-event"), "weekly_report");
    assert_eq!(got[0].json()["data"]["run_id"], run["id"]);
    nothing_twice(&all, (&site, &report), &smtp, &hook, 1, started, &run);
    let first_day = first.with_timezone(&Paris).date_naive().to_string();
    let leaders: Vec<usize> = (0..3)
        .filter(|&i| generated(&nodes[i], &first_day) > 0)
        .collect();
    assert_eq!(leaders.len(), 1, "one node generates the run: {leaders:?}");
    assert_eq!(generated(&nodes[leaders[0]], &first_day), 1);
    assert_eq!(
        sql(&db, LEADER_LOCK_HOLDERS),
        "1",
        "one node holds the leader lock"
    );

    // The leader dies; the survivors are restarted (one at a time, as in a
    // rolling deploy) a week later, when the next occurrence is due.
    let mut dead = nodes.remove(leaders[0]);
    dead.kill();
    let args = node_args(&smtp, second + chrono::Duration::seconds(30));
    let restarted = Utc::now().timestamp() as f64;
    for node in &mut nodes {
        node.restart_with(&str_args(&args));
    }
    let survivors: Vec<&TestApp> = nodes.iter().collect();
    let run = wait_for_runs(&survivors, &site, &report, 2);
    scheduled_and_mailed(&smtp, &run, second);
    let got = hook.wait_for(2, WAIT);
    assert_eq!(got[1].json()["data"]["run_id"], run["id"]);
    nothing_twice(
        &survivors,
        (&site, &report),
        &smtp,
        &hook,
        2,
        restarted,
        &run,
    );
    let second_day = second.with_timezone(&Paris).date_naive().to_string();
    let generating: Vec<usize> = nodes.iter().map(|n| generated(n, &second_day)).collect();
    assert_eq!(
        generating.iter().sum::<usize>(),
        1,
        "one survivor generates the run: {generating:?}"
    );
}

#[test]
fn when_the_leader_dies_a_running_node_takes_over_and_sends_the_due_report_once() {
    let Some(db) = Db::postgres() else { return };
    let smtp = SmtpReceiver::start();
    let hook = HttpReceiver::start(&[]);
    let key = admin_key(&db);
    let due = monday_eight(1);

    // The report is set up the day before, so that nothing is due until `due`.
    let (site, report) = weekly_report(&db, &key, &smtp, &hook, due - chrono::Duration::days(1));

    // Three nodes start together LEAD before the report is due, each naming its sessions.
    let mut names = vec!["node-0", "node-1", "node-2"];
    let args = node_args(&smtp, due - chrono::Duration::from_std(LEAD).unwrap());
    let spawning = Instant::now();
    let mut nodes: Vec<TestApp> = thread::scope(|s| {
        let (db, key, args) = (&db, &key, &args);
        let spawned: Vec<_> = names
            .iter()
            .map(|name| {
                s.spawn(move || TestApp::spawn_on(db.shared_as(name), key, &str_args(args)))
            })
            .collect();
        spawned.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Every node set its clock before it answered, so each one's has passed `due` by then.
    let due_passed = Utc::now().timestamp() as f64 + LEAD.as_secs_f64();

    // One node leads; the others were refused the lock at their first scheduler turn.
    let leader = wait_for_leader(&db);
    let deadline = Instant::now() + WAIT;
    while nodes.iter().any(|node| scheduler_turn(node) == 0.0) {
        assert!(
            Instant::now() < deadline,
            "a node took no scheduler turn within {WAIT:?}"
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert!(
        runs(&nodes[0], &site, &report).is_empty(),
        "nothing is due yet"
    );

    // The leader dies before the report is due; the two others keep running untouched.
    let i = names.iter().position(|name| *name == leader).unwrap();
    let mut dead = nodes.remove(i);
    names.remove(i);
    assert!(
        spawning.elapsed() < LEAD,
        "the leader must die before the report is due, but {:?} went by",
        spawning.elapsed()
    );
    dead.kill();
    let killed = Instant::now();
    // The server ends the dead node's sessions, and with them its lock.
    let deadline = Instant::now() + WAIT;
    while leader_lock_holders(&db).contains(&leader) {
        assert!(
            Instant::now() < deadline,
            "the dead node still holds the leader's lock"
        );
        thread::sleep(Duration::from_millis(100));
    }

    // Meanwhile visitors of the week the report covers are counted through the survivors.
    let covered_day = due.with_timezone(&Paris).date_naive() - Days::new(5);
    let noon = Paris
        .from_local_datetime(&covered_day.and_hms_opt(12, 0, 0).unwrap())
        .single()
        .unwrap();
    for n in 0..8 {
        let extra =
            json!({"timestamp": noon.to_rfc3339(), "page_url": "https://weekly.example.com/"});
        track_ok(
            &nodes[n % 2],
            event(&site, &format!("takeover-{n}"), "pageview", extra),
        );
    }

    let survivors: Vec<&TestApp> = nodes.iter().collect();
    let run = wait_for_runs(&survivors, &site, &report, 1);
    let took = killed.elapsed();
    assert!(
        took < SCHEDULER_PERIOD + Duration::from_secs(10),
        "the survivors took {took:?} to take over and generate the report"
    );
    scheduled_and_mailed(&smtp, &run, due);
    let got = hook.wait_for(1, WAIT);
    assert_eq!(got[0].header("postern-event"), "weekly_report");
    let data = got[0].json()["data"].clone();
    assert_eq!(data["run_id"], run["id"]);
    assert_eq!(
        data["sessions"], 8,
        "the visits sent through the survivors: {data}"
    );
    nothing_twice(
        &survivors,
        (&site, &report),
        &smtp,
        &hook,
        1,
        due_passed,
        &run,
    );
    let day = due.with_timezone(&Paris).date_naive().to_string();
    assert_eq!(
        generated(&dead, &day),
        0,
        "the leader died before the report was due"
    );
    let generating: Vec<usize> = nodes.iter().map(|node| generated(node, &day)).collect();
    let new_leader = match generating[..] {
        [1, 0] => names[0],
        [0, 1] => names[1],
        _ => panic!("one survivor generates the run: {generating:?}"),
    };
    assert_eq!(
        leader_lock_holders(&db),
        [new_leader],
        "the survivor that generated the run alone holds the leader's lock"
    );
}
