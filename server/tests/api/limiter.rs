//! The limiter engine against real backends: the same behavioural suite on the in-process
//! limiter, a private Redis and a private three-master Redis Cluster, plus Redis-only
//! checks (differential tests against the model, NOSCRIPT, restarts, slots).

use std::sync::Arc;
use std::time::Duration;

use app::rules::model::{self, RuleInput, State, Verdict};
use app::rules::{Algorithm, LimitSpec};
use futures::future::join_all;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sluice::config::LimiterTarget;
use sluice::decide::DenyCache;
use sluice::limiter::{
    keys, BucketLayout, CheckOutcome, CheckRequest, Limiter, LimiterError, MemoryBackend,
    RedisOptions, Released, Reserve, RuleCheck, Settlement, SETTLED_TTL,
};

use crate::services::{RedisCluster, RedisServer};

const T0: i64 = 1_800_000_000_000;

fn options(connections: usize) -> RedisOptions {
    RedisOptions {
        timeout: Duration::from_secs(2),
        connections,
    }
}

/// An instance's limiter on `server`, with `connections` connections, writing buckets in
/// `layout`.
async fn instance(server: &RedisServer, connections: usize, layout: BucketLayout) -> Limiter {
    Limiter::connect(&LimiterTarget::Redis(server.url()), options(connections))
        .await
        .unwrap()
        .with_bucket_layout(layout)
}

fn tenant() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn rule(tenant: &str, name: &str, spec: LimitSpec, cost: u64) -> RuleCheck {
    RuleCheck {
        key: keys::bucket(tenant, name, None),
        spec,
        cost,
        shadow: false,
    }
}

fn request(tenant: &str, rules: Vec<RuleCheck>, now: Option<i64>) -> CheckRequest {
    CheckRequest {
        tenant: tenant.to_owned(),
        rules,
        request_id: None,
        now_ms: now,
        dry_run: false,
        max_live_keys: None,
        reserve: None,
        lease: None,
    }
}

/// A backend under test, with a way to look at what it stored.
enum Store {
    Memory(MemoryBackend),
    Redis(RedisServer),
    Cluster(RedisCluster),
}

struct Backend {
    limiter: Limiter,
    store: Store,
}

impl Backend {
    fn in_process() -> Self {
        let memory = MemoryBackend::new();
        Self {
            limiter: Limiter::InProcess(memory.clone()),
            store: Store::Memory(memory),
        }
    }

    async fn redis() -> Self {
        let server = RedisServer::start();
        let limiter = Limiter::connect(&LimiterTarget::Redis(server.url()), options(2))
            .await
            .unwrap();
        Self {
            limiter,
            store: Store::Redis(server),
        }
    }

    async fn cluster() -> Self {
        let cluster = tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap();
        let limiter = Limiter::connect(&LimiterTarget::Cluster(cluster.urls()), options(2))
            .await
            .unwrap();
        Self {
            limiter,
            store: Store::Cluster(cluster),
        }
    }

    /// Another limiter instance on the same store, as another server process would have.
    async fn another_instance(&self, connections: usize) -> Limiter {
        match &self.store {
            Store::Memory(_) => self.limiter.clone(),
            Store::Redis(s) => {
                Limiter::connect(&LimiterTarget::Redis(s.url()), options(connections))
                    .await
                    .unwrap()
            }
            Store::Cluster(c) => {
                Limiter::connect(&LimiterTarget::Cluster(c.urls()), options(connections))
                    .await
                    .unwrap()
            }
        }
    }

    /// Runs a command on the backend's Redis (routed by key on a Cluster); `None` in-process.
    async fn redis_query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Option<T> {
        match &self.store {
            Store::Memory(_) => None,
            Store::Redis(s) => {
                let mut conn = redis::Client::open(s.url())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                Some(cmd.query_async(&mut conn).await.unwrap())
            }
            Store::Cluster(c) => {
                let client = redis::cluster::ClusterClient::new(c.urls()).unwrap();
                let mut conn = client.get_async_connection().await.unwrap();
                Some(cmd.query_async(&mut conn).await.unwrap())
            }
        }
    }

    /// The stored bytes of a key (Redis `DUMP`, or the in-process state), `None` if absent.
    async fn snapshot(&self, key: &str) -> Option<String> {
        match &self.store {
            Store::Memory(m) => m
                .peek(key)
                .map(|(state, expires)| format!("{state:?} until {expires}")),
            _ => {
                let dump: Option<Vec<u8>> =
                    self.redis_query(redis::cmd("DUMP").arg(key)).await.unwrap();
                dump.map(hex::encode)
            }
        }
    }

    /// The remaining TTL of a key in ms, when stored in Redis.
    async fn pttl(&self, key: &str) -> Option<i64> {
        self.redis_query(redis::cmd("PTTL").arg(key)).await
    }

    async fn check(&self, request: &CheckRequest) -> CheckOutcome {
        self.limiter.check(request).await.unwrap()
    }
}

/// Runs each listed behaviour on the in-process limiter, on Redis and on a Redis Cluster.
macro_rules! on_every_backend {
    ($($test:ident),* $(,)?) => {
        mod in_process {
            $( #[tokio::test] async fn $test() { super::$test(&super::Backend::in_process()).await; } )*
        }
        mod on_redis {
            $( #[tokio::test] async fn $test() { super::$test(&super::Backend::redis().await).await; } )*
        }
        mod on_cluster {
            $( #[tokio::test] async fn $test() { super::$test(&super::Backend::cluster().await).await; } )*
        }
    };
}

on_every_backend!(
    a_reset_bucket_starts_full_and_no_other_bucket_changes,
    a_reset_bucket_no_longer_counts_against_the_quota,
    remaining_stays_between_zero_and_capacity,
    idle_time_never_refills_beyond_capacity,
    time_going_backwards_creates_no_capacity,
    different_keys_never_share_state,
    an_expired_key_comes_back_full,
    a_denial_without_penalty_writes_nothing,
    a_penalty_charges_a_denial_but_never_below_zero,
    a_cost_above_capacity_never_fits,
    fractional_tokens_survive_the_round_trip,
    a_request_id_sent_ten_times_concurrently_consumes_once,
    exactly_the_limit_is_admitted_under_concurrency,
    multi_rule_checks_consume_all_or_nothing,
    shadow_rules_report_but_never_block,
    invalid_checks_are_refused_without_touching_state,
    a_dry_run_decides_like_a_check_and_writes_nothing,
    a_tenant_holds_at_most_its_quota_of_live_buckets,
    request_id_records_count_against_the_quota,
    concurrent_new_subjects_never_pass_the_quota,
    the_deny_cache_denies_only_what_the_backend_denies,
    reserve_100_settle_30_leaves_each_algorithm_exactly_70_fuller,
    a_reservation_is_settled_once_and_only_by_its_tenant,
    an_overrun_is_a_debt_later_requests_wait_out,
    a_refund_goes_back_only_into_the_window_it_was_charged_in,
    an_unsettled_reservation_expires_and_keeps_its_estimate,
    concurrency_admits_exactly_the_limit_in_flight_until_released_or_ended,
    a_check_of_a_concurrency_and_a_rate_rule_takes_both_or_neither,
    reservations_and_leases_count_against_the_quota,
    a_request_id_used_again_after_its_record_ends_makes_a_fresh_reservation_and_lease,
);

/// A reservation's and a lease's id come from the request_id's record; used again once that
/// record has ended (10 minutes), the id is the same but the reservation or lease is new:
/// it settles or releases again, and an earlier lease of the id still held keeps counting.
async fn a_request_id_used_again_after_its_record_ends_makes_a_fresh_reservation_and_lease(
    b: &Backend,
) {
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::TokenBucket, 100, 86_400_000);
    let slots = LimitSpec::new(Algorithm::Concurrency, 2, 3_600_000);
    let job = |now: i64| CheckRequest {
        request_id: Some("job-7".into()),
        reserve: Some(Reserve {
            id: reservation_id(70),
            ttl_ms: 60_000,
        }),
        lease: Some(reservation_id(71)),
        ..request(
            &t,
            vec![rule(&t, "r", spec, 10), rule(&t, "in-flight", slots, 1)],
            Some(now),
        )
    };
    // The record ends: Redis's after 10 minutes of its own time (deleted here), the
    // in-process limiter's 10 minutes on the clock it is given.
    let later = T0 + 600_001;
    for (round, now) in [(1, T0), (2, later)] {
        if round == 2 {
            let _: Option<i64> = b
                .redis_query(redis::cmd("DEL").arg(job(T0).reply_key()))
                .await;
        }
        let out = b.check(&job(now)).await;
        assert!(out.allowed && !out.deduplicated, "round {round}: {out:?}");
        let settled = b
            .limiter
            .settle(&t, &reservation_id(70), 0, Some(now), false)
            .await
            .unwrap();
        assert!(
            matches!(
                settled,
                Settlement::Settled {
                    repeated: false,
                    ..
                }
            ),
            "round {round}: {settled:?}"
        );
        assert_eq!(
            b.limiter
                .release(&t, &reservation_id(71), Some(now), false)
                .await
                .unwrap(),
            Released::Now,
            "round {round}"
        );
    }
    // Both rounds' refunds gave everything back; both leases were released.
    assert_eq!(left(b, &t, "r", spec, later).await, 100.0);
    assert_eq!(left(b, &t, "in-flight", slots, later).await, 2.0);

    // An earlier lease of the id, still held when the id is used again, keeps its slot.
    let t = tenant();
    let take = |now: i64| CheckRequest {
        request_id: Some("job-8".into()),
        lease: Some(reservation_id(72)),
        ..request(&t, vec![rule(&t, "in-flight", slots, 1)], Some(now))
    };
    assert!(b.check(&take(T0)).await.allowed);
    let _: Option<i64> = b
        .redis_query(redis::cmd("DEL").arg(take(T0).reply_key()))
        .await;
    assert!(b.check(&take(later)).await.allowed);
    assert_eq!(
        left(b, &t, "in-flight", slots, later).await,
        0.0,
        "two leases, two slots"
    );
}

/// A reservation's record and a lease's record are live keys: with a quota of 3, a new
/// bucket and its reservation take 2, and the next reservation of the same bucket the third;
/// one more is refused and charges nothing. A lease and its bucket take 2 more of a fresh
/// tenant's quota of 3, so a lease of another bucket is refused.
async fn reservations_and_leases_count_against_the_quota(b: &Backend) {
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::TokenBucket, 100, 60_000);
    let with_quota = |request: CheckRequest| CheckRequest {
        max_live_keys: Some(3),
        ..request
    };
    for n in 0..2 {
        let reserve = with_quota(reservation(&t, "r", spec, 10, T0, &reservation_id(50 + n)));
        assert!(b.limiter.check(&reserve).await.unwrap().allowed, "{n}");
    }
    let third = with_quota(reservation(&t, "r", spec, 10, T0, &reservation_id(52)));
    assert!(matches!(
        b.limiter.check(&third).await,
        Err(LimiterError::OverQuota {
            live: 3,
            quota: 3,
            ..
        })
    ));
    assert_eq!(
        left(b, &t, "r", spec, T0).await,
        80.0,
        "the refused reservation charged"
    );

    let t = tenant();
    let slots = LimitSpec::new(Algorithm::Concurrency, 5, 60_000);
    let lease = |name: &str, n: u64| CheckRequest {
        lease: Some(reservation_id(n)),
        ..with_quota(request(&t, vec![rule(&t, name, slots, 1)], Some(T0)))
    };
    assert!(b.limiter.check(&lease("a", 60)).await.unwrap().allowed);
    assert!(matches!(
        b.limiter.check(&lease("b", 61)).await,
        Err(LimiterError::OverQuota { .. })
    ));
}

/// A check of one concurrency rule `name` (limit `limit`, leases of `period_ms`) at `now`,
/// taking lease `id`.
fn acquire(t: &str, spec: LimitSpec, now: i64, id: &str) -> CheckRequest {
    CheckRequest {
        lease: Some(id.to_owned()),
        ..request(t, vec![rule(t, "in-flight", spec, 1)], Some(now))
    }
}

async fn concurrency_admits_exactly_the_limit_in_flight_until_released_or_ended(b: &Backend) {
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::Concurrency, 20, 60_000);
    // Fifty at once, from two instances: exactly twenty hold a lease.
    let other = b.another_instance(4).await;
    let outcomes = join_all((0..50u64).map(|i| {
        let limiter = if i % 2 == 0 { &b.limiter } else { &other };
        let check = acquire(&t, spec, T0, &reservation_id(1_000 + i));
        async move { (i, limiter.check(&check).await.unwrap()) }
    }))
    .await;
    let held: Vec<u64> = outcomes
        .iter()
        .filter(|(_, o)| o.allowed)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(held.len(), 20, "{outcomes:?}");
    let denied = outcomes.iter().find(|(_, o)| !o.allowed).unwrap();
    assert_eq!(denied.1.decisions[0].remaining, 0.0);
    assert_eq!(denied.1.decisions[0].retry_after_ms, 60_000);
    // Five released: five more fit, and no sixth; a release is answered once.
    for i in &held[..5] {
        let id = reservation_id(1_000 + i);
        assert_eq!(
            b.limiter.release(&t, &id, Some(T0), false).await.unwrap(),
            Released::Now
        );
        assert_eq!(
            b.limiter.release(&t, &id, Some(T0), false).await.unwrap(),
            Released::Before
        );
    }
    assert_eq!(
        b.limiter
            .release(&t, &reservation_id(999), Some(T0), false)
            .await
            .unwrap(),
        Released::Unknown
    );
    let again: Vec<bool> = join_all((0..6u64).map(|i| {
        let check = acquire(&t, spec, T0 + 1, &reservation_id(2_000 + i));
        let limiter = &other;
        async move { limiter.check(&check).await.unwrap().allowed }
    }))
    .await;
    assert_eq!(again.iter().filter(|a| **a).count(), 5, "{again:?}");
    // Unreleased leases end after the period: all twenty slots are back.
    let later: Vec<bool> = join_all((0..21u64).map(|i| {
        let check = acquire(&t, spec, T0 + 60_001, &reservation_id(3_000 + i));
        let limiter = &b.limiter;
        async move { limiter.check(&check).await.unwrap().allowed }
    }))
    .await;
    assert_eq!(later.iter().filter(|a| **a).count(), 20, "{later:?}");
    // Not a lease id: refused before any lookup.
    assert!(matches!(
        b.limiter.release(&t, "nope", None, false).await,
        Err(LimiterError::Invalid(_))
    ));
}

