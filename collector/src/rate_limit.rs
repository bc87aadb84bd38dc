//! Fixed-window rate limits (DESIGN §5.4): a window of 60 seconds starts at a
//! bucket's first request; a request that would take a window past its limit
//! is refused.
//!
//! Memory is bounded whatever clients send: buckets are only made for what
//! the server verified (a key id, a live session or draft) or for the
//! client's network, never for a presented token. The windows live in
//! [`SHARDS`] shards, each keeping two generations: a window touched goes to
//! the current one, and every [`WINDOW_SECS`] the previous generation (all
//! expired by then) is dropped, so expired windows go without a scan. A shard
//! that reaches its share of [`MAX_WINDOWS`] drops its older generation early.
//!
//! When several nodes serve from one database, the buckets of verified keys
//! and sites (what every node must count together) are counted there instead,
//! one statement per check ([`analytics::shared`]); the others stay per node.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use analytics::Store;
use http::HeaderMap;
use uuid::Uuid;

use crate::error::ApiError;

pub const WINDOW_SECS: i64 = 60;
/// Independent locks, so requests on two cores rarely wait for each other.
const SHARDS: usize = 16;
/// The most windows kept in all: about 100 bytes each, a few MB at most.
pub const MAX_WINDOWS: usize = 65_536;
const SHARD_CAP: usize = MAX_WINDOWS / SHARDS;
/// Expired shared windows a node deletes at most once a second: far more than
/// keys and sites can start in a second.
const SWEEP: u32 = 1000;

/// The network a client address is counted as: an IPv4 address itself, an
/// IPv6 address by its /64 (the block one subscriber usually holds whole, so
/// hopping addresses inside it gains nothing). Every limit keyed by address
/// uses it.
pub fn client_network(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let [a, b, c, d, ..] = v6.segments();
                IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
            }
        },
    }
}

/// Who a request is counted against. Address buckets hold a
/// [`client_network`]; the others something the server verified.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Bucket {
    /// Events (and ingestion requests) per client network.
    IngestAddress(IpAddr),
    /// Events per verified API key.
    IngestKey(Uuid),
    /// The API per verified key.
    Key(Uuid),
    /// Requests that failed authentication, per network.
    FailedAuth(IpAddr),
    /// Unauthenticated, non-ingestion paths per network.
    Public(IpAddr),
    /// The SDK's files, the bait script, site configs and the demo, per network.
    PublicFiles(IpAddr),
    /// The dashboard per live session (the SHA-256 of its cookie's token).
    Session([u8; 32]),
    /// A wall preview's page and sandbox per live draft token (its SHA-256).
    Preview([u8; 32]),
    /// Events per site, for the optional per-site ceiling.
    SiteEvents(Uuid),
}

impl Bucket {
    /// The bucket's name in the shared windows, for the buckets every node
    /// must count together: a key's or a site's, whichever node the load
    /// balancer picks. Address buckets stay per node (the load balancer is
    /// expected to send one client to one node), as do a session's and a
    /// draft's, which only page through the dashboard.
    fn shared_name(&self) -> Option<String> {
        match self {
            Bucket::IngestKey(id) => Some(format!("ingest-key:{id}")),
            Bucket::Key(id) => Some(format!("key:{id}")),
            Bucket::SiteEvents(id) => Some(format!("site-events:{id}")),
            _ => None,
        }
    }
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
struct Shard {
    current: HashMap<Bucket, Window>,
    /// Windows not touched since the last swap; all expired by the next one.
    previous: HashMap<Bucket, Window>,
    swapped_at: i64,
}

impl Shard {
    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// The bucket's live window, made (at count 0) if it has none.
    fn window(&mut self, bucket: Bucket, now: i64, evicted: &AtomicU64) -> &mut Window {
        if now >= self.swapped_at + WINDOW_SECS {
            self.previous = std::mem::take(&mut self.current);
            self.swapped_at = now;
        }
        if !self.current.contains_key(&bucket) {
            let carried = self.previous.remove(&bucket).filter(|w| now < w.start + WINDOW_SECS);
            if carried.is_none() && self.len() >= SHARD_CAP {
                // Full: the older generation goes first, then the current one
                // becomes the older (its windows are still found until the next eviction).
                if self.previous.is_empty() {
                    self.previous = std::mem::take(&mut self.current);
                } else {
                    evicted.fetch_add(self.previous.len() as u64, Ordering::Relaxed);
                    self.previous.clear();
                }
            }
            self.current.insert(bucket.clone(), carried.unwrap_or(Window { start: now, count: 0 }));
        }
        let w = self.current.get_mut(&bucket).expect("inserted above");
        if now >= w.start + WINDOW_SECS {
            *w = Window { start: now, count: 0 };
        }
        w
    }
}

pub struct RateLimiter {
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    evicted: AtomicU64,
    /// The database the shared buckets are counted in, when other nodes serve from it too.
    shared: Option<Arc<Store>>,
    /// The second this node last swept expired shared windows.
    swept_at: AtomicI64,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter").field("shared", &self.shared.is_some()).finish_non_exhaustive()
    }
}

