//! Prometheus metrics. Every label is bounded: route templates, status codes, the nine HTTP
//! methods (`other` for the rest), cache names, Redis nodes, and at most
//! [`MAX_POLICY_LABELS`] rule names (`other` after that); never raw paths, subjects or keys.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use super::recorder::{Outcome, Recorder};

/// Every metric of one server instance, registered in its own registry (so tests that run
/// several instances in one process do not collide).
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    pub http_requests: IntCounterVec,
    pub http_duration: HistogramVec,
    /// Check decisions by deciding policy (rule name) and outcome.
    pub decisions: IntCounterVec,
    /// Shadow rules that would have denied, by policy.
    pub shadow_would_deny: IntCounterVec,
    /// Checks allowed because the limiter could not decide and the rule fails open.
    pub fail_open: IntCounterVec,
    /// Checks refused with 503 because the limiter could not decide and the rule fails closed.
    pub fail_closed: IntCounterVec,
    /// Whole `/v1/check` handling time.
    pub decision_seconds: Histogram,
    /// Time of the limiter call (one Redis round trip, or the in-process evaluation).
    pub limiter_seconds: Histogram,
    /// Key and tenant cache lookups by result (hit, miss, stale, absent).
    pub cache_lookups: IntCounterVec,
    /// The current second, for the fleet dashboards.
    pub live: Arc<Recorder>,
    /// Active keys of every tenant, as the dashboards last counted them.
    pub active_keys: IntGauge,
    /// 1 while the circuit breaker of a Redis node is open.
    redis_breaker_open: IntGaugeVec,
    /// Calls answered at once, without Redis, because a breaker was open.
    redis_breaker_refused: prometheus::IntCounter,
    /// Checks decided in process because the limiter could not decide (`local` rules).
    local_decisions: prometheus::IntCounter,
    cached_denials: prometheus::IntCounter,
    /// Loads of keys and tenants from the store (cache misses and refreshes, coalesced).
    cache_loads: IntCounterVec,
    /// Subscriptions to admin changes made (the first, and each after a lost one).
    change_subscriptions: prometheus::IntCounter,
    /// HTTP requests being served now.
    http_in_flight: IntGauge,
    /// The rule names that have a `policy` label of their own.
    policies: Arc<PolicyLabels>,
}

/// The most distinct rule names `/metrics` carries as `policy` labels; checks of any further
/// rule are counted under `other`. Rule names are chosen by tenants, so without a bound a
/// tenant creating and deleting rules would grow every scrape without end.
pub const MAX_POLICY_LABELS: usize = 1_000;

/// The `policy` label values handed out so far.
#[derive(Debug, Default)]
struct PolicyLabels(RwLock<HashSet<Box<str>>>);

impl PolicyLabels {
    /// `policy` itself while it has (or can get) a label of its own, `other` after that.
    fn label<'a>(&self, policy: &'a str) -> &'a str {
        let known = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.contains(policy) {
            return policy;
        }
        drop(known);
        let mut known = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.len() < MAX_POLICY_LABELS {
            known.insert(policy.into());
            policy
        } else if known.contains(policy) {
            policy
        } else {
            "other"
        }
    }
}

const LATENCY_BUCKETS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25,
];

