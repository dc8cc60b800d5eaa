//! Received messageIds read where they lie in the mapped index checkpoint.
//!
//! A checkpoint holds the messageId map shard by shard, each shard a run of
//! [`ENTRY_BYTES`]-byte entries ascending by short key: the key (16 bytes),
//! the place of the message's context among the checkpoint's contexts, and
//! the message's seq (u32 each, little-endian). An open that loads the
//! checkpoint keeps it mapped and binary-searches these runs in place,
//! instead of copying every entry to the heap: a store of a million received
//! messages opens without allocating, filling and page-faulting 24 MB. What
//! is received after the open, and the removal of a mapped entry, sits in
//! the heap map in front of the run (see `index::IdemShard`).

use std::sync::Arc;

use crate::fs::Mapped;
use crate::index::entries::{Section, Span};
use crate::log::frame::u32_at;

/// The first 16 bytes of a (tenant, messageId) or (tenant, task id) key:
/// what the idempotency and task maps hold, to keep them small. Two distinct
/// ids share one only with probability about n²/2¹²⁹ for n ids (a birthday
/// bound of 2⁶⁴ ids), which no store reaches.
pub type ShortKey = [u8; 16];

/// The short form of a full key.
pub fn short_key(key: &[u8; 32]) -> ShortKey {
    let mut short = [0u8; 16];
    short.copy_from_slice(key.split_at(16).0);
    short
}

/// Where a received message went: 8 bytes (context number, seq).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdemAt {
    /// The number of the message's context.
    pub context: u32,
    /// The message's seq in it.
    pub seq: u32,
}

impl IdemAt {
    pub(super) fn new(context: u32, seq: u64) -> Self {
        // In range: no record has a seq past MAX_SEQ (appends and opens refuse one).
        Self {
            context,
            seq: u32::try_from(seq).unwrap_or(u32::MAX),
        }
    }

    pub(super) fn seq(&self) -> u64 {
        u64::from(self.seq)
    }
}

/// The bytes of one entry.
pub const ENTRY_BYTES: usize = 24;

type Entry = [u8; ENTRY_BYTES];

/// Appends one entry.
pub fn put_entry(out: &mut Vec<u8>, key: &ShortKey, place: u32, seq: u32) {
    out.extend_from_slice(key);
    out.extend_from_slice(&place.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
}

fn key_of(entry: &Entry) -> Option<&ShortKey> {
    entry.first_chunk()
}

fn place_and_seq(entry: &Entry) -> (u32, u32) {
    (u32_at(entry, 16), u32_at(entry, 20))
}

/// Whether `run` is a sound run of shard `shard` for a checkpoint of
/// `places` contexts: whole entries, keys strictly ascending and of that
/// shard, each place below `places`.
pub fn check_run(run: &[u8], places: usize, in_shard: impl Fn(&ShortKey) -> bool) -> bool {
    let (entries, rest) = run.as_chunks::<ENTRY_BYTES>();
    // One pass; keys compared as big-endian numbers, which order as their
    // bytes do.
    let mut last = None;
    rest.is_empty()
        && entries.iter().all(|e| {
            let Some(key) = key_of(e) else {
                return false;
            };
            let number = u128::from_be_bytes(*key);
            let ascending = last.is_none_or(|l| l < number);
            last = Some(number);
            ascending && in_shard(key) && (place_and_seq(e).0 as usize) < places
        })
}

/// The places of a checkpoint's contexts, mapped to the numbers this
/// index gave them; shared by every shard's run.
pub type Numbers = Arc<[u32]>;

/// One shard's run, in place in the mapped checkpoint.
#[derive(Clone)]
pub struct IdemRun {
    span: Span,
    numbers: Numbers,
    /// The shard of the messageId map it is.
    shard: usize,
    /// Whether it is sound (see [`check_run`]): found on its first use,
    /// not by the open. The checkpoint's checksum has vouched for its
    /// bytes; only a faulty writer makes a run that fails, which is then
    /// searched from end to end and sorted when read in order (its entries
    /// of another shard are not found), and logged.
    sound: Arc<std::sync::OnceLock<bool>>,
}

impl std::fmt::Debug for IdemRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IdemRun({} entries)", self.span.len())
    }
}

impl IdemRun {
    /// The run of `count` entries at byte `start` of `map`, which
    /// [`check_run`] has found sound (or the checkpoint writer has just
    /// written); `None` unless they lie inside it.
    pub fn in_map(
        map: &Arc<Mapped>,
        start: usize,
        count: usize,
        numbers: Numbers,
        shard: usize,
    ) -> Option<Self> {
        let run = Section::new(map.clone(), start, count.checked_mul(ENTRY_BYTES)?)?;
        let span = Span::new(&run, 0, count, ENTRY_BYTES)?;
        Some(Self {
            span,
            numbers,
            shard,
            sound: Arc::default(),
        })
    }

    /// Whether the run is sound, checked on the first call.
    fn sound(&self) -> bool {
        *self.sound.get_or_init(|| {
            let in_shard = |key: &ShortKey| crate::index::Index::idem_shard_of(key) == self.shard;
            let sound = check_run(self.span.bytes(ENTRY_BYTES), self.numbers.len(), in_shard);
            if !sound {
                tracing::error!(
                    shard = self.shard,
                    "a messageId run of the index checkpoint is out of order or names no context: it is searched from end to end"
                );
            }
            sound
        })
    }