impl Default for RateLimiter {
    fn default() -> RateLimiter {
        RateLimiter {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            evicted: AtomicU64::new(0),
            shared: None,
            swept_at: AtomicI64::new(0),
        }
    }
}

impl RateLimiter {
    /// A limiter for a collector on `store`: the shared buckets are counted
    /// in it when other nodes serve from it too, else in memory like the rest.
    pub fn new(store: &Arc<Store>) -> RateLimiter {
        RateLimiter { shared: store.is_shared().then(|| store.clone()), ..RateLimiter::default() }
    }

    /// Counts one request against `bucket`; `None` when `limit` is 0 (disabled).
    pub async fn check(&self, bucket: Bucket, limit: u32, now: i64) -> Result<Option<Decision>, ApiError> {
        self.check_n(bucket, 1, limit, now).await
    }

    /// Counts `n` units (events of a batch) against `bucket`: all of them, or
    /// none when they would take the window past `limit`. Only a shared
    /// bucket on a shared database waits (for one statement), and only it can
    /// fail (503 when the database cannot be reached).
    pub async fn check_n(&self, bucket: Bucket, n: u32, limit: u32, now: i64) -> Result<Option<Decision>, ApiError> {
        if limit == 0 {
            return Ok(None);
        }
        match (&self.shared, bucket.shared_name()) {
            (Some(store), Some(name)) => self.count_shared(store.clone(), name, n, limit, now).await.map(Some),
            _ => Ok(Some(self.count_here(bucket, n, limit, now))),
        }
    }

    async fn count_shared(&self, store: Arc<Store>, name: String, n: u32, limit: u32, now: i64) -> Result<Decision, ApiError> {
        let last = self.swept_at.load(Ordering::Relaxed);
        let sweep = now > last && self.swept_at.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok();
        let w = tokio::task::spawn_blocking(move || {
            store.read(|c| {
                let w = analytics::shared::count_requests(c, &name, n, limit, WINDOW_SECS, now)?;
                if sweep {
                    // Sweeping is housekeeping: its failure must not refuse the request counted.
                    if let Err(e) = analytics::shared::sweep_windows(c, now, SWEEP) {
                        tracing::warn!(error = %e, "sweeping expired rate windows failed");
                    }
                }
                Ok(w)
            })
        })
        .await
        .map_err(ApiError::internal)??;
        Ok(Decision { allowed: w.allowed, limit, remaining: limit.saturating_sub(w.count), reset: w.expires_at })
    }

    /// Counts in this process's own windows.
    fn count_here(&self, bucket: Bucket, n: u32, limit: u32, now: i64) -> Decision {
        let shard = &self.shards[self.hasher.hash_one(&bucket) as usize % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        let w = shard.window(bucket, now, &self.evicted);
        let allowed = n <= limit - w.count;
        if allowed {
            w.count += n;
        }
        Decision { allowed, limit, remaining: limit - w.count, reset: w.start + WINDOW_SECS }
    }

    /// How many windows are kept now (for `/metrics`).
    pub fn windows(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len()).sum()
    }

