//! Spawning real server instances on port 0, and configurations for each mode.

use std::net::SocketAddr;

use sluice::config::Config;
use sluice::startup::Application;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running instance. Dropping it stops the server.
pub struct TestApp {
    pub address: SocketAddr,
    pub metrics_address: Option<SocketAddr>,
    pub client: reqwest::Client,
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
pub async fn spawn_app(config: Config) -> TestApp {
    spawn_app_keeping(config, None).await
}

/// Starts an embedded instance in a fresh data directory.
pub async fn spawn_embedded() -> TestApp {
    let (config, dir) = embedded_config();
    spawn_app_keeping(config, Some(dir)).await
}

async fn spawn_app_keeping(config: Config, data_dir: Option<tempfile::TempDir>) -> TestApp {
    let app = Application::build(config).await.expect("the app builds");
    let address = app.address();
    let metrics_address = app.metrics_address();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(app.run_until(async move {
        let _ = stopped.await;
    }));
    TestApp {
        address,
        metrics_address,
        client: reqwest::Client::new(),
        stop: Some(stop),
        task: Some(task),
        _data_dir: data_dir,
    }
}
