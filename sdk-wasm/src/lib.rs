//! Postern's browser SDK: detects ad blockers, shows the site's wall to
//! blocked visitors only, and records each step of the funnel once.
//!
//! This file is the only `#[wasm_bindgen]` layer: `init`, `check`,
//! `getSessionId`, `forceDisplay` and `hide`, over plain modules — `config`
//! (options, wall config, variant choice), `detect` (the verdict, pure),
//! `dom` (browser helpers, bait element), `session`, `transport` (events,
//! config, bait request), `wall` and `error`.

mod config;
mod detect;
mod dom;
mod error;
mod session;
mod transport;
mod wall;

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use js_sys::{Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{future_to_promise, spawn_local, JsFuture};

use config::{Kind, Options, SiteConfig, Variant};
use detect::{BlockerType, RequestProbe, Verdict};
use dom::Listener;
use error::{Error, Result};
use session::{Session, ADBLOCK, CONVERTED, DISMISSED, WALL};
use wall::{Action, Texts, Wall};

const DEFAULT_TITLE: &str = "Please allow this site";
const DEFAULT_BODY: &str = "We rely on advertising to keep this site free. Please allow it in your ad blocker.";
const DEFAULT_SUBSCRIBE_TEXT: &str = "Subscribe instead";

thread_local! {
    static SDK: RefCell<Option<Rc<Sdk>>> = const { RefCell::new(None) };
}

fn sdk() -> Result<Rc<Sdk>> {
    SDK.with(|s| s.borrow().clone()).ok_or(Error::NotInitialized)
}

fn js_err(e: Error) -> JsError {
    JsError::new(e.message())
}

/// Starts the SDK for a site: session, `pageview`, then detection once the
/// page is idle. A second call is ignored.
#[wasm_bindgen]
pub fn init(options: JsValue) -> core::result::Result<(), JsError> {
    if SDK.with(|s| s.borrow().is_some()) {
        return Ok(());
    }
    let opts = Options::from_js(&options).ok_or_else(|| js_err(Error::BadOptions))?;
    Sdk::start(opts).map(drop).map_err(js_err)
}

/// Runs a detection now; resolves to `{blocked, blockerType}`.
#[wasm_bindgen]
pub fn check() -> Promise {
    match sdk() {
        Ok(s) => s.check(),
        Err(e) => Promise::reject(&js_err(e).into()),
    }
}

#[wasm_bindgen(js_name = getSessionId)]
pub fn get_session_id() -> core::result::Result<String, JsError> {
    sdk().map(|s| s.session.borrow().id.clone()).map_err(js_err)
}

/// Shows the wall whatever the detection says; its events carry `debug: true`.
#[wasm_bindgen(js_name = forceDisplay)]
pub fn force_display() -> core::result::Result<(), JsError> {
    let s = sdk().map_err(js_err)?;
    spawn_local(async move {
        s.ensure_config().await;
        let blocker = s.last_blocker.get().unwrap_or(BlockerType::Unknown);
        s.show_wall(blocker, true);
    });
    Ok(())
}

#[wasm_bindgen]
pub fn hide() -> core::result::Result<(), JsError> {
    sdk().map(|s| drop(s.shown.replace(None))).map_err(js_err)
}

/// A wall on screen and what it was shown with.
struct Shown {
    wall: Wall,
    variant: String,
    /// Shown by `forceDisplay`: a clean automatic check leaves it up.
    forced: bool,
    help_sent: Cell<bool>,
}

struct Sdk {
    site_id: String,
    endpoint: String,
    debug: bool,
    /// `init({variant})` or `?postern_variant=NAME`.
    forced_variant: Option<String>,
    session_key: String,
    session: RefCell<Session>,
    /// The config request, started at `init`; resolves to the JSON or null.
    config_fetch: Promise,
    config: RefCell<Option<SiteConfig>>,
    /// The collector answered the config request (so it is reachable).
    reachable: Cell<bool>,
    last_blocker: Cell<Option<BlockerType>>,
    shown: RefCell<Option<Shown>>,
    inflight: RefCell<Option<Promise>>,
    listeners: RefCell<Vec<Listener>>,
}

impl Sdk {
    fn start(opts: Options) -> Result<Rc<Sdk>> {
        let w = dom::window()?;
        let endpoint = opts.endpoint.filter(|e| !e.is_empty()).map_or_else(|| w.location().origin(), Ok)?;
        let mut session_key = String::from("postern:s:");
        session_key.push_str(&opts.site_id);
        let stored = dom::load(&session_key).and_then(|s| Session::parse(&s));
        let session = Session::resume(stored, dom::now_ms(), dom::uuid_v4);
        let mut config_url = String::from("/v1/sdk/sites/");
        config_url.push_str(&opts.site_id);
        config_url.push_str("/config");
        let config_url = transport::join(&endpoint, &config_url);
        let config_fetch = future_to_promise(async move { Ok(transport::get_json(&config_url).await.unwrap_or(JsValue::NULL)) });

        let sdk = Rc::new(Sdk {
            site_id: opts.site_id,
            endpoint,
            debug: opts.debug,
            forced_variant: opts.variant.filter(|v| !v.is_empty()).or_else(|| dom::query_param("postern_variant")),
            session_key,
            session: RefCell::new(session),
            config_fetch,
            config: RefCell::new(None),
            reachable: Cell::new(false),
            last_blocker: Cell::new(None),
            shown: RefCell::new(None),
            inflight: RefCell::new(None),
            listeners: RefCell::new(Vec::new()),
        });
        sdk.save_session();
        SDK.with(|s| *s.borrow_mut() = Some(sdk.clone()));

        let weak = Rc::downgrade(&sdk);
        let on_exit = Listener::new(&w, "pagehide", false, move |_| {
            if let Some(s) = weak.upgrade() {
                transport::flush_on_exit(&s.endpoint);
            }
        });
        let weak = Rc::downgrade(&sdk);
        // A tab that comes back may have had its blocker turned off meanwhile.
        let doc = dom::document()?;
        let on_visible = Listener::new(&doc, "visibilitychange", false, move |_| {
            if let Some(s) = weak.upgrade().filter(|_| dom::document_visible()) {
                let _ = s.check();
            }
        });
        sdk.listeners.borrow_mut().extend([on_exit, on_visible]);

        sdk.emit("pageview", Object::new());
        let endpoint = sdk.endpoint.clone();
        spawn_local(async move { transport::flush(&endpoint).await });
        let me = sdk.clone();
        spawn_local(async move {
            dom::idle().await;
            let _ = me.check();
        });
        Ok(sdk)
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
    fn emit(&self, event_type: &str, meta: Object) {
        if self.forced_variant.is_some() {
            set(&meta, "forced_variant", &JsValue::TRUE);
        }
        let body = {
            let mut s = self.session.borrow_mut();
            s.last_ms = dom::now_ms();
            transport::event_body(&self.site_id, &s.id, event_type, &meta)
        };
        self.save_session();
        let endpoint = self.endpoint.clone();
        spawn_local(async move { transport::send(&endpoint, body).await });
    }

    async fn ensure_config(&self) {
        if self.config.borrow().is_some() {
            return;
        }
        let v = JsFuture::from(self.config_fetch.clone()).await.unwrap_or(JsValue::NULL);
        if !v.is_null() {
            self.reachable.set(true);
            *self.config.borrow_mut() = Some(SiteConfig::from_js(&v));
        }
    }

    /// Both probes at once: the bait request runs while the element is watched.
    async fn detect(self: &Rc<Self>) -> Verdict {
        self.ensure_config().await;
        let (endpoint, reachable) = (self.endpoint.clone(), self.reachable.get());
        let request = future_to_promise(async move {
            let code = match transport::probe_request(&endpoint, reachable).await {
                RequestProbe::Loaded => 0.0,
                RequestProbe::Blocked => 1.0,
                RequestProbe::Undecided => 2.0,
            };
            Ok(JsValue::from_f64(code))
        });
        let element = dom::probe_element().await;
        let request = match JsFuture::from(request).await.ok().and_then(|v| v.as_f64()) {
            Some(0.0) => RequestProbe::Loaded,
            Some(1.0) => RequestProbe::Blocked,
            _ => RequestProbe::Undecided,
        };
        detect::decide(element, request, dom::is_brave())
    }

    /// One detection at a time: callers during a run share its promise.
    fn check(self: &Rc<Self>) -> Promise {
        if let Some(p) = self.inflight.borrow().as_ref() {
            return p.clone();
        }
        let me = self.clone();
        let p = future_to_promise(async move {
            let v = me.detect().await;
            me.act(v, false);
            me.inflight.replace(None);
            Ok(verdict_object(v).into())
        });
        self.inflight.replace(Some(p.clone()));
        p
    }

    fn act(self: &Rc<Self>, v: Verdict, recheck: bool) {
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
                if recheck {
                    let variant = self.shown.borrow().as_ref().map(|s| s.variant.clone());
                    self.emit("verification_failed", self.wall_meta(variant.as_deref(), Some(t)));
                    self.note("Your blocker still blocks this site. Follow the steps, then try again.");
                } else {
                    self.show_wall(t, false);
                }
            }
            Verdict::Clean => {
                let variant = self.shown.borrow().as_ref().map(|s| s.variant.clone());
                if self.has(WALL) && !self.has(CONVERTED) {
                    self.set(CONVERTED);
                    let v = variant.unwrap_or_else(|| self.session.borrow().variant.clone());
                    self.emit("conversion_allowlist", meta(Some(&v).filter(|v| !v.is_empty()).map(|v| v.as_str()), None));
                }
                let forced = self.shown.borrow().as_ref().is_some_and(|s| s.forced);
                if recheck || !forced {
                    self.shown.replace(None);
                }
            }
            Verdict::Undecided if recheck => self.note("We could not check just now. Please try again."),
            Verdict::Undecided => {}
        }
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
            set(&m, "debug", &JsValue::TRUE);
        }
        m
    }

    fn variant_for(&self, cfg: &config::Wall) -> Option<Variant> {
        if let Some(f) = &self.forced_variant {
            if let Some(v) = cfg.variant(f) {
                return Some(v.clone());
            }
        }
        let s = self.session.borrow();
        cfg.variant(&s.variant).or_else(|| cfg.assign(&s.id)).cloned()
    }

    fn show_wall(self: &Rc<Self>, blocker: BlockerType, forced: bool) {
        if self.shown.borrow().is_some() {
            return;
        }
        let cfg = self.config.borrow();
        let cfg = match cfg.as_ref() {
            Some(c) if forced || (c.active && !c.wall.excludes(&dom::pathname())) => c,
            // A wall without its site's texts is only shown on request.
            None if forced => &SiteConfig { active: true, wall: config::Wall::default() },
            _ => return,
        };
        let variant = self.variant_for(&cfg.wall);
        let kind = variant.as_ref().and_then(|v| v.kind).unwrap_or(cfg.wall.kind);
        if !forced && (variant.is_none() || (kind == Kind::Soft && self.has(DISMISSED))) {
            return;
        }
        let name = variant.as_ref().map_or("control", |v| v.name.as_str()).to_owned();
        let v = variant.as_ref();
        let subscribe_url = v.and_then(|v| v.subscribe_url.as_deref()).or(cfg.wall.subscribe_url.as_deref());
        let subscribe_text =
            v.and_then(|v| v.subscribe_text.as_deref()).or(cfg.wall.subscribe_text.as_deref()).unwrap_or(DEFAULT_SUBSCRIBE_TEXT);
        let texts = Texts {
            title: v.and_then(|v| v.title.as_deref()).unwrap_or(DEFAULT_TITLE),
            body: v.and_then(|v| v.body.as_deref()).unwrap_or(DEFAULT_BODY),
            kind,
            blocker,
            subscribe: subscribe_url.map(|u| (u, subscribe_text)),
        };
        let weak: Weak<Sdk> = Rc::downgrade(self);
        let on = Rc::new(move |a| {
            if let Some(s) = weak.upgrade() {
                s.on_action(a);
            }
        });
        let dismiss_after = cfg.wall.dismiss_after_seconds.unwrap_or(config::DEFAULT_DISMISS_AFTER);
        let Ok(wall) = Wall::show(&texts, dismiss_after, on) else { return };
        self.shown.replace(Some(Shown { wall, variant: name.clone(), forced, help_sent: Cell::new(false) }));
        if forced {
            self.emit("wall_displayed", self.wall_meta(Some(&name), Some(blocker)));
        } else if !self.has(WALL) {
            self.session.borrow_mut().variant = name.clone();
            self.set(WALL);
            self.emit("wall_displayed", meta(Some(&name), Some(blocker)));
        }
    }

    fn on_action(self: &Rc<Self>, a: Action) {
        let Some(variant) = self.shown.borrow().as_ref().map(|s| s.variant.clone()) else { return };
        match a {
            Action::Recheck => {
                self.note("Checking\u{2026}");
                let me = self.clone();
                spawn_local(async move {
                    let v = me.detect().await;
                    me.act(v, true);
                });
            }
            Action::Help => {
                let first = {
                    let shown = self.shown.borrow();
                    let s = shown.as_ref().expect_throw("the wall is shown");
                    s.wall.toggle_help() && !s.help_sent.replace(true)
                };
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

fn set(o: &Object, k: &str, v: &JsValue) {
    let _ = Reflect::set(o, &JsValue::from_str(k), v);
}

fn meta(variant: Option<&str>, blocker: Option<BlockerType>) -> Object {
    let m = Object::new();
    if let Some(v) = variant {
        set(&m, "variant", &JsValue::from_str(v));
    }
    if let Some(b) = blocker {
        set(&m, "blocker_type", &JsValue::from_str(b.as_str()));
    }
    m
}

fn verdict_object(v: Verdict) -> Object {
    let o = Object::new();
    set(&o, "blocked", &JsValue::from_bool(v.blocked()));
    set(&o, "blockerType", &v.blocker_type().map_or(JsValue::NULL, |t| JsValue::from_str(t.as_str())));
    o
}
