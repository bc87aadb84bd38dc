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
// a timeout where requestIdleCallback is missing (Safari). `uuid` makes a
// random UUID v4 without `crypto.randomUUID`, which plain-http pages lack: the
// template's 0s and 1s are random hex digits, its 8 one of 8, 9, a and b.
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
export const uuid = () =>
  '10000000-1000-4000-8000-100000000000'.replace(/[018]/g, (c) => (c ^ (crypto.getRandomValues(new Uint8Array(1))[0] & (15 >> (c / 4)))).toString(16));
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
    /// A random UUID v4 (the session id and each event's `event_id`), as a JS string.
    pub fn uuid() -> JsValue;
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

/// `uuid` as a Rust string.
pub fn uuid_v4() -> String {
    uuid().as_string().unwrap_or_default()
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
}
