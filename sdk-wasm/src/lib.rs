//! Postern's browser SDK: detects ad blockers, shows the site's wall to
//! blocked visitors only, and records each step of the funnel once.
//!
//! This file is the only `#[wasm_bindgen]` layer: `init`, `check`,
//! `getSessionId`, `forceDisplay` and `hide`, over plain modules — `config`
//! (options, wall config, variant choice), `detect` (the verdict, pure),
//! `dom` (browser helpers, page readiness, waits), `probe` (bait elements),
//! `session`, `transport` (events, config, bait requests), `wall` and `error`.
//!
//! The wall's behaviour (`Sdk::show_wall`, `Sdk::on_action`, `Sdk::rechecked`
//! and what only they call) is compiled with the rest but shipped apart:
//! `scripts/build-sdk` splits it into the wall's wasm (`sdk-wasm/split`),
//! which the wall module carries and instantiates into this module's memory
//! and table when a wall is to be shown: a visitor without a blocker never
//! downloads it. Those functions stay `#[inline(never)]` so that the split
//! finds them, and nothing calls them before the wall module has loaded
//! (they would trap).
//!
//! Every byte is downloaded by every visitor (DESIGN §4), so on wasm32 the
//! crate is `no_std`: a panic is a trap (no formatting machinery), the
//! allocator is a small free list, and all asynchronous work runs as one
//! future type (`Task`) on the SDK's own executor (`task`) and all DOM
//! events reach one closure (`on_event`), because each distinct future or
//! closure type adds its own bindings.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

mod config;
mod detect;
mod dom;
mod error;
mod js;
mod probe;
mod session;
mod task;
mod transport;
mod wall;

use alloc::string::String;
use core::cell::{Cell, Ref, RefCell, RefMut};

use js_sys::{Function, Object, Promise};
use wasm_bindgen::prelude::*;
use web_sys::Event;

use config::{Kind, Options, SiteConfig, Variant};
use detect::{BlockerType, Verdict};
use error::{Error, Result};
use session::{Session, ADBLOCK, CONVERTED, DISMISSED, WALL};
use wall::{Action, Wall};

/// A free-list allocator that coalesces freed blocks: the SDK lives as long
/// as the page and re-runs detection, so memory must be reused, and dlmalloc
/// (std's) weighs 7 KB. One thread: wasm32 without the `atomics` feature.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
// SAFETY: the wasm module runs on the page's single thread.
static ALLOC: lol_alloc::AssumeSingleThreaded<lol_alloc::FreeListAllocator> =
    unsafe { lol_alloc::AssumeSingleThreaded::new(lol_alloc::FreeListAllocator::new()) };

/// A panic (a bug: the code avoids every panicking path it can) traps; the
/// loader catches the exception, so the host page keeps working.
#[cfg(target_arch = "wasm32")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}

/// A bug: traps on wasm32 without a message or a source location (a
/// `panic!` keeps both in the wasm's data though the handler reads neither);
/// panics on the host, where the tests run.
fn bug(message: &str) -> ! {
    #[cfg(target_arch = "wasm32")]
    {
        let _ = message;
        core::arch::wasm32::unreachable()
    }
    #[cfg(not(target_arch = "wasm32"))]
    panic!("{message}")
}

/// A `RefCell` whose misuse (a bug) traps: the message of
/// `RefCell::borrow`'s own panic would bring `core::fmt` back.
struct Slot<T>(RefCell<T>);

impl<T> Slot<T> {
    const fn new(v: T) -> Slot<T> {
        Slot(RefCell::new(v))
    }

    fn borrow(&self) -> Ref<'_, T> {
        match self.0.try_borrow() {
            Ok(r) => r,
            Err(_) => bug("Slot borrowed while borrowed mutably"),
        }
    }

    fn borrow_mut(&self) -> RefMut<'_, T> {
        match self.0.try_borrow_mut() {
            Ok(r) => r,
            Err(_) => bug("Slot borrowed mutably twice"),
        }
    }

    fn replace(&self, v: T) -> T {
        core::mem::replace(&mut *self.borrow_mut(), v)
    }
}

