//! The SDK's own executor, in place of wasm-bindgen-futures (its queue,
//! wakers and two closures per awaited promise weighed ~3 KB gzip). A job
//! only ever waits for one promise at a time (`settle`), so that promise
//! itself resumes the job: it calls the one Rust callback `wake`, bound to
//! the job's number (its slot in a table); no waker is needed and none is used.
//!
//! `wake` is also the SDK's only other entry from JS: bound to `EVENT` it is
//! the DOM event listener (`listener`), bound to `RESOLVER` the executor of
//! the promises `spawn_promise` makes. It is a wasm export that `resumer`
//! reads from the instance's exports, not a wasm-bindgen `Closure`, whose
//! glue (a reference count and a `FinalizationRegistry`) and shims weigh more.

use alloc::boxed::Box;
use core::cell::Cell;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::Slot;

type Job = Pin<Box<dyn Future<Output = JsValue>>>;

/// A job waiting for a promise; `resolve` settles the job's own promise, if
/// any. Its number is its slot in `Exec::jobs`, which the one call of `wake`
/// its promise makes takes it from while the job runs. A table rather than the
/// job's address (200 B smaller) so that no value from JS is ever taken for
/// a pointer.
struct Parked {
    job: Job,
    resolve: Option<Function>,
}

/// A slot of the job table.
enum Entry {
    Free,
    /// Being polled: its slot is not free for the jobs it spawns.
    Running,
    Waiting(Parked),
}

struct Exec {
    jobs: Slot<alloc::vec::Vec<Entry>>,
    /// The job being polled, so a `settle` knows whom its promise resumes.
    current: Cell<u32>,
    /// What the promise that resumed the current job resolved to.
    settled: Slot<Option<JsValue>>,
    /// The resolve function `new Promise` just handed to `wake`.
    resolver: Slot<Option<Function>>,
}

// SAFETY: wasm32 without the `atomics` feature runs on one thread only.
unsafe impl Sync for Exec {}

static EXEC: Exec = Exec {
    jobs: Slot::new(alloc::vec::Vec::new()),
    current: Cell::new(0),
    settled: Slot::new(None),
    resolver: Slot::new(None),
};

/// `wake`'s first argument when it is not a job (never a slot: there are a
/// handful): a DOM event…
const EVENT: u32 = u32::MAX;
/// …or the resolve function of a promise being made.
const RESOLVER: u32 = u32::MAX - 1;

#[wasm_bindgen]
extern "C" {
    /// A promise seen only for `then` with plain functions (js-sys's `then`
    /// takes Rust closures).
    type Thenable;
    #[wasm_bindgen(method)]
    fn then(this: &Thenable, fulfilled: &Function);

    /// `new Promise(executor)` with a plain function (js-sys's takes a Rust closure).
    #[wasm_bindgen(js_name = Promise)]
    type PromiseClass;
    #[wasm_bindgen(constructor, js_class = "Promise")]
    fn new(executor: &Function) -> PromiseClass;
}

/// `wake` bound to a job (or `EVENT`, `RESOLVER`), as a JS function of the value:
/// the raw export takes the same arguments as its glue wrapper (a number and
/// any JS value), and keeps its name (`sdk-wasm/tools/short-imports.js`).
fn resumer(job: u32) -> Function {
    let f: Function = crate::js::prop(&wasm_bindgen::exports(), "__postern_wake").unchecked_into();
    f.bind1(&JsValue::NULL, &JsValue::from_f64(f64::from(job))).unchecked_into()
}

/// The DOM event listener: calls `crate::on_event`. Make it once and keep
/// it, so that it can be removed again.
pub fn listener() -> Function {
    resumer(EVENT)
}

/// Resumes job `job` once `p` resolves. The SDK only awaits promises that
/// never reject: its JS helpers take every failure as a value.
fn resume_on(p: &Promise, job: u32) {
    p.unchecked_ref::<Thenable>().then(&resumer(job));
}

/// Runs `job` from a microtask (never inside its caller); with `resolve`,
/// calls it with the job's output.
pub fn spawn(job: impl Future<Output = JsValue> + 'static, resolve: Option<Function>) {
    let parked = Entry::Waiting(Parked { job: Box::pin(job), resolve });
    let mut jobs = EXEC.jobs.borrow_mut();
    let n = match jobs.iter().position(|e| matches!(e, Entry::Free)) {
        Some(free) => {
            jobs[free] = parked;
            free
        }
        None => {
            jobs.push(parked);
            jobs.len() - 1
        }
    };
    drop(jobs);
    resume_on(&Promise::resolve(&JsValue::UNDEFINED), n as u32);
}

/// Like `spawn`, and a promise of the job's output.
pub fn spawn_promise(job: impl Future<Output = JsValue> + 'static) -> Promise {
    // The executor runs at once: `wake(RESOLVER, resolve, reject)`.
    let p: Promise = PromiseClass::new(&resumer(RESOLVER)).unchecked_into();
    spawn(job, EXEC.resolver.replace(None));
    p
}

/// Not API: exported only for `resumer`, under a name the npm package's
/// entry (`index.js`) does not re-export.
#[wasm_bindgen(js_name = __postern_wake)]
pub fn wake(job: u32, value: JsValue) {
    match job {
        EVENT => return crate::on_event(value.unchecked_into()),
        RESOLVER => return drop(EXEC.resolver.replace(Some(value.unchecked_into()))),
        _ => {}
    }
    // Taken out while it runs (it may spawn jobs); a call for no waiting job does nothing.
    let mut parked = {
        let mut jobs = EXEC.jobs.borrow_mut();
        let Some(entry @ Entry::Waiting(_)) = jobs.get_mut(job as usize) else { return };
        let Entry::Waiting(parked) = core::mem::replace(entry, Entry::Running) else { return };
        parked
    };
    EXEC.settled.replace(Some(value));
    EXEC.current.set(job);
    let entry = match parked.job.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => {
            if let Some(r) = &parked.resolve {
                crate::js::dom(r).call1(&JsValue::UNDEFINED, &v);
            }
            Entry::Free
        }
        Poll::Pending => Entry::Waiting(parked),
    };
    EXEC.jobs.borrow_mut()[job as usize] = entry;
}

/// Waits for a promise that never rejects: its value. Every
/// wait of the SDK is a promise (timers and page events are made promises
/// by the JS helpers), so there is one future type to poll.
pub fn settle(p: Promise) -> Settle {
    Settle(Some(p))
}

/// A job waiting for its promise; polled again only once `wake` has it.
pub struct Settle(Option<Promise>);

impl Future for Settle {
    type Output = JsValue;

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        match self.0.take() {
            Some(p) => {
                resume_on(&p, EXEC.current.get());
                Poll::Pending
            }
            // Polled again: only the `wake` it arranged polls this job.
            None => Poll::Ready(EXEC.settled.replace(None).unwrap_or(JsValue::UNDEFINED)),
        }
    }
}
