//! gRPC and HTTP checks side by side, as `docs/BENCHMARKS.md` reports them: one release
//! `sluice` process serving both `/v1/check` and Envoy's `ShouldRateLimit`, one tenant with
//! the same rule for each (a token bucket per subject, never denying), and the same closed
//! loop of clients on each transport, in interleaved rounds so both see the same machine.
//!
//! Each client has a connection of its own on either transport (HTTP/1.1 keep-alive, or one
//! HTTP/2 channel) and sends its next check as soon as the last is answered; subjects are
//! picked uniformly from 10,000.
//!
//! Run: `cargo run --release -p server --example grpc_bench` after building the release
//! server (`scripts/bench` does both). Arguments: `--seconds N` a round (default 5),
//! `--rounds N` (default 5), `--clients N` (default 16), `--modes embedded,redis`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

#[allow(dead_code)]
#[path = "../tests/api/services.rs"]
mod services;

#[allow(dead_code)]
#[path = "support/release_server.rs"]
mod release_server;

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use release_server::{arg, operator_key, start_server, tenant};
use serde_json::json;

const SUBJECTS: u32 = 10_000;
const TENANT: &str = "bench";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Http,
    Grpc,
}

/// One round of one transport.
struct Round {
    errors: usize,
    rate: f64,
    p50: Duration,
    p99: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// One client's loop until `until`: the latency of each answered check, and the errors.
async fn http_client(
    url: String,
    key: String,
    seed: u64,
    until: Instant,
) -> (Vec<Duration>, usize) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut latencies, mut errors) = (Vec::new(), 0);
    while Instant::now() < until {
        let subject = rng.gen_range(0..SUBJECTS);
        let started = Instant::now();
        let ok = match client
            .post(&url)
            .header("x-api-key", &key)
            .header("content-type", "application/json")
            .body(format!(
                r#"{{"route":"GET /search","subject":"user-{subject}"}}"#
            ))
            .send()
            .await
        {
            Ok(response) => {
                let ok = response.status() == 200;
                ok && response.bytes().await.is_ok()
            }
            Err(_) => false,
        };
        if ok {
            latencies.push(started.elapsed());
        } else {
            errors += 1;
        }
    }
    (latencies, errors)
}

async fn grpc_client(
    url: String,
    key: String,
    seed: u64,
    until: Instant,
) -> (Vec<Duration>, usize) {
    let mut client = RateLimitServiceClient::connect(url).await.unwrap();
    let key: tonic::metadata::MetadataValue<_> = key.parse().unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut latencies, mut errors) = (Vec::new(), 0);
    while Instant::now() < until {
        let subject = rng.gen_range(0..SUBJECTS);
        let mut request = tonic::Request::new(RateLimitRequest {
            domain: TENANT.to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".to_owned(),
                    value: format!("user-{subject}"),
                }],
                ..Default::default()
            }],
            hits_addend: 0,
        });
        request.metadata_mut().insert("x-api-key", key.clone());
        let started = Instant::now();
        match client.should_rate_limit(request).await {
            Ok(answer) if answer.get_ref().overall_code == Code::Ok as i32 => {
                latencies.push(started.elapsed());
            }
            _ => errors += 1,
        }
    }
    (latencies, errors)
}

