//! Fixed-window rate limits (DESIGN §5.4): a window of 60 seconds starts at a
//! bucket's first request; request `limit + 1` of a window is refused.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use http::HeaderMap;
use uuid::Uuid;

pub const WINDOW_SECS: i64 = 60;
/// Expired windows are swept when the table grows past this many entries.
const SWEEP_AT: usize = 50_000;

/// Who a request is counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Bucket {
    /// Ingestion (and the public SDK paths) per client address.
    IngestAddress(IpAddr),
    /// Ingestion per presented key (its SHA-256).
    IngestKey([u8; 32]),
    /// The API per key.
    Key(Uuid),
    /// Requests that failed authentication, per address.
    FailedAuth(IpAddr),
    /// Unauthenticated, non-ingestion paths per address.
    Public(IpAddr),
    /// The dashboard per session (the SHA-256 of its cookie's token).
    Session([u8; 32]),
    /// A wall preview's page and sandbox per draft token (its SHA-256).
    Preview([u8; 32]),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Unix epoch seconds when the window ends.
    pub reset: i64,
}

impl Decision {
    /// Seconds until the window ends, at least 1.
    pub fn retry_after(&self, now: i64) -> u64 {
        (self.reset - now).max(1) as u64
    }

    /// Of two decisions that both apply, the one to report: a refusal first,
    /// then the one with fewer requests left.
    pub fn stricter(self, other: Decision) -> Decision {
        match (self.allowed, other.allowed) {
            (true, false) => other,
            (false, true) => self,
            _ if other.remaining < self.remaining => other,
            _ => self,
        }
    }

    pub fn write_headers(&self, headers: &mut HeaderMap) {
        headers.insert("x-ratelimit-limit", self.limit.into());
        headers.insert("x-ratelimit-remaining", self.remaining.into());
        headers.insert("x-ratelimit-reset", self.reset.into());
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: i64,
    count: u32,
}

#[derive(Debug, Default)]
pub struct RateLimiter {
    windows: Mutex<HashMap<Bucket, Window>>,
}

impl RateLimiter {
    /// Counts one request against `bucket`; `None` when `limit` is 0 (disabled).
    pub fn check(&self, bucket: Bucket, limit: u32, now: i64) -> Option<Decision> {
        if limit == 0 {
            return None;
        }
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if windows.len() >= SWEEP_AT {
            windows.retain(|_, w| now < w.start + WINDOW_SECS);
        }
        let w = windows.entry(bucket).or_insert(Window { start: now, count: 0 });
        if now >= w.start + WINDOW_SECS {
            *w = Window { start: now, count: 0 };
        }
        let allowed = w.count < limit;
        if allowed {
            w.count += 1;
        }
        Some(Decision { allowed, limit, remaining: limit - w.count, reset: w.start + WINDOW_SECS })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip() -> IpAddr {
        "127.0.0.1".parse().unwrap()
    }

    #[test]
    fn refuses_the_request_after_the_limit_until_the_window_ends() {
        let rl = RateLimiter::default();
        for i in 0..3 {
            let d = rl.check(Bucket::Public(ip()), 3, 1000 + i).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 2 - i as u32);
            assert_eq!(d.reset, 1060);
        }
        let d = rl.check(Bucket::Public(ip()), 3, 1059).unwrap();
        assert!(!d.allowed);
        assert_eq!((d.remaining, d.retry_after(1059)), (0, 1));
        let d = rl.check(Bucket::Public(ip()), 3, 1060).unwrap();
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset), (2, 1120));
    }

    #[test]
    fn buckets_are_independent_and_zero_disables() {
        let rl = RateLimiter::default();
        assert!(rl.check(Bucket::Public(ip()), 1, 0).unwrap().allowed);
        assert!(!rl.check(Bucket::Public(ip()), 1, 0).unwrap().allowed);
        assert!(rl.check(Bucket::FailedAuth(ip()), 1, 0).unwrap().allowed);
        assert!(rl.check(Bucket::Public(ip()), 0, 0).is_none());
    }

    #[test]
    fn stricter_prefers_refusals_then_fewer_remaining() {
        let a = Decision { allowed: true, limit: 10, remaining: 5, reset: 0 };
        let b = Decision { allowed: true, limit: 10, remaining: 2, reset: 0 };
        let c = Decision { allowed: false, limit: 10, remaining: 0, reset: 0 };
        assert_eq!(a.stricter(b), b);
        assert_eq!(b.stricter(a), b);
        assert_eq!(a.stricter(c), c);
        assert_eq!(c.stricter(a), c);
    }
}
