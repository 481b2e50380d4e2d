//! The one Redis client of an instance: a few multiplexed connections to one server, or
//! cluster connections that route each command to the master owning its slot; one deadline
//! per call that covers every attempt of it (the `EVAL` after a `NOSCRIPT`, the resend after
//! a reconnect); a circuit breaker per node ([`breaker`]); scripts run as `EVALSHA` with the
//! `EVAL` fallback. The limiter, the
//! dashboards' series and the propagation of admin changes all talk to Redis through it, and
//! [`keys`] builds every key they use.

pub mod breaker;
pub mod keys;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use breaker::{Breaker, Pass};

use crate::hashing::FastMap;

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
    /// The node's circuit breaker is open: not called at all.
    #[error("redis node {0} is failing; its circuit breaker is open")]
    BreakerOpen(String),
}

impl Error {
    /// Whether the same call could succeed later.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Redis { transient, .. } => *transient,
            Error::Timeout(_) | Error::BreakerOpen(_) => true,
        }
    }
}

impl Error {
    /// The same failure, once more: each check of a batch gets its call's failure.
    pub fn duplicate(&self) -> Self {
        match self {
            Error::Redis { source, transient } => Error::Redis {
                source: redis::RedisError::from((
                    source.kind(),
                    "the batch of checks failed",
                    source.to_string(),
                )),
                transient: *transient,
            },
            Error::Timeout(deadline) => Error::Timeout(*deadline),
            Error::BreakerOpen(node) => Error::BreakerOpen(node.clone()),
        }
    }

    /// A call cut short because the server is stopping (transient, as a dropped connection).
    pub fn stopping() -> Self {
        redis::RedisError::from((redis::ErrorKind::IoError, "the server is stopping")).into()
    }

    /// An error a script raised for one check of a batch (a key of another type, say).
    pub fn script(message: String) -> Self {
        Error::Redis {
            source: redis::RedisError::from((
                redis::ErrorKind::ResponseError,
                "the check script failed",
                message,
            )),
            transient: false,
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
    /// The runtime the client was made on (the server's, where checks run). A command sent
    /// from another runtime (the console's) runs as a task of this one, so a connection it has
    /// to make again is driven by the check path's threads, never by the console's
    /// lower-priority ones.
    home: tokio::runtime::Handle,
    next: Arc<AtomicUsize>,
    timeout: Duration,
    nodes: Arc<Nodes>,
}

/// The nodes of a client and their breakers. A single Redis is one node, `redis`; a Cluster's
/// nodes are its masters, found from `CLUSTER SLOTS` (read again every [`SLOTS_EVERY`]).
#[derive(Debug, Default)]
struct Nodes {
    /// (first slot, last slot, master "host:port"), by first slot.
    slots: RwLock<Vec<(u16, u16, String)>>,
    slots_read: Mutex<Option<Instant>>,
    reading: AtomicBool,
    // Keyed by node address, which no client chooses: foldhash (`crate::hashing`).
    breakers: Mutex<FastMap<String, Arc<Breaker>>>,
    /// Calls answered at once because their node's breaker was open.
    refused: std::sync::atomic::AtomicU64,
}

/// How often a Cluster client reads its slot map again (a failover moves slots).
const SLOTS_EVERY: Duration = Duration::from_secs(5);
/// The node of a single Redis, and of a Cluster slot not mapped yet.
const SINGLE_NODE: &str = "redis";
const UNMAPPED_NODE: &str = "cluster";

impl Nodes {
    fn breaker(&self, node: &str) -> Arc<Breaker> {
        let mut breakers = self
            .breakers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Every call looks its breaker up: no allocation once the node is known.
        if let Some(breaker) = breakers.get(node) {
            return breaker.clone();
        }
        breakers
            .entry(node.to_owned())
            .or_insert_with(|| Arc::new(Breaker::new(node)))
            .clone()
    }

    fn node_of_slot(&self, slot: u16) -> Option<String> {
        let slots = self
            .slots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, node)| node.clone())
    }

