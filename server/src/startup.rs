//! Building and running an instance: a short list of named steps that connect the store and
//! the limiter, assemble the layers (infrastructure, then the decision core and the admin
//! service, then the transports), start the background tasks and bind the listeners; then
//! serve until a shutdown signal, stop the tasks, and close the store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use leptos::prelude::{Env, LeptosOptions};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::admin::AdminService;
use crate::cache::Caches;
use crate::config::{Config, LimiterTarget};
use crate::dashboard::{self, Dashboard, LiveInstances};
use crate::decide::{CompiledTenant, Decider, Identities, UsageRecorder};
use crate::limiter::Limiter;
use crate::propagation::{self, Bus};
use crate::redis_client::{RedisClient, RedisOptions};
use crate::store::sessions::SqlSessionStore;
use crate::store::Db;
use crate::telemetry::{logging, Metrics};
use crate::transport::client_ip::{Block, TrustedProxies};
use crate::transport::console::ConsoleService;
use crate::transport::console_runtime::ConsoleRuntime;
use crate::transport::listener::{serve, ConnectionLimits};
use crate::transport::router::{metrics_router, router};
use crate::transport::state::{App, AppState};

/// How often key usage (`last_used_at`) is written.
const USAGE_FLUSH: Duration = Duration::from_secs(10);
/// How long a starting instance waits for its subscription to admin changes.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(2);
/// How often expired console sessions are deleted.
const SESSION_CLEANUP: Duration = Duration::from_secs(600);
/// How often the in-process limiter drops idle buckets.
const SWEEP: Duration = Duration::from_secs(10);

/// The background tasks of an instance; they end when it stops.
#[derive(Debug, Default)]
struct Tasks(Vec<JoinHandle<()>>);

impl Tasks {
    fn keep(&mut self, task: JoinHandle<()>) {
        self.0.push(task);
    }

    fn stop(self) {
        for task in self.0 {
            task.abort();
        }
    }
}

/// A built instance: connected, bound, not yet serving.
pub struct Application {
    /// The password this start generated for the operator account it created, to print once
    /// (never a password the operator supplied).
    bootstrap_password: Option<String>,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    /// Envoy's rate limit service, and the state it serves, when `SLUICE_GRPC_LISTEN` is set.
    grpc: Option<(TcpListener, AppState)>,
    /// What the listeners allow one connection.
    limits: ConnectionLimits,
    /// The proxies whose `X-Forwarded-For` names the client.
    proxies: TrustedProxies,
    router: Router,
    /// The state `POST /v1/check` is answered with, before the router (`listener::serve`).
    checks: AppState,
    metrics_router: Option<Router>,
    /// The threads console work runs on; stopped when the application ends.
    console_runtime: ConsoleRuntime,
    db: Db,
    dashboard: Dashboard,
    tasks: Tasks,
    embedded: bool,
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("address", &self.listener.local_addr().ok())
            .field("metrics_address", &self.metrics_address())
            .field("grpc_address", &self.grpc_address())
            .field("database", &self.db.dialect())
            .field("embedded", &self.embedded)
            .finish_non_exhaustive()
    }
}

impl Application {
    /// Connects to the store (and migrates it) and to the limiter backend, and binds the
    /// listeners. Fails with a message that names the setting to fix.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        logging::init(config.log_format);
        let embedded = config.is_embedded();
        let mode = if embedded { "embedded" } else { "distributed" };
        let mut tasks = Tasks::default();

        // Infrastructure.
        let db = open_store(&config).await?;
        let background_db = open_background_store(&config, &db).await?;
        let limiter = connect_limiter(&config).await?;
        let (listener, metrics_listener) = bind(&config).await?;
        let metrics = Metrics::new(mode, db.dialect().as_str(), limiter.kind().as_str());
        let caches: Caches<CompiledTenant> = Caches::default();
        let live = LiveInstances::default();
        let dashboard = Dashboard::new(
            &metrics,
            &limiter,
            connect_series(&config).await?,
            background_db.clone(),
            mode,
            live.clone(),
        );
        // Admin changes name this instance by its id in the fleet.
        let bus = Bus::with_origin(
            caches.clone(),
            limiter.redis().cloned(),
            dashboard.instance_id(),
        );

