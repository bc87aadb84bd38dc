//! The wall: markup built as one string (pure, tested on the host) and set
//! with one `innerHTML` in a closed shadow root, so neither the page's CSS nor
//! a blocker's cosmetic filters reach inside. Modal kinds trap focus and lock
//! scrolling; all of it is undone when the `Wall` is dropped. Its events go to
//! the SDK's one listener, which asks `clicked` and `on_key` what they mean.

use js_sys::Function;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Element, Event, HtmlElement, KeyboardEvent, ShadowRoot};

use alloc::string::String;
use crate::config::{Colors, Kind};
use crate::detect::BlockerType;
use crate::{dom, js};
use crate::error::{Error, Result};

/// What the visitor did in the wall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Recheck,
    Help,
    Dismiss,
    Subscribe,
}

impl Action {
    fn parse(s: &str) -> Option<Action> {
        match s {
            "recheck" => Some(Action::Recheck),
            "help" => Some(Action::Help),
            "dismiss" => Some(Action::Dismiss),
            "subscribe" => Some(Action::Subscribe),
            _ => None,
        }
    }
}

/// What the site's config says about this wall; what it leaves out takes the defaults.
pub struct Texts {
    pub title: Option<String>,
    pub body: Option<String>,
    pub kind: Kind,
    pub blocker: BlockerType,
    /// The alternative link, if the site offers one, and its text.
    pub subscribe_url: Option<String>,
    pub subscribe_text: Option<String>,
    pub colors: Colors,
}

/// The site's colours (`wall.colors`, checked to be `#rrggbb` by `config`)
/// become custom properties; these are the defaults, the dashboard's.
const DEFAULT_BACKGROUND: &str = "#ffffff";
const DEFAULT_TEXT: &str = "#1a1a1a";
const DEFAULT_ACCENT: &str = "#0b57d0";

/// The wall's CSS after the colours (`.o{--b:…;--t:…;--a:…}`).
const STYLE: &str = ".o{position:fixed;inset:0;z-index:2147483647;background:rgba(17,24,39,.75);display:flex;align-items:center;justify-content:center;padding:16px;box-sizing:border-box;font:16px/1.5 system-ui,-apple-system,Segoe UI,sans-serif;color:var(--t)}\
.o.b{top:auto;background:none;padding:0}\
.d{background:var(--b);border-radius:12px;max-width:34rem;width:100%;max-height:100%;overflow:auto;padding:24px;box-sizing:border-box;box-shadow:0 10px 40px rgba(0,0,0,.35)}\
.b .d{max-width:none;border-radius:0;padding:12px 16px;border-top:3px solid var(--a)}\
h2{font-size:1.35em;line-height:1.25;margin:0 0 8px}\
p,ol{margin:0 0 12px}\
ol{padding-left:1.3em}\
button,a{font:inherit;cursor:pointer;border-radius:8px;padding:10px 16px;margin:4px 8px 4px 0;border:1px solid;background:var(--b);color:inherit;text-decoration:none;display:inline-block}\
.p{background:var(--a);border-color:var(--a);color:#fff}\
#n:empty{display:none}\
#n{color:#b91c1c;font-weight:600}\
[hidden]{display:none!important}\
:focus-visible{outline:3px solid #f59e0b;outline-offset:2px}";

/// The allow-listing steps for each kind of blocker, as list items.
fn steps(blocker: BlockerType) -> &'static str {
    match blocker {
        BlockerType::Extension => "<li>Click your ad blocker\u{2019}s icon next to the address bar (uBlock Origin, Adblock Plus, AdGuard, Ghostery\u{2026}).</li><li>Turn it off for this site: the power button, or \u{201c}Don\u{2019}t run on pages on this site\u{201d}.</li>",
        BlockerType::Network => "<li>A request filter blocks ads here: an extension such as uBlock Origin Lite, or your browser\u{2019}s own blocker.</li><li>uBlock Origin Lite: click its icon and set this site to \u{201c}no filtering\u{201d}. Brave: click the shield icon and turn the shields down for this site. Opera: click the shield icon in the address bar and turn off ad blocking for this site.</li>",
        BlockerType::Browser => "<li>Your browser blocks ads by itself (for example Brave Shields).</li><li>Click the shield icon in the address bar and turn the shields down for this site.</li>",
        BlockerType::Unknown => "<li>Open your ad blocker, or your browser\u{2019}s privacy settings.</li><li>Allow this site, or pause blocking for it.</li>",
    }
}