    fn slots_due(&self) -> bool {
        let read = self
            .slots_read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        read.is_none_or(|at| at.elapsed() >= SLOTS_EVERY)
    }
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// What one query sends.
#[derive(Clone, Copy)]
enum Sent<'a> {
    Cmd(&'a redis::Cmd),
    Pipeline(&'a redis::Pipeline),
}

/// A [`Sent`] of its own, to move into a task.
enum OwnedSent {
    Cmd(redis::Cmd),
    Pipeline(redis::Pipeline),
}

impl Sent<'_> {
    fn to_owned(self) -> OwnedSent {
        match self {
            Sent::Cmd(cmd) => OwnedSent::Cmd(cmd.clone()),
            Sent::Pipeline(pipe) => OwnedSent::Pipeline(pipe.clone()),
        }
    }
}

impl OwnedSent {
    fn as_sent(&self) -> Sent<'_> {
        match self {
            OwnedSent::Cmd(cmd) => Sent::Cmd(cmd),
            OwnedSent::Pipeline(pipe) => Sent::Pipeline(pipe),
        }
    }
}

impl Conn {
    /// Sends `sent` and waits for its reply until `deadline`.
    async fn query<T: redis::FromRedisValue>(
        &self,
        sent: Sent<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<redis::RedisResult<T>, tokio::time::error::Elapsed> {
        let reply = async {
            match (self, sent) {
                (Conn::Single(conn), Sent::Cmd(cmd)) => cmd.query_async(&mut conn.clone()).await,
                (Conn::Cluster(conn), Sent::Cmd(cmd)) => cmd.query_async(&mut conn.clone()).await,
                (Conn::Single(conn), Sent::Pipeline(pipe)) => {
                    pipe.query_async(&mut conn.clone()).await
                }
                (Conn::Cluster(conn), Sent::Pipeline(pipe)) => {
                    pipe.query_async(&mut conn.clone()).await
                }
            }
        };
        tokio::time::timeout_at(deadline, reply).await
    }
}

impl std::fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("cluster", &self.is_cluster())
            .field("connections", &self.conns.len())
            .field("timeout", &self.timeout)
            .field("open_breakers", &self.open_breakers())
            .finish()
    }
}