async fn a_check_of_a_concurrency_and_a_rate_rule_takes_both_or_neither(b: &Backend) {
    let t = tenant();
    let slots = LimitSpec::new(Algorithm::Concurrency, 2, 60_000);
    let rate = LimitSpec::new(Algorithm::FixedWindow, 3, 60_000);
    let both = |n: u64| CheckRequest {
        lease: Some(reservation_id(n)),
        ..request(
            &t,
            vec![rule(&t, "slots", slots, 1), rule(&t, "rate", rate, 1)],
            Some(T0),
        )
    };
    assert!(b.check(&both(1)).await.allowed);
    assert!(b.check(&both(2)).await.allowed);
    // The slots are full: the rate rule is not charged either.
    let out = b.check(&both(3)).await;
    assert!(!out.allowed);
    assert_eq!(out.decisions[0].verdict, Verdict::Deny);
    assert_eq!(out.decisions[1].verdict, Verdict::Allow);
    assert_eq!(
        left(b, &t, "rate", rate, T0).await,
        1.0,
        "the rate rule was charged"
    );
    // A slot freed: the third goes ahead and takes the rate's last unit.
    b.limiter
        .release(&t, &reservation_id(1), Some(T0), false)
        .await
        .unwrap();
    assert!(b.check(&both(3)).await.allowed);
    // Now the rate denies: no slot is taken.
    b.limiter
        .release(&t, &reservation_id(2), Some(T0), false)
        .await
        .unwrap();
    let out = b.check(&both(4)).await;
    assert!(!out.allowed);
    assert_eq!(out.decisions[1].verdict, Verdict::Deny, "{out:?}");
    assert_eq!(
        left(b, &t, "slots", slots, T0).await,
        1.0,
        "a slot was taken"
    );
}

/// A check of `spec`'s bucket `name` at `cost` and `now`, made a reservation `id`.
fn reservation(
    t: &str,
    name: &str,
    spec: LimitSpec,
    cost: u64,
    now: i64,
    id: &str,
) -> CheckRequest {
    CheckRequest {
        reserve: Some(Reserve {
            id: id.to_owned(),
            ttl_ms: 60_000,
        }),
        ..request(t, vec![rule(t, name, spec, cost)], Some(now))
    }
}

/// What is left in `name`'s bucket at `now`: a dry run of cost 1, plus that 1.
async fn left(b: &Backend, t: &str, name: &str, spec: LimitSpec, now: i64) -> f64 {
    let dry = CheckRequest {
        dry_run: true,
        ..request(t, vec![rule(t, name, spec, 1)], Some(now))
    };
    let d = b.check(&dry).await.decisions[0];
    if d.allowed() {
        d.remaining + 1.0
    } else {
        d.remaining
    }
}

fn reservation_id(n: u64) -> String {
    format!("{n:032x}")
}

/// The acceptance case: on every algorithm, a bucket charged 100 by a reservation and
/// settled at 30 ends exactly 70 fuller than the same bucket charged 100 by a check.
async fn reserve_100_settle_30_leaves_each_algorithm_exactly_70_fuller(b: &Backend) {
    let t = tenant();
    for (i, spec) in specs(1_000, 60_000).into_iter().enumerate() {
        let name = spec.algorithm.as_str();
        let (reserved, checked) = (format!("{name}-reserved"), format!("{name}-checked"));
        let id = reservation_id(i as u64 + 1);
        let out = b
            .check(&reservation(&t, &reserved, spec, 100, T0, &id))
            .await;
        assert!(out.allowed, "{spec:?}");
        let out = b
            .check(&request(&t, vec![rule(&t, &checked, spec, 100)], Some(T0)))
            .await;
        assert!(out.allowed, "{spec:?}");
        let settled = b
            .limiter
            .settle(&t, &id, 30, Some(T0 + 10), false)
            .await
            .unwrap();
        assert_eq!(
            settled,
            Settlement::Settled {
                estimate: 100,
                cost: 30,
                repeated: false,
                buckets: vec![rule(&t, &reserved, spec, 1).key],
            },
            "{spec:?}"
        );
        let with = left(b, &t, &reserved, spec, T0 + 10).await;
        let without = left(b, &t, &checked, spec, T0 + 10).await;
        assert!(
            (with - without - 70.0).abs() < 1e-6,
            "{spec:?}: {with} left after the refund, {without} without"
        );
    }
}

async fn a_reservation_is_settled_once_and_only_by_its_tenant(b: &Backend) {
    let (t, other) = (tenant(), tenant());
    let spec = LimitSpec::new(Algorithm::TokenBucket, 100, 60_000);
    let id = reservation_id(7);
    assert!(
        b.check(&reservation(&t, "r", spec, 50, T0, &id))
            .await
            .allowed
    );
    // Another tenant cannot see it, and an id never made is unknown.
    assert_eq!(
        b.limiter
            .settle(&other, &id, 0, Some(T0), false)
            .await
            .unwrap(),
        Settlement::Unknown
    );
    assert_eq!(
        b.limiter
            .settle(&t, &reservation_id(8), 0, Some(T0), false)
            .await
            .unwrap(),
        Settlement::Unknown
    );
    let first = b
        .limiter
        .settle(&t, &id, 20, Some(T0), false)
        .await
        .unwrap();
    assert!(matches!(
        first,
        Settlement::Settled {
            cost: 20,
            repeated: false,
            ..
        }
    ));
    let after_first = left(b, &t, "r", spec, T0).await;
    assert_eq!(after_first, 80.0);
    // Again, at the same cost or another: the first settle's answer, nothing refunded twice.
    for cost in [20, 0] {
        let again = b
            .limiter
            .settle(&t, &id, cost, Some(T0), false)
            .await
            .unwrap();
        assert!(
            matches!(
                again,
                Settlement::Settled {
                    estimate: 50,
                    cost: 20,
                    repeated: true,
                    ..
                }
            ),
            "{again:?}"
        );
        assert_eq!(left(b, &t, "r", spec, T0).await, after_first);
    }
    // Ten settles at once of a fresh reservation: exactly one refunds.
    let id = reservation_id(9);
    assert!(
        b.check(&reservation(&t, "r2", spec, 60, T0, &id))
            .await
            .allowed
    );
    let limiter = b.another_instance(4).await;
    let settles = join_all((0..10).map(|_| limiter.settle(&t, &id, 0, Some(T0), false))).await;
    let fresh = settles
        .iter()
        .filter(|s| {
            matches!(
                s,
                Ok(Settlement::Settled {
                    repeated: false,
                    ..
                })
            )
        })
        .count();
    assert_eq!(fresh, 1, "{settles:?}");
    assert_eq!(left(b, &t, "r2", spec, T0).await, 100.0);
    // Not a reservation id: refused before any lookup.
    assert!(matches!(
        b.limiter.settle(&t, "not-an-id", 0, None, false).await,
        Err(LimiterError::Invalid(_))
    ));
}

/// Settling above the estimate charges the difference even past empty; later requests wait
/// the debt out, and a penalised denial does not forgive it.
async fn an_overrun_is_a_debt_later_requests_wait_out(b: &Backend) {
    let t = tenant();
    for (i, spec) in specs(10, 1_000).into_iter().enumerate() {
        let spec = LimitSpec {
            penalty: true,
            ..spec
        };
        let name = spec.algorithm.as_str();
        let id = reservation_id(100 + i as u64);
        let now = T0 + 100; // 100 ms into a window
        assert!(
            b.check(&reservation(&t, name, spec, 10, now, &id))
                .await
                .allowed
        );
        b.limiter
            .settle(&t, &id, 30, Some(now), false)
            .await
            .unwrap();
        let one = || request(&t, vec![rule(&t, name, spec, 1)], Some(now));
        let denied = b.check(&one()).await;
        assert!(!denied.allowed, "{spec:?}");
        let retry = denied.decisions[0].retry_after_ms;
        // Twenty owed and one asked: 2.1 s at 10 per second for the buckets; the windows
        // count the debt in the current window, which ends in 900 ms (a sliding window's
        // weighs on the next one too).
        let expected = match spec.algorithm {
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => 2_100..=2_101,
            Algorithm::FixedWindow => 900..=900,
            Algorithm::SlidingWindow => 900..=2_000,
            Algorithm::SlidingLog => 1_000..=1_000,
            Algorithm::Concurrency => unreachable!("specs() has only rates"),
        };
        assert!(expected.contains(&retry), "{spec:?}: retry after {retry}");
        // The penalised denial took nothing more and forgave nothing: the same wait, less
        // the time passed, and waiting it out is enough.
        let later = b
            .check(&request(&t, vec![rule(&t, name, spec, 1)], Some(now + 50)))
            .await;
        assert!(!later.allowed);
        assert!(
            later.decisions[0].retry_after_ms + 50 >= retry,
            "{spec:?}: {} after 50 ms, {retry} before",
            later.decisions[0].retry_after_ms
        );
        let t_ok = now + 50 + later.decisions[0].retry_after_ms as i64;
        let ok = b
            .check(&request(&t, vec![rule(&t, name, spec, 1)], Some(t_ok)))
            .await;
        assert!(ok.allowed, "{spec:?} at +{}", t_ok - now);
    }
}

/// Windows take a refund only into the window it was charged in: a fixed window's next
/// window starts from zero anyway, and a sliding window's window before the previous one no
/// longer counts.
async fn a_refund_goes_back_only_into_the_window_it_was_charged_in(b: &Backend) {
    let t = tenant();
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let spec = LimitSpec::new(algorithm, 100, 1_000);
        let name = algorithm.as_str();
        let id = reservation_id(200 + algorithm as u64);
        let start = T0 - T0 % 1_000 + 500;
        assert!(
            b.check(&reservation(&t, name, spec, 80, start, &id))
                .await
                .allowed
        );
        // In the next window: fixed is full again; sliding has the previous window's 80 at
        // half weight (40), and the refund of 60 takes it to 20 there, so 10 now.
        let next = start + 1_000;
        let before = left(b, &t, name, spec, next).await;
        b.limiter
            .settle(&t, &id, 20, Some(next), false)
            .await
            .unwrap();
        let after = left(b, &t, name, spec, next).await;
        match algorithm {
            Algorithm::FixedWindow => {
                assert_eq!((before, after), (100.0, 100.0));
            }
            _ => {
                assert!(
                    (before - 60.0).abs() < 1e-9 && (after - 90.0).abs() < 1e-9,
                    "{before} {after}"
                );
            }
        }
        // Two windows on, nothing of it counts and nothing comes back.
        let id = reservation_id(300 + algorithm as u64);
        let start = start + 10_000;
        assert!(
            b.check(&reservation(&t, name, spec, 80, start, &id))
                .await
                .allowed
        );
        let far = start + 2_000;
        let before = left(b, &t, name, spec, far).await;
        b.limiter
            .settle(&t, &id, 0, Some(far), false)
            .await
            .unwrap();
        assert_eq!(left(b, &t, name, spec, far).await, before);
        assert_eq!(before, 100.0);
    }
}

