//! Heap allocations per `/v1/check`, as `docs/BENCHMARKS.md` reports them: the server runs in
//! this process (`Application`, as `sluice serve` runs it) under a counting global allocator,
//! and a client that allocates nothing while it measures (pre-built requests written to one
//! keep-alive TCP connection, answers read into a fixed buffer) sends the checks one at a
//! time. The count over `--checks` checks (10,000 by default), less what the server allocates
//! by itself while idle for as long (its per-second recorder and propagation), divided by the
//! checks, is the server's allocations per check: HTTP parsing, the decision, the limiter
//! call, metrics and the answer.
//!
//! Cases: embedded and on a private Redis; the allow path over 100 subjects (buckets that
//! exist, so bucket creation is not counted), and a denied check (on Redis, answered by the
//! deny cache after its first denial).
//!
//! Run: `scripts/bench`, or alone: `cargo run --release -p server --example
//! check_allocations -- [--checks N]`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

#[allow(dead_code)]
#[path = "support/release_server.rs"]
mod release_server;
#[allow(dead_code)]
#[path = "../tests/api/services.rs"]
mod services;

use std::alloc::System;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use release_server::{arg, tenant};
use serde_json::json;
use sluice::admin::AdminService;
use sluice::config::Config;
use sluice::startup::Application;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A keep-alive HTTP/1.1 connection that sends pre-built requests and reads each answer into
/// a fixed buffer, allocating nothing.
struct RawClient {
    stream: TcpStream,
    buffer: Box<[u8; 16 * 1024]>,
}

impl RawClient {
    fn connect(address: std::net::SocketAddr) -> Self {
        let stream = TcpStream::connect(address).unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buffer: Box::new([0; 16 * 1024]),
        }
    }

    /// Sends `request` and reads its answer: the status code.
    fn send(&mut self, request: &[u8]) -> u16 {
        self.stream.write_all(request).unwrap();
        let mut filled = 0;
        loop {
            let n = self.stream.read(&mut self.buffer[filled..]).unwrap();
            assert!(n > 0, "the server closed the connection");
            filled += n;
            let data = &self.buffer[..filled];
            let Some(head_end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = &data[..head_end];
            let length = head
                .split(|&b| b == b'\n')
                .find_map(|line| {
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
                    name.eq_ignore_ascii_case(b"content-length").then(|| {
                        std::str::from_utf8(&value[1..])
                            .unwrap()
                            .trim()
                            .parse::<usize>()
                            .unwrap()
                    })
                })
                .expect("a content-length");
            if filled >= head_end + 4 + length {
                assert_eq!(filled, head_end + 4 + length, "one answer at a time");
                return std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap();
            }
        }
    }
}

fn request(key: &str, subject: &str) -> Vec<u8> {
    let body = format!(r#"{{"route":"POST /transfers/1","subject":"{subject}"}}"#);
    format!(
        "POST /v1/check HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         x-api-key: {key}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Allocations the server makes by itself over `span`, measured while nothing is sent.
fn idle_allocations(span: Duration) -> f64 {
    let region = Region::new(GLOBAL);
    std::thread::sleep(span);
    region.change().allocations as f64
}

/// Sends `requests` round-robin `checks` times, each answered `status`: the allocations
/// and bytes per check, less the idle rate.
fn measure(client: &mut RawClient, requests: &[Vec<u8>], checks: usize, status: u16) -> (f64, f64) {
    // Warm: caches, connections, the deny cache's first entry.
    for r in requests.iter().cycle().take(1_000) {
        client.send(r);
    }
    let started = Instant::now();
    let region = Region::new(GLOBAL);
    for r in requests.iter().cycle().take(checks) {
        let got = client.send(r);
        assert_eq!(got, status);
    }
    let change = region.change();
    let elapsed = started.elapsed();
    let idle = idle_allocations(elapsed);
    (
        (change.allocations as f64 - idle) / checks as f64,
        change.bytes_allocated as f64 / checks as f64,
    )
}

async fn start(config: Config) -> (Application, std::net::SocketAddr) {
    let app = Application::build(config).await.unwrap();
    let address = app.address();
    (app, address)
}

fn main() {
    let checks = arg("--checks", 10_000) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = services::RedisServer::start();
    let allow = json!({ "name": "per-user", "match": "default", "scope": "subject",
                        "algorithm": "token_bucket", "limit": 1_000_000_000u64, "period_ms": 1000 });
    let deny = json!({ "name": "tiny", "match": "all", "scope": "tenant",
                       "algorithm": "gcra", "limit": 1, "period_ms": 31_622_400_000u64 });
    println!(
        "Allocations per check made by the server (in this process, under a counting allocator), \
         {checks} checks a case sent one at a time on one keep-alive connection, less its idle allocations:\n"
    );
    println!("| mode | case | allocations per check | bytes allocated per check |");
    println!("|---|---|---:|---:|");
    for mode in ["embedded", "redis"] {
        let data = tempfile::tempdir().unwrap();
        let mut config = Config::embedded(data.path().to_path_buf());
        if mode == "redis" {
            config.redis_url = Some(redis.url());
        }
        let (app, address) = runtime.block_on(start(config));
        let db = app.db();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = runtime.spawn(app.run_until(async move {
            let _ = stopped.await;
        }));
        let url = format!("http://{address}");
        let (allow_key, deny_key) = runtime.block_on(async {
            let operator =
                sluice::cli::create_operator_key(&AdminService::offline(db), "allocations")
                    .await
                    .unwrap();
            let client = reqwest::Client::new();
            (
                tenant(
                    &client,
                    &url,
                    &operator,
                    "allow",
                    std::slice::from_ref(&allow),
                )
                .await,
                tenant(
                    &client,
                    &url,
                    &operator,
                    "deny",
                    std::slice::from_ref(&deny),
                )
                .await,
            )
        });
        let mut client = RawClient::connect(address);
        let allow_requests: Vec<Vec<u8>> = (0..100)
            .map(|i| request(&allow_key, &format!("user-{i}")))
            .collect();
        let deny_requests = vec![request(&deny_key, "anyone")];
        for (case, requests, status) in [
            ("allowed, 100 subjects", &allow_requests, 200),
            ("denied, one bucket", &deny_requests, 429),
        ] {
            let (allocations, bytes) = measure(&mut client, requests, checks, status);
            eprintln!("check_allocations: {mode}, {case}: {allocations:.1} allocations per check");
            println!("| {mode} | {case} | {allocations:.1} | {bytes:.0} |");
        }
        drop(client);
        let _ = stop.send(());
        runtime.block_on(serving).unwrap().unwrap();
    }
}
