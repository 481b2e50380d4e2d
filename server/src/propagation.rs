//! Announcing admin changes to every instance, so caches never serve a revoked key, a
//! suspended tenant or an old rule for long.
//!
//! The instance that makes a change drops its own cache entries at once and publishes the
//! change on the Redis channel [`CHANNEL`] (Redis Cluster propagates pub/sub to every node).
//! Every other instance drops the same entries; each message names the instance it came from,
//! and an instance ignores its own (it dropped them already; dropping again would only evict
//! entries loaded since, which hurts while the database is down). After a lost subscription
//! the subscriber marks every cached entry stale when it is back, since it may have missed
//! changes: each is reloaded on its next use, and keeps serving while the database is down. A
//! starting instance waits for its first subscription before it serves. In embedded mode
//! there is one instance and the local drop is the whole story.

use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::cache::Caches;
use crate::redis_client::{keys, RedisClient};
use crate::telemetry::Metrics;

/// The pub/sub channel of admin changes.
pub const CHANNEL: &str = keys::CHANGES;

/// Something the caches must forget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A key was created, rotated or revoked (identified by its hash).
    Key { hash: String },
    /// A tenant's status or rules changed.
    Tenant { id: String },
}

/// A change as it travels on the channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Envelope {
    /// The publishing instance ([`Bus::origin`]).
    origin: String,
    #[serde(flatten)]
    change: Change,
}

impl Change {
    fn apply<T>(&self, caches: &Caches<T>) {
        match self {
            Change::Key { hash } => caches.drop_key(hash),
            Change::Tenant { id } => caches.drop_tenant(id),
        }
    }
}

/// Publishes changes. Cloning shares it. `T` is the cached tenant (see [`Caches`]).
#[derive(Debug)]
pub struct Bus<T> {
    caches: Caches<T>,
    redis: Option<RedisClient>,
    origin: std::sync::Arc<str>,
}

impl<T> Clone for Bus<T> {
    fn clone(&self) -> Self {
        Self {
            caches: self.caches.clone(),
            redis: self.redis.clone(),
            origin: self.origin.clone(),
        }
    }
}

impl<T> Bus<T> {
    /// A bus that drops changes from `caches` and publishes them on `redis` (none: one
    /// instance, the embedded mode or a command on the host).
    pub fn new(caches: Caches<T>, redis: Option<RedisClient>) -> Self {
        Self::with_origin(caches, redis, &uuid::Uuid::new_v4().to_string())
    }

    /// A bus that names this instance `origin` on the channel (the instance's id).
    pub fn with_origin(caches: Caches<T>, redis: Option<RedisClient>, origin: &str) -> Self {
        Self {
            caches,
            redis,
            origin: origin.into(),
        }
    }

    /// This instance's name on the channel.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Drops the affected entries here and tells every other instance.
    pub async fn publish(&self, change: Change) {
        change.apply(&self.caches);
        if let Some(redis) = &self.redis {
            let envelope = Envelope {
                origin: self.origin.to_string(),
                change: change.clone(),
            };
            let payload = serde_json::to_string(&envelope).unwrap_or_default();
            let published: Result<i64, _> = redis
                .query(redis::cmd("PUBLISH").arg(CHANNEL).arg(payload))
                .await;
            if let Err(e) = published {
                // The periodic refresh still catches up; say so loudly.
                tracing::warn!(error = %e, ?change, "could not publish a change; other instances catch up within the refresh interval");
            }
        }
    }
}

/// Listens for changes on `urls` (tried in turn) until the process ends, ignoring those
/// published by `origin` (this instance). `subscribed` is notified at every (re)subscription.
pub fn spawn_subscriber<T: Send + Sync + 'static>(
    caches: Caches<T>,
    metrics: Metrics,
    urls: Vec<String>,
    origin: String,
    subscribed: std::sync::Arc<tokio::sync::Notify>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut attempt = 0_usize;
        loop {
            let url = &urls[attempt % urls.len()];
            attempt += 1;
            match subscribe(url).await {
                Ok(pubsub) => {
                    // Changes may have been missed while unsubscribed.
                    caches.mark_stale();
                    metrics.change_subscription();
                    subscribed.notify_one();
                    let mut messages = pubsub.into_on_message();
                    while let Some(message) = messages.next().await {
                        let payload: String = message.get_payload().unwrap_or_default();
                        match serde_json::from_str::<Envelope>(&payload) {
                            Ok(envelope) if envelope.origin == origin => {}
                            Ok(envelope) => envelope.change.apply(&caches),
                            Err(e) => {
                                tracing::warn!(error = %e, payload, "ignoring a malformed change message")
                            }
                        }
                    }
                    tracing::warn!(url, "change subscription lost; reconnecting");
                }
                Err(e) => tracing::warn!(url, error = %e, "cannot subscribe to changes; retrying"),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

async fn subscribe(url: &str) -> redis::RedisResult<redis::aio::PubSub> {
    let client = redis::Client::open(url)?;
    let mut pubsub = tokio::time::timeout(Duration::from_secs(2), client.get_async_pubsub())
        .await
        .map_err(|_| {
            redis::RedisError::from((redis::ErrorKind::IoError, "subscribe timed out"))
        })??;
    pubsub.subscribe(CHANNEL).await?;
    Ok(pubsub)
}
