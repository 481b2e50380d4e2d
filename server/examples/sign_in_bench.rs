//! Checks while a crowd of anonymous clients tries to sign in, as `docs/SECURITY.md` reports
//! it: the release `sluice` server in its own process (embedded mode), closed-loop clients
//! sending checks, first alone and then beside `--attackers` sign-in loops. Each attacker
//! comes from its own loopback address and tries a new random email every time, so neither
//! the per-client nor the per-email budget stops it: only the instance's budget and the cap
//! on concurrent password hashes stand between it and the server's memory. For each phase:
//! the checks' latency percentiles, how the sign-ins were answered, and the server's resident
//! memory (sampled every 50 ms, and its peak from `/proc/<pid>/status`).
//!
//! Run: `scripts/bench` (it builds the release server first), or alone:
//! `cargo run --release -p server --example sign_in_bench -- [--seconds N] [--attackers N]`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

#[allow(dead_code)]
#[path = "../tests/api/services.rs"]
mod services;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use app::keys::{display_prefix, format_key, sha256_hex, KeyKind};
use rand::RngCore;
use serde_json::{json, Value};

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("SLUICE_BENCH_BINARY") {
        return path.into();
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/sluice");
    assert!(path.exists(), "build the release server first: cargo build --release -p server --bin sluice (scripts/bench does)");
    path
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// A line of `/proc/<pid>/status` in MiB (`VmRSS`, `VmHWM`).
fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

async fn post(client: &reqwest::Client, url: &str, key: &str, body: Value) -> (u16, Value) {
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

/// What one phase measured.
struct Phase {
    checks: Vec<Duration>,
    sign_ins: Vec<u16>,
    peak_rss_mib: f64,
}

/// `clients` closed-loop check clients for `seconds`, beside `attackers` sign-in loops.
async fn phase(
    url: &str,
    key: &str,
    pid: u32,
    clients: usize,
    attackers: u8,
    seconds: u64,
) -> Phase {
    let until = Instant::now() + Duration::from_secs(seconds);
    let checks = Arc::new(Mutex::new(Vec::new()));
    let sign_ins = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (url, key, checks) = (format!("{url}/v1/check"), key.to_owned(), checks.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while Instant::now() < until {
                let started = Instant::now();
                let (status, _) = post(&client, &url, &key, json!({ "route": "GET /api" })).await;
                assert_eq!(status, 200);
                checks.lock().unwrap().push(started.elapsed());
            }
        }));
    }
    for a in 0..attackers {
        let (url, sign_ins) = (format!("{url}/api/sign_in"), sign_ins.clone());
        tasks.push(tokio::spawn(async move {
            // Its own loopback address: the per-client budget does not stop the crowd.
            let client = reqwest::Client::builder()
                .local_address(std::net::IpAddr::from([127, 0, 2, a.saturating_add(1)]))
                .build()
                .unwrap();
            let mut n = 0_u64;
            while Instant::now() < until {
                n += 1;
                let email = format!("attacker{a}-{n}@example.com");
                let response = client
                    .post(&url)
                    .header("sec-fetch-site", "same-origin")
                    .form(&[("email", email.as_str()), ("password", "guess")])
                    .send()
                    .await
                    .unwrap();
                sign_ins.lock().unwrap().push(response.status().as_u16());
            }
        }));
    }
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut peak: f64 = 0.0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(memory_mib(pid, "VmRSS:"));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            peak
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let peak_rss_mib = sampler.await.unwrap();
    Phase {
        checks: Arc::try_unwrap(checks).unwrap().into_inner().unwrap(),
        sign_ins: Arc::try_unwrap(sign_ins).unwrap().into_inner().unwrap(),
        peak_rss_mib,
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let seconds = arg("--seconds", 10);
    let attackers = u8::try_from(arg("--attackers", 100)).expect("at most 254 attackers");
    let clients = arg("--clients", 4) as usize;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("sign_in_bench: {clients} check clients, {attackers} attackers, {seconds} s a phase");
    let data = tempfile::tempdir().unwrap();
    let port = services::free_port(false);
    let env = [
        ("SLUICE_DATA_DIR", data.path().display().to_string()),
        (
            "SLUICE_ADMIN_PASSWORD",
            "the bench operator's password".to_owned(),
        ),
        ("RUST_LOG", "error".to_owned()),
    ];
    let mut command = Command::new(binary());
    command
        .env("SLUICE_LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in &env {
        command.env(k, v);
    }
    let server = Server {
        child: command.spawn().expect("start sluice"),
        url: format!("http://127.0.0.1:{port}"),
    };
    let pid = server.child.id();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "sluice did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut create = Command::new(binary());
    create
        .args(["key", "create", "--operator"])
        .stderr(Stdio::null());
    for (k, v) in &env {
        create.env(k, v);
    }
    let operator = String::from_utf8(create.output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_owned();
    let client = reqwest::Client::new();
    let url = &server.url;
    let (_, tenant) = post(
        &client,
        &format!("{url}/v1/admin/tenants"),
        &operator,
        json!({ "name": "bench" }),
    )
    .await;
    let id = tenant["id"].as_str().unwrap();
    let rule = json!({ "name": "api", "match": "exact", "route": "GET /api", "scope": "tenant",
                       "algorithm": "gcra", "limit": 1_000_000_000, "period_ms": 1000 });
    let (status, body) = post(
        &client,
        &format!("{url}/v1/admin/tenants/{id}/rules"),
        &operator,
        rule,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let mut random = [0_u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut random);
    let key = format_key(KeyKind::Check, &random);
    let body = json!({ "kind": "check", "name": "bench", "hash": sha256_hex(&key), "prefix": display_prefix(&key) });
    let (status, _) = post(
        &client,
        &format!("{url}/v1/admin/tenants/{id}/keys"),
        &operator,
        body,
    )
    .await;
    assert_eq!(status, 201);

    let idle = phase(url, &key, pid, clients, 0, seconds).await;
    let attacked = phase(url, &key, pid, clients, attackers, seconds).await;
    let peak = memory_mib(pid, "VmHWM:");

    println!(
        "{clients} closed-loop check clients, {seconds} s a phase, one release `sluice` process (embedded); \
         clients, attackers and server share this machine's {cores} cores.\n"
    );
    println!("| phase | checks | p50 ms | p99 ms | max ms | sign-ins hashed (400) | refused by budget (429) | told to retry (503) | peak RSS MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut p99 = Vec::new();
    for (name, mut p) in [
        ("checks alone".to_owned(), idle),
        (
            format!("beside {attackers} concurrent anonymous sign-in loops"),
            attacked,
        ),
    ] {
        p.checks.sort();
        let count = |s: u16| p.sign_ins.iter().filter(|x| **x == s).count();
        p99.push(percentile(&p.checks, 0.99));
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {:.0} |",
            p.checks.len(),
            ms(percentile(&p.checks, 0.5)),
            ms(percentile(&p.checks, 0.99)),
            ms(*p.checks.last().unwrap()),
            count(400),
            count(429),
            count(503),
            p.peak_rss_mib,
        );
    }
    println!(
        "\ncheck p99 beside the sign-ins ÷ alone: {:.2}×; the server's peak resident memory over the whole run (VmHWM): {peak:.0} MiB",
        p99[1].as_secs_f64() / p99[0].as_secs_f64()
    );
}
