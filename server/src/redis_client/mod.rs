//! The one Redis client of an instance: a few multiplexed connections to one server, or
//! cluster connections that route each command to the master owning its slot; a deadline on
//! every command; scripts run as `EVALSHA` with the `EVAL` fallback. The limiter, the
//! dashboards' series and the propagation of admin changes all talk to Redis through it, and
//! [`keys`] builds every key they use.

pub mod keys;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;

/// A failed Redis call. `transient` failures (Redis down, slow past the deadline) drive each
/// rule's failure mode; the others are bugs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("redis: {source}")]
    Redis {
        #[source]
        source: redis::RedisError,
        transient: bool,
    },
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

impl Error {
    /// Whether the same call could succeed later.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Redis { transient, .. } => *transient,
            Error::Timeout(_) => true,
        }
    }
}

impl From<redis::RedisError> for Error {
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
        Error::Redis { source, transient }
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

/// A pool of connections to Redis that survive restarts of the server: each reconnects on
/// its own.
#[derive(Clone)]
pub struct RedisClient {
    conns: Arc<[Conn]>,
    next: Arc<AtomicUsize>,
    timeout: Duration,
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("cluster", &self.is_cluster())
            .field("connections", &self.conns.len())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RedisClient {
    /// Connects to one Redis server.
    pub async fn single(url: &str, options: RedisOptions) -> Result<Self, Error> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(options.timeout)
            .set_response_timeout(options.timeout)
            .set_number_of_retries(1);
        let mut conns = Vec::with_capacity(options.connections.max(1));
        for _ in 0..options.connections.max(1) {
            let manager = within(
                options.timeout * 4,
                ConnectionManager::new_with_config(client.clone(), config.clone()),
            )
            .await?;
            conns.push(Conn::Single(manager));
        }
        Ok(Self::from_conns(conns, options.timeout))
    }

    /// Connects to a Redis Cluster through any of its seed nodes.
    pub async fn cluster(nodes: &[String], options: RedisOptions) -> Result<Self, Error> {
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(options.timeout)
            .response_timeout(options.timeout)
            .retries(1)
            .build()?;
        let mut conns = Vec::with_capacity(options.connections.max(1));
        for _ in 0..options.connections.max(1) {
            conns.push(Conn::Cluster(
                within(options.timeout * 4, client.get_async_connection()).await?,
            ));
        }
        Ok(Self::from_conns(conns, options.timeout))
    }

    fn from_conns(conns: Vec<Conn>, timeout: Duration) -> Self {
        Self {
            conns: conns.into(),
            next: Arc::new(AtomicUsize::new(0)),
            timeout,
        }
    }

    /// Whether this is a Redis Cluster (commands are routed by slot).
    pub fn is_cluster(&self) -> bool {
        matches!(self.conns.first(), Some(Conn::Cluster(_)))
    }

    /// Sends one command on the next connection of the pool and waits at most the
    /// configured deadline for its reply.
    ///
    /// When the connection turns out to be dead (Redis restarted, the socket was reset) the
    /// connection manager reconnects and the command is sent once more. That second send can
    /// double a consumption only if the first reached Redis and its reply was lost with the
    /// connection, which is rare and errs by one request; surfacing every restart as a
    /// failed check would be worse.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        let result = self.query_on(i, cmd).await;
        match &result {
            Err(Error::Redis { source, .. })
                if source.is_connection_dropped() || source.is_io_error() =>
            {
                self.query_on(i, cmd).await
            }
            _ => result,
        }
    }

    async fn query_on<T: redis::FromRedisValue>(
        &self,
        i: usize,
        cmd: &redis::Cmd,
    ) -> Result<T, Error> {
        match &self.conns[i] {
            Conn::Single(conn) => within(self.timeout, cmd.query_async(&mut conn.clone())).await,
            Conn::Cluster(conn) => within(self.timeout, cmd.query_async(&mut conn.clone())).await,
        }
    }

    /// Sends a pipeline (every key in one Cluster slot) within the configured deadline.
    pub async fn pipeline<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, Error> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        match &self.conns[i] {
            Conn::Single(conn) => within(self.timeout, pipe.query_async(&mut conn.clone())).await,
            Conn::Cluster(conn) => within(self.timeout, pipe.query_async(&mut conn.clone())).await,
        }
    }

    pub async fn ping(&self) -> Result<(), Error> {
        let _: String = self.query(&redis::cmd("PING")).await?;
        Ok(())
    }

    /// Runs `script` (whose text is `source`) with the arguments `args` writes after the
    /// script: `EVALSHA`, and once more as `EVAL` when Redis answers `NOSCRIPT` (after a
    /// restart or `SCRIPT FLUSH`), which also loads it again; the caller never sees the error.
    pub async fn run_script<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        source: &str,
        args: impl Fn(&mut redis::Cmd),
    ) -> Result<T, Error> {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.get_hash());
        args(&mut evalsha);
        match self.query(&evalsha).await {
            Err(Error::Redis { source: e, .. }) if e.kind() == redis::ErrorKind::NoScriptError => {
                let mut eval = redis::cmd("EVAL");
                eval.arg(source);
                args(&mut eval);
                self.query(&eval).await
            }
            other => other,
        }
    }
}

/// Awaits `fut` for at most `deadline`.
async fn within<T>(
    deadline: Duration,
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, Error> {
    match tokio::time::timeout(deadline, fut).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(Error::Timeout(deadline)),
    }
}
