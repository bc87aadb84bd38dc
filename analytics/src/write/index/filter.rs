//! Which keys an index may hold in any of its levels (the writer's tail, the
//! hot level, the cold table), so that looking up a key new to the store costs
//! neither a search of the writer's maps nor a B-tree search.
//!
//! Nearly every event brings a new client event id, and many a new session:
//! each was searched for in the tail's map, the hot level and the cold table
//! (a random leaf page, often read from the file) only to be missing. A Bloom
//! filter of every key of the index answers "certainly not there" for all but
//! a few per cent of them.
//!
//! The filter is built from the cold table by a background thread at start-up
//! (and again when it fills up); until it is ready every lookup searches, as
//! before, but for a rebuild, during which the full filter goes on answering.
//! When it arrives it takes in the keys then in the writer's memory, and
//! those recorded meanwhile. A filter only ever errs towards searching:
//! deleted keys stay in it, and keys of a transaction that did not commit may
//! be added anyway.
//!
//! Its bits are its own rather than a crate's (fastbloom is the blocked Bloom
//! filter on crates.io): the keys arrive as a keyed SipHash, uniform already,
//! which such a crate would hash again per lookup, and the bits are the small
//! part here; building from the table beside the writer is the rest.

use std::sync::mpsc;

use rusqlite::{Connection, OpenFlags};

/// Bits per key the filter is sized for, and bits set per key: about 2.5 % of
/// missing keys still searched at capacity. With 6 bits (6 % at capacity) the
/// B-tree searches for the keys let through were 3.7 % of the writer's CPU;
/// 8 bits took 1.3 % off its CPU per event for 3.5 MB more on a 10 M-event
/// store (dd62702).
const BITS_PER_KEY: usize = 8;
const HASHES: u64 = 4;
/// Smallest capacity, in keys (a few hundred KiB).
const MIN_KEYS: usize = 1 << 18;
/// Keys read per read transaction while building.
const SCAN_CHUNK: usize = 50_000;

/// A filter is built for half as many keys again as the table holds, and
/// built again once it holds a third more than that: it lets 0.7 % of missing
/// keys through when built, 6 % at the end, under 3 % on average. With 6 bits
/// a key, built for a quarter more and again at twice that, it let through
/// 14 % on average, up to 29 %, each a B-tree search: the writer's CPU per
/// event was 2.5 % higher on a growing store (98d06da).
fn build_for(keys: usize) -> usize {
    keys + keys / 2
}

fn overfull(bloom: &Bloom) -> bool {
    bloom.keys > bloom.capacity + bloom.capacity / 3
}

struct Bloom {
    blocks: Vec<Block>,
    keys: usize,
    capacity: usize,
}

/// One cache line of bits. All of a key's bits lie in one block, so an insert
/// or a lookup touches one line of memory instead of one per hash: in a filter
/// of millions of keys each of those was a cache miss.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Block([u64; 8]);

const BLOCK_BITS: usize = 8 * std::mem::size_of::<Block>();

impl Bloom {
    fn with_capacity(keys: usize) -> Bloom {
        Bloom::sized(keys.max(MIN_KEYS))
    }

    fn sized(capacity: usize) -> Bloom {
        Bloom { blocks: vec![Block::default(); (capacity * BITS_PER_KEY).div_ceil(BLOCK_BITS)], keys: 0, capacity }
    }

    fn insert(&mut self, h: u64) {
        let i = block_of(self.blocks.len(), h);
        let block = &mut self.blocks[i].0;
        for p in bits_of(h) {
            block[p / 64] |= 1 << (p % 64);
        }
        self.keys += 1;
    }

    fn may_hold(&self, h: u64) -> bool {
        let block = &self.blocks[block_of(self.blocks.len(), h)].0;
        bits_of(h).all(|p| block[p / 64] & (1 << (p % 64)) != 0)
    }
}

/// A key's block, from all of its index hash (a keyed SipHash, already
/// uniform) mapped onto `n` blocks without a division.
fn block_of(n: usize, h: u64) -> usize {
    ((u128::from(h) * n as u128) >> 64) as usize
}

/// A key's bits in its block: four 9-bit fields of the hash's low bits, which
/// the block's choice hardly depends on.
fn bits_of(h: u64) -> impl Iterator<Item = usize> {
    (0..HASHES).map(move |i| ((h >> (9 * i)) as usize) % BLOCK_BITS)
}

