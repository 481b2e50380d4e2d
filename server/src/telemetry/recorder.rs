//! What one instance saw in the current second: decisions by tenant and policy, latency
//! histograms, cache lookups. The check path records here (a short uncontended lock, no
//! allocation once a tenant and policy have been seen); the flusher takes the whole second
//! once a second and writes it to the series store.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::hashing::FastMap;

/// What happened to one check, as the dashboards count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Denied,
    /// A shadow rule would have denied (counted per shadow rule, besides the decision).
    ShadowWouldDeny,
    /// The limiter could not decide and the rules fail open: allowed.
    FailOpen,
    /// The limiter could not decide and a rule fails closed: 503.
    FailClosed,
    /// The limiter failed in a way no failure mode covers (a bug or a bad reply).
    Error,
}

impl Outcome {
    pub const ALL: [Outcome; 6] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::ShadowWouldDeny,
        Outcome::FailOpen,
        Outcome::FailClosed,
        Outcome::Error,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::ShadowWouldDeny => "shadow",
            Outcome::FailOpen => "fail_open",
            Outcome::FailClosed => "fail_closed",
            Outcome::Error => "errors",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// Upper bounds of the latency histogram's buckets, in microseconds; one more bucket holds
/// everything slower. A percentile read from it is the upper bound of its bucket (capped by
/// the maximum seen), so it overstates by less than one bucket's width: at most 67% from
/// 100 µs to 1 s (50% in most buckets), up to 100% below 100 µs and up to 150% above 1 s.
pub const BOUNDS_US: [u64; 30] = [
    50, 100, 150, 200, 300, 400, 500, 750, 1_000, 1_500, 2_000, 3_000, 4_000, 5_000, 7_500, 10_000,
    15_000, 20_000, 30_000, 50_000, 75_000, 100_000, 150_000, 200_000, 300_000, 500_000, 750_000,
    1_000_000, 2_000_000, 5_000_000,
];
/// Number of buckets, the overflow bucket included.
pub const BUCKETS: usize = BOUNDS_US.len() + 1;

/// A latency histogram with [`BOUNDS_US`] and the exact maximum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    pub counts: [u64; BUCKETS],
    pub max_us: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: [0; BUCKETS],
            max_us: 0,
        }
    }
}

impl Histogram {
    pub fn bucket_of(us: u64) -> usize {
        BOUNDS_US.partition_point(|&bound| bound < us)
    }

    pub fn observe(&mut self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.counts[Self::bucket_of(us)] += 1;
        self.max_us = self.max_us.max(us);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.max_us = self.max_us.max(other.max_us);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0 < q ≤ 1) in microseconds: the upper bound of the bucket that
    /// holds it, never above the maximum seen. `None` without observations.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                // A histogram read back without its maximum (a minute) reports the bound;
                // the overflow bucket has none, so the last one ("at least 5 s").
                let last = BOUNDS_US[BOUNDS_US.len() - 1];
                return Some(match (BOUNDS_US.get(i).copied(), self.max_us) {
                    (Some(bound), 0) => bound,
                    (Some(bound), max) => bound.min(max),
                    (None, 0) => last,
                    (None, max) => max,
                });
            }
        }
        None
    }
}

/// One second (or more) of one instance's observations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// tenant → policy (`""` when no rule applied) → counts by [`Outcome::index`].
    pub decisions: FastMap<String, FastMap<String, [u64; 6]>>,
    /// Limiter round trips by Cluster slot (`None`: not a Cluster).
    pub limiter: BTreeMap<Option<u16>, Histogram>,
    /// Whole `/v1/check` handling time.
    pub decision: Histogram,
    /// (cache, result) → lookups.
    pub cache: HashMap<(&'static str, &'static str), u64>,
    /// tenant → rule id → its denials by subject, in bounded memory.
    pub denied: crate::dashboard::top::ByTenant,
}

/// Counts `outcome` for `tenant`'s `policy` in `current`; allocates only for a tenant or
/// policy not yet seen this second.
fn count(current: &mut Snapshot, tenant: &str, policy: &str, outcome: Outcome) {
    let policies = match current.decisions.get_mut(tenant) {
        Some(p) => p,
        None => current.decisions.entry(tenant.to_owned()).or_default(),
    };
    let counts = match policies.get_mut(policy) {
        Some(c) => c,
        None => policies.entry(policy.to_owned()).or_default(),
    };
    counts[outcome.index()] += 1;
}

/// The current second's observations of this instance.
#[derive(Debug, Default)]
pub struct Recorder {
    current: Mutex<Snapshot>,
    /// The lookups of the caches [`Recorder::cache_at`] counts, by cache and result, without
    /// the lock (two on every check): moved into the snapshot by [`Recorder::take`].
    lookups: [[AtomicU64; LOOKUP_RESULTS.len()]; CACHES.len()],
}