    /// Windows dropped early because the limiter was full, since start.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    /// Without a shared store nothing waits, so the answer is ready at once.
    fn check_n(rl: &RateLimiter, bucket: Bucket, n: u32, limit: u32, now: i64) -> Option<Decision> {
        rl.check_n(bucket, n, limit, now).now_or_never().expect("ready at once").expect("infallible in memory")
    }

    fn check(rl: &RateLimiter, bucket: Bucket, limit: u32, now: i64) -> Option<Decision> {
        check_n(rl, bucket, 1, limit, now)
    }

    fn ip() -> IpAddr {
        "127.0.0.1".parse().unwrap()
    }

    #[test]
    fn refuses_the_request_after_the_limit_until_the_window_ends() {
        let rl = RateLimiter::default();
        for i in 0..3 {
            let d = check(&rl, Bucket::Public(ip()), 3, 1000 + i).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 2 - i as u32);
            assert_eq!(d.reset, 1060);
        }
        let d = check(&rl, Bucket::Public(ip()), 3, 1059).unwrap();
        assert!(!d.allowed);
        assert_eq!((d.remaining, d.retry_after(1059)), (0, 1));
        let d = check(&rl, Bucket::Public(ip()), 3, 1060).unwrap();
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset), (2, 1120));
    }

    #[test]
    fn buckets_are_independent_and_zero_disables() {
        let rl = RateLimiter::default();
        assert!(check(&rl, Bucket::Public(ip()), 1, 0).unwrap().allowed);
        assert!(!check(&rl, Bucket::Public(ip()), 1, 0).unwrap().allowed);
        assert!(check(&rl, Bucket::FailedAuth(ip()), 1, 0).unwrap().allowed);
        assert!(check(&rl, Bucket::Public(ip()), 0, 0).is_none());
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

    #[test]
    fn a_batch_counts_all_its_units_or_none() {
        let rl = RateLimiter::default();
        assert!(check_n(&rl, Bucket::Public(ip()), 8, 10, 0).unwrap().allowed);
        let d = check_n(&rl, Bucket::Public(ip()), 3, 10, 0).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.remaining, 2, "a refused batch takes nothing");
        assert!(check_n(&rl, Bucket::Public(ip()), 2, 10, 0).unwrap().allowed);
    }

    #[test]
    fn ipv6_clients_are_counted_per_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_network(a), client_network(b));
        assert_ne!(client_network(a), client_network(c));
        assert_eq!(client_network("::ffff:192.0.2.7".parse().unwrap()), "192.0.2.7".parse::<IpAddr>().unwrap());
        assert_eq!(client_network(ip()), ip());
    }

    #[test]
    fn expired_windows_go_with_the_second_swap_and_live_ones_are_kept() {
        let rl = RateLimiter::default();
        let site = |i: u32| Bucket::SiteEvents(Uuid::from_u128(i.into()));
        for i in 0..1000 {
            check(&rl, site(i), 5, 0);
        }
        assert_eq!(rl.windows(), 1000);
        assert_eq!(check(&rl, Bucket::Public(ip()), 5, 60).unwrap().reset, 120);
        for i in 1000..2000 {
            check(&rl, site(i), 5, 70);
        }
        assert_eq!(check(&rl, Bucket::Public(ip()), 5, 100).unwrap().remaining, 3, "a live window survives a swap");
        for i in 2000..3000 {
            check(&rl, site(i), 5, 140);
        }
        assert_eq!(rl.windows(), 2001, "the windows of second 0 are gone without a sweep");
    }

    #[test]
    fn the_table_never_holds_more_than_its_cap() {
        let rl = RateLimiter::default();
        for i in 0..(MAX_WINDOWS as u128 * 3) {
            check(&rl, Bucket::SiteEvents(Uuid::from_u128(i)), 5, 0);
        }
        assert!(rl.windows() <= MAX_WINDOWS, "{}", rl.windows());
        assert!(rl.evicted() > 0);
    }
}
