//! The wall: markup built as one string (pure, tested on the host), rendered
//! in a closed shadow root so neither the page's CSS nor a blocker's cosmetic
//! filters reach inside. Modal kinds trap focus and lock scrolling; all of it
//! is undone when the `Wall` is dropped.

use std::rc::Rc;

use wasm_bindgen::JsCast;
use web_sys::{Element, HtmlElement, KeyboardEvent, ShadowRoot, ShadowRootInit, ShadowRootMode};

use crate::config::Kind;
use crate::detect::BlockerType;
use crate::dom::{self, Listener};
use crate::error::Result;

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

pub struct Texts<'a> {
    pub title: &'a str,
    pub body: &'a str,
    pub kind: Kind,
    pub blocker: BlockerType,
    /// The alternative link (url, text), if the site offers one.
    pub subscribe: Option<(&'a str, &'a str)>,
}

const STYLE: &str = "<style>:host{all:initial}\
.o{position:fixed;inset:0;z-index:2147483647;background:rgba(17,24,39,.75);display:flex;align-items:center;justify-content:center;padding:16px;box-sizing:border-box;font:16px/1.5 system-ui,-apple-system,Segoe UI,sans-serif;color:#111827}\
.o.b{top:auto;background:none;padding:0}\
.d{background:#fff;border-radius:12px;max-width:34rem;width:100%;max-height:100%;overflow:auto;padding:24px;box-sizing:border-box;box-shadow:0 10px 40px rgba(0,0,0,.35)}\
.b .d{max-width:none;border-radius:0;padding:12px 16px;border-top:3px solid #1d4ed8}\
h2{font-size:1.35em;line-height:1.25;margin:0 0 8px}p,ol{margin:0 0 12px}ol{padding-left:1.3em}\
button,a{font:inherit;cursor:pointer;border-radius:8px;padding:10px 16px;margin:4px 8px 4px 0;border:1px solid #374151;background:#fff;color:#111827;text-decoration:none;display:inline-block}\
.p{background:#1d4ed8;border-color:#1d4ed8;color:#fff}#n:empty{display:none}#n{color:#b91c1c;font-weight:600}\
[hidden]{display:none!important}:focus-visible{outline:3px solid #f59e0b;outline-offset:2px}</style>";

fn steps(blocker: BlockerType) -> [&'static str; 2] {
    match blocker {
        BlockerType::Extension => [
            "Click your ad blocker\u{2019}s icon next to the address bar (uBlock Origin, Adblock Plus, AdGuard, Ghostery\u{2026}).",
            "Turn it off for this site: the power button, or \u{201c}Don\u{2019}t run on pages on this site\u{201d}.",
        ],
        BlockerType::Network => [
            "Something on your network blocks ads: a DNS filter (Pi-hole, NextDNS, AdGuard DNS), a VPN or a firewall.",
            "Add this site to its allow-list, or pause it while you read.",
        ],
        BlockerType::Browser => [
            "Your browser blocks ads by itself (for example Brave Shields).",
            "Click the shield icon in the address bar and turn the shields down for this site.",
        ],
        BlockerType::Unknown => [
            "Open your ad blocker, or your browser\u{2019}s privacy settings.",
            "Allow this site, or pause blocking for it.",
        ],
    }
}

