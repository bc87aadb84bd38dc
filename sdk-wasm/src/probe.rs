//! The element probe and the page moments the SDK waits for.
//!
//! The bait elements (one per bait set) and a control of neutral names are
//! inserted side by side off screen and watched together; `detect` decides
//! from what each read saw.

use wasm_bindgen::prelude::*;
use web_sys::HtmlElement;

use crate::detect::{bait, element_end, element_read, ElementProbe, ElementRead, ELEMENT_POLL_MS, ELEMENT_WINDOW_MS};
use crate::{dom, js};

// The DOM work of the probe in one JS call each, not a web-sys import per
// property: fewer bytes in the wasm and its glue. The element is styled
// through CSSOM, not a `style` attribute: a page whose CSP has `style-src
// 'self'` refuses the attribute, and an unstyled empty element would measure
// as hidden. Off screen, but laid out at an ad slot's size, so it is
// measurable. A hidden element has no offset parent (`display: none` on it or
// an ancestor, or removed, which `isConnected` tells apart) or no size.
#[wasm_bindgen(inline_js = "export function bait(s) {
  const [t, c, i, w, h] = s.split('|'), e = document.createElement(t);
  e.className = c;
  e.id = i;
  e.setAttribute('aria-hidden', 'true');
  Object.assign(e.style, { position: 'absolute', left: '-10000px', top: '-10000px', width: w, height: h });
  return document.body.appendChild(e);
}
export function hidden(e) {
  return !e.offsetParent || !e.offsetHeight || !e.offsetWidth || (e = getComputedStyle(e)).display == 'none' || e.visibility == 'hidden';
}")]
extern "C" {
    /// Appends a bait element to the body (throws without a body).
    #[wasm_bindgen(catch, js_name = bait)]
    fn add(spec: &str) -> Result<HtmlElement, JsValue>;
    /// Hidden, collapsed or out of the layout. `catch` though it cannot
    /// throw: the glue then calls it through a wrapper rather than handing
    /// the wasm the snippet's whole module namespace, which costs more bytes.
    #[wasm_bindgen(catch)]
    fn hidden(el: &HtmlElement) -> Result<bool, JsValue>;
}

/// Inserts the bait elements and their control and watches them for
/// `ELEMENT_WINDOW_MS`. The window is counted in reads, not read on the
/// clock: the page's clock may jump, and a throttled background tab only
/// makes the window longer.
pub async fn elements() -> ElementProbe {
    let Ok(els) = insert() else { return ElementProbe::Unmeasured };
    let mut verdict = ElementProbe::Unmeasured;
    for n in 0..=ELEMENT_WINDOW_MS / ELEMENT_POLL_MS {
        if n > 0 {
            dom::sleep(ELEMENT_POLL_MS).await;
        }
        let r = read(&els);
        if let Some(v) = element_read(r) {
            verdict = v;
            break;
        }
        if n == ELEMENT_WINDOW_MS / ELEMENT_POLL_MS {
            verdict = element_end(r);
        }
    }
    for el in &els {
        el.remove();
    }
    verdict
}

/// The bait elements in set order, then the control.
fn insert() -> Result<[HtmlElement; 3], JsValue> {
    let [a, b] = &bait::ELEMENTS;
    Ok([add(a.spec)?, add(b.spec)?, add(bait::CONTROL_ELEMENT.spec)?])
}

fn read([a, b, control]: &[HtmlElement; 3]) -> ElementRead {
    ElementRead {
        hidden: [is_hidden(a), is_hidden(b)],
        control_hidden: is_hidden(control),
        connected: a.is_connected() && b.is_connected() && control.is_connected(),
    }
}

fn is_hidden(el: &HtmlElement) -> bool {
    hidden(el).unwrap_or(true)
}

/// Waits until the page may be probed: a prerendered page is not seen by
/// anyone until it is activated, and nothing is fetched before `load`, so
/// the SDK never competes with the page's own start.
pub async fn page_ready() {
    let Ok(doc) = dom::document() else { return };
    if js::prop(&doc, "prerendering").as_bool() == Some(true) {
        let _ = crate::task::park(|resolve| dom::listen(&doc, "prerenderingchange", resolve, false)).await;
    }
    if js::prop_str(&doc, "readyState") != "complete" {
        let Ok(w) = dom::window() else { return };
        let _ = crate::task::park(|resolve| dom::listen(&w, "load", resolve, false)).await;
    }
}

/// `navigator.onLine`: false means the browser knows it is offline.
pub fn online() -> bool {
    dom::window().is_ok_and(|w| js::prop(&js::prop(&w, "navigator"), "onLine").as_bool() != Some(false))
}
