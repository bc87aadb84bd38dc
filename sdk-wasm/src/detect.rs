//! The verdict: from what the probes saw to `{blocked, blockerType}`.
//! Pure logic; the probes themselves live in `probe` (bait elements) and
//! `transport` (bait requests).
//!
//! Each probe has a control, and the bait comes in two independent sets:
//! a verdict needs both sets to agree and the control to show that the
//! page and the network work. Anything else is undecided, which never
//! shows a wall (DESIGN §4: never a wall on a false positive).

/// The bait, generated at build time from `tests/filter-lists/bait.json`:
/// `ELEMENTS` and `PATHS` (one per set), `CONTROL_ELEMENT` and `CONTROL_PATH`.
pub mod bait {
    /// An element of the bait or the control.
    pub struct Element {
        /// `tag|classes|id|width|height`, sizes as CSS lengths: one string
        /// crosses into the probe's JS helper for less than five.
        pub spec: &'static str,
    }

    include!(concat!(env!("OUT_DIR"), "/bait.rs"));
}

/// How long the bait element is watched. Blockers hide it asynchronously
/// (50–400 ms after insertion, measured with uBlock Origin and AdGuard), so a
/// visible bait means "clean" only once this window has passed.
pub const ELEMENT_WINDOW_MS: u32 = 500;
/// The interval between two reads of the bait element.
pub const ELEMENT_POLL_MS: u32 = 50;
/// A bait request without an answer after this long decides nothing.
pub const REQUEST_TIMEOUT_MS: u32 = 4000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockerType {
    /// The bait element was hidden: cosmetic filtering, i.e. an extension.
    Extension,
    /// Only the bait requests failed while the control request loaded: a
    /// request filter (an extension without cosmetic filtering such as uBlock
    /// Origin Lite, a browser's built-in filter, a filtering proxy). DNS
    /// blockers cannot be seen this way: they block the collector's host,
    /// control included, which leaves the check undecided.
    Network,
    /// The browser blocks by itself (Brave Shields).
    Browser,
    Unknown,
}

impl BlockerType {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockerType::Extension => "extension",
            BlockerType::Network => "network",
            BlockerType::Browser => "browser",
            BlockerType::Unknown => "unknown",
        }
    }
}

/// What the bait elements looked like beside their control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementProbe {
    /// Every bait set hidden at once, the control shown, all in the page.
    Hidden,
    /// Every bait set and the control shown for the whole window.
    Visible,
    /// Anything else: not inserted, removed from the page, the control
    /// hidden (the page hides more than ads), or one set only hidden (the
    /// page's own CSS uses one of the names).
    Unmeasured,
}

/// One read of the bait elements and their control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElementRead {
    /// Per bait set.
    pub hidden: [bool; 2],
    pub control_hidden: bool,
    /// The baits and the control are all still in the document.
    pub connected: bool,
}

/// What one read decides: `Some` ends the watch. A blocker hides both sets
/// with the same stylesheet, so both are hidden at the same read.
pub const fn element_read(r: ElementRead) -> Option<ElementProbe> {
    if !r.connected || r.control_hidden {
        return Some(ElementProbe::Unmeasured);
    }
    if r.hidden[0] && r.hidden[1] {
        Some(ElementProbe::Hidden)
    } else {
        None
    }
}

/// The verdict of the last read of a window in which no read decided.
pub const fn element_end(last: ElementRead) -> ElementProbe {
    match element_read(last) {
        Some(p) => p,
        None if last.hidden[0] || last.hidden[1] => ElementProbe::Unmeasured,
        None => ElementProbe::Visible,
    }
}

/// What became of a probe request (one bait, the control), or of the
/// request probe as a whole (see `requests`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestProbe {
    /// Answered by the collector with this request's nonce.
    Loaded,
    /// Refused by the browser, or answered without the nonce (a blocker's
    /// neutered stand-in script).
    Blocked,
    /// Timed out or answered with an error status: nothing can be concluded.
    Undecided,
}

