//! The hot level of a [`KeyIndex`](super::KeyIndex), in the writer's
//! memory: `(h, seq)` pairs, sorted, per slice of the hash's top byte.
//!
//! The tail merges its slices into it when it grows past its limit, and the
//! writer moves its keys on into the cold table in key order, a chunk per
//! commit.
//! Kept in a table, each key cost three B-tree operations more (its insert,
//! its read for the move and its delete) and the hot pages were about a
//! quarter of a commit's (8a4b1ce). Sixteen bytes a key.

use super::{slice_of, SLICES};

pub(super) struct Hot {
    /// Sorted `(h, seq)` pairs of each slice.
    slices: Vec<Vec<(i64, i64)>>,
    /// The smallest `seq` of each slice (`i64::MAX` when empty).
    oldest: Vec<i64>,
    len: usize,
}

impl Default for Hot {
    fn default() -> Self {
        Hot { slices: vec![Vec::new(); SLICES], oldest: vec![i64::MAX; SLICES], len: 0 }
    }
}

impl Hot {
    pub fn len(&self) -> usize {
        self.len
    }

    /// The rows of the keys with this hash.
    pub fn seqs(&self, h: i64) -> impl Iterator<Item = i64> + '_ {
        let keys = &self.slices[usize::from(slice_of(h))];
        let start = first_at_or_after(keys, h);
        keys[start..].iter().take_while(move |&&(k, _)| k == h).map(|&(_, seq)| seq)
    }

    /// Adds keys to their slice, in any order (a pair already held is kept once).
    pub fn add(&mut self, slice: usize, rows: &mut [(i64, i64)]) {
        rows.sort_unstable();
        let keys = &mut self.slices[slice];
        let before = keys.len();
        // Exact: doubling would leave up to half of the level's memory unused.
        keys.reserve_exact(rows.len());
        keys.extend_from_slice(rows);
        // The held keys and the new ones are each sorted: merge them from the
        // back, in place (sorting the whole slice again cost ten times more).
        let (mut i, mut j, mut k) = (before, rows.len(), keys.len());
        while j > 0 {
            k -= 1;
            if i > 0 && keys[i - 1] > rows[j - 1] {
                keys[k] = keys[i - 1];
                i -= 1;
            } else {
                keys[k] = rows[j - 1];
                j -= 1;
            }
        }
        keys.dedup();
        self.len += keys.len() - before;
        self.oldest[slice] = rows.iter().map(|r| r.1).fold(self.oldest[slice], i64::min);
    }

    /// Up to `n` keys following `after` in the order of the slices, going
    /// round to the first slice once.
    pub fn following(&self, after: (i64, i64), n: usize) -> Vec<(i64, i64)> {
        let first = usize::from(slice_of(after.0));
        let (before, rest) = self.slices[first].split_at(self.slices[first].partition_point(|&k| k <= after));
        let others = (1..SLICES).map(|step| self.slices[(first + step) % SLICES].as_slice());
        std::iter::once(rest).chain(others).chain(std::iter::once(before)).flatten().copied().take(n).collect()
    }

    /// Removes keys that [`following`](Self::following) returned.
    pub fn remove(&mut self, keys: &[(i64, i64)]) {
        let mut i = 0;
        while i < keys.len() {
            let slice = usize::from(slice_of(keys[i].0));
            // A run of keys next to each other in one slice.
            let run = 1 + keys[i..].windows(2).take_while(|w| usize::from(slice_of(w[1].0)) == slice && w[1] > w[0]).count();
            let held = &mut self.slices[slice];
            let start = held.partition_point(|&k| k < keys[i]);
            debug_assert_eq!(&held[start..start + run], &keys[i..i + run]);
            held.drain(start..start + run);
            // Each slice fills for a whole round of moves and is then emptied:
            // room kept for its peak would double the level's memory.
            held.shrink_to_fit();
            self.len -= run;
            self.oldest[slice] = oldest_of(held);
            i += run;
        }
    }

    /// Removes these keys where held (in any order).
    pub fn forget(&mut self, keys: &[(i64, i64)]) {
        for &key in keys {
            let slice = usize::from(slice_of(key.0));
            let held = &mut self.slices[slice];
            if let Ok(i) = held.binary_search(&key) {
                held.remove(i);
                self.len -= 1;
                self.oldest[slice] = oldest_of(held);
            }
        }
    }

    /// The smallest `seq` held.
    pub fn oldest(&self) -> Option<i64> {
        self.oldest.iter().copied().min().filter(|&s| s != i64::MAX)
    }

    /// The hash of every key held.
    pub fn hashes(&self) -> impl Iterator<Item = u64> + '_ {
        self.slices.iter().flatten().map(|&(h, _)| h as u64)
    }

    /// Every key held, in slice order (tests).
    #[cfg(test)]
    pub fn entries(&self) -> Vec<(i64, i64)> {
        self.slices.iter().flatten().copied().collect()
    }

    pub fn clear(&mut self) {
        *self = Hot::default();
    }
}

/// The smallest `seq` of a slice's keys, `i64::MAX` when it has none.
fn oldest_of(keys: &[(i64, i64)]) -> i64 {
    keys.iter().map(|k| k.1).min().unwrap_or(i64::MAX)
}

