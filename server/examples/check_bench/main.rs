//! The check API under load, as `docs/BENCHMARKS.md` reports it: the release `sluice` server
//! in its own process, in embedded mode, on Redis and on a three-master Redis Cluster (both
//! with PostgreSQL), driven by the open-loop load generator in [`loadgen`] at constant arrival
//! rates, 15 s per tier, until the service saturates; then the deny path.
//!
//! Run: `scripts/bench` (it builds the release server first). Arguments:
//! `--seconds N` per tier (default 15), `--modes embedded,redis,cluster`, `--mix zipf`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

#[allow(dead_code)]
#[path = "../../tests/api/services.rs"]
mod services;

mod loadgen;
#[allow(dead_code)]
#[path = "../support/release_server.rs"]
mod release_server;

use std::time::Duration;

use loadgen::{Load, Mix, Report};
use release_server::{operator_key, start_server, tenant};
use serde_json::json;

const TIERS: [u32; 9] = [
    500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 40_000, 60_000,
];
const TENANTS: usize = 10;
const SUBJECTS: usize = 10_000;

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn row(r: &Report) -> String {
    format!(
        "| {} req/s | {:.0} | {} | {} | {} | {} | {:.2}% | {} |",
        r.target,
        r.achieved,
        ms(r.p50),
        ms(r.p90),
        ms(r.p95),
        ms(r.p99),
        r.error_rate() * 100.0,
        ms(r.lag_p99)
    )
}

async fn bench_mode(mode: &str, seconds: u64, mix: Mix) -> String {
    // Services for the distributed modes; they stop when dropped at the end of this function.
    let postgres = (mode != "embedded").then(services::PostgresServer::start);
    let redis = (mode == "redis").then(services::RedisServer::start);
    let cluster = (mode == "cluster").then(services::RedisCluster::start);
    let mut env: Vec<(&str, String)> = Vec::new();
    if let Some(pg) = &postgres {
        env.push(("DATABASE_URL", pg.url("postgres")));
    }
    if let Some(r) = &redis {
        env.push(("REDIS_URL", r.url()));
    }
    if let Some(c) = &cluster {
        env.push(("REDIS_CLUSTER_NODES", c.urls().join(",")));
    }
    let server = start_server(&env, true);
    let operator = operator_key(&env, &server);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(2048)
        .build()
        .unwrap();
    let mut allow_keys = Vec::new();
    for i in 0..TENANTS {
        let rule = json!({ "name": "per-user", "match": "default", "scope": "subject",
                           "algorithm": "token_bucket", "limit": 1_000_000_000u64, "period_ms": 1000 });
        allow_keys.push(tenant(&client, &server.url, &operator, &format!("t{i}"), &[rule]).await);
    }
    let deny_rule = json!({ "name": "tiny", "match": "all", "scope": "tenant",
                            "algorithm": "gcra", "limit": 1, "period_ms": 31_622_400_000u64 });
    let deny_key = tenant(&client, &server.url, &operator, "deny", &[deny_rule]).await;

    let load = |keys: Vec<String>, rate: u32, seconds: u64, mix: Mix| Load {
        url: server.url.clone(),
        keys,
        route: "POST /transfers/{id}".into(),
        subjects: SUBJECTS,
        mix,
        rate,
        duration: Duration::from_secs(seconds),
        max_in_flight: 20_000,
    };
    // Warm the caches and connection pools.
    loadgen::run(&client, &load(allow_keys.clone(), 500, 2, mix)).await;

    // What each tier's errors were, listed under the mode's tables.
    let mut error_notes = Vec::new();
    let mut note_errors = |path: &str, r: &Report| {
        for (kind, count) in &r.error_kinds {
            error_notes.push(format!("- {path}, {} req/s: {count} × {kind}", r.target));
        }
    };
    let mut out = format!("\n### {mode}\n\n| target | achieved (req/s) | p50 | p90 | p95 | p99 | errors | send lag p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for rate in TIERS {
        let report = loadgen::run(&client, &load(allow_keys.clone(), rate, seconds, mix)).await;
        eprintln!("{mode} allow {}", row(&report));
        note_errors("allow path", &report);
        out.push_str(&row(&report));
        out.push('\n');
        assert_eq!(report.denied, 0, "the allow path must not deny");
        assert!(report.allowed > 0, "nothing was allowed");
        if report.achieved < f64::from(rate) * 0.9 || report.error_rate() > 0.01 {
            out.push_str(&format!("\nSaturated at the {rate} req/s tier.\n"));
            break;
        }
    }
    out.push_str("\nDeny path (one tenant over its limit, every request denied after the first):\n\n| target | achieved (req/s) | p50 | p90 | p95 | p99 | errors | send lag p99 | denied |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for rate in [1_000, 2_000] {
        let report = loadgen::run(
            &client,
            &load(vec![deny_key.clone()], rate, seconds, Mix::Hot),
        )
        .await;
        eprintln!("{mode} deny {}", row(&report));
        note_errors("deny path", &report);
        out.push_str(&format!(
            "{} {} of {} |\n",
            row(&report),
            report.denied,
            report.sent
        ));
    }
    drop(server);
    if error_notes.is_empty() {
        out.push_str("\nNo errors.\n");
    } else {
        out.push_str("\nThe errors, by kind:\n\n");
        out.push_str(&error_notes.join("\n"));
        out.push('\n');
    }
    out
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let seconds: u64 = arg("--seconds").map_or(15, |s| s.parse().expect("--seconds N"));
    let modes = arg("--modes").unwrap_or_else(|| "embedded,redis,cluster".into());
    let mix: Mix = arg("--mix")
        .unwrap_or_else(|| "zipf".into())
        .parse()
        .unwrap();
    println!(
        "Open-loop constant arrival rate, {seconds} s per tier, {TENANTS} tenants and {SUBJECTS} subjects ({mix:?} mix), \
         one release `sluice` process; the load generator, the server, Redis and PostgreSQL share this machine's {} cores.",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    for mode in modes.split(',') {
        let table = bench_mode(mode, seconds, mix).await;
        println!("{table}");
    }
}