enum State {
    /// Not started yet, or impossible (a database without a file).
    Idle,
    /// A thread builds it from the table; `since` are the keys recorded
    /// meanwhile; `full` is the filter it replaces, if any, which answers
    /// until then: it lets more missing keys through, but far from all
    /// (building for 1.4 million keys took 0.3 s, each 17 s at 40k events/s).
    Building { built: mpsc::Receiver<rusqlite::Result<Bloom>>, since: Vec<u64>, full: Option<Bloom>, started: std::time::Instant },
    Ready(Bloom),
    /// Building failed: every lookup searches.
    Off,
}

/// The keys of an index held in the writer's memory rather than in its table.
pub(super) trait Held {
    fn count(&self) -> usize;
    fn each(&self, f: impl FnMut(u64));
}

pub(super) struct Filter {
    /// The cold table.
    table: &'static str,
    /// One chunk of the index table's hashes, after a given entry, in order.
    scan: String,
    state: State,
}

impl Filter {
    pub fn new(index: &'static str) -> Filter {
        Filter {
            table: index,
            scan: format!("SELECT h, seq FROM {index} WHERE (h, seq) > (?1, ?2) ORDER BY h, seq LIMIT {SCAN_CHUNK}"),
            state: State::Idle,
        }
    }

    /// False when the index certainly does not hold the key.
    ///
    /// Builds start here, never in [`Filter::add`]: a lookup runs before its
    /// transaction changes the index, so every key the cold table took
    /// earlier is committed and in the builder's snapshot; the keys `held` in
    /// memory are taken in when the filter is ready, and those that leave
    /// memory for the table meanwhile are recorded ([`Filter::moved`]).
    pub fn may_hold(&mut self, conn: &Connection, h: u64, held: &impl Held) -> bool {
        if let State::Building { built, .. } = &mut self.state {
            match built.try_recv() {
                Err(mpsc::TryRecvError::Empty) => {}
                received => self.finish(received.ok(), held),
            }
        }
        // Built again when full, sized for what the index holds now
        // (retention deletes keys; a filter only ever gains them).
        if matches!(&self.state, State::Idle) || matches!(&self.state, State::Ready(bloom) if overfull(bloom)) {
            self.start(conn, held.count());
        }
        match &self.state {
            State::Ready(bloom) | State::Building { full: Some(bloom), .. } => bloom.may_hold(h),
            State::Idle | State::Building { full: None, .. } | State::Off => true,
        }
    }

    /// Takes in a key new to the index (before its transaction commits).
    pub fn add(&mut self, h: u64) {
        match &mut self.state {
            State::Building { since, full, .. } => {
                since.push(h);
                if let Some(bloom) = full {
                    bloom.insert(h);
                }
            }
            State::Ready(bloom) => bloom.insert(h),
            State::Idle | State::Off => {}
        }
    }

    /// Takes in a key that left memory for the cold table: while building,
    /// the scan may have passed its place already.
    pub fn moved(&mut self, h: u64) {
        if let State::Building { since, .. } = &mut self.state {
            since.push(h);
        }
    }

    /// Starts building from the table, sized for `held` more keys, recording
    /// keys from now on: the builder's snapshot begins later, so it holds
    /// every key committed to the table before.
    fn start(&mut self, conn: &Connection, held: usize) {
        let Some(path) = conn.path().filter(|p| !p.is_empty()).map(str::to_owned) else {
            self.state = State::Off;
            return;
        };
        let full = match std::mem::replace(&mut self.state, State::Idle) {
            State::Ready(bloom) => Some(bloom),
            _ => None,
        };
        let (tx, built) = mpsc::channel();
        let scan = self.scan.clone();
        let spawned = std::thread::Builder::new()
            .name("postern-filter".into())
            .spawn(move || {
                let _ = tx.send(build(&path, &scan, held));
            });
        self.state = match spawned {
            Ok(_) => State::Building { built, since: Vec::new(), full, started: std::time::Instant::now() },
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the index filter's thread; lookups search the index");
                State::Off
            }
        };
    }

    /// Takes in what the builder sent (`None`: it died): the filter, with the
    /// keys recorded meanwhile and those `held` in memory now, or lookups that
    /// always search.
    fn finish(&mut self, received: Option<rusqlite::Result<Bloom>>, held: &impl Held) {
        let State::Building { since, started, .. } = &mut self.state else {
            return;
        };
        self.state = match received {
            Some(Ok(mut bloom)) => {
                for h in since.drain(..) {
                    bloom.insert(h);
                }
                held.each(|h| bloom.insert(h));
                tracing::info!(
                    keys = bloom.keys,
                    capacity = bloom.capacity,
                    kib = bloom.blocks.len() * BLOCK_BITS / 8 / 1024,
                    seconds = started.elapsed().as_secs_f64(),
                    table = self.table,
                    "index filter ready"
                );
                State::Ready(bloom)
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, table = self.table, "building an index filter failed; lookups search the index");
                State::Off
            }
            None => State::Off,
        };
    }

    /// Waits for a filter being built (tests).
    #[cfg(test)]
    pub fn wait(&mut self, held: &impl Held) {
        if let State::Building { built, .. } = &self.state {
            let received = built.recv().ok();
            self.finish(received, held);
        }
    }

    #[cfg(test)]
    pub fn is_ready(&self) -> bool {
        matches!(self.state, State::Ready(_))
    }
}

