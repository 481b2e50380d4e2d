//! Prometheus metrics. Every label is bounded: route templates, status codes, the nine HTTP
//! methods (`other` for the rest), cache names, Redis nodes, and at most
//! [`MAX_POLICY_LABELS`] rule names (`other` after that); never raw paths, subjects or keys.

use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use super::recorder::{Outcome, Recorder, CACHES, LOOKUP_RESULTS};
use crate::hashing::FastMap;

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
    redis_breaker_refused: IntCounter,
    /// Checks decided in process because the limiter could not decide (`local` rules).
    local_decisions: IntCounter,
    cached_denials: IntCounter,
    /// Reservations settled, by `result`: `refund`, `overrun` or `exact`.
    settlements: IntCounterVec,
    /// Units settling gave back (`refunded`) or charged beyond the estimate (`overrun`).
    settled_units: IntCounterVec,
    /// Leases released (`POST /v1/release`), repeats not counted.
    releases: IntCounter,
    /// Loads of keys and tenants from the store (cache misses and refreshes, coalesced).
    cache_loads: IntCounterVec,
    /// Subscriptions to admin changes made (the first, and each after a lost one).
    change_subscriptions: IntCounter,
    /// HTTP requests being served now.
    http_in_flight: IntGauge,
    /// The rule names that have a `policy` label of their own.
    policies: Arc<PolicyLabels>,
    /// The series of the check path, resolved once.
    check_series: Arc<CheckSeries>,
}

/// The most distinct rule names `/metrics` carries as `policy` labels; checks of any further
/// rule are counted under `other`. Rule names are chosen by tenants, so without a bound a
/// tenant creating and deleting rules would grow every scrape without end.
pub const MAX_POLICY_LABELS: usize = 1_000;

/// One policy's series, each resolved from its vector the first time it counts (so `/metrics`
/// shows only the outcomes that happened), then counted without a label lookup.
#[derive(Debug, Default)]
struct PolicySeries {
    allowed: OnceLock<IntCounter>,
    denied: OnceLock<IntCounter>,
    shadow_would_deny: OnceLock<IntCounter>,
    fail_open: OnceLock<IntCounter>,
    fail_closed: OnceLock<IntCounter>,
}

/// The `policy` label values handed out so far, with their series.
#[derive(Debug, Default)]
struct PolicyLabels(RwLock<FastMap<Box<str>, Arc<PolicySeries>>>);

impl PolicyLabels {
    /// `policy`'s label (itself while it has or can get one of its own, `other` after that)
    /// and its series.
    fn label<'a>(&self, policy: &'a str) -> (&'a str, Arc<PolicySeries>) {
        let known = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(series) = known.get(policy) {
            return (policy, series.clone());
        }
        drop(known);
        let mut known = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(series) = known.get(policy) {
            return (policy, series.clone());
        }
        if known.len() < MAX_POLICY_LABELS {
            let series = Arc::<PolicySeries>::default();
            known.insert(policy.into(), series.clone());
            (policy, series)
        } else {
            let other = known.entry(OTHER.into()).or_default().clone();
            (OTHER, other)
        }
    }
}

/// The label of the rule names past [`MAX_POLICY_LABELS`].
const OTHER: &str = "other";

/// The series every check counts in, resolved once (on first use, so a series appears on
/// `/metrics` only once something happened).
#[derive(Debug, Default)]
struct CheckSeries {
    /// `http_request_duration_seconds` of `POST /v1/check`.
    duration: OnceLock<Histogram>,
    /// `http_requests_total` of `POST /v1/check` answered 200 and 429.
    allowed: OnceLock<IntCounter>,
    denied: OnceLock<IntCounter>,
    /// `cache_lookups_total` by cache (key, tenant) and result (hit, miss, stale, absent).
    lookups: [[OnceLock<IntCounter>; 4]; 2],
}

