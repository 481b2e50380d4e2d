//! The limiter: where counters live and how a decision is made.
//!
//! - [`Limiter`] is the one API: [`Limiter::check`] decides a request against up to
//!   [`MAX_RULES`] rules atomically;
//! - `redis_backend` runs `lua/check.lua` on one Redis or a Redis Cluster (one `EVALSHA`
//!   per check, `EVAL` after a `NOSCRIPT`, a deadline on every call, a small pool of
//!   multiplexed connections);
//! - `memory` is the in-process twin for the embedded mode: the same reference model
//!   ([`app::rules::model`]), sharded locks, idle keys expired;
//! - [`keys`] builds every Redis key, with the `{tenant}` hash tag.

pub mod keys;
mod memory;
mod redis_backend;

use std::time::Duration;

use app::rules::model::Decision;
use app::rules::{LimitSpec, MAX_COST};

pub use memory::MemoryBackend;
pub use redis_backend::{check_script_sha, RedisBackend};

use crate::config::LimiterTarget;

/// The most rules one check may evaluate.
pub const MAX_RULES: usize = 8;
/// How long a `request_id` is remembered: a retry within this time gets the first answer.
pub const REQUEST_ID_TTL: Duration = Duration::from_secs(10 * 60);

/// Errors from a limiter backend. `transient` errors (Redis down, slow past the deadline)
/// drive each rule's failure mode; the others are bugs or bad input.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    #[error("redis: {source}")]
    Redis {
        #[source]
        source: redis::RedisError,
        transient: bool,
    },
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("invalid check: {0}")]
    Invalid(String),
    #[error("unexpected reply from the check script: {0}")]
    Protocol(String),
}

impl LimiterError {
    /// Whether the same call could succeed later.
    pub fn is_transient(&self) -> bool {
        match self {
            LimiterError::Redis { transient, .. } => *transient,
            LimiterError::Timeout(_) => true,
            LimiterError::Invalid(_) | LimiterError::Protocol(_) => false,
        }
    }
}

impl From<redis::RedisError> for LimiterError {
    fn from(source: redis::RedisError) -> Self {
        let transient = source.is_io_error()
            || source.is_timeout()
            || source.is_connection_dropped()
            || source.is_connection_refusal()
            || source.is_cluster_error()
            || matches!(
                source.kind(),
                redis::ErrorKind::BusyLoadingError | redis::ErrorKind::TryAgain
            );
        LimiterError::Redis { source, transient }
    }
}

/// One rule of a check: its bucket key ([`keys::bucket`]), its parameters, and the cost.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleCheck {
    pub key: String,
    pub spec: LimitSpec,
    pub cost: u64,
    /// Evaluated and reported, never enforced.
    pub shadow: bool,
}

/// One request to decide.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRequest {
    /// Every key must carry this tenant's hash tag.
    pub tenant: String,
    pub rules: Vec<RuleCheck>,
    /// Makes the check idempotent: a retry with the same id gets the first decision.
    pub request_id: Option<String>,
    /// An explicit clock in Unix ms, for tests; `None` uses the backend's clock (Redis
    /// `TIME`, or this process's clock in-process).
    pub now_ms: Option<i64>,
    /// Decide without writing anything: no consumption, no penalty, no idempotency record
    /// (the console's and the admin API's simulate).
    pub dry_run: bool,
}

/// The decision for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOutcome {
    /// Every enforced (non-shadow) rule admitted the request, and it was consumed.
    pub allowed: bool,
    /// One decision per rule, in the request's order.
    pub decisions: Vec<Decision>,
    /// This is the stored answer to an earlier check with the same `request_id`.
    pub deduplicated: bool,
    /// The time the decision was taken at, in Unix ms.
    pub now_ms: i64,
}

