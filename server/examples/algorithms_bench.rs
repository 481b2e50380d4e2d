//! Measures each algorithm on a private Redis: memory per active key (`MEMORY USAGE`),
//! Redis-side time per check (`INFO commandstats`, the EVALSHA's usec_per_call) for admitted
//! and denied checks apart (200 hot keys with a limit of 100 a day, filled by 20,000 checks that
//! are all admitted, then checked 20,000 times more, all denied), and how `sliding_log` grows
//! with its limit. Prints the tables of `docs/ALGORITHMS.md`.
//!
//! Run: `cargo run -p server --example algorithms_bench` (needs `redis-server` on PATH;
//! `scripts/setup` installs it). The Redis-side figures do not depend on this program's
//! build profile.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::print_stderr)]

#[allow(dead_code)]
#[path = "../tests/api/services.rs"]
mod services;

use std::time::{Duration, Instant};

use app::rules::{Algorithm, LimitSpec};
use sluice::config::LimiterTarget;
use sluice::limiter::{keys, CheckRequest, Limiter, RedisOptions, RuleCheck};

/// Active keys per algorithm for the memory average.
const KEYS: usize = 2_000;
/// Checks per algorithm and phase (admitted, denied) for the script-time average.
const CHECKS: usize = 20_000;

fn memory_usage(server: &services::RedisServer, key: &str) -> u64 {
    server
        .cli(&["MEMORY", "USAGE", key, "SAMPLES", "0"])
        .trim()
        .parse()
        .unwrap()
}

async fn check(
    limiter: &Limiter,
    tenant: &str,
    rule: &str,
    subject: &str,
    spec: LimitSpec,
    cost: u64,
) -> bool {
    let request = CheckRequest {
        tenant: tenant.to_owned(),
        rules: vec![RuleCheck {
            key: keys::bucket(tenant, rule, Some(subject)),
            spec,
            cost,
            shadow: false,
        }],
        request_id: None,
        now_ms: None,
        dry_run: false,
        max_live_keys: None,
        reserve: None,
        lease: None,
    };
    limiter.check(&request).await.unwrap().allowed
}

#[tokio::main]
async fn main() {
    let server = services::RedisServer::start();
    let options = RedisOptions {
        timeout: Duration::from_secs(2),
        connections: 1,
    };
    let limiter = Limiter::connect(&LimiterTarget::Redis(server.url()), options)
        .await
        .unwrap();
    let tenant = "bench-tenant";
    let version = server.cli(&["INFO", "server"]);
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    println!(
        "Redis {version}. Memory: {KEYS} active keys per algorithm, limit 100 per 60 s, after one admitted \
         request each. Script time: 200 keys with a limit of 100 a day, {CHECKS} checks that fill them (all \
         admitted), then {CHECKS} more (all denied).\n"
    );
    println!("| algorithm | memory per active key (bytes) | Redis µs per admitted check | Redis µs per denied check | round trip p50, admitted (µs) | round trip p50, denied (µs) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for algorithm in Algorithm::RATES {
        eprintln!("algorithms_bench: {}", algorithm.as_str());
        let spec = LimitSpec::new(algorithm, 100, 60_000);
        let rule = algorithm.as_str();
        // Memory: every key admitted once, as after one request per subject.
        for i in 0..KEYS {
            check(&limiter, tenant, rule, &format!("k{i}"), spec, 1).await;
        }
        let sample: Vec<u64> = (0..KEYS)
            .step_by(KEYS / 100)
            .map(|i| memory_usage(&server, &keys::bucket(tenant, rule, Some(&format!("k{i}")))))
            .collect();
        let memory = sample.iter().sum::<u64>() as f64 / sample.len() as f64;
        // Script time: 200 hot keys with a limit of 100 a day, each checked until full (all
        // admitted), then as often again (all denied).
        let spec = LimitSpec::new(algorithm, 100, 86_400_000);
        let rule = format!("{rule}-hot");
        let mut phases = Vec::new();
        for admitted in [true, false] {
            server.cli(&["CONFIG", "RESETSTAT"]);
            let mut latencies = Vec::with_capacity(CHECKS);
            let mut decided_as_expected = 0;
            for i in 0..CHECKS {
                let started = Instant::now();
                let allowed =
                    check(&limiter, tenant, &rule, &format!("hot{}", i % 200), spec, 1).await;
                latencies.push(started.elapsed());
                decided_as_expected += usize::from(allowed == admitted);
            }
            assert_eq!(
                decided_as_expected,
                CHECKS,
                "{rule}: every check {}",
                if admitted { "admitted" } else { "denied" }
            );
            latencies.sort();
            let (calls, usec) = server.command_stats("evalsha");
            assert_eq!(calls, CHECKS as u64);
            phases.push((usec, latencies[latencies.len() / 2].as_secs_f64() * 1e6));
        }
        println!(
            "| `{}` | {memory:.0} | {:.2} | {:.2} | {:.0} | {:.0} |",
            algorithm.as_str(),
            phases[0].0,
            phases[1].0,
            phases[0].1,
            phases[1].1
        );
    }

    println!(
        "\n`sliding_log` keeps one entry per admitted request, so its cost follows its limit:\n"
    );
    println!("| limit | memory of a full key (bytes) | bytes per entry | Redis time per check on a full key (µs) |");
    println!("|---:|---:|---:|---:|");
    for limit in [10_u64, 100, 1_000] {
        let spec = LimitSpec::new(Algorithm::SlidingLog, limit, 3_600_000);
        let rule = format!("log-{limit}");
        // Fill the key to its limit, one request at a time.
        for _ in 0..limit {
            assert!(check(&limiter, tenant, &rule, "full", spec, 1).await);
        }
        let memory = memory_usage(&server, &keys::bucket(tenant, &rule, Some("full")));
        server.cli(&["CONFIG", "RESETSTAT"]);
        let rounds = 200;
        for _ in 0..rounds {
            assert!(!check(&limiter, tenant, &rule, "full", spec, 1).await);
        }
        let (_, usec) = server.command_stats("evalsha");
        println!(
            "| {limit} | {memory} | {:.0} | {usec:.1} |",
            memory as f64 / limit as f64
        );
    }
}
