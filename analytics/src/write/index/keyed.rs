//! The writer's maps of session ids and client event ids, found by the key's
//! index hash.
//!
//! The writer needs a key's index hash ([`IndexHasher`](super::IndexHasher),
//! a SipHash under the store's random key) for the index tables anyway: it
//! computes it once per key, and every map of keys in its memory uses it as
//! is instead of hashing the key's text again at each lookup (maps keyed by
//! the text were about a sixth of the writer's samples: 335a18f). The hash
//! key is secret, so clients cannot choose ids that crowd a map; two keys
//! that share a hash are still told apart by their text.

use std::sync::Arc;

use hashbrown::hash_table::{Entry, HashTable};

use uuid::Uuid;

/// (site, key text) and the key's index hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::write) struct Key {
    pub site: i64,
    pub text: KeyText,
    pub h: i64,
}

/// A key's text. Every client event id and the session ids the SDK makes are
/// UUIDs in lower-case hyphenated form: those are held as their 16 bytes,
/// which give back the same text, instead of in an allocation of their own
/// (two per event, made and freed by the writer).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(in crate::write) enum KeyText {
    Uuid(Uuid),
    Other(Arc<str>),
}

impl KeyText {
    pub fn new(text: &str) -> KeyText {
        // Any other spelling of a UUID (capitals, braces, no hyphens) is kept as sent.
        let canonical = text.len() == 36 && !text.bytes().any(|b| b.is_ascii_uppercase());
        match canonical.then(|| Uuid::try_parse(text).ok()).flatten() {
            Some(id) => KeyText::Uuid(id),
            None => KeyText::Other(text.into()),
        }
    }

    /// The text, written into `buf` when it is a UUID.
    pub fn as_str<'a>(&'a self, buf: &'a mut [u8; 45]) -> &'a str {
        match self {
            KeyText::Uuid(id) => id.hyphenated().encode_lower(buf),
            KeyText::Other(text) => text,
        }
    }

    pub fn is(&self, text: &str) -> bool {
        self.as_str(&mut Uuid::encode_buffer()) == text
    }
}

