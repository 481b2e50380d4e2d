//! The Redis backend: a few multiplexed connections to one server, or cluster connections
//! that route each command to the master owning its slot. Every command has a deadline.
//!
//! A check is one `EVALSHA` of `lua/check.lua`. After a Redis restart or `SCRIPT FLUSH` the
//! server answers `NOSCRIPT`; the check is then sent once more as `EVAL` with the source,
//! which also reloads the script, so the caller never sees the error.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use app::rules::model::{Decision, Verdict};
use app::rules::Algorithm;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::Value;

use super::{BackendKind, CheckOutcome, CheckRequest, LimiterError, RedisOptions, REQUEST_ID_TTL};

/// The check script, hashed once.
static CHECK: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(CHECK_SOURCE));
const CHECK_SOURCE: &str = include_str!("../../../lua/check.lua");

/// A pool of connections to Redis that survive restarts of the server: each reconnects on
/// its own.
#[derive(Clone)]
pub struct RedisBackend {
    conns: Arc<[Conn]>,
    next: Arc<AtomicUsize>,
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
            .field("connections", &self.conns.len())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RedisBackend {
    /// Connects to one Redis server.
    pub async fn single(url: &str, options: RedisOptions) -> Result<Self, LimiterError> {
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
    pub async fn cluster(nodes: &[String], options: RedisOptions) -> Result<Self, LimiterError> {
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

    pub fn kind(&self) -> BackendKind {
        match self.conns.first() {
            Some(Conn::Cluster(_)) => BackendKind::RedisCluster,
            _ => BackendKind::Redis,
        }
    }

    /// Sends one command on the next connection of the pool and waits at most the
    /// configured deadline for its reply.
    ///
    /// When the connection turns out to be dead (Redis restarted, the socket was reset) the
    /// connection manager reconnects and the command is sent once more. That second send can
    /// double a consumption only if the first reached Redis and its reply was lost with the
    /// connection, which is rare and errs by one request; surfacing every restart as a
    /// failed check would be worse.
    pub async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, LimiterError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        let result = self.query_on(i, cmd).await;
        match &result {
            Err(LimiterError::Redis { source, .. })
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
    ) -> Result<T, LimiterError> {
        match &self.conns[i] {
            Conn::Single(conn) => within(self.timeout, cmd.query_async(&mut conn.clone())).await,
            Conn::Cluster(conn) => within(self.timeout, cmd.query_async(&mut conn.clone())).await,
        }
    }

    /// Sends a pipeline (every key in one Cluster slot) within the configured deadline;
    /// for the dashboards' series, which are not on the check path.
    pub async fn pipeline<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, LimiterError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        match &self.conns[i] {
            Conn::Single(conn) => within(self.timeout, pipe.query_async(&mut conn.clone())).await,
            Conn::Cluster(conn) => within(self.timeout, pipe.query_async(&mut conn.clone())).await,
        }
    }

    pub async fn ping(&self) -> Result<(), LimiterError> {
        let _: String = self.query(&redis::cmd("PING")).await?;
        Ok(())
    }

    /// Runs the check script: `EVALSHA`, or `EVAL` when Redis has lost the script.
    pub async fn check(&self, request: &CheckRequest) -> Result<CheckOutcome, LimiterError> {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(CHECK.get_hash());
        add_script_args(&mut evalsha, request);
        let reply: Value = match self.query(&evalsha).await {
            Err(LimiterError::Redis { source, .. })
                if source.kind() == redis::ErrorKind::NoScriptError =>
            {
                let mut eval = redis::cmd("EVAL");
                eval.arg(CHECK_SOURCE);
                add_script_args(&mut eval, request);
                self.query(&eval).await?
            }
            other => other?,
        };
        parse_reply(reply, request)
    }
}

/// The SHA1 of the check script, as `SCRIPT EXISTS` and `EVALSHA` name it.
pub fn check_script_sha() -> &'static str {
    CHECK.get_hash()
}

fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::TokenBucket => 1,
        Algorithm::Gcra => 2,
        Algorithm::LeakyBucket => 3,
        Algorithm::FixedWindow => 4,
        Algorithm::SlidingWindow => 5,
        Algorithm::SlidingLog => 6,
    }
}

/// `numkeys KEYS… ARGV…` as documented in the script's header.
fn add_script_args(cmd: &mut redis::Cmd, request: &CheckRequest) {
    let n = request.rules.len();
    let reply_key = request.reply_key();
    let now_ms = request.now_ms.unwrap_or_else(crate::store::now_ms);
    cmd.arg(n + 2);
    for rule in &request.rules {
        cmd.arg(&rule.key);
    }
    cmd.arg(reply_key).arg(super::keys::active(
        &request.tenant,
        now_ms.div_euclid(60_000),
    ));
    match request.now_ms {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    // The script reads a negative TTL as a dry run (validation forbids a request_id then).
    let dedup_ttl: i64 = if request.dry_run {
        -1
    } else if request.request_id.is_some() {
        REQUEST_ID_TTL.as_millis() as i64
    } else {
        0
    };
    cmd.arg(dedup_ttl).arg(n);
    for rule in &request.rules {
        cmd.arg(algorithm_code(rule.spec.algorithm))
            .arg(rule.spec.limit)
            .arg(rule.spec.period_ms)
            .arg(rule.spec.capacity())
            .arg(rule.cost)
            .arg(u8::from(rule.spec.penalty))
            .arg(u8::from(rule.shadow));
    }
}

fn parse_reply(reply: Value, request: &CheckRequest) -> Result<CheckOutcome, LimiterError> {
    let bad = |what: &str| LimiterError::Protocol(what.to_owned());
    let Value::Array(items) = reply else {
        return Err(bad("not an array"));
    };
    let n = request.rules.len();
    if items.len() != 3 + 4 * n {
        return Err(bad(&format!("{} items for {n} rules", items.len())));
    }
    let int = |v: &Value| match v {
        Value::Int(i) => Ok(*i),
        _ => Err(bad("expected an integer")),
    };
    let float = |v: &Value| match v {
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| bad("expected a number")),
        _ => Err(bad("expected a string")),
    };
    let mut decisions = Vec::with_capacity(n);
    for (i, rule) in request.rules.iter().enumerate() {
        let at = 3 + 4 * i;
        let verdict = match int(&items[at])? {
            1 => Verdict::Allow,
            0 => Verdict::Deny,
            -1 => Verdict::NeverFits,
            other => return Err(bad(&format!("verdict {other}"))),
        };
        decisions.push(Decision {
            verdict,
            limit: rule.spec.limit,
            remaining: float(&items[at + 1])?,
            reset_after_ms: u64::try_from(int(&items[at + 2])?)
                .map_err(|_| bad("negative reset"))?,
            retry_after_ms: u64::try_from(int(&items[at + 3])?)
                .map_err(|_| bad("negative retry"))?,
        });
    }
    Ok(CheckOutcome {
        deduplicated: int(&items[0])? == 1,
        now_ms: int(&items[1])?,
        allowed: int(&items[2])? == 1,
        decisions,
    })
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