/// The request probe: the bait sets and the control were requested at the
/// same time. Blocked only when the control loaded (the collector answers,
/// fresh: the requests are `no-store`), every bait set failed or was
/// substituted, and the browser says it is online; loaded only when all
/// loaded.
pub fn requests(baits: [RequestProbe; 2], control: RequestProbe, online: bool) -> RequestProbe {
    let all = |p| baits.iter().all(|b| *b == p);
    match control {
        RequestProbe::Loaded if all(RequestProbe::Loaded) => RequestProbe::Loaded,
        RequestProbe::Loaded if online && all(RequestProbe::Blocked) => RequestProbe::Blocked,
        _ => RequestProbe::Undecided,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Blocked(BlockerType),
    Clean,
    /// Never shows a wall and sends nothing.
    Undecided,
}

impl Verdict {
    pub fn blocked(self) -> bool {
        matches!(self, Verdict::Blocked(_))
    }

    /// `blockerType` as reported by `check()`: the kind when blocked,
    /// `unknown` when undecided, none when clean.
    pub fn blocker_type(self) -> Option<BlockerType> {
        match self {
            Verdict::Blocked(t) => Some(t),
            Verdict::Undecided => Some(BlockerType::Unknown),
            Verdict::Clean => None,
        }
    }
}

/// Hidden elements mean cosmetic filtering (an extension, or Brave's own);
/// failed requests alone mean a request filter. A clean verdict needs both
/// probes to have succeeded.
pub fn decide(element: ElementProbe, request: RequestProbe, brave: bool) -> Verdict {
    let kind = |t| if brave { BlockerType::Browser } else { t };
    match (element, request) {
        (ElementProbe::Hidden, _) => Verdict::Blocked(kind(BlockerType::Extension)),
        (_, RequestProbe::Blocked) => Verdict::Blocked(kind(BlockerType::Network)),
        (ElementProbe::Visible, RequestProbe::Loaded) => Verdict::Clean,
        _ => Verdict::Undecided,
    }
}

/// The collector's bait answer carries the nonce; anything else that
/// "loaded" was substituted on the way.
pub fn request_probe(status: u16, body: &str, nonce: &str) -> RequestProbe {
    match status {
        200..=299 if contains(body.as_bytes(), nonce.as_bytes()) => RequestProbe::Loaded,
        200..=299 => RequestProbe::Blocked,
        // A redirect that a blocker followed to its stand-in shows up as a 2xx
        // without the nonce; an error status is the collector's, not a blocker's.
        _ => RequestProbe::Undecided,
    }
}

/// `str::contains` without its two-way searcher, whose bounds checks would
/// bring `core::fmt` into the wasm.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let n = needle.len();
    n > 0 && (0..=haystack.len().saturating_sub(n)).any(|i| haystack.get(i..i + n) == Some(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ElementProbe::*;
    use RequestProbe::*;

    #[test]
    fn a_hidden_bait_element_is_an_extension() {
        assert_eq!(decide(Hidden, Loaded, false), Verdict::Blocked(BlockerType::Extension));
        assert_eq!(decide(Hidden, Blocked, false), Verdict::Blocked(BlockerType::Extension));
        assert_eq!(decide(Hidden, Undecided, false), Verdict::Blocked(BlockerType::Extension));
    }

    #[test]
    fn a_blocked_request_alone_is_the_network() {
        assert_eq!(decide(Visible, Blocked, false), Verdict::Blocked(BlockerType::Network));
        assert_eq!(decide(Unmeasured, Blocked, false), Verdict::Blocked(BlockerType::Network));
    }

    #[test]
    fn brave_reports_the_browser() {
        assert_eq!(decide(Hidden, Loaded, true), Verdict::Blocked(BlockerType::Browser));
        assert_eq!(decide(Visible, Blocked, true), Verdict::Blocked(BlockerType::Browser));
        assert_eq!(decide(Visible, Loaded, true), Verdict::Clean, "Brave with shields down is clean");
    }

    #[test]
    fn clean_needs_both_probes_and_anything_else_is_undecided() {
        assert_eq!(decide(Visible, Loaded, false), Verdict::Clean);
        assert_eq!(decide(Visible, Undecided, false), Verdict::Undecided);
        assert_eq!(decide(Unmeasured, Loaded, false), Verdict::Undecided);
        assert_eq!(decide(Unmeasured, Undecided, false), Verdict::Undecided);
        assert!(!Verdict::Undecided.blocked());
        assert_eq!(Verdict::Undecided.blocker_type(), Some(BlockerType::Unknown));
        assert_eq!(Verdict::Clean.blocker_type(), None);
    }

    #[test]
    fn a_stand_in_script_without_the_nonce_counts_as_blocked() {
        assert_eq!(request_probe(200, "/* postern bait 9f3a */", "9f3a"), Loaded);
        assert_eq!(request_probe(200, "(function(){})();", "9f3a"), Blocked);
        assert_eq!(request_probe(204, "", "9f3a"), Blocked);
        assert_eq!(request_probe(503, "", "9f3a"), Undecided);
        assert_eq!(request_probe(404, "", "9f3a"), Undecided);
        assert_eq!(request_probe(200, "9f3", "9f3a"), Blocked);
        assert_eq!(request_probe(200, "9f3a", "9f3a"), Loaded);
    }

    #[test]
    fn the_bait_comes_from_bait_json() {
        for (path, el) in bait::PATHS.iter().zip(&bait::ELEMENTS) {
            assert!(path.starts_with("/ads/"));
            let [tag, classes, id, width, height] = el.spec.split('|').collect::<Vec<_>>()[..] else {
                panic!("{}", el.spec)
            };
            assert!(!tag.is_empty() && !id.is_empty());
            assert!(classes.split(' ').count() >= 2);
            assert!(width.ends_with("px") && height.ends_with("px"));
        }
        assert_ne!(bait::PATHS[0], bait::PATHS[1]);
        assert_eq!(bait::CONTROL_PATH, "/p/echo.js");
        assert!(!bait::CONTROL_ELEMENT.spec.split('|').nth(1).unwrap().contains("ad"));
    }

    const fn read(hidden: [bool; 2], control_hidden: bool, connected: bool) -> ElementRead {
        ElementRead { hidden, control_hidden, connected }
    }

    #[test]
    fn elements_are_hidden_only_when_both_sets_are_and_the_control_is_not() {
        assert_eq!(element_read(read([true, true], false, true)), Some(Hidden));
        assert_eq!(element_read(read([true, false], false, true)), None, "keep watching");
        assert_eq!(element_end(read([true, false], false, true)), Unmeasured, "the page hides one set");
        assert_eq!(element_end(read([false, true], false, true)), Unmeasured);
        assert_eq!(element_end(read([false, false], false, true)), Visible);
        assert_eq!(element_read(read([true, true], true, true)), Some(Unmeasured), "the control hidden too");
        assert_eq!(element_read(read([false, false], true, true)), Some(Unmeasured));
        assert_eq!(element_read(read([true, true], false, false)), Some(Unmeasured), "removed from the page");
    }

    #[test]
    fn requests_are_blocked_only_when_the_control_loaded_online() {
        assert_eq!(requests([Loaded, Loaded], Loaded, true), Loaded);
        assert_eq!(requests([Blocked, Blocked], Loaded, true), Blocked);
        assert_eq!(requests([Blocked, Blocked], Loaded, false), Undecided, "offline");
        assert_eq!(requests([Blocked, Blocked], Blocked, true), Undecided, "a network reset");
        assert_eq!(requests([Blocked, Blocked], Undecided, true), Undecided, "the collector down");
        assert_eq!(requests([Loaded, Loaded], Blocked, true), Undecided);
        assert_eq!(requests([Blocked, Loaded], Loaded, true), Undecided, "one set only");
        assert_eq!(requests([Blocked, Undecided], Loaded, true), Undecided);
    }
}
