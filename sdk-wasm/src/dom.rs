//! The browser: storage, randomness, the page's location, waits and event
//! listeners. Each is one call into a small JS helper below rather than a
//! chain of web-sys getters: every getter, `catch` and optional object is an
//! import, a glue function and code in the wasm, and waiting in JS (a
//! promise the executor settles on) costs no Rust state machine.

use alloc::string::String;

use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;

// A document being torn down (or a worker) has no `document`: `listen`
// then says so. localStorage throws in some private modes and when full: a
// refused storage only costs the session's continuity. `idle` falls back on
// a timeout where requestIdleCallback is missing (Safari).
#[wasm_bindgen(inline_js = "const d = () => self.document, on = (t, e) => new Promise((r) => t.addEventListener(e, r, { once: true }));
export function load(k) {
  try {
    return localStorage.getItem(k);
  } catch {}
}
export function store(k, v) {
  try {
    localStorage.setItem(k, v);
  } catch {}
}
export const loc = (k) => location[k];
export const visible = () => d().visibilityState == 'visible';
export const brave = () => !!navigator.brave;
export const online = () => navigator.onLine !== false;
export function listen(f) {
  if (!d()) return false;
  addEventListener('pagehide', f);
  d().addEventListener('visibilitychange', f);
  return true;
}
export async function ready() {
  if (d().prerendering) await on(d(), 'prerenderingchange');
  if (d().readyState != 'complete') await on(self, 'load');
}
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export async function idle() {
  await new Promise((r) => (self.requestIdleCallback ? requestIdleCallback(r, { timeout: 2000 }) : setTimeout(r)));
  if (d().readyState == 'loading') await on(d(), 'DOMContentLoaded');
}")]
extern "C" {
    /// localStorage's item; null when absent, undefined when refused.
    #[wasm_bindgen(js_name = load)]
    fn load_js(key: &str) -> JsValue;
    pub fn store(key: &str, value: &str);
    #[wasm_bindgen(js_name = loc)]
    fn loc(key: &str) -> JsValue;
    #[wasm_bindgen(js_name = visible)]
    pub fn document_visible() -> bool;
    /// Brave exposes `navigator.brave`; no other browser does.
    #[wasm_bindgen(js_name = brave)]
    pub fn is_brave() -> bool;
    /// `navigator.onLine`: false means the browser knows it is offline.
    pub fn online() -> bool;
    /// Makes `f` the listener of the page's `pagehide` and `visibilitychange`;
    /// false when there is no document.
    pub fn listen(f: &Function) -> bool;
    /// Resolves once the page may be probed: a prerendered page is not seen
    /// by anyone until it is activated, and nothing is fetched before `load`,
    /// so the SDK never competes with the page's own start.
    pub fn ready() -> Promise;
    #[wasm_bindgen(js_name = sleep)]
    fn sleep_js(ms: u32) -> Promise;
    #[wasm_bindgen(js_name = idle)]
    fn idle_js() -> Promise;
}

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues)]
    fn get_random_values(bytes: &mut [u8]);
}

// Strings come back as JS values read with `as_string`: a `String` return
// brings wasm-bindgen's boxed-slice conversion into the wasm.

/// localStorage's item; `None` when absent or refused.
pub fn load(key: &str) -> Option<String> {
    load_js(key).as_string()
}

/// A part of the page's URL (`href`, `origin`, `pathname`, `search`).
pub fn location_str(key: &str) -> String {
    loc(key).as_string().unwrap_or_default()
}

pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    get_random_values(&mut bytes);
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

/// Waits `ms` milliseconds.
pub async fn sleep(ms: u32) {
    crate::task::settle(sleep_js(ms)).await;
}

/// Waits until the document is parsed and the browser is idle, so the
/// probes never compete with the page's own start.
pub async fn idle() {
    crate::task::settle(idle_js()).await;
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