/// The route template of `/v1/check` on `/metrics`.
const CHECK_ROUTE: &str = "/v1/check";

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
        let redis_breaker_refused = IntCounter::new(
            "redis_breaker_refused_total",
            "Redis calls answered at once, without Redis, because their node's breaker was open.",
        )
        .expect("valid metric");
        let local_decisions = IntCounter::new(
            "local_decisions_total",
            "Checks decided in this instance with its share of the limit, because the limiter could not decide (failure_mode local).",
        )
        .expect("valid metric");
        let cached_denials = IntCounter::new(
            "cached_denials_total",
            "Checks denied by this instance's deny cache without a limiter call, because the limiter had just denied the same check and its capacity cannot have come back yet (each is also counted in decisions_total).",
        )
        .expect("valid metric");
        let settlements = counter(
            "settlements_total",
            "Reservations settled (POST /v1/settle, repeats not counted), by result: refund (final cost below the estimate), overrun (above it) or exact.",
            &["result"],
        );
        let settled_units = counter(
            "settled_units_total",
            "Cost units settling gave back (refunded) or charged beyond the estimate (overrun), once per reservation however many rules it charged.",
            &["direction"],
        );
        let releases = IntCounter::new(
            "lease_releases_total",
            "Leases of concurrency rules released (POST /v1/release), repeats not counted; an unreleased lease ends by itself after the rule's period.",
        )
        .expect("valid metric");
        let cache_loads = counter(
            "cache_loads_total",
            "Keys and tenants loaded from the store (one per id at a time, however many checks miss it).",
            &["cache"],
        );
        let change_subscriptions = IntCounter::new(
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
            Box::new(settlements.clone()),
            Box::new(settled_units.clone()),
            Box::new(releases.clone()),
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
            settlements,
            settled_units,
            releases,
            cache_loads,
            change_subscriptions,
            http_in_flight,
            policies: Arc::default(),
            check_series: Arc::default(),
        }
    }

    /// Counts what happened to one check for `tenant`'s `policy` (`""`: no rule applied), on
    /// `/metrics` (by policy) and in the dashboards' current second (by tenant and policy).
    pub fn outcome(&self, tenant: &str, policy: &str, outcome: Outcome) {
        self.live.decision(tenant, policy, outcome);
        self.count(policy, outcome);
    }

    /// Counts one check denied by `tenant`'s `rule`, as [`Metrics::outcome`] does, and the
    /// denial of `subject` (`""`: a tenant-wide bucket) for the dashboards' most denied
    /// subjects, under the recorder's lock once. Subjects are never metric labels.
    pub fn denied(&self, tenant: &str, rule: &crate::store::rules::Rule, subject: &str) {
        self.live.denial(tenant, &rule.id, &rule.body.name, subject);
        self.count(&rule.body.name, Outcome::Denied);
    }

    /// Counts `outcome` of `policy` on `/metrics`.
    fn count(&self, policy: &str, outcome: Outcome) {
        if policy.is_empty() {
            if outcome == Outcome::Allowed {
                self.decisions.with_label_values(&["", "no_rule"]).inc();
            }
            return;
        }
        let (label, series) = self.policies.label(policy);
        let (slot, vector, labels): (_, _, &[&str]) = match outcome {
            Outcome::Allowed => (&series.allowed, &self.decisions, &[label, "allowed"]),
            Outcome::Denied => (&series.denied, &self.decisions, &[label, "denied"]),
            Outcome::ShadowWouldDeny => {
                (&series.shadow_would_deny, &self.shadow_would_deny, &[label])
            }
            Outcome::FailOpen => (&series.fail_open, &self.fail_open, &[label]),
            Outcome::FailClosed => (&series.fail_closed, &self.fail_closed, &[label]),
            // A limiter error is a 500 on /metrics (http_requests_total).
            Outcome::Error => return,
        };
        slot.get_or_init(|| vector.with_label_values(labels)).inc();
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

    /// Counts one `POST /v1/check` answered `status` after `elapsed`, as [`Self::http_request`]
    /// would, through series resolved once.
    pub fn check_answered(&self, status: axum::http::StatusCode, elapsed: Duration) {
        let series = &self.check_series;
        series
            .duration
            .get_or_init(|| self.http_duration.with_label_values(&["POST", CHECK_ROUTE]))
            .observe(elapsed.as_secs_f64());
        let slot = match status.as_u16() {
            200 => &series.allowed,
            429 => &series.denied,
            _ => {
                self.http_requests
                    .with_label_values(&["POST", CHECK_ROUTE, status.as_str()])
                    .inc();
                return;
            }
        };
        slot.get_or_init(|| {
            self.http_requests
                .with_label_values(&["POST", CHECK_ROUTE, status.as_str()])
        })
        .inc();
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

    /// Counts one reservation settled at `cost` whose estimate was `estimate`.
    pub fn settled(&self, estimate: u64, cost: u64) {
        let (result, direction, units) = match cost.cmp(&estimate) {
            std::cmp::Ordering::Less => ("refund", "refunded", estimate - cost),
            std::cmp::Ordering::Greater => ("overrun", "overrun", cost - estimate),
            std::cmp::Ordering::Equal => ("exact", "refunded", 0),
        };
        self.settlements.with_label_values(&[result]).inc();
        self.settled_units
            .with_label_values(&[direction])
            .inc_by(units);
    }

    /// Counts one lease released.
    pub fn released(&self) {
        self.releases.inc();
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
        let known = CACHES
            .iter()
            .position(|c| *c == cache)
            .zip(LOOKUP_RESULTS.iter().position(|r| *r == result));
        match known {
            Some((c, r)) => {
                self.check_series.lookups[c][r]
                    .get_or_init(|| self.cache_lookups.with_label_values(&[cache, result]))
                    .inc();
                self.live.cache_at(c, r);
            }
            None => {
                self.cache_lookups.with_label_values(&[cache, result]).inc();
                self.live.cache(cache, result);
            }
        }
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
            assert_eq!(labels.label(&name).0, name);
        }
        assert_eq!(labels.label("one-too-many").0, "other");
        // Names that got a label keep it, and their series.
        let (label, series) = labels.label("rule-7");
        assert_eq!(label, "rule-7");
        assert!(Arc::ptr_eq(&series, &labels.label("rule-7").1));
        // One entry more: the shared `other`.
        assert_eq!(labels.0.read().unwrap().len(), MAX_POLICY_LABELS + 1);
    }

    #[test]
    fn series_resolved_once_count_where_a_label_lookup_would() {
        let metrics = Metrics::new("embedded", "sqlite", "memory");
        metrics.outcome("t", "per-user", Outcome::Allowed);
        metrics.outcome("t", "per-user", Outcome::Allowed);
        metrics.outcome("t", "per-user", Outcome::Denied);
        metrics.outcome("t", "per-user", Outcome::FailClosed);
        metrics.check_answered(axum::http::StatusCode::OK, Duration::from_millis(1));
        metrics.check_answered(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            Duration::from_millis(1),
        );
        metrics.check_answered(
            axum::http::StatusCode::UNAUTHORIZED,
            Duration::from_millis(1),
        );
        metrics.cache("key", "hit");
        metrics.cache("key", "hit");
        metrics.cache("tenant", "miss");
        let text = metrics.render();
        for line in [
            r#"sluice_decisions_total{outcome="allowed",policy="per-user"} 2"#,
            r#"sluice_decisions_total{outcome="denied",policy="per-user"} 1"#,
            r#"sluice_fail_closed_total{policy="per-user"} 1"#,
            r#"sluice_http_requests_total{method="POST",route="/v1/check",status="200"} 1"#,
            r#"sluice_http_requests_total{method="POST",route="/v1/check",status="429"} 1"#,
            r#"sluice_http_requests_total{method="POST",route="/v1/check",status="401"} 1"#,
            r#"sluice_http_request_duration_seconds_count{method="POST",route="/v1/check"} 3"#,
            r#"sluice_cache_lookups_total{cache="key",result="hit"} 2"#,
            r#"sluice_cache_lookups_total{cache="tenant",result="miss"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        // Outcomes that never happened have no series.
        assert!(!text.contains("sluice_fail_open_total{"), "{text}");
    }
}
