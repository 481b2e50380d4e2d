//! What one check costs Redis itself: the microseconds Redis spends running the check script
//! per call (`INFO commandstats`, `usec_per_call` of `EVALSHA`), for a check of one rule and
//! of two rules, allowed and denied, as `docs/BENCHMARKS.md` reports it. A private Redis, the
//! limiter called directly (no HTTP), one call at a time so the figure is the script's alone.
//! Each case is measured over `--calls` calls (20,000 by default) in `--rounds` interleaved
//! rounds (5); the table gives the median round.
//!
//! Run: `scripts/bench`, or alone: `cargo run --release -p server --example script_cost --
//! [--calls N] [--rounds N]`.

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

use std::time::Duration;

use app::rules::{Algorithm, LimitSpec};
use release_server::arg;
use sluice::config::LimiterTarget;
use sluice::limiter::{keys, CheckRequest, Limiter, RedisOptions, RuleCheck};

/// A case: its name, its rules (algorithm, limit), and whether its checks are denied.
struct Case {
    name: &'static str,
    rules: Vec<(Algorithm, u64)>,
}

fn request(case: &Case, subject: &str) -> CheckRequest {
    CheckRequest {
        tenant: "bench".into(),
        rules: case
            .rules
            .iter()
            .enumerate()
            .map(|(i, (algorithm, limit))| RuleCheck {
                key: keys::bucket(
                    "bench",
                    &keys::rule_part(&format!("{}-{i}", case.name), *algorithm),
                    Some(subject),
                ),
                spec: LimitSpec::new(*algorithm, *limit, 60_000),
                cost: 1,
                shadow: false,
            })
            .collect(),
        request_id: None,
        now_ms: None,
        dry_run: false,
        max_live_keys: Some(1_000_000),
        reserve: None,
        lease: None,
    }
}

#[tokio::main]
async fn main() {
    let calls = arg("--calls", 20_000);
    let rounds = arg("--rounds", 5) as usize;
    let redis = services::RedisServer::start();
    let limiter = Limiter::connect(
        &LimiterTarget::Redis(redis.url()),
        RedisOptions {
            timeout: Duration::from_secs(5),
            connections: 1,
        },
    )
    .await
    .expect("the private Redis");
    let cases = [
        Case {
            name: "one rule (token bucket), allowed, a new subject each call",
            rules: vec![(Algorithm::TokenBucket, 1_000)],
        },
        Case {
            name: "two rules (token bucket + sliding window), allowed, a new subject each call",
            rules: vec![
                (Algorithm::TokenBucket, 1_000),
                (Algorithm::SlidingWindow, 1_000),
            ],
        },
        Case {
            name: "two rules, allowed, 100 subjects",
            rules: vec![
                (Algorithm::TokenBucket, 1_000_000),
                (Algorithm::SlidingWindow, 1_000_000),
            ],
        },
        Case {
            name: "two rules, denied (one subject over its limit)",
            rules: vec![
                (Algorithm::TokenBucket, 1),
                (Algorithm::SlidingWindow, 1_000),
            ],
        },
    ];
    eprintln!("script_cost: {calls} calls a case, {rounds} rounds");
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for (i, case) in cases.iter().enumerate() {
            redis.cli(&["CONFIG", "RESETSTAT"]);
            let (mut allowed, mut denied) = (0_u64, 0_u64);
            for n in 0..calls {
                let subject = match i {
                    0 | 1 => format!("r{round}-s{n}"),
                    2 => format!("s{}", n % 100),
                    _ => "over".to_owned(),
                };
                let outcome = limiter.check(&request(case, &subject)).await.unwrap();
                if outcome.allowed {
                    allowed += 1;
                } else {
                    denied += 1;
                }
            }
            let (counted, usec) = redis.command_stats("evalsha");
            assert_eq!(counted, calls, "one EVALSHA a check");
            let expect_denied = i == 3;
            assert!(
                if expect_denied {
                    denied >= calls - 1
                } else {
                    allowed == calls
                },
                "{}: {allowed} allowed, {denied} denied",
                case.name
            );
            figures[i].push(usec);
        }
        eprintln!("script_cost: round {} of {rounds} done", round + 1);
    }
    let version = redis
        .cli(&["INFO", "server"])
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    println!(
        "Redis {version} (a private instance), one call at a time, {calls} calls a case, \
         median of {rounds} interleaved rounds:\n"
    );
    println!("| check | µs per call in Redis (median) | rounds (µs) |");
    println!("|---|---:|---|");
    for (case, mut values) in cases.iter().zip(figures) {
        let each = values
            .iter()
            .map(|v| format!("{v:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        values.sort_by(f64::total_cmp);
        println!(
            "| {} | {:.2} | {each} |",
            case.name,
            values[values.len() / 2]
        );
    }
}
