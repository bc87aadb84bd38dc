//! Data safety: `postern admin backup` while the collector serves and ingests,
//! restore, the integrity check at start, private database files, the free
//! disk space in `/readyz` and `/metrics`, a commit that fails for real (a full
//! file system), and the outbox's retention.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::receivers::HttpReceiver;
use crate::support::*;

fn admin(args: &[&str]) -> Output {
    Command::new(BIN).arg("admin").args(args).output().expect("running postern admin")
}

fn backup(db: &Path, to: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["backup", "--db", db.to_str().unwrap(), "--to", to.to_str().unwrap()];
    args.extend_from_slice(extra);
    admin(&args)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

fn beside(db: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", db.display()))
}

fn get_plain(app: &TestApp, path: &str) -> Answer {
    app.send(app.request(Method::GET, path))
}

/// Waits for `postern serve` to exit on its own; returns (success, stdout, stderr).
fn serve_until_exit(db: &Path, extra: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting postern");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("postern kept running; stdout: {}", String::from_utf8_lossy(&out.stdout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_backup_taken_while_the_collector_ingests_holds_every_event_acknowledged_before_it() {
    let app = TestApp::spawn();
    // `postern admin backup` copies an SQLite file; PostgreSQL is backed up with its own tools.
    let Some(db_file) = app.sqlite_file() else { return };
    let site = id(&app.create_site("backup.example.com", "UTC"));
    let copy_dir = tempfile::tempdir().unwrap();
    let copy = copy_dir.path().join("backup.db");
    let acked = Mutex::new(Vec::<String>::new());
    let stop = AtomicBool::new(false);
    let (before, during, out) = std::thread::scope(|scope| {
        scope.spawn(|| {
            let client = reqwest::blocking::Client::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let body = event(&site, &format!("backup-session-{n:06}"), "pageview", json!({}));
                let res = client.post(app.url("/v1/events/track")).bearer_auth(&app.key).json(&body).send().expect("track");
                assert_eq!(res.status().as_u16(), 201, "ingestion failed during the backup");
                let ack: Value = res.json().unwrap();
                acked.lock().unwrap().push(ack["id"].as_str().unwrap().to_owned());
                n += 1;
            }
        });
        let count = || acked.lock().unwrap().len();
        let wait_for = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while count() < n {
                assert!(Instant::now() < deadline, "only {} events acknowledged", count());
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        wait_for(300);
        let before = acked.lock().unwrap().clone();
        let out = backup(db_file, &copy, &[]);
        let during = count() - before.len();
        // Ingestion goes on after the backup too.
        wait_for(count() + 20);
        stop.store(true, Ordering::Relaxed);
        (before, during, out)
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "backup failed: {stderr}");
    assert!(stderr.contains("backed up") && stderr.contains("quick_check"), "{stderr}");
    assert!(during > 0, "no event was acknowledged while the backup ran: the test proved nothing about a live store");
    let copy = Db::sqlite(copy);
    assert_eq!(sql(&copy, "PRAGMA integrity_check"), "ok");
    assert_eq!(mode(copy.sqlite_file().unwrap()), 0o600, "the copy holds secrets too");

    let restored = TestApp::spawn_on(copy, &app.key, &[]);
    let stored = all_event_ids(&restored, &site);
    let missing: Vec<&String> = before.iter().filter(|id| !stored.contains(id)).collect();
    assert!(missing.is_empty(), "{} of {} events acknowledged before the backup are missing from it", missing.len(), before.len());
    let all_acked = acked.into_inner().unwrap();
    assert!(stored.iter().all(|id| all_acked.contains(id)), "the copy holds an event nobody acknowledged");
    let dashboard = restored.dashboard(&site, "?days=1");
    dashboard.expect(200);
    assert_eq!(dashboard.body["metrics"]["sessions"].as_u64(), Some(stored.len() as u64), "{}", dashboard.text);
}

/// What a restore must bring back: sites, keys (without their use times),
/// every event id, and the analytics answers.
fn snapshot(app: &TestApp, site: &str) -> Value {
    let keys: Vec<Value> = app.get("/v1/keys").expect(200).body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| json!({"id": k["id"], "name": k["name"], "scopes": k["scopes"], "prefix": k["prefix"], "revoked_at": k["revoked_at"]}))
        .collect();
    let mut events = all_event_ids(app, site);
    events.sort();
    json!({
        "sites": app.get("/v1/sites").expect(200).body,
        "keys": keys,
        "events": events,
        "dashboard": app.dashboard(site, "?days=7").expect(200).body,
        "conversions": app.conversions(site, "?days=7&granularity=hour").expect(200).body,
        "ab": app.ab_testing(site, "").expect(200).body,
    })
}

#[test]
fn restoring_a_backup_as_the_readme_says_brings_back_the_store_as_it_was() {
    let mut app = TestApp::spawn();
    // The README's restore replaces the SQLite file and removes its WAL.
    let Some(db_file) = app.sqlite_file().map(Path::to_owned) else { return };
    let site = id(&app.create_site("restore.example.com", "Europe/Paris"));
    app.patch(&format!("/v1/sites/{site}"), &json!({"keep_utm": true})).expect(200);
    app.post("/v1/keys", &json!({"name": "reader", "scopes": ["read"]})).expect(201);
    for n in 0..30 {
        let session = format!("restore-session-{n:03}");
        let variant = if n % 2 == 0 { "control" } else { "offer" };
        track_ok(&app, event(&site, &session, "wall_displayed", json!({"metadata": {"variant": variant}})));
        if n % 3 == 0 {
            track_ok(&app, event(&site, &session, "conversion_allowlist", json!({"metadata": {"variant": variant}})));
        }
    }
    let at_backup = snapshot(&app, &site);
    let copy_dir = tempfile::tempdir().unwrap();
    let copy = copy_dir.path().join("postern-backup.db");
    let out = backup(&db_file, &copy, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The store moves on after the backup; the restore must undo that.
    for n in 0..5 {
        track_ok(&app, event(&site, &format!("after-backup-{n:03}"), "pageview", json!({})));
    }
    app.create_site("later.example.com", "UTC");
    assert_ne!(snapshot(&app, &site), at_backup);

    // README, "Backup and restore": stop, remove the -wal and -shm files, copy the backup in place, start.
    assert_eq!(app.stop(), 0);
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(beside(&db_file, suffix));
    }
    std::fs::copy(&copy, &db_file).unwrap();
    app.start_again();
    assert_eq!(snapshot(&app, &site), at_backup);
    track_ok(&app, event(&site, "after-restore-001", "pageview", json!({})));
}

#[test]
fn a_backup_never_overwrites_a_file_unless_forced_nor_the_database_itself() {
    let app = TestApp::spawn();
    // `postern admin backup` copies an SQLite file.
    let Some(db_file) = app.sqlite_file() else { return };
    app.create_site("force.example.com", "UTC");
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("old-backup.db");
    std::fs::write(&existing, b"yesterday's backup").unwrap();
    let out = backup(db_file, &existing, &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&existing).unwrap(), b"yesterday's backup");

    let out = backup(db_file, &existing, &["--force"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(sql(&Db::sqlite(existing), "SELECT count(*) FROM sites"), "1");

    let out = backup(db_file, db_file, &["--force"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the database itself"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = backup(&dir.path().join("missing.db"), &dir.path().join("new.db"), &[]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no database at"));
    assert!(!dir.path().join("missing.db").exists() && !dir.path().join("new.db").exists());
    app.get("/v1/sites").expect(200);
}

#[test]
fn a_damaged_database_is_refused_at_start_and_a_sound_one_is_checked() {
    let mut app = TestApp::spawn();
    // SQLite's integrity check at start, and a file damaged byte by byte.
    let Some(db_file) = app.sqlite_file().map(Path::to_owned) else { return };
    let site = id(&app.create_site("corrupt.example.com", "UTC"));
    for n in 0..300 {
        track_ok(&app, event(&site, &format!("corrupt-session-{n:04}"), "pageview", json!({})));
    }
    let logs = app.logs();
    assert!(logs.contains("integrity check passed") && logs.contains("took_ms="), "the check and its duration are logged:\n{logs}");
    app.restart_with(&["--skip-integrity-check"]);
    assert!(app.logs().contains("integrity check skipped"));

    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged.db");
    let out = backup(&db_file, &damaged, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Zeroes over the root page of the events table: its B-tree is broken.
    let damaged_db = Db::sqlite(damaged.clone());
    let root: u64 = sql(&damaged_db, "SELECT rootpage FROM sqlite_master WHERE name = 'events'").parse().unwrap();
    let page_size: u64 = sql(&damaged_db, "PRAGMA page_size").parse().unwrap();
    let mut bytes = std::fs::read(&damaged).unwrap();
    let start = ((root - 1) * page_size) as usize;
    bytes[start..start + page_size as usize].fill(0);
    std::fs::write(&damaged, &bytes).unwrap();

    let (ok, stdout, stderr) = serve_until_exit(&damaged, &[]);
    assert!(!ok, "a damaged database must not be served: {stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(stderr.contains("failed its integrity check") && stderr.contains("restore a backup"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let not_a_database = dir.path().join("notes.db");
    std::fs::write(&not_a_database, "these are not the pages you are looking for\n".repeat(200)).unwrap();
    let (ok, stdout, stderr) = serve_until_exit(&not_a_database, &[]);
    assert!(!ok && !stdout.contains("listening"), "{stderr}");
    assert!(stderr.contains("cannot be read") && stderr.contains("not a database"), "{stderr}");
}

#[test]
fn a_new_database_and_its_wal_are_private_and_an_existing_file_keeps_its_mode() {
    let app = TestApp::spawn();
    // The modes of SQLite's files.
    let Some(db_file) = app.sqlite_file() else { return };
    app.create_site("mode.example.com", "UTC");
    for suffix in ["", "-wal", "-shm"] {
        let path = beside(db_file, suffix);
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }

    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared.db");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = admin(&["create-key", "--account", "acme", "--db", shared.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let served = TestApp::spawn_on(Db::sqlite(shared.clone()), &key, &[]);
    served.create_site("mode2.example.com", "UTC");
    assert_eq!(mode(&shared), 0o640, "an operator's choice is kept");
    assert_eq!(mode(&beside(&shared, "-wal")), 0o640, "SQLite gives the WAL the database's mode");
}

/// Free bytes on the file system holding `path`, as the collector reads them.
fn free_bytes(path: &Path) -> u64 {
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) }, 0);
    stat.f_bavail * stat.f_frsize
}

#[test]
fn readyz_fails_below_the_free_disk_threshold_and_metrics_show_the_free_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let free_mib = free_bytes(dir.path()) >> 20;
    let mut app = TestApp::spawn_with(&["--min-free-disk-mb", &(free_mib + 1024).to_string()]);
    // The free space watched is that of the file system holding the SQLite file.
    let Some(db_file) = app.sqlite_file().map(Path::to_owned) else { return };
    let a = get_plain(&app, "/readyz");
    a.expect(503);
    assert_eq!(a.error(), ("UNAVAILABLE".to_owned(), None, "disk_low".to_owned()));
    assert!(a.body["error"]["message"].as_str().unwrap().contains("MiB free"), "{}", a.text);
    let reported = sample(&app.metrics(), "postern_disk_free_bytes");
    let now_free = free_bytes(&db_file) as f64;
    assert!((reported - now_free).abs() < 2e9, "reported {reported}, statvfs says {now_free}");

    app.restart_with(&["--min-free-disk-mb", "0"]);
    get_plain(&app, "/readyz").expect(200);
}

