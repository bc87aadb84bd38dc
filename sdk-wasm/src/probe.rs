//! The element probe: the bait elements (one per bait set) and a control of
//! neutral names are inserted side by side off screen and watched together.
//!
//! What each read means is decided here, by `detect`: the JS helper below
//! only inserts, reads and removes the elements, on the browser's timer, and
//! looks each read up in the table `detect` fills in. Waiting in JS costs no
//! Rust state machine per poll.

use js_sys::Promise;
use wasm_bindgen::prelude::*;

use crate::detect::{bait, element_end, element_read, ElementProbe, ElementRead, ELEMENT_POLL_MS, ELEMENT_WINDOW_MS};

// The element is styled through CSSOM, not a `style` attribute: a page whose
// CSP has `style-src 'self'` refuses the attribute, and an unstyled empty
// element would measure as hidden. Off screen, but laid out at an ad slot's
// size, so it is measurable. A hidden element has no offset parent
// (`display: none` on it or an ancestor, or removed, which `isConnected`
// tells apart) or no size. A read is `hidden a | hidden b << 1 | control
// hidden << 2 | all connected << 3`; `t[read]` ends the watch unless it is
// 0, and after `n` reads `t[16 + read]` does. Without a body (the insertion
// throws) nothing is measured: 3.
#[wasm_bindgen(inline_js = "const hidden = (e) =>
  !e.offsetParent || !e.offsetHeight || !e.offsetWidth || (e = getComputedStyle(e)).display == 'none' || e.visibility == 'hidden';
function bait(s) {
  const [t, c, i, w, h] = s.split('|'), e = document.createElement(t);
  e.className = c;
  e.id = i;
  e.setAttribute('aria-hidden', 'true');
  Object.assign(e.style, { position: 'absolute', left: '-10000px', top: '-10000px', width: w, height: h });
  return document.body.appendChild(e);
}
export function watch(a, b, c, t, n, ms) {
  let e, i = 0;
  try {
    e = [a, b, c].map(bait);
  } catch {
    return Promise.resolve(3);
  }
  return new Promise(function read(r) {
    const m = hidden(e[0]) | (hidden(e[1]) << 1) | (hidden(e[2]) << 2) | (e.every((x) => x.isConnected) << 3),
      v = +t[m] || (i++ == n ? +t[16 + m] : 0);
    if (v) {
      e.map((x) => x.remove());
      r(v);
    } else setTimeout(() => read(r), ms);
  });
}")]
extern "C" {
    /// Resolves to the code of the `ElementProbe` (see `code`).
    fn watch(a: &str, b: &str, control: &str, table: &str, reads: u32, ms: u32) -> Promise;
}

/// The helper's code of a verdict; 0 is "keep watching".
const fn code(p: Option<ElementProbe>) -> u8 {
    match p {
        None => b'0',
        Some(ElementProbe::Hidden) => b'1',
        Some(ElementProbe::Visible) => b'2',
        Some(ElementProbe::Unmeasured) => b'3',
    }
}

/// What each of the 16 possible reads decides (`element_read`), then what
/// each decides as the last read of the window (`element_end`): computed at
/// compile time, so the wasm holds the 32 digits and none of the code.
const TABLE: &str = {
    const BYTES: [u8; 32] = {
        let mut t = [0u8; 32];
        let mut i = 0;
        while i < 32 {
            let m = i as u8 & 15;
            let r = ElementRead { hidden: [m & 1 != 0, m & 2 != 0], control_hidden: m & 4 != 0, connected: m & 8 != 0 };
            t[i] = code(if i < 16 { element_read(r) } else { Some(element_end(r)) });
            i += 1;
        }
        t
    };
    match core::str::from_utf8(&BYTES) {
        Ok(t) => t,
        Err(_) => panic!("the table is ASCII digits"),
    }
};

/// Inserts the bait elements and their control and watches them for
/// `ELEMENT_WINDOW_MS`. The window is counted in reads, not read on the
/// clock: the page's clock may jump, and a throttled background tab only
/// makes the window longer.
pub async fn elements() -> ElementProbe {
    let [a, b] = &bait::ELEMENTS;
    let p = watch(a.spec, b.spec, bait::CONTROL_ELEMENT.spec, TABLE, ELEMENT_WINDOW_MS / ELEMENT_POLL_MS, ELEMENT_POLL_MS);
    match crate::task::settle(p).await.as_f64() {
        Some(1.0) => ElementProbe::Hidden,
        Some(2.0) => ElementProbe::Visible,
        _ => ElementProbe::Unmeasured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_what_each_read_decides() {
        let t = TABLE;
        assert_eq!(t.len(), 32);
        // Both sets hidden, the control shown, all connected: hidden at once.
        assert_eq!(&t[0b1011..0b1100], "1");
        // Nothing hidden: keep watching, visible at the end of the window.
        assert_eq!(&t[0b1000..0b1001], "0");
        assert_eq!(&t[16 + 0b1000..16 + 0b1001], "2");
        // One set hidden: keep watching, unmeasured at the end.
        assert_eq!(&t[0b1001..0b1010], "0");
        assert_eq!(&t[16 + 0b1001..16 + 0b1010], "3");
        // Removed from the page: unmeasured at once.
        assert_eq!(&t[0b0011..0b0100], "3");
    }
}
