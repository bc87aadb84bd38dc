//! `serve --demo` signs in an Admin whose password is in the README: it
//! refuses to listen beyond loopback unless told `--demo-public`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{sql, Db, BIN};

/// Whether a refused start left the database as it was: no file on SQLite, no table on PostgreSQL.
fn untouched(db: &Db) -> bool {
    match db.sqlite_file() {
        Some(file) => !file.exists(),
        None => sql(db, "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')") == "0",
    }
}

#[test]
fn the_demo_refuses_a_public_address_unless_asked_explicitly() {
    let dir = tempfile::tempdir().unwrap();
    let database = Db::fresh(dir.path().join("demo.db"));
    let db: &str = &database.to_string();
    let refusals = [
        (vec!["serve", "--demo", "--db", db, "--listen", "0.0.0.0:0"], vec![]),
        (vec!["serve", "--demo", "--db", db, "--listen", "[::]:0"], vec![]),
        (vec!["serve", "--db", db], vec![("POSTERN_DEMO", "true"), ("POSTERN_LISTEN", "0.0.0.0:0")]),
    ];
    for (args, env) in refusals {
        let out = Command::new(BIN).args(&args).envs(env.iter().copied()).stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?} {env:?} must exit 1; stderr: {stderr}");
        assert!(stderr.contains("postern-demo") && stderr.contains("--demo-public"), "a clear message: {stderr}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("listening"), "it never listened");
        assert!(untouched(&database), "nothing was seeded");
    }

    // Asked explicitly, it serves on every address.
    let log = dir.path().join("demo-public.log");
    let mut child = Command::new(BIN)
        .args(["serve", "--demo", "--demo-public", "--db", db, "--listen", "0.0.0.0:0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let listening = loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) if line.starts_with("postern listening on ") => break line,
            Ok(_) => continue,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the public demo did not start: {e}; log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(listening.starts_with("postern listening on http://0.0.0.0:"), "{listening}");
}
