//! The Redis backend: one multiplexed connection to a server, or a cluster connection that
//! routes each command to the master owning its slot. Every command has a deadline.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;

use super::{BackendKind, LimiterError};

/// A connection to Redis that survives restarts of the server: it reconnects on its own.
#[derive(Clone)]
pub struct RedisBackend {
    conn: Conn,
    timeout: Duration,
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("kind", &self.kind())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RedisBackend {
    /// Connects to one Redis server.
    pub async fn single(url: &str, timeout: Duration) -> Result<Self, LimiterError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout)
            .set_number_of_retries(1);
        let manager = within(
            timeout * 4,
            ConnectionManager::new_with_config(client, config),
        )
        .await?;
        Ok(Self {
            conn: Conn::Single(manager),
            timeout,
        })
    }

    /// Connects to a Redis Cluster through any of its seed nodes.
    pub async fn cluster(nodes: &[String], timeout: Duration) -> Result<Self, LimiterError> {
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(1)
            .build()?;
        let conn = within(timeout * 4, client.get_async_connection()).await?;
        Ok(Self {
            conn: Conn::Cluster(conn),
            timeout,
        })
    }

    pub fn kind(&self) -> BackendKind {
        match self.conn {
            Conn::Single(_) => BackendKind::Redis,
            Conn::Cluster(_) => BackendKind::RedisCluster,
        }
    }

    /// Sends one command and waits at most the configured deadline for its reply.
    pub async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, LimiterError> {
        match &self.conn {
            Conn::Single(conn) => within(self.timeout, cmd.query_async(&mut conn.clone())).await,
            Conn::Cluster(conn) => within(self.timeout, cmd.query_async(&mut conn.clone())).await,
        }
    }

    pub async fn ping(&self) -> Result<(), LimiterError> {
        let _: String = self.query(&redis::cmd("PING")).await?;
        Ok(())
    }
}

/// Awaits `fut` for at most `deadline`.
async fn within<T>(
    deadline: Duration,
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, LimiterError> {
    match tokio::time::timeout(deadline, fut).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(LimiterError::Timeout(deadline)),
    }
}