async fn an_unsettled_reservation_expires_and_keeps_its_estimate(b: &Backend) {
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::SlidingLog, 100, 3_600_000);
    let id = reservation_id(42);
    let now = sluice::store::now_ms();
    let reserve = CheckRequest {
        reserve: Some(Reserve {
            id: id.clone(),
            ttl_ms: 1_000,
        }),
        ..request(&t, vec![rule(&t, "r", spec, 40)], Some(now))
    };
    assert!(b.check(&reserve).await.allowed);
    // Redis drops the record after its TTL of real time; the in-process limiter reads the
    // clock it is given.
    let record = keys::reservation(&t, &id);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b
        .redis_query::<bool>(redis::cmd("EXISTS").arg(&record))
        .await
        .unwrap_or(false)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the record outlived its TTL"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let later = now + 1_001;
    assert_eq!(
        b.limiter
            .settle(&t, &id, 0, Some(later), false)
            .await
            .unwrap(),
        Settlement::Unknown
    );
    assert_eq!(left(b, &t, "r", spec, later).await, 60.0);
}

/// The decision core's deny cache ([`DenyCache`]) against the backend itself (on Redis, the
/// check script): random one- and two-rule checks at random costs and times; a check the
/// cache would deny is asked of the backend as a dry run at the same instant, which must deny
/// it too, and is not sent (as in the server). Over all runs the cache must answer some.
async fn the_deny_cache_denies_only_what_the_backend_denies(b: &Backend) {
    let mut rng = SmallRng::seed_from_u64(12);
    let mut answered = 0;
    for _ in 0..150 {
        let t = tenant();
        let specs: Vec<LimitSpec> = (0..2)
            .map(|_| {
                let algorithm = Algorithm::RATES[rng.gen_range(0..Algorithm::RATES.len())];
                let mut spec = random_spec(&mut rng, algorithm);
                spec.limit = spec.limit.min(5);
                spec.period_ms = rng.gen_range(20..=500);
                spec
            })
            .collect();
        let sets: [Vec<usize>; 3] = [vec![0], vec![1], vec![0, 1]];
        let cache = DenyCache::default();
        let mut now = T0;
        for _ in 0..60 {
            now += match rng.gen_range(0..8) {
                0 | 1 => 0,
                2..=4 => rng.gen_range(0..5),
                5 | 6 => rng.gen_range(0..50),
                _ => rng.gen_range(0..400),
            };
            // Each rule its own cost, or one for all (gRPC charges each descriptor its own).
            let costs: [u64; 2] = if rng.gen_bool(0.5) {
                [rng.gen_range(1..=3), rng.gen_range(1..=3)]
            } else {
                [rng.gen_range(1..=3); 2]
            };
            let set = &sets[rng.gen_range(0..3)];
            let rules = set
                .iter()
                .map(|&i| rule(&t, &format!("r{i}"), specs[i], costs[i]))
                .collect();
            let check = request(&t, rules, Some(now));
            if let Some(cached) = cache.denied(&check, DenyCache::clock(&check)) {
                let truth = b
                    .check(&CheckRequest {
                        dry_run: true,
                        ..check.clone()
                    })
                    .await;
                assert!(
                    !truth.allowed,
                    "the cache denied at {now} what the backend admits: {check:?} {cached:?} {truth:?}"
                );
                answered += 1;
                continue;
            }
            let sent = DenyCache::clock(&check);
            let outcome = b.check(&check).await;
            cache.remember(&check, &outcome, sent);
        }
    }
    assert!(answered > 20, "the cache answered {answered} checks");
}

/// A spec for each algorithm with the given limit and period (burst = limit).
fn specs(limit: u64, period_ms: u64) -> Vec<LimitSpec> {
    Algorithm::RATES
        .into_iter()
        .map(|a| LimitSpec::new(a, limit, period_ms))
        .collect()
}

async fn remaining_stays_between_zero_and_capacity(b: &Backend) {
    let t = tenant();
    let mut rng = SmallRng::seed_from_u64(7);
    for spec in specs(10, 1000) {
        let mut now = T0;
        for _ in 0..200 {
            now += rng.gen_range(-300..400);
            let cost = rng.gen_range(1..=4);
            let out = b
                .check(&request(
                    &t,
                    vec![rule(&t, spec.algorithm.as_str(), spec, cost)],
                    Some(now),
                ))
                .await;
            let d = out.decisions[0];
            assert!(d.remaining >= 0.0 && d.remaining <= 10.0, "{spec:?}: {d:?}");
        }
    }
}

async fn idle_time_never_refills_beyond_capacity(b: &Backend) {
    let t = tenant();
    for spec in specs(10, 1000) {
        let r = |cost| vec![rule(&t, spec.algorithm.as_str(), spec, cost)];
        b.check(&request(&t, r(3), Some(T0))).await;
        // A hundred periods later the key is full again, and no fuller.
        let out = b.check(&request(&t, r(1), Some(T0 + 100_000))).await;
        assert!(out.allowed);
        assert_eq!(out.decisions[0].remaining, 9.0, "{spec:?}");
    }
}

async fn time_going_backwards_creates_no_capacity(b: &Backend) {
    let t = tenant();
    for spec in specs(5, 1000) {
        let r = |cost| vec![rule(&t, spec.algorithm.as_str(), spec, cost)];
        assert!(b.check(&request(&t, r(5), Some(T0 + 10_000))).await.allowed);
        for earlier in [T0 + 9_999, T0 + 5_000, T0, T0 - 1_000_000] {
            let out = b.check(&request(&t, r(1), Some(earlier))).await;
            assert!(!out.allowed, "{spec:?} at {earlier}: {out:?}");
            assert_eq!(out.decisions[0].verdict, Verdict::Deny);
            assert_eq!(out.decisions[0].remaining, 0.0, "{spec:?}");
        }
    }
}

async fn a_reset_bucket_starts_full_and_no_other_bucket_changes(b: &Backend) {
    let t = tenant();
    for spec in specs(3, 60_000) {
        let name = spec.algorithm.as_str();
        let key = |subject: &str| RuleCheck {
            key: keys::bucket(&t, name, Some(subject)),
            spec,
            cost: 3,
            shadow: false,
        };
        for subject in ["alice", "bob"] {
            let check = request(&t, vec![key(subject)], Some(T0));
            assert!(b.check(&check).await.allowed, "{spec:?}");
            assert!(!b.check(&check).await.allowed, "{spec:?}");
        }
        let bob_before = b.snapshot(&key("bob").key).await;
        assert!(bob_before.is_some(), "{spec:?}");

        assert!(
            b.limiter.reset(&t, &key("alice").key).await.unwrap(),
            "{spec:?}"
        );
        assert_eq!(b.snapshot(&key("alice").key).await, None, "{spec:?}");
        // Alice's bucket admits its whole capacity again, at the same instant; Bob's is as it was.
        let alice = request(&t, vec![key("alice")], Some(T0));
        assert!(b.check(&alice).await.allowed, "{spec:?}");
        assert!(!b.check(&alice).await.allowed, "{spec:?}");
        assert_eq!(b.snapshot(&key("bob").key).await, bob_before, "{spec:?}");
        let bob = request(&t, vec![key("bob")], Some(T0));
        assert!(!b.check(&bob).await.allowed, "{spec:?}");
        // A bucket that holds nothing is reported as such.
        assert!(
            !b.limiter.reset(&t, &key("carol").key).await.unwrap(),
            "{spec:?}"
        );
    }
}

async fn a_reset_bucket_no_longer_counts_against_the_quota(b: &Backend) {
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::FixedWindow, 1, 3_600_000);
    let check = |subject: &str| {
        let mut check = request(
            &t,
            vec![RuleCheck {
                key: keys::bucket(&t, "quota", Some(subject)),
                spec,
                cost: 1,
                shadow: false,
            }],
            None,
        );
        check.max_live_keys = Some(1);
        check
    };
    assert!(b.check(&check("alice")).await.allowed);
    // One live bucket of one allowed: Bob's would be a second.
    assert!(matches!(
        b.limiter.check(&check("bob")).await,
        Err(LimiterError::OverQuota { .. })
    ));
    assert!(b
        .limiter
        .reset(&t, &keys::bucket(&t, "quota", Some("alice")))
        .await
        .unwrap());
    // Alice's bucket is gone from the count too: hers can be made again (or Bob's instead).
    assert!(b.check(&check("alice")).await.allowed);
}

async fn different_keys_never_share_state(b: &Backend) {
    let t = tenant();
    let other_tenant = tenant();
    for spec in specs(3, 60_000) {
        let name = spec.algorithm.as_str();
        let key = |tenant: &str, subject: Option<&str>| RuleCheck {
            key: keys::bucket(tenant, name, subject),
            spec,
            cost: 3,
            shadow: false,
        };
        assert!(
            b.check(&request(&t, vec![key(&t, Some("alice"))], Some(T0)))
                .await
                .allowed
        );
        assert!(
            !b.check(&request(&t, vec![key(&t, Some("alice"))], Some(T0)))
                .await
                .allowed
        );
        // Another subject, the tenant-wide bucket and another tenant are all untouched.
        assert!(
            b.check(&request(&t, vec![key(&t, Some("bob"))], Some(T0)))
                .await
                .allowed,
            "{spec:?}"
        );
        assert!(
            b.check(&request(&t, vec![key(&t, None)], Some(T0)))
                .await
                .allowed,
            "{spec:?}"
        );
        let other = request(
            &other_tenant,
            vec![key(&other_tenant, Some("alice"))],
            Some(T0),
        );
        assert!(b.check(&other).await.allowed, "{spec:?}");
    }
}

async fn an_expired_key_comes_back_full(b: &Backend) {
    // The real clock here: expiry is Redis's own (or the process's).
    let t = tenant();
    let all = specs(4, 20);
    let rules: Vec<RuleCheck> = all
        .iter()
        .map(|s| rule(&t, s.algorithm.as_str(), *s, 4))
        .collect();
    for r in &rules {
        assert!(b.check(&request(&t, vec![r.clone()], None)).await.allowed);
        assert!(b.snapshot(&r.key).await.is_some());
        if let Some(ttl) = b.pttl(&r.key).await {
            assert!(ttl > 0 && ttl <= 1040, "{}: PTTL {ttl}", r.key);
        }
    }
    tokio::time::sleep(Duration::from_millis(1300)).await;
    for r in &rules {
        if !matches!(b.store, Store::Memory(_)) {
            assert!(
                b.snapshot(&r.key).await.is_none(),
                "{} has not expired",
                r.key
            );
        }
        let out = b
            .check(&request(
                &t,
                vec![RuleCheck {
                    cost: 1,
                    ..r.clone()
                }],
                None,
            ))
            .await;
        assert!(out.allowed);
        assert_eq!(out.decisions[0].remaining, 3.0, "{}", r.key);
    }
    if let Store::Memory(m) = &b.store {
        // Idle keys are swept: memory follows the active keys.
        assert!(m.sweep(sluice::store::now_ms() + 2_000) >= rules.len());
        assert!(m.is_empty());
    }
}

async fn a_denial_without_penalty_writes_nothing(b: &Backend) {
    let t = tenant();
    for spec in specs(4, 10_000) {
        let r = |cost| vec![rule(&t, spec.algorithm.as_str(), spec, cost)];
        let key = &r(1)[0].key;
        assert!(b.check(&request(&t, r(4), Some(T0))).await.allowed);
        let before = b.snapshot(key).await;
        let ttl_before = b.pttl(key).await;
        assert!(before.is_some());
        let out = b.check(&request(&t, r(2), Some(T0 + 1))).await;
        assert!(!out.allowed, "{spec:?}");
        assert_eq!(
            b.snapshot(key).await,
            before,
            "{spec:?}: a denial changed the state"
        );
        if let (Some(before), Some(after)) = (ttl_before, b.pttl(key).await) {
            assert!(after <= before, "{spec:?}: a denial extended the TTL");
        }
    }
}

