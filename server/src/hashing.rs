//! The hash maps of the check path. Every check looks up a handful of maps (the key and
//! tenant caches, the in-process buckets, the deny cache, the dashboards' counts), and the
//! standard library's SipHash was the largest single cost among them (`docs/BENCHMARKS.md`,
//! "What changed in the check's own work").
//!
//! [`FastMap`] hashes with foldhash instead, several times cheaper on short strings, but it
//! makes no claim to resist a client who chooses keys that all land in one bucket (its seed
//! comes from address-space layout and the time, not from the operating system's random
//! source). So it keys only what clients cannot choose: tenant ids, policy names, key ids,
//! Redis node addresses, and ids that are already keyed SipHash outputs (the deny cache's
//! check identities, the Redis backend's active-key marks). Whatever a client
//! sends, or a digest of it (subjects, request ids, presented keys), stays in SipHash's
//! standard `HashMap`: the in-process limiter's buckets and records, and the key cache.

use std::collections::{HashMap, HashSet};

/// A fast hasher for maps whose keys clients cannot choose.
pub type FastState = foldhash::fast::RandomState;

/// A [`HashMap`] hashed with [`FastState`]: only for keys clients cannot choose.
pub type FastMap<K, V> = HashMap<K, V, FastState>;

/// A [`HashSet`] hashed with [`FastState`]: only for keys clients cannot choose.
pub type FastSet<T> = HashSet<T, FastState>;