        // The decision core and the admin service.
        let usage = UsageRecorder::default();
        let identities = Identities {
            db: db.clone(),
            caches: caches.clone(),
            metrics: metrics.clone(),
            usage: usage.clone(),
            loads: Default::default(),
        };
        let decider = Decider::new(limiter.clone(), metrics.clone(), live);
        let admin = AdminService::new(db.clone(), bus.clone(), decider.clone());
        let bootstrap_password = if embedded {
            bootstrap_operator(&admin, config.admin_password.as_deref()).await?
        } else {
            None
        };

        // Background tasks.
        tasks.keep(dashboard.spawn());
        tasks.keep(usage.spawn_flusher(background_db.clone(), USAGE_FLUSH));
        tasks.keep(spawn_session_cleanup(SqlSessionStore::new(background_db)));
        if let Limiter::InProcess(memory) = &limiter {
            tasks.keep(memory.spawn_sweeper(SWEEP));
        }
        if let Some(subscriber) =
            subscribe_to_changes(&config, caches, metrics.clone(), bus.origin()).await
        {
            tasks.keep(subscriber);
        }

        // Transports.
        let console = ConsoleService::new(
            db.clone(),
            limiter.clone(),
            decider.clone(),
            admin.clone(),
            dashboard.clone(),
            embedded,
            config.sign_in_concurrency(),
            config.sign_in_rate,
        );
        let state = AppState(Arc::new(App {
            leptos_options: leptos_options(&config, listener.local_addr()?),
            db: db.clone(),
            limiter,
            metrics,
            identities,
            decider,
            admin,
            console: Arc::new(console),
            dashboard: dashboard.clone(),
            streams: Default::default(),
            secure_cookies: config.secure_cookies,
            metrics_apart: metrics_listener.is_some(),
        }));
        let metrics_router = metrics_listener
            .as_ref()
            .map(|_| metrics_router(state.clone()));
        let grpc = bind_grpc(&config).await?.map(|l| (l, state.clone()));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let console_runtime = ConsoleRuntime::start(cores)
            .context("cannot start the console's threads (is the process out of threads?)")?;
        Ok(Self {
            bootstrap_password,
            proxies: trusted_proxies(&config)?,
            limits: ConnectionLimits {
                header_timeout: Duration::from_millis(config.header_timeout_ms),
                idle_timeout: Duration::from_millis(config.idle_timeout_ms),
                max_connections: config.max_connections,
            },
            listener,
            metrics_listener,
            grpc,
            router: router(state.clone(), console_runtime.handle()),
            checks: state,
            metrics_router,
            console_runtime,
            db,
            dashboard,
            tasks,
            embedded,
        })
    }

    /// The address the main listener is bound to (useful with port 0).
    pub fn address(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The address of the gRPC rate limit service, when one is configured.
    pub fn grpc_address(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The password this start generated for the operator account (`admin@localhost`) it
    /// created, if any; `None` when the operator supplied it in `SLUICE_ADMIN_PASSWORD`.
    pub fn bootstrap_password(&self) -> Option<&str> {
        self.bootstrap_password.as_deref()
    }

    /// The configuration store this instance uses.
    pub fn db(&self) -> Db {
        self.db.clone()
    }

    /// This instance's dashboards (the fleet as it last read it).
    pub fn dashboard(&self) -> Dashboard {
        self.dashboard.clone()
    }

    pub fn is_embedded(&self) -> bool {
        self.embedded
    }

    /// Serves until SIGINT or SIGTERM, then lets in-flight requests finish.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        self.run_until(shutdown_signal()).await
    }

    /// Serves until `stop` completes, lets in-flight requests finish, stops the background
    /// tasks and closes the store.
    pub async fn run_until(
        self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let limits = self.limits;
        let proxies = self.proxies.clone();
        let (tx, _) = tokio::sync::broadcast::channel::<()>(1);
        let mut main_stop = tx.subscribe();
        let mut metrics_stop = tx.subscribe();
        let mut grpc_stop = tx.subscribe();
        let grpc_server = self.grpc.map(|(listener, state)| {
            tokio::spawn(crate::transport::grpc::serve(listener, state, async move {
                let _ = grpc_stop.recv().await;
            }))
        });
        let metrics_server = match (self.metrics_listener, self.metrics_router) {
            (Some(listener), Some(router)) => Some(tokio::spawn(async move {
                serve(
                    listener,
                    router,
                    None,
                    limits,
                    proxies.clone(),
                    async move {
                        let _ = metrics_stop.recv().await;
                    },
                )
                .await
            })),
            _ => None,
        };
        let dashboard = self.dashboard.clone();
        tokio::spawn(async move {
            stop.await;
            // Open dashboard streams would hold graceful shutdown forever.
            dashboard.stop();
            let _ = tx.send(());
        });
        serve(
            self.listener,
            self.router,
            Some(self.checks),
            limits,
            self.proxies,
            async move {
                let _ = main_stop.recv().await;
            },
        )
        .await
        .context("the HTTP server failed")?;
        if let Some(server) = metrics_server {
            server.await.context("the metrics server panicked")??;
        }
        if let Some(server) = grpc_server {
            server
                .await
                .context("the gRPC server panicked")?
                .context("the gRPC server failed")?;
        }
        self.tasks.stop();
        // Closed before the console's threads stop: a connection console work opened is
        // driven by them.
        self.db.close().await;
        // Every connection has been answered, so no console work is left waiting.
        drop(self.console_runtime);
        tracing::info!("stopped");
        Ok(())
    }
}

