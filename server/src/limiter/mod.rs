//! The limiter: where counters live and how a decision is made.
//!
//! - [`Limiter`] is the one API: [`Limiter::check`] decides a request against up to
//!   [`MAX_RULES`] rules atomically;
//! - [`check`]: the request, its outcome and the errors, shared by both backends;
//! - `redis_backend` runs `lua/check.lua` on one Redis or a Redis Cluster through the
//!   instance's Redis client ([`crate::redis_client`]);
//! - `memory` is the in-process twin for the embedded mode: the same reference model
//!   ([`app::rules::model`]), sharded locks, idle keys expired.

pub mod batch_reply;
pub mod check;
mod memory;
pub mod packed_args;
mod redis_backend;

pub use crate::config::BucketLayout;
pub use check::{
    BackendKind, CheckOutcome, CheckRequest, LimiterError, Released, Reserve, RuleCheck,
    Settlement, DEFAULT_RESERVATION_TTL_MS, MAX_RESERVATION_TTL_MS, MAX_RULES,
    MIN_RESERVATION_TTL_MS, REQUEST_ID_TTL, SETTLED_TTL,
};
pub use memory::MemoryBackend;
pub use redis_backend::{check_script_sha, RedisChecks};

use crate::config::LimiterTarget;

/// The reset script, hashed once.
static RESET: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(RESET_SOURCE));
const RESET_SOURCE: &str = include_str!("../../../lua/reset.lua");
pub use crate::redis_client::{keys, RedisClient, RedisOptions};

/// The limiter a server instance uses. Cloning is cheap and shares the state.
#[derive(Debug, Clone)]
pub enum Limiter {
    InProcess(MemoryBackend),
    /// The client, and the instance's state of its checks: the buckets it has counted as
    /// active this minute, the checks waiting to be sent.
    Redis(RedisClient, std::sync::Arc<RedisChecks>),
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
            LimiterTarget::Redis(url) => {
                Limiter::Redis(RedisClient::single(url, options).await?, Default::default())
            }
            LimiterTarget::Cluster(nodes) => Limiter::Redis(
                RedisClient::cluster(nodes, options).await?,
                Default::default(),
            ),
        })
    }

    /// This limiter, writing its buckets on Redis in `layout` (the in-process limiter has no
    /// layout). Call it before the limiter is shared: the checks it has queued are dropped.
    pub fn with_bucket_layout(self, layout: BucketLayout) -> Self {
        match self {
            Limiter::Redis(redis, _) => {
                Limiter::Redis(redis, std::sync::Arc::new(RedisChecks::new(layout)))
            }
            other => other,
        }
    }

    pub fn kind(&self) -> BackendKind {
        match self {
            Limiter::InProcess(_) => BackendKind::InProcess,
            Limiter::Redis(redis, _) if redis.is_cluster() => BackendKind::RedisCluster,
            Limiter::Redis(..) => BackendKind::Redis,
        }
    }

    /// The Cluster slot of a check's keys, when the backend is a Cluster (per-shard latency).
    pub fn slot_of(&self, first_key: &str) -> Option<u16> {
        (self.kind() == BackendKind::RedisCluster).then(|| keys::slot(first_key))
    }

    /// The Redis client, when the counters live in Redis.
    pub fn redis(&self) -> Option<&RedisClient> {
        match self {
            Limiter::InProcess(_) => None,
            Limiter::Redis(redis, _) => Some(redis),
        }
    }

    /// Whether the backend can take decisions now; for `/readyz`.
    pub async fn ping(&self) -> Result<(), LimiterError> {
        match self {
            Limiter::InProcess(_) => Ok(()),
            Limiter::Redis(redis, _) => Ok(redis.ping().await?),
        }
    }

    /// Clears `tenant`'s bucket `key`: the next check of it finds it absent and starts full,
    /// as after it expired, and it no longer counts against the tenant's quota of live
    /// buckets (on Redis, `lua/reset.lua` deletes it and its live-index entry in one step,
    /// on the key's node of a Cluster). Whether a bucket was there.
    pub async fn reset(&self, tenant: &str, key: &str) -> Result<bool, LimiterError> {
        match self {
            Limiter::InProcess(memory) => Ok(memory.remove(key, crate::store::now_ms())),
            Limiter::Redis(redis, _) => {
                let index = keys::live_index(tenant);
                let existed: i64 = redis
                    .run_script(&RESET, RESET_SOURCE, key, |cmd| {
                        cmd.arg(2).arg(key).arg(&index);
                    })
                    .await?;
                Ok(existed > 0)
            }
        }
    }

    /// Settles `tenant`'s reservation `id` (made by a check with [`CheckRequest::reserve`])
    /// at its final `cost`, on every bucket it charged in one step: the unused part of its
    /// estimate is given back, an overrun charged ([`app::rules::model::settle`] says how,
    /// per algorithm). A second settle changes nothing and reports the first one's cost.
    /// `now_ms`: an explicit clock (tests); `quota`: whether the tenant has a quota of live
    /// keys (a bucket an overrun creates is entered in it).
    pub async fn settle(
        &self,
        tenant: &str,
        id: &str,
        cost: u64,
        now_ms: Option<i64>,
        quota: bool,
    ) -> Result<Settlement, LimiterError> {
        if !keys::is_reservation_id(id) {
            return Err(LimiterError::Invalid(format!(
                "{id:?} is not a reservation id"
            )));
        }
        if cost > app::rules::MAX_COST {
            return Err(LimiterError::Invalid(format!(
                "cost must be between 0 and {}, not {cost}",
                app::rules::MAX_COST
            )));
        }
        match self {
            Limiter::InProcess(memory) => Ok(memory.settle(tenant, id, cost, now_ms)),
            Limiter::Redis(redis, checks) => {
                redis_backend::settle(redis, tenant, id, cost, now_ms, quota, checks.layout()).await
            }
        }
    }

    /// Releases `tenant`'s lease `id` (taken by a check of a `concurrency` rule): its slot in
    /// every bucket it holds is free again at once. A second release changes nothing.
    /// The released record is kept [`SETTLED_TTL`] at most, to answer a repeat. `now_ms`: an
    /// explicit clock for the in-process limiter's expiry (tests); Redis keeps its own time.
    /// `quota`: whether the tenant has a quota of live keys.
    pub async fn release(
        &self,
        tenant: &str,
        id: &str,
        now_ms: Option<i64>,
        quota: bool,
    ) -> Result<Released, LimiterError> {
        if !keys::is_reservation_id(id) {
            return Err(LimiterError::Invalid(format!("{id:?} is not a lease id")));
        }
        match self {
            Limiter::InProcess(memory) => Ok(memory.release(tenant, id, now_ms)),
            Limiter::Redis(redis, _) => redis_backend::release(redis, tenant, id, quota).await,
        }
    }

    /// Decides one request against all its rules atomically. It is admitted (and every
    /// rule consumed) only if every enforced rule admits it; otherwise nothing is consumed
    /// except by rules with `penalty`.
    pub async fn check(&self, request: &CheckRequest) -> Result<CheckOutcome, LimiterError> {
        request.validate()?;
        match self {
            Limiter::InProcess(memory) => memory.check(request),
            Limiter::Redis(redis, checks) => redis_backend::check(redis, checks, request).await,
        }
    }
}
