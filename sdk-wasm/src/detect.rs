//! The verdict: from what the probes saw to `{blocked, blockerType}`.
//! Pure logic; the probes themselves live in `dom` (bait element) and
//! `transport` (bait request).

/// The bait, generated at build time from `tests/filter-lists/bait.json`.
pub mod bait {
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
    /// Only the bait request failed: DNS blocker, VPN, firewall.
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

/// What the bait element looked like at the end of the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementProbe {
    Hidden,
    Visible,
    /// It could not be inserted or measured (no body yet, DOM error).
    Unmeasured,
}

/// What became of the bait request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestProbe {
    /// Answered by the collector with this request's nonce.
    Loaded,
    /// Refused by the browser, or answered without the nonce (a blocker's
    /// neutered stand-in script).
    Blocked,
    /// Timed out, the collector failed, or the collector is unreachable
    /// anyway (its config request failed too): nothing can be concluded.
    Undecided,
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

/// A hidden element means cosmetic filtering (an extension, or Brave's own);
/// a failed request alone means something on the network path. A clean
/// verdict needs both probes to have succeeded.
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
        assert!(bait::PATH.starts_with("/ads/"));
        assert!(bait::CLASSES.split(' ').count() >= 2);
        assert!(bait::STYLE.contains("width:") && bait::STYLE.contains("height:"));
    }
}
