//! The wall: whether and which one is decided here (its kind, the variant,
//! the allow-listing steps for the blocker, what each control does), and
//! the wall module (`sdk-wasm/js/wall.js`, served as `/p/wall-<hash>.js`)
//! draws it in a closed shadow root with the variant's and the site's texts,
//! link and colours, traps focus and locks scrolling. The module holds the
//! wall's markup, styles and texts, so only visitors who are shown a wall
//! download them. It hands each control used back to the SDK's one
//! listener as `{type: "wall", a}`; dropping the `Wall` closes it.

use js_sys::{Function, Object, Promise};
use wasm_bindgen::prelude::*;

use crate::config::Kind;
use crate::detect::BlockerType;
use crate::js;

/// What the visitor did in the wall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Recheck,
    Help,
    Dismiss,
    Subscribe,
}

impl Action {
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "recheck" => Some(Action::Recheck),
            "help" => Some(Action::Help),
            "dismiss" => Some(Action::Dismiss),
            "subscribe" => Some(Action::Subscribe),
            _ => None,
        }
    }
}

/// The lines shown under the texts, by the names the module knows them by.
pub const STILL_BLOCKED: &str = "blocked";
pub const CANNOT_CHECK: &str = "failed";
pub const CHECKING: &str = "checking";

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Hard => "hard",
        Kind::Soft => "soft",
        Kind::Banner => "banner",
    }
}

// The collector serves the module beside the glue (`/p/`), whatever
// `endpoint` the page gave (the wall editor's preview gives a sandbox path):
// `scripts/build-sdk` writes its content-hashed name in place of `@WALL@`
// in the glue it serves (the wasm cannot hold it: the module carries the
// wall's wasm, which is split from this one). The module is ready once it
// has instantiated the wall's wasm (`load`, given this module's exports).
// Neither part rejects: a wall that cannot load is no wall, and a prefetch
// nobody waits for must not log an unhandled rejection.
// A constant, not a literal in `new URL`: bundlers would copy a literal's
// file (the npm package's index.js always gives `m`).
#[wasm_bindgen(inline_js = "const WALL = '@WALL@';
export function wallNeeds(e, site, m, x) {
  return Promise.all([
    fetch(e + '/v1/sdk/sites/' + site + '/config', { credentials: 'omit' }).then((r) => (r.ok ? r.json() : null)).catch(() => null),
    (typeof m == 'function' ? m() : import(/* webpackIgnore: true */ /* @vite-ignore */ new URL(WALL, import.meta.url).href)).then((w) => w.load(x).then(() => w)).catch(() => null),
  ]);
}")]
extern "C" {
    /// `[the site config's JSON (`GET /v1/sdk/sites/:id/config` under the
    /// collector's base URL) or null, the wall module or null]`: `m` is
    /// (the npm package) a function that imports the module, or undefined
    /// for the collector's file; `x` the SDK's wasm exports.
    #[wasm_bindgen(js_name = wallNeeds)]
    fn wall_needs(base: &JsValue, site_id: &str, m: &JsValue, x: &JsValue) -> Promise;

    /// The wall module's namespace.
    pub type Module;
    /// Undefined when the page refused it (the module catches what threw).
    #[wasm_bindgen(method)]
    fn show(this: &Module, options: &Object, send: &Function) -> Option<Handle>;

    /// A wall on screen, as the module returns it.
    type Handle;
    #[wasm_bindgen(method)]
    fn note(this: &Handle, name: &str);
    #[wasm_bindgen(method)]
    fn help(this: &Handle) -> bool;
    #[wasm_bindgen(method)]
    fn reveal(this: &Handle);
    #[wasm_bindgen(method)]
    fn close(this: &Handle);
}

/// Starts loading what a wall needs: the site's config, the wall module and
/// the wall's wasm (see `Sdk::show_wall`).
pub fn needs(base: &JsValue, site_id: &str, module: &JsValue) -> Promise {
    wall_needs(base, site_id, module, &wasm_bindgen::exports())
}

/// A wall on screen. Dropping it removes it and gives the page back its scrolling.
pub struct Wall(Handle);

impl Wall {
    /// Shows the wall of `kind` with the allow-listing steps for `blocker`,
    /// the texts of the variant (`texts`, its JS object from the config) and
    /// the site's (`site`: the config's `wall`, for the link and colours);
    /// `listener` receives its controls' use. `None` when the page refused it.
    pub fn show(module: &JsValue, kind: Kind, blocker: BlockerType, texts: &JsValue, site: &JsValue, listener: &Function) -> Option<Wall> {
        let o = Object::new();
        js::set_str(&o, "kind", kind_name(kind));
        js::set_str(&o, "steps", blocker.as_str());
        js::set(&o, "variant", texts);
        js::set(&o, "wall", site);
        let module: &Module = module.unchecked_ref();
        module.show(&o, listener).map(Wall)
    }

    /// A line under the texts (e.g. "still blocked" after a re-check).
    pub fn note(&self, name: &str) {
        self.0.note(name);
    }

    /// Shows or hides the instructions; true when they were just opened.
    pub fn toggle_help(&self) -> bool {
        self.0.help()
    }

    pub fn reveal_dismiss(&self) {
        self.0.reveal();
    }
}

impl Drop for Wall {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_the_module_controls_names() {
        assert_eq!(Action::parse("recheck"), Some(Action::Recheck));
        assert_eq!(Action::parse("help"), Some(Action::Help));
        assert_eq!(Action::parse("dismiss"), Some(Action::Dismiss));
        assert_eq!(Action::parse("subscribe"), Some(Action::Subscribe));
        assert_eq!(Action::parse("close"), None);
    }

}
