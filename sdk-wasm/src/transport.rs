//! Everything that crosses the network, always to the collector (never a
//! third-party host): events, the site config, and the bait request.
//!
//! Events go to `/v1/e` (filter lists block `/v1/events/track` on some
//! collector host names) as a CORS simple request: `fetch` with `keepalive`
//! and a `text/plain` JSON body, so no preflight and the request survives the
//! page being closed. A send that fails for a retryable reason is kept in
//! localStorage (bounded) and retried on the next page load.

use js_sys::{Array, Object, Reflect, JSON};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortController, RequestCredentials, RequestInit, Response};

use crate::detect::{bait, request_probe, RequestProbe, REQUEST_TIMEOUT_MS};
use crate::dom;

/// Where failed sends wait for the next page.
const QUEUE_KEY: &str = "postern:q";
/// Oldest events are dropped past this many: a visitor offline for a long
/// time must not grow the page's storage without bound.
const QUEUE_MAX: u32 = 50;

pub const EVENTS_PATH: &str = "/v1/e";

pub fn join(endpoint: &str, path: &str) -> String {
    let mut url = String::with_capacity(endpoint.len() + path.len());
    url.push_str(endpoint.trim_end_matches('/'));
    url.push_str(path);
    url
}

/// One event's JSON body, built with the browser's own JSON.
pub fn event_body(site_id: &str, session_id: &str, event_type: &str, metadata: &Object) -> String {
    let o = Object::new();
    let set = |k: &str, v: &JsValue| {
        let _ = Reflect::set(&o, &JsValue::from_str(k), v);
    };
    set("event_id", &JsValue::from_str(&dom::uuid_v4()));
    set("site_id", &JsValue::from_str(site_id));
    set("session_id", &JsValue::from_str(session_id));
    set("event_type", &JsValue::from_str(event_type));
    set("page_url", &JsValue::from_str(&dom::href()));
    set("metadata", metadata);
    JSON::stringify(&o).ok().and_then(|s| s.as_string()).unwrap_or_default()
}

enum Outcome {
    Sent,
    /// Offline, refused by the network, rate limited or a server error.
    Retry,
    /// The collector refused the event itself (4xx): resending cannot help.
    Drop,
}

async fn post(url: &str, body: &str) -> Outcome {
    let Ok(w) = dom::window() else { return Outcome::Retry };
    let init = RequestInit::new();
    init.set_method("POST");
    init.set_body(&JsValue::from_str(body));
    keepalive(&init);
    init.set_credentials(RequestCredentials::Omit);
    match JsFuture::from(w.fetch_with_str_and_init(url, &init)).await {
        Ok(r) => match r.unchecked_into::<Response>().status() {
            200..=299 => Outcome::Sent,
            429 | 500..=599 => Outcome::Retry,
            _ => Outcome::Drop,
        },
        Err(_) => Outcome::Retry,
    }
}

/// `keepalive` lets the request outlive the page (web-sys has no setter for it).
fn keepalive(init: &RequestInit) {
    let _ = Reflect::set(init, &JsValue::from_str("keepalive"), &JsValue::TRUE);
}

/// Sends one event; on a retryable failure it joins the queue.
pub async fn send(endpoint: &str, body: String) {
    if let Outcome::Retry = post(&join(endpoint, EVENTS_PATH), &body).await {
        enqueue(&body);
    }
}

fn queued() -> Array {
    dom::load(QUEUE_KEY)
        .and_then(|s| JSON::parse(&s).ok())
        .and_then(|v| v.dyn_into::<Array>().ok())
        .unwrap_or_default()
}

fn save_queue(q: &Array) {
    if q.length() == 0 {
        dom::store(QUEUE_KEY, "[]");
    } else if let Some(s) = JSON::stringify(q).ok().and_then(|s| s.as_string()) {
        dom::store(QUEUE_KEY, &s);
    }
}