/// Makes the store's writes fail for real, then lets them succeed again:
/// a tiny tmpfs that a filler file fills (as root), or else a file size limit
/// on the collector process (SIGXFSZ ignored, so a write past it fails with EFBIG).
enum FullDisk {
    Tmpfs { mount: tempfile::TempDir, filler: PathBuf },
    FileSizeLimit { dir: tempfile::TempDir },
}

impl FullDisk {
    fn new() -> FullDisk {
        let mount = tempfile::tempdir().unwrap();
        // SAFETY: getuid has no preconditions.
        let root = unsafe { libc::getuid() } == 0;
        if root {
            let ok = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
                .arg(mount.path())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                let filler = mount.path().join("filler");
                return FullDisk::Tmpfs { mount, filler };
            }
        }
        FullDisk::FileSizeLimit { dir: mount }
    }

    /// Where the database goes.
    fn db(&self) -> PathBuf {
        match self {
            FullDisk::Tmpfs { mount, .. } => mount.path().join("postern.db"),
            FullDisk::FileSizeLimit { dir } => dir.path().join("postern.db"),
        }
    }

    /// Leaves about `room` bytes that the store's files may still grow by.
    fn fill(&self, app: &TestApp, room: u64) {
        match self {
            FullDisk::Tmpfs { mount, filler } => {
                let free = free_bytes(mount.path());
                std::fs::write(filler, vec![7u8; free.saturating_sub(room) as usize]).unwrap();
            }
            FullDisk::FileSizeLimit { dir } => {
                let largest = ["", "-wal"].iter().map(|s| std::fs::metadata(dir.path().join(format!("postern.db{s}"))).map_or(0, |m| m.len())).max().unwrap();
                set_file_size_limit(app.pid(), largest + room);
            }
        }
    }

    fn free(&self, app: &TestApp) {
        match self {
            FullDisk::Tmpfs { filler, .. } => std::fs::remove_file(filler).unwrap(),
            FullDisk::FileSizeLimit { .. } => set_file_size_limit(app.pid(), libc::RLIM_INFINITY),
        }
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        if let FullDisk::Tmpfs { mount, .. } = self {
            let _ = Command::new("umount").arg("-l").arg(mount.path()).status();
        }
    }
}

