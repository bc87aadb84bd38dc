//! The writer's maps of session ids and client event ids, found by the key's
//! index hash.
//!
//! The writer needs a key's index hash ([`IndexHasher`](super::IndexHasher),
//! a SipHash under the store's random key) for the index tables anyway: it
//! computes it once per key, and every map of keys in its memory uses it as
//! is instead of hashing the key's text again at each lookup (maps keyed by
//! the text were about a sixth of the writer's samples: BENCHMARKS.md,
//! session 13). The hash key is secret, so clients cannot choose ids that
//! crowd a map; two keys that share a hash are still told apart by their text.

use std::collections::hash_map::{Entry, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use uuid::Uuid;

/// (site, key text) and the key's index hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Key {
    pub site: i64,
    pub text: KeyText,
    pub h: i64,
}

/// A key's text. Every client event id and the session ids the SDK makes are
/// UUIDs in lower-case hyphenated form: those are held as their 16 bytes,
/// which give back the same text, instead of in an allocation of their own
/// (two per event, made and freed by the writer).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum KeyText {
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

/// A hasher for index hashes. The map picks a bucket by the low bits of what
/// it returns and tells entries apart by its top seven bits; an index hash's
/// own top bits are the same for all keys of one tail slice, so a
/// multiplication mixes them with the rest.
#[derive(Default)]
pub(super) struct FromIndexHash(u64);

impl Hasher for FromIndexHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `i64` keys reach this hasher; fold anything else in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_i64(&mut self, h: i64) {
        // An odd constant (2^64 / φ): a bijection, whose top bits mix all of `h`.
        self.0 = (h as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map by [`Key`], indexed by the key's hash.
pub(super) struct ByHash<V> {
    map: HashMap<i64, (Key, V), BuildHasherDefault<FromIndexHash>>,
    /// Entries whose hash another key in `map` already has: almost never
    /// any in a real store (tests force them).
    clashes: Vec<(Key, V)>,
}

impl<V> Default for ByHash<V> {
    fn default() -> Self {
        ByHash { map: HashMap::default(), clashes: Vec::new() }
    }
}

impl<V> ByHash<V> {
    pub fn with_capacity(n: usize) -> Self {
        ByHash { map: HashMap::with_capacity_and_hasher(n, Default::default()), clashes: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.map.len() + self.clashes.len()
    }

    /// Entries the map holds room for.
    pub fn capacity(&self) -> usize {
        self.map.capacity()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, key: &Key) -> Option<&V> {
        match self.map.get(&key.h) {
            Some((k, v)) if k == key => Some(v),
            Some(_) => self.clashes.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            None => None,
        }
    }

    pub fn get_mut(&mut self, key: &Key) -> Option<&mut V> {
        match self.map.get_mut(&key.h) {
            Some((k, v)) if k == key => Some(v),
            Some(_) => self.clashes.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            None => None,
        }
    }

    pub fn contains_key(&self, key: &Key) -> bool {
        self.get(key).is_some()
    }

    pub fn insert(&mut self, key: Key, value: V) {
        match self.map.entry(key.h) {
            Entry::Vacant(slot) => {
                slot.insert((key, value));
            }
            Entry::Occupied(mut slot) if slot.get().0 == key => slot.get_mut().1 = value,
            Entry::Occupied(_) => match self.clashes.iter_mut().find(|(k, _)| *k == key) {
                Some(clash) => clash.1 = value,
                None => self.clashes.push((key, value)),
            },
        }
    }

    /// Removes the entry of `key`; a clash takes the place it leaves in `map`.
    pub fn remove(&mut self, key: &Key) -> Option<V> {
        match self.map.get(&key.h) {
            Some((k, _)) if k == key => {
                let (_, v) = self.map.remove(&key.h)?;
                if let Some(i) = self.clashes.iter().position(|(k, _)| k.h == key.h) {
                    let clash = self.clashes.swap_remove(i);
                    self.map.insert(key.h, clash);
                }
                Some(v)
            }
            Some(_) => {
                let i = self.clashes.iter().position(|(k, _)| k == key)?;
                Some(self.clashes.swap_remove(i).1)
            }
            None => None,
        }
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.clashes.clear();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.map.values().chain(&self.clashes).map(|(k, v)| (k, v))
    }

    /// Empties the map, keeping its memory.
    pub fn drain(&mut self) -> impl Iterator<Item = (Key, V)> + '_ {
        self.map.drain().map(|(_, e)| e).chain(self.clashes.drain(..))
    }
}

#[cfg(test)]
mod tests {
    use super::{ByHash, Key, KeyText};

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
        let mut m = ByHash::default();
        let (a, b, c) = (key(1, "a", 7), key(1, "b", 7), key(2, "a", 7));
        m.insert(a.clone(), 1);
        m.insert(b.clone(), 2);
        m.insert(c.clone(), 3);
        assert_eq!((m.get(&a), m.get(&b), m.get(&c), m.len()), (Some(&1), Some(&2), Some(&3), 3));
        m.insert(b.clone(), 20);
        assert_eq!((m.get(&b), m.len()), (Some(&20), 3));
        assert_eq!(m.get(&key(1, "d", 7)), None);
        assert_eq!(m.get(&key(1, "a", 8)), None, "a hash is part of the key it was computed from");

        // Removing the entry in the map lets a clash take its place.
        assert_eq!(m.remove(&a), Some(1));
        assert_eq!((m.get(&a), m.get(&b), m.get(&c), m.len()), (None, Some(&20), Some(&3), 2));
        assert_eq!(m.remove(&c), Some(3));
        assert_eq!(m.remove(&c), None);
        assert_eq!((m.get(&b), m.len()), (Some(&20), 1));
        *m.get_mut(&b).unwrap() += 1;
        let mut all: Vec<_> = m.drain().collect();
        all.sort_by(|x, y| x.0.text.cmp(&y.0.text));
        assert_eq!(all, vec![(b, 21)]);
        assert!(m.is_empty());
    }

    #[test]
    fn iteration_and_draining_see_every_entry_once() {
        let mut m = ByHash::with_capacity(4);
        for i in 0..100 {
            m.insert(key(1, &i.to_string(), i % 10), i);
        }
        assert_eq!(m.len(), 100);
        let mut seen: Vec<i64> = m.iter().map(|(_, v)| *v).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
        for i in (0..100).step_by(3) {
            assert_eq!(m.remove(&key(1, &i.to_string(), i % 10)), Some(i));
        }
        for i in 0..100 {
            assert_eq!(m.get(&key(1, &i.to_string(), i % 10)).is_some(), i % 3 != 0, "key {i}");
        }
        let mut left: Vec<i64> = m.drain().map(|(_, v)| v).collect();
        left.sort_unstable();
        assert_eq!(left, (0..100).filter(|i| i % 3 != 0).collect::<Vec<_>>());
    }
}
