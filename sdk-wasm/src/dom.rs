//! The browser, reached through web-sys: storage, randomness, the page's
//! location, timers as promises and event listeners.

use alloc::string::String;
use core::future::Future;

use js_sys::Function;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Document, EventTarget, Storage, Window};

use crate::error::{Error, Result};
use crate::js;

#[wasm_bindgen]
extern "C" {
    /// The page's `window` read once, directly: `web_sys::window()` goes
    /// through js-sys's search of four global names and an `instanceof`.
    #[wasm_bindgen(thread_local_v2, js_name = window)]
    static WINDOW: Option<Window>;
}

pub fn window() -> Result<Window> {
    WINDOW.with(Option::clone).ok_or(Error::NoDom)
}

pub fn document() -> Result<Document> {
    window()?.document().ok_or(Error::NoDom)
}

pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// localStorage, when the browser allows it (it throws in some private modes).
fn storage() -> Option<Storage> {
    window().ok()?.local_storage().ok().flatten()
}

pub fn load(key: &str) -> Option<String> {
    storage()?.get_item(key).ok().flatten()
}

pub fn store(key: &str, value: &str) {
    if let Some(s) = storage() {
        // A full or refused storage only costs the session's continuity.
        let _ = s.set_item(key, value);
    }
}

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    if let Ok(w) = window() {
        js::dom(&js::prop(&w, "crypto")).get_random_values(&mut bytes);
    }
    bytes
}

/// A random UUID v4 (the session id and each event's `event_id`).
pub fn uuid_v4() -> String {
    let mut b = random_bytes::<16>();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid_text(&b)
}

/// The hyphenated lower-case form of 16 bytes.
pub fn uuid_text(b: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        push_hex(&mut s, *byte);
    }
    s
}

pub fn push_hex(s: &mut String, byte: u8) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    s.push(char::from(DIGITS[usize::from(byte >> 4)]));
    s.push(char::from(DIGITS[usize::from(byte & 15)]));
}

/// A part of the page's URL (`href`, `origin`, `pathname`, `search`).
pub fn location_str(key: &str) -> String {
    window().map_or_else(|_| String::new(), |w| js::prop_str(&js::prop(&w, "location"), key))
}

pub fn href() -> String {
    location_str("href")
}

pub fn pathname() -> String {
    location_str("pathname")
}

/// A query parameter of the page URL (`?postern_variant=NAME`), taken as
/// written: variant names are letters, digits, `_` and `-`, which URLs
/// never escape.
pub fn query_param(name: &str) -> Option<String> {
    param(&location_str("search"), name)
}

fn param(search: &str, name: &str) -> Option<String> {
    let mut rest = search.strip_prefix("?").unwrap_or(search);
    loop {
        let (pair, next) = crate::session::cut(rest, b'&').map_or((rest, None), |(p, r)| (p, Some(r)));
        if let Some((key, value)) = crate::session::cut(pair, b'=') {
            if key == name && !value.is_empty() {
                return Some(value.into());
            }
        }
        rest = next?;
    }
}

/// Brave exposes `navigator.brave`; no other browser does.
pub fn is_brave() -> bool {
    window().is_ok_and(|w| !js::prop(&js::prop(&w, "navigator"), "brave").is_undefined())
}

pub fn document_visible() -> bool {
    document().is_ok_and(|d| js::prop_str(&d, "visibilityState") == "visible")
}

pub fn listen(target: &EventTarget, kind: &str, f: &Function, capture: bool) {
    js::dom(target).add_event_listener(kind, f, capture);
}

/// What a `wait` waits for.
enum Until {
    Ms(u32),
    /// The browser is idle (or two seconds have passed).
    Idle,
    /// The document is parsed.
    Parsed,
}

/// The browser's own timers and events resume the waiting job (`task::park`),
/// so waiting costs no Rust closure, and no state machine of its own.
fn wait(until: Until) -> impl Future<Output = ()> {
    let park = crate::task::park(move |resolve| {
        // A job only runs after `init`, which needs the window.
        let Ok(w) = window() else { return };
        let scheduled = match until {
            Until::Ms(ms) => {
                js::dom(&w).set_timeout(resolve, ms);
                true
            }
            Until::Idle => {
                // requestIdleCallback is missing in some browsers (Safari): a timeout instead.
                let idle = crate::js::get(&w, "requestIdleCallback");
                let idle = (!idle.is_undefined()).then(|| idle.unchecked_into::<Function>());
                let opts = js_sys::Object::new();
                crate::js::set(&opts, "timeout", &JsValue::from_f64(2000.0));
                idle.map(|f| js::dom(&f).call2(&w, resolve, &opts)).is_some()
            }
            // The event bubbles from the document to the window.
            Until::Parsed => {
                listen(&w, "DOMContentLoaded", resolve, false);
                true
            }
        };
        if !scheduled {
            js::dom(&w).set_timeout(resolve, 0);
        }
    });
    // What it was resumed with (an idle deadline, an event) is of no use.
    async move {
        let _ = park.await;
    }
}

pub fn sleep(ms: u32) -> impl Future<Output = ()> {
    wait(Until::Ms(ms))
}

/// Resolves once the document is parsed and the browser is idle, so the
/// probes never compete with the page's own start.
pub async fn idle() {
    wait(Until::Idle).await;
    if document().is_ok_and(|d| js::prop_str(&d, "readyState") == "loading") {
        wait(Until::Parsed).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variant_parameter_is_read_from_the_query() {
        assert_eq!(param("?a=1&postern_variant=offer&b", "postern_variant").as_deref(), Some("offer"));
        assert_eq!(param("?postern_variant=", "postern_variant"), None);
        assert_eq!(param("?xpostern_variant=a&postern_variantx=b", "postern_variant"), None);
        assert_eq!(param("", "postern_variant"), None);
    }

    #[test]
    fn uuids_are_hyphenated_lower_hex() {
        let b = [0x0b, 0x7e, 0x4c, 0x1e, 0x3f, 0x2a, 0x4d, 0x5b, 0x9c, 0x8e, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f];
        assert_eq!(uuid_text(&b), "0b7e4c1e-3f2a-4d5b-9c8e-1a2b3c4d5e6f");
    }
}
