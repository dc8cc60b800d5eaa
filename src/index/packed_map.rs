//! A map from small fixed-size keys that holds most of its entries in a
//! sorted vector at their exact size, and only the newest in a small hash
//! map in front.
//!
//! A hash table carries slack: between a third and a half of its slots are
//! empty, plus a control byte per slot. The index's messageId and task maps
//! hold one entry per received message, task or context, so that slack was
//! a third of what a received message cost. Here a lookup checks the small map, then
//! binary-searches the vector; once the small map holds an eighth as many
//! entries as the vector (at least [`MIN_RECENT`]), it is merged in, which
//! costs each insert a copy of about eight entries on average.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Hashes keys that are already uniformly random (prefixes of SHA-256
/// digests, which whoever picks the ids cannot steer) by folding their
/// bytes, rather than running SipHash over them.
#[derive(Debug, Default, Clone, Copy)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            for (w, b) in word.iter_mut().zip(chunk) {
                *w = *b;
            }
            self.0 = self.0.rotate_left(23) ^ u64::from_le_bytes(word);
        }
    }
}

type Recent<K, V> = HashMap<K, Option<V>, BuildHasherDefault<DigestHasher>>;

/// The small map is merged once it holds this many entries, or an eighth of
/// the vector's, whichever is more.
const MIN_RECENT: usize = 16;

/// See the module documentation.
#[derive(Debug)]
pub struct PackedMap<K, V> {
    /// Ascending by key, no key twice.
    sorted: Vec<(K, V)>,
    /// Newer than `sorted`: `Some` sets a key, `None` removes it.
    recent: Recent<K, V>,
}

impl<K, V> Default for PackedMap<K, V> {
    fn default() -> Self {
        Self {
            sorted: Vec::new(),
            recent: Recent::default(),
        }
    }
}

impl<K: Copy + Ord + Hash, V: Copy> PackedMap<K, V> {
    fn find(&self, key: &K) -> Result<usize, usize> {
        self.sorted.binary_search_by(|(k, _)| k.cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        if let Some(v) = self.recent.get(key) {
            return *v;
        }
        let at = self.find(key).ok()?;
        self.sorted.get(at).map(|(_, v)| *v)
    }

    /// Sets the value of `key`.
    pub fn insert(&mut self, key: K, value: V) {
        if !self.recent.contains_key(&key) {
            if let Ok(at) = self.find(&key) {
                if let Some(entry) = self.sorted.get_mut(at) {
                    entry.1 = value;
                    return;
                }
            }
        }
        self.recent.insert(key, Some(value));
        self.maybe_merge();
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &K) {
        if self.find(key).is_ok() {
            self.recent.insert(*key, None);
            self.maybe_merge();
        } else {
            self.recent.remove(key);
        }
    }

    /// Adds `entries`: when the map is empty and they ascend strictly by
    /// key (as a checkpoint writes them), they become its vector as they
    /// are; otherwise each is inserted.
    pub fn extend_sorted(&mut self, mut entries: Vec<(K, V)>) {
        let ascending = entries.windows(2).all(|w| match w {
            [a, b] => a.0 < b.0,
            _ => true,
        });
        if ascending && self.sorted.is_empty() && self.recent.is_empty() {
            entries.shrink_to_fit();
            self.sorted = entries;
            return;
        }
        for (key, value) in entries {
            self.insert(key, value);
        }
    }

    /// Every entry, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (K, V)> + '_ {
        let old = self
            .sorted
            .iter()
            .filter(|(k, _)| !self.recent.contains_key(k))
            .copied();
        let new = self.recent.iter().filter_map(|(k, v)| v.map(|v| (*k, v)));
        old.chain(new)
    }

    /// An estimate of the bytes it holds: the vector at its capacity, the
    /// small map's slots with their control bytes.
    pub fn approx_bytes(&self) -> usize {
        use std::mem::size_of;
        self.sorted.capacity() * size_of::<(K, V)>()
            + self.recent.capacity() * (size_of::<(K, Option<V>)>() + 1)
    }