/// The page's one SDK, which lives as long as the page: leaked, so no
/// reference count and no drop code. `no_std` has no `thread_local!`; the
/// module has one thread.
struct Global(Slot<Option<&'static Sdk>>);
// SAFETY: wasm32 without the `atomics` feature runs on one thread only.
unsafe impl Sync for Global {}
static SDK: Global = Global(Slot::new(None));

fn sdk() -> Result<&'static Sdk> {
    SDK.0.borrow().ok_or(Error::NotInitialized)
}

fn js_err(e: Error) -> JsError {
    JsError::new(e.message())
}

/// The value, or a JS `Error` with the message thrown to the caller. Thrown
/// from the exported function itself, with nothing borrowed: a `Result`
/// return would give each export a shim and the glue a check.
fn or_throw<T>(r: Result<T>) -> T {
    r.unwrap_or_else(|e| wasm_bindgen::throw_str(e.message()))
}

/// Starts the SDK for a site: session, `pageview`, then detection once the
/// page is idle. A second call is ignored.
#[wasm_bindgen]
pub fn init(options: JsValue) {
    if SDK.0.borrow().is_some() {
        return;
    }
    or_throw(Options::from_js(&options).ok_or(Error::BadOptions).and_then(Sdk::start));
}

/// Runs a detection now; resolves to `{blocked, blockerType}`.
#[wasm_bindgen]
pub fn check() -> Promise {
    match sdk() {
        Ok(s) => s.check(),
        Err(e) => Promise::reject(&js_err(e).into()),
    }
}

/// The id as a JS string made here: a `String` return would need a shim
/// and a copy out of the wasm's memory in the glue.
#[wasm_bindgen(js_name = getSessionId, unchecked_return_type = "string")]
pub fn get_session_id() -> JsValue {
    JsValue::from_str(&or_throw(sdk()).session.borrow().id)
}

/// Shows the wall whatever the detection says; its events carry `debug: true`.
/// Resolves once the wall is up (its module and the site's config are
/// loaded first) or could not be shown.
#[wasm_bindgen(js_name = forceDisplay)]
pub fn force_display() -> Promise {
    let s = or_throw(sdk());
    task::spawn_promise(run(s, Task::Force))
}

#[wasm_bindgen]
pub fn hide() {
    or_throw(sdk()).shown.replace(None);
}

/// The SDK's asynchronous work. All of it runs through `run`, one future type.
enum Task {
    /// After `init`, once the page has loaded: the pageview, resend what
    /// earlier pages could not, then check when idle.
    Start,
    /// A detection whose verdict `check()` resolves to.
    Check,
    /// "I have allowed this site" clicked.
    Recheck,
    /// `forceDisplay()`.
    Force,
    /// A blocker was found: the wall, once its module and the config are here.
    Show(BlockerType),
    /// Shows the dismiss control of the wall with this number after its delay.
    Reveal(u32, u32),
    /// One event body to the collector, and when it was first queued.
    Send(JsValue, f64),
}

async fn run(s: &'static Sdk, task: Task) -> JsValue {
    match task {
        Task::Start => {
            task::settle(dom::ready()).await;
            s.emit("pageview", Object::new());
            transport::take_queue(&mut |body, at| s.spawn(Task::Send(JsValue::from_str(body), at)));
            dom::idle().await;
            drop(s.check());
        }
        Task::Check => {
            let v = s.detect().await;
            s.act(v, true);
            s.inflight.replace(None);
            return verdict_object(v).into();
        }
        Task::Recheck => {
            let v = s.detect().await;
            s.rechecked(v);
        }
        Task::Force => {
            let blocker = s.last_blocker.get().unwrap_or(BlockerType::Unknown);
            s.show_when_loaded(blocker, true).await;
        }
        Task::Show(blocker) => s.show_when_loaded(blocker, false).await,
        Task::Reveal(number, ms) => {
            dom::sleep(ms).await;
            if let Some(w) = s.shown.borrow().as_ref().filter(|w| w.number == number) {
                w.wall.reveal_dismiss();
            }
        }
        Task::Send(body, at) => transport::send(&s.endpoint, body, at).await,
    }
    JsValue::UNDEFINED
}