async fn a_dry_run_decides_like_a_check_and_writes_nothing(b: &Backend) {
    let t = tenant();
    for spec in specs(4, 10_000) {
        // With penalty, so that even a denial would write if the dry run were not dry.
        let spec = LimitSpec {
            penalty: true,
            ..spec
        };
        let r = |cost| vec![rule(&t, spec.algorithm.as_str(), spec, cost)];
        let key = &r(1)[0].key;
        let dry = |cost, now| CheckRequest {
            dry_run: true,
            max_live_keys: None,
            reserve: None,
            lease: None,
            ..request(&t, r(cost), Some(now))
        };
        // On a key that does not exist, nothing is created.
        let out = b.check(&dry(1, T0)).await;
        assert!(out.allowed, "{spec:?}");
        assert_eq!(
            b.snapshot(key).await,
            None,
            "{spec:?}: a dry run created the key"
        );

        assert!(b.check(&request(&t, r(3), Some(T0))).await.allowed);
        let before = b.snapshot(key).await;
        for (cost, now) in [(1, T0 + 1), (2, T0 + 1), (3, T0 + 2)] {
            let simulated = b.check(&dry(cost, now)).await;
            assert_eq!(
                b.snapshot(key).await,
                before,
                "{spec:?}: a dry run of cost {cost} changed the state"
            );
            // The same check for real decides exactly as the dry run said, then is undone by
            // using a fresh key for the next round.
            let real_key = format!("{key}-real-{cost}");
            let copy = vec![RuleCheck {
                key: real_key.clone(),
                ..r(3)[0].clone()
            }];
            assert!(b.check(&request(&t, copy, Some(T0))).await.allowed);
            let real = vec![RuleCheck {
                key: real_key,
                ..r(cost)[0].clone()
            }];
            let real = b.check(&request(&t, real, Some(now))).await;
            assert_eq!(simulated.allowed, real.allowed, "{spec:?} cost {cost}");
            assert_eq!(simulated.decisions, real.decisions, "{spec:?} cost {cost}");
        }
        // A dry run cannot carry a request_id (it would record an answer).
        let with_id = CheckRequest {
            request_id: Some("r1".into()),
            ..dry(1, T0 + 3)
        };
        assert!(matches!(
            b.limiter.check(&with_id).await,
            Err(LimiterError::Invalid(_))
        ));
    }
}

async fn a_penalty_charges_a_denial_but_never_below_zero(b: &Backend) {
    let t = tenant();
    for spec in specs(10, 10_000) {
        let spec = LimitSpec {
            penalty: true,
            ..spec
        };
        let r = |cost| vec![rule(&t, spec.algorithm.as_str(), spec, cost)];
        let key = &r(1)[0].key;
        assert!(b.check(&request(&t, r(8), Some(T0))).await.allowed);
        let before = b.snapshot(key).await;
        // 5 does not fit in the 2 left: denied, and the 2 are charged.
        let out = b.check(&request(&t, r(5), Some(T0))).await;
        assert!(!out.allowed);
        assert_eq!(out.decisions[0].remaining, 0.0, "{spec:?}");
        assert_ne!(
            b.snapshot(key).await,
            before,
            "{spec:?}: the penalty wrote nothing"
        );
        // Now even a cost of 1 is refused at the same instant.
        assert!(
            !b.check(&request(&t, r(1), Some(T0))).await.allowed,
            "{spec:?}"
        );
    }
}

async fn a_cost_above_capacity_never_fits(b: &Backend) {
    let t = tenant();
    for spec in specs(5, 1000) {
        let r = |cost| vec![rule(&t, spec.algorithm.as_str(), spec, cost)];
        let out = b.check(&request(&t, r(6), Some(T0))).await;
        assert!(!out.allowed);
        assert_eq!(out.decisions[0].verdict, Verdict::NeverFits, "{spec:?}");
        assert_eq!(out.decisions[0].retry_after_ms, 0, "no retry can help");
        assert!(
            b.snapshot(&r(1)[0].key).await.is_none(),
            "{spec:?}: nothing is written"
        );
        // The bucket is untouched: the full capacity is still there.
        assert!(
            b.check(&request(&t, r(5), Some(T0))).await.allowed,
            "{spec:?}"
        );
    }
}

async fn fractional_tokens_survive_the_round_trip(b: &Backend) {
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::TokenBucket, 3, 1000);
    let r = |cost| vec![rule(&t, "fractions", spec, cost)];
    assert!(b.check(&request(&t, r(3), Some(T0))).await.allowed);
    // 500 ms refill 1.5 tokens; taking 1 leaves exactly half a token.
    let out = b.check(&request(&t, r(1), Some(T0 + 500))).await;
    assert!(out.allowed);
    assert_eq!(out.decisions[0].remaining, 0.5);
    let out = b.check(&request(&t, r(1), Some(T0 + 500))).await;
    assert!(!out.allowed);
    assert_eq!(out.decisions[0].remaining, 0.5);
    // The missing half token takes 1000/3/2 ms = 166.67 ms, rounded up.
    assert_eq!(out.decisions[0].retry_after_ms, 167);
    let out = b.check(&request(&t, r(1), Some(T0 + 667))).await;
    assert!(out.allowed, "{out:?}");
}

async fn a_request_id_sent_ten_times_concurrently_consumes_once(b: &Backend) {
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::TokenBucket, 100, 366 * 86_400_000);
    let mut req = request(&t, vec![rule(&t, "idem", spec, 7)], None);
    req.request_id = Some("order-42".into());
    let limiter = Arc::new(b.limiter.clone());
    let replies: Vec<CheckOutcome> = join_all((0..10).map(|_| {
        let limiter = limiter.clone();
        let req = req.clone();
        tokio::spawn(async move { limiter.check(&req).await.unwrap() })
    }))
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    assert_eq!(
        replies.iter().filter(|r| !r.deduplicated).count(),
        1,
        "{replies:?}"
    );
    let first = CheckOutcome {
        deduplicated: false,
        ..replies[0].clone()
    };
    for reply in &replies {
        assert_eq!(
            &CheckOutcome {
                deduplicated: false,
                ..reply.clone()
            },
            &first
        );
    }
    assert_eq!(first.decisions[0].remaining, 93.0);
    // Consumed once: a new request sees 100 - 7 - 1.
    let out = b
        .check(&request(
            &t,
            vec![rule(&t, "idem", spec, 1)],
            Some(first.now_ms),
        ))
        .await;
    assert_eq!(out.decisions[0].remaining, 92.0);
}

async fn exactly_the_limit_is_admitted_under_concurrency(b: &Backend) {
    // Three instances with six connections each (18 connections to Redis), 500 checks at
    // once against a limit of 100 that does not refill during the test.
    let instances = [
        b.another_instance(6).await,
        b.another_instance(6).await,
        b.another_instance(6).await,
    ];
    if let Store::Redis(server) = &b.store {
        let clients = server.cli(&["CLIENT", "LIST"]);
        assert!(clients.lines().count() >= 18, "{clients}");
    }
    if let Store::Cluster(cluster) = &b.store {
        for node in &cluster.nodes {
            let clients = node.cli(&["CLIENT", "LIST"]);
            assert!(clients.lines().count() >= 18, "{clients}");
        }
    }
    for spec in specs(100, 366 * 86_400_000) {
        let t = tenant();
        let tasks = (0..500).map(|i| {
            let limiter = instances[i % 3].clone();
            let req = request(&t, vec![rule(&t, "hot", spec, 1)], None);
            tokio::spawn(async move { limiter.check(&req).await.unwrap().allowed })
        });
        let allowed = join_all(tasks)
            .await
            .into_iter()
            .filter(|r| *r.as_ref().unwrap())
            .count();
        assert_eq!(allowed, 100, "{spec:?}");
    }
}

async fn multi_rule_checks_consume_all_or_nothing(b: &Backend) {
    let t = tenant();
    let forever = 366 * 86_400_000;
    let tenant_wide = rule(
        &t,
        "tenant",
        LimitSpec::new(Algorithm::FixedWindow, 50, forever),
        1,
    );
    let routes = [
        rule(
            &t,
            "route-a",
            LimitSpec::new(Algorithm::TokenBucket, 100, forever),
            1,
        ),
        rule(
            &t,
            "route-b",
            LimitSpec::new(Algorithm::SlidingLog, 100, forever),
            1,
        ),
    ];
    let limiter = Arc::new(b.limiter.clone());
    let tasks = (0..300).map(|i| {
        let limiter = limiter.clone();
        let req = request(
            &t,
            vec![tenant_wide.clone(), routes[i % 2].clone()],
            Some(T0),
        );
        tokio::spawn(async move { (i % 2, limiter.check(&req).await.unwrap().allowed) })
    });
    let results: Vec<(usize, bool)> = join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let allowed = |route: Option<usize>| {
        results
            .iter()
            .filter(|(r, ok)| *ok && route.is_none_or(|x| x == *r))
            .count()
    };
    assert_eq!(allowed(None), 50);
    // Read each bucket's consumption back through a zero-impact probe: a check that cannot
    // fit reports the remaining capacity without consuming.
    let remaining = |r: &RuleCheck| {
        let probe = RuleCheck {
            cost: r.spec.capacity() + 1,
            ..r.clone()
        };
        let req = request(&t, vec![probe], Some(T0));
        async move { b.check(&req).await.decisions[0].remaining }
    };
    assert_eq!(remaining(&tenant_wide).await, 50.0 - allowed(None) as f64);
    assert_eq!(remaining(&routes[0]).await, 100.0 - allowed(Some(0)) as f64);
    assert_eq!(remaining(&routes[1]).await, 100.0 - allowed(Some(1)) as f64);
}

async fn shadow_rules_report_but_never_block(b: &Backend) {
    let t = tenant();
    let enforced = rule(
        &t,
        "enforced",
        LimitSpec::new(Algorithm::Gcra, 10, 60_000),
        1,
    );
    let shadow = RuleCheck {
        shadow: true,
        ..rule(
            &t,
            "shadow",
            LimitSpec::new(Algorithm::FixedWindow, 2, 60_000),
            1,
        )
    };
    let mut verdicts = Vec::new();
    for _ in 0..5 {
        let out = b
            .check(&request(
                &t,
                vec![enforced.clone(), shadow.clone()],
                Some(T0),
            ))
            .await;
        assert!(out.allowed, "a shadow rule must not block: {out:?}");
        verdicts.push(out.decisions[1].verdict);
    }
    assert_eq!(
        verdicts,
        [
            Verdict::Allow,
            Verdict::Allow,
            Verdict::Deny,
            Verdict::Deny,
            Verdict::Deny
        ]
    );
    let probe = RuleCheck {
        cost: 11,
        ..enforced.clone()
    };
    assert_eq!(
        b.check(&request(&t, vec![probe], Some(T0))).await.decisions[0].remaining,
        5.0
    );
}

async fn invalid_checks_are_refused_without_touching_state(b: &Backend) {
    let t = tenant();
    let ok = rule(&t, "r", LimitSpec::new(Algorithm::Gcra, 10, 1000), 1);
    let refused = |req: CheckRequest| async move {
        match b.limiter.check(&req).await {
            Err(e @ LimiterError::Invalid(_)) => assert!(!e.is_transient()),
            other => panic!("expected a refusal, got {other:?}"),
        }
    };
    refused(request(&t, vec![ok.clone(); 9], None)).await;
    refused(request(&t, vec![], None)).await;
    refused(request(
        &t,
        vec![RuleCheck {
            cost: 0,
            ..ok.clone()
        }],
        None,
    ))
    .await;
    refused(request(
        &t,
        vec![RuleCheck {
            spec: LimitSpec::new(Algorithm::Gcra, 0, 1000),
            ..ok.clone()
        }],
        None,
    ))
    .await;
    refused(request(
        &t,
        vec![RuleCheck {
            key: keys::bucket("other", "r", None),
            ..ok.clone()
        }],
        None,
    ))
    .await;
    assert!(b.snapshot(&ok.key).await.is_none());
}

/// A check of `subject` under a rule whose buckets live about 3 s (a 2 s period plus the
/// script's margin of 1 s), with a quota of live keys.
fn subject_check(t: &str, subject: &str, quota: u64) -> CheckRequest {
    let spec = LimitSpec::new(Algorithm::TokenBucket, 10, 2_000);
    let mut req = request(
        t,
        vec![RuleCheck {
            key: keys::bucket(t, "per-subject", Some(subject)),
            ..rule(t, "per-subject", spec, 1)
        }],
        None,
    );
    req.max_live_keys = Some(quota);
    req
}

fn over_quota(result: Result<CheckOutcome, LimiterError>) -> (u64, u64, u64) {
    match result {
        Err(e @ LimiterError::OverQuota { .. }) => {
            assert!(!e.is_transient());
            let LimiterError::OverQuota {
                live,
                quota,
                retry_after_ms,
            } = e
            else {
                unreachable!()
            };
            (live, quota, retry_after_ms)
        }
        other => panic!("expected a refusal by the quota, got {other:?}"),
    }
}

