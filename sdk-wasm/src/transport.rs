//! Everything that crosses the network, always to the collector (never a
//! third-party host): events, the site config, and the bait request.
//!
//! Events go to `/v1/e` (filter lists block `/v1/events/track` on some
//! collector host names) as a CORS simple request: `fetch` with `keepalive`
//! and a `text/plain` JSON body, so no preflight and the request survives the
//! page being closed. A send that fails for a retryable reason is kept in
//! localStorage and retried on a later page: at most `QUEUE_MAX` events,
//! none older than a day, at most `RESEND_MAX` per page, and after a backoff
//! stored with the queue, so a filter list that blocks the ingestion path
//! never turns into a storm of resends.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use js_sys::{Object, Promise};
use wasm_bindgen::prelude::*;

use crate::detect::{bait, request_probe, RequestProbe, REQUEST_TIMEOUT_MS};
use crate::session::{cut, parse_u64, push_u64};
use crate::{dom, js};

/// Where failed sends wait for a later page: a first line `~NEXT BACKOFF`
/// (the time before which nothing is resent, and the last wait, in ms),
/// then one event per line, `QUEUED_AT BODY` (`JSON.stringify` never
/// writes a raw line break).
const QUEUE_KEY: &str = "postern:q";
/// Oldest events are dropped past this many: a visitor offline for a long
/// time must not grow the page's storage without bound.
const QUEUE_MAX: usize = 50;
/// An event older than this is dropped rather than sent.
const QUEUE_MAX_AGE_MS: u64 = 24 * 3600 * 1000;
/// Events resent by one page, at most.
const RESEND_MAX: u32 = 10;
/// The first wait after a failed send, doubled at each failure up to `BACKOFF_MAX_MS`.
const BACKOFF_MIN_MS: u64 = 30 * 1000;
const BACKOFF_MAX_MS: u64 = 6 * 3600 * 1000;

/// Events this page has resent so far.
static RESENT: AtomicU32 = AtomicU32::new(0);

/// The collector's base URL as the JS helpers take it: the endpoint without
/// a trailing slash, as a JS string they append their paths to.
pub fn base(endpoint: &str) -> JsValue {
    JsValue::from_str(endpoint.strip_suffix("/").unwrap_or(endpoint))
}

/// One event's JSON body, built with the browser's own JSON.
/// A JS string: it goes to `fetch` as it is, and into Rust only if it must wait in the queue.
pub fn event_body(site_id: &str, session_id: &str, event_type: &str, metadata: &Object, keep_utm: bool) -> JsValue {
    let o = Object::new();
    js::set(&o, "event_id", &dom::uuid());
    js::set_str(&o, "site_id", site_id);
    js::set_str(&o, "session_id", session_id);
    js::set_str(&o, "event_type", event_type);
    js::set_str(&o, "page_url", &page_url(&dom::href(), keep_utm));
    js::set(&o, "metadata", metadata);
    js::stringify(&o)
}

/// The page's URL as it leaves the browser: without its query string and
/// fragment (tokens, e-mail addresses and search terms live there), but with
/// its `utm_*` parameters when the site asks for them (`keepUtm`).
pub fn page_url(href: &str, keep_utm: bool) -> String {
    let href = cut(href, b'#').map_or(href, |(h, _)| h);
    let Some((base, query)) = cut(href, b'?') else { return href.into() };
    let mut url = String::from(base);
    let mut rest = Some(query);
    while let Some(r) = rest {
        let (pair, next) = cut(r, b'&').map_or((r, None), |(p, n)| (p, Some(n)));
        if keep_utm && pair.starts_with("utm_") {
            url.push(if url.len() == base.len() { '?' } else { '&' });
            url.push_str(pair);
        }
        rest = next;
    }
    url
}

// Events go out as a `text/plain` POST without cookies that outlives the
// page (`keepalive`), to `/v1/e` under the collector's base URL `e`. `post` resolves to the answer's status, 0 when the
// request failed (offline, blocked): its failure is taken as a value at
// once, since a rejection that nothing handles yet is logged by the browser
// as an error of the page. `beacon` hands the body to `sendBeacon` when
// the collector is the page's own origin and falls back on `post`.
#[wasm_bindgen(inline_js = "export const post = (e, b) =>
  fetch(e + '/v1/e', { credentials: 'omit', method: 'POST', body: b, keepalive: true }).then((r) => r.status, () => 0);