/// Step: the trusted proxies, parsed; a bad entry stops start-up and says which.
fn trusted_proxies(config: &Config) -> anyhow::Result<TrustedProxies> {
    let blocks = config
        .trusted_proxies
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.parse::<Block>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("SLUICE_TRUSTED_PROXIES: {e}"))?;
    Ok(TrustedProxies::new(blocks))
}

/// Step: the configuration store, migrated.
async fn open_store(config: &Config) -> anyhow::Result<Db> {
    let url = config.database_url();
    let db = Db::connect(&url)
        .await
        .with_context(|| format!("cannot open the database at {}", redacted(&url)))?;
    db.migrate()
        .await
        .with_context(|| format!("cannot migrate the database at {}", redacted(&url)))?;
    Ok(db)
}

/// Step: the background tasks' own pool on PostgreSQL (`application_name`
/// `sluice-background`: key usage, session clean-up, the dashboards' tenant names), so their
/// statements never queue with requests' and are told apart from them; the same pool on
/// SQLite.
async fn open_background_store(config: &Config, db: &Db) -> anyhow::Result<Db> {
    match db.dialect() {
        crate::store::Dialect::Sqlite => Ok(db.clone()),
        crate::store::Dialect::Postgres => {
            let url = config.database_url();
            Db::connect_as(&url, "sluice-background", 2)
                .await
                .with_context(|| format!("cannot open the database at {}", redacted(&url)))
        }
    }
}

/// Step: the limiter's backend. Redis must answer now, so a wrong `REDIS_URL` fails fast.
async fn connect_limiter(config: &Config) -> anyhow::Result<Limiter> {
    let options = RedisOptions {
        timeout: Duration::from_millis(config.redis_timeout_ms),
        connections: config.redis_connections,
    };
    Limiter::connect(&config.limiter_target(), options)
        .await
        .map(|limiter| limiter.with_bucket_layout(config.redis_bucket_layout))
        .context("cannot reach Redis: check REDIS_URL / REDIS_CLUSTER_NODES and that Redis is up")
}

/// Step: the main listener, and the metrics listener when one is configured.
async fn bind(config: &Config) -> anyhow::Result<(TcpListener, Option<TcpListener>)> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {} (SLUICE_LISTEN)", config.listen))?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (SLUICE_METRICS_LISTEN)"))?,
        ),
        None => None,
    };
    Ok((listener, metrics_listener))
}

/// Step: the gRPC listener, when `SLUICE_GRPC_LISTEN` is set.
async fn bind_grpc(config: &Config) -> anyhow::Result<Option<TcpListener>> {
    match config.grpc_listen {
        Some(addr) => Ok(Some(TcpListener::bind(addr).await.with_context(|| {
            format!("cannot listen on {addr} (SLUICE_GRPC_LISTEN)")
        })?)),
        None => Ok(None),
    }
}

