//! The local deny cache: a check the limiter has just denied is denied again here, without a
//! limiter call, for as long as it is certain the limiter would deny it too.
//!
//! When the limiter denies a check, each denying rule says when the check's cost could fit
//! (its `retry_after_ms`). Capacity only comes back with time: other checks can take it, none
//! can give it back. So until the earliest of those times, the same check (the same buckets,
//! with the same parameters, each at the same cost) is denied by the limiter as surely as
//! it was, and is answered here with the stored decisions, their times moved on. The rest of a
//! denial is unchanged: a denied check writes nothing in the limiter, so nothing is lost by not
//! sending it.
//!
//! What keeps it exact:
//! - the time is counted from when the denied call was *sent*: the limiter decided after
//!   that, so its own clock is at least as far on, and each wait is shortened by 1 ms for the
//!   limiter's rounding up to whole milliseconds;
//! - only checks whose denial writes nothing qualify: no `penalty` rule (a penalised denial
//!   charges the bucket), no shadow rule (it is reported as measured), no caller's
//!   `request_id` (its answer is recorded), no dry run, no local fallback decision; and no
//!   `concurrency` rule, whose capacity comes back whenever a lease is released;
//! - an entry lives at most [`MAX_LIFE_MS`], so a flood still reaches the limiter about once a
//!   second per bucket (the dashboards' active keys see it);
//! - a settled reservation that gives capacity back (`/v1/settle`) is the one exception to
//!   "none can give it back": the instance that settles drops its entries of those buckets
//!   ([`DenyCache::forget`]), and a denial whose call was sent before a refund is not
//!   remembered. Other instances keep theirs for at most their wait, never past
//!   [`MAX_LIFE_MS`]: for that long they may deny what the refund made room for, never admit
//!   more than the limit;
//! - the cache belongs to the compiled tenant ([`super::CompiledTenant`]): every change that
//!   can add capacity or change an answer (a rule edited, disabled or deleted, the tenant
//!   suspended, a quota changed) is announced to every instance as a tenant change, which drops
//!   the compiled tenant and its cache with it; and a rule's parameters and each bucket's
//!   key are part of an entry's identity, so an edited rule never meets an old entry.
//!
//! The differential tests below run random checks against the in-process limiter (whose
//! arithmetic the Redis script matches, `tests/api/differential.rs`) and ask the limiter, at
//! every step the cache would deny, whether it denies too.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use app::rules::model::{Decision, Verdict};

use crate::hashing::FastMap;
use crate::limiter::{CheckOutcome, CheckRequest};

/// The longest an entry is trusted, whatever the wait.
pub const MAX_LIFE_MS: i64 = 1_000;
/// The most entries one tenant keeps; past it, denials are not remembered until some expire.
pub const MAX_ENTRIES: usize = 10_000;
const SHARDS: usize = 8;
/// A shard drops its expired entries each time it grows past another multiple of this.
const SWEEP_EVERY: usize = 128;

/// The denials of one tenant's checks.
#[derive(Default)]
pub struct DenyCache {
    /// Keyed by identity, itself a keyed hash: the maps hash it again with the cheaper
    /// [`FastMap`].
    shards: [Mutex<FastMap<u64, Entry>>; SHARDS],
    /// Keyed at random per cache: a client cannot choose checks whose identities collide.
    /// SipHash, because two checks with one identity would share their denials.
    hasher: std::collections::hash_map::RandomState,
    /// Refunds so far ([`DenyCache::forget`]).
    refunds: std::sync::atomic::AtomicU64,
}

/// One remembered denial.
#[derive(Debug, Clone)]
struct Entry {
    /// Each rule's bucket, hashed, so that a refund can find the entries it concerns.
    buckets: Vec<u64>,
    /// Each rule's cost in the denied check (a gRPC check may charge its rules differently).
    costs: Vec<u64>,
    /// When the check was sent, and until when it is surely denied (the cache's clock, ms).
    sent_ms: i64,
    until_ms: i64,
    /// The limiter's answer, and its time.
    decisions: Vec<Decision>,
    now_ms: i64,
}

/// A denial answered from the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedDenial {
    pub decisions: Vec<Decision>,
    /// The limiter's time of the denial, moved on by the time since.
    pub now_ms: i64,
}

impl std::fmt::Debug for DenyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenyCache")
            .field("entries", &self.len())
            .finish()
    }
}

