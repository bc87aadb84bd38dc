//! What one client may hold of the server, whatever it sends: a cap on the
//! connections served at once (beyond it the accept loop waits), a deadline
//! for a request's headers (hyper's, also the idle keep-alive limit) and one
//! for its whole body, and as many file descriptors as the system allows.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::config::Config;

/// The HTTP/1 connection builder with the configured deadlines.
pub fn builder(config: &Config) -> auto::Builder<TokioExecutor> {
    // HTTP/1 only: the automatic version detection would wait for a first
    // byte without any deadline.
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    // While a request waits (an event for its commit), hyper would read the
    // socket to notice a client gone mid-request and cancel the handler:
    // a system call per request, and a fresh 8 KB read buffer, as the
    // waiting request still holds views into the old one (BENCHMARKS.md).
    // A client that leaves is noticed when its answer is written instead;
    // an event queued for the writer is stored either way.
    builder
        .http1()
        .half_close(true)
        .timer(TokioTimer::new())
        // Runs from the moment hyper waits for a request's first byte, so an
        // idle kept-alive connection is closed after it too.
        .header_read_timeout(config.header_read_timeout);
    builder
}

/// Accepts connections while fewer than `--max-connections` are open.
pub struct Acceptor {
    listener: TcpListener,
    permits: Arc<Semaphore>,
}

impl Acceptor {
    pub fn new(listener: TcpListener, max_connections: usize) -> Acceptor {
        Acceptor { listener, permits: Arc::new(Semaphore::new(max_connections)) }
    }

    /// The next connection and its permit, which frees its place when dropped.
    /// At the cap no connection is accepted: new ones wait in the kernel's
    /// backlog, so the process never runs out of memory or descriptors.
    pub async fn accept(&self) -> (TcpStream, std::net::SocketAddr, OwnedSemaphorePermit) {
        let permit = self.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => return (stream, peer, permit),
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Raises the soft limit on open files to the hard limit, so `--max-connections`
/// is not cut short by a conservative default (often 1024).
pub fn raise_open_files_limit(wanted: usize) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        let before = limit.rlim_cur;
        if before < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                limit.rlim_cur = before;
            }
        }
    }
    // Each connection is a descriptor; the store, logs and webhooks need some too.
    let needed = wanted as u64 + 256;
    if (limit.rlim_cur as u64) < needed {
        tracing::warn!(open_files = limit.rlim_cur as u64, max_connections = wanted, "the open-files limit is below --max-connections; raise it (ulimit -n)");
    }
}

/// A request body that fails once its deadline passes: a client sending a
/// byte now and then cannot hold a connection and a handler for long.
pub struct Deadline<B> {
    body: B,
    sleep: Pin<Box<Sleep>>,
    limit: Duration,
}

impl<B> Deadline<B> {
    pub fn new(body: B, limit: Duration) -> Deadline<B> {
        Deadline { body, sleep: Box::pin(tokio::time::sleep_until(Instant::now() + limit)), limit }
    }
}

/// A body error: the client's, or the deadline.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the body was not received within {} seconds", .0.as_secs())]
    TimedOut(Duration),
    #[error(transparent)]
    Read(#[from] hyper::Error),
}

impl<B> Body for Deadline<B>
where
    B: Body<Error = hyper::Error> + Unpin,
{
    type Data = B::Data;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, BodyError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BodyError::from)));
        }
        match this.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyError::TimedOut(this.limit)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