/// Step: the dashboards' own Redis connection. Their reads (an hour at start-up) must not
/// queue behind or time out like checks, so they get a connection and a deadline of their
/// own. `None` in embedded mode (the series stay in memory).
async fn connect_series(config: &Config) -> anyhow::Result<Option<RedisClient>> {
    let options = RedisOptions {
        timeout: dashboard::series::DEADLINE,
        connections: 1,
    };
    let series = match config.limiter_target() {
        LimiterTarget::InProcess => None,
        LimiterTarget::Redis(url) => Some(RedisClient::single(&url, options).await),
        LimiterTarget::Cluster(nodes) => Some(RedisClient::cluster(&nodes, options).await),
    };
    let series = series
        .transpose()
        .context("cannot reach Redis for the dashboards' series")?;
    if let Some(client) = &series {
        client.set_name("sluice-dashboards").await;
    }
    Ok(series)
}

/// Step: on an embedded instance with no users, the first operator account (through the
/// admin service, audited as `cli`). Returns the password to print once: a generated one only.
/// A password the operator supplied (`SLUICE_ADMIN_PASSWORD`) is never returned, so it never
/// reaches stdout or a container's log.
async fn bootstrap_operator(
    admin: &AdminService,
    supplied: Option<&str>,
) -> anyhow::Result<Option<String>> {
    let password = match supplied {
        Some(p) => {
            anyhow::ensure!(
                p.chars().count() >= crate::passwords::MIN_PASSWORD_CHARS,
                "SLUICE_ADMIN_PASSWORD must have at least {} characters",
                crate::passwords::MIN_PASSWORD_CHARS
            );
            p.to_owned()
        }
        None => crate::passwords::generate(),
    };
    let created = admin
        .bootstrap_operator(&password)
        .await
        .context("cannot create the first operator account")?;
    Ok((created && supplied.is_none()).then_some(password))
}

/// Step: the subscription to other instances' admin changes (distributed mode). Serves only
/// once changes from other instances reach this one (Redis answered at connect, so this is
/// quick); if it takes longer, serves anyway and says so.
async fn subscribe_to_changes(
    config: &Config,
    caches: Caches<CompiledTenant>,
    metrics: Metrics,
    origin: &str,
) -> Option<JoinHandle<()>> {
    let urls = match config.limiter_target() {
        LimiterTarget::Redis(url) => vec![url],
        LimiterTarget::Cluster(nodes) => nodes,
        LimiterTarget::InProcess => return None,
    };
    let subscribed = Arc::new(tokio::sync::Notify::new());
    let task =
        propagation::spawn_subscriber(caches, metrics, urls, origin.to_owned(), subscribed.clone());
    if tokio::time::timeout(SUBSCRIBE_WAIT, subscribed.notified())
        .await
        .is_err()
    {
        tracing::warn!(
            "not yet subscribed to admin changes after {SUBSCRIBE_WAIT:?}; serving anyway, the subscriber keeps trying"
        );
    }
    Some(task)
}

/// Deletes expired sessions every [`SESSION_CLEANUP`].
fn spawn_session_cleanup(store: SqlSessionStore) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SESSION_CLEANUP);
        loop {
            tick.tick().await;
            if let Err(e) = store.delete_expired().await {
                tracing::warn!(error = %e, "could not delete expired sessions");
            }
        }
    })
}

fn leptos_options(config: &Config, address: SocketAddr) -> LeptosOptions {
    LeptosOptions::builder()
        .output_name("sluice")
        .site_root(config.site_root.display().to_string())
        .site_pkg_dir("pkg")
        .env(Env::PROD)
        .site_addr(address)
        .build()
}

/// Hides the password of a database URL, for messages.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received, shutting down"),
        () = terminate => tracing::info!("SIGTERM received, shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn passwords_are_redacted_from_database_urls() {
        assert_eq!(
            redacted("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redacted("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redacted("sqlite://./data/sluice.db"),
            "sqlite://./data/sluice.db"
        );
    }
}