export function beacon(e, b) {
  (e == location.origin && navigator.sendBeacon(e + '/v1/e', b)) || post(e, b);
}")]
extern "C" {
    fn post(base: &JsValue, body: &JsValue) -> Promise;
    fn beacon(base: &JsValue, body: &str);
}

/// Sends one event queued at `queued_at` (now, for a new one); on a
/// retryable failure (offline, refused by the network, rate limited, a
/// server error) it joins the queue and the backoff grows. A 4xx is the
/// collector refusing the event itself: resending cannot help.
pub async fn send(base: &JsValue, body: JsValue, queued_at: f64) {
    let status = crate::task::settle(post(base, &body)).await;
    let retry = matches!(status.as_f64().unwrap_or(0.0) as u16, 0 | 429 | 500..=599);
    let stored = dom::load(QUEUE_KEY).unwrap_or_default();
    let body = body.as_string().unwrap_or_default();
    let mut q = Queue::parse(&stored);
    let now = dom::now_ms() as u64;
    if retry {
        q.failed(now);
        q.add(now, queued_at as u64, &body);
    } else if q.backoff_ms == 0 {
        // The collector takes events again; nothing to reset.
        return;
    } else {
        q.backoff_ms = 0;
        q.next_ms = 0;
    }
    dom::store(QUEUE_KEY, &q.serialize());
}

/// The stored retry queue.
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Queue<'a> {
    /// Nothing is resent before this time (ms since the epoch).
    next_ms: u64,
    /// The wait set at the last failure; 0 after a success.
    backoff_ms: u64,
    /// (queued at, event body), oldest first.
    events: Vec<(u64, &'a str)>,
}