async fn round(
    transport: Transport,
    http_url: &str,
    grpc_url: &str,
    key: &str,
    clients: u64,
    seconds: u64,
    seed: u64,
) -> Round {
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let key = key.to_owned();
            match transport {
                Transport::Http => tokio::spawn(http_client(
                    format!("{http_url}/v1/check"),
                    key,
                    seed * 1000 + i,
                    until,
                )),
                Transport::Grpc => tokio::spawn(grpc_client(
                    grpc_url.to_owned(),
                    key,
                    seed * 1000 + i,
                    until,
                )),
            }
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (l, e) = task.await.unwrap();
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    Round {
        errors,
        rate: latencies.len() as f64 / elapsed,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn bench_mode(mode: &str, seconds: u64, rounds: u64, clients: u64) -> String {
    let postgres = (mode == "redis").then(services::PostgresServer::start);
    let redis = (mode == "redis").then(services::RedisServer::start);
    let grpc_port = services::free_port(false);
    let mut env: Vec<(&str, String)> =
        vec![("SLUICE_GRPC_LISTEN", format!("127.0.0.1:{grpc_port}"))];
    if let (Some(pg), Some(r)) = (&postgres, &redis) {
        env.push(("DATABASE_URL", pg.url("postgres")));
        env.push(("REDIS_URL", r.url()));
    }
    let server = start_server(&env, true);
    let grpc_url = format!("http://127.0.0.1:{grpc_port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", grpc_port)).is_err() {
        assert!(Instant::now() < deadline, "the gRPC listener never opened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let operator = operator_key(&env, &server);
    let client = reqwest::Client::new();
    let same = json!({ "scope": "subject", "algorithm": "token_bucket",
                       "limit": 1_000_000_000u64, "period_ms": 1000 });
    let mut http_rule = same.clone();
    http_rule["name"] = json!("per-user");
    http_rule["match"] = json!("default");
    let mut grpc_rule = same;
    grpc_rule["name"] = json!("per-user-grpc");
    grpc_rule["match"] = json!("descriptor");
    grpc_rule["descriptor"] = json!([{ "key": "user" }]);
    let key = tenant(
        &client,
        &server.url,
        &operator,
        TENANT,
        &[http_rule, grpc_rule],
    )
    .await;

    // Warm both paths (caches, connections, the Redis script).
    for transport in [Transport::Http, Transport::Grpc] {
        let warm = round(transport, &server.url, &grpc_url, &key, clients, 1, 0).await;
        assert!(
            warm.rate > 0.0 && warm.errors == 0,
            "{transport:?} warm-up failed: {} errors",
            warm.errors
        );
    }

    let mut out = format!(
        "\n### {mode}\n\n| round | HTTP checks/s | HTTP p50 ms | HTTP p99 ms | gRPC checks/s | gRPC p50 ms | gRPC p99 ms | gRPC ÷ HTTP (rate) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let (mut http_rates, mut grpc_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut http_p99s, mut grpc_p99s, mut http_p50s, mut grpc_p50s) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 1..=rounds {
        // Alternate which goes first, so neither always follows the other.
        let order = if r % 2 == 1 {
            [Transport::Http, Transport::Grpc]
        } else {
            [Transport::Grpc, Transport::Http]
        };
        let mut http = None;
        let mut grpc = None;
        for transport in order {
            let result = round(transport, &server.url, &grpc_url, &key, clients, seconds, r).await;
            assert_eq!(
                result.errors, 0,
                "{mode} {transport:?}: every check is answered and allowed"
            );
            match transport {
                Transport::Http => http = Some(result),
                Transport::Grpc => grpc = Some(result),
            }
        }
        let (http, grpc) = (http.unwrap(), grpc.unwrap());
        let ratio = grpc.rate / http.rate;
        eprintln!(
            "{mode} round {r}: http {:.0}/s grpc {:.0}/s",
            http.rate, grpc.rate
        );
        out.push_str(&format!(
            "| {r} | {:.0} | {} | {} | {:.0} | {} | {} | {ratio:.2}× |\n",
            http.rate,
            ms(http.p50),
            ms(http.p99),
            grpc.rate,
            ms(grpc.p50),
            ms(grpc.p99)
        ));
        http_rates.push(http.rate);
        grpc_rates.push(grpc.rate);
        ratios.push(ratio);
        http_p50s.push(http.p50.as_secs_f64() * 1000.0);
        grpc_p50s.push(grpc.p50.as_secs_f64() * 1000.0);
        http_p99s.push(http.p99.as_secs_f64() * 1000.0);
        grpc_p99s.push(grpc.p99.as_secs_f64() * 1000.0);
    }
    out.push_str(&format!(
        "| median | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2}× |\n",
        median(http_rates),
        median(http_p50s),
        median(http_p99s),
        median(grpc_rates),
        median(grpc_p50s),
        median(grpc_p99s),
        median(ratios)
    ));
    drop(server);
    out
}

#[tokio::main]
async fn main() {
    let seconds = arg("--seconds", 5);
    let rounds = arg("--rounds", 5);
    let clients = arg("--clients", 16);
    let args: Vec<String> = std::env::args().collect();
    let modes = args
        .iter()
        .position(|a| a == "--modes")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "embedded,redis".into());
    println!(
        "gRPC (`ShouldRateLimit`) and HTTP (`POST /v1/check`) side by side: one release `sluice` process, \
         one tenant, the same rule on each (a token bucket per subject that never denies), {clients} closed-loop \
         clients with a connection each, {SUBJECTS} subjects, {rounds} interleaved rounds of {seconds} s per transport; \
         clients, server, Redis and PostgreSQL share this machine's {} cores.",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    for mode in modes.split(',') {
        println!("{}", bench_mode(mode, seconds, rounds, clients).await);
    }
}
