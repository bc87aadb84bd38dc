//! The element probe and the page moments the SDK waits for.
//!
//! The bait elements (one per bait set) and a control of neutral names are
//! inserted side by side off screen and watched together; `detect` decides
//! from what each read saw.

use web_sys::{Document, HtmlElement};

use crate::detect::{bait, element_end, element_read, ElementProbe, ElementRead, ELEMENT_POLL_MS, ELEMENT_WINDOW_MS};
use crate::error::{Error, Result};
use crate::{dom, js};

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
fn insert() -> Result<[HtmlElement; 3]> {
    let doc = dom::document()?;
    let body = doc.body().ok_or(Error::NoDom)?;
    let [a, b] = &bait::ELEMENTS;
    let add = |spec| {
        let el = make(&doc, spec);
        js::dom(&body).append_child(&el);
        el
    };
    Ok([add(a), add(b), add(&bait::CONTROL_ELEMENT)])
}

fn make(doc: &Document, spec: &bait::Element) -> HtmlElement {
    let el = js::dom(doc).create_element(spec.tag);
    let d = js::dom(&el);
    d.set_attribute("class", spec.classes);
    d.set_attribute("id", spec.id);
    d.set_attribute("aria-hidden", "true");
    // Through CSSOM, not a `style` attribute: a page whose CSP has
    // `style-src 'self'` refuses the attribute, and an unstyled empty element
    // would measure as hidden. Off screen, but laid out at an ad slot's size,
    // so it is measurable.
    let style = js::prop(&el, "style");
    let style = js::dom(&style);
    style.set_property("position", "absolute");
    style.set_property("left", "-10000px");
    style.set_property("top", "-10000px");
    style.set_property("width", spec.width);
    style.set_property("height", spec.height);
    el
}

fn read([a, b, control]: &[HtmlElement; 3]) -> ElementRead {
    ElementRead {
        hidden: [is_hidden(a), is_hidden(b)],
        control_hidden: is_hidden(control),
        connected: a.is_connected() && b.is_connected() && control.is_connected(),
    }
}

/// Not inlined: it is read for three elements.
#[inline(never)]
fn is_hidden(el: &HtmlElement) -> bool {
    // No offset parent: `display: none` on it or an ancestor (or removed,
    // which `connected` tells apart).
    if el.offset_parent().is_none() || el.offset_height() == 0 || el.offset_width() == 0 {
        return true;
    }
    let Ok(w) = dom::window() else { return false };
    let s = js::dom(&w).get_computed_style(el);
    js::prop_str(&s, "display") == "none" || js::prop_str(&s, "visibility") == "hidden"
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