    fn maybe_merge(&mut self) {
        if self.recent.len() >= MIN_RECENT.max(self.sorted.len() / 8) {
            self.merge();
        }
    }

    /// Merges the small map into the vector, dropping removed keys; the
    /// new vector is allocated at its exact size, and the small map starts
    /// over empty.
    fn merge(&mut self) {
        let mut recent: Vec<(K, Option<V>)> =
            std::mem::take(&mut self.recent).into_iter().collect();
        recent.sort_unstable_by_key(|e| e.0);
        let kept = recent.iter().filter(|(_, v)| v.is_some()).count();
        let mut out = Vec::with_capacity(self.sorted.len() + kept);
        let mut old = std::mem::take(&mut self.sorted).into_iter().peekable();
        for (key, value) in recent {
            while let Some(entry) = old.next_if(|(k, _)| *k < key) {
                out.push(entry);
            }
            // The small map's entry replaces the vector's of the same key.
            old.next_if(|(k, _)| *k == key);
            if let Some(value) = value {
                out.push((key, value));
            }
        }
        out.extend(old);
        out.shrink_to_fit();
        self.sorted = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(n: u8) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[0] = n;
        k[15] = n.wrapping_mul(7);
        k
    }

    proptest! {
        /// Inserts, overwrites and removes, against a `HashMap`, through
        /// many merges.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec((any::<bool>(), 0u8..64, any::<u32>()), 0..600)) {
            let mut map = PackedMap::default();
            let mut model = HashMap::new();
            for (insert, k, v) in ops {
                if insert {
                    map.insert(key(k), v);
                    model.insert(key(k), v);
                } else {
                    map.remove(&key(k));
                    model.remove(&key(k));
                }
                for n in 0..64 {
                    prop_assert_eq!(map.get(&key(n)), model.get(&key(n)).copied());
                }
            }
            let mut entries: Vec<_> = map.entries().collect();
            entries.sort_unstable();
            let mut want: Vec<_> = model.into_iter().collect();
            want.sort_unstable();
            prop_assert_eq!(entries, want);
        }
    }

    #[test]
    fn extending_takes_sorted_entries_whole_and_inserts_the_others() {
        let mut map = PackedMap::default();
        map.extend_sorted(vec![(key(1), 1), (key(2), 2), (key(5), 5)]);
        assert_eq!(map.sorted.len(), 3);
        assert!(map.recent.is_empty());
        // Unsorted, with a key already there: inserted one by one.
        map.extend_sorted(vec![(key(9), 9), (key(2), 20), (key(3), 3)]);
        let got: Vec<_> = (0..10).map(|n| map.get(&key(n))).collect();
        let want = [
            None,
            Some(1),
            Some(20),
            Some(3),
            None,
            Some(5),
            None,
            None,
            None,
            Some(9),
        ];
        assert_eq!(got, want);
        // Sorted but with a key twice: not taken whole.
        let mut map = PackedMap::default();
        map.extend_sorted(vec![(key(1), 1), (key(1), 2)]);
        assert_eq!(map.get(&key(1)), Some(2));
        assert_eq!(map.entries().count(), 1);
    }

    #[test]
    fn most_entries_sit_in_the_vector_at_their_exact_size() {
        let mut map = PackedMap::default();
        for n in 0..10_000u32 {
            let mut k = [0u8; 16];
            k[..4].copy_from_slice(&n.wrapping_mul(2_654_435_761).to_le_bytes());
            map.insert(k, n);
        }
        assert!(map.recent.len() <= map.sorted.len() / 8 + MIN_RECENT);
        let per_entry = map.approx_bytes() as f64 / 10_000.0;
        // 20 bytes an entry, plus the small map's share.
        assert!(per_entry < 26.0, "{per_entry} bytes an entry");
    }
}