    fn entries(&self) -> &[Entry] {
        self.span.bytes(ENTRY_BYTES).as_chunks().0
    }

    fn at(&self, entry: &Entry) -> IdemAt {
        let (place, seq) = place_and_seq(entry);
        IdemAt {
            // Every place was checked against the numbers' length; an
            // unknown one names no context, and reads as absent.
            context: self
                .numbers
                .get(place as usize)
                .copied()
                .unwrap_or(u32::MAX),
            seq,
        }
    }

    /// Where the message of `key` went, if the run holds it.
    pub fn get(&self, key: &ShortKey) -> Option<IdemAt> {
        let entries = self.entries();
        let at = if self.sound() {
            entries
                .binary_search_by(|e| key_of(e).cmp(&Some(key)))
                .ok()?
        } else {
            entries.iter().position(|e| key_of(e) == Some(key))?
        };
        entries.get(at).map(|e| self.at(e))
    }

    /// Every entry, ascending by key.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (ShortKey, IdemAt)> + '_> {
        let all = self
            .entries()
            .iter()
            .filter_map(|e| Some((*key_of(e)?, self.at(e))));
        if self.sound() {
            Box::new(all)
        } else {
            let mut sorted: Vec<_> = all.collect();
            sorted.sort_by_key(|e| e.0);
            sorted.dedup_by_key(|e| e.0);
            Box::new(sorted.into_iter())
        }
    }

    /// Its bytes in the map.
    pub fn bytes(&self) -> usize {
        self.span.len() * ENTRY_BYTES
    }

    /// Its number of entries.
    pub fn count(&self) -> usize {
        self.span.len()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::index::entries::mapped;

    /// A key of shard 0 of 64 whose order follows `n`.
    pub fn key(n: u8) -> ShortKey {
        let mut k = [0u8; 16];
        k[1] = n;
        k
    }

    /// `entries` (key, place, seq) mapped as one run, with `numbers`.
    pub fn run_of(entries: &[(u8, u32, u32)], numbers: &[u32]) -> IdemRun {
        let mut bytes = b"preamble".to_vec();
        for &(k, place, seq) in entries {
            put_entry(&mut bytes, &key(k), place, seq);
        }
        IdemRun::in_map(&mapped(&bytes), 8, entries.len(), numbers.into(), 0).unwrap()
    }

    fn bytes_of(entries: &[(ShortKey, u32, u32)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (k, place, seq) in entries {
            put_entry(&mut bytes, k, *place, *seq);
        }
        bytes
    }

    #[test]
    fn a_run_out_of_order_is_searched_from_end_to_end_and_read_sorted() {
        // What only a faulty writer makes: keys out of order, one twice.
        let run = run_of(&[(5, 0, 12), (1, 0, 10), (3, 1, 11), (1, 1, 13)], &[7, 9]);
        let found = |n| run.get(&key(n)).map(|at| (at.context, at.seq));
        assert_eq!((found(3), found(5)), (Some((9, 11)), Some((7, 12))));
        assert!(found(1).is_some() && found(2).is_none());
        let keys: Vec<u8> = run.iter().map(|(k, _)| k[1]).collect();
        assert_eq!(keys, [1, 3, 5]);
        // A sound one reads as it lies.
        let sound = run_of(&[(1, 0, 10), (3, 1, 11)], &[7, 9]);
        assert!(sound.sound() && !run.sound());
    }

    #[test]
    fn a_run_is_searched_in_place_and_names_contexts_by_number() {
        let run = run_of(&[(1, 0, 10), (3, 1, 11), (5, 0, 12)], &[7, 9]);
        assert_eq!(run.count(), 3);
        assert_eq!(
            run.get(&key(3)),
            Some(IdemAt {
                context: 9,
                seq: 11
            })
        );
        assert_eq!(
            run.get(&key(5)),
            Some(IdemAt {
                context: 7,
                seq: 12
            })
        );
        for absent in [0, 2, 4, 6] {
            assert_eq!(run.get(&key(absent)), None);
        }
        let all: Vec<_> = run.iter().map(|(k, at)| (k[1], at.context)).collect();
        assert_eq!(all, [(1, 7), (3, 9), (5, 7)]);
    }

    #[test]
    fn only_whole_ascending_entries_of_the_shard_and_known_places_pass() {
        let shard0 = |k: &ShortKey| k[0] == 0;
        let good = bytes_of(&[(key(1), 0, 1), (key(2), 1, 2)]);
        assert!(check_run(&good, 2, shard0));
        assert!(check_run(&[], 0, shard0));
        // A place past the checkpoint's contexts.
        assert!(!check_run(&good, 1, shard0));
        // Out of order, or a key twice.
        assert!(!check_run(
            &bytes_of(&[(key(2), 0, 1), (key(1), 0, 2)]),
            2,
            shard0
        ));
        assert!(!check_run(
            &bytes_of(&[(key(1), 0, 1), (key(1), 0, 2)]),
            2,
            shard0
        ));
        // A key of another shard.
        let mut other = key(3);
        other[0] = 1;
        assert!(!check_run(&bytes_of(&[(other, 0, 1)]), 2, shard0));
        // A torn entry.
        assert!(!check_run(good.split_last().unwrap().1, 2, shard0));
    }
}