/// Where the first key of a slice at or after `h` is. The keys of a slice
/// share their hash's top byte and the rest is uniform, so the search starts
/// where `h` would be if they were evenly spread and gallops from there: a
/// binary search from the middle took about ten dependent cache misses per
/// lookup, a tenth of the writer's time (6476d32).
fn first_at_or_after(keys: &[(i64, i64)], h: i64) -> usize {
    let n = keys.len();
    let guess = ((u128::from((h as u64) << 8) * n as u128) >> 64) as usize;
    let before = |i: usize| keys[i].0 < h;
    // Steps of 1, 2, 4… until the answer is known to lie in lo..=hi.
    let mut step = 1;
    let (lo, hi) = if guess < n && before(guess) {
        let mut lo = guess + 1;
        while lo + step - 1 < n && before(lo + step - 1) {
            lo += step;
            step *= 2;
        }
        (lo, (lo + step - 1).min(n))
    } else {
        let mut hi = guess.min(n);
        while hi >= step && !before(hi - step) {
            hi -= step;
            step *= 2;
        }
        (if hi >= step { hi - step + 1 } else { 0 }, hi)
    };
    lo + keys[lo..hi].partition_point(|&(k, _)| k < h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key in slice `slice`, `n`-th in it.
    fn key(slice: u8, n: i64, seq: i64) -> (i64, i64) {
        (((u64::from(slice) << 56) | n as u64) as i64, seq)
    }

    #[test]
    fn moves_go_round_the_slices_in_order_and_take_each_key_once() {
        let mut hot = Hot::default();
        for (seq, slice) in [3u8, 0x80, 0xff, 3, 0x80].into_iter().enumerate() {
            hot.add(usize::from(slice), &mut [key(slice, seq as i64, seq as i64 + 10)]);
        }
        assert_eq!(hot.len(), 5);
        assert_eq!(hot.oldest(), Some(10));
        // From the middle of slice 3: the rest of it, the later slices, then round.
        let after = key(3, 0, 10);
        let chunk = hot.following(after, 3);
        assert_eq!(chunk, [key(3, 3, 13), key(0x80, 1, 11), key(0x80, 4, 14)]);
        hot.remove(&chunk);
        let rest = hot.following(*chunk.last().unwrap(), 10);
        assert_eq!(rest, [key(0xff, 2, 12), key(3, 0, 10)]);
        hot.remove(&rest);
        assert_eq!((hot.len(), hot.oldest(), hot.entries()), (0, None, vec![]));
    }

    #[test]
    fn a_chunk_that_goes_round_into_its_own_slice_is_removed_whole() {
        let mut hot = Hot::default();
        hot.add(7, &mut [key(7, 5, 1), key(7, 1, 2), key(7, 9, 3)]);
        // Only slice 7 holds keys: after its second key, the third, then round to the first.
        let chunk = hot.following(key(7, 5, 1), 3);
        assert_eq!(chunk, [key(7, 9, 3), key(7, 1, 2), key(7, 5, 1)]);
        hot.remove(&chunk);
        assert_eq!(hot.len(), 0);
    }

    #[test]
    fn the_search_from_the_estimated_place_finds_what_a_binary_search_finds() {
        // A simple generator: the test needs spread hashes, not good ones.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in [0, 1, 2, 3, 10, 1000] {
            for skew in [0, 40] {
                // Skewed hashes (all in the slice's lowest part) make the estimate wrong.
                let mut keys: Vec<(i64, i64)> = (0..n).map(|i| (((5u64 << 56) | (next() >> (8 + skew))) as i64, i)).collect();
                keys.sort_unstable();
                let probes = keys.iter().map(|k| k.0).chain((0..200).map(|_| ((5u64 << 56) | (next() >> 8)) as i64)).chain([(5u64 << 56) as i64, ((6u64 << 56) - 1) as i64]);
                for h in probes {
                    assert_eq!(first_at_or_after(&keys, h), keys.partition_point(|k| k.0 < h), "n {n}, skew {skew}, h {h:x}");
                }
            }
        }
    }

    #[test]
    fn keys_added_to_a_slice_in_several_merges_stay_sorted() {
        let mut hot = Hot::default();
        hot.add(9, &mut [key(9, 30, 1), key(9, 10, 2)]);
        hot.add(9, &mut [key(9, 40, 3), key(9, 5, 4), key(9, 20, 5), key(9, 10, 2)]);
        let held: Vec<i64> = hot.entries().iter().map(|k| k.1).collect();
        assert_eq!(held, [4, 2, 5, 1, 3]);
        assert_eq!((hot.len(), hot.oldest()), (5, Some(1)));
    }

    #[test]
    fn keys_sharing_a_hash_are_all_found_and_forgotten_one_by_one() {
        let mut hot = Hot::default();
        let (a, b, c) = (key(1, 4, 20), key(1, 4, 21), key(1, 5, 22));
        hot.add(1, &mut [c, b, a, a]);
        assert_eq!(hot.len(), 3, "a pair added twice is held once");
        assert_eq!(hot.seqs(a.0).collect::<Vec<_>>(), [20, 21]);
        hot.forget(&[b, key(2, 4, 21)]);
        assert_eq!(hot.seqs(a.0).collect::<Vec<_>>(), [20]);
        assert_eq!((hot.len(), hot.oldest()), (2, Some(20)));
        hot.forget(&[a]);
        assert_eq!(hot.oldest(), Some(22));
    }
}
