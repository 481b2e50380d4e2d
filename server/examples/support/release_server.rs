//! The release `sluice` server in a process of its own, for the benchmarks: start it, make an
//! operator key with its CLI, and set up tenants through its admin API.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use app::keys::{display_prefix, format_key, KeyKind};
use rand::RngCore;
use serde_json::{json, Value};

/// A running server; dropping it kills and reaps the process.
pub struct Server {
    child: Child,
    pub url: String,
    data: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// The server's process id (for its memory in `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its data directory (`SLUICE_DATA_DIR`), for the CLI.
    pub fn data(&self) -> &std::path::Path {
        self.data.path()
    }
}

/// The server under test: `SLUICE_BENCH_BINARY`, or this checkout's release build (set it to
/// another build to compare two versions side by side).
pub fn binary() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("SLUICE_BENCH_BINARY") {
        return path.into();
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/sluice");
    assert!(path.exists(), "build the release server first: cargo build --release -p server --bin sluice (scripts/bench does)");
    path
}

/// The number after `name` on the command line, or `default`.
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// Starts the server on a free port in a fresh data directory with `env` (which may override
/// `RUST_LOG`, `warn` by default); its log goes to this process's stderr when `logs`.
pub fn start_server(env: &[(&str, String)], logs: bool) -> Server {
    let data = tempfile::tempdir().unwrap();
    let port = crate::services::free_port(false);
    let mut command = Command::new(binary());
    command
        .env("SLUICE_LISTEN", format!("127.0.0.1:{port}"))
        .env("SLUICE_DATA_DIR", data.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(if logs {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    for (k, v) in env {
        command.env(k, v);
    }
    // Owned at once, so a failed start still kills and reaps the process.
    let server = Server {
        child: command.spawn().expect("start sluice"),
        url: format!("http://127.0.0.1:{port}"),
        data,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("sluice did not start");
}

/// A new operator key, made by the server's CLI on the same store.
pub fn operator_key(env: &[(&str, String)], server: &Server) -> String {
    let mut command = Command::new(binary());
    command
        .args(["key", "create", "--operator"])
        .env("SLUICE_DATA_DIR", server.data())
        .stderr(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("sluice key create");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `POST url` with `key` and a JSON body: the status and the JSON answer.
pub async fn post(client: &reqwest::Client, url: &str, key: &str, body: Value) -> (u16, Value) {
    let response = client
        .post(url)
        .header("x-api-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `POST path` of the admin API, which must succeed: the JSON answer.
pub async fn api(client: &reqwest::Client, url: &str, key: &str, path: &str, body: Value) -> Value {
    let (status, answer) = post(client, &format!("{url}{path}"), key, body).await;
    assert!((200..300).contains(&status), "{path}: {status} {answer}");
    answer
}

/// Creates a tenant named `name` with `rules` and returns a check key for it.
pub async fn tenant(
    client: &reqwest::Client,
    url: &str,
    operator: &str,
    name: &str,
    rules: &[Value],
) -> String {
    let tenant = api(
        client,
        url,
        operator,
        "/v1/admin/tenants",
        json!({ "name": name }),
    )
    .await;
    let id = tenant["id"].as_str().unwrap();
    for rule in rules {
        api(
            client,
            url,
            operator,
            &format!("/v1/admin/tenants/{id}/rules"),
            rule.clone(),
        )
        .await;
    }
    let mut random = [0_u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut random);
    let key = format_key(KeyKind::Check, &random);
    let body = json!({ "kind": "check", "name": "bench", "hash": app::keys::sha256_hex(&key), "prefix": display_prefix(&key) });
    api(
        client,
        url,
        operator,
        &format!("/v1/admin/tenants/{id}/keys"),
        body,
    )
    .await;
    key
}
