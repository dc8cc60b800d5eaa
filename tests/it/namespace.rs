//! The namespace: distinct (tenant, contextId) pairs never share a key, keys
//! are stable across builds, and histories under distinct ids never mix.

use crate::common;

use ctxlog::{ContextKey, Options, Store};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

fn key(tenant: &str, context: &str) -> ContextKey {
    ContextKey::derive(tenant, context).unwrap()
}

/// A (tenant, contextId) pair.
type Pair = (&'static str, &'static str);

const COLLISION_PAIRS: &[(Pair, Pair)] = &[
    // The sanitised-file-name merge that broke an earlier design.
    (("t", "tenant/a"), ("t", "tenanta")),
    (("tenant", "a"), ("tenanta", "")),
    (("tenant/", "a"), ("tenant", "/a")),
    // Concatenation ambiguity.
    (("ab", "c"), ("a", "bc")),
    // NFC ("é" as one code point) vs NFD ("e" + combining acute).
    (("t", "caf\u{e9}"), ("t", "cafe\u{301}")),
    // Trailing space and trailing NUL.
    (("t", "ctx"), ("t", "ctx ")),
    (("t", "ctx"), ("t", "ctx\0")),
    // The empty tenant is a tenant of its own.
    (("", "ctx"), ("default", "ctx")),
    (("", "ctx"), ("\0", "ctx")),
    // Case.
    (("t", "Ctx"), ("t", "ctx")),
];

#[test]
fn known_collision_pairs_get_distinct_keys() {
    for &((t1, c1), (t2, c2)) in COLLISION_PAIRS {
        let (a, b) = (
            ContextKey::derive_unchecked(t1, c1),
            ContextKey::derive_unchecked(t2, c2),
        );
        assert_ne!(a, b, "({t1:?},{c1:?}) vs ({t2:?},{c2:?})");
    }
}

/// The documented encoding, computed independently of the library.
fn reference_key(tenant: &str, context: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"ctxlog-namespace\0");
    h.update([1u8]);
    h.update((tenant.len() as u64).to_le_bytes());
    h.update(tenant.as_bytes());
    h.update((context.len() as u64).to_le_bytes());
    h.update(context.as_bytes());
    format!("v1-{}", hex::encode(h.finalize()))
}

#[test]
fn keys_follow_the_documented_encoding_and_fixed_vectors() {
    // Fixed vectors: a change to any of these would orphan every existing store.
    let vectors = [
        (
            "",
            "a",
            "v1-e7028fe0bbb23ce418718e88f39c9b2443df1590df177429eaeccfa019f9246c",
        ),
        (
            "acme",
            "ctx_refund_ord123",
            "v1-4711432db92a8ec0238ca78283111b3d1a9ba97703f00f63a190bd1afc604dd0",
        ),
        (
            "tenant/a",
            "b",
            "v1-23ea5741c5c053581fe0a2eab271d43a2b114b93e8de4fa1cd3c6ea7b3163c11",
        ),
        (
            "caf\u{e9}",
            "cafe\u{301}",
            "v1-70747285d6e7f94b09bc090db5c61166f872c91160f339de92a2ce1fa5d7d82a",
        ),
    ];
    for (tenant, context, expected) in vectors {
        assert_eq!(key(tenant, context).to_string(), expected);
        assert_eq!(reference_key(tenant, context), expected);
    }
}

proptest! {
    #[test]
    fn distinct_pairs_get_distinct_keys(
        t1 in ".{0,8}", c1 in ".{1,8}", t2 in ".{0,8}", c2 in ".{1,8}",
    ) {
        prop_assume!((t1.as_str(), c1.as_str()) != (t2.as_str(), c2.as_str()));
        prop_assert_ne!(key(&t1, &c1), key(&t2, &c2));
    }

    #[test]
    fn splitting_one_string_two_ways_never_collides(s in "[a-c/]{2,12}", i in 0usize..12, j in 0usize..12) {
        let (i, j) = (i % s.len(), j % s.len());
        prop_assume!(i != j);
        let (a1, b1) = s.split_at(i);
        let (a2, b2) = s.split_at(j);
        prop_assert_ne!(ContextKey::derive_unchecked(a1, b1), ContextKey::derive_unchecked(a2, b2));
    }

    #[test]
    fn keys_are_stable_and_match_the_reference(t in "\\PC{0,16}", c in "\\PC{1,16}") {
        prop_assert_eq!(key(&t, &c), key(&t, &c));
        prop_assert_eq!(key(&t, &c).to_string(), reference_key(&t, &c));
    }
}

#[test]
fn histories_under_colliding_looking_ids_never_mix() {
    let mut pairs: Vec<(&str, &str)> = COLLISION_PAIRS
        .iter()
        .flat_map(|&(a, b)| [a, b])
        .filter(|(_, c)| !c.is_empty())
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for &(t, c) in &pairs {
        store
            .append_message(t, c, format!("{t:?}/{c:?}").as_bytes())
            .unwrap();
    }
    drop(store);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for &(t, c) in &pairs {
        let got = store.last_messages(t, c, usize::MAX).unwrap();
        assert_eq!(got.len(), 1, "{t:?}/{c:?}");
        assert_eq!(got[0].raw, format!("{t:?}/{c:?}").as_bytes());
        assert_eq!(store.context_info(t, c).unwrap().context_id, c);
    }
}
