//! Spawning real server instances on port 0, and configurations for each mode.

use std::net::SocketAddr;

use app::keys::{display_prefix, format_key, KeyKind};
use rand::RngCore;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use sluice::config::Config;
use sluice::dashboard::Dashboard;
use sluice::startup::Application;
use sluice::store::Db;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A browser on the console's own pages: it keeps cookies and, like a real browser calling
/// its own origin, says `Sec-Fetch-Site: same-origin` (the server refuses server-function
/// calls that do not come from its pages).
pub fn browser() -> reqwest::Client {
    browser_with(None, None)
}

/// [`browser`], connecting from `address` when given (any 127.0.0.0/8 address reaches a
/// server on 127.0.0.1 on Linux, so one test can play several clients), and sending
/// `X-Forwarded-For: forwarded` when given (as a proxy in front of the server would).
pub fn browser_with(address: Option<[u8; 4]>, forwarded: Option<&str>) -> reqwest::Client {
    let mut headers = HeaderMap::new();
    headers.insert("sec-fetch-site", "same-origin".parse().unwrap());
    if let Some(forwarded) = forwarded {
        headers.insert("x-forwarded-for", forwarded.parse().unwrap());
    }
    let builder = reqwest::Client::builder()
        .cookie_store(true)
        .default_headers(headers);
    match address {
        Some(address) => builder.local_address(std::net::IpAddr::from(address)),
        None => builder,
    }
    .build()
    .unwrap()
}

/// A running instance. Dropping it stops the server.
pub struct TestApp {
    pub address: SocketAddr,
    pub metrics_address: Option<SocketAddr>,
    /// The gRPC rate limit service, when the config set `grpc_listen`.
    pub grpc_address: Option<SocketAddr>,
    pub client: reqwest::Client,
    pub db: Db,
    pub dashboard: Dashboard,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
    _data_dir: Option<tempfile::TempDir>,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("GET reaches the server")
    }

    /// Sends a request with an API key and a JSON body; returns status, headers and the
    /// JSON answer (`Value::Null` when there is none).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, HeaderMap, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.client.request(method, self.url(path));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        (
            status,
            headers,
            serde_json::from_str(&text).unwrap_or(Value::Null),
        )
    }

    /// `POST /v1/check` with `key`.
    pub async fn check(&self, key: &str, body: Value) -> (u16, HeaderMap, Value) {
        self.call("POST", "/v1/check", Some(key), Some(&body)).await
    }

    /// A new operator key, made as `sluice key create --operator` makes it.
    pub async fn operator_key(&self) -> String {
        sluice::cli::create_operator_key(
            &sluice::admin::AdminService::offline(self.db.clone()),
            "tests",
        )
        .await
        .unwrap()
    }

    /// The value of a metric line that starts with `prefix` (0 when absent).
    pub async fn metric(&self, prefix: &str) -> f64 {
        let text = self.get("/metrics").await.text().await.unwrap();
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    }

    /// Stops the server gracefully and returns how serving ended.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        let _ = self.stop.take().expect("not stopped yet").send(());
        self.task
            .take()
            .expect("still running")
            .await
            .expect("the server task panicked")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An embedded configuration (SQLite in a fresh directory, in-process limiter) on port 0.
pub fn embedded_config() -> (Config, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("data dir");
    (Config::embedded(dir.path().to_path_buf()), dir)
}

/// Starts an instance with `config` (its `listen` should use port 0).
/// A distributed instance on the PostgreSQL database at `database_url` and the Redis at
/// `redis_url`.
pub async fn distributed(database_url: &str, redis_url: &str) -> TestApp {
    spawn_app(distributed_config(database_url, redis_url)).await
}

/// The configuration [`distributed`] starts, for a test that changes a setting first.
pub fn distributed_config(database_url: &str, redis_url: &str) -> Config {
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(database_url.to_owned());
    config.redis_url = Some(redis_url.to_owned());
    config
}

