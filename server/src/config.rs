//! Typed configuration: every setting is a flag and an environment variable, and a bad value
//! stops start-up with a message that says which setting is wrong.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Server settings. Everything has a default that gives a working embedded instance.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address of the console, `/v1/*`, `/healthz` and `/readyz`. Port 0 picks a free port.
    #[arg(long, env = "SLUICE_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,

    /// A separate listener for `/metrics`, for deployments that keep metrics off the public
    /// port. When unset, `/metrics` is served on the main listener.
    #[arg(long, env = "SLUICE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Serve Envoy's rate limit service (gRPC `ShouldRateLimit`, RLS v3) on this address.
    /// Unset: no gRPC listener.
    #[arg(long, env = "SLUICE_GRPC_LISTEN")]
    pub grpc_listen: Option<SocketAddr>,

    /// Where the embedded mode keeps its SQLite file and other local state.
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,

    /// The configuration store: `postgres://…` for the distributed mode. Defaults to
    /// `sqlite://$SLUICE_DATA_DIR/sluice.db`, which needs no setup.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,

    /// One Redis for the counters (`redis://host:port/db`). When neither this nor
    /// `--redis-cluster-nodes` is set, the limiter runs in-process (one instance only).
    #[arg(long, env = "REDIS_URL", conflicts_with = "redis_cluster_nodes")]
    pub redis_url: Option<String>,

    /// Seed nodes of a Redis Cluster, comma-separated (`redis://10.0.0.1:6379,…`).
    #[arg(long, env = "REDIS_CLUSTER_NODES", value_delimiter = ',')]
    pub redis_cluster_nodes: Vec<String>,

    /// How long a Redis command may take before the limiter gives up and applies the rule's
    /// failure mode. Keep it well below your callers' own timeouts.
    #[arg(long, env = "SLUICE_REDIS_TIMEOUT_MS", default_value_t = 250)]
    pub redis_timeout_ms: u64,

    /// Multiplexed Redis connections per instance. One connection carries many concurrent
    /// checks; a few spread the load over Redis's I/O and the client's tasks.
    #[arg(long, env = "SLUICE_REDIS_CONNECTIONS", default_value_t = 4)]
    pub redis_connections: usize,

    /// How buckets are stored on Redis: `packed` (a string of numbers, one command a rule
    /// fewer) or `hash` (the only layout that builds of Sluice before packed buckets read).
    /// This build reads both. While a fleet still runs instances of such an earlier build, run
    /// the new ones with `hash`; once none is left, switch to `packed` (docs/ARCHITECTURE.md,
    /// "Bucket layouts").
    #[arg(long, env = "SLUICE_REDIS_BUCKET_LAYOUT", value_enum, default_value_t = BucketLayout::Packed)]
    pub redis_bucket_layout: BucketLayout,

    /// Mark the console's session cookie `Secure`. Set it when people reach Sluice over
    /// HTTPS, directly or through a TLS-terminating proxy.
    #[arg(long, env = "SLUICE_SECURE_COOKIES", default_value_t = false)]
    pub secure_cookies: bool,

    /// The password of the operator account an embedded instance creates on its first start
    /// (`admin@localhost`). When unset a random one is generated and printed once.
    #[arg(long, env = "SLUICE_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,

    /// The longest a client may take to send a request's headers, counted from its
    /// connection's start or from the end of its previous response; a slower client (or an
    /// idle keep-alive connection) is closed.
    #[arg(long, env = "SLUICE_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,

    /// A connection that moves no byte either way for this long is closed, even in the middle
    /// of a request (a stalled body, a response nobody reads).
    #[arg(long, env = "SLUICE_IDLE_TIMEOUT_MS", default_value_t = 60_000)]
    pub idle_timeout_ms: u64,

    /// The most connections an instance holds open; past it a new connection is answered
    /// `503` with `Retry-After: 1` and closed. Keep it below the process's file-descriptor
    /// limit (`ulimit -n`).
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,

    /// Proxies (load balancers) whose `X-Forwarded-For` tells who the client is, as addresses
    /// or blocks, comma-separated (`10.0.0.0/8,fd00::/8`). Unset: every client is the socket's
    /// peer, and behind a proxy all clients share its address for the per-client sign-in
    /// budget.
    #[arg(long, env = "SLUICE_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<String>,

    /// How many console sign-ins may hash a password (argon2id, 19 MiB each) at once; the rest
    /// wait a little, then are told to retry. Defaults to half the machine's cores (at least 1),
    /// so sign-ins never take every core from `/v1/check`.
    #[arg(long, env = "SLUICE_SIGN_IN_CONCURRENCY")]
    pub sign_in_concurrency: Option<usize>,

    /// Console sign-ins attempted per second on this instance, from everyone together; past
    /// it an attempt is refused at once (429) before any password is hashed. Lower it on a
    /// small machine to keep the hashes' load off `/v1/check`.
    #[arg(long, env = "SLUICE_SIGN_IN_RATE", default_value_t = 10)]
    pub sign_in_rate: u64,

    /// Log format: `text` for people, `json` for log pipelines.
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The built console (WASM, JS and CSS) produced by `cargo leptos build`; `cargo leptos`
    /// sets it for you.
    #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
    pub site_root: PathBuf,
}