/// Every DOM event the SDK listens to (through `task::listener`): the page's
/// `pagehide` and `visibilitychange`, and the wall's controls (`{type: "wall", a}`).
fn on_event(e: Event) {
    let Ok(s) = sdk() else { return };
    match js::prop_str(&e, "type").as_str() {
        "pagehide" => transport::flush_on_exit(&s.endpoint),
        // A tab that comes back may have had its blocker turned off meanwhile;
        // a clean visitor is not checked again.
        "visibilitychange" if dom::document_visible() && (s.last_blocker.get().is_some() || s.shown.borrow().is_some()) => {
            drop(s.check())
        }
        "wall" => {
            if let Some(a) = Action::parse(&js::prop_str(&e, "a")) {
                s.on_action(a);
            }
        }
        _ => {}
    }
}

/// A wall on screen and what it was shown with.
struct Shown {
    wall: Wall,
    /// Counts the walls of the page, so a late `Reveal` acts on its own wall only.
    number: u32,
    variant: String,
    /// Shown by `forceDisplay`: a clean automatic check leaves it up.
    forced: bool,
    help_sent: Cell<bool>,
}

struct Sdk {
    site_id: String,
    /// The collector's base URL (`transport::base`).
    endpoint: JsValue,
    debug: bool,
    /// `init({variant})` or `?postern_variant=NAME`.
    forced_variant: Option<String>,
    session_key: String,
    session: Slot<Session>,
    /// `init({keepUtm})`: `utm_*` parameters stay in `page_url`.
    keep_utm: bool,
    config: Slot<Option<SiteConfig>>,
    /// (npm) A function that imports the wall module; undefined for the collector's.
    wall_module: JsValue,
    /// What a wall needs, `[config JSON or null, wall module or null]`, once asked for.
    wall_needs: Slot<Option<Promise>>,
    /// The blocker the last check found; none after a clean check.
    last_blocker: Cell<Option<BlockerType>>,
    shown: Slot<Option<Shown>>,
    walls: Cell<u32>,
    inflight: Slot<Option<Promise>>,
    /// `on_event` as a JS function, kept for the SDK's life (the page's).
    listener: Function,
}