pub const TITLE: &str = "Please allow this site";
pub const BODY: &str = "We rely on advertising to keep this site free. Please allow it in your ad blocker.";
pub const SUBSCRIBE: &str = "Subscribe instead";
pub const STILL_BLOCKED: &str = "Your blocker still blocks this site. Follow the steps, then try again.";
pub const CANNOT_CHECK: &str = "We could not check just now. Please try again.";
pub const CHECKING: &str = "Checking\u{2026}";

/// Appends `s` with the characters that mean something in HTML replaced,
/// copying the text between them whole (pushing `char`s one by one brings
/// in UTF-8 encoding code).
pub fn escape(out: &mut String, s: &str) {
    let mut rest = s;
    while let Some((before, special, after)) = cut_special(rest) {
        out.push_str(before);
        out.push_str(match special {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            _ => "&#39;",
        });
        rest = after;
    }
    out.push_str(rest);
}

/// `s` cut around its first `&`, `<`, `>`, `"` or `'`.
fn cut_special(s: &str) -> Option<(&str, u8, &str)> {
    let (i, b) = s.bytes().enumerate().find(|(_, b)| matches!(b, b'&' | b'<' | b'>' | b'"' | b'\''))?;
    // SAFETY: `i` is the index of an ASCII byte of `s`, so both sides of it
    // are whole UTF-8 sequences and `i + 1 <= s.len()`.
    unsafe { Some((s.get_unchecked(..i), b, s.get_unchecked(i + 1..))) }
}

/// Only web links: a site's config must not be able to plant `javascript:`.
fn safe_link(url: &str) -> bool {
    url.starts_with("https://") || url.starts_with("http://") || (url.starts_with('/') && !url.starts_with("//"))
}

pub fn render(t: &Texts) -> String {
    let mut h = String::with_capacity(3000);
    h.push_str("<style>:host{all:initial}.o{--b:");
    h.push_str(t.colors.background.as_deref().unwrap_or(DEFAULT_BACKGROUND));
    h.push_str(";--t:");
    h.push_str(t.colors.text.as_deref().unwrap_or(DEFAULT_TEXT));
    h.push_str(";--a:");
    h.push_str(t.colors.accent.as_deref().unwrap_or(DEFAULT_ACCENT));
    h.push('}');
    h.push_str(STYLE);
    h.push_str(if t.kind == Kind::Banner { "</style><div class=\"o b\">" } else { "</style><div class=\"o\">" });
    h.push_str("<div class=\"d\" role=\"dialog\" aria-modal=\"");
    h.push_str(if t.kind == Kind::Banner { "false" } else { "true" });
    h.push_str("\" aria-labelledby=\"t\" aria-describedby=\"m\"><h2 id=\"t\">");
    escape(&mut h, t.title.as_deref().unwrap_or(TITLE));
    h.push_str("</h2><p id=\"m\">");
    escape(&mut h, t.body.as_deref().unwrap_or(BODY));
    h.push_str("</p><ol id=\"h\" hidden>");
    h.push_str(steps(t.blocker));
    h.push_str("<li>Then click \u{201c}I have allowed this site\u{201d}.</li></ol><p id=\"n\" role=\"status\" aria-live=\"polite\"></p>\
        <button class=\"p\" data-a=\"recheck\">I have allowed this site</button>\
        <button data-a=\"help\" aria-expanded=\"false\" aria-controls=\"h\">How do I allow this site?</button>");
    if let Some(url) = t.subscribe_url.as_deref().filter(|u| safe_link(u)) {
        h.push_str("<a data-a=\"subscribe\" href=\"");
        escape(&mut h, url);
        h.push_str("\">");
        escape(&mut h, t.subscribe_text.as_deref().unwrap_or(SUBSCRIBE));
        h.push_str("</a>");
    }
    if t.kind != Kind::Hard {
        h.push_str("<button data-a=\"dismiss\" hidden>Continue without allowing</button>");
    }
    h.push_str("</div></div>");
    h
}

