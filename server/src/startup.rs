//! Building and running an instance: connect the store and the limiter, build the router,
//! bind the listeners, serve until a shutdown signal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use app::port::SharedConsole;
use axum::extract::FromRef;
use axum::routing::get;
use axum::Router;
use leptos::prelude::{provide_context, Env, LeptosOptions};
use leptos_axum::{generate_route_list, LeptosRoutes};
use tokio::net::TcpListener;

use crate::auth::{Authenticator, UsageRecorder};
use crate::cache::Caches;
use crate::config::{Config, LimiterTarget};
use crate::console::ConsoleService;
use crate::dashboard::{self, Dashboard};
use crate::limiter::{Limiter, RedisBackend, RedisOptions};
use crate::metrics::{self, Metrics};
use crate::propagation::{self, Bus};
use crate::service::AdminService;
use crate::store::sessions::SqlSessionStore;
use crate::store::Db;
use crate::{admin_api, check, health, openapi, telemetry};
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

/// Idle console sessions end after this many hours.
const SESSION_HOURS: i64 = 8;

/// Deletes expired sessions every ten minutes.
fn spawn_session_cleanup(store: SqlSessionStore) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(600));
        loop {
            tick.tick().await;
            if let Err(e) = store.delete_expired().await {
                tracing::warn!(error = %e, "could not delete expired sessions");
            }
        }
    })
}

/// How often key usage (`last_used_at`) is written.
const USAGE_FLUSH: Duration = Duration::from_secs(10);
/// How long a starting instance waits for its subscription to admin changes.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(2);

/// Everything a request handler may need. Handlers extract only their part.
#[derive(Debug, Clone, FromRef)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub db: Db,
    pub limiter: Limiter,
    pub metrics: Metrics,
    pub console: SharedConsole,
    pub auth: Authenticator,
    pub service: AdminService,
    pub dashboard: Dashboard,
    /// Whether the session cookie is marked `Secure` (`SLUICE_SECURE_COOKIES`).
    pub secure_cookies: bool,
}

/// The router of one instance. Tests can drive it with `oneshot`, without a socket.
pub fn router(state: AppState) -> Router {
    let sessions = SessionManagerLayer::new(SqlSessionStore::new(state.db.clone()))
        .with_name("sluice_session")
        .with_http_only(true)
        .with_same_site(SameSite::Strict)
        .with_secure(state.secure_cookies)
        .with_expiry(Expiry::OnInactivity(time::Duration::hours(SESSION_HOURS)));
    let routes = generate_route_list(app::App);
    let console = state.console.clone();
    let options = state.leptos_options.clone();
    let metrics_state = state.metrics.clone();
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::handler))
        .route(
            "/v1/check",
            axum::routing::post(check::check)
                .layer(axum::extract::DefaultBodyLimit::max(check::MAX_BODY_BYTES)),
        )
        .merge(admin_api::routes())
        .route("/v1/openapi.json", get(openapi::handler))
        .route("/live/dashboard", get(dashboard::live::handler))
        .leptos_routes_with_context(
            &state,
            routes,
            move || provide_context(console.clone()),
            move || app::shell(options.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(
            app::shell,
        ))
        .layer(sessions)
        .layer(axum::middleware::from_fn_with_state(
            metrics_state,
            metrics::track,
        ))
        .with_state(state)
}

/// A built instance: connected, bound, not yet serving.
pub struct Application {
    /// The password of the operator account this start created, to print once.
    bootstrap_password: Option<String>,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    router: Router,
    metrics_router: Option<Router>,
    db: Db,
    dashboard: Dashboard,
    embedded: bool,
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("address", &self.listener.local_addr().ok())
            .field("metrics_address", &self.metrics_address())
            .field("database", &self.db.dialect())
            .field("embedded", &self.embedded)
            .finish_non_exhaustive()
    }
}

impl Application {
    /// Connects to the store (and migrates it) and to the limiter backend, and binds the
    /// listeners. Fails with a message that names the setting to fix.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        telemetry::init(config.log_format);
        let database_url = config.database_url();
        let db = Db::connect(&database_url)
            .await
            .with_context(|| format!("cannot open the database at {}", redacted(&database_url)))?;
        db.migrate().await.with_context(|| {
            format!("cannot migrate the database at {}", redacted(&database_url))
        })?;

        let options = RedisOptions {
            timeout: Duration::from_millis(config.redis_timeout_ms),
            connections: config.redis_connections,
        };
        let limiter = Limiter::connect(&config.limiter_target(), options)
            .await
            .context(
                "cannot reach Redis: check REDIS_URL / REDIS_CLUSTER_NODES and that Redis is up",
            )?;

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
        let address = listener.local_addr()?;