impl Sdk {
    fn start(opts: Options) -> Result<()> {
        let endpoint = transport::base(&opts.endpoint.unwrap_or_else(|| dom::location_str("origin")));
        let mut session_key = String::from("postern:s:");
        session_key.push_str(&opts.site_id);
        let stored = dom::load(&session_key).and_then(|s| Session::parse(&s));
        let session = Session::resume(stored, dom::now_ms(), dom::uuid_v4);

        let sdk: &'static Sdk = alloc::boxed::Box::leak(alloc::boxed::Box::new(Sdk {
            site_id: opts.site_id,
            endpoint,
            debug: opts.debug,
            keep_utm: opts.keep_utm,
            forced_variant: opts.variant.or_else(|| dom::query_param("postern_variant")),
            session_key,
            session: Slot::new(session),
            config: Slot::new(None),
            wall_module: opts.wall.unwrap_or(JsValue::UNDEFINED),
            wall_needs: Slot::new(None),
            last_blocker: Cell::new(None),
            shown: Slot::new(None),
            walls: Cell::new(0),
            inflight: Slot::new(None),
            listener: task::listener(),
        }));
        sdk.save_session();
        *SDK.0.borrow_mut() = Some(sdk);
        if !dom::listen(sdk.listener()) {
            return Err(Error::NoDom);
        }
        sdk.spawn(Task::Start);
        Ok(())
    }

    fn listener(&self) -> &Function {
        &self.listener
    }

    fn spawn(&'static self, t: Task) {
        task::spawn(run(self, t), None);
    }

    fn save_session(&self) {
        dom::store(&self.session_key, &self.session.borrow().serialize());
    }

    fn has(&self, flag: u8) -> bool {
        self.session.borrow().has(flag)
    }

    fn set(&self, flag: u8) {
        self.session.borrow_mut().flags |= flag;
        self.save_session();
    }

    /// Sends one event (in the background) and counts it as session activity.
    fn emit(&'static self, event_type: &str, meta: Object) {
        if self.forced_variant.is_some() {
            js::set(&meta, "forced_variant", &JsValue::TRUE);
        }
        let body = {
            let mut s = self.session.borrow_mut();
            s.last_ms = dom::now_ms();
            transport::event_body(&self.site_id, &s.id, event_type, &meta, self.keep_utm)
        };
        self.save_session();
        self.spawn(Task::Send(body, dom::now_ms()));
    }

    /// Starts loading what a wall needs (its module, the site's config), on
    /// the first sign of a blocker: a visitor without one downloads neither.
    fn prefetch(&self) -> Promise {
        self.wall_needs.borrow_mut().get_or_insert_with(|| wall::needs(&self.endpoint, &self.site_id, &self.wall_module)).clone()
    }

    async fn show_when_loaded(&'static self, blocker: BlockerType, forced: bool) {
        let needs = task::settle(self.prefetch()).await;
        let config = js::at(&needs, 0);
        if config.is_object() && self.config.borrow().is_none() {
            *self.config.borrow_mut() = Some(SiteConfig(config));
        }
        let module = js::at(&needs, 1);
        if module.is_object() {
            self.show_wall(&module, blocker, forced);
        }
    }

    /// Both probes at once: the requests run while the elements are watched.
    async fn detect(&self) -> Verdict {
        task::settle(dom::ready()).await;
        let request = transport::start_probe(&self.endpoint);
        let element = probe::elements().await;
        if element == detect::ElementProbe::Hidden {
            drop(self.prefetch());
        }
        let request = transport::finish_probe(request).await;
        detect::decide(element, request, dom::is_brave())
    }

    /// One detection at a time: callers during a run share its promise.
    fn check(&'static self) -> Promise {
        if let Some(p) = self.inflight.borrow().as_ref() {
            return p.clone();
        }
        let p = task::spawn_promise(run(self, Task::Check));
        // The task starts from a microtask, so it cannot clear this before it is set.
        self.inflight.replace(Some(p.clone()));
        p
    }

    /// What a verdict changes: the events it is the first of, and the wall
    /// (shown for a blocker when `show`, taken down for a clean visitor
    /// unless `forceDisplay` put it up).
    fn act(&'static self, v: Verdict, show: bool) {
        if self.debug {
            web_sys::console::log_2(&JsValue::from_str("Postern verdict"), &verdict_object(v));
        }
        match v {
            Verdict::Blocked(t) => {
                self.last_blocker.set(Some(t));
                if !self.has(ADBLOCK) {
                    self.set(ADBLOCK);
                    self.emit("adblock_detected", meta(None, Some(t)));
                }
                if show {
                    self.spawn(Task::Show(t));
                }
            }
            Verdict::Clean => {
                self.last_blocker.set(None);
                if self.has(WALL) && !self.has(CONVERTED) {
                    self.set(CONVERTED);
                    let v = self.shown_variant().unwrap_or_else(|| self.session.borrow().variant.clone());
                    self.emit("conversion_allowlist", meta(Some(&v).filter(|v| !v.is_empty()).map(|v| v.as_str()), None));
                }
                if !self.shown.borrow().as_ref().is_some_and(|s| s.forced) {
                    self.shown.replace(None);
                }
            }
            Verdict::Undecided => {}
        }
    }

    /// The verdict of "I have allowed this site": a wall is up. In the wall's wasm.
    #[inline(never)]
    fn rechecked(&'static self, v: Verdict) {
        self.act(v, false);
        match v {
            Verdict::Blocked(t) => {
                let variant = self.shown_variant();
                self.emit("verification_failed", self.wall_meta(variant.as_deref(), Some(t)));
                self.note(wall::STILL_BLOCKED);
            }
            // Even a wall `forceDisplay` put up.
            Verdict::Clean => drop(self.shown.replace(None)),
            Verdict::Undecided => self.note(wall::CANNOT_CHECK),
        }
    }

    fn shown_variant(&self) -> Option<String> {
        self.shown.borrow().as_ref().map(|s| s.variant.clone())
    }

    fn note(&self, text: &str) {
        if let Some(s) = self.shown.borrow().as_ref() {
            s.wall.note(text);
        }
    }

    /// Metadata of an event from the wall; `debug` when it was forced.
    fn wall_meta(&self, variant: Option<&str>, blocker: Option<BlockerType>) -> Object {
        let m = meta(variant, blocker);
        if self.shown.borrow().as_ref().is_some_and(|s| s.forced) {
            js::set(&m, "debug", &JsValue::TRUE);
        }
        m
    }

    /// The forced variant, else the session's, else one assigned by weight.
    fn variant_for(&self, cfg: &SiteConfig) -> Option<Variant> {
        let mut variants = cfg.variants();
        let s = self.session.borrow();
        let mut weights = alloc::vec::Vec::new();
        let mut pick = None;
        for (i, v) in variants.iter().enumerate() {
            if Some(v.name.as_str()) == self.forced_variant.as_deref() {
                pick = Some(i);
                break;
            }
            if v.name == s.variant {
                pick = pick.or(Some(i));
            }
            weights.push(config::weight(v));
        }
        let i = pick.or_else(|| config::assign(&weights, &s.id))?;
        (i < variants.len()).then(|| variants.swap_remove(i))
    }

    /// In the wall's wasm (see the crate's doc): called only once `prefetch`
    /// has resolved with the wall module, which has instantiated it.
    #[inline(never)]
    fn show_wall(&'static self, module: &JsValue, blocker: BlockerType, forced: bool) {
        if self.shown.borrow().is_some() {
            return;
        }
        let cfg = self.config.borrow();
        let fallback;
        let cfg = match cfg.as_ref() {
            Some(c) if forced || (c.active() && !c.excludes(&dom::pathname())) => c,
            // A wall without its site's texts is only shown on request.
            None if forced => {
                fallback = SiteConfig(JsValue::UNDEFINED);
                &fallback
            }
            _ => return,
        };
        let variant = self.variant_for(cfg);
        let kind = variant.as_ref().and_then(Variant::kind).unwrap_or_else(|| cfg.kind());
        if !forced && (variant.is_none() || (kind == Kind::Soft && self.has(DISMISSED))) {
            return;
        }
        let v = variant.as_ref();
        let name = v.map_or_else(|| String::from("control"), |v| v.name.clone());
        let texts = v.map_or(JsValue::UNDEFINED, |v| v.js.clone());
        let Some(wall) = Wall::show(module, kind, blocker, &texts, &cfg.wall(), self.listener()) else { return };
        let number = self.walls.get() + 1;
        self.walls.set(number);
        let delay = cfg.dismiss_after();
        if kind == Kind::Banner || (kind == Kind::Soft && delay == 0) {
            wall.reveal_dismiss();
        } else if kind == Kind::Soft {
            self.spawn(Task::Reveal(number, delay.saturating_mul(1000)));
        }
        self.shown.replace(Some(Shown { wall, number, variant: name.clone(), forced, help_sent: Cell::new(false) }));
        if forced {
            self.emit("wall_displayed", self.wall_meta(Some(&name), Some(blocker)));
        } else if !self.has(WALL) {
            self.session.borrow_mut().variant = name.clone();
            self.set(WALL);
            self.emit("wall_displayed", meta(Some(&name), Some(blocker)));
        }
    }

    /// In the wall's wasm: only a wall on screen hands controls back.
    #[inline(never)]
    fn on_action(&'static self, a: Action) {
        let Some(variant) = self.shown_variant() else { return };
        match a {
            Action::Recheck => {
                self.note(wall::CHECKING);
                self.spawn(Task::Recheck);
            }
            Action::Help => {
                let first = self.shown.borrow().as_ref().is_some_and(|s| s.wall.toggle_help() && !s.help_sent.replace(true));
                if first {
                    self.emit("wall_help_opened", self.wall_meta(Some(&variant), self.last_blocker.get()));
                }
            }
            Action::Dismiss => {
                let m = self.wall_meta(Some(&variant), None);
                self.set(DISMISSED);
                self.shown.replace(None);
                self.emit("wall_dismissed", m);
            }
            Action::Subscribe => {
                let m = self.wall_meta(Some(&variant), None);
                if !self.has(CONVERTED) {
                    self.set(CONVERTED);
                }
                self.emit("conversion_subscribe", m);
            }
        }
    }
}

fn meta(variant: Option<&str>, blocker: Option<BlockerType>) -> Object {
    let m = Object::new();
    if let Some(v) = variant {
        js::set_str(&m, "variant", v);
    }
    if let Some(b) = blocker {
        js::set_str(&m, "blocker_type", b.as_str());
    }
    m
}

fn verdict_object(v: Verdict) -> Object {
    let o = Object::new();
    js::set(&o, "blocked", &JsValue::from_bool(v.blocked()));
    match v.blocker_type() {
        Some(t) => js::set_str(&o, "blockerType", t.as_str()),
        None => js::set(&o, "blockerType", &JsValue::NULL),
    }
    o
}