/// A wall on screen. Dropping it removes it and gives the page back its scrolling.
pub struct Wall {
    host: HtmlElement,
    root: ShadowRoot,
    /// The page's own `overflow` on `<html>`, restored afterwards (modal kinds).
    saved_overflow: Option<String>,
    listener: Function,
}

impl Wall {
    /// Shows the wall; `listener` receives its clicks and the page's keys.
    pub fn show(t: &Texts, listener: &Function) -> Result<Wall> {
        let doc = dom::document()?;
        let body = doc.body().ok_or(Error::NoDom)?;
        let host = js::dom(&doc).create_element("div");
        js::dom(&host).set_attribute("data-postern-wall", "");
        // `{mode: "closed"}` as a plain object: `ShadowRootInit`'s setter is one more import.
        let init = js_sys::Object::new();
        crate::js::set_str(&init, "mode", "closed");
        let root = js::dom(&host).attach_shadow(&init);
        root.set_inner_html(&render(t));
        js::dom(&body).append_child(&host);
        let saved_overflow = if t.kind == Kind::Banner {
            None
        } else {
            html_style().map(|s| {
                let old = js::prop_str(&s, "overflow");
                js::set_str(&s, "overflow", "hidden");
                old
            })
        };
        dom::listen(&root, "click", listener, false);
        let w = dom::window()?;
        dom::listen(&w, "keydown", listener, true);
        let wall = Wall { host, root, saved_overflow, listener: listener.clone() };
        if wall.modal() {
            // The wall's controls are its own HTML elements: no `instanceof` check needed.
            if let Some(b) = wall.find("[data-a=recheck]") {
                js::dom(&b).focus();
            }
        }
        Ok(wall)
    }

    fn modal(&self) -> bool {
        self.saved_overflow.is_some()
    }

    fn find(&self, selector: &str) -> Option<Element> {
        js::dom(&self.root).query_selector(selector)
    }

    /// A line under the texts (e.g. "still blocked" after a re-check).
    pub fn note(&self, text: &str) {
        if let Some(n) = self.find("#n") {
            n.set_text_content(Some(text));
        }
    }

    /// Shows or hides the instructions; true when they were just opened.
    pub fn toggle_help(&self) -> bool {
        let (Some(list), Some(button)) = (self.find("#h"), self.find("[data-a=help]")) else { return false };
        // `hidden` and `ariaExpanded` reflect the attributes.
        let opening = js::prop(&list, "hidden").as_bool() == Some(true);
        js::set(&list, "hidden", &JsValue::from_bool(!opening));
        js::set_str(&button, "ariaExpanded", if opening { "true" } else { "false" });
        opening
    }

    pub fn reveal_dismiss(&self) {
        if let Some(b) = self.find("[data-a=dismiss]") {
            js::set(&b, "hidden", &JsValue::FALSE);
        }
    }

    /// A key pressed while the wall is up: Tab and Shift+Tab cycle through its
    /// controls; true when it is Escape and the wall may be dismissed.
    pub fn on_key(&self, k: &KeyboardEvent) -> bool {
        match js::prop_str(k, "key").as_str() {
            "Escape" if self.find("[data-a=dismiss]:not([hidden])").is_some() => {
                k.prevent_default();
                true
            }
            "Tab" if self.modal() => {
                self.trap_focus(k);
                false
            }
            _ => false,
        }
    }

    fn trap_focus(&self, k: &KeyboardEvent) {
        let list = js::dom(&self.root).query_selector_all("button:not([hidden]),a[href]");
        let n = js::prop(&list, "length").as_f64().unwrap_or(0.0) as u32;
        if n == 0 {
            return;
        }
        let active: JsValue = self.root.active_element().into();
        let at = (0..n).find(|&i| js::at(&list, i) == active);
        let next = match (k.shift_key(), at) {
            (true, None | Some(0)) => Some(n - 1),
            (false, Some(i)) if i + 1 < n => None,
            (false, _) => Some(0),
            (true, Some(_)) => None,
        };
        if let Some(i) = next {
            k.prevent_default();
            js::dom(&js::at(&list, i)).focus();
        }
    }
}

