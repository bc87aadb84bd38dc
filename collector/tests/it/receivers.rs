//! Real receivers for the delivery tests, on loopback: an HTTP server that
//! records every request and answers a scripted list of statuses, and a real
//! SMTP server (Python's aiosmtpd) that parses every message it receives.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request as the receiver saw it; header names are lower case.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
    /// The status the receiver answered.
    pub answered: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or_else(|| panic!("no {name} header in {self:?}"))
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

/// How a receiver answers besides its script.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Sent as `Retry-After` (seconds) with every non-2xx answer.
    pub retry_after: Option<u64>,
    /// Requests are recorded at once but answered only after [`HttpReceiver::release`].
    pub held: bool,
}

/// An HTTP/1.1 receiver: answers the scripted statuses in order, then 200.
pub struct HttpReceiver {
    pub url: String,
    seen: Arc<Mutex<Vec<Received>>>,
    /// Whether held requests may be answered now.
    gate: Arc<(Mutex<bool>, Condvar)>,
}

struct Shared {
    seen: Arc<Mutex<Vec<Received>>>,
    script: Mutex<Vec<u16>>,
    options: Options,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl HttpReceiver {
    pub fn start(script: &[u16]) -> HttpReceiver {
        HttpReceiver::start_with(script, Options::default())
    }

    pub fn start_with(script: &[u16], options: Options) -> HttpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the receiver");
        let url = format!("http://{}/hook/secret-token", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new((Mutex::new(!options.held), Condvar::new()));
        let shared = Arc::new(Shared { seen: seen.clone(), script: Mutex::new(script.to_vec()), options, gate: gate.clone() });
        thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let shared = shared.clone();
                thread::spawn(move || serve(stream, &shared));
            }
        });
        HttpReceiver { url, seen, gate }
    }

    /// Lets held requests be answered.
    pub fn release(&self) {
        let (open, cv) = &*self.gate;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }

    pub fn received(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived, and returns them all.
    #[track_caller]
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(Instant::now() < deadline, "expected {n} requests, got {}: {got:#?}", got.len());
            thread::sleep(Duration::from_millis(50));
        }
    }
}

fn serve(stream: TcpStream, shared: &Shared) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned());
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let answered = {
        let mut script = shared.script.lock().unwrap();
        if script.is_empty() { 200 } else { script.remove(0) }
    };
    shared.seen.lock().unwrap().push(Received { method, path, headers, body: String::from_utf8_lossy(&body).into_owned(), answered });
    let (open, cv) = &*shared.gate;
    drop(cv.wait_while(open.lock().unwrap(), |open| !*open).unwrap());
    let retry_after = match shared.options.retry_after {
        Some(secs) if !(200..300).contains(&answered) => format!("Retry-After: {secs}\r\n"),
        _ => String::new(),
    };
    let mut stream = stream;
    let _ = write!(stream, "HTTP/1.1 {answered} Scripted\r\n{retry_after}Content-Length: 2\r\nConnection: close\r\n\r\nok");
}

/// The venv with aiosmtpd, created once per test run by scripts/ensure-test-venv.
fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            let out = Command::new(root.join("scripts/ensure-test-venv")).output().expect("running scripts/ensure-test-venv");
            assert!(out.status.success(), "scripts/ensure-test-venv failed: {}", String::from_utf8_lossy(&out.stderr));
            root.join("target/test-venv/bin/python")
        })
        .clone()
}

/// A real SMTP server; every message it accepts arrives as parsed JSON.
pub struct SmtpReceiver {
    pub port: u16,
    child: Child,
    _stdin: ChildStdin,
    messages: mpsc::Receiver<Value>,
}

impl SmtpReceiver {
    pub fn start() -> SmtpReceiver {
        SmtpReceiver::refusing(&[])
    }

    /// A server that answers the first messages' DATA with these replies
    /// (e.g. `451 4.3.0 Try again later`) instead of accepting them.
    pub fn refusing(replies: &[&str]) -> SmtpReceiver {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/smtp_receiver.py");
        let mut child = Command::new(python())
            .arg(script)
            .args(replies)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the SMTP receiver");
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("the SMTP receiver exited").expect("reading the SMTP receiver");
        let port = first.strip_prefix("listening ").and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("unexpected: {first}"));
        let (tx, messages) = mpsc::channel();
        thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let parsed = serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad receiver line ({e}): {line}"));
                if tx.send(parsed).is_err() {
                    return;
                }
            }
        });
        SmtpReceiver { port, child, _stdin: stdin, messages }
    }

    /// The `serve` flags that send mail here.
    pub fn flags(&self) -> Vec<String> {
        ["--smtp-host", "127.0.0.1", "--smtp-port", &self.port.to_string(), "--smtp-tls", "none", "--smtp-from", "Postern Reports <reports@postern.test>"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[track_caller]
    pub fn next_message(&self, timeout: Duration) -> Value {
        self.messages.recv_timeout(timeout).unwrap_or_else(|e| panic!("no e-mail arrived within {timeout:?}: {e}"))
    }

    /// Messages that arrived so far without waiting.
    pub fn pending(&self) -> Vec<Value> {
        self.messages.try_iter().collect()
    }
}

impl Drop for SmtpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