impl Metrics {
    pub fn new(mode: &str, database: &str, limiter: &str) -> Self {
        let registry = Registry::new_custom(Some("sluice".into()), None).expect("a valid prefix");
        let build_info = IntGaugeVec::new(
            Opts::new("build_info", "Always 1; the labels describe this instance."),
            &["version", "mode", "database", "limiter"],
        )
        .expect("valid metric");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), mode, database, limiter])
            .set(1);
        let http_requests = IntCounterVec::new(
            Opts::new(
                "http_requests_total",
                "HTTP requests by route template and status.",
            ),
            &["method", "route", "status"],
        )
        .expect("valid metric");
        let http_duration = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "HTTP request latency by route template.",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
            ]),
            &["method", "route"],
        )
        .expect("valid metric");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        let decisions = counter(
            "decisions_total",
            "Check decisions by deciding policy and outcome.",
            &["policy", "outcome"],
        );
        let shadow_would_deny = counter(
            "shadow_would_deny_total",
            "Shadow rules that would have denied.",
            &["policy"],
        );
        let fail_open = counter(
            "fail_open_total",
            "Checks allowed because the limiter could not decide (fail_open rules).",
            &["policy"],
        );
        let fail_closed = counter(
            "fail_closed_total",
            "Checks refused with 503 because the limiter could not decide (fail_closed rules).",
            &["policy"],
        );
        let cache_lookups = counter(
            "cache_lookups_total",
            "Key and tenant cache lookups by result.",
            &["cache", "result"],
        );
        let histogram = |name: &str, help: &str| {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()))
                .expect("valid metric")
        };
        let decision_seconds = histogram("decision_seconds", "Time to handle one /v1/check.");
        let limiter_seconds = histogram(
            "limiter_seconds",
            "Time of the limiter call (the Redis round trip in distributed mode).",
        );
        let active_keys = IntGauge::new(
            "active_keys",
            "Active buckets of all tenants: checked in the last 5 to 6 minutes on Redis (HyperLogLog, 0.81% standard error), live in process.",
        )
        .expect("valid metric");
        let redis_breaker_open = IntGaugeVec::new(
            Opts::new(
                "redis_breaker_open",
                "1 while the circuit breaker of a Redis node (a Cluster master) is open.",
            ),
            &["node"],
        )
        .expect("valid metric");
        let redis_breaker_refused = prometheus::IntCounter::new(
            "redis_breaker_refused_total",
            "Redis calls answered at once, without Redis, because their node's breaker was open.",
        )
        .expect("valid metric");
        let local_decisions = prometheus::IntCounter::new(
            "local_decisions_total",
            "Checks decided in this instance with its share of the limit, because the limiter could not decide (failure_mode local).",
        )
        .expect("valid metric");
        let cached_denials = prometheus::IntCounter::new(
            "cached_denials_total",
            "Checks denied by this instance's deny cache without a limiter call, because the limiter had just denied the same check and its capacity cannot have come back yet (each is also counted in decisions_total).",
        )
        .expect("valid metric");
        let cache_loads = counter(
            "cache_loads_total",
            "Keys and tenants loaded from the store (one per id at a time, however many checks miss it).",
            &["cache"],
        );
        let change_subscriptions = prometheus::IntCounter::new(
            "change_subscriptions_total",
            "Subscriptions to admin changes: the first, and one after each lost subscription (when every cached entry is marked stale).",
        )
        .expect("valid metric");
        let http_in_flight = IntGauge::new(
            "http_requests_in_flight",
            "HTTP requests being served now (graceful shutdown waits for them).",
        )
        .expect("valid metric");
        for collector in [
            Box::new(http_in_flight.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(local_decisions.clone()),
            Box::new(cached_denials.clone()),
            Box::new(cache_loads.clone()),
            Box::new(change_subscriptions.clone()),
            Box::new(redis_breaker_open.clone()),
            Box::new(redis_breaker_refused.clone()),
            Box::new(active_keys.clone()),
            Box::new(build_info),
            Box::new(http_requests.clone()),
            Box::new(http_duration.clone()),
            Box::new(decisions.clone()),
            Box::new(shadow_would_deny.clone()),
            Box::new(fail_open.clone()),
            Box::new(fail_closed.clone()),
            Box::new(cache_lookups.clone()),
            Box::new(decision_seconds.clone()),
            Box::new(limiter_seconds.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        Self {
            registry,
            http_requests,
            http_duration,
            decisions,
            shadow_would_deny,
            fail_open,
            fail_closed,
            decision_seconds,
            limiter_seconds,
            cache_lookups,
            live: Arc::default(),
            active_keys,
            redis_breaker_open,
            redis_breaker_refused,
            local_decisions,
            cached_denials,
            cache_loads,
            change_subscriptions,
            http_in_flight,
            policies: Arc::default(),
        }
    }

    /// Counts what happened to one check for `tenant`'s `policy` (`""`: no rule applied), on
    /// `/metrics` (by policy) and in the dashboards' current second (by tenant and policy).
    pub fn outcome(&self, tenant: &str, policy: &str, outcome: Outcome) {
        self.live.decision(tenant, policy, outcome);
        let policy = if policy.is_empty() {
            policy
        } else {
            self.policies.label(policy)
        };
        match outcome {
            Outcome::Allowed if policy.is_empty() => {
                self.decisions.with_label_values(&["", "no_rule"]).inc();
            }
            Outcome::Allowed => self.decisions.with_label_values(&[policy, "allowed"]).inc(),
            Outcome::Denied => self.decisions.with_label_values(&[policy, "denied"]).inc(),
            Outcome::ShadowWouldDeny => self.shadow_would_deny.with_label_values(&[policy]).inc(),
            Outcome::FailOpen => self.fail_open.with_label_values(&[policy]).inc(),
            Outcome::FailClosed => self.fail_closed.with_label_values(&[policy]).inc(),
            // A limiter error is a 500 on /metrics (http_requests_total).
            Outcome::Error => {}
        }
    }

    /// Times one limiter call (`slot`: the Cluster slot of its keys, for per-shard latency).
    pub fn limiter_call(&self, slot: Option<u16>, elapsed: Duration) {
        self.limiter_seconds.observe(elapsed.as_secs_f64());
        self.live.limiter(slot, elapsed);
    }

    /// Times one whole check, as its transport saw it.
    pub fn check_done(&self, elapsed: Duration) {
        self.decision_seconds.observe(elapsed.as_secs_f64());
        self.live.check(elapsed);
    }

    /// Marks one HTTP request as being served until the returned guard is dropped.
    pub fn http_started(&self) -> InFlight {
        self.http_in_flight.inc();
        InFlight(self.http_in_flight.clone())
    }

    /// Counts one HTTP request by its route template.
    pub fn http_request(&self, method: &str, route: &str, status: &str, elapsed: Duration) {
        self.http_duration
            .with_label_values(&[method, route])
            .observe(elapsed.as_secs_f64());
        self.http_requests
            .with_label_values(&[method, route, status])
            .inc();
    }

    /// The Redis breakers' state as the client reports it: each node's (open or not), and
    /// the calls refused so far. Called when `/metrics` is read.
    pub fn redis_breakers(&self, nodes: &[(String, bool)], refused: u64) {
        for (node, open) in nodes {
            self.redis_breaker_open
                .with_label_values(&[node.as_str()])
                .set(i64::from(*open));
        }
        let counted = self.redis_breaker_refused.get();
        if refused > counted {
            self.redis_breaker_refused.inc_by(refused - counted);
        }
    }

    /// Counts one check decided in process by `local` rules.
    pub fn local_decision(&self) {
        self.local_decisions.inc();
    }

    /// Counts one check denied from the deny cache.
    pub fn cached_denial(&self) {
        self.cached_denials.inc();
    }

    /// Counts one load of `cache` (`key` or `tenant`) from the store.
    pub fn cache_load(&self, cache: &'static str) {
        self.cache_loads.with_label_values(&[cache]).inc();
    }

    /// Counts one (re)subscription to admin changes.
    pub fn change_subscription(&self) {
        self.change_subscriptions.inc();
    }

    /// Counts one cache lookup.
    pub fn cache(&self, cache: &'static str, result: &'static str) {
        self.cache_lookups.with_label_values(&[cache, result]).inc();
        self.live.cache(cache, result);
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("encoding into a Vec cannot fail");
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// One HTTP request being served ([`Metrics::http_started`]); dropping it ends it.
#[derive(Debug)]
pub struct InFlight(IntGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_names_past_the_cap_share_the_other_label() {
        let labels = PolicyLabels::default();
        for i in 0..MAX_POLICY_LABELS {
            let name = format!("rule-{i}");
            assert_eq!(labels.label(&name), name);
        }
        assert_eq!(labels.label("one-too-many"), "other");
        // Names that got a label keep it.
        assert_eq!(labels.label("rule-7"), "rule-7");
        assert_eq!(labels.0.read().unwrap().len(), MAX_POLICY_LABELS);
    }
}