/// Output format of the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// How a bucket of the algorithms whose state is a few numbers (all but `sliding_log` and
/// `concurrency`, which are sorted sets) is stored on Redis. The scripts read both layouts,
/// whichever they write, so instances of this version may switch at any time; instances of
/// earlier versions read only hashes (docs/ARCHITECTURE.md, "Bucket layouts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum BucketLayout {
    /// A string of the state's numbers as little-endian doubles, written with one `SET … PX`:
    /// a command a rule fewer than the hash, and no number printed or parsed.
    #[default]
    Packed,
    /// A hash of the state's fields, written with `HSET` and `PEXPIRE`, each number printed in
    /// decimal: the only layout of earlier versions, for a fleet that still runs some.
    Hash,
}

impl BucketLayout {
    /// The word the scripts take (the batch's `ARGV[6]`, the settle's `ARGV[5]`).
    pub(crate) fn word(self) -> &'static str {
        match self {
            BucketLayout::Packed => "packed",
            BucketLayout::Hash => "hash",
        }
    }
}

/// Where the counters live, derived from the Redis settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimiterTarget {
    InProcess,
    Redis(String),
    Cluster(Vec<String>),
}

impl Config {
    /// A configuration with every default, for tests and embedding.
    pub fn embedded(data_dir: PathBuf) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics_listen: None,
            grpc_listen: None,
            data_dir,
            database_url: None,
            redis_url: None,
            redis_cluster_nodes: Vec::new(),
            redis_timeout_ms: 250,
            redis_connections: 4,
            redis_bucket_layout: BucketLayout::Packed,
            secure_cookies: false,
            admin_password: None,
            header_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            max_connections: 10_000,
            sign_in_concurrency: None,
            trusted_proxies: Vec::new(),
            sign_in_rate: 10,
            log_format: LogFormat::Text,
            site_root: PathBuf::from("target/site"),
        }
    }

    /// The database URL in force: the explicit one, or the SQLite file in the data directory.
    pub fn database_url(&self) -> String {
        match &self.database_url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.data_dir.join("sluice.db").display()),
        }
    }

    /// Where the counters live.
    pub fn limiter_target(&self) -> LimiterTarget {
        if let Some(url) = &self.redis_url {
            LimiterTarget::Redis(url.clone())
        } else if !self.redis_cluster_nodes.is_empty() {
            LimiterTarget::Cluster(self.redis_cluster_nodes.clone())
        } else {
            LimiterTarget::InProcess
        }
    }

    /// How many sign-ins may hash a password at once.
    pub fn sign_in_concurrency(&self) -> usize {
        self.sign_in_concurrency.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
        })
    }

    /// Embedded mode: no external service at all.
    pub fn is_embedded(&self) -> bool {
        self.database_url.is_none() && self.limiter_target() == LimiterTarget::InProcess
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The settings alone, as the `sluice` command line carries them.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("sluice").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_give_an_embedded_instance() {
        let cli = parse(&[]).expect("defaults parse");
        assert!(cli.config.is_embedded());
        assert_eq!(cli.config.listen.to_string(), "127.0.0.1:3000");
        assert_eq!(cli.config.database_url(), "sqlite://./data/sluice.db");
        assert_eq!(cli.config.limiter_target(), LimiterTarget::InProcess);
    }

    #[test]
    fn cluster_nodes_are_comma_separated() {
        let cli = parse(&["--redis-cluster-nodes", "redis://a:1,redis://b:2"]).expect("parse");
        assert_eq!(
            cli.config.limiter_target(),
            LimiterTarget::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
    }

    #[test]
    fn redis_url_and_cluster_nodes_conflict() {
        let err = parse(&[
            "--redis-url",
            "redis://a",
            "--redis-cluster-nodes",
            "redis://b",
        ])
        .expect_err("both must be refused");
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn a_bad_listen_address_is_refused() {
        let err = parse(&["--listen", "not-an-address"]).expect_err("must be refused");
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
    }
}
