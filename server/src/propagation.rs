//! Announcing admin changes to every instance, so caches never serve a revoked key, a
//! suspended tenant or an old rule for long.
//!
//! The instance that makes a change drops its own cache entries at once and publishes the
//! change on the Redis channel [`CHANNEL`] (Redis Cluster propagates pub/sub to every node).
//! Every instance subscribes and drops the same entries. After a lost subscription the
//! subscriber clears all caches when it is back, since it may have missed changes. In
//! embedded mode there is one instance and the local drop is the whole story.

use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::cache::Caches;
use crate::limiter::{Limiter, RedisBackend};

/// The pub/sub channel of admin changes.
pub const CHANNEL: &str = "sluice:changes";

/// Something the caches must forget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A key was created, rotated or revoked (identified by its hash).
    Key { hash: String },
    /// A tenant's status or rules changed.
    Tenant { id: String },
}

impl Change {
    fn apply(&self, caches: &Caches) {
        match self {
            Change::Key { hash } => caches.drop_key(hash),
            Change::Tenant { id } => caches.drop_tenant(id),
        }
    }
}

/// Publishes changes. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Bus {
    caches: Caches,
    redis: Option<RedisBackend>,
}

impl Bus {
    pub fn new(caches: Caches, limiter: &Limiter) -> Self {
        let redis = match limiter {
            Limiter::Redis(redis) => Some(redis.clone()),
            Limiter::InProcess(_) => None,
        };
        Self { caches, redis }
    }

    /// Drops the affected entries here and tells every other instance.
    pub async fn publish(&self, change: Change) {
        change.apply(&self.caches);
        if let Some(redis) = &self.redis {
            let payload = serde_json::to_string(&change).unwrap_or_default();
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

/// Listens for changes on `urls` (tried in turn) until the process ends.
pub fn spawn_subscriber(caches: Caches, urls: Vec<String>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut attempt = 0_usize;
        loop {
            let url = &urls[attempt % urls.len()];
            attempt += 1;
            match subscribe(url).await {
                Ok(pubsub) => {
                    // Changes may have been missed while unsubscribed.
                    caches.clear();
                    let mut messages = pubsub.into_on_message();
                    while let Some(message) = messages.next().await {
                        let payload: String = message.get_payload().unwrap_or_default();
                        match serde_json::from_str::<Change>(&payload) {
                            Ok(change) => change.apply(&caches),
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
