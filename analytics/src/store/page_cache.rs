//! SQLite's own page cache behind a thin wrapper that skips truncations that
//! have nothing to drop.
//!
//! When a B-tree balance puts its new pages in ascending order it parks one
//! page for a moment at the lock page's number (1 GiB ÷ page size + 1).
//! SQLite's cache then takes that number as its largest key until its next
//! truncation, and the end of every write transaction truncates the cache to
//! the database's size: while the database is under 1 GiB, each commit after
//! such a balance scans the cache's whole hash (~4,000 pages for a writer's
//! cache of 16 MB). With index tables of random keys that is about one commit in five,
//! and was 7 % of the writer thread's time under load (BENCHMARKS.md, session
//! 10). The wrapper keeps its own bound on the keys it handed out and passes a
//! truncation on only when a page may lie at or past its limit.

use std::ffi::{c_int, c_uint};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use rusqlite::ffi;

/// SQLite's default cache, which every call is handed to.
static DEFAULT: OnceLock<Methods> = OnceLock::new();

struct Methods(ffi::sqlite3_pcache_methods2);

// SAFETY: function pointers and SQLite's own argument for them, set once
// before SQLite starts and only read afterwards; SQLite calls the default
// cache from any thread.
unsafe impl Send for Methods {}
// SAFETY: as for Send.
unsafe impl Sync for Methods {}

/// Truncations the wrapper did not pass on, for tests and diagnostics.
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// SQLite's lock page starts at this byte (`PENDING_BYTE`); no page is stored there.
const LOCK_BYTE: c_uint = 0x4000_0000;

struct Cache {
    inner: *mut ffi::sqlite3_pcache,
    keys: KeyBound,
}

/// What the wrapper knows of the keys a cache holds: enough to tell that no
/// page lies at or past a truncation's limit. It may overestimate (the cache
/// drops pages it does not tell about), never underestimate.
#[derive(Debug)]
struct KeyBound {
    /// Every page held has a key of at most this, except pages parked at `lock_page`.
    max_key: c_uint,
    lock_page: c_uint,
    /// Pages moved to `lock_page` and not yet moved away.
    parked: u32,
}

impl KeyBound {
    fn new(page_size: c_int) -> KeyBound {
        let page_size = c_uint::try_from(page_size).unwrap_or(1).max(1);
        KeyBound { max_key: 0, lock_page: LOCK_BYTE / page_size + 1, parked: 0 }
    }

    fn fetched(&mut self, key: c_uint) {
        self.max_key = self.max_key.max(key);
    }

    fn rekeyed(&mut self, old: c_uint, new: c_uint) {
        if new == self.lock_page {
            self.parked += 1;
        } else {
            self.max_key = self.max_key.max(new);
        }
        if old == self.lock_page {
            self.parked = self.parked.saturating_sub(1);
        }
    }

    /// Whether a page may be held at `limit` or past it.
    fn may_hold_from(&self, limit: c_uint) -> bool {
        self.parked > 0 || self.max_key >= limit
    }

    /// The cache dropped every page from `limit` on.
    fn truncated(&mut self, limit: c_uint) {
        self.max_key = self.max_key.min(limit.saturating_sub(1));
        if limit <= self.lock_page {
            self.parked = 0;
        }
    }
}

/// Puts the wrapper in front of SQLite's page cache for every connection
/// opened afterwards. Returns false (and changes nothing) if SQLite has
/// already started, since it takes a page cache only before then.
///
/// # Safety
/// No other thread may use SQLite while this runs: `sqlite3_config` is not
/// thread-safe. Call it at the start of `main`, like the allocator's settings.
pub unsafe fn install() -> bool {
    let mut default = std::mem::MaybeUninit::<ffi::sqlite3_pcache_methods2>::zeroed();
    // SAFETY: GETPCACHE2 writes the current methods into the struct we pass;
    // the caller guarantees no concurrent use of SQLite.
    let got = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_GETPCACHE2, default.as_mut_ptr()) };
    if got != ffi::SQLITE_OK {
        return false;
    }
    // SAFETY: SQLite filled it in (it returned SQLITE_OK).
    let default = unsafe { default.assume_init() };
    let default = &DEFAULT.get_or_init(|| Methods(default)).0;
    let methods = ffi::sqlite3_pcache_methods2 {
        iVersion: 1,
        pArg: default.pArg,
        xInit: default.xInit,
        xShutdown: default.xShutdown,
        xCreate: Some(create),
        xCachesize: Some(cachesize),
        xPagecount: Some(pagecount),
        xFetch: Some(fetch),
        xUnpin: Some(unpin),
        xRekey: Some(rekey),
        xTruncate: Some(truncate),
        xDestroy: Some(destroy),
        xShrink: Some(shrink),
    };
    // SAFETY: SQLite copies the struct; every function in it delegates to the
    // default methods kept in DEFAULT for the life of the process.
    unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_PCACHE2, &methods as *const ffi::sqlite3_pcache_methods2) == ffi::SQLITE_OK }
}

/// How many truncations had nothing to drop and were not passed on.
pub fn skipped_truncations() -> u64 {
    SKIPPED.load(Ordering::Relaxed)
}

fn default() -> &'static ffi::sqlite3_pcache_methods2 {
    &DEFAULT.get().expect("installed before SQLite calls the wrapper").0
}

/// # Safety
/// `p` must come from `create` and not be destroyed.
unsafe fn cache<'a>(p: *mut ffi::sqlite3_pcache) -> &'a mut Cache {
    // SAFETY: the caller's guarantee; SQLite uses a cache from one thread at a time.
    unsafe { &mut *p.cast::<Cache>() }
}