        let embedded = config.is_embedded();
        let bootstrap_password = if embedded {
            crate::cli::bootstrap_operator(&db, config.admin_password.as_deref())
                .await
                .context("cannot create the first operator account")?
        } else {
            None
        };
        let metrics = Metrics::new(
            if embedded { "embedded" } else { "distributed" },
            db.dialect().as_str(),
            limiter.kind().as_str(),
        );
        let caches = Caches::default();
        let usage = UsageRecorder::default();
        let auth = Authenticator {
            db: db.clone(),
            caches: caches.clone(),
            metrics: metrics.clone(),
            usage: usage.clone(),
        };
        let bus = Bus::new(caches.clone(), &limiter);
        let origin = bus.origin().to_owned();
        let service = AdminService::new(db.clone(), bus, limiter.clone());
        // The dashboards' reads (an hour at start-up) must not queue behind or time out like
        // checks: they get a connection and a deadline of their own.
        let series_options = RedisOptions {
            timeout: dashboard::series::DEADLINE,
            connections: 1,
        };
        let series = match config.limiter_target() {
            LimiterTarget::InProcess => None,
            LimiterTarget::Redis(url) => Some(RedisBackend::single(&url, series_options).await),
            LimiterTarget::Cluster(nodes) => {
                Some(RedisBackend::cluster(&nodes, series_options).await)
            }
        }
        .transpose()
        .context("cannot reach Redis for the dashboards' series")?;
        let dashboard = Dashboard::new(
            &metrics,
            &limiter,
            series,
            db.clone(),
            if embedded { "embedded" } else { "distributed" },
        );
        drop(dashboard.spawn());
        let console = ConsoleService::new(
            db.clone(),
            limiter.clone(),
            service.clone(),
            dashboard.clone(),
            embedded,
        );
        let urls = match config.limiter_target() {
            LimiterTarget::Redis(url) => vec![url],
            LimiterTarget::Cluster(nodes) => nodes,
            LimiterTarget::InProcess => Vec::new(),
        };
        if !urls.is_empty() {
            let subscribed = Arc::new(tokio::sync::Notify::new());
            drop(propagation::spawn_subscriber(
                caches,
                urls,
                origin,
                subscribed.clone(),
            ));
            // Serve only once changes from other instances reach this one (Redis answered
            // at connect, so this is quick); if it takes longer, serve and say so.
            if tokio::time::timeout(SUBSCRIBE_WAIT, subscribed.notified())
                .await
                .is_err()
            {
                tracing::warn!(
                    "not yet subscribed to admin changes after {SUBSCRIBE_WAIT:?}; serving anyway, the subscriber keeps trying"
                );
            }
        }
        drop(usage.spawn_flusher(db.clone(), USAGE_FLUSH));
        drop(spawn_session_cleanup(SqlSessionStore::new(db.clone())));
        if let Limiter::InProcess(memory) = &limiter {
            drop(memory.spawn_sweeper(Duration::from_secs(10)));
        }
        let state = AppState {
            leptos_options: leptos_options(&config, address),
            db: db.clone(),
            limiter,
            metrics: metrics.clone(),
            console: SharedConsole(Arc::new(console)),
            auth,
            service,
            dashboard: dashboard.clone(),
            secure_cookies: config.secure_cookies,
        };
        let metrics_router = metrics_listener.as_ref().map(|_| {
            Router::new()
                .route("/metrics", get(metrics::handler))
                .with_state(metrics)
        });
        Ok(Self {
            bootstrap_password,
            listener,
            metrics_listener,
            router: router(state),
            metrics_router,
            db,
            dashboard,
            embedded,
        })
    }

    /// The address the main listener is bound to (useful with port 0).
    pub fn address(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The password of the operator account (`admin@localhost`) this start created, if any.
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

    /// Serves until `stop` completes.
    pub async fn run_until(
        self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (tx, _) = tokio::sync::broadcast::channel::<()>(1);
        let mut main_stop = tx.subscribe();
        let mut metrics_stop = tx.subscribe();
        let metrics_server = match (self.metrics_listener, self.metrics_router) {
            (Some(listener), Some(router)) => Some(tokio::spawn(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(async move {
                        let _ = metrics_stop.recv().await;
                    })
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
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(async move {
                let _ = main_stop.recv().await;
            })
            .await
            .context("the HTTP server failed")?;
        if let Some(server) = metrics_server {
            server.await.context("the metrics server panicked")??;
        }
        self.db.close().await;
        tracing::info!("stopped");
        Ok(())
    }
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
