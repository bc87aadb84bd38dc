//! What the SDK is told: the options given to `init`, and the site's wall
//! configuration read from the collector's public config endpoint
//! (`GET /v1/sdk/sites/:id/config`), plus the variant choice.
//!
//! Both are read from JS objects field by field with `Reflect`: serde's
//! deserializers (and the float formatting of their error messages) would
//! triple the size of the wasm.

use alloc::string::String;
use alloc::vec::Vec;

use js_sys::{Array, Reflect};
use wasm_bindgen::{JsCast, JsValue};

#[derive(Debug, Clone)]
pub struct Options {
    pub site_id: String,
    /// The collector's origin; the loader passes its own origin.
    pub endpoint: Option<String>,
    /// A variant forced for testing.
    pub variant: Option<String>,
    pub debug: bool,
}

fn get(o: &JsValue, key: &str) -> JsValue {
    Reflect::get(o, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
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

#[derive(Debug, Clone)]
pub struct Variant {
    pub name: String,
    pub weight: f64,
    pub title: Option<String>,
    pub body: Option<String>,
    /// A per-variant kind overrides the site's.
    pub kind: Option<Kind>,
    /// The alternative offered beside allow-listing (subscribe, contribute).
    pub subscribe_url: Option<String>,
    pub subscribe_text: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Wall {
    pub kind: Kind,
    pub dismiss_after_seconds: Option<u32>,
    pub variants: Vec<Variant>,
    /// Path prefixes where no wall is shown (detection and events still run).
    pub excluded_paths: Vec<String>,
    pub subscribe_url: Option<String>,
    pub subscribe_text: Option<String>,
    pub colors: Colors,
}

/// The wall's colours (`wall.colors`), each `#rrggbb` or absent: anything
/// else would be pasted into CSS, so it falls back to the default.
#[derive(Debug, Clone, Default)]
pub struct Colors {
    pub background: Option<String>,
    pub text: Option<String>,
    pub accent: Option<String>,
}

pub fn is_hex_color(c: &str) -> bool {
    c.len() == 7 && c.starts_with("#") && c.bytes().skip(1).all(|b| b.is_ascii_hexdigit())
}

#[derive(Debug, Clone)]
pub struct SiteConfig {
    pub active: bool,
    pub wall: Wall,
}

fn array(o: &JsValue, key: &str) -> Vec<JsValue> {
    get(o, key).dyn_into::<Array>().map(|a| a.iter().collect()).unwrap_or_default()
}

impl SiteConfig {
    /// The config endpoint's answer; what is missing or mistyped takes its default.
    pub fn from_js(o: &JsValue) -> SiteConfig {
        let w = get(o, "wall");
        let c = get(&w, "colors");
        let color = |k| string(&c, k).filter(|s| is_hex_color(s));
        let variants = array(&w, "variants")
            .iter()
            .filter_map(|v| {
                Some(Variant {
                    name: string(v, "name").filter(|n| !n.is_empty())?,
                    weight: get(v, "weight").as_f64().unwrap_or(1.0),
                    title: string(v, "title"),
                    body: string(v, "body"),
                    kind: string(v, "kind").and_then(|k| Kind::parse(&k)),
                    subscribe_url: string(v, "subscribe_url"),
                    subscribe_text: string(v, "subscribe_text"),
                })
            })
            .collect();
        SiteConfig {
            active: get(o, "active").as_bool().unwrap_or(true),
            wall: Wall {
                kind: string(&w, "kind").and_then(|k| Kind::parse(&k)).unwrap_or_default(),
                dismiss_after_seconds: get(&w, "dismiss_after_seconds").as_f64().filter(|s| *s >= 0.0).map(|s| s as u32),
                variants,
                excluded_paths: array(&w, "excluded_paths").iter().filter_map(JsValue::as_string).collect(),
                subscribe_url: string(&w, "subscribe_url"),
                subscribe_text: string(&w, "subscribe_text"),
                colors: Colors { background: color("background"), text: color("text"), accent: color("accent") },
            },
        }
    }
}

/// Seconds before a soft wall may be dismissed when the site does not say.
pub const DEFAULT_DISMISS_AFTER: u32 = 5;

impl Wall {
    pub fn excludes(&self, path: &str) -> bool {
        self.excluded_paths.iter().any(|p| !p.is_empty() && path.starts_with(p.as_str()))
    }

    pub fn variant(&self, name: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// The session's variant: a hash of the session id placed on the
    /// cumulative weights, so one session always gets the same variant and
    /// sessions split in proportion to the weights.
    pub fn assign(&self, session_id: &str) -> Option<&Variant> {
        let total: f64 = self.variants.iter().map(|v| v.weight.max(0.0)).sum();
        if total <= 0.0 {
            return self.variants.first();
        }
        let point = f64::from(fnv1a(session_id)) / 4_294_967_296.0 * total;
        let mut acc = 0.0;
        for v in &self.variants {
            acc += v.weight.max(0.0);
            if point < acc {
                return Some(v);
            }
        }
        self.variants.last()
    }
}

/// 32-bit FNV-1a: tiny, and stable across SDK versions (assignments must not move).
pub fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall(weights: &[(&str, f64)]) -> Wall {
        Wall {
            variants: weights
                .iter()
                .map(|(n, w)| Variant {
                    name: (*n).into(),
                    weight: *w,
                    title: None,
                    body: None,
                    kind: None,
                    subscribe_url: None,
                    subscribe_text: None,
                })
                .collect(),
            ..Wall::default()
        }
    }

    #[test]
    fn assignment_is_sticky_and_follows_the_weights() {
        let w = wall(&[("control", 3.0), ("emotional", 1.0), ("never", 0.0)]);
        let mut counts = [0u32; 3];
        for i in 0..4000 {
            let id = format!("session-{i}");
            let a = w.assign(&id).unwrap().name.clone();
            assert_eq!(w.assign(&id).unwrap().name, a, "the same session gets the same variant");
            counts[w.variants.iter().position(|v| v.name == a).unwrap()] += 1;
        }
        assert_eq!(counts[2], 0, "a zero weight is never assigned");
        let share = f64::from(counts[0]) / 4000.0;
        assert!((0.70..0.80).contains(&share), "control has weight 3/4, got {share}");
    }

    #[test]
    fn all_zero_weights_fall_back_to_the_first_variant() {
        let w = wall(&[("a", 0.0), ("b", 0.0)]);
        assert_eq!(w.assign("x").unwrap().name, "a");
        assert!(wall(&[]).assign("x").is_none());
    }

    #[test]
    fn excluded_paths_are_prefixes() {
        let w = Wall { excluded_paths: vec!["/subscribe".into(), String::new()], ..Wall::default() };
        assert!(w.excludes("/subscribe/plans"));
        assert!(!w.excludes("/article/1"));
    }

    #[test]
    fn only_hex_colours_are_taken() {
        assert!(is_hex_color("#0b57D0"));
        for bad in ["red", "#fff", "#12345g", "#1234567", "#123456;}", "", "0b57d0#"] {
            assert!(!is_hex_color(bad), "{bad}");
        }
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(""), 0x811c_9dc5);
        assert_eq!(fnv1a("a"), 0xe40c_292c);
    }
}