unsafe extern "C" fn create(page_size: c_int, extra: c_int, purgeable: c_int) -> *mut ffi::sqlite3_pcache {
    let make = default().xCreate.expect("SQLite's cache creates caches");
    // SAFETY: the default cache's own constructor, with SQLite's arguments.
    let inner = unsafe { make(page_size, extra, purgeable) };
    if inner.is_null() {
        return std::ptr::null_mut();
    }
    Box::into_raw(Box::new(Cache { inner, keys: KeyBound::new(page_size) })).cast()
}

unsafe extern "C" fn cachesize(p: *mut ffi::sqlite3_pcache, pages: c_int) {
    // SAFETY: `p` is one of ours (SQLite's contract); delegated as is.
    unsafe {
        let c = cache(p);
        (default().xCachesize.expect("SQLite's cache sizes"))(c.inner, pages);
    }
}

unsafe extern "C" fn pagecount(p: *mut ffi::sqlite3_pcache) -> c_int {
    // SAFETY: as in `cachesize`.
    unsafe {
        let c = cache(p);
        (default().xPagecount.expect("SQLite's cache counts"))(c.inner)
    }
}

unsafe extern "C" fn fetch(p: *mut ffi::sqlite3_pcache, key: c_uint, create: c_int) -> *mut ffi::sqlite3_pcache_page {
    // SAFETY: as in `cachesize`.
    unsafe {
        let c = cache(p);
        let page = (default().xFetch.expect("SQLite's cache fetches"))(c.inner, key, create);
        if !page.is_null() {
            c.keys.fetched(key);
        }
        page
    }
}

unsafe extern "C" fn unpin(p: *mut ffi::sqlite3_pcache, page: *mut ffi::sqlite3_pcache_page, discard: c_int) {
    // SAFETY: as in `cachesize`. A discarded page only makes the bound looser.
    unsafe {
        let c = cache(p);
        (default().xUnpin.expect("SQLite's cache unpins"))(c.inner, page, discard);
    }
}

unsafe extern "C" fn rekey(p: *mut ffi::sqlite3_pcache, page: *mut ffi::sqlite3_pcache_page, old: c_uint, new: c_uint) {
    // SAFETY: as in `cachesize`.
    unsafe {
        let c = cache(p);
        (default().xRekey.expect("SQLite's cache rekeys"))(c.inner, page, old, new);
        c.keys.rekeyed(old, new);
    }
}

unsafe extern "C" fn truncate(p: *mut ffi::sqlite3_pcache, limit: c_uint) {
    // SAFETY: as in `cachesize`.
    unsafe {
        let c = cache(p);
        if !c.keys.may_hold_from(limit) {
            // No page at or past `limit`: the default cache would only scan.
            SKIPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        (default().xTruncate.expect("SQLite's cache truncates"))(c.inner, limit);
        c.keys.truncated(limit);
    }
}

unsafe extern "C" fn destroy(p: *mut ffi::sqlite3_pcache) {
    // SAFETY: `p` came from `Box::into_raw` in `create`; SQLite destroys a
    // cache once and never uses it again.
    unsafe {
        let c = Box::from_raw(p.cast::<Cache>());
        (default().xDestroy.expect("SQLite's cache is destroyed"))(c.inner);
    }
}

unsafe extern "C" fn shrink(p: *mut ffi::sqlite3_pcache) {
    // SAFETY: as in `cachesize`.
    unsafe {
        let c = cache(p);
        (default().xShrink.expect("SQLite's cache shrinks"))(c.inner);
    }
}

#[cfg(test)]
mod tests {
    use super::KeyBound;

    /// A cache of 4 KiB pages that has handed out pages 1..=100.
    fn hundred_pages() -> KeyBound {
        let mut keys = KeyBound::new(4096);
        for key in 1..=100 {
            keys.fetched(key);
        }
        keys
    }

    #[test]
    fn nothing_past_the_largest_key_handed_out_needs_a_truncation() {
        let keys = hundred_pages();
        assert_eq!(keys.lock_page, 262_145);
        assert!(!keys.may_hold_from(101));
        assert!(keys.may_hold_from(100));
    }

    #[test]
    fn a_page_parked_at_the_lock_page_and_moved_away_leaves_no_trace() {
        let mut keys = hundred_pages();
        // balance_nonroot swapping pages 50 and 80 through the lock page.
        keys.rekeyed(50, 262_145);
        keys.rekeyed(80, 50);
        keys.rekeyed(262_145, 80);
        assert!(!keys.may_hold_from(101));
    }

    #[test]
    fn a_page_still_parked_is_truncated_and_forgotten() {
        let mut keys = hundred_pages();
        keys.rekeyed(50, 262_145);
        assert!(keys.may_hold_from(101));
        keys.truncated(101);
        assert!(!keys.may_hold_from(101));
    }

    #[test]
    fn pages_past_a_shrunk_end_are_truncated_once() {
        let mut keys = hundred_pages();
        // A rolled-back transaction had grown the database to 120 pages.
        for key in 101..=120 {
            keys.fetched(key);
        }
        assert!(keys.may_hold_from(101));
        keys.truncated(101);
        assert!(!keys.may_hold_from(101));
        // Clearing the cache (limit 1) is always passed on while pages are held.
        assert!(keys.may_hold_from(1));
    }

    #[test]
    fn a_page_moved_past_the_end_counts() {
        let mut keys = hundred_pages();
        keys.rekeyed(5, 200);
        assert!(keys.may_hold_from(101));
        assert!(!keys.may_hold_from(201));
    }

    #[test]
    fn other_page_sizes_have_their_own_lock_page() {
        assert_eq!(KeyBound::new(65_536).lock_page, 16_385);
        assert_eq!(KeyBound::new(512).lock_page, 2_097_153);
    }
}