impl DenyCache {
    /// The cache's clock: milliseconds on this process's monotonic clock, or the check's own
    /// clock when it brings one (tests).
    pub fn clock(request: &CheckRequest) -> i64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        request.now_ms.unwrap_or_else(|| {
            i64::try_from(ORIGIN.get_or_init(Instant::now).elapsed().as_millis())
                .unwrap_or(i64::MAX)
        })
    }

    /// Whether a denial of `request` may be remembered and answered from here.
    pub fn eligible(request: &CheckRequest) -> bool {
        !request.dry_run
            && request.request_id.is_none()
            && request.rules.iter().all(|r| !r.shadow && !r.spec.penalty)
            && !request.takes_lease()
    }

    /// A check's identity: its buckets, their parameters, and whether its clock is its own,
    /// but not its cost.
    fn identity(&self, request: &CheckRequest) -> u64 {
        let mut h = self.hasher.build_hasher();
        request.now_ms.is_some().hash(&mut h);
        request.rules.len().hash(&mut h);
        for rule in &request.rules {
            rule.key.hash(&mut h);
            let s = &rule.spec;
            (s.algorithm, s.limit, s.period_ms, s.burst).hash(&mut h);
        }
        h.finish()
    }

    fn shard(&self, identity: u64) -> std::sync::MutexGuard<'_, FastMap<u64, Entry>> {
        self.shards[(identity % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The denial of `request` at `now` (the cache's clock), if it is certain: the same check,
    /// each rule at the same cost, was denied. (A higher cost would be denied too, but the
    /// limiter's answer could differ: a cost past a rule's capacity never fits, and waits
    /// grow with the cost; a flood repeats its cost.)
    pub fn denied(&self, request: &CheckRequest, now: i64) -> Option<CachedDenial> {
        let identity = self.identity(request);
        let mut shard = self.shard(identity);
        let entry = shard.get(&identity)?;
        if now >= entry.until_ms || now < entry.sent_ms {
            shard.remove(&identity);
            return None;
        }
        let same_costs = entry.costs.len() == request.rules.len()
            && request
                .rules
                .iter()
                .zip(&entry.costs)
                .all(|(rule, &denied_at)| rule.cost == denied_at);
        if !same_costs {
            return None;
        }
        let elapsed = u64::try_from(now - entry.sent_ms).unwrap_or(0);
        let decisions = entry
            .decisions
            .iter()
            .map(|d| Decision {
                retry_after_ms: if d.verdict == Verdict::Deny {
                    d.retry_after_ms.saturating_sub(elapsed).max(1)
                } else {
                    d.retry_after_ms
                },
                reset_after_ms: d.reset_after_ms.saturating_sub(elapsed),
                ..*d
            })
            .collect();
        Some(CachedDenial {
            decisions,
            now_ms: entry.now_ms.saturating_add(elapsed as i64),
        })
    }

    /// How many refunds have dropped entries so far: read before a limiter call, and given
    /// to [`DenyCache::remember_since`] with its denial.
    pub fn refunds(&self) -> u64 {
        self.refunds.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A settled reservation gave capacity back to `buckets`: every entry of a check of any
    /// of them is dropped, and denials sent before now are no longer remembered.
    pub fn forget(&self, buckets: &[String]) {
        self.refunds
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let ids: Vec<u64> = buckets.iter().map(|b| self.hasher.hash_one(b)).collect();
        for shard in &self.shards {
            shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|_, entry| !entry.buckets.iter().any(|b| ids.contains(b)));
        }
    }

    /// Remembers the limiter's denial of `request`, sent at `sent` (the cache's clock).
    /// Nothing is remembered unless the check qualifies ([`DenyCache::eligible`]) and some
    /// enforced rule denied it with a wait of at least 2 ms.
    pub fn remember(&self, request: &CheckRequest, outcome: &CheckOutcome, sent: i64) {
        self.remember_since(request, outcome, sent, self.refunds());
    }

    /// [`DenyCache::remember`], unless a refund has dropped entries since [`DenyCache::refunds`]
    /// read `refunds` (before the call was sent): the denial may predate the capacity it
    /// gave back.
    pub fn remember_since(
        &self,
        request: &CheckRequest,
        outcome: &CheckOutcome,
        sent: i64,
        refunds: u64,
    ) {
        if outcome.allowed || outcome.deduplicated || !Self::eligible(request) {
            return;
        }
        // The earliest time any denying rule could fit: until then, every one still denies.
        let wait = outcome
            .decisions
            .iter()
            .filter(|d| d.verdict == Verdict::Deny)
            .map(|d| i64::try_from(d.retry_after_ms).unwrap_or(i64::MAX))
            .min();
        let Some(wait) = wait else {
            return;
        };
        // Less the limiter's rounding up to a whole millisecond.
        let wait = (wait - 1).min(MAX_LIFE_MS);
        if wait < 1 {
            return;
        }
        let identity = self.identity(request);
        let mut shard = self.shard(identity);
        // Checked under the shard's lock: a refund counts itself before it sweeps a shard.
        if self.refunds() != refunds {
            return;
        }
        let full = shard.len() >= MAX_ENTRIES / SHARDS;
        let due = !shard.is_empty() && shard.len().is_multiple_of(SWEEP_EVERY);
        if (full || due) && !shard.contains_key(&identity) {
            shard.retain(|_, e| e.until_ms > sent);
            if shard.len() >= MAX_ENTRIES / SHARDS {
                return;
            }
        }
        shard.insert(
            identity,
            Entry {
                buckets: request
                    .rules
                    .iter()
                    .map(|r| self.hasher.hash_one(&r.key))
                    .collect(),
                costs: request.rules.iter().map(|r| r.cost).collect(),
                sent_ms: sent,
                until_ms: sent.saturating_add(wait),
                decisions: outcome.decisions.clone(),
                now_ms: outcome.now_ms,
            },
        );
    }

    /// How many denials are remembered.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .len()
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{MemoryBackend, RuleCheck};
    use app::rules::{Algorithm, LimitSpec};
    use proptest::prelude::*;

    fn request(rules: &[(usize, LimitSpec)], cost: u64, now: i64, dry_run: bool) -> CheckRequest {
        CheckRequest {
            tenant: "t".into(),
            rules: rules
                .iter()
                .map(|(bucket, spec)| RuleCheck {
                    key: crate::redis_client::keys::bucket("t", &format!("r{bucket}"), None),
                    spec: *spec,
                    cost,
                    shadow: false,
                })
                .collect(),
            request_id: None,
            now_ms: Some(now),
            dry_run,
            max_live_keys: None,
            reserve: None,
            lease: None,
        }
    }

    /// One step of a random run: a check on rule set `set` after `wait` ms, costing its first
    /// rule `cost` and its second `second_cost` (gRPC charges each descriptor its own).
    #[derive(Debug, Clone)]
    struct Step {
        set: usize,
        cost: u64,
        second_cost: u64,
        wait: i64,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        prop::collection::vec(
            (
                0usize..3,
                1u64..4,
                prop_oneof![Just(None), (1u64..4).prop_map(Some)],
                prop_oneof![Just(0i64), 0i64..5, 0i64..400],
            )
                .prop_map(|(set, cost, second_cost, wait)| Step {
                    set,
                    cost,
                    second_cost: second_cost.unwrap_or(cost),
                    wait,
                }),
            1..120,
        )
    }

    /// Whenever the cache denies, the limiter (asked without consuming, at the same instant)
    /// denies too; a check the cache answers is not sent, as in the server. Over all runs the
    /// cache must have answered some checks, or the property says nothing.
    #[test]
    fn the_cache_denies_only_what_the_limiter_denies() {
        let strategy = (
            prop::collection::vec(0usize..6, 2),
            prop::collection::vec(1u64..6, 2),
            prop::collection::vec(prop_oneof![Just(1000u64), 50u64..3000], 2),
            prop::collection::vec(prop::option::of(1u64..8), 2),
            steps(),
        );
        let answered = std::cell::Cell::new(0_u64);
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(400));
        let result = runner.run(&strategy, |(algorithms, limits, periods, bursts, steps)| {
            let spec = |i: usize| {
                let algorithm = Algorithm::ALL[algorithms[i]];
                let mut spec = LimitSpec::new(algorithm, limits[i], periods[i]);
                if matches!(
                    algorithm,
                    Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
                ) {
                    spec.burst = bursts[i];
                }
                spec
            };
            // Three checks: the first rule alone, the second alone, both together.
            let sets: [Vec<(usize, LimitSpec)>; 3] = [
                vec![(0, spec(0))],
                vec![(1, spec(1))],
                vec![(0, spec(0)), (1, spec(1))],
            ];
            let limiter = MemoryBackend::new();
            let cache = DenyCache::default();
            let mut now = 1_000_000_i64;
            for step in steps {
                now += step.wait;
                let rules = &sets[step.set];
                let mut check = request(rules, step.cost, now, false);
                if let Some(second) = check.rules.get_mut(1) {
                    second.cost = step.second_cost;
                }
                if let Some(cached) = cache.denied(&check, DenyCache::clock(&check)) {
                    let truth = limiter
                        .check(&CheckRequest {
                            dry_run: true,
                            ..check.clone()
                        })
                        .unwrap();
                    prop_assert!(
                        !truth.allowed,
                        "the cache denied at {} what the limiter admits: {:?}",
                        now,
                        cached
                    );
                    prop_assert_eq!(cached.decisions.len(), rules.len());
                    answered.set(answered.get() + 1);
                    continue;
                }
                let sent = DenyCache::clock(&check);
                let outcome = limiter.check(&check).unwrap();
                cache.remember(&check, &outcome, sent);
            }
            Ok(())
        });
        if let Err(failure) = result {
            panic!("{failure}");
        }
        assert!(
            answered.get() > 100,
            "the cache answered {} checks",
            answered.get()
        );
    }

    #[test]
    fn a_denied_check_is_answered_here_until_its_wait_less_a_millisecond() {
        let limiter = MemoryBackend::new();
        let cache = DenyCache::default();
        let rules = [(0, LimitSpec::new(Algorithm::FixedWindow, 2, 1_000))];
        let t0 = 10_000;
        for _ in 0..2 {
            assert!(
                limiter
                    .check(&request(&rules, 1, t0, false))
                    .unwrap()
                    .allowed
            );
        }
        let check = request(&rules, 1, t0 + 100, false);
        let outcome = limiter.check(&check).unwrap();
        assert!(!outcome.allowed);
        assert_eq!(outcome.decisions[0].retry_after_ms, 900);
        cache.remember(&check, &outcome, t0 + 100);
        // Denied here with the wait moved on, at the same cost, until 1 ms early.
        let at = |now, cost| cache.denied(&request(&rules, cost, now, false), now);
        let later = at(t0 + 600, 1).expect("denied from the cache");
        assert_eq!(later.decisions[0].retry_after_ms, 400);
        assert_eq!(later.decisions[0].verdict, Verdict::Deny);
        assert!(at(t0 + 998, 1).is_some());
        // A higher cost is asked of the limiter: past the capacity it never fits.
        assert!(at(t0 + 600, 3).is_none());
        let never = limiter.check(&request(&rules, 3, t0 + 600, true)).unwrap();
        assert_eq!(never.decisions[0].verdict, Verdict::NeverFits);
        assert!(
            at(t0 + 999, 1).is_none(),
            "1 ms before the window ends it asks again"
        );
        // A lower cost might fit: asked of the limiter.
        cache.remember(&check, &outcome, t0 + 100);
        assert!(at(t0 + 200, 1).is_some());
        let mut cheaper = request(&rules, 1, t0 + 200, false);
        cheaper.rules[0].cost = 0;
        assert!(cache.denied(&cheaper, t0 + 200).is_none());
    }

    #[test]
    fn a_check_that_costs_another_amount_on_any_of_its_rules_is_asked_of_the_limiter() {
        let limiter = MemoryBackend::new();
        let cache = DenyCache::default();
        let rules = [
            (0, LimitSpec::new(Algorithm::FixedWindow, 10, 1_000)),
            (1, LimitSpec::new(Algorithm::FixedWindow, 4, 1_000)),
        ];
        let costing = |first, second, now| {
            let mut check = request(&rules, first, now, false);
            check.rules[1].cost = second;
            check
        };
        assert!(limiter.check(&costing(1, 2, 20_000)).unwrap().allowed);
        // The second rule has 2 left: denied at cost 3; the first would have admitted it.
        let check = costing(1, 3, 20_000);
        let outcome = limiter.check(&check).unwrap();
        assert!(!outcome.allowed);
        cache.remember(&check, &outcome, 20_000);
        assert!(cache.denied(&costing(1, 3, 20_001), 20_001).is_some());
        // The same buckets at cost 1 on each: the second rule has room for it.
        let even = costing(1, 1, 20_001);
        assert!(cache.denied(&even, 20_001).is_none());
        assert!(limiter.check(&even).unwrap().allowed);
    }

    #[test]
    fn what_a_denial_writes_or_records_is_never_answered_here() {
        let limiter = MemoryBackend::new();
        let base = LimitSpec::new(Algorithm::FixedWindow, 1, 1_000);
        // A denial of the plain check on the same bucket, offered for each other check.
        let plain = request(&[(1, base)], 1, 5_000, false);
        let _ = limiter.check(&plain).unwrap();
        let denial = limiter.check(&plain).unwrap();
        assert!(!denial.allowed);
        let with = |change: &dyn Fn(&mut CheckRequest)| {
            let mut check = plain.clone();
            change(&mut check);
            check
        };
        let cases = [
            ("a penalty rule", with(&|c| c.rules[0].spec.penalty = true)),
            ("a shadow rule", with(&|c| c.rules[0].shadow = true)),
            (
                "a caller's request_id",
                with(&|c| c.request_id = Some("r".into())),
            ),
            ("a dry run", with(&|c| c.dry_run = true)),
        ];
        for (what, check) in cases {
            let cache = DenyCache::default();
            assert!(!DenyCache::eligible(&check), "{what}");
            cache.remember(&check, &denial, 5_000);
            assert!(cache.is_empty(), "{what}: remembered");
            assert!(cache.denied(&check, 5_001).is_none(), "{what}");
        }
        let cache = DenyCache::default();
        cache.remember(&plain, &denial, 5_000);
        assert!(cache.denied(&plain, 5_001).is_some(), "the plain check is");
    }

    #[test]
    fn a_rule_with_other_parameters_or_another_bucket_is_not_the_same_check() {
        let limiter = MemoryBackend::new();
        let cache = DenyCache::default();
        let rules = [(0, LimitSpec::new(Algorithm::FixedWindow, 1, 1_000))];
        let check = request(&rules, 1, 7_000, false);
        let _ = limiter.check(&check).unwrap();
        let outcome = limiter.check(&check).unwrap();
        cache.remember(&check, &outcome, 7_000);
        assert!(cache.denied(&check, 7_001).is_some());
        let raised = [(0, LimitSpec::new(Algorithm::FixedWindow, 2, 1_000))];
        assert!(cache
            .denied(&request(&raised, 1, 7_001, false), 7_001)
            .is_none());
        let other = [(9, LimitSpec::new(Algorithm::FixedWindow, 1, 1_000))];
        assert!(cache
            .denied(&request(&other, 1, 7_001, false), 7_001)
            .is_none());
    }

    #[test]
    fn an_entry_lives_at_most_a_second_and_the_cache_holds_at_most_its_cap() {
        let limiter = MemoryBackend::new();
        let cache = DenyCache::default();
        let hour = [(0, LimitSpec::new(Algorithm::FixedWindow, 1, 3_600_000))];
        let check = request(&hour, 1, 0, false);
        let _ = limiter.check(&check).unwrap();
        let outcome = limiter.check(&check).unwrap();
        cache.remember(&check, &outcome, 0);
        assert!(cache.denied(&check, MAX_LIFE_MS - 1).is_some());
        assert!(cache.denied(&check, MAX_LIFE_MS).is_none());
        for bucket in 0..MAX_ENTRIES + 500 {
            let rules = [(bucket, LimitSpec::new(Algorithm::FixedWindow, 1, 3_600_000))];
            let check = request(&rules, 1, 0, false);
            cache.remember(&check, &outcome, 0);
        }
        assert!(cache.len() <= MAX_ENTRIES, "{} entries", cache.len());
        assert!(cache.len() >= MAX_ENTRIES - SHARDS * SWEEP_EVERY);
        // Later, with all of them expired, new denials sweep the old away: a shard sweeps
        // when it is full or grows past a multiple of SWEEP_EVERY, which 2,000 new entries
        // (about 250 a shard) make every shard do.
        for bucket in 0..2_000 {
            let rules = [(
                MAX_ENTRIES + 1_000 + bucket,
                LimitSpec::new(Algorithm::FixedWindow, 1, 3_600_000),
            )];
            cache.remember(&request(&rules, 1, 0, false), &outcome, 5 * MAX_LIFE_MS);
        }
        assert!(cache.len() <= 2_000, "{} entries", cache.len());
    }
}
