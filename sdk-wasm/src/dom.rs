//! The browser, reached through web-sys: storage, randomness, the page's
//! location, event listeners as RAII values, and the bait element probe.

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Document, Event, EventTarget, HtmlElement, Storage, Window};

use crate::detect::{bait, ElementProbe, ELEMENT_POLL_MS, ELEMENT_WINDOW_MS};
use crate::error::{Error, Result};

pub fn window() -> Result<Window> {
    web_sys::window().ok_or(Error::NoDom)
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
    if let Ok(c) = window().and_then(|w| w.crypto().map_err(Error::from)) {
        let _ = c.get_random_values_with_u8_array(&mut bytes);
    }
    bytes
}

/// A random UUID v4 (the session id and each event's `event_id`).
pub fn uuid_v4() -> String {
    let id = uuid::Builder::from_random_bytes(random_bytes::<16>()).into_uuid();
    let mut buf = [0u8; 36];
    id.hyphenated().encode_lower(&mut buf).into()
}

pub fn href() -> String {
    window().ok().and_then(|w| w.location().href().ok()).unwrap_or_default()
}

pub fn pathname() -> String {
    window().ok().and_then(|w| w.location().pathname().ok()).unwrap_or_default()
}

/// A query parameter of the page URL (`?postern_variant=NAME`).
pub fn query_param(name: &str) -> Option<String> {
    let search = window().ok()?.location().search().ok()?;
    web_sys::UrlSearchParams::new_with_str(&search).ok()?.get(name).filter(|v| !v.is_empty())
}

/// Brave exposes `navigator.brave`; no other browser does.
pub fn is_brave() -> bool {
    window().is_ok_and(|w| Reflect::has(&w.navigator(), &JsValue::from_str("brave")).unwrap_or(false))
}

pub fn document_visible() -> bool {
    document().is_ok_and(|d| d.visibility_state() == web_sys::VisibilityState::Visible)
}

/// Resolves once the document is parsed and the browser is idle, so the
/// probes never compete with the page's own start.
pub async fn idle() {
    let Ok(w) = window() else { return };
    let wait = Promise::new(&mut |resolve: Function, _| {
        let idle = Reflect::get(&w, &JsValue::from_str("requestIdleCallback")).ok().and_then(|f| f.dyn_into::<Function>().ok());
        let opts = js_sys::Object::new();
        let _ = Reflect::set(&opts, &JsValue::from_str("timeout"), &JsValue::from_f64(2000.0));
        let scheduled = idle.map(|f| f.call2(&w, &resolve, &opts).is_ok()).unwrap_or(false);
        if !scheduled {
            let _ = w.set_timeout_with_callback(&resolve);
        }
    });
    let _ = JsFuture::from(wait).await;
    if let Ok(d) = document() {
        if d.ready_state() == "loading" {
            let parsed = Promise::new(&mut |resolve: Function, _| {
                let _ = d.add_event_listener_with_callback("DOMContentLoaded", &resolve);
            });
            let _ = JsFuture::from(parsed).await;
        }
    }
}

/// An event listener removed when dropped.
pub struct Listener {
    target: EventTarget,
    kind: &'static str,
    capture: bool,
    callback: Closure<dyn FnMut(Event)>,
}

impl Listener {
    pub fn new(target: &EventTarget, kind: &'static str, capture: bool, f: impl FnMut(Event) + 'static) -> Listener {
        let callback = Closure::<dyn FnMut(Event)>::new(f);
        let _ = target.add_event_listener_with_callback_and_bool(kind, callback.as_ref().unchecked_ref(), capture);
        Listener { target: target.clone(), kind, capture, callback }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.target.remove_event_listener_with_callback_and_bool(self.kind, self.callback.as_ref().unchecked_ref(), self.capture);
    }
}

/// Inserts the bait element and watches it for `ELEMENT_WINDOW_MS`: hidden,
/// collapsed or removed at any read means a cosmetic filter acted on it.
pub async fn probe_element() -> ElementProbe {
    let Ok(bait) = insert_bait() else { return ElementProbe::Unmeasured };
    let started = now_ms();
    let verdict = loop {
        if is_hidden(&bait) {
            break ElementProbe::Hidden;
        }
        if now_ms() - started >= f64::from(ELEMENT_WINDOW_MS) {
            break ElementProbe::Visible;
        }
        gloo_timers::future::TimeoutFuture::new(ELEMENT_POLL_MS).await;
    };
    bait.remove();
    verdict
}

fn insert_bait() -> Result<HtmlElement> {
    let doc = document()?;
    let body = doc.body().ok_or(Error::NoDom)?;
    let el: HtmlElement = doc.create_element(bait::TAG)?.unchecked_into();
    el.set_class_name(bait::CLASSES);
    el.set_id(bait::ID);
    el.set_attribute("style", bait::STYLE)?;
    el.set_attribute("aria-hidden", "true")?;
    body.append_child(&el)?;
    Ok(el)
}

fn is_hidden(el: &HtmlElement) -> bool {
    if !el.is_connected() || el.offset_height() == 0 || el.offset_width() == 0 || el.offset_parent().is_none() {
        return true;
    }
    let style = window().ok().and_then(|w| w.get_computed_style(el).ok().flatten());
    style.is_some_and(|s| {
        s.get_property_value("display").is_ok_and(|v| v == "none")
            || s.get_property_value("visibility").is_ok_and(|v| v == "hidden")
    })
}