async fn a_tenant_holds_at_most_its_quota_of_live_buckets(b: &Backend) {
    let t = tenant();
    for i in 0..5 {
        let out = b.check(&subject_check(&t, &format!("s{i}"), 5)).await;
        assert!(out.allowed);
    }
    // A sixth subject would be a sixth bucket: refused, and nothing is stored for it.
    let refused = subject_check(&t, "s5", 5);
    let (live, quota, retry_after_ms) = over_quota(b.limiter.check(&refused).await);
    assert_eq!((live, quota), (5, 5));
    assert!((1..=3_000).contains(&retry_after_ms), "{retry_after_ms}");
    assert!(b.snapshot(&refused.rules[0].key).await.is_none());
    // The subjects it holds are still checked, and consumed, as before.
    let before = b.snapshot(&subject_check(&t, "s0", 5).rules[0].key).await;
    let out = b.check(&subject_check(&t, "s0", 5)).await;
    assert!(out.allowed);
    assert_ne!(
        b.snapshot(&subject_check(&t, "s0", 5).rules[0].key).await,
        before
    );
    // Another tenant has its own quota.
    let other = tenant();
    assert!(b.check(&subject_check(&other, "s5", 5)).await.allowed);
    // Once the buckets expire there is room again (polled: expiry is Redis's own clock).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match b.limiter.check(&refused).await {
            Ok(out) => {
                assert!(out.allowed);
                break;
            }
            Err(LimiterError::OverQuota { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("no room after the buckets expired: {other:?}"),
        }
    }
}

async fn request_id_records_count_against_the_quota(b: &Backend) {
    let t = tenant();
    let with_id = |id: &str| {
        let mut req = subject_check(&t, "only", 3);
        req.request_id = Some(id.to_owned());
        req
    };
    // A new bucket and its record, then a second record: three live keys.
    assert!(b.check(&with_id("a")).await.allowed);
    assert!(b.check(&with_id("b")).await.allowed);
    let (live, quota, _) = over_quota(b.limiter.check(&with_id("c")).await);
    assert_eq!((live, quota), (3, 3));
    // A resend of a kept id creates nothing: it gets its first answer.
    let again = b.check(&with_id("a")).await;
    assert!(again.deduplicated && again.allowed);
    // And a check without an id stores nothing new.
    assert!(b.check(&subject_check(&t, "only", 3)).await.allowed);
}