pub fn escape(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// Only web links: a site's config must not be able to plant `javascript:`.
fn safe_link(url: &str) -> bool {
    url.starts_with("https://") || url.starts_with("http://") || (url.starts_with('/') && !url.starts_with("//"))
}

pub fn render(t: &Texts<'_>) -> String {
    let mut h = String::with_capacity(3000);
    h.push_str(STYLE);
    h.push_str(if t.kind == Kind::Banner { "<div class=\"o b\">" } else { "<div class=\"o\">" });
    h.push_str("<div class=\"d\" role=\"dialog\" aria-modal=\"");
    h.push_str(if t.kind == Kind::Banner { "false" } else { "true" });
    h.push_str("\" aria-labelledby=\"t\" aria-describedby=\"m\"><h2 id=\"t\">");
    escape(&mut h, t.title);
    h.push_str("</h2><p id=\"m\">");
    escape(&mut h, t.body);
    h.push_str("</p><ol id=\"h\" hidden>");
    for s in steps(t.blocker) {
        h.push_str("<li>");
        h.push_str(s);
        h.push_str("</li>");
    }
    h.push_str("<li>Then click \u{201c}I have allowed this site\u{201d}.</li></ol><p id=\"n\" role=\"status\" aria-live=\"polite\"></p>");
    h.push_str("<button class=\"p\" data-a=\"recheck\">I have allowed this site</button>");
    h.push_str("<button data-a=\"help\" aria-expanded=\"false\" aria-controls=\"h\">How do I allow this site?</button>");
    if let Some((url, text)) = t.subscribe.filter(|(u, _)| safe_link(u)) {
        h.push_str("<a data-a=\"subscribe\" href=\"");
        escape(&mut h, url);
        h.push_str("\">");
        escape(&mut h, text);
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
    host: Element,
    root: ShadowRoot,
    saved_overflow: Option<String>,
    _listeners: Vec<Listener>,
    _reveal: Option<gloo_timers::callback::Timeout>,
}

impl Wall {
    /// Shows the wall; `on` receives the visitor's actions (outside the
    /// listener, so it may drop the wall).
    pub fn show(t: &Texts<'_>, dismiss_after_secs: u32, on: Rc<dyn Fn(Action)>) -> Result<Wall> {
        let doc = dom::document()?;
        let body = doc.body().ok_or(crate::error::Error::NoDom)?;
        let host = doc.create_element("div")?;
        host.set_attribute("data-postern-wall", "")?;
        let root = host.attach_shadow(&ShadowRootInit::new(ShadowRootMode::Closed))?;
        root.set_inner_html(&render(t));
        body.append_child(&host)?;

        let modal = t.kind != Kind::Banner;
        let saved_overflow = if modal {
            let style = doc.document_element().and_then(|e| e.dyn_into::<HtmlElement>().ok()).map(|e| e.style());
            style.map(|s| {
                let old = s.get_property_value("overflow").unwrap_or_default();
                let _ = s.set_property("overflow", "hidden");
                old
            })
        } else {
            None
        };

        let click = {
            let on = on.clone();
            Listener::new(&root, "click", false, move |e| {
                let action = e
                    .target()
                    .and_then(|t| t.dyn_into::<Element>().ok())
                    .and_then(|el| el.closest("[data-a]").ok().flatten())
                    .and_then(|el| el.get_attribute("data-a"))
                    .and_then(|a| Action::parse(&a));
                if let Some(a) = action {
                    let on = on.clone();
                    wasm_bindgen_futures::spawn_local(async move { on(a) });
                }
            })
        };
        let keys = {
            let root = root.clone();
            let w = dom::window()?;
            Listener::new(&w, "keydown", true, move |e| {
                let Ok(k) = e.dyn_into::<KeyboardEvent>() else { return };
                if k.key() == "Escape" && dismissible(&root) {
                    k.prevent_default();
                    let on = on.clone();
                    wasm_bindgen_futures::spawn_local(async move { on(Action::Dismiss) });
                } else if k.key() == "Tab" && modal {
                    trap_focus(&root, &k);
                }
            })
        };
        let reveal = match t.kind {
            Kind::Hard => None,
            Kind::Banner => {
                reveal_dismiss(&root);
                None
            }
            Kind::Soft if dismiss_after_secs == 0 => {
                reveal_dismiss(&root);
                None
            }
            Kind::Soft => {
                let root = root.clone();
                Some(gloo_timers::callback::Timeout::new(dismiss_after_secs.saturating_mul(1000), move || reveal_dismiss(&root)))
            }
        };
        let wall = Wall { host, root, saved_overflow, _listeners: vec![click, keys], _reveal: reveal };
        if modal {
            wall.focus("recheck");
        }
        Ok(wall)
    }

    fn focus(&self, action: &str) {
        let mut sel = String::from("[data-a=");
        sel.push_str(action);
        sel.push(']');
        if let Some(el) = self.root.query_selector(&sel).ok().flatten().and_then(|e| e.dyn_into::<HtmlElement>().ok()) {
            let _ = el.focus();
        }
    }

    /// A line under the texts (e.g. "still blocked" after a re-check).
    pub fn note(&self, text: &str) {
        if let Some(n) = self.root.get_element_by_id("n") {
            n.set_text_content(Some(text));
        }
    }

    /// Shows or hides the instructions; true when they were just opened.
    pub fn toggle_help(&self) -> bool {
        let (Some(list), Some(button)) = (self.root.get_element_by_id("h"), self.root.query_selector("[data-a=help]").ok().flatten()) else {
            return false;
        };
        let opening = list.has_attribute("hidden");
        if opening {
            let _ = list.remove_attribute("hidden");
        } else {
            let _ = list.set_attribute("hidden", "");
        }
        let _ = button.set_attribute("aria-expanded", if opening { "true" } else { "false" });
        opening
    }
}

impl Drop for Wall {
    fn drop(&mut self) {
        self.host.remove();
        if let Some(old) = &self.saved_overflow {
            let style = dom::document().ok().and_then(|d| d.document_element()).and_then(|e| e.dyn_into::<HtmlElement>().ok());
            if let Some(s) = style.map(|e| e.style()) {
                let _ = if old.is_empty() { s.remove_property("overflow").map(drop) } else { s.set_property("overflow", old) };
            }
        }
    }
}

fn reveal_dismiss(root: &ShadowRoot) {
    if let Some(b) = root.query_selector("[data-a=dismiss]").ok().flatten() {
        let _ = b.remove_attribute("hidden");
    }
}

fn dismissible(root: &ShadowRoot) -> bool {
    root.query_selector("[data-a=dismiss]").ok().flatten().is_some_and(|b| !b.has_attribute("hidden"))
}

/// Keeps Tab and Shift+Tab cycling through the wall's controls.
fn trap_focus(root: &ShadowRoot, k: &KeyboardEvent) {
    let Ok(list) = root.query_selector_all("button:not([hidden]),a[href]") else { return };
    let n = list.length();
    if n == 0 {
        return;
    }
    let active = root.active_element();
    let at = (0..n).find(|&i| list.get(i).is_some_and(|el| active.as_ref().is_some_and(|a| a.is_same_node(Some(&el)))));
    let next = match (k.shift_key(), at) {
        (true, None | Some(0)) => Some(n - 1),
        (false, Some(i)) if i + 1 < n => None,
        (false, _) => Some(0),
        (true, Some(_)) => None,
    };
    if let Some(i) = next {
        k.prevent_default();
        if let Some(el) = list.get(i).and_then(|e| e.dyn_into::<HtmlElement>().ok()) {
            let _ = el.focus();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(kind: Kind) -> Texts<'static> {
        Texts {
            title: "Please <allow> us",
            body: "We \"need\" ads & you",
            kind,
            blocker: BlockerType::Network,
            subscribe: Some(("/subscribe", "Go ad-free")),
        }
    }

    #[test]
    fn texts_are_escaped_and_the_dialog_is_labelled() {
        let h = render(&texts(Kind::Soft));
        assert!(h.contains("Please &lt;allow&gt; us"));
        assert!(h.contains("We &quot;need&quot; ads &amp; you"));
        assert!(h.contains("role=\"dialog\" aria-modal=\"true\" aria-labelledby=\"t\""));
        assert!(h.contains("DNS filter"), "network instructions for a network blocker");
        assert!(h.contains("data-a=\"subscribe\" href=\"/subscribe\""));
        assert!(h.contains("data-a=\"dismiss\" hidden"));
    }

    #[test]
    fn a_hard_wall_has_no_dismiss_and_a_banner_is_not_modal() {
        assert!(!render(&texts(Kind::Hard)).contains("data-a=\"dismiss\""));
        assert!(render(&texts(Kind::Banner)).contains("aria-modal=\"false\""));
    }

    #[test]
    fn script_links_are_left_out() {
        let mut t = texts(Kind::Soft);
        t.subscribe = Some(("javascript:alert(1)", "x"));
        assert!(!render(&t).contains("subscribe"));
        t.subscribe = Some(("//evil.example", "x"));
        assert!(!render(&t).contains("data-a=\"subscribe\""));
    }
}
