//! What one check costs Redis itself: the microseconds Redis spends running the check script
//! per call (`INFO commandstats`, `usec_per_call` of `EVALSHA`), for a check of one rule and
//! of two rules, allowed and denied, as `docs/BENCHMARKS.md` reports it. A private Redis, the
//! limiter called directly (no HTTP). The first cases send one check at a time, so each call
//! is a batch of one and the figure is one check's alone; the last ones send checks of one
//! tenant 16 and 64 at a time, so the limiter batches them (several checks a call, as under
//! load) and the figure is the Redis microseconds of all calls divided by the checks they
//! decided. Each case is measured over `--calls` checks (20,000 by default) in `--rounds`
//! interleaved rounds (5); the table gives the median round.
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
use futures::future::join_all;
use release_server::arg;
use sluice::config::LimiterTarget;
use sluice::limiter::{keys, CheckRequest, Limiter, RedisOptions, RuleCheck};

/// A case: its name, its rules (algorithm, limit), and how many checks are sent at once.
struct Case {
    name: &'static str,
    rules: Vec<(Algorithm, u64)>,
    at_once: usize,
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
            at_once: 1,
        },
        Case {
            name: "two rules (token bucket + sliding window), allowed, a new subject each call",
            rules: vec![
                (Algorithm::TokenBucket, 1_000),
                (Algorithm::SlidingWindow, 1_000),
            ],
            at_once: 1,
        },
        Case {
            name: "two rules, allowed, 100 subjects",
            rules: vec![
                (Algorithm::TokenBucket, 1_000_000),
                (Algorithm::SlidingWindow, 1_000_000),
            ],
            at_once: 1,
        },
        Case {
            name: "two rules, denied (one subject over its limit)",
            rules: vec![
                (Algorithm::TokenBucket, 1),
                (Algorithm::SlidingWindow, 1_000),
            ],
            at_once: 1,
        },
        Case {
            name: "two rules, allowed, a new subject each check, 16 checks at a time (batched)",
            rules: vec![
                (Algorithm::TokenBucket, 1_000),
                (Algorithm::SlidingWindow, 1_000),
            ],
            at_once: 16,
        },
        Case {
            name: "two rules, allowed, a new subject each check, 64 checks at a time (batched)",
            rules: vec![
                (Algorithm::TokenBucket, 1_000),
                (Algorithm::SlidingWindow, 1_000),
            ],
            at_once: 64,
        },
    ];
    eprintln!("script_cost: {calls} calls a case, {rounds} rounds");
    // Per case and round: Redis µs per check, and checks per call.
    let mut figures: Vec<Vec<(f64, f64)>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for (i, case) in cases.iter().enumerate() {
            redis.cli(&["CONFIG", "RESETSTAT"]);
            let (mut allowed, mut denied) = (0_u64, 0_u64);
            let mut n = 0_u64;
            while n < calls {
                let wave = (calls - n).min(case.at_once as u64);
                let requests: Vec<CheckRequest> = (n..n + wave)
                    .map(|n| {
                        let subject = match case.rules[0].1 {
                            1 => "over".to_owned(),
                            1_000_000 => format!("s{}", n % 100),
                            _ => format!("r{round}-s{n}"),
                        };
                        request(case, &subject)
                    })
                    .collect();
                let outcomes = join_all(requests.iter().map(|r| limiter.check(r))).await;
                for outcome in outcomes {
                    if outcome.unwrap().allowed {
                        allowed += 1;
                    } else {
                        denied += 1;
                    }
                }
                n += wave;
            }
            let (script_calls, usec_per_call) = redis.command_stats("evalsha");
            if case.at_once == 1 {
                assert_eq!(script_calls, calls, "one EVALSHA a check sent alone");
            } else {
                assert!(
                    script_calls < calls,
                    "{}: {script_calls} calls for {calls} checks: none batched",
                    case.name
                );
            }
            let expect_denied = case.rules[0].1 == 1;
            assert!(
                if expect_denied {
                    denied >= calls - 1
                } else {
                    allowed == calls
                },
                "{}: {allowed} allowed, {denied} denied",
                case.name
            );
            let per_check = usec_per_call * script_calls as f64 / calls as f64;
            figures[i].push((per_check, calls as f64 / script_calls as f64));
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
        "Redis {version} (a private instance), {calls} checks a case, median of {rounds} \
         interleaved rounds. A check sent alone is one call; checks sent at once are batched \
         by the limiter, and their figure is the calls' Redis time divided by the checks:\n"
    );
    println!("| check | µs per check in Redis (median) | checks per call | rounds (µs) |");
    println!("|---|---:|---:|---|");
    for (case, mut values) in cases.iter().zip(figures) {
        let each = values
            .iter()
            .map(|(v, _)| format!("{v:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (median, per_call) = values[values.len() / 2];
        println!("| {} | {median:.2} | {per_call:.1} | {each} |", case.name);
    }
}