/// The caches whose lookups [`Recorder::cache_at`] counts by index, and their results.
pub const CACHES: [&str; 2] = ["key", "tenant"];
pub const LOOKUP_RESULTS: [&str; 4] = ["hit", "miss", "stale", "absent"];

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Snapshot> {
        // Every update is a few additions (and, for a denial of a subject not yet seen this
        // second, one allocation; every 100 such, a summary's reduction over 200 counts); a
        // panic cannot leave a count half done.
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts one outcome for `tenant`'s `policy`.
    pub fn decision(&self, tenant: &str, policy: &str, outcome: Outcome) {
        count(&mut self.lock(), tenant, policy, outcome);
    }

    /// Counts one denial by `tenant`'s rule `rule` (named `policy`): as a decision of the
    /// policy, and as a denial of `subject` (`""`: a tenant-wide bucket) for the most denied
    /// subjects. Allocates only for a tenant, rule or subject not yet seen this second.
    pub fn denial(&self, tenant: &str, rule: &str, policy: &str, subject: &str) {
        let mut current = self.lock();
        count(&mut current, tenant, policy, Outcome::Denied);
        let rules = match current.denied.get_mut(tenant) {
            Some(r) => r,
            None => current.denied.entry(tenant.to_owned()).or_default(),
        };
        let summary = match rules.get_mut(rule) {
            Some(s) => s,
            None => rules.entry(rule.to_owned()).or_default(),
        };
        summary.add(policy, subject);
    }

    /// Times one limiter call; `slot` is the Cluster slot of its keys.
    pub fn limiter(&self, slot: Option<u16>, elapsed: Duration) {
        self.lock()
            .limiter
            .entry(slot)
            .or_default()
            .observe(elapsed);
    }

    /// Times one whole check.
    pub fn check(&self, elapsed: Duration) {
        self.lock().decision.observe(elapsed);
    }

    pub fn cache(&self, cache: &'static str, result: &'static str) {
        *self.lock().cache.entry((cache, result)).or_default() += 1;
    }

    /// Counts one lookup of `CACHES[cache]` with the result `LOOKUP_RESULTS[result]`, as
    /// [`Recorder::cache`] would, without taking the lock.
    pub fn cache_at(&self, cache: usize, result: usize) {
        if let Some(count) = self.lookups.get(cache).and_then(|c| c.get(result)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Everything recorded since the last call. A lookup counted while this runs may fall
    /// into the next snapshot rather than this one; none is lost or counted twice.
    pub fn take(&self) -> Snapshot {
        let mut snapshot = std::mem::take(&mut *self.lock());
        for (cache, counts) in CACHES.iter().zip(&self.lookups) {
            for (result, count) in LOOKUP_RESULTS.iter().zip(counts) {
                let n = count.swap(0, Ordering::Relaxed);
                if n > 0 {
                    *snapshot.cache.entry((cache, result)).or_default() += n;
                }
            }
        }
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_bucket_upper_bounds_capped_by_the_maximum() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_us(0.5), None);
        for us in [80, 90, 120, 450, 9_000] {
            h.observe(Duration::from_micros(us));
        }
        assert_eq!(h.count(), 5);
        assert_eq!(h.quantile_us(0.4), Some(100));
        assert_eq!(h.quantile_us(0.5), Some(150));
        assert_eq!(h.quantile_us(0.8), Some(500));
        // The top bucket's bound (10 ms) is above the maximum seen: the maximum it is.
        assert_eq!(h.quantile_us(0.99), Some(9_000));
        assert_eq!(h.max_us, 9_000);
        let mut slow = Histogram::default();
        slow.observe(Duration::from_secs(9));
        assert_eq!(slow.counts[BUCKETS - 1], 1);
        h.merge(&slow);
        assert_eq!(h.quantile_us(1.0), Some(9_000_000));
    }

    #[test]
    fn a_taken_second_starts_a_new_one() {
        let r = Recorder::default();
        r.decision("t1", "p", Outcome::Allowed);
        r.decision("t1", "p", Outcome::Allowed);
        r.decision("t1", "p", Outcome::Denied);
        r.decision("t2", "", Outcome::Allowed);
        r.limiter(Some(7), Duration::from_micros(300));
        r.cache("key", "hit");
        r.denial("t1", "rule-1", "p", "alice");
        r.denial("t1", "rule-1", "p", "alice");
        r.denial("t1", "rule-1", "p", "");
        let first = r.take();
        assert_eq!(
            first.denied["t1"]["rule-1"].top(5),
            vec![("alice", 2), ("", 1)]
        );
        assert_eq!(first.decisions["t1"]["p"], [2, 4, 0, 0, 0, 0]);
        assert_eq!(first.decisions["t2"][""], [1, 0, 0, 0, 0, 0]);
        assert_eq!(first.limiter[&Some(7)].count(), 1);
        assert_eq!(first.cache[&("key", "hit")], 1);
        assert_eq!(r.take(), Snapshot::default());
        r.decision("t1", "p", Outcome::FailOpen);
        assert_eq!(r.take().decisions["t1"]["p"], [0, 0, 0, 1, 0, 0]);
    }

    #[test]
    fn lookups_counted_without_the_lock_join_the_locked_ones_and_start_again() {
        let r = Recorder::default();
        r.cache_at(0, 0);
        r.cache_at(0, 0);
        r.cache("key", "hit");
        r.cache_at(1, 1);
        // Out of range: nothing is counted, nothing panics.
        r.cache_at(CACHES.len(), 0);
        let first = r.take();
        assert_eq!(first.cache[&("key", "hit")], 3);
        assert_eq!(first.cache[&("tenant", "miss")], 1);
        assert_eq!(first.cache.len(), 2);
        assert_eq!(r.take(), Snapshot::default());
    }
}