impl<'a> Queue<'a> {
    /// What an older SDK stored (bodies without their time) is dropped.
    fn parse(stored: &'a str) -> Queue<'a> {
        let mut q = Queue { next_ms: 0, backoff_ms: 0, events: Vec::new() };
        let mut rest = Some(stored);
        while let Some(r) = rest {
            let (line, next) = cut(r, b'\n').map_or((r, None), |(l, n)| (l, Some(n)));
            rest = next;
            let Some((a, b)) = cut(line, b' ') else { continue };
            if let Some(next) = a.strip_prefix("~") {
                q.next_ms = parse_u64(next.as_bytes()).unwrap_or(0);
                q.backoff_ms = parse_u64(b.as_bytes()).unwrap_or(0);
            } else if let (Some(at), true) = (parse_u64(a.as_bytes()), b.starts_with("{")) {
                q.events.push((at, b));
            }
        }
        q
    }

    fn serialize(&self) -> String {
        let mut s = String::from("~");
        push_u64(&mut s, self.next_ms);
        s.push(' ');
        push_u64(&mut s, self.backoff_ms);
        for (at, body) in &self.events {
            s.push('\n');
            push_u64(&mut s, *at);
            s.push(' ');
            s.push_str(body);
        }
        s
    }

    /// Adds an event, dropping those older than a day and the oldest past `QUEUE_MAX`.
    fn add(&mut self, now: u64, queued_at: u64, body: &'a str) {
        self.events.push((queued_at, body));
        self.drop_old(now);
        self.take_front(self.events.len().saturating_sub(QUEUE_MAX));
    }

    /// Drops the events older than a day. One function for `add` and `take`:
    /// each closure given to `retain` is a copy of it in the wasm.
    fn drop_old(&mut self, now: u64) {
        self.events.retain(|(at, _)| now.saturating_sub(*at) <= QUEUE_MAX_AGE_MS);
    }

    /// Takes the `n` oldest events out (all of them when there are fewer).
    fn take_front(&mut self, n: usize) -> Vec<(u64, &'a str)> {
        let rest = self.events.split_off(n.min(self.events.len()));
        core::mem::replace(&mut self.events, rest)
    }

    /// A send failed: the next resend waits twice as long as the last wait
    /// (30 s first, 6 h at most). Failures during a wait (the page's other
    /// events) do not lengthen it again.
    fn failed(&mut self, now: u64) {
        if now < self.next_ms {
            return;
        }
        self.backoff_ms = (self.backoff_ms.saturating_mul(2)).clamp(BACKOFF_MIN_MS, BACKOFF_MAX_MS);
        self.next_ms = now.saturating_add(self.backoff_ms);
    }

    /// Takes up to `budget` of the oldest events still young enough, unless
    /// the backoff is still running.
    fn take(&mut self, now: u64, budget: usize) -> Vec<(u64, &'a str)> {
        if now < self.next_ms {
            return Vec::new();
        }
        self.drop_old(now);
        self.take_front(budget)
    }
}

/// Takes what may be resent now out of storage (so two tabs do not both
/// resend it) and hands each event body and its queue time to `f`. Events
/// carry their `event_id`, so a copy that did arrive after all is counted once.
/// `f` is a trait object: one copy of this function in the wasm for its two callers.
pub fn take_queue(f: &mut dyn FnMut(&str, f64)) {
    let Some(stored) = dom::load(QUEUE_KEY).filter(|s| !s.is_empty()) else { return };
    let mut q = Queue::parse(&stored);
    let budget = RESEND_MAX.saturating_sub(RESENT.load(Ordering::Relaxed));
    let taken = q.take(dom::now_ms() as u64, budget as usize);
    if taken.is_empty() {
        return;
    }
    RESENT.fetch_add(taken.len() as u32, Ordering::Relaxed);
    dom::store(QUEUE_KEY, &q.serialize());
    for (at, body) in taken {
        f(body, at as f64);
    }
}

/// On `pagehide`: hands the queue to the browser in a form that outlives the
/// page. `sendBeacon` only to the page's own origin: filter lists block
/// third-party beacons (`$ping,third-party`), and keepalive fetch outlives
/// the page just as well.
pub fn flush_on_exit(base: &JsValue) {
    take_queue(&mut |body, _| beacon(base, body));
}

// The probe requests (the bait sets', then the control's) at the same time,
// each with a fresh nonce and past the HTTP cache (a cached answer would say
// the collector is reachable when it is not); they give up after `ms` by
// themselves (`AbortSignal.timeout`, no Rust timer). Each resolves to
// `[status, body, nonce]`, `null` when the browser refused it, or
// undefined when it timed out or its body could not be read.
#[wasm_bindgen(inline_js = "export function probes(base, a, b, c, ms) {
  const s = AbortSignal.timeout(ms);
  return Promise.all(
    [a, b, c].map((p) => {
      const n = crypto.getRandomValues(new Uint32Array(2)).join('x');
      return fetch(base + p + '?n=' + n, { credentials: 'omit', cache: 'no-store', signal: s }).then(
        (r) => r.text().then((t) => [r.status, t, n], () => {}),
        () => (s.aborted ? undefined : null),
      );
    }),
  );
}")]
extern "C" {
    fn probes(base: &JsValue, a: &str, b: &str, control: &str, ms: u32) -> Promise;
}

/// Requests the bait scripts and the control, all at once.
pub fn start_probe(base: &JsValue) -> Promise {
    let [a, b] = bait::PATHS;
    probes(base, a, b, bait::CONTROL_PATH, REQUEST_TIMEOUT_MS)
}