fn enqueue(body: &str) {
    let q = queued();
    q.push(&JsValue::from_str(body));
    while q.length() > QUEUE_MAX {
        q.shift();
    }
    save_queue(&q);
}

/// Takes the queue out of storage (so two tabs do not both resend it).
fn take_queue() -> Vec<String> {
    let q = queued();
    if q.length() > 0 {
        save_queue(&Array::new());
    }
    q.iter().filter_map(|v| v.as_string()).collect()
}

/// Resends what earlier pages could not deliver; events carry their
/// `event_id`, so a copy that did arrive after all is counted once.
pub async fn flush(endpoint: &str) {
    for body in take_queue() {
        send(endpoint, body).await;
    }
}

/// On `pagehide`: hands the queue to the browser in a form that outlives the
/// page. `sendBeacon` only to the page's own origin: filter lists block
/// third-party beacons (`$ping,third-party`), and keepalive fetch outlives
/// the page just as well.
pub fn flush_on_exit(endpoint: &str) {
    let Ok(w) = dom::window() else { return };
    let same_origin = w.location().origin().is_ok_and(|o| endpoint.trim_end_matches('/') == o);
    let url = join(endpoint, EVENTS_PATH);
    for body in take_queue() {
        let beaconed = same_origin && w.navigator().send_beacon_with_opt_str(&url, Some(&body)).unwrap_or(false);
        if !beaconed {
            let init = RequestInit::new();
            init.set_method("POST");
            init.set_body(&JsValue::from_str(&body));
            keepalive(&init);
            init.set_credentials(RequestCredentials::Omit);
            let _ = w.fetch_with_str_and_init(&url, &init);
        }
    }
}

/// GETs a JSON document from the collector; `None` when unreachable or not 2xx.
pub async fn get_json(url: &str) -> Option<JsValue> {
    let w = dom::window().ok()?;
    let init = RequestInit::new();
    init.set_credentials(RequestCredentials::Omit);
    let r: Response = JsFuture::from(w.fetch_with_str_and_init(url, &init)).await.ok()?.unchecked_into();
    if !r.ok() {
        return None;
    }
    JsFuture::from(r.json().ok()?).await.ok()
}

/// Requests the bait script with a fresh nonce. `reachable` says whether the
/// collector answered the config request: if it did not, a failed bait
/// request says nothing about blockers.
pub async fn probe_request(endpoint: &str, reachable: bool) -> RequestProbe {
    let Ok(w) = dom::window() else { return RequestProbe::Undecided };
    let Ok(abort) = AbortController::new() else { return RequestProbe::Undecided };
    let nonce = hex(&dom::random_bytes::<8>());
    let mut url = join(endpoint, bait::PATH);
    url.push_str("?n=");
    url.push_str(&nonce);
    let init = RequestInit::new();
    init.set_credentials(RequestCredentials::Omit);
    init.set_cache(web_sys::RequestCache::NoStore);
    init.set_signal(Some(&abort.signal()));
    let timer = {
        let abort = abort.clone();
        gloo_timers::callback::Timeout::new(REQUEST_TIMEOUT_MS, move || abort.abort())
    };
    let outcome = match JsFuture::from(w.fetch_with_str_and_init(&url, &init)).await {
        Err(_) if abort.signal().aborted() || !reachable => RequestProbe::Undecided,
        Err(_) => RequestProbe::Blocked,
        Ok(r) => {
            let r: Response = r.unchecked_into();
            let text = match r.text() {
                Ok(p) => JsFuture::from(p).await.ok().and_then(|t| t.as_string()),
                Err(_) => None,
            };
            match text {
                Some(t) => request_probe(r.status(), &t, &nonce),
                None => RequestProbe::Undecided,
            }
        }
    };
    drop(timer);
    outcome
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes.iter().flat_map(|b| [DIGITS[usize::from(b >> 4)] as char, DIGITS[usize::from(b & 15)] as char]).collect()
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
    fn nonces_are_lower_hex() {
        assert_eq!(hex(&[0x00, 0x9f, 0xff]), "009fff");
    }
}