/// Counts the table's keys, then reads them into a filter sized for them and
/// `also` more ([`build_for`]). Two passes instead of keeping the hashes (8
/// bytes a key).
fn build(path: &str, scan: &str, also: usize) -> rusqlite::Result<Bloom> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    let mut stmt = conn.prepare(scan)?;
    let mut keys = 0;
    each_key(&mut stmt, |_| keys += 1)?;
    let mut bloom = Bloom::with_capacity(build_for(keys + also));
    each_key(&mut stmt, |h| bloom.insert(h as u64))?;
    Ok(bloom)
}

/// Reads the table in chunks, each its own short read transaction: one long
/// one would keep the writer's checkpoints from resetting the WAL, which would
/// grow for as long as the scan takes. A key committed before the build
/// started stays in its place, so some chunk reads it; later ones are in `since`.
fn each_key(stmt: &mut rusqlite::Statement<'_>, mut f: impl FnMut(i64)) -> rusqlite::Result<()> {
    let mut after = (i64::MIN, i64::MIN);
    loop {
        let mut rows = stmt.query([after.0, after.1])?;
        let mut read = 0;
        while let Some(r) = rows.next()? {
            let (h, seq) = (r.get(0)?, r.get(1)?);
            f(h);
            read += 1;
            after = (h, seq);
        }
        if read < SCAN_CHUNK {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database with an index table holding `keys`.
    fn table(keys: &[u64]) -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("filter.db")).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE idx (h INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (h, seq)) WITHOUT ROWID;",
        )
        .unwrap();
        insert(&conn, keys);
        (dir, conn)
    }

    fn insert(conn: &Connection, keys: &[u64]) {
        conn.execute_batch("BEGIN").unwrap();
        for (i, &h) in keys.iter().enumerate() {
            conn.execute("INSERT INTO idx (h, seq) VALUES (?1, ?2)", [h as i64, i as i64]).unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    /// Keys held in memory.
    struct Keys(Vec<u64>);

    impl Held for Keys {
        fn count(&self) -> usize {
            self.0.len()
        }

        fn each(&self, f: impl FnMut(u64)) {
            self.0.iter().copied().for_each(f);
        }
    }

    const NONE: Keys = Keys(Vec::new());

    /// An index hash, as the writer's keyed SipHash gives them.
    fn hash(site: i64, key: &str) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().build_hasher();
        h.write_i64(site);
        h.write(key.as_bytes());
        h.finish()
    }

    fn keys(n: usize, tag: &str) -> Vec<u64> {
        (0..n).map(|i| hash((i % 3) as i64, &format!("{i:08x}-{tag}"))).collect()
    }

    #[test]
    fn a_bloom_never_forgets_and_rarely_lies() {
        let mut b = Bloom::with_capacity(10_000);
        let keys: Vec<u64> = (0..b.capacity as i64).map(|i| hash(1, &format!("key-{i}"))).collect();
        for &h in &keys {
            b.insert(h);
        }
        assert!(keys.iter().all(|&h| b.may_hold(h)));
        let false_positives = (0..100_000).filter(|i| b.may_hold(hash(2, &format!("other-{i}")))).count();
        // About 2.5 % at capacity with 8 bits and 4 hashes per key in blocks of 512 bits.
        assert!(false_positives < 3_500, "{false_positives} false positives in 100000");
    }

    #[test]
    fn built_in_chunks_from_the_table_with_the_keys_held_and_added_meanwhile() {
        // More keys than two chunks of the scan.
        let stored = keys(2 * SCAN_CHUNK + 7, "stored");
        let (_dir, conn) = table(&stored);
        let mut f = Filter::new("idx");
        assert!(f.may_hold(&conn, hash(0, "absent"), &NONE), "every lookup searches until the filter is built");
        // Not in the table: only the keys added or moved to the table while
        // building, and those held in memory once it is built, can make them known.
        f.add(hash(5, "added-while-building"));
        f.moved(hash(8, "moved-while-building"));
        f.wait(&Keys(vec![hash(6, "held-in-memory")]));
        assert!(f.is_ready());
        assert!(stored.iter().all(|&h| f.may_hold(&conn, h, &NONE)), "a stored key was hidden");
        assert!(f.may_hold(&conn, hash(5, "added-while-building"), &NONE));
        assert!(f.may_hold(&conn, hash(6, "held-in-memory"), &NONE));
        assert!(f.may_hold(&conn, hash(8, "moved-while-building"), &NONE));
        f.moved(hash(8, "moved-once-ready"));
        assert!(!f.may_hold(&conn, hash(8, "moved-once-ready"), &NONE), "a ready filter holds every key before it moves");
        let absent = (0..20_000).filter(|i| f.may_hold(&conn, hash(9, &format!("absent-{i}")), &NONE)).count();
        assert!(absent < 2_000, "{absent} of 20000 absent keys would still be searched");
    }

    #[test]
    fn a_full_filter_is_built_again_for_the_keys_the_table_holds() {
        let (_dir, conn) = table(&[]);
        let mut f = Filter::new("idx");
        f.state = State::Ready(Bloom::sized(1000));
        let merged = keys(1_334, "merged");
        insert(&conn, &merged);
        for &h in &merged[..1_333] {
            f.add(h);
        }
        f.may_hold(&conn, hash(0, "absent"), &NONE);
        assert!(f.is_ready(), "a third more keys than its capacity: still in use");
        f.add(merged[1_333]);
        let held = Keys(vec![hash(7, "held-in-memory")]);
        // The next lookup starts building a larger filter; until it is
        // ready, the full one answers, and takes in new keys.
        f.may_hold(&conn, hash(0, "absent"), &held);
        assert!(!f.is_ready());
        let State::Building { full: Some(full), .. } = &f.state else { panic!("the full filter was dropped") };
        assert_eq!(full.keys, 1_334);
        f.add(hash(8, "added-while-building"));
        assert!(f.may_hold(&conn, hash(8, "added-while-building"), &held));
        assert!(merged.iter().all(|&h| f.may_hold(&conn, h, &held)), "a stored key was hidden while building");
        let absent = (0..20_000).filter(|i| f.may_hold(&conn, hash(9, &format!("absent-{i}")), &held)).count();
        assert!(absent < 4_000, "{absent} of 20000 absent keys searched while building");
        f.wait(&held);
        let State::Ready(bloom) = &f.state else { panic!("the filter was not rebuilt") };
        assert_eq!(bloom.capacity, MIN_KEYS, "sized for the 1,334 keys of the table and the one held, with the smallest capacity");
        assert!(merged.iter().all(|&h| f.may_hold(&conn, h, &NONE)));
        assert!(f.may_hold(&conn, hash(7, "held-in-memory"), &NONE), "the rebuilt filter lost a key held in memory");
        assert!(f.may_hold(&conn, hash(8, "added-while-building"), &NONE), "the rebuilt filter lost a key added while building");
        // A filter filled by keys the table no longer holds is built again for
        // the keys it does hold, not for every key it ever took.
        conn.execute("DELETE FROM idx", []).unwrap();
        let State::Ready(bloom) = &mut f.state else { unreachable!() };
        bloom.keys = MIN_KEYS + MIN_KEYS / 3 + 1;
        f.may_hold(&conn, hash(0, "absent"), &NONE);
        assert!(!f.is_ready(), "an overfull filter is built again from the next lookup");
        f.wait(&NONE);
        let State::Ready(bloom) = &f.state else { panic!("the filter was not rebuilt") };
        assert_eq!((bloom.capacity, bloom.keys), (MIN_KEYS, 0));
    }
}