/// What became of the probe requests, together (see `detect::requests`):
/// the nonce each answer must carry is checked here.
pub async fn finish_probe(probe: Promise) -> RequestProbe {
    let answers = crate::task::settle(probe).await;
    let [a, b, control] = [0, 1, 2].map(|i| {
        let answer = js::at(&answers, i);
        if answer.is_null() {
            return RequestProbe::Blocked;
        }
        match (js::at(&answer, 1).as_string(), js::at(&answer, 2).as_string()) {
            (Some(body), Some(nonce)) => request_probe(js::at(&answer, 0).as_f64().unwrap_or(0.0) as u16, &body, &nonce),
            _ => RequestProbe::Undecided,
        }
    });
    crate::detect::requests([a, b], control, dom::online())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60 * 1000;

    #[test]
    fn the_queue_keeps_the_newest_events_of_the_last_day() {
        let mut q = Queue::parse("");
        let bodies: Vec<String> = (0..QUEUE_MAX + 5).map(|i| format!("{{\"n\":{i}}}")).collect();
        for (i, b) in bodies.iter().enumerate() {
            q.add(1000 * MIN, 1000 * MIN + i as u64, b);
        }
        let stored = q.serialize();
        let q = Queue::parse(&stored);
        assert_eq!(q.events.len(), QUEUE_MAX);
        assert_eq!(q.events[0].1, "{\"n\":5}");
        assert_eq!(q.events[QUEUE_MAX - 1].1, format!("{{\"n\":{}}}", QUEUE_MAX + 4));

        let mut q = Queue::parse("");
        let now = 2000 * MIN;
        q.add(now, now - QUEUE_MAX_AGE_MS - 1, "{\"old\":1}");
        q.add(now, now - QUEUE_MAX_AGE_MS + 1, "{\"young\":1}");
        assert_eq!(q.events, vec![(now - QUEUE_MAX_AGE_MS + 1, "{\"young\":1}")]);
        // A day later, at the next page, it is dropped rather than sent.
        assert!(q.take(now + QUEUE_MAX_AGE_MS, 10).is_empty());
        assert!(q.events.is_empty());
    }

    #[test]
    fn what_an_older_sdk_stored_is_dropped() {
        assert!(Queue::parse("{\"n\":1}\n[\"{}\"]").events.is_empty());
        assert_eq!(Queue::parse("~5 7\n12 {\"n\":1}"), Queue { next_ms: 5, backoff_ms: 7, events: vec![(12, "{\"n\":1}")] });
    }

    #[test]
    fn resends_wait_a_backoff_that_doubles_up_to_six_hours() {
        let mut q = Queue::parse("");
        let mut now = 1000 * MIN;
        q.add(now, now, "{}");
        q.failed(now);
        assert_eq!((q.backoff_ms, q.next_ms), (30 * 1000, now + 30 * 1000));
        // The page's other failures during the wait do not lengthen it.
        q.failed(now + 1000);
        assert_eq!(q.backoff_ms, 30 * 1000);
        assert!(q.take(now + 29 * 1000, 10).is_empty(), "nothing is resent during the wait");
        assert_eq!(q.events.len(), 1);
        let mut waits = Vec::new();
        for _ in 0..12 {
            now = q.next_ms;
            assert_eq!(q.take(now, 10).len(), 1);
            q.add(now, now, "{}");
            q.failed(now);
            waits.push(q.backoff_ms / 1000);
        }
        assert_eq!(waits, [60, 120, 240, 480, 960, 1920, 3840, 7680, 15360, 21600, 21600, 21600]);
    }

    #[test]
    fn a_page_resends_ten_events_at_most() {
        let mut q = Queue::parse("");
        let now = 1000 * MIN;
        for i in 0..QUEUE_MAX {
            q.add(now, now + i as u64, "{}");
        }
        let taken = q.take(now + MIN, RESEND_MAX as usize);
        assert_eq!(taken.len(), 10);
        assert_eq!(taken[0].0, now, "the oldest first");
        assert_eq!(q.events.len(), QUEUE_MAX - 10);
    }

    #[test]
    fn page_urls_leave_without_query_and_fragment() {
        let href = "https://news.example/a/b?token=s3cret&utm_source=nl&q=x&utm_medium=mail#me@example.com";
        assert_eq!(page_url(href, false), "https://news.example/a/b");
        assert_eq!(page_url(href, true), "https://news.example/a/b?utm_source=nl&utm_medium=mail");
        assert_eq!(page_url("https://news.example/?q=1", true), "https://news.example/");
        assert_eq!(page_url("https://news.example/#x?utm_source=a", true), "https://news.example/");
        assert_eq!(page_url("https://news.example/a", true), "https://news.example/a");
    }
}