/// A distributed instance on the PostgreSQL database at `database_url` and the Redis Cluster
/// of `nodes`.
pub async fn distributed_on_cluster(database_url: &str, nodes: Vec<String>) -> TestApp {
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(database_url.to_owned());
    config.redis_cluster_nodes = nodes;
    spawn_app(config).await
}

/// Where an app under test keeps its counters.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    InProcess,
    Redis,
    Cluster,
}

/// An app deciding on its [`Backend`], with the private services it runs on (stopped when
/// this is dropped).
pub struct AppOn {
    pub app: TestApp,
    _redis: Option<crate::services::RedisServer>,
    _cluster: Option<crate::services::RedisCluster>,
}

/// An embedded app, or a distributed one on a fresh PostgreSQL database and a private Redis
/// or Redis Cluster.
pub async fn app_on(backend: Backend) -> AppOn {
    use crate::services::{shared_postgres, RedisCluster, RedisServer};
    match backend {
        Backend::InProcess => AppOn {
            app: spawn_embedded().await,
            _redis: None,
            _cluster: None,
        },
        Backend::Redis => {
            let redis = RedisServer::start();
            let database = shared_postgres().fresh_database().await;
            AppOn {
                app: distributed(&database, &redis.url()).await,
                _redis: Some(redis),
                _cluster: None,
            }
        }
        Backend::Cluster => {
            let cluster = tokio::task::spawn_blocking(RedisCluster::start)
                .await
                .unwrap();
            let database = shared_postgres().fresh_database().await;
            AppOn {
                app: distributed_on_cluster(&database, cluster.urls()).await,
                _redis: None,
                _cluster: Some(cluster),
            }
        }
    }
}