fn set_file_size_limit(pid: u32, bytes: u64) {
    let limit = libc::rlimit { rlim_cur: bytes, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: a valid rlimit for a process of ours; no old value is read.
    let rc = unsafe { libc::prlimit(pid as libc::pid_t, libc::RLIMIT_FSIZE, &limit, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn a_commit_that_fails_for_real_answers_a_generic_503_and_the_collector_recovers() {
    let disk = FullDisk::new();
    let db = Db::fresh(disk.db());
    // A full file system under the SQLite file: on PostgreSQL the collector writes no database file.
    let Some(db_file) = db.sqlite_file().map(Path::to_owned) else { return };
    if let FullDisk::FileSizeLimit { .. } = disk {
        // The collector inherits the ignored signal: past the limit a write fails instead of killing it.
        // SAFETY: setting a signal's disposition to SIG_IGN.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    }
    let out = admin(&["create-key", "--account", "acme", "--db", db_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let app = TestApp::spawn_on(db, &key, &["--rate-limit-api", "0", "--rate-limit-ingest", "0"]);
    let site = id(&app.create_site("full.example.com", "UTC"));
    let mut acked = Vec::new();
    for n in 0..10 {
        acked.push(track_ok(&app, event(&site, &format!("before-full-{n:03}"), "pageview", json!({})))["id"].as_str().unwrap().to_owned());
    }
    disk.fill(&app, 256 * 1024);
    let mut refused = None;
    for n in 0..5000 {
        let a = app.track(&event(&site, &format!("filling-{n:05}"), "pageview", json!({"metadata": {"pad": "x".repeat(1500)}})));
        match a.status.as_u16() {
            201 => acked.push(a.body["id"].as_str().unwrap().to_owned()),
            _ => {
                refused = Some(a);
                break;
            }
        }
    }
    let refused = refused.unwrap_or_else(|| panic!("the store never filled up; log:\n{}", app.logs()));
    refused.expect(503);
    assert_eq!(refused.error(), ("UNAVAILABLE".to_owned(), None, "overloaded".to_owned()));
    assert_eq!(refused.body["error"]["message"], "the write could not be stored, retry shortly");
    for word in ["disk", "full", "database", "I/O", "sqlite"] {
        assert!(!refused.text.to_lowercase().contains(&word.to_lowercase()), "{word} reached the client: {}", refused.text);
    }
    let logs = app.logs();
    assert!(
        logs.contains("database or disk is full") || logs.contains("disk I/O error"),
        "the detail is in the log:\n{logs}"
    );
    let batch = app.batch(&json!([event(&site, "batch-when-full", "pageview", json!({"metadata": {"pad": "y".repeat(1500)}}))]));
    assert_eq!(batch.status.as_u16(), 503, "{}", batch.text);
    assert_eq!(batch.body["error"]["message"], "the write could not be stored, retry shortly");

    disk.free(&app);
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let a = app.track(&event(&site, "after-full-000", "pageview", json!({})));
        if a.status.as_u16() == 201 {
            break a;
        }
        assert!(Instant::now() < deadline, "writes did not recover once space was freed: {}", a.text);
        std::thread::sleep(Duration::from_millis(200));
    };
    acked.push(after.body["id"].as_str().unwrap().to_owned());
    let stored = all_event_ids(&app, &site);
    assert!(acked.iter().all(|id| stored.contains(id)), "an acknowledged event was lost");
    assert_eq!(stored.len(), acked.len(), "an event refused with 503 was stored");
    drop(app);
    assert_eq!(sql(&Db::sqlite(db_file), "PRAGMA integrity_check"), "ok");
}

#[test]
fn settled_deliveries_go_after_ninety_days_and_pending_ones_and_report_runs_stay() {
    let hook = HttpReceiver::start(&[]);
    // No SMTP server: an e-mail's first attempt fails and waits a day for its retry.
    let mut app = TestApp::spawn_with(&[
        "--rate-limit-api", "0", "--delivery-retry-base-ms", "86400000", "--delivery-max-attempts", "2",
        LOOPBACK_HOOKS[0], LOOPBACK_HOOKS[1],
    ]);
    let site = id(&app.create_site("outbox.example.com", "UTC"));
    let a = app.post(&format!("/v1/sites/{site}/integrations"), &json!({"kind": "webhook", "url": hook.url}));
    a.expect(201);
    let hook_id = a.body["id"].as_str().unwrap().to_owned();
    let send = |app: &TestApp| -> String {
        let a = app.post(&format!("/v1/sites/{site}/integrations/{hook_id}/test"), &json!({}));
        a.expect(201);
        a.body["delivery_id"].as_str().unwrap().to_owned()
    };
    let (old, recent) = (send(&app), send(&app));
    let report = app.post(&format!("/v1/sites/{site}/reports"), &json!({"type": "daily", "format": "pdf", "recipients": [{"email": "ana@example.com", "role": "admin"}]}));
    report.expect(201);
    let report_id = report.body["id"].as_str().unwrap().to_owned();
    let run = app.post(&format!("/v1/sites/{site}/reports/{report_id}/send"), &json!({}));
    run.expect(201);
    let run_id = run.body["id"].as_str().unwrap().to_owned();

    let deliveries = |app: &TestApp| app.get(&format!("/v1/sites/{site}/deliveries")).expect(200).body["deliveries"].as_array().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = deliveries(&app);
        let settled = |id: &str| list.iter().any(|d| d["id"] == id && d["state"] == "delivered");
        let mail_tried = list.iter().any(|d| d["channel"] == "email" && d["attempt_count"] == 1);
        if settled(&old) && settled(&recent) && mail_tried {
            break;
        }
        assert!(Instant::now() < deadline, "deliveries did not settle: {list:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mail = deliveries(&app).iter().find(|d| d["channel"] == "email").unwrap().clone();
    assert_eq!(mail["state"], "pending", "{mail:#}");
    let mail_id = mail["id"].as_str().unwrap().to_owned();

    // Back-dated: one delivery settled 91 days ago, the e-mail and the run queued 200 days ago.
    assert_eq!(app.stop(), 0);
    let day_ms = 86_400_000i64;
    let now_ms = chrono::Utc::now().timestamp_millis();
    sql_exec(
        &app.db,
        &format!(
            "UPDATE outbox SET created_at = {c}, finished_at = {f} WHERE id = '{old}';
             UPDATE delivery_attempts SET started_at = {f} WHERE outbox = (SELECT seq FROM outbox WHERE id = '{old}');
             UPDATE outbox SET created_at = {p} WHERE id = '{mail_id}';
             UPDATE report_runs SET created_at = {p} WHERE id = '{run_id}';",
            c = now_ms - 92 * day_ms,
            f = now_ms - 91 * day_ms,
            p = now_ms - 200 * day_ms,
        ),
    );
    let old_seq = sql(&app.db, &format!("SELECT seq FROM outbox WHERE id = '{old}'"));
    let attachments_before: i64 = sql(&app.db, "SELECT count(*) FROM outbox_attachments").parse().unwrap();
    assert!(attachments_before > 0, "the report's e-mail carries its file");

    // The retention job runs at start-up.
    app.start_again();
    let deadline = Instant::now() + Duration::from_secs(30);
    while deliveries(&app).iter().any(|d| d["id"] == old) {
        assert!(Instant::now() < deadline, "the old delivery was not purged; log:\n{}", app.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<String> = deliveries(&app).iter().map(|d| d["id"].as_str().unwrap().to_owned()).collect();
    assert!(left.contains(&recent) && left.contains(&mail_id), "{left:?}");
    assert_eq!(sql(&app.db, &format!("SELECT count(*) FROM delivery_attempts WHERE outbox = {old_seq}")), "0");
    assert_eq!(sql(&app.db, &format!("SELECT count(*) FROM outbox_attachments WHERE outbox = {old_seq}")), "0");
    assert_eq!(sql(&app.db, "SELECT count(*) FROM outbox_attachments").parse::<i64>().unwrap(), attachments_before, "the pending e-mail keeps its file");
    app.get(&format!("/v1/report-runs/{run_id}")).expect(200);
    let runs = app.get(&format!("/v1/sites/{site}/reports/{report_id}/runs"));
    runs.expect(200);
    assert!(runs.body["runs"].as_array().unwrap().iter().any(|r| r["id"] == run_id.as_str()), "{}", runs.text);
    assert!(app.logs().contains("deliveries=1"), "the purge is logged:\n{}", app.logs());
}