async fn concurrent_new_subjects_never_pass_the_quota(b: &Backend) {
    // Three instances, 100 new subjects at once against a quota of 20: exactly 20 buckets.
    let t = tenant();
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(Arc::new(b.another_instance(4).await));
    }
    let results = join_all((0..100).map(|i| {
        let limiter = instances[i % 3].clone();
        let req = subject_check(&t, &format!("s{i}"), 20);
        tokio::spawn(async move { limiter.check(&req).await })
    }))
    .await;
    let (mut admitted, mut refused) = (0, 0);
    for result in results {
        match result.unwrap() {
            Ok(out) => {
                assert!(out.allowed);
                admitted += 1;
            }
            Err(LimiterError::OverQuota { live, .. }) => {
                assert_eq!(live, 20);
                refused += 1;
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!((admitted, refused), (20, 80));
}

#[test]
fn the_in_process_limiter_admits_exactly_the_limit_from_many_threads() {
    for spec in specs(100, 366 * 86_400_000) {
        let memory = MemoryBackend::new();
        let t = tenant();
        let req = request(&t, vec![rule(&t, "hot", spec, 1)], None);
        let allowed = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..20 {
                scope.spawn(|| {
                    for _ in 0..25 {
                        if memory.check(&req).unwrap().allowed {
                            allowed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(allowed.into_inner(), 100, "{spec:?}");
    }
}

// ---- Redis only -------------------------------------------------------------------------

/// A random spec for `algorithm`: small limits and periods so sequences hit every branch.
fn random_spec(rng: &mut SmallRng, algorithm: Algorithm) -> LimitSpec {
    let limit = if rng.gen_bool(0.2) {
        rng.gen_range(1..=3)
    } else {
        rng.gen_range(1..=40)
    };
    let period_ms = match rng.gen_range(0..4) {
        0 => rng.gen_range(1..=10),
        1 => rng.gen_range(10..=1000),
        2 => rng.gen_range(1000..=60_000),
        _ => rng.gen_range(1..=86_400_000),
    };
    let burst = (algorithm.has_burst() && rng.gen_bool(0.5)).then(|| rng.gen_range(1..=60));
    LimitSpec {
        algorithm,
        limit,
        period_ms,
        burst,
        penalty: algorithm != Algorithm::Concurrency && rng.gen_bool(0.3),
    }
}

fn random_step(rng: &mut SmallRng, period: u64) -> i64 {
    let period = period as i64;
    match rng.gen_range(0..10) {
        0 => 0,
        1 => -rng.gen_range(0..=period.min(5_000)),
        2 => rng.gen_range(0..=period * 3),
        _ => rng.gen_range(0..=(period / 4).max(1)),
    }
}

/// Drives one random sequence through Redis (explicit clock) and the model side by side, each
/// check sent through `limiters[step % limiters.len()]` (instances of one fleet, which may
/// write buckets in different layouts); returns the first disagreement.
async fn differential_sequence(
    limiters: &[Limiter],
    seed: u64,
    algorithms: &[Algorithm],
) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let t = format!("diff-{seed}");
    let specs: Vec<LimitSpec> = algorithms
        .iter()
        .map(|a| random_spec(&mut rng, *a))
        .collect();
    let shadows: Vec<bool> = specs
        .iter()
        .map(|_| algorithms.len() > 1 && rng.gen_bool(0.25))
        .collect();
    let mut states: Vec<Option<State>> = vec![None; specs.len()];
    let mut now = T0 + rng.gen_range(0..1_000_000_000);
    for step in 0..25 {
        now += random_step(&mut rng, specs[0].period_ms);
        let costs: Vec<u64> = specs
            .iter()
            .map(|s| {
                if rng.gen_bool(0.05) {
                    s.capacity() + 1
                } else {
                    rng.gen_range(1..=s.capacity().min(8))
                }
            })
            .collect();
        let rules: Vec<RuleCheck> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| RuleCheck {
                key: keys::bucket(&t, &format!("r{i}"), None),
                spec: *s,
                cost: costs[i],
                shadow: shadows[i],
            })
            .collect();
        let lua = limiters[step % limiters.len()]
            .check(&request(&t, rules, Some(now)))
            .await
            .map_err(|e| e.to_string())?;
        let inputs: Vec<RuleInput<'_>> = specs
            .iter()
            .zip(&costs)
            .zip(&shadows)
            .map(|((s, c), sh)| RuleInput {
                spec: s,
                cost: *c,
                shadow: *sh,
            })
            .collect();
        let refs: Vec<Option<&State>> = states.iter().map(Option::as_ref).collect();
        let rust = model::check_all(&inputs, &refs, now);
        if lua.allowed != rust.allowed || lua.decisions != rust.decisions {
            return Err(format!(
                "seed {seed}, step {step}, now {now}, specs {specs:?}, costs {costs:?}, shadows {shadows:?}, \
                 states before {states:?}\n  lua:   {:?} {:?}\n  model: {:?} {:?}",
                lua.allowed, lua.decisions, rust.allowed, rust.decisions
            ));
        }
        for (state, write) in states.iter_mut().zip(rust.writes) {
            if let Some((new, _ttl)) = write {
                *state = Some(new);
            }
        }
    }
    Ok(())
}

/// Runs [`differential_sequence`] for every seed, against one private Redis, through one
/// instance per layout in `layouts`, taken in turn.
async fn run_differential(
    seeds: std::ops::Range<u64>,
    layouts: &[BucketLayout],
    pick: impl Fn(u64) -> Vec<Algorithm>,
) {
    let server = RedisServer::start();
    let mut limiters = Vec::new();
    for layout in layouts {
        limiters.push(instance(&server, 4, *layout).await);
    }
    let mut failures = Vec::new();
    let seeds: Vec<u64> = seeds.collect();
    for chunk in seeds.chunks(64) {
        let results = join_all(chunk.iter().map(|&seed| {
            let algorithms = pick(seed);
            let limiters = &limiters;
            async move { differential_sequence(limiters, seed, &algorithms).await }
        }))
        .await;
        failures.extend(results.into_iter().filter_map(Result::err));
    }
    assert!(
        failures.is_empty(),
        "{} sequences disagree; first:\n{}",
        failures.len(),
        failures[0]
    );
}

#[tokio::test]
async fn lua_and_the_model_agree_on_1000_random_sequences_per_algorithm() {
    for (i, algorithm) in Algorithm::ALL.into_iter().enumerate() {
        let base = i as u64 * 10_000;
        run_differential(base..base + 1000, &[BucketLayout::Packed], |_| {
            vec![algorithm]
        })
        .await;
    }
}

/// The instances of a fleet may write buckets in either layout (`--redis-bucket-layout`), and
/// each reads both: sequences sent through a `hash` instance alone, and through a `hash` and a
/// `packed` instance in turn (every bucket changing layout at every step), answer as the
/// model does.
#[tokio::test]
async fn lua_and_the_model_agree_whichever_layout_each_instance_writes() {
    for (i, algorithm) in Algorithm::ALL.into_iter().enumerate() {
        let base = 200_000 + i as u64 * 10_000;
        run_differential(base..base + 200, &[BucketLayout::Hash], |_| vec![algorithm]).await;
        let both = [BucketLayout::Hash, BucketLayout::Packed];
        run_differential(base + 5_000..base + 5_300, &both, |_| vec![algorithm]).await;
    }
}

/// A packed bucket holds exactly its numbers: a string of another length under a bucket's key
/// (24 bytes where a token bucket keeps two doubles) fails its check with an error that says
/// so, in either layout, and is left as it was, rather than read in part.
#[tokio::test]
async fn a_packed_bucket_of_another_length_fails_its_check_and_is_left_alone() {
    let server = RedisServer::start();
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::TokenBucket, 10, 60_000);
    let req = request(&t, vec![rule(&t, "r", spec, 1)], Some(T0));
    let key = req.rules[0].key.clone();
    let foreign = "0123456789abcdefghijklmn";
    server.cli(&["SET", &key, foreign]);
    for layout in [BucketLayout::Packed, BucketLayout::Hash] {
        let limiter = instance(&server, 1, layout).await;
        let error = limiter.check(&req).await.unwrap_err().to_string();
        assert!(
            error.contains("holds 24 bytes, not the 16 of its 2 numbers"),
            "{layout:?}: {error}"
        );
        assert_eq!(server.cli(&["GET", &key]).trim(), foreign, "{layout:?}");
    }
}

/// A settle reads every bucket its reservation charged before it writes any: when the second
/// cannot be read (a list where its bucket was), the settle fails and the first keeps its
/// state, and once the second is mended a settle refunds each bucket once. Before, the first
/// was refunded by the failed settle and again by the next.
#[tokio::test]
async fn a_settle_that_cannot_read_one_of_its_buckets_writes_none() {
    let server = RedisServer::start();
    // A day's period, so that nothing refills between the calls.
    let spec = LimitSpec::new(Algorithm::TokenBucket, 100, 86_400_000);
    for layout in [BucketLayout::Packed, BucketLayout::Hash] {
        let limiter = instance(&server, 1, layout).await;
        let t = tenant();
        let id = reservation_id(1);
        let reserve = CheckRequest {
            reserve: Some(Reserve {
                id: id.clone(),
                ttl_ms: 60_000,
            }),
            ..request(
                &t,
                vec![rule(&t, "first", spec, 10), rule(&t, "second", spec, 10)],
                Some(T0),
            )
        };
        let (first, second) = (reserve.rules[0].key.clone(), reserve.rules[1].key.clone());
        // The first bucket is also charged 50 by a check, so a refund shows below its burst.
        let check = request(&t, vec![rule(&t, "first", spec, 50)], Some(T0));
        assert!(limiter.check(&check).await.unwrap().allowed, "{layout:?}");
        assert!(limiter.check(&reserve).await.unwrap().allowed, "{layout:?}");
        let dump = |key: &str| server.cli(&["DUMP", key]);
        let before = dump(&first);
        server.cli(&["DEL", &second]);
        server.cli(&["RPUSH", &second, "not a bucket"]);

        let failed = limiter.settle(&t, &id, 0, Some(T0), false).await;
        assert!(failed.is_err(), "{layout:?}: {failed:?}");
        assert_eq!(
            dump(&first),
            before,
            "{layout:?}: the first bucket was written"
        );

        server.cli(&["DEL", &second]);
        let settled = limiter.settle(&t, &id, 0, Some(T0), false).await.unwrap();
        assert!(
            matches!(
                settled,
                Settlement::Settled {
                    repeated: false,
                    ..
                }
            ),
            "{layout:?}: {settled:?}"
        );
        let dry = CheckRequest {
            dry_run: true,
            ..request(&t, vec![rule(&t, "first", spec, 1)], Some(T0))
        };
        let remaining = limiter.check(&dry).await.unwrap().decisions[0].remaining;
        assert!(
            (remaining - 49.0).abs() < 1e-9,
            "{layout:?}: 100 less the check's 50, the reservation's 10 given back once and the \
             dry run's 1 leave 49, not {remaining}"
        );
    }
}

/// The `hash` layout is what builds before packed buckets read and write: for each of the
/// five algorithms, a hash of exactly the fields they read (`HMGET`), each a decimal number,
/// written with `HSET` and `PEXPIRE`, and no `SET`.
#[tokio::test]
async fn hash_buckets_keep_the_fields_and_commands_of_earlier_builds() {
    let server = RedisServer::start();
    let limiter = instance(&server, 1, BucketLayout::Hash).await;
    let t = tenant();
    let cases = [
        (Algorithm::TokenBucket, "tb", vec!["t", "v"]),
        (Algorithm::Gcra, "gcra", vec!["t", "v"]),
        (Algorithm::LeakyBucket, "lb", vec!["t", "v"]),
        (Algorithm::FixedWindow, "fw", vec!["t", "v", "w"]),
        (Algorithm::SlidingWindow, "sw", vec!["p", "t", "v", "w"]),
    ];
    // Loads the script, so that the counts below are the checks' alone.
    let warm = request(
        &t,
        vec![rule(
            &t,
            "warm",
            LimitSpec::new(Algorithm::TokenBucket, 10, 60_000),
            1,
        )],
        Some(T0),
    );
    limiter.check(&warm).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    for (algorithm, name, fields) in &cases {
        let req = request(
            &t,
            vec![rule(&t, name, LimitSpec::new(*algorithm, 10, 60_000), 1)],
            Some(T0),
        );
        assert!(limiter.check(&req).await.unwrap().allowed, "{name}");
        let key = &req.rules[0].key;
        assert_eq!(server.cli(&["TYPE", key]).trim(), "hash", "{name}");
        let mut names: Vec<String> = server
            .cli(&["HKEYS", key])
            .lines()
            .map(|l| l.trim().to_owned())
            .collect();
        names.sort();
        assert_eq!(names, *fields, "{name}");
        for field in fields {
            let value = server.cli(&["HGET", key, field]);
            assert!(
                value.trim().parse::<f64>().is_ok(),
                "{name}.{field} is a decimal number: {value:?}"
            );
        }
    }
    let checks = cases.len() as u64;
    assert_eq!(server.command_stats("evalsha").0, checks, "a call a check");
    // A bucket and the call's record a check.
    assert_eq!(
        server.command_stats("hset").0,
        2 * checks,
        "HSET a bucket and a record"
    );
    assert_eq!(server.command_stats("set").0, 0, "no packed bucket");
    // And the HyperLogLog of a minute that began after the first check, with its PEXPIRE.
    let minutes = server.keys(&format!("slk:{{{t}}}:*")).len() as u64;
    assert_eq!(
        server.command_stats("pexpire").0,
        2 * checks + (minutes - 1),
        "PEXPIRE a bucket and a record"
    );
}

/// A bucket is stored in the layout of the instance that wrote it last, and keeps its count
/// and its TTL across a change: a `hash` instance writes a hash, a `packed` one a string.
#[tokio::test]
async fn a_bucket_takes_the_layout_of_its_last_writer_and_keeps_its_count() {
    let server = RedisServer::start();
    let hash = instance(&server, 1, BucketLayout::Hash).await;
    let packed = instance(&server, 1, BucketLayout::Packed).await;
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::FixedWindow, 10, crate::helpers::DAY_MS);
    let req = request(&t, vec![rule(&t, "r", spec, 1)], Some(T0));
    let key = req.rules[0].key.clone();
    let window = (T0 / crate::helpers::DAY_MS as i64) as f64;
    for (count, limiter, kind) in [
        (1.0, &hash, "hash"),
        (2.0, &packed, "string"),
        (3.0, &packed, "string"),
        (4.0, &hash, "hash"),
        (5.0, &packed, "string"),
    ] {
        let outcome = limiter.check(&req).await.unwrap();
        assert!(outcome.allowed);
        assert_eq!(outcome.decisions[0].remaining, 10.0 - count);
        assert_eq!(
            server.bucket_state(&key, &["v", "w", "t"]),
            (kind.to_owned(), vec![count, window, T0 as f64]),
            "after check {count}"
        );
        let ttl: i64 = server.cli(&["PTTL", &key]).trim().parse().unwrap();
        assert!(ttl > 0, "the bucket keeps a TTL after check {count}: {ttl}");
    }
}

#[tokio::test]
async fn lua_and_the_model_agree_on_multi_rule_sequences_with_shadows() {
    run_differential(100_000..100_500, &[BucketLayout::Packed], |seed| {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xA5A5);
        (0..rng.gen_range(2..=4))
            .map(|_| Algorithm::ALL[rng.gen_range(0..Algorithm::ALL.len())])
            .collect()
    })
    .await;
}

#[tokio::test]
async fn checks_survive_script_flush_and_a_redis_restart() {
    let mut server = RedisServer::start();
    let limiter = Limiter::connect(&LimiterTarget::Redis(server.url()), options(2))
        .await
        .unwrap();
    let t = tenant();
    let req = request(
        &t,
        vec![rule(
            &t,
            "r",
            LimitSpec::new(Algorithm::TokenBucket, 1000, 1000),
            1,
        )],
        None,
    );
    assert!(limiter.check(&req).await.unwrap().allowed);
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    for _ in 0..4 {
        // Every pooled connection meets the flushed cache at least once.
        assert!(limiter.check(&req).await.unwrap().allowed);
    }
    let sha = sluice::limiter::check_script_sha();
    assert_eq!(
        server.cli(&["SCRIPT", "EXISTS", sha]).trim(),
        "1",
        "EVAL reloaded the script"
    );

    server.restart();
    for _ in 0..4 {
        let out = limiter.check(&req).await;
        assert!(
            out.as_ref().is_ok_and(|o| o.allowed),
            "after a restart: {out:?}"
        );
    }
}

#[tokio::test]
async fn checks_survive_script_flush_on_every_cluster_node() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let limiter = Limiter::connect(&LimiterTarget::Cluster(cluster.urls()), options(2))
        .await
        .unwrap();
    let tenants: Vec<String> = (0..30).map(|_| tenant()).collect();
    let req = |t: &String| {
        request(
            t,
            vec![rule(t, "r", LimitSpec::new(Algorithm::Gcra, 1000, 1000), 1)],
            None,
        )
    };
    for t in &tenants {
        assert!(limiter.check(&req(t)).await.unwrap().allowed);
    }
    for node in &cluster.nodes {
        assert_eq!(node.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    }
    for t in &tenants {
        assert!(limiter.check(&req(t)).await.unwrap().allowed);
    }
}

#[tokio::test]
async fn concurrent_checks_of_a_tenant_share_calls_stay_exact_and_fail_alone() {
    let server = RedisServer::start();
    let limiter = Limiter::connect(&LimiterTarget::Redis(server.url()), options(1))
        .await
        .unwrap();
    let t = tenant();
    // A day's window: no edge can fall between the checks.
    let spec = LimitSpec::new(Algorithm::TokenBucket, 50, 86_400_000);
    let subjects: Vec<CheckRequest> = (0..400)
        .map(|i| {
            let mut r = rule(&t, "r", spec, 1);
            // Half the checks on one shared bucket, half on a bucket each.
            if i % 2 == 1 {
                r.key = keys::bucket(&t, "r", Some(&format!("s{i}")));
            }
            request(&t, vec![r], None)
        })
        .collect();
    // A bucket of another type (a list): its check fails, the ones batched with it do not.
    let broken = request(&t, vec![rule(&t, "broken", spec, 1)], None);
    server.cli(&["RPUSH", &broken.rules[0].key, "not a bucket"]);
    let before = server.command_stats("evalsha").0;
    let pfadds_before = server.command_stats("pfadd").0;
    let limiter = Arc::new(limiter);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, req) in subjects.into_iter().enumerate() {
        let one = limiter.clone();
        tasks.spawn(async move { (i, one.check(&req).await) });
        if i == 200 {
            let (limiter, broken) = (limiter.clone(), broken.clone());
            tasks.spawn(async move { (usize::MAX, limiter.check(&broken).await) });
        }
    }
    let (mut shared, mut own, mut failed) = (0, 0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined.unwrap() {
            (usize::MAX, out) => {
                assert!(out.is_err(), "the broken bucket's check fails: {out:?}");
                failed += 1;
            }
            (i, out) => {
                let out = out.unwrap();
                if i % 2 == 0 && out.allowed {
                    shared += 1;
                } else if out.allowed {
                    own += 1;
                }
            }
        }
    }
    assert_eq!(shared, 50, "exactly the limit on the shared bucket");
    assert_eq!(own, 200, "every bucket of its own admits its check");
    assert_eq!(failed, 1);
    let calls = server.command_stats("evalsha").0 - before;
    assert!(
        calls < 401,
        "401 checks in {calls} calls: concurrent checks of a tenant are batched"
    );
    assert!(calls >= 401 / 64, "at most 64 checks a call: {calls}");
    // A batch adds its checks' buckets to the active-key HyperLogLog in one PFADD, not one a
    // check, and none is lost: 201 buckets (the shared one and 200 of their own; the broken
    // check marks nothing), within the HyperLogLog's error.
    let pfadds = server.command_stats("pfadd").0 - pfadds_before;
    assert!(
        pfadds <= calls,
        "{pfadds} PFADDs for {calls} calls: one a batch at most"
    );
    let minutes = server.cli(&["KEYS", &format!("slk:{{{t}}}:*")]);
    let mut count = vec!["PFCOUNT"];
    count.extend(minutes.lines().map(str::trim));
    let active: f64 = server.cli(&count).trim().parse().unwrap();
    assert!((197.0..=205.0).contains(&active), "{active} active keys");
}

/// A tenant with a quota counts its reservations' and leases' records in its live-key index,
/// each scored with the time it ends. A settle keeps its record only `SETTLED_TTL` more and
/// a release its lease's record (`lua/settle.lua`, `lua/release.lua`): each entry must move
/// with it, or the quota would count the record long after it is gone, until its old end. A
/// bucket an overrun creates again enters the index as a check's would.
#[tokio::test]
async fn a_settle_and_a_release_move_their_records_in_the_quota_index_to_their_new_ends() {
    let server = RedisServer::start();
    let limiter = Limiter::connect(&LimiterTarget::Redis(server.url()), options(2))
        .await
        .unwrap();
    let t = tenant();
    let index = keys::live_index(&t);
    let score = |member: &str| -> Option<i64> {
        let text = server.cli(&["ZSCORE", &index, member]);
        text.trim().parse().ok()
    };
    let kept = SETTLED_TTL.as_millis() as i64;

    // A reservation kept an hour: its record enters the index an hour on.
    let id = reservation_id(41);
    let spec = LimitSpec::new(Algorithm::TokenBucket, 100, 60_000);
    let reserve = CheckRequest {
        reserve: Some(Reserve {
            id: id.clone(),
            ttl_ms: 3_600_000,
        }),
        max_live_keys: Some(100),
        ..request(&t, vec![rule(&t, "r", spec, 10)], Some(T0))
    };
    assert!(limiter.check(&reserve).await.unwrap().allowed);
    let record = keys::reservation(&t, &id);
    let bucket = rule(&t, "r", spec, 1).key;
    assert_eq!(score(&record), Some(T0 + 3_600_000));
    // Its bucket ends, entry and all, as a prune would leave it; then the reservation is
    // settled at 30 where it charged 10. The overrun creates the bucket again, with 80
    // tokens, and its TTL covers a full refill (100 tokens at 100 a minute) and the second of
    // margin: 61 s. The record is kept ten minutes from the settle.
    server.cli(&["DEL", &bucket]);
    server.cli(&["ZREM", &index, &bucket]);
    let settled = limiter
        .settle(&t, &id, 30, Some(T0 + 10), true)
        .await
        .unwrap();
    assert!(
        matches!(settled, Settlement::Settled { cost: 30, .. }),
        "{settled:?}"
    );
    assert_eq!(
        score(&bucket),
        Some(T0 + 10 + 61_000),
        "the bucket the overrun made"
    );
    assert_eq!(score(&record), Some(T0 + 10 + kept), "the settled record");

    // A lease of an hour-long concurrency rule: its record ends with its lease (and a
    // second's margin); released, it is kept ten minutes from the release, by Redis's clock.
    let lease = reservation_id(42);
    let hourly = LimitSpec::new(Algorithm::Concurrency, 5, 3_600_000);
    let acquired = CheckRequest {
        max_live_keys: Some(100),
        ..acquire(&t, hourly, T0, &lease)
    };
    assert!(limiter.check(&acquired).await.unwrap().allowed);
    let held = keys::lease(&t, &lease);
    assert_eq!(score(&held), Some(T0 + 3_601_000));
    let before = sluice::store::now_ms();
    assert_eq!(
        limiter.release(&t, &lease, Some(T0), true).await.unwrap(),
        Released::Now
    );
    let after = sluice::store::now_ms();
    let moved = score(&held).expect("the released lease's record is still indexed");
    assert!(
        (before + kept..=after + kept).contains(&moved),
        "released between {before} and {after}, kept {kept} ms: scored {moved}"
    );
}

/// A check of a concurrency rule without an id of its own takes a lease whose id is drawn at
/// random (`CheckRequest::lease_id`): drawn once, for the lease record's key and for the
/// member the bucket holds alike, or `/v1/release` with the record's id would free nothing.
#[tokio::test]
async fn a_lease_drawn_at_random_names_its_record_and_its_bucket_member_alike() {
    let server = RedisServer::start();
    let limiter = Limiter::connect(&LimiterTarget::Redis(server.url()), options(2))
        .await
        .unwrap();
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::Concurrency, 1, 3_600_000);
    let check = request(&t, vec![rule(&t, "in-flight", spec, 1)], Some(T0));
    assert!(check.lease.is_none());
    assert!(limiter.check(&check).await.unwrap().allowed);
    let records = server.cli(&["KEYS", &format!("slc:{{{t}}}:*")]);
    let records: Vec<&str> = records.lines().map(str::trim).collect();
    assert_eq!(records.len(), 1, "one lease record: {records:?}");
    let id = records[0].rsplit(':').next().unwrap().to_owned();
    let bucket = rule(&t, "in-flight", spec, 1).key;
    let member = server.cli(&["ZRANGE", &bucket, "0", "-1"]);
    assert!(
        member.trim().starts_with(&format!("{id}:")),
        "the bucket holds {member:?}, the record is {id}"
    );
    // Released by the record's id, the one slot is free again.
    assert_eq!(
        limiter.release(&t, &id, None, false).await.unwrap(),
        Released::Now
    );
    assert!(limiter.check(&check).await.unwrap().allowed);
}