/// Polls `probe` every 5 ms until it returns true; returns how long that took. Fails past
/// three times `limit`.
pub async fn time_until(
    mut probe: impl AsyncFnMut() -> bool,
    limit: std::time::Duration,
) -> std::time::Duration {
    let started = std::time::Instant::now();
    while started.elapsed() < limit * 3 {
        if probe().await {
            return started.elapsed();
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("not seen within {:?}", limit * 3);
}

/// A day in ms: the period of test rules that count in a fixed window, so that no window
/// rolls over while a test runs (one that ends mid-test admits a second window's requests).
pub const DAY_MS: u64 = 86_400_000;

/// Waits, when fewer than 15 s are left in the current fixed window of `period_ms` (windows
/// are aligned on multiples of the period since the Unix epoch, in the server's clock, which
/// is this machine's), until the next one begins: for tests whose requests carry their own
/// window (a per-minute limit in a gRPC override or an Envoy file) and must all fall in one.
pub async fn clear_of_a_window_edge(period_ms: u64) {
    let margin = 15_000_u64.min(period_ms / 2);
    let left = |now: u64| period_ms - now % period_ms;
    let now = sluice::store::now_ms().unsigned_abs();
    if left(now) < margin {
        tokio::time::sleep(std::time::Duration::from_millis(left(now) + 5)).await;
    }
    let now = sluice::store::now_ms().unsigned_abs();
    assert!(
        left(now) >= margin,
        "{} ms left in the window after waiting",
        left(now)
    );
}

pub async fn spawn_app(config: Config) -> TestApp {
    spawn_app_keeping(config, None).await
}

/// Starts an embedded instance in a fresh data directory.
/// An embedded instance whose bootstrap operator `admin@localhost` has `password`; the data
/// directory lives as long as the returned handle.
pub async fn embedded_with_operator(password: &str) -> (TestApp, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::embedded(dir.path().to_path_buf());
    config.admin_password = Some(password.into());
    (spawn_app(config).await, dir)
}

pub async fn spawn_embedded() -> TestApp {
    let (config, dir) = embedded_config();
    spawn_app_keeping(config, Some(dir)).await
}

/// Starts an instance with `config`, keeping `data_dir` until the instance is dropped.
pub async fn spawn_app_keeping(config: Config, data_dir: Option<tempfile::TempDir>) -> TestApp {
    let app = Application::build(config).await.expect("the app builds");
    let address = app.address();
    let metrics_address = app.metrics_address();
    let grpc_address = app.grpc_address();
    let db = app.db();
    let dashboard = app.dashboard();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(app.run_until(async move {
        let _ = stopped.await;
    }));
    TestApp {
        address,
        metrics_address,
        grpc_address,
        client: reqwest::Client::new(),
        db,
        dashboard,
        stop: Some(stop),
        task: Some(task),
        _data_dir: data_dir,
    }
}

/// A fresh key of `kind`: (the key, its SHA-256, its display prefix), made as the console
/// makes them.
pub fn new_key(kind: KeyKind) -> (String, String, String) {
    let mut random = [0_u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut random);
    let key = format_key(kind, &random);
    let hash = app::keys::sha256_hex(&key);
    let prefix = display_prefix(&key);
    (key, hash, prefix)
}

/// A tenant set up through the API: its id, an admin key, a check key and the check key's id.
pub struct TenantSetup {
    pub id: String,
    pub admin_key: String,
    pub check_key: String,
    pub check_key_id: String,
}

/// Creates a tenant with `rules` through the admin API of `app`, as an operator would.
pub async fn setup_tenant(app: &TestApp, operator: &str, rules: &[Value]) -> TenantSetup {
    let name = format!("tenant-{}", uuid::Uuid::new_v4().simple());
    let (status, _, tenant) = app
        .call(
            "POST",
            "/v1/admin/tenants",
            Some(operator),
            Some(&json!({ "name": name })),
        )
        .await;
    assert_eq!(status, 201, "{tenant}");
    let id = tenant["id"].as_str().unwrap().to_owned();
    let keys = format!("/v1/admin/tenants/{id}/keys");
    let (admin_key, hash, prefix) = new_key(KeyKind::Admin);
    let body = json!({ "kind": "admin", "name": "admin", "hash": hash, "prefix": prefix });
    let (status, _, created) = app.call("POST", &keys, Some(operator), Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    for rule in rules {
        let (status, _, created) = app
            .call(
                "POST",
                &format!("/v1/admin/tenants/{id}/rules"),
                Some(&admin_key),
                Some(rule),
            )
            .await;
        assert_eq!(status, 201, "{created}");
    }
    let (check_key, hash, prefix) = new_key(KeyKind::Check);
    let body = json!({ "kind": "check", "name": "service", "hash": hash, "prefix": prefix });
    let (status, _, created) = app.call("POST", &keys, Some(&admin_key), Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    let check_key_id = created["id"].as_str().unwrap().to_owned();
    TenantSetup {
        id,
        admin_key,
        check_key,
        check_key_id,
    }
}

/// The id of `t`'s rule named `name`, read through the admin API.
pub async fn rule_id(app: &TestApp, t: &TenantSetup, name: &str) -> String {
    let (status, _, rules) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}/rules", t.id),
            Some(&t.admin_key),
            None,
        )
        .await;
    assert_eq!(status, 200, "{rules}");
    rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no rule {name} in {rules}"))
}

/// A rule body with the usual defaults.
pub fn rule(
    name: &str,
    match_kind: &str,
    route: Option<&str>,
    algorithm: &str,
    limit: u64,
    period_ms: u64,
) -> Value {
    let mut rule = json!({
        "name": name, "match": match_kind, "scope": "tenant",
        "algorithm": algorithm, "limit": limit, "period_ms": period_ms,
    });
    if let Some(route) = route {
        rule["route"] = json!(route);
    }
    rule
}

/// Runs the `sluice` binary with `args` against the store and Redis in `env`.
fn run_sluice(env: &[(&str, String)], args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(args)
        .output()
        .expect("the sluice binary runs")
}

/// Runs `sluice` with `args`, which must succeed; returns stdout.
pub fn sluice(env: &[(&str, String)], args: &[&str]) -> String {
    let out = run_sluice(env, args);
    assert!(
        out.status.success(),
        "sluice {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `sluice` with `args`, which must fail; returns stderr.
pub fn sluice_fails(env: &[(&str, String)], args: &[&str]) -> String {
    let out = run_sluice(env, args);
    assert!(
        !out.status.success(),
        "sluice {args:?} succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}
