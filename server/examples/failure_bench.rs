//! Checks while Redis fails, as `docs/ARCHITECTURE.md` reports them: the release `sluice`
//! server in its own process on a private Redis (SQLite for its configuration), closed-loop
//! clients sending checks through five phases: healthy, Redis hung (SIGSTOP), Redis back,
//! Redis killed, Redis restarted. For each phase: the checks answered, their latency
//! percentiles and maximum, how they were answered, and how long checks took to be decided by
//! Redis again.
//!
//! Run: `scripts/bench` (it builds the release server first), or alone:
//! `cargo run --release -p server --example failure_bench -- [--seconds N] [--clients N]`.

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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use release_server::{arg, operator_key, post, start_server, tenant};
use serde_json::{json, Value};

/// `SLUICE_REDIS_TIMEOUT_MS`, the one deadline per check.
const DEADLINE_MS: u64 = 250;

/// One check's answer: how long it took, its status, and whether it was degraded.
#[derive(Debug, Clone, Copy)]
struct Answer {
    took: Duration,
    status: u16,
    degraded: bool,
}

/// Runs `clients` closed-loop clients for `seconds`, alternating a fail-open and a
/// fail-closed route.
async fn phase(url: &str, key: &str, clients: usize, seconds: u64) -> Vec<Answer> {
    let answers = Arc::new(Mutex::new(Vec::new()));
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (url, key, answers) = (format!("{url}/v1/check"), key.to_owned(), answers.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut i = c;
            while Instant::now() < until {
                let route = if i % 2 == 0 {
                    "GET /open"
                } else {
                    "GET /closed"
                };
                i += 1;
                let started = Instant::now();
                let (status, body) = post(&client, &url, &key, json!({ "route": route })).await;
                let answer = Answer {
                    took: started.elapsed(),
                    status,
                    degraded: body.get("degraded").is_some(),
                };
                answers.lock().unwrap().push(answer);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    Arc::try_unwrap(answers).unwrap().into_inner().unwrap()
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn row(name: &str, answers: &mut [Answer]) {
    answers.sort_by_key(|a| a.took);
    let at = |q: f64| answers[((answers.len() as f64 * q) as usize).min(answers.len() - 1)].took;
    let count = |f: &dyn Fn(&Answer) -> bool| answers.iter().filter(|a| f(a)).count();
    println!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} |",
        answers.len(),
        ms(at(0.5)),
        ms(at(0.99)),
        ms(answers.last().unwrap().took),
        count(&|a| a.status == 200 && !a.degraded),
        count(&|a| a.status == 200 && a.degraded),
        count(&|a| a.status == 503),
    );
}

/// How long until a check is decided by Redis again (200, not degraded).
async fn recovery(url: &str, key: &str) -> Duration {
    let client = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let (status, body) = post(
            &client,
            &format!("{url}/v1/check"),
            key,
            json!({ "route": "GET /closed" }),
        )
        .await;
        if status == 200 && body.get("degraded").is_none() {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no recovery");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::main]
async fn main() {
    let seconds = arg("--seconds", 5);
    let clients = arg("--clients", 20) as usize;
    eprintln!("failure_bench: {clients} clients, {seconds} s a phase, deadline {DEADLINE_MS} ms");
    let mut redis = services::RedisServer::start();
    let env = [
        ("REDIS_URL", redis.url()),
        ("SLUICE_REDIS_TIMEOUT_MS", DEADLINE_MS.to_string()),
        (
            "RUST_LOG",
            std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".to_owned()),
        ),
    ];
    let server = start_server(&env, std::env::var_os("BENCH_LOG").is_some());
    let operator = operator_key(&env, &server);
    let client = reqwest::Client::new();
    let url = &server.url;
    let rules: Vec<Value> = ["open", "closed"]
        .into_iter()
        .map(|mode| {
            json!({ "name": mode, "match": "exact", "route": format!("GET /{mode}"),
                    "scope": "tenant", "algorithm": "gcra", "limit": 1_000_000,
                    "period_ms": 1000, "failure_mode": mode })
        })
        .collect();
    let key = tenant(&client, url, &operator, "bench", &rules).await;

    println!("| phase | checks | p50 ms | p99 ms | max ms | decided by Redis | allowed, fail_open | 503, fail_closed |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    row(
        "Redis healthy",
        &mut phase(url, &key, clients, seconds).await,
    );
    redis.pause();
    row(
        "Redis hung (SIGSTOP)",
        &mut phase(url, &key, clients, seconds).await,
    );
    redis.resume();
    let back = recovery(url, &key).await;
    row(
        "Redis resumed",
        &mut phase(url, &key, clients, seconds).await,
    );
    redis.stop();
    row(
        "Redis killed",
        &mut phase(url, &key, clients, seconds).await,
    );
    redis.restart();
    let restarted = recovery(url, &key).await;
    row(
        "Redis restarted",
        &mut phase(url, &key, clients, seconds).await,
    );
    println!();
    println!(
        "Decided by Redis again {} ms after SIGCONT, {} ms after the restart (deadline {DEADLINE_MS} ms).",
        back.as_millis(),
        restarted.as_millis()
    );
}