#[tokio::test]
async fn a_batch_reads_the_quota_index_once_and_prunes_it_until_nothing_is_due() {
    // The checks of a batch share what the first learnt of the live-bucket index (its size,
    // and whether anything is still due), so that each new bucket costs one ZADD. A prune
    // that stopped at its 100 entries leaves some due: the next check must prune again.
    let server = RedisServer::start();
    let limiter = Arc::new(
        Limiter::connect(&LimiterTarget::Redis(server.url()), options(1))
            .await
            .unwrap(),
    );
    let t = tenant();
    // 450 buckets under a quota of 450, each living about 3 s.
    let old: Vec<CheckRequest> = (0..450)
        .map(|i| subject_check(&t, &format!("old{i}"), 450))
        .collect();
    for out in join_all(old.iter().map(|req| limiter.check(req))).await {
        assert!(out.unwrap().allowed);
    }
    let index = keys::live_index(&t);
    assert_eq!(server.cli(&["ZCARD", &index]).trim(), "450");
    let mut exists = vec!["EXISTS"];
    exists.extend(old.iter().map(|req| req.rules[0].key.as_str()));
    crate::helpers::time_until(
        async || server.cli(&exists).trim() == "0",
        Duration::from_secs(10),
    )
    .await;
    // All 450 entries are due now; 64 new subjects under a quota of 150. In turn, each check
    // prunes at most 100: the first three still find 350, 250 and 150 live and are refused,
    // the fourth finds 50, the fifth prunes the last 50, and every later one is admitted.
    // Every due bucket has ended, so each prune learns it from one EXISTS: no PTTL a key.
    let before = server.command_stats("evalsha").0;
    let pttl_before = server.command_stats("pttl").0;
    let new: Vec<CheckRequest> = (0..64)
        .map(|i| subject_check(&t, &format!("new{i}"), 150))
        .collect();
    let mut refused_at = Vec::new();
    let mut admitted = 0;
    for out in join_all(new.iter().map(|req| limiter.check(req))).await {
        match out {
            Ok(out) => {
                assert!(out.allowed);
                admitted += 1;
            }
            Err(e) => refused_at.push(over_quota(Err(e)).0),
        }
    }
    refused_at.sort_unstable();
    assert_eq!(refused_at, vec![150, 250, 350]);
    assert_eq!(admitted, 61);
    assert_eq!(
        server.cli(&["ZCARD", &index]).trim(),
        "61",
        "every due entry pruned, every new bucket indexed once"
    );
    // Batched: checks after a prune that stopped short shared a call with it.
    let calls = server.command_stats("evalsha").0 - before;
    assert!(calls < 64, "64 checks in {calls} calls");
    assert_eq!(
        server.command_stats("pttl").0 - pttl_before,
        0,
        "450 ended entries pruned without a PTTL each"
    );
}

/// A batch's last two arguments, packed in MessagePack as `lua/check.lua`'s header lays them
/// out: how many keys each of `checks` checks has (4), and their arguments, each one
/// token-bucket rule (5 a `period_ms`, cost 1) without a record of its own, under a quota of
/// `quota` live keys (-1 for none), its bucket already marked active.
fn packed_token_bucket_checks(checks: usize, period_ms: u64, quota: i64) -> (Vec<u8>, Vec<u8>) {
    packed_token_bucket_checks_keeping(checks, period_ms, quota, 0)
}

/// [`packed_token_bucket_checks`], each check asking for a record of its own kept
/// `record_ttl_ms` (its `ARGV[2]`; 0 for none) while its `ARGV[4+7n]` says `0`.
fn packed_token_bucket_checks_keeping(
    checks: usize,
    period_ms: u64,
    quota: i64,
    record_ttl_ms: i64,
) -> (Vec<u8>, Vec<u8>) {
    use sluice::limiter::packed_args::{array, int, str, uint};
    let (mut counts, mut args) = (Vec::new(), Vec::new());
    array(&mut counts, checks);
    array(&mut args, checks);
    for _ in 0..checks {
        uint(&mut counts, 4);
        array(&mut args, 13);
        str(&mut args, b"");
        int(&mut args, record_ttl_ms);
        uint(&mut args, 1);
        for v in [1, 5, period_ms, 5, 1] {
            uint(&mut args, v);
        }
        for word in ["0", "0", "0"] {
            str(&mut args, word.as_bytes());
        }
        int(&mut args, quota);
        str(&mut args, b"0");
    }
    (counts, args)
}

/// One script call of `subjects`' token-bucket checks (a batch, as `lua/check.lua`'s header
/// lays it out) under a quota of `quota` live keys: each check's first two reply items
/// (0 or 2 for over the quota, and its allowed flag or the live count).
async fn batch_of_new_buckets(
    connection: &mut redis::aio::MultiplexedConnection,
    subjects: &[&str],
    quota: i64,
) -> Vec<(i64, i64)> {
    let script = redis::Script::new(include_str!("../../../lua/check.lua"));
    let mut call = script.prepare_invoke();
    call.key("slq:{q}:1:1000");
    for subject in subjects {
        call.key(format!("sl:{{q}}:r:{subject}"))
            .key("slq:{q}:own")
            .key("slk:{q}:1")
            .key("slb:{q}");
    }
    let (counts, checks) = packed_token_bucket_checks(subjects.len(), 60_000, quota);
    call.arg("batch")
        .arg(uuid::Uuid::new_v4().simple().to_string())
        .arg(1000)
        .arg(counts)
        .arg(checks);
    let packed: Vec<u8> = call.invoke_async(connection).await.unwrap();
    sluice::limiter::batch_reply::decode(&packed)
        .unwrap()
        .into_iter()
        .map(|reply| match reply {
            redis::Value::Array(items) => match (&items[0], &items[2]) {
                (redis::Value::Int(kind), redis::Value::Int(flag)) => (*kind, *flag),
                other => panic!("not a check's reply: {other:?}"),
            },
            other => panic!("not a check's reply: {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn the_buckets_a_batch_creates_enter_the_quota_index_in_one_zadd_and_the_count_stays_exact() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    // Five new buckets in one call: one ZADD for all of them, and the index holds each.
    server.cli(&["CONFIG", "RESETSTAT"]);
    let replies = batch_of_new_buckets(&mut connection, &["a", "b", "c", "d", "e"], 100).await;
    assert_eq!(replies, vec![(0, 1); 5], "all five admitted");
    assert_eq!(
        server.command_stats("zadd").0,
        1,
        "one ZADD for five buckets"
    );
    assert_eq!(server.cli(&["ZCARD", "slb:{q}"]).trim(), "5");
    // Two entries whose buckets are gone but which are not due yet (as a bucket deleted by
    // hand leaves, or evicted under memory pressure): "a" is created again and counted new
    // while its entry waits; "f" would then pass a quota of 6, so the call adds what waits
    // first, learns "a" was already indexed, and admits "f" exactly as separate calls would.
    server.cli(&["DEL", "sl:{q}:r:a", "sl:{q}:r:b"]);
    let replies = batch_of_new_buckets(&mut connection, &["a", "f", "g"], 6).await;
    assert_eq!(
        replies,
        vec![(0, 1), (0, 1), (2, 6)],
        "a and f fit in 6 live keys; g finds 6 and is refused"
    );
    let mut indexed: Vec<String> = server
        .cli(&["ZRANGE", "slb:{q}", "0", "-1"])
        .lines()
        .map(|member| member.trim().to_owned())
        .collect();
    indexed.sort();
    let expected: Vec<String> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|s| format!("sl:{{q}}:r:{s}"))
        .collect();
    assert_eq!(indexed, expected, "each bucket indexed once, g not at all");
}

#[tokio::test]
async fn a_bucket_that_outlived_its_index_entry_is_rescored_and_still_counted() {
    // The index scores a bucket by the expiry it was created with; written again, the bucket
    // lives on past that. A prune that finds it due and alive moves it, and it still counts.
    let server = RedisServer::start();
    let limiter = Limiter::connect(&LimiterTarget::Redis(server.url()), options(1))
        .await
        .unwrap();
    let t = tenant();
    let kept = subject_check(&t, "kept", 2);
    let lapsed = subject_check(&t, "lapsed", 2);
    assert!(limiter.check(&kept).await.unwrap().allowed);
    assert!(limiter.check(&lapsed).await.unwrap().allowed);
    let index = keys::live_index(&t);
    let kept_key = kept.rules[0].key.as_str();
    let scored: f64 = server
        .cli(&["ZSCORE", &index, kept_key])
        .trim()
        .parse()
        .unwrap();
    // Until the lapsed bucket (about 3 s) has gone, the kept one is checked every 300 ms,
    // which pushes its expiry 3 s past each check (and spends 1.5 of its 5 tokens a second).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while server.cli(&["EXISTS", &lapsed.rules[0].key]).trim() != "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "the lapsed bucket never expired"
        );
        assert!(limiter.check(&kept).await.unwrap().allowed);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The kept bucket's entry is due (its first expiry passed) but the bucket lives: a new
    // subject prunes the lapsed one, moves the kept one, and takes the second place.
    assert!(
        limiter
            .check(&subject_check(&t, "new", 2))
            .await
            .unwrap()
            .allowed
    );
    let moved = server.cli(&["ZSCORE", &index, kept_key]);
    let moved: f64 = moved
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the kept bucket left the index: ZSCORE {moved:?}"));
    assert!(moved > scored, "re-scored from {scored} to {moved}");
    let (live, quota, _) = over_quota(limiter.check(&subject_check(&t, "one more", 2)).await);
    assert_eq!((live, quota), (2, 2), "the kept bucket still counts");
}

/// A connection to `server` and `lua/check.lua`, for tests that call the script themselves.
async fn check_script_on(
    server: &RedisServer,
) -> (redis::aio::MultiplexedConnection, redis::Script) {
    let client = redis::Client::open(server.url()).unwrap();
    let connection = client.get_multiplexed_async_connection().await.unwrap();
    (
        connection,
        redis::Script::new(include_str!("../../../lua/check.lua")),
    )
}

#[tokio::test]
async fn a_call_record_written_as_json_by_an_earlier_script_still_answers_a_resend() {
    // Records are MessagePack now; one written as JSON before an upgrade, minutes earlier at
    // most, must still return its first decision rather than fail or decide again.
    let server = RedisServer::start();
    let (mut connection, script) = check_script_on(&server).await;
    let record = "slq:{t}:1";
    let first = r#"[[0,1800000000000,1,1,"4",500,0]]"#;
    server.cli(&["HSET", record, "f1", first]);
    // A batch of one token-bucket check (the layout is in the script's header).
    let batch = |field: &'static str| {
        let mut call = script.prepare_invoke();
        call.key(record)
            .key("sl:{t}:r")
            .key("slq:{t}:own")
            .key("slk:{t}:1")
            .key("slb:{t}")
            .arg("resend")
            .arg(field)
            .arg(1000);
        let (counts, checks) = packed_token_bucket_checks(1, 1000, -1);
        call.arg(counts).arg(checks);
        call
    };
    type Reply = Vec<(i64, i64, i64, i64, String, i64, i64)>;
    // A batch answers one MessagePack string, the list of its checks' replies.
    let read = |packed: Vec<u8>| -> Reply {
        let replies = sluice::limiter::batch_reply::decode(&packed).unwrap();
        redis::from_redis_value(&redis::Value::Array(replies)).unwrap()
    };
    let resent = read(batch("f1").invoke_async(&mut connection).await.unwrap());
    assert_eq!(
        resent,
        vec![(1, 1_800_000_000_000, 1, 1, "4".to_owned(), 500, 0)]
    );
    assert!(
        server.cli(&["EXISTS", "sl:{t}:r"]).trim() == "0",
        "nothing decided again"
    );
    // A new call decides and writes its record in the new form, which a resend reads back.
    let decided = read(batch("f2").invoke_async(&mut connection).await.unwrap());
    assert_eq!(
        (decided[0].0, decided[0].2, decided[0].4.as_str()),
        (0, 1, "4")
    );
    let again = read(batch("f2").invoke_async(&mut connection).await.unwrap());
    let mut first_answer = decided[0].clone();
    first_answer.0 = 1;
    assert_eq!(again, vec![first_answer]);
    assert_ne!(
        server.cli(&["HGET", record, "f2"]).chars().next(),
        Some('[')
    );
}

