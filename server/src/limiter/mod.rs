//! The limiter: where counters live and how a decision is made.
//!
//! Two backends sit behind [`Limiter`]: Redis (one server or a Cluster), shared by every
//! instance of a fleet, and an in-process store for the embedded mode.

mod redis_backend;

use std::time::Duration;

pub use redis_backend::RedisBackend;

use crate::config::LimiterTarget;

/// Errors from a limiter backend. `transient` errors (Redis down, slow past the deadline)
/// drive each rule's failure mode; the others are bugs.
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
}

impl LimiterError {
    /// Whether the same call could succeed later.
    pub fn is_transient(&self) -> bool {
        match self {
            LimiterError::Redis { transient, .. } => *transient,
            LimiterError::Timeout(_) => true,
        }
    }
}

impl From<redis::RedisError> for LimiterError {
    fn from(source: redis::RedisError) -> Self {
        let transient = source.is_io_error()
            || source.is_timeout()
            || source.is_connection_dropped()
            || source.is_connection_refusal()
            || source.is_cluster_error();
        LimiterError::Redis { source, transient }
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

/// The limiter a server instance uses. Cloning is cheap and shares the connections.
#[derive(Debug, Clone)]
pub enum Limiter {
    InProcess,
    Redis(RedisBackend),
}

impl Limiter {
    /// Connects to the configured backend. Redis must be reachable at start-up, so that a
    /// wrong `REDIS_URL` is reported at once rather than on the first check.
    pub async fn connect(target: &LimiterTarget, timeout: Duration) -> Result<Self, LimiterError> {
        Ok(match target {
            LimiterTarget::InProcess => Limiter::InProcess,
            LimiterTarget::Redis(url) => Limiter::Redis(RedisBackend::single(url, timeout).await?),
            LimiterTarget::Cluster(nodes) => {
                Limiter::Redis(RedisBackend::cluster(nodes, timeout).await?)
            }
        })
    }

    pub fn kind(&self) -> BackendKind {
        match self {
            Limiter::InProcess => BackendKind::InProcess,
            Limiter::Redis(redis) => redis.kind(),
        }
    }

    /// Whether the backend can take decisions now; for `/readyz`.
    pub async fn ping(&self) -> Result<(), LimiterError> {
        match self {
            Limiter::InProcess => Ok(()),
            Limiter::Redis(redis) => redis.ping().await,
        }
    }
}