/// Where a key's index hash puts it in a [`KeyMap`]: the map picks a bucket
/// by the low bits and tells entries apart by the top seven, and an index
/// hash's own top bits are the same for all keys of one tail slice, so a
/// multiplication by an odd constant (2^64 / φ, a bijection) mixes them with
/// the rest.
fn spread(h: i64) -> u64 {
    (h as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A map by [`Key`], placed by the key's index hash (hashbrown's
/// [`HashTable`] takes the hash the writer already has); keys that share a
/// hash are told apart by their site and text.
pub(in crate::write) struct KeyMap<V>(HashTable<(Key, V)>);

impl<V> Default for KeyMap<V> {
    fn default() -> Self {
        KeyMap(HashTable::new())
    }
}

impl<V> KeyMap<V> {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Entries the map holds room for.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, key: &Key) -> Option<&V> {
        self.0.find(spread(key.h), |(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn insert(&mut self, key: Key, value: V) {
        match self.0.entry(spread(key.h), |(k, _)| *k == key, |(k, _)| spread(k.h)) {
            Entry::Occupied(mut slot) => slot.get_mut().1 = value,
            Entry::Vacant(slot) => {
                slot.insert((key, value));
            }
        }
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// Empties the map, keeping its memory.
    pub fn drain(&mut self) -> impl Iterator<Item = (Key, V)> + '_ {
        self.0.drain()
    }
}

/// Keys in a list, found by their hashes. Appending writes at the list's
/// end only, where an insert into a large hash map misses the cache twice
/// (the tails' and recent sessions' maps were a tenth of the writer's
/// samples, c042adc); the lists stay short (one tail slice's
/// keys), and a search reads their hashes, 8 bytes a key.
pub(in crate::write) struct KeyList<V> {
    hashes: Vec<i64>,
    entries: Vec<(Key, V)>,
}

impl<V> Default for KeyList<V> {
    fn default() -> Self {
        KeyList { hashes: Vec::new(), entries: Vec::new() }
    }
}

impl<V> KeyList<V> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, key: &Key) -> Option<usize> {
        self.hashes.iter().enumerate().filter(|&(_, &h)| h == key.h).map(|(i, _)| i).find(|&i| self.entries[i].0 == *key)
    }

    pub fn get(&self, key: &Key) -> Option<&V> {
        self.position(key).map(|i| &self.entries[i].1)
    }

    pub fn get_mut(&mut self, key: &Key) -> Option<&mut V> {
        self.position(key).map(|i| &mut self.entries[i].1)
    }

    /// Appends an entry; the caller knows the list does not hold the key.
    pub fn push(&mut self, key: Key, value: V) {
        self.hashes.push(key.h);
        self.entries.push((key, value));
    }

    pub fn clear(&mut self) {
        self.hashes.clear();
        self.entries.clear();
    }

    /// Makes an empty list's memory room for `n` entries: lists are filled
    /// again and again, and growing one by doubling would leave it with up to
    /// twice the room it needs.
    pub fn make_room(&mut self, n: usize) {
        debug_assert!(self.is_empty());
        if self.entries.capacity() > n {
            self.hashes.shrink_to(n);
            self.entries.shrink_to(n);
        } else {
            self.hashes.reserve_exact(n);
            self.entries.reserve_exact(n);
        }
    }

    /// Removes the entry of the row with this hash and `seq`, if held.
    pub fn forget(&mut self, h: i64, seq: i64)
    where
        V: super::Row,
    {
        if let Some(i) = self.hashes.iter().enumerate().position(|(i, &k)| k == h && self.entries[i].1.seq() == seq) {
            self.hashes.remove(i);
            self.entries.remove(i);
        }
    }

    pub fn first(&self) -> Option<&V> {
        self.entries.first().map(|(_, v)| v)
    }

    pub fn hashes(&self) -> &[i64] {
        &self.hashes
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::{Key, KeyList, KeyMap, KeyText};

    fn key(site: i64, text: &str, h: i64) -> Key {
        Key { site, text: KeyText::new(text), h }
    }

    #[test]
    fn a_key_text_gives_back_the_text_it_was_made_of() {
        let uuid = "0192a7f3-5c1e-4d2a-9b3c-4d5e6f708192";
        for (text, compact) in [
            (uuid, true),
            ("0192A7F3-5C1E-4D2A-9B3C-4D5E6F708192", false),
            ("0192a7f35c1e4d2a9b3c4d5e6f708192", false),
            ("{0192a7f3-5c1e-4d2a-9b3c-4d5e6f708192}", false),
            ("urn:uuid:0192a7f3-5c1e-4d2a-9b3c-4d5e6f708192", false),
            ("session-aaaa", false),
        ] {
            let k = KeyText::new(text);
            assert_eq!(matches!(k, KeyText::Uuid(_)), compact, "{text}");
            assert_eq!(k.as_str(&mut uuid::Uuid::encode_buffer()), text);
            assert!(k.is(text), "{text}");
            assert_eq!(k.is(uuid), text == uuid, "{text}");
        }
    }

    #[test]
    fn keys_that_share_a_hash_are_kept_apart() {
        let mut m = KeyMap::default();
        let (a, b, c) = (key(1, "a", 7), key(1, "b", 7), key(2, "a", 7));
        m.insert(a.clone(), 1);
        m.insert(b.clone(), 2);
        m.insert(c.clone(), 3);
        assert_eq!((m.get(&a), m.get(&b), m.get(&c), m.len()), (Some(&1), Some(&2), Some(&3), 3));
        m.insert(b.clone(), 20);
        m.insert(a.clone(), 10);
        assert_eq!((m.get(&a), m.get(&b), m.len()), (Some(&10), Some(&20), 3));
        assert_eq!(m.get(&key(1, "d", 7)), None);
        assert_eq!(m.get(&key(1, "a", 8)), None, "a hash is part of the key it was computed from");
        let mut all: Vec<_> = m.drain().collect();
        all.sort_by(|x, y| (x.0.site, &x.0.text).cmp(&(y.0.site, &y.0.text)));
        assert_eq!(all, vec![(a, 10), (b, 20), (c, 3)]);
        assert!(m.is_empty());
    }

    #[test]
    fn iteration_and_draining_see_every_entry_once() {
        let mut m = KeyMap::default();
        for i in 0..100 {
            m.insert(key(1, &i.to_string(), i % 10), i);
        }
        assert_eq!(m.len(), 100);
        let mut seen: Vec<i64> = m.iter().map(|(_, v)| *v).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
        let mut all: Vec<i64> = m.drain().map(|(_, v)| v).collect();
        all.sort_unstable();
        assert_eq!(all, seen);
        assert!(m.is_empty() && m.capacity() > 0, "draining keeps the memory");
    }

    #[test]
    fn a_key_list_finds_keys_that_share_a_hash() {
        let mut l = KeyList::default();
        for i in 0..100 {
            l.push(key(1 + i % 2, &i.to_string(), i % 10), i);
        }
        assert_eq!(l.len(), 100);
        for i in 0..100 {
            assert_eq!(l.get(&key(1 + i % 2, &i.to_string(), i % 10)), Some(&i), "key {i}");
        }
        assert_eq!(l.get(&key(2, "0", 0)), None, "same text and hash, another site");
        assert_eq!(l.get(&key(1, "0", 1)), None, "a hash is part of the key it was computed from");
        *l.get_mut(&key(2, "7", 7)).unwrap() += 1000;
        assert_eq!(l.first(), Some(&0));
        assert_eq!(l.hashes().len(), 100);
        for i in 0..100 {
            let want = if i == 7 { 1007 } else { i };
            assert_eq!(l.get(&key(1 + i % 2, &i.to_string(), i % 10)).copied(), Some(want), "key {i}");
        }
        let hashes: Vec<i64> = l.iter().map(|(k, _)| k.h).collect();
        assert_eq!(hashes, l.hashes(), "each entry's hash is beside it");
        l.clear();
        assert!(l.is_empty() && l.hashes().is_empty());
        l.make_room(10);
        assert!((10..100).contains(&l.entries.capacity()) && (10..100).contains(&l.hashes.capacity()), "shrunk");
        l.make_room(300);
        assert!(l.entries.capacity() >= 300 && l.hashes.capacity() >= 300, "grown");
    }
}