#[tokio::test]
async fn the_script_takes_only_batches_and_a_checks_own_record_only_for_a_request_id() {
    // The server sends every check in a batch, so a call laid out as one check alone (the
    // layout the script took before batches) is refused whole, and decides nothing.
    let server = RedisServer::start();
    let (mut connection, script) = check_script_on(&server).await;
    let mut alone = script.prepare_invoke();
    alone
        .key("sl:{t}:r")
        .key("slq:{t}:own")
        .key("slk:{t}:1")
        .key("slb:{t}");
    for arg in [
        "", "0", "1", "1", "5", "1000", "5", "1", "0", "0", "0", "-1", "0",
    ] {
        alone.arg(arg);
    }
    let refused: redis::RedisResult<redis::Value> = alone.invoke_async(&mut connection).await;
    let message = refused.expect_err("a check alone was decided").to_string();
    assert!(message.contains("takes a batch"), "{message}");
    assert_eq!(server.cli(&["EXISTS", "sl:{t}:r"]).trim(), "0");

    // In a batch, a check that asks for a record of its own (ARGV[2] > 0) must say it is a
    // request_id's: the only record of its own a check keeps. Otherwise that check fails
    // (reply 3 and the error) and writes nothing.
    let (counts, args) = packed_token_bucket_checks_keeping(1, 1000, -1, 5000);
    let mut batch = script.prepare_invoke();
    batch
        .key("slq:{t}:1:1000")
        .key("sl:{t}:r")
        .key("slr:{t}:own")
        .key("slk:{t}:1")
        .key("slb:{t}")
        .arg("batch")
        .arg("f1")
        .arg(1000)
        .arg(counts)
        .arg(args);
    let packed: Vec<u8> = batch.invoke_async(&mut connection).await.unwrap();
    let replies = sluice::limiter::batch_reply::decode(&packed).unwrap();
    let failed: (i64, String) = redis::from_redis_value(&replies[0]).unwrap();
    assert_eq!(failed.0, 3, "{failed:?}");
    assert!(failed.1.contains("request_id"), "{failed:?}");
    assert_eq!(
        server.cli(&["EXISTS", "sl:{t}:r", "slr:{t}:own"]).trim(),
        "0"
    );
}

#[tokio::test]
async fn a_request_ids_record_stays_json_for_instances_of_an_earlier_version() {
    // A retry with the same request_id may reach any instance; during a rolling upgrade, one
    // whose script decodes records with cjson only. Its record must stay JSON, and a retry
    // here must still get the first answer from it.
    let server = RedisServer::start();
    let limiter = Limiter::connect(&LimiterTarget::Redis(server.url()), options(1))
        .await
        .unwrap();
    let t = tenant();
    let spec = LimitSpec::new(Algorithm::TokenBucket, 100, 60_000);
    let mut req = request(&t, vec![rule(&t, "idem", spec, 3)], None);
    req.request_id = Some("order-7".into());
    let first = limiter.check(&req).await.unwrap();
    assert!(first.allowed && !first.deduplicated);
    let stored = server.cli(&["GET", &req.reply_key()]);
    let reply: serde_json::Value = serde_json::from_str(stored.trim())
        .unwrap_or_else(|e| panic!("the record is not JSON ({e}): {stored:?}"));
    assert_eq!(reply[2], 1, "the record holds the admission: {reply}");
    let again = limiter.check(&req).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.decisions, first.decisions);
}

#[tokio::test]
async fn a_steady_state_check_is_exactly_one_evalsha() {
    let server = RedisServer::start();
    let limiter = Limiter::connect(&LimiterTarget::Redis(server.url()), options(1))
        .await
        .unwrap();
    let t = tenant();
    let rules = vec![
        rule(
            &t,
            "a",
            LimitSpec::new(Algorithm::SlidingWindow, 1000, 1000),
            1,
        ),
        rule(
            &t,
            "b",
            LimitSpec::new(Algorithm::TokenBucket, 1000, 1000),
            1,
        ),
    ];
    let req = request(&t, rules, None);
    limiter.check(&req).await.unwrap();
    // MONITOR shows every command a client sends; commands a script runs are tagged "lua".
    let monitor = crate::services::Monitor::start(server.port);
    for _ in 0..10 {
        limiter.check(&req).await.unwrap();
    }
    let lines = monitor.until_now().join("\n");
    let from_clients: Vec<&str> = lines
        .lines()
        .filter(|l| l.contains(" [0 127.0.0.1:"))
        .collect();
    assert_eq!(from_clients.len(), 10, "{lines}");
    assert!(
        from_clients
            .iter()
            .all(|l| l.contains(r#""EVALSHA""#) || l.contains(r#""evalsha""#)),
        "{lines}"
    );
    assert!(
        lines.contains("[0 lua]"),
        "the script's own commands are visible too: {lines}"
    );
}

#[tokio::test]
async fn a_tenants_keys_share_one_slot_and_200_tenants_spread_over_all_masters() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let node = &cluster.nodes[0];
    let t = tenant();
    let tenant_keys = [
        keys::bucket(&t, "rule-1", None),
        keys::bucket(&t, "rule-2", Some("alice")),
        keys::bucket(&t, "rule-3", Some(&"long subject ".repeat(20))),
        keys::request(&t, "req-1"),
    ];
    let slots: Vec<String> = tenant_keys
        .iter()
        .map(|k| node.cli(&["CLUSTER", "KEYSLOT", k]).trim().to_owned())
        .collect();
    assert!(slots.iter().all(|s| *s == slots[0]), "{slots:?}");
    assert_eq!(
        slots[0],
        keys::slot(&tenant_keys[0]).to_string(),
        "our slot function agrees with Redis"
    );

    // Write one bucket for each of 200 tenants through the cluster limiter.
    let limiter = Limiter::connect(&LimiterTarget::Cluster(cluster.urls()), options(2))
        .await
        .unwrap();
    for _ in 0..200 {
        let t = tenant();
        // A day's window: a bucket expires with its window, and one that ended mid-test
        // would take its keys out of the count below.
        let req = request(
            &t,
            vec![rule(
                &t,
                "r",
                LimitSpec::new(Algorithm::FixedWindow, 10, crate::helpers::DAY_MS),
                1,
            )],
            None,
        );
        assert!(limiter.check(&req).await.unwrap().allowed);
    }
    let per_master: Vec<usize> = cluster
        .nodes
        .iter()
        .map(|n| {
            n.cli(&["EVAL", "return #redis.call('KEYS', 'sl:*')", "0"])
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(per_master.iter().sum::<usize>(), 200, "{per_master:?}");
    assert!(
        per_master.iter().all(|&n| n >= 30),
        "every master holds tenants: {per_master:?}"
    );
}

/// Reservations and settles on Redis (`lua/check.lua`, `lua/settle.lua`) and in process (the
/// model's `settle`) side by side, with the same explicit clock: random one- and two-rule
/// checks, some of them reservations, and random settles of those (refunds, overruns,
/// repeats, far too late). Every decision and every settlement must be identical.
#[tokio::test]
async fn lua_and_the_model_settle_alike_on_random_sequences() {
    let server = RedisServer::start();
    // Every third step goes through an instance that writes hashes, the others through one
    // that writes packed buckets: checks and settles read and write both layouts in turn.
    let mut instances = Vec::new();
    for layout in [BucketLayout::Packed, BucketLayout::Hash] {
        instances.push(instance(&server, 4, layout).await);
    }
    let mut failures = Vec::new();
    let mut settled = 0;
    for seed in 0..600u64 {
        let memory = Limiter::InProcess(MemoryBackend::new());
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x005E_771E);
        let t = format!("settle-{seed}");
        let first = Algorithm::ALL[seed as usize % Algorithm::ALL.len()];
        let mut specs = vec![random_spec(&mut rng, first)];
        if rng.gen_bool(0.3) {
            let other = Algorithm::ALL[rng.gen_range(0..Algorithm::ALL.len())];
            specs.push(random_spec(&mut rng, other));
        }
        let mut now = T0 + rng.gen_range(0..1_000_000_000);
        // Reservations made: id, when made and when settled. Redis keeps a record an hour
        // (ten minutes once settled) of real time, the in-process limiter that long on the
        // clock it is given, so later settles are not compared; and the clock only goes
        // forward, because the in-process limiter counts a key's expiry from the clock it
        // is given, not from the later time its state holds.
        let mut made: Vec<(String, i64, Option<i64>)> = Vec::new();
        for step in 0..30u64 {
            let redis = &instances[usize::from((seed + step) % 3 == 0)];
            now += random_step(&mut rng, specs[0].period_ms).max(0);
            if !made.is_empty() && rng.gen_bool(0.4) {
                let which = rng.gen_range(0..made.len());
                let (id, at, settled_at) = made[which].clone();
                if now - at >= 3_600_000 || settled_at.is_some_and(|s| now - s >= 600_000) {
                    continue;
                }
                let cost = rng.gen_range(0..=12);
                let on_redis = redis.settle(&t, &id, cost, Some(now), true).await;
                let in_process = memory.settle(&t, &id, cost, Some(now), true).await;
                match (&on_redis, &in_process) {
                    (Ok(a), Ok(b)) if a == b => settled += 1,
                    _ => failures.push(format!(
                        "seed {seed} step {step}: settle {id} at {cost}: redis {on_redis:?}, in process {in_process:?}"
                    )),
                }
                if settled_at.is_none() {
                    made[which].2 = Some(now);
                }
                continue;
            }
            let cost = rng.gen_range(1..=specs[0].capacity().min(8));
            let rules = specs
                .iter()
                .enumerate()
                .map(|(i, s)| rule(&t, &format!("r{i}"), *s, cost))
                .collect();
            let id = format!("{:032x}", seed * 1_000 + step);
            let check = CheckRequest {
                reserve: rng.gen_bool(0.6).then(|| Reserve {
                    id: id.clone(),
                    ttl_ms: 3_600_000,
                }),
                ..request(&t, rules, Some(now))
            };
            let on_redis = redis.check(&check).await.unwrap();
            let in_process = memory.check(&check).await.unwrap();
            if on_redis.allowed != in_process.allowed || on_redis.decisions != in_process.decisions
            {
                failures.push(format!(
                    "seed {seed} step {step} at {now}: {specs:?} cost {cost}\n  redis:      {on_redis:?}\n  in process: {in_process:?}"
                ));
                break;
            }
            if on_redis.allowed && check.reserve.is_some() {
                made.push((id, now, None));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreements; first:\n{}",
        failures.len(),
        failures[0]
    );
    assert!(settled > 1_000, "only {settled} settles compared");
}
