//! The hash maps of the check path. Every check looks up a handful of maps (the key and
//! tenant caches, the in-process buckets and their shards, the deny cache, the dashboards'
//! counts), and the standard library's SipHash was the largest single cost among them
//! (`docs/BENCHMARKS.md`, "What changed in the check's own work").
//!
//! [`FastMap`] hashes with foldhash instead, several times cheaper on short strings. Its seed
//! is drawn at random for each map, as SipHash's is: the keys hashed here include what clients
//! send (subjects, presented keys), and a seed they cannot know keeps them from choosing keys
//! that all land in one bucket.

use std::collections::{HashMap, HashSet};

/// A seeded, fast hasher for the check path's maps.
pub type FastState = foldhash::fast::RandomState;

/// A [`HashMap`] hashed with [`FastState`].
pub type FastMap<K, V> = HashMap<K, V, FastState>;

/// A [`HashSet`] hashed with [`FastState`].
pub type FastSet<T> = HashSet<T, FastState>;