impl CheckRequest {
    /// The key of this request's idempotency record. It covers what the request asks for
    /// (each rule's key, parameters, cost and shadow flag) as well as its `request_id`, so
    /// reusing an id for a different request is a new decision, never someone else's answer.
    pub fn reply_key(&self) -> String {
        let mut identity = self.request_id.clone().unwrap_or_default();
        for rule in &self.rules {
            let s = &rule.spec;
            identity.push_str(&format!(
                "\n{}|{}|{}|{}|{:?}|{}|{}|{}",
                rule.key,
                s.algorithm,
                s.limit,
                s.period_ms,
                s.burst,
                s.penalty,
                rule.cost,
                rule.shadow
            ));
        }
        keys::request(&self.tenant, &identity)
    }

    fn validate(&self) -> Result<(), LimiterError> {
        let invalid = |m: String| Err(LimiterError::Invalid(m));
        if self.dry_run && self.request_id.is_some() {
            return invalid("a dry run takes no request_id".into());
        }
        if self.rules.is_empty() || self.rules.len() > MAX_RULES {
            return invalid(format!(
                "a check takes 1 to {MAX_RULES} rules, not {}",
                self.rules.len()
            ));
        }
        let tag = format!("{{{}}}", self.tenant);
        for rule in &self.rules {
            if let Err(problem) = rule.spec.validate() {
                return invalid(format!("rule {}: {problem}", rule.key));
            }
            if rule.cost == 0 || rule.cost > MAX_COST {
                return invalid(format!(
                    "cost must be between 1 and {MAX_COST}, not {}",
                    rule.cost
                ));
            }
            if !rule.key.contains(&tag) {
                return invalid(format!(
                    "key {} lacks the tenant's hash tag {tag}",
                    rule.key
                ));
            }
        }
        Ok(())
    }
}

/// Which kind of store holds the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    InProcess,
    Redis,
    RedisCluster,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::InProcess => "in-process",
            BackendKind::Redis => "redis",
            BackendKind::RedisCluster => "redis-cluster",
        }
    }
}

/// How to reach Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisOptions {
    /// The deadline of every command.
    pub timeout: Duration,
    /// Multiplexed connections per instance (each carries many concurrent checks).
    pub connections: usize,
}

/// The limiter a server instance uses. Cloning is cheap and shares the state.
#[derive(Debug, Clone)]
pub enum Limiter {
    InProcess(MemoryBackend),
    Redis(RedisBackend),
}

impl Limiter {
    /// Connects to the configured backend. Redis must be reachable at start-up, so that a
    /// wrong `REDIS_URL` is reported at once rather than on the first check.
    pub async fn connect(
        target: &LimiterTarget,
        options: RedisOptions,
    ) -> Result<Self, LimiterError> {
        Ok(match target {
            LimiterTarget::InProcess => Limiter::InProcess(MemoryBackend::new()),
            LimiterTarget::Redis(url) => Limiter::Redis(RedisBackend::single(url, options).await?),
            LimiterTarget::Cluster(nodes) => {
                Limiter::Redis(RedisBackend::cluster(nodes, options).await?)
            }
        })
    }

    pub fn kind(&self) -> BackendKind {
        match self {
            Limiter::InProcess(_) => BackendKind::InProcess,
            Limiter::Redis(redis) => redis.kind(),
        }
    }

    /// Whether the backend can take decisions now; for `/readyz`.
    pub async fn ping(&self) -> Result<(), LimiterError> {
        match self {
            Limiter::InProcess(_) => Ok(()),
            Limiter::Redis(redis) => redis.ping().await,
        }
    }

    /// Decides one request against all its rules atomically. It is admitted (and every
    /// rule consumed) only if every enforced rule admits it; otherwise nothing is consumed
    /// except by rules with `penalty`.
    pub async fn check(&self, request: &CheckRequest) -> Result<CheckOutcome, LimiterError> {
        request.validate()?;
        match self {
            Limiter::InProcess(memory) => Ok(memory.check(request)),
            Limiter::Redis(redis) => redis.check(request).await,
        }
    }
}
