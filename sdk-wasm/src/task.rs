//! The SDK's own executor, in place of wasm-bindgen-futures (its queue,
//! wakers and two closures per awaited promise weighed ~3 KB gzip). A job
//! only ever waits for one JS promise at a time (`settle`), so the promise
//! itself resumes the job: it calls the one Rust callback `wake`, bound to
//! the job's number; no waker is needed and none is used.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cell::Cell;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::Slot;

type Job = Pin<Box<dyn Future<Output = JsValue>>>;

enum Entry {
    Free,
    /// Being polled: taken out, its number not yet reusable.
    Polling,
    /// Waiting for a promise; `resolve` settles the job's own promise, if any.
    Parked(Job, Option<Function>),
}

struct Exec {
    jobs: Slot<Vec<Entry>>,
    /// The job being polled, so a `settle` knows whom its promise resumes.
    current: Cell<usize>,
    /// What the promise that resumed the current job settled to.
    settled: Slot<Option<Result<JsValue, JsValue>>>,
    wake: Slot<Option<Closure<dyn FnMut(u32, bool, JsValue)>>>,
}

// SAFETY: wasm32 without the `atomics` feature runs on one thread only.
unsafe impl Sync for Exec {}

static EXEC: Exec = Exec {
    jobs: Slot::new(Vec::new()),
    current: Cell::new(0),
    settled: Slot::new(None),
    wake: Slot::new(None),
};

#[wasm_bindgen]
extern "C" {
    /// A promise seen only for `then` with plain functions (js-sys's `then`
    /// takes Rust closures).
    type Thenable;
    #[wasm_bindgen(method)]
    fn then(this: &Thenable, fulfilled: &Function, rejected: &Function);
}

/// `wake` bound to a job and an outcome, as a JS function of the value.
fn resumer(job: usize, ok: bool) -> Function {
    let mut w = EXEC.wake.borrow_mut();
    let w = w.get_or_insert_with(|| Closure::new(wake));
    let f: &Function = w.as_ref().unchecked_ref();
    f.bind2(&JsValue::NULL, &JsValue::from_f64(job as f64), &JsValue::from_bool(ok)).unchecked_into()
}

/// Resumes job `job` once `p` settles.
fn resume_on(p: &Promise, job: usize) {
    p.unchecked_ref::<Thenable>().then(&resumer(job, true), &resumer(job, false));
}

/// Runs `job` from a microtask (never inside its caller); with `resolve`,
/// calls it with the job's output.
pub fn spawn(job: impl Future<Output = JsValue> + 'static, resolve: Option<Function>) {
    let job: Job = Box::pin(job);
    let n = {
        let mut jobs = EXEC.jobs.borrow_mut();
        let entry = Entry::Parked(job, resolve);
        match jobs.iter_mut().enumerate().find(|(_, e)| matches!(e, Entry::Free)) {
            Some((n, free)) => {
                *free = entry;
                n
            }
            None => {
                jobs.push(entry);
                jobs.len() - 1
            }
        }
    };
    resume_on(&Promise::resolve(&JsValue::UNDEFINED), n);
}

/// Like `spawn`, and a promise of the job's output.
pub fn spawn_promise(job: impl Future<Output = JsValue> + 'static) -> Promise {
    let mut resolve = None;
    let p = Promise::new(&mut |r, _| resolve = Some(r));
    spawn(job, resolve);
    p
}

fn wake(job: u32, ok: bool, value: JsValue) {
    let n = job as usize;
    let taken = EXEC.jobs.borrow_mut().get_mut(n).map(|e| core::mem::replace(e, Entry::Polling));
    let Some(Entry::Parked(mut fut, resolve)) = taken else { return };
    EXEC.settled.replace(Some(if ok { Ok(value) } else { Err(value) }));
    EXEC.current.set(n);
    let entry = match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => {
            if let Some(r) = resolve {
                let _ = r.call1(&JsValue::UNDEFINED, &v);
            }
            Entry::Free
        }
        Poll::Pending => Entry::Parked(fut, resolve),
    };
    // The job's entry is still there (`Polling`): entries are never removed.
    if let Some(e) = EXEC.jobs.borrow_mut().get_mut(n) {
        *e = entry;
    }
}

/// Waits for a promise: its value, or what it was rejected with.
pub fn settle(p: Promise) -> Settle {
    Settle(Some(p))
}

pub struct Settle(Option<Promise>);

impl Future for Settle {
    type Output = Result<JsValue, JsValue>;

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        match self.0.take() {
            Some(p) => {
                resume_on(&p, EXEC.current.get());
                Poll::Pending
            }
            // Polled again: only the promise's own callback polls this job.
            None => Poll::Ready(EXEC.settled.replace(None).unwrap_or(Err(JsValue::UNDEFINED))),
        }
    }
}