impl RedisClient {
    /// Connects to one Redis server.
    pub async fn single(url: &str, options: RedisOptions) -> Result<Self, Error> {
        let client = redis::Client::open(url)?;
        // No retry inside the connection manager: a retry waits out its backoff first (1 to
        // 2 s for the first), and every command sent on the connection meanwhile waits with
        // it, past its deadline, and fails. With none, a failed reconnect ends at once, the
        // next command on the connection starts another, and `send` tries it again: once Redis
        // is back, each connection reconnects on its next command. While Redis is down, the
        // breaker paces the attempts. Test (redis_failure.rs):
        // `once_a_restarted_redis_decides_again_no_check_gets_its_failure_mode`.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(options.timeout)
            .set_response_timeout(options.timeout)
            .set_number_of_retries(0);
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
            home: tokio::runtime::Handle::current(),
            next: Arc::new(AtomicUsize::new(0)),
            timeout,
            nodes: Arc::default(),
        }
    }

    /// Names every connection of a single Redis's pool (`CLIENT SETNAME`), so `CLIENT LIST`
    /// and `MONITOR` tell its commands apart; a Cluster's connections keep no name. A name
    /// is lost when a connection is made again.
    pub async fn set_name(&self, name: &str) {
        if self.is_cluster() {
            return;
        }
        for i in 0..self.conns.len() {
            let deadline = tokio::time::Instant::now() + self.timeout;
            let mut cmd = redis::cmd("CLIENT");
            cmd.arg("SETNAME").arg(name);
            if let Err(e) = self.send_on::<()>(i, &cmd, deadline).await {
                tracing::debug!(error = %e, name, "cannot name a Redis connection");
            }
        }
    }

    /// The deadline of one call (every attempt of it together).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Every node seen so far and whether its breaker is open.
    pub fn breakers(&self) -> Vec<(String, bool)> {
        let breakers = self
            .nodes
            .breakers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut all: Vec<(String, bool)> = breakers
            .values()
            .map(|b| (b.node().to_owned(), b.is_open()))
            .collect();
        all.sort();
        all
    }

    /// How many calls were answered at once, without Redis, because a breaker was open.
    pub fn refused(&self) -> u64 {
        self.nodes.refused.load(Ordering::Relaxed)
    }

    /// The nodes whose breakers are open now.
    pub fn open_breakers(&self) -> Vec<String> {
        let breakers = self
            .nodes
            .breakers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut open: Vec<String> = breakers
            .values()
            .filter(|b| b.is_open())
            .map(|b| b.node().to_owned())
            .collect();
        open.sort();
        open
    }

    /// The breaker of the node that holds `key` (a single Redis has one node).
    fn breaker_for(&self, key: Option<&str>) -> Arc<Breaker> {
        if !self.is_cluster() {
            return self.nodes.breaker(SINGLE_NODE);
        }
        if self.nodes.slots_due() && !self.nodes.reading.swap(true, Ordering::AcqRel) {
            let client = self.clone();
            self.home.spawn(async move {
                match client.shard_map().await {
                    Ok(Some(map)) => {
                        *client
                            .nodes
                            .slots
                            .write()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = map;
                        *client
                            .nodes
                            .slots_read
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(Instant::now());
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!(error = %e, "cannot read the Cluster's slots"),
                }
                client.nodes.reading.store(false, Ordering::Release);
            });
        }
        let node = key
            .and_then(|k| self.nodes.node_of_slot(keys::slot(k)))
            .unwrap_or_else(|| UNMAPPED_NODE.to_owned());
        self.nodes.breaker(&node)
    }

    /// Runs `task` on the client's own runtime (the check path's).
    pub fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.home.spawn(task);
    }

    /// Whether this is a Redis Cluster (commands are routed by slot).
    pub fn is_cluster(&self) -> bool {
        matches!(self.conns.first(), Some(Conn::Cluster(_)))
    }

    /// Sends one command (routed by its first key on a Cluster; `route_key` names it for the
    /// node's breaker) and waits at most the client's deadline for its reply.
    pub async fn query<T: redis::FromRedisValue + Send + 'static>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, Error> {
        self.query_routed(cmd, None).await
    }

    /// [`RedisClient::query`] for a command whose first key is `route_key`.
    pub async fn query_routed<T: redis::FromRedisValue + Send + 'static>(
        &self,
        cmd: &redis::Cmd,
        route_key: Option<&str>,
    ) -> Result<T, Error> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.guarded(route_key, 1, || self.send(cmd, deadline))
            .await
    }

    /// Runs `call` through the breaker of `route_key`'s node: refused at once while it is
    /// open (but for its probe), and its outcome recorded. `calls`: how many calls it stands
    /// for (the checks of a batch), for the breaker's count of failures and the count of
    /// refused calls.
    async fn guarded<T, F>(
        &self,
        route_key: Option<&str>,
        calls: u32,
        call: impl FnOnce() -> F,
    ) -> Result<T, Error>
    where
        F: std::future::Future<Output = Result<T, Error>>,
    {
        let breaker = self.breaker_for(route_key);
        let pass = breaker.pass(Instant::now());
        if pass == Pass::Refused {
            self.nodes
                .refused
                .fetch_add(u64::from(calls), Ordering::Relaxed);
            return Err(Error::BreakerOpen(breaker.node().to_owned()));
        }
        let result = call().await;
        let reached = match &result {
            Ok(_) => true,
            Err(e) => !e.is_transient(),
        };
        breaker.record(pass, reached, calls, Instant::now());
        if pass == Pass::Probe && reached && self.conns.len() > 1 {
            // Redis is back: let every connection of the pool reconnect now, off the check
            // path, rather than one failed check each.
            let client = self.clone();
            self.home.spawn(async move { client.reconnect_all().await });
        }
        result
    }

    /// Sends `PING` on every connection of the pool (each reconnects if it must).
    async fn reconnect_all(&self) {
        for i in 0..self.conns.len() {
            let deadline = tokio::time::Instant::now() + self.timeout;
            let _: Result<String, Error> = self.send_on(i, &redis::cmd("PING"), deadline).await;
        }
    }

    /// Sends `cmd` on the next connection of the pool, by `deadline`.
    ///
    /// When the connection turns out to be dead (Redis restarted, the socket was reset) its
    /// connection manager reconnects, and the command is sent once more on it, then on each
    /// other connection of the pool, all within the same deadline. A script call that changes
    /// counters carries an idempotency id (see `lua/check.lua`), so that second send cannot
    /// consume twice.
    async fn send<T: redis::FromRedisValue + Send + 'static>(
        &self,
        cmd: &redis::Cmd,
        deadline: tokio::time::Instant,
    ) -> Result<T, Error> {
        self.send_again_as(cmd, || None, deadline).await
    }

    /// [`RedisClient::send`], but a send after the first uses the command `again` builds
    /// (once), when it builds one: a script call that may already have run says so, and only
    /// then pays for looking its record up.
    async fn send_again_as<T: redis::FromRedisValue + Send + 'static>(
        &self,
        cmd: &redis::Cmd,
        again: impl FnOnce() -> Option<redis::Cmd>,
        deadline: tokio::time::Instant,
    ) -> Result<T, Error> {
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        // The same connection once more (its manager has reconnected it), then each other
        // connection of the pool in turn: after a restart they reconnect one by one.
        let mut attempts = std::iter::once(first).chain((0..self.conns.len()).map(|k| first + k));
        let mut result = Err(Error::Timeout(self.timeout));
        if let Some(i) = attempts.next() {
            result = self.send_on(i % self.conns.len(), cmd, deadline).await;
        }
        let mut again = Some(again);
        let mut resent = None;
        for i in attempts {
            match &result {
                Err(Error::Redis { source, .. })
                    if source.is_connection_dropped() || source.is_io_error() => {}
                _ => break,
            }
            if let Some(build) = again.take() {
                resent = build();
            }
            let cmd = resent.as_ref().unwrap_or(cmd);
            result = self.send_on(i % self.conns.len(), cmd, deadline).await;
        }
        result
    }

    async fn send_on<T: redis::FromRedisValue + Send + 'static>(
        &self,
        i: usize,
        cmd: &redis::Cmd,
        deadline: tokio::time::Instant,
    ) -> Result<T, Error> {
        self.query_on(i, Sent::Cmd(cmd), deadline).await
    }

    /// Sends `sent` on connection `i` and waits for its reply until `deadline`: here, or as a
    /// task of the client's own runtime when called from another one.
    async fn query_on<T: redis::FromRedisValue + Send + 'static>(
        &self,
        i: usize,
        sent: Sent<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<T, Error> {
        let reply = if self.away_from_home() {
            let (conn, owned) = (self.conns[i].clone(), sent.to_owned());
            let task = self
                .home
                .spawn(async move { conn.query(owned.as_sent(), deadline).await });
            at_home(task).await
        } else {
            self.conns[i].query(sent, deadline).await
        };
        match reply {
            Ok(result) => Ok(result?),
            Err(_) => Err(Error::Timeout(self.timeout)),
        }
    }

    /// Whether the caller runs on another runtime than the client's own.
    fn away_from_home(&self) -> bool {
        tokio::runtime::Handle::try_current().is_ok_and(|here| here.id() != self.home.id())
    }

    /// Sends a pipeline (every key in one Cluster slot) within the configured deadline.
    pub async fn pipeline<T: redis::FromRedisValue + Send + 'static>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, Error> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.guarded(None, 1, || self.query_on(i, Sent::Pipeline(pipe), deadline))
            .await
    }

    /// One `PING`, past the breakers (for `/readyz`, which reports open breakers apart).
    pub async fn ping(&self) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let _: String = self.send(&redis::cmd("PING"), deadline).await?;
        Ok(())
    }

    /// Runs `script` (whose text is `source`) with the arguments `args` writes after the
    /// script: `EVALSHA`, and once more as `EVAL` when Redis answers `NOSCRIPT` (after a
    /// restart or `SCRIPT FLUSH`), which also loads it again; the caller never sees the error.
    /// `route_key` is the script's first key: its node's breaker guards the call, and one
    /// deadline covers both sends.
    pub async fn run_script<T: redis::FromRedisValue + Send + 'static>(
        &self,
        script: &redis::Script,
        source: &str,
        route_key: &str,
        args: impl Fn(&mut redis::Cmd),
    ) -> Result<T, Error> {
        self.run_script_as(script, source, route_key, 1, (0, 0), |cmd, _| args(cmd))
            .await
    }

    /// [`RedisClient::run_script`] for one call that stands for `calls` (a batch of checks):
    /// the breaker counts its failure, and a refusal, that many times. `room` is how many
    /// arguments `args` writes and their bytes, so the command is allocated once (a batch's
    /// dozens of arguments would otherwise grow it several times). `args` is told which
    /// [`Attempt`] it writes: a send after a lost connection, or the `EVAL` after `NOSCRIPT`, is
    /// [`Attempt::Again`], since an earlier send may have run.
    pub async fn run_script_as<T: redis::FromRedisValue + Send + 'static>(
        &self,
        script: &redis::Script,
        source: &str,
        route_key: &str,
        calls: u32,
        (arg_count, arg_bytes): (usize, usize),
        args: impl Fn(&mut redis::Cmd, Attempt),
    ) -> Result<T, Error> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.guarded(Some(route_key), calls, || async {
            // EVALSHA and the script's SHA1 (40 hex digits) lead the arguments.
            let evalsha = |send| {
                let mut evalsha = redis::Cmd::with_capacity(arg_count + 2, arg_bytes + 48);
                evalsha.arg("EVALSHA").arg(script.get_hash());
                args(&mut evalsha, send);
                evalsha
            };
            let first = evalsha(Attempt::First);
            match self
                .send_again_as(&first, || Some(evalsha(Attempt::Again)), deadline)
                .await
            {
                Err(Error::Redis { source: e, .. })
                    if e.kind() == redis::ErrorKind::NoScriptError =>
                {
                    let mut eval =
                        redis::Cmd::with_capacity(arg_count + 2, arg_bytes + source.len() + 4);
                    eval.arg("EVAL").arg(source);
                    // A send before this one may have run, on a Redis that has lost its
                    // scripts since (a failover to a replica that never loaded them).
                    args(&mut eval, Attempt::Again);
                    self.send(&eval, deadline).await
                }
                other => other,
            }
        })
        .await
    }

    /// Cluster slot → master ("host:port"), read with `CLUSTER SLOTS`; `None` on a single
    /// Redis.
    pub async fn shard_map(&self) -> Result<Option<Vec<(u16, u16, String)>>, Error> {
        if !self.is_cluster() {
            return Ok(None);
        }
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let deadline = tokio::time::Instant::now() + self.timeout;
        let reply: redis::Value = self.send(&cmd, deadline).await?;
        let mut ranges = Vec::new();
        if let redis::Value::Array(entries) = reply {
            for entry in entries {
                let redis::Value::Array(parts) = entry else {
                    continue;
                };
                let (Some(redis::Value::Int(start)), Some(redis::Value::Int(end))) =
                    (parts.first(), parts.get(1))
                else {
                    continue;
                };
                let Some(redis::Value::Array(master)) = parts.get(2) else {
                    continue;
                };
                let host = match master.first() {
                    Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => continue,
                };
                let port = match master.get(1) {
                    Some(redis::Value::Int(p)) => *p,
                    _ => continue,
                };
                ranges.push((*start as u16, *end as u16, format!("{host}:{port}")));
            }
        }
        ranges.sort();
        Ok(Some(ranges))
    }
}

/// Which send of a script call a command is ([`RedisClient::run_script_as`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The first: nothing of this call can have run yet.
    First,
    /// A later one (after a lost connection, or `NOSCRIPT`): an earlier send may have run and
    /// only its reply been lost.
    Again,
}

/// The result of a command run as a task of the client's own runtime: a panic there is
/// this call's panic; a task cancelled because the runtime is stopping is a dropped
/// connection.
async fn at_home<T>(
    task: tokio::task::JoinHandle<Result<redis::RedisResult<T>, tokio::time::error::Elapsed>>,
) -> Result<redis::RedisResult<T>, tokio::time::error::Elapsed> {
    match task.await {
        Ok(reply) => reply,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Ok(Err(redis::RedisError::from((
            redis::ErrorKind::IoError,
            "the server is stopping",
        )))),
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
