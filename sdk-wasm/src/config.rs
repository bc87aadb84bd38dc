//! What the SDK is told: the options given to `init`, and the site's wall
//! configuration read from the collector's public config endpoint
//! (`GET /v1/sdk/sites/:id/config`), plus the variant choice.
//!
//! Both are read from JS objects field by field with `Reflect`: serde's
//! deserializers (and the float formatting of their error messages) would
//! triple the size of the wasm. The site config stays a JS object.

use alloc::string::String;
use alloc::vec::Vec;

use wasm_bindgen::JsValue;

use crate::js::{at, get};

#[derive(Debug, Clone)]
pub struct Options {
    pub site_id: String,
    /// The collector's origin; the loader passes its own origin.
    pub endpoint: Option<String>,
    /// A variant forced for testing.
    pub variant: Option<String>,
    pub debug: bool,
    /// The wall module for the npm package: a function that imports it
    /// (bundled with the page); none for the collector's own file.
    pub wall: Option<JsValue>,
    /// `utm_*` parameters stay in the `page_url` sent (`keepUtm`).
    pub keep_utm: bool,
}

fn string(o: &JsValue, key: &str) -> Option<String> {
    get(o, key).as_string()
}

impl Options {
    /// `None` unless it is an object with a non-empty string `siteId`.
    pub fn from_js(o: &JsValue) -> Option<Options> {
        if !o.is_object() {
            return None;
        }
        Some(Options {
            site_id: string(o, "siteId").filter(|s| !s.is_empty())?,
            endpoint: string(o, "endpoint").filter(|s| !s.is_empty()),
            variant: string(o, "variant").filter(|s| !s.is_empty()),
            debug: get(o, "debug").as_bool().unwrap_or(false),
            wall: Some(get(o, "wall")).filter(|w| w.is_function()),
            keep_utm: get(o, "keepUtm").as_bool().unwrap_or(false),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// Not dismissible.
    Hard,
    /// Dismissible after `dismiss_after_seconds`, shown at most once per session once dismissed.
    #[default]
    Soft,
    /// A bar at the bottom that does not block reading.
    Banner,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "hard" => Some(Kind::Hard),
            "soft" => Some(Kind::Soft),
            "banner" => Some(Kind::Banner),
            _ => None,
        }
    }
}

/// The config endpoint's answer, kept as the JS object it arrives as: each
/// field is read when the wall needs it, and what is missing or mistyped
/// takes its default. Building Rust structs from it (and dropping them) cost
/// more code than reading the few fields a wall uses.
pub struct SiteConfig(pub JsValue);

/// A variant of the wall (`wall.variants[i]`) that has a name.
pub struct Variant {
    pub name: String,
    pub js: JsValue,
}

impl Variant {
    /// A per-variant kind overrides the site's.
    pub fn kind(&self) -> Option<Kind> {
        string(&self.js, "kind").and_then(|k| Kind::parse(&k))
    }
}

impl SiteConfig {
    pub fn active(&self) -> bool {
        get(&self.0, "active").as_bool().unwrap_or(true)
    }

    /// `wall`: the wall module reads its site-wide texts and colours.
    pub fn wall(&self) -> JsValue {
        get(&self.0, "wall")
    }

    pub fn kind(&self) -> Kind {
        string(&self.wall(), "kind").and_then(|k| Kind::parse(&k)).unwrap_or_default()
    }

    /// Seconds before a soft wall may be dismissed.
    pub fn dismiss_after(&self) -> u32 {
        get(&self.wall(), "dismiss_after_seconds").as_f64().filter(|s| *s >= 0.0).map_or(DEFAULT_DISMISS_AFTER, |s| s as u32)
    }

    /// Path prefixes where no wall is shown (detection and events still run).
    pub fn excludes(&self, path: &str) -> bool {
        let list = get(&self.wall(), "excluded_paths");
        for i in 0.. {
            let p = at(&list, i);
            if p.is_undefined() {
                return false;
            }
            if p.as_string().is_some_and(|p| excluded(&p, path)) {
                return true;
            }
        }
        false
    }

    /// The variants that have a name, in order.
    pub fn variants(&self) -> Vec<Variant> {
        let list = get(&self.wall(), "variants");
        let mut out = Vec::new();
        for i in 0.. {
            let js = at(&list, i);
            if js.is_undefined() {
                break;
            }
            if let Some(name) = string(&js, "name").filter(|n| !n.is_empty()) {
                out.push(Variant { name, js });
            }
        }
        out
    }
}

/// Seconds before a soft wall may be dismissed when the site does not say.
pub const DEFAULT_DISMISS_AFTER: u32 = 5;

pub fn excluded(prefix: &str, path: &str) -> bool {
    !prefix.is_empty() && path.starts_with(prefix)
}

/// The weight of a variant (1 when absent, negative counts as 0).
pub fn weight(v: &Variant) -> f64 {
    get(&v.js, "weight").as_f64().unwrap_or(1.0)
}

/// The session's variant among `weights`: a hash of the session id placed
/// on the cumulative weights, so one session always gets the same variant
/// and sessions split in proportion to the weights.
pub fn assign(weights: &[f64], session_id: &str) -> Option<usize> {
    let total: f64 = weights.iter().map(|w| w.max(0.0)).sum();
    if total <= 0.0 {
        return (!weights.is_empty()).then_some(0);
    }
    let point = f64::from(fnv1a(session_id)) / 4_294_967_296.0 * total;
    let mut acc = 0.0;
    for (i, w) in weights.iter().enumerate() {
        acc += w.max(0.0);
        if point < acc {
            return Some(i);
        }
    }
    weights.len().checked_sub(1)
}

/// 32-bit FNV-1a: tiny, and stable across SDK versions (assignments must not move).
pub fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_is_sticky_and_follows_the_weights() {
        let w = [3.0, 1.0, 0.0];
        let mut counts = [0u32; 3];
        for i in 0..4000 {
            let id = format!("session-{i}");
            let a = assign(&w, &id).unwrap();
            assert_eq!(assign(&w, &id), Some(a), "the same session gets the same variant");
            counts[a] += 1;
        }
        assert_eq!(counts[2], 0, "a zero weight is never assigned");
        let share = f64::from(counts[0]) / 4000.0;
        assert!((0.70..0.80).contains(&share), "control has weight 3/4, got {share}");
    }

    #[test]
    fn all_zero_weights_fall_back_to_the_first_variant() {
        assert_eq!(assign(&[0.0, 0.0], "x"), Some(0));
        assert_eq!(assign(&[], "x"), None);
    }

    #[test]
    fn excluded_paths_are_prefixes() {
        assert!(excluded("/subscribe", "/subscribe/plans"));
        assert!(!excluded("/subscribe", "/article/1"));
        assert!(!excluded("", "/article/1"), "an empty prefix excludes nothing");
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(""), 0x811c_9dc5);
        assert_eq!(fnv1a("a"), 0xe40c_292c);
    }
}