impl Drop for Wall {
    fn drop(&mut self) {
        self.host.remove();
        dom::unlisten(&self.root, "click", &self.listener, false);
        if let Ok(w) = dom::window() {
            dom::unlisten(&w, "keydown", &self.listener, true);
        }
        if let (Some(old), Some(s)) = (&self.saved_overflow, html_style()) {
            // An empty value removes the declaration, as the page had it.
            js::set_str(&s, "overflow", old);
        }
    }
}

/// The inline style of `<html>`.
fn html_style() -> Option<JsValue> {
    let doc = dom::document().ok()?;
    let root = js::prop(&doc, "documentElement");
    root.is_object().then(|| js::prop(&root, "style"))
}

/// The wall control a click landed on, if any.
pub fn clicked(e: &Event) -> Option<Action> {
    // A click's target is an element; `closest` would fail on anything else.
    let el = js::prop(e, "target").unchecked_into::<Element>().closest("[data-a]").ok()??;
    Action::parse(&js::prop_str(&js::prop(&el, "dataset"), "a"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(kind: Kind) -> Texts {
        Texts {
            title: Some("Please <allow> us".into()),
            body: Some("We \"need\" ads & you".into()),
            kind,
            blocker: BlockerType::Network,
            subscribe_url: Some("/subscribe".into()),
            subscribe_text: Some("Go ad-free".into()),
            colors: Colors::default(),
        }
    }

    #[test]
    fn texts_are_escaped_and_the_dialog_is_labelled() {
        let h = render(&texts(Kind::Soft));
        assert!(h.contains("Please &lt;allow&gt; us"));
        assert!(h.contains("We &quot;need&quot; ads &amp; you"));
        assert!(h.contains("role=\"dialog\" aria-modal=\"true\" aria-labelledby=\"t\""));
        assert!(h.contains("request filter") && h.contains("uBlock Origin Lite") && h.contains("Brave") && h.contains("Opera"), "request-filter instructions");
        assert!(!h.contains("DNS"), "a first-party probe cannot see DNS blockers");
        assert!(h.contains("data-a=\"subscribe\" href=\"/subscribe\">Go ad-free</a>"));
        assert!(h.contains("data-a=\"dismiss\" hidden>Continue without allowing</button>"));
        assert!(h.contains("data-a=\"recheck\">I have allowed this site</button>"));
    }

    #[test]
    fn what_the_site_leaves_out_takes_the_defaults() {
        let mut t = texts(Kind::Soft);
        (t.title, t.body, t.subscribe_text) = (None, None, None);
        t.blocker = BlockerType::Extension;
        let h = render(&t);
        assert!(h.contains("<h2 id=\"t\">Please allow this site</h2>"));
        assert!(h.contains("We rely on advertising"));
        assert!(h.contains(">Subscribe instead</a>"));
        assert!(h.contains("uBlock Origin") && !h.contains("request filter"), "extension instructions");
    }

    #[test]
    fn the_colours_become_custom_properties() {
        assert!(render(&texts(Kind::Soft)).contains(".o{--b:#ffffff;--t:#1a1a1a;--a:#0b57d0}"));
        let colors = Colors { background: Some("#fff8e1".into()), text: None, accent: Some("#8a1c1c".into()) };
        let t = Texts { colors, ..texts(Kind::Banner) };
        assert!(render(&t).contains(".o{--b:#fff8e1;--t:#1a1a1a;--a:#8a1c1c}"));
    }

    #[test]
    fn a_hard_wall_has_no_dismiss_and_a_banner_is_not_modal() {
        assert!(!render(&texts(Kind::Hard)).contains("data-a=\"dismiss\""));
        assert!(render(&texts(Kind::Banner)).contains("aria-modal=\"false\""));
    }

    #[test]
    fn script_links_are_left_out() {
        let mut t = texts(Kind::Soft);
        t.subscribe_url = Some("javascript:alert(1)".into());
        assert!(!render(&t).contains("subscribe"));
        t.subscribe_url = Some("//evil.example".into());
        assert!(!render(&t).contains("data-a=\"subscribe\""));
    }
}
