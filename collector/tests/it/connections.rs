//! Connections (issue 34 item 1): stalled headers and slow bodies are cut by
//! their deadlines, and beyond `--max-connections` new clients wait instead
//! of the process falling over.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::*;

fn addr(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

/// Reads until EOF, an error or `wait`; true when the server closed the connection.
fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn a_thousand_stalled_headers_are_dropped_and_others_are_served_meanwhile() {
    let app = TestApp::spawn_with(&["--header-read-timeout", "2"]);
    let started = Instant::now();
    let mut stalled: Vec<TcpStream> = (0..1100)
        .map(|_| {
            let mut s = TcpStream::connect(addr(&app)).expect("connect");
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: stalled\r\nX-Half: ").unwrap();
            s
        })
        .collect();
    let opened = started.elapsed();
    // A normal client is served while they hang.
    let t = Instant::now();
    app.get("/healthz").expect(200);
    assert!(t.elapsed() < Duration::from_secs(2), "healthz took {:?} beside 1,100 stalled connections", t.elapsed());
    // Each stalled one is closed about two seconds after it opened.
    let deadline = Duration::from_secs(2) + opened + Duration::from_secs(5);
    let mut still_open = 0;
    for s in &mut stalled {
        if !closed_within(s, deadline.saturating_sub(started.elapsed()).max(Duration::from_millis(10))) {
            still_open += 1;
        }
    }
    assert_eq!(still_open, 0, "stalled connections still open after {:?}", started.elapsed());
    app.get("/healthz").expect(200);
    assert!(app.logs().lines().all(|l| !l.contains("panicked")), "{}", app.logs());
}

#[test]
fn an_idle_kept_alive_connection_is_closed_after_the_header_timeout() {
    let app = TestApp::spawn_with(&["--header-read-timeout", "2"]);
    let mut s = TcpStream::connect(addr(&app)).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: idle\r\n\r\n").unwrap();
    let mut buf = [0u8; 1024];
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let n = s.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    let t = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(6)), "the idle connection was kept");
    assert!(t.elapsed() >= Duration::from_millis(1500), "closed too early: {:?}", t.elapsed());
}

#[test]
fn a_body_sent_too_slowly_is_cut_at_the_body_deadline() {
    let app = TestApp::spawn_with(&["--body-read-timeout", "2"]);
    let mut s = TcpStream::connect(addr(&app)).unwrap();
    s.write_all(b"POST /v1/events/track HTTP/1.1\r\nHost: slow\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"site_id\"").unwrap();
    let t = Instant::now();
    // A byte a second would keep a connection forever without the deadline.
    let mut answer = Vec::new();
    s.set_read_timeout(Some(Duration::from_millis(900))).unwrap();
    while t.elapsed() < Duration::from_secs(8) {
        let _ = s.write_all(b" ");
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        if !answer.is_empty() {
            break;
        }
    }
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(6), "cut after {took:?}");
    let text = String::from_utf8_lossy(&answer);
    assert!(answer.is_empty() || text.starts_with("HTTP/1.1 4"), "{text}");
    app.get("/healthz").expect(200);
}

#[test]
fn beyond_max_connections_a_client_waits_and_is_served_once_others_close() {
    let app = TestApp::spawn_with(&["--max-connections", "50", "--header-read-timeout", "60"]);
    let mut held: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = TcpStream::connect(addr(&app)).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: held\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // Connection 51: the kernel takes it, the server does not serve it yet.
    let mut waiting = TcpStream::connect(addr(&app)).unwrap();
    waiting.write_all(b"GET /healthz HTTP/1.1\r\nHost: waiting\r\nConnection: close\r\n\r\n").unwrap();
    waiting.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 1024];
    let early = waiting.read(&mut buf);
    assert!(early.is_err(), "served beyond the cap: {early:?}");
    held.truncate(40);
    waiting.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let n = waiting.read(&mut buf).expect("served once others closed");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    drop(held);
    app.get("/healthz").expect(200);
}
