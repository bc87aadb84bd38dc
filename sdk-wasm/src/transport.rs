//! Everything that crosses the network, always to the collector (never a
//! third-party host): events, the site config, and the bait request.
//!
//! Events go to `/v1/e` (filter lists block `/v1/events/track` on some
//! collector host names) as a CORS simple request: `fetch` with `keepalive`
//! and a `text/plain` JSON body, so no preflight and the request survives the
//! page being closed. A send that fails for a retryable reason is kept in
//! localStorage (bounded) and retried on the next page load.

use alloc::string::String;
use alloc::vec::Vec;

use js_sys::{Array, Object, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{AbortSignal, Response};

use crate::detect::{bait, request_probe, RequestProbe, REQUEST_TIMEOUT_MS};
use crate::{dom, js};

/// Where failed sends wait for the next page: event bodies, one per line
/// (`JSON.stringify` never writes a raw line break).
const QUEUE_KEY: &str = "postern:q";
/// Oldest events are dropped past this many: a visitor offline for a long
/// time must not grow the page's storage without bound.
const QUEUE_MAX: usize = 50;

pub const EVENTS_PATH: &str = "/v1/e";

/// The endpoint without a trailing slash.
fn origin(endpoint: &str) -> &str {
    endpoint.strip_suffix("/").unwrap_or(endpoint)
}

pub fn join(endpoint: &str, path: &str) -> String {
    let mut url = String::with_capacity(endpoint.len() + path.len());
    url.push_str(origin(endpoint));
    url.push_str(path);
    url
}

/// One event's JSON body, built with the browser's own JSON.
/// A JS string: it goes to `fetch` as it is, and into Rust only if it must wait in the queue.
pub fn event_body(site_id: &str, session_id: &str, event_type: &str, metadata: &Object) -> JsValue {
    let o = Object::new();
    js::set_str(&o, "event_id", &dom::uuid_v4());
    js::set_str(&o, "site_id", site_id);
    js::set_str(&o, "session_id", session_id);
    js::set_str(&o, "event_type", event_type);
    js::set_str(&o, "page_url", &dom::href());
    js::set(&o, "metadata", metadata);
    js::stringify(&o)
}

/// A request without cookies; with a body it is a `text/plain` POST that
/// outlives the page (`keepalive`). A plain object: web-sys's `RequestInit`
/// setters would each be one more import.
fn request(body: Option<&JsValue>) -> Object {
    let init = Object::new();
    js::set_str(&init, "credentials", "omit");
    if let Some(b) = body {
        js::set_str(&init, "method", "POST");
        js::set(&init, "body", b);
        js::set(&init, "keepalive", &JsValue::TRUE);
    }
    init
}

/// `fetch`, its failure (offline, blocked) taken as a value at once: a
/// rejection that nothing handles yet is logged by the browser as an error
/// of the page. Resolves to `[{status, value}]`; see `response`.
fn fetch(url: &str, init: &Object) -> Option<Promise> {
    let p = dom::window().ok()?.fetch_with_str_and_init(url, init.unchecked_ref());
    Some(Promise::all_settled(&Array::of1(&p)))
}

/// The `Response` of a request started by `fetch`, `None` when it failed.
pub async fn response(request: Promise) -> Option<Response> {
    let settled = crate::task::settle(request).await.ok()?;
    let value = js::get(&js::at(&settled, 0), "value");
    value.is_object().then(|| value.unchecked_into())
}

/// Sends one event; on a retryable failure (offline, refused by the network,
/// rate limited, a server error) it joins the queue. A 4xx is the
/// collector refusing the event itself: resending cannot help. True when
/// the collector answered (an event's answer never comes from a cache).
pub async fn send(endpoint: &str, body: JsValue) -> bool {
    let answer = match fetch(&join(endpoint, EVENTS_PATH), &request(Some(&body))) {
        Some(p) => response(p).await.map(|r| r.status()),
        None => None,
    };
    if answer.is_none_or(|s| matches!(s, 429 | 500..=599)) {
        enqueue(&body.as_string().unwrap_or_default());
    }
    answer.is_some()
}

fn enqueue(body: &str) {
    dom::store(QUEUE_KEY, &queue_with(&dom::load(QUEUE_KEY).unwrap_or_default(), body));
}

/// The event bodies of a stored queue (what an older SDK stored, a JSON
/// array, is not one and is dropped).
fn lines(queue: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = queue;
    loop {
        let (line, next) = crate::session::cut(rest, b'\n').map_or((rest, None), |(l, r)| (l, Some(r)));
        if line.starts_with("{") {
            out.push(line);
        }
        let Some(next) = next else { return out };
        rest = next;
    }
}

/// The stored queue with `body` added, the oldest dropped past `QUEUE_MAX`.
fn queue_with(queue: &str, body: &str) -> String {
    let old = lines(queue);
    let mut q = String::new();
    for l in old.iter().skip((old.len() + 1).saturating_sub(QUEUE_MAX)) {
        q.push_str(l);
        q.push('\n');
    }
    q.push_str(body);
    q
}

/// Takes the queue out of storage (so two tabs do not both resend it) and
/// hands each event body to `f`. Events carry their `event_id`, so a copy
/// that did arrive after all is counted once.
pub fn take_queue(mut f: impl FnMut(&str)) {
    let q = dom::load(QUEUE_KEY).unwrap_or_default();
    if !q.is_empty() {
        dom::store(QUEUE_KEY, "");
    }
    for body in lines(&q) {
        f(body);
    }
}

/// On `pagehide`: hands the queue to the browser in a form that outlives the
/// page. `sendBeacon` only to the page's own origin: filter lists block
/// third-party beacons (`$ping,third-party`), and keepalive fetch outlives
/// the page just as well.
pub fn flush_on_exit(endpoint: &str) {
    let Ok(w) = dom::window() else { return };
    let same_origin = origin(endpoint) == dom::location_str("origin");
    let url = join(endpoint, EVENTS_PATH);
    take_queue(|body| {
        // Same origin: `url` is the page's own origin's, a URL `sendBeacon` cannot refuse.
        let beaconed = same_origin && js::dom(&w.navigator()).send_beacon(&url, body);
        if !beaconed {
            let _ = fetch(&url, &request(Some(&JsValue::from_str(body))));
        }
    });
}

/// The bait request in flight, with its nonce.
pub struct Probe {
    response: Promise,
    signal: AbortSignal,
    nonce: String,
}

/// Requests the bait script with a fresh nonce; it gives up after
/// `REQUEST_TIMEOUT_MS` by itself (`AbortSignal.timeout`, no Rust timer).
pub fn start_probe(endpoint: &str) -> Option<Probe> {
    let mut nonce = String::with_capacity(16);
    for b in dom::random_bytes::<8>() {
        dom::push_hex(&mut nonce, b);
    }
    let mut url = join(endpoint, bait::PATH);
    url.push_str("?n=");
    url.push_str(&nonce);
    let init = request(None);
    js::set_str(&init, "cache", "no-store");
    let signal = AbortSignal::timeout_with_u32(REQUEST_TIMEOUT_MS);
    js::set(&init, "signal", &signal);
    Some(Probe { response: fetch(&url, &init)?, signal, nonce })
}

/// What became of the bait request. `reachable` says whether the collector
/// answered an event: if it did not, a failed bait request says
/// nothing about blockers.
pub async fn finish_probe(probe: Option<Probe>, reachable: bool) -> RequestProbe {
    let Some(p) = probe else { return RequestProbe::Undecided };
    match response(p.response).await {
        None if p.signal.aborted() || !reachable => RequestProbe::Undecided,
        None => RequestProbe::Blocked,
        Some(r) => {
            let text = crate::task::settle(js::dom(&r).text()).await.ok().and_then(|t| t.as_string());
            text.map_or(RequestProbe::Undecided, |t| request_probe(r.status(), &t, &p.nonce))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_join_without_double_slashes() {
        assert_eq!(join("https://c.example.com/", "/v1/e"), "https://c.example.com/v1/e");
        assert_eq!(join("https://c.example.com", "/v1/e"), "https://c.example.com/v1/e");
    }

    #[test]
    fn the_queue_keeps_the_newest_events_one_per_line() {
        let one = queue_with("", "{\"n\":0}");
        assert_eq!(one, "{\"n\":0}");
        // What an older SDK stored (a JSON array) is dropped, not sent.
        assert_eq!(queue_with("[\"{}\"]", "{\"n\":1}"), "{\"n\":1}");
        let mut q = String::new();
        for i in 0..QUEUE_MAX + 5 {
            q = queue_with(&q, &format!("{{\"n\":{i}}}"));
        }
        let lines = lines(&q);
        assert_eq!(lines.len(), QUEUE_MAX);
        assert_eq!(lines[0], "{\"n\":5}");
        assert_eq!(lines[QUEUE_MAX - 1], format!("{{\"n\":{}}}", QUEUE_MAX + 4));
    }


}
