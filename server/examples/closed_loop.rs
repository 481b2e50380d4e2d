//! Closed-loop throughput and p99 of `/v1/check` beside two in-repo baselines, as
//! `docs/BENCHMARKS.md` reports them: Debian's `wrk` (2 threads, 50 connections) against
//!
//! - **bare**: a minimal axum handler that answers 200 (the HTTP ceiling of this machine);
//! - **one EVALSHA**: a minimal axum handler that runs one token-bucket script on Redis per
//!   request (the hand-written one-round-trip limiter Sluice must beat);
//! - Sluice, embedded, allow path; Sluice on Redis, allow path; Sluice on Redis, one bucket
//!   flooded with denials (the deny cache's case), where the benchmark also counts the check
//!   script's calls per denial from the Redis's `INFO commandstats`; and Sluice on Redis on
//!   the allow path with a rule per minute, whose buckets live 61 s as the baseline's live
//!   60 s (the per-second rule's live 2 s, so nearly every random subject's check creates
//!   its bucket): not an acceptance figure, the same path without bucket creation.
//!
//! Every target runs in a process of its own (the baselines are this program started again
//! with `--serve-baseline`), the Redis ones on one private Redis. Each round runs every target
//! once, in a rotating order; the tables give each round and the median, then Sluice's ratios
//! to the baselines, which are issue 12's acceptance figures, then for each target on Redis
//! Redis's own share per request (script calls, CPU time, expired keys, expiry stalls) and, for
//! the allow paths, its time command by command (`INFO commandstats` before and after each run),
//! which shows what the check script's `redis.call`s cost and what its own Lua does.
//!
//! Run: `scripts/bench`, or alone: `cargo run --release -p server --example closed_loop --
//! [--seconds N] [--rounds N]` (15 s and 3 rounds by default) after building the release
//! server.

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

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use release_server::{arg, operator_key, start_server, tenant};
use serde_json::json;

/// Subjects the allow paths pick from at random (each a bucket of its own).
const SUBJECTS: u32 = 100_000;
/// wrk's threads and connections (the issue's method).
const THREADS: u32 = 2;
const CONNECTIONS: u32 = 50;

/// The one-EVALSHA baseline's script: a token bucket of `ARGV[2]` tokens refilled at
/// `ARGV[1]` per millisecond, one hash per subject.
const TOKEN_BUCKET: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)
redis.call('PEXPIRE', KEYS[1], 60000)
return allowed
";

/// Serves one baseline on `port` until killed.
fn serve_baseline(kind: &str, port: u16, redis_url: Option<String>) {
    use axum::{routing::post, Json, Router};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let app = match kind {
            "bare" => Router::new().route("/v1/check", post(|| async { "{\"allowed\":true}" })),
            "evalsha" => {
                let client = redis::Client::open(redis_url.expect("--redis URL")).unwrap();
                let connection = redis::aio::ConnectionManager::new(client).await.unwrap();
                let script = std::sync::Arc::new(redis::Script::new(TOKEN_BUCKET));
                Router::new().route(
                    "/v1/check",
                    post(move |Json(body): Json<serde_json::Value>| {
                        let mut connection = connection.clone();
                        let script = script.clone();
                        async move {
                            let subject = body["subject"].as_str().unwrap_or("anonymous");
                            let allowed: i64 = script
                                .key(format!("baseline:{subject}"))
                                .arg(1_000_000_000_u64)
                                .arg(1_000_000_000_u64)
                                .invoke_async(&mut connection)
                                .await
                                .unwrap_or(0);
                            if allowed == 1 {
                                (axum::http::StatusCode::OK, "{\"allowed\":true}")
                            } else {
                                (
                                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                                    "{\"allowed\":false}",
                                )
                            }
                        }
                    }),
                )
            }
            other => panic!("no baseline {other}"),
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        axum::serve(listener, app).await.unwrap();
    });
}

/// A baseline in a process of its own; killed when dropped.
struct Baseline {
    child: Child,
    url: String,
}

impl Drop for Baseline {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_baseline(kind: &str, redis: Option<&services::RedisServer>) -> Baseline {
    let port = services::free_port(false);
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--serve-baseline", kind, "--port", &port.to_string()])
        .stdout(Stdio::null());
    if let Some(redis) = redis {
        command.args(["--redis", &redis.url()]);
    }
    let baseline = Baseline {
        child: command.spawn().unwrap(),
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the {kind} baseline did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    baseline
}

/// What one wrk run measured (its `done` hook prints these).
#[derive(Debug, Clone, Copy)]
struct Run {
    requests: u64,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
    /// Connect, read, write errors and timeouts.
    socket_errors: u64,
    /// Answers other than 2xx and 3xx.
    non_2xx: u64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
}

/// The wrk script: `POST /v1/check` with `key`, a subject drawn at random from `SUBJECTS`
/// (or always `hot`), and a `done` hook that prints the figures on one line.
fn wrk_script(key: &str, random_subjects: bool) -> String {
    let subject = if random_subjects {
        format!("'u' .. math.random(1, {SUBJECTS})")
    } else {
        "'hot'".to_owned()
    };
    format!(
        r#"
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.headers["x-api-key"] = "{key}"
local thread_number = 0
function setup(thread)
  thread_number = thread_number + 1
  thread:set("seed", thread_number)
end
function init(args)
  math.randomseed(os.time() * 1000 + (seed or 0))
end
function request()
  return wrk.format(nil, nil, nil, '{{"route":"POST /transfers/1","subject":"' .. {subject} .. '"}}')
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("closed_loop requests=%d micros=%d p50=%d p99=%d socket_errors=%d non_2xx=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
"#
    )
}

fn wrk(url: &str, script: &str, seconds: u64) -> Run {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), script).unwrap();
    let out = Command::new("wrk")
        .args([
            &format!("-t{THREADS}"),
            &format!("-c{CONNECTIONS}"),
            &format!("-d{seconds}s"),
            "--timeout",
            "5s",
            "-s",
        ])
        .arg(file.path())
        .arg(format!("{url}/v1/check"))
        .output()
        .expect("wrk (scripts/setup installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wrk failed: {text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("closed_loop "))
        .unwrap_or_else(|| panic!("no figures from wrk: {text}"));
    let field = |name: &str| -> f64 {
        line.split(' ')
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    Run {
        requests: field("requests") as u64,
        seconds: field("micros") / 1e6,
        p50_us: field("p50"),
        p99_us: field("p99"),
        socket_errors: field("socket_errors") as u64,
        non_2xx: field("non_2xx") as u64,
    }
}

/// Checks a server has counted as denied on `/metrics` so far.
async fn denials(client: &reqwest::Client, url: &str) -> f64 {
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("sluice_decisions_total{") && l.contains(r#"outcome="denied""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One target of the benchmark.
struct Target {
    name: &'static str,
    url: String,
    script: String,
    /// Every answer must be a 2xx (an allow path), or a 429 (the deny flood).
    denies: bool,
    runs: Vec<Run>,
    /// Check-script calls (`EVALSHA`) per request, each round (targets on Redis).
    redis_per_request: Vec<f64>,
    /// The CPU time Redis spent per request during each round's run, in µs: in user space and
    /// in the kernel (targets on Redis).
    redis_cpu_us: Vec<(f64, f64)>,
    /// Redis's commands during all rounds' runs (targets on Redis): name, then calls and µs
    /// (`INFO commandstats`), and the requests they served.
    commands: BTreeMap<String, (u64, u64)>,
    requests: u64,
    /// Whether it uses the private Redis (its expiry is then reported).
    on_redis: bool,
    /// Keys Redis expired per request during each round's run.
    expired_per_request: Vec<f64>,
    /// The longest stall of Redis's expiry cycle during each round's run, in ms.
    expiry_stall_ms: Vec<u64>,
    /// The process that answers it.
    pid: u32,
    /// The CPU time that process spent per request during each round's run, in µs: in user
    /// space and in the kernel.
    cpu_us: Vec<(f64, f64)>,
}

/// The CPU time process `pid` has used so far, in clock ticks: user and kernel (`utime` and
/// `stime` of `/proc/<pid>/stat`).
fn cpu_ticks(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name (field 2) may hold spaces; the fields counted from 3 follow its ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    (fields[11].parse().unwrap(), fields[12].parse().unwrap())
}

/// Clock ticks a second (`getconf CLK_TCK`), the unit of [`cpu_ticks`].
fn ticks_per_second() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The CPU time the private Redis has used since it started, in µs: user and kernel
/// (`used_cpu_user` and `used_cpu_sys` of `INFO cpu`, in seconds to the microsecond).
fn redis_cpu_us(redis: &services::RedisServer) -> (f64, f64) {
    let info = redis.cli(&["INFO", "cpu"]);
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in INFO cpu: {info}"))
            * 1e6
    };
    (field("used_cpu_user:"), field("used_cpu_sys:"))
}

/// Every command Redis has run since it started, with its calls and µs (`INFO
/// commandstats`); a command a script runs is counted under its own name, and its time is
/// also in the script's.
fn command_totals(redis: &services::RedisServer) -> BTreeMap<String, (u64, u64)> {
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|l| {
            let (name, fields) = l.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))?
                    .parse()
                    .ok()
            };
            Some((name.to_owned(), (field("calls=")?, field("usec=")?)))
        })
        .collect()
}

/// Keys the private Redis has expired since it started (`INFO stats`).
fn expired_keys(redis: &services::RedisServer) -> u64 {
    redis
        .cli(&["INFO", "stats"])
        .lines()
        .find_map(|l| l.trim().strip_prefix("expired_keys:"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The longest expiry-cycle stall Redis's latency monitor recorded since the last `LATENCY
/// RESET` (`LATENCY HISTORY expire-cycle`: pairs of a time and the stall's ms).
fn longest_expiry_stall_ms(redis: &services::RedisServer) -> u64 {
    redis
        .cli(&["LATENCY", "HISTORY", "expire-cycle"])
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .collect::<Vec<_>>()
        .chunks(2)
        .filter_map(|pair| pair.get(1).copied())
        .max()
        .unwrap_or(0)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve-baseline") {
        let redis = args
            .iter()
            .position(|a| a == "--redis")
            .map(|i| args[i + 1].clone());
        serve_baseline(&args[i + 1], arg("--port", 0) as u16, redis);
        return;
    }
    let seconds = arg("--seconds", 15);
    let rounds = arg("--rounds", 3) as usize;
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(bench(seconds, rounds));
}

async fn bench(seconds: u64, rounds: usize) {
    let redis = services::RedisServer::start();
    let postgres = services::PostgresServer::start();
    let client = reqwest::Client::new();
    let bare = start_baseline("bare", None);
    let evalsha = start_baseline("evalsha", Some(&redis));

    let allow_rule = json!({ "name": "per-user", "match": "default", "scope": "subject",
                             "algorithm": "token_bucket", "limit": 1_000_000_000u64, "period_ms": 1000 });
    let deny_rule = json!({ "name": "tiny", "match": "all", "scope": "tenant",
                            "algorithm": "gcra", "limit": 1, "period_ms": 31_622_400_000u64 });
    let embedded = start_server(&[], false);
    let embedded_key = tenant(
        &client,
        &embedded.url,
        &operator_key(&[], &embedded),
        "embedded",
        std::slice::from_ref(&allow_rule),
    )
    .await;
    let redis_env = [
        ("DATABASE_URL", postgres.url("postgres")),
        ("REDIS_URL", redis.url()),
    ];
    let distributed = start_server(&redis_env, false);
    let operator = operator_key(&redis_env, &distributed);
    let redis_key = tenant(&client, &distributed.url, &operator, "allow", &[allow_rule]).await;
    let deny_key = tenant(&client, &distributed.url, &operator, "deny", &[deny_rule]).await;
    // The same never-denying token bucket over a minute: its buckets live 61 s (a full
    // refill plus a second), like the baseline's 60 s, where the per-second rule's live 2 s and
    // nearly every check of a random subject creates its bucket (and pays the live-bucket
    // quota's index for it).
    let minute_rule = json!({ "name": "per-user-minute", "match": "default", "scope": "subject",
                              "algorithm": "token_bucket", "limit": 1_000_000_000u64, "period_ms": 60_000 });
    let minute_key = tenant(
        &client,
        &distributed.url,
        &operator,
        "minute",
        &[minute_rule],
    )
    .await;

    let target = |name, url: &str, pid: u32, script: String, denies| Target {
        name,
        url: url.to_owned(),
        script,
        denies,
        runs: Vec::new(),
        redis_per_request: Vec::new(),
        redis_cpu_us: Vec::new(),
        commands: BTreeMap::new(),
        requests: 0,
        on_redis: url == evalsha.url || url == distributed.url,
        expired_per_request: Vec::new(),
        expiry_stall_ms: Vec::new(),
        pid,
        cpu_us: Vec::new(),
    };
    let tick_us = 1e6 / ticks_per_second();
    // Redis's latency monitor records every event of 1 ms or more (the expiry cycle's among
    // them), so the report can say how long Redis stopped to expire keys.
    redis.cli(&["CONFIG", "SET", "latency-monitor-threshold", "1"]);
    let mut targets = vec![
        target(
            "bare axum handler (200)",
            &bare.url,
            bare.child.id(),
            wrk_script("none", true),
            false,
        ),
        target(
            "axum handler, one EVALSHA token bucket",
            &evalsha.url,
            evalsha.child.id(),
            wrk_script("none", true),
            false,
        ),
        target(
            "Sluice embedded, allow path",
            &embedded.url,
            embedded.pid(),
            wrk_script(&embedded_key, true),
            false,
        ),
        target(
            "Sluice on Redis, allow path",
            &distributed.url,
            distributed.pid(),
            wrk_script(&redis_key, true),
            false,
        ),
        target(
            "Sluice on Redis, deny flood on one bucket",
            &distributed.url,
            distributed.pid(),
            wrk_script(&deny_key, false),
            true,
        ),
        target(
            "Sluice on Redis, allow path, buckets kept 61 s",
            &distributed.url,
            distributed.pid(),
            wrk_script(&minute_key, true),
            false,
        ),
    ];
    // Warm every target (connections, caches, the deny bucket's one admission).
    for t in &targets {
        wrk(&t.url, &t.script, 2);
    }
    let steps = rounds * targets.len();
    let mut step = 0;
    for round in 0..rounds {
        let n = targets.len();
        for k in 0..n {
            let t = &mut targets[(round + k) % n];
            step += 1;
            let denied_before = if t.denies {
                denials(&client, &t.url).await
            } else {
                0.0
            };
            redis.cli(&["LATENCY", "RESET"]);
            let expired_before = expired_keys(&redis);
            let cpu_before = cpu_ticks(t.pid);
            let redis_before = redis_cpu_us(&redis);
            let commands_before = command_totals(&redis);
            let run = wrk(&t.url, &t.script, seconds);
            let commands_after = command_totals(&redis);
            let redis_after = redis_cpu_us(&redis);
            let cpu_after = cpu_ticks(t.pid);
            let per_request = |after: u64, before: u64| {
                (after - before) as f64 * tick_us / run.requests.max(1) as f64
            };
            t.cpu_us.push((
                per_request(cpu_after.0, cpu_before.0),
                per_request(cpu_after.1, cpu_before.1),
            ));
            // Check-script calls during the run, from the same two readings.
            let evalsha =
                |totals: &BTreeMap<String, (u64, u64)>| totals.get("evalsha").map_or(0, |c| c.0);
            let calls = evalsha(&commands_after) - evalsha(&commands_before);
            if t.on_redis {
                let expired = expired_keys(&redis).saturating_sub(expired_before);
                t.expired_per_request
                    .push(expired as f64 / run.requests.max(1) as f64);
                t.expiry_stall_ms.push(longest_expiry_stall_ms(&redis));
                t.redis_per_request
                    .push(calls as f64 / run.requests.max(1) as f64);
                let requests = run.requests.max(1) as f64;
                t.redis_cpu_us.push((
                    (redis_after.0 - redis_before.0) / requests,
                    (redis_after.1 - redis_before.1) / requests,
                ));
                for (name, (calls, usec)) in commands_after {
                    let (calls_then, usec_then) =
                        commands_before.get(&name).copied().unwrap_or((0, 0));
                    let total = t.commands.entry(name).or_insert((0, 0));
                    total.0 += calls.saturating_sub(calls_then);
                    total.1 += usec.saturating_sub(usec_then);
                }
                t.requests += run.requests;
            }
            eprintln!(
                "[closed_loop {step}/{steps}] round {}: {}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
                round + 1,
                t.name,
                run.rate(),
                run.p50_us / 1000.0,
                run.p99_us / 1000.0
            );
            assert_eq!(run.socket_errors, 0, "{}: socket errors", t.name);
            if t.denies {
                // Every answer a denial: counted as such by the server, and 429 on the wire.
                let denied = denials(&client, &t.url).await - denied_before;
                assert_eq!(run.non_2xx, run.requests, "{}: every check denied", t.name);
                assert!(
                    denied >= run.requests as f64,
                    "{}: {denied} denials counted for {} requests",
                    t.name,
                    run.requests
                );
            } else {
                assert_eq!(run.non_2xx, 0, "{}: every check allowed", t.name);
            }
            t.runs.push(run);
        }
    }

    println!(
        "Closed loop: `wrk -t{THREADS} -c{CONNECTIONS}`, {seconds} s a run, {rounds} rounds, each round every target once in a rotating order; \
         random subjects from {SUBJECTS}; wrk, the servers, Redis and PostgreSQL share this machine's {} cores.\n",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let head: String = (1..=rounds).map(|r| format!(" round {r} |")).collect();
    let rule: String = (0..rounds).map(|_| "---:|").collect();
    println!("| target |{head} median req/s | median p50 | median p99 | server CPU per request, user + kernel (median) |");
    println!("|---|{rule}---:|---:|---:|---:|");
    for t in &targets {
        let each: String = t
            .runs
            .iter()
            .map(|r| format!(" {:.0} / {:.2} ms |", r.rate(), r.p99_us / 1000.0))
            .collect();
        println!(
            "| {} |{each} {:.0} | {:.2} ms | {:.2} ms | {:.1} + {:.1} µs |",
            t.name,
            median(t.runs.iter().map(Run::rate).collect()),
            median(t.runs.iter().map(|r| r.p50_us).collect()) / 1000.0,
            median(t.runs.iter().map(|r| r.p99_us).collect()) / 1000.0,
            median(t.cpu_us.iter().map(|c| c.0).collect()),
            median(t.cpu_us.iter().map(|c| c.1).collect()),
        );
    }
    println!(
        "\nEach round's cell is requests/s / p99. The last column is the CPU time the answering \
         process spent per request during the runs (`utime` and `stime` of `/proc/<pid>/stat`), \
         the cost per request that the throughput's ratios hide: the Redis targets' own time in \
         Redis is not in it.\n"
    );

    // Ratios per round (side by side), then their median.
    let ratio = |a: usize, b: usize, f: fn(&Run) -> f64| {
        median(
            targets[a]
                .runs
                .iter()
                .zip(&targets[b].runs)
                .map(|(x, y)| f(x) / f(y))
                .collect(),
        )
    };
    let p99 = |r: &Run| r.p99_us;
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    let redis_allow = ratio(3, 1, Run::rate);
    let redis_p99 = ratio(3, 1, p99);
    let deny = ratio(4, 0, Run::rate);
    let calls = median(targets[4].redis_per_request.clone());
    let embedded_allow = ratio(2, 0, Run::rate);
    println!("| acceptance figure (median of the rounds' ratios) | measured | target | |");
    println!("|---|---:|---:|---|");
    println!(
        "| Redis allow path ÷ one-EVALSHA baseline, requests/s | {redis_allow:.2}× | ≥ 0.9× | {} |",
        verdict(redis_allow >= 0.9)
    );
    println!(
        "| Redis allow path ÷ one-EVALSHA baseline, p99 | {redis_p99:.2}× | ≤ 1.2× | {} |",
        verdict(redis_p99 <= 1.2)
    );
    println!(
        "| Redis deny flood ÷ bare handler, requests/s | {deny:.2}× | ≥ 0.8× | {} |",
        verdict(deny >= 0.8)
    );
    println!(
        "| Redis deny flood: check-script calls per denial | {calls:.4} | ≤ 0.05 | {} |",
        verdict(calls <= 0.05)
    );
    println!(
        "| embedded allow path ÷ bare handler, requests/s | {embedded_allow:.2}× | ≥ 0.8× | {} |",
        verdict(embedded_allow >= 0.8)
    );
    println!(
        "\nNot an acceptance figure: with buckets that live 61 s (a rule per minute), the Redis allow path runs at \
         {:.2}× the one-EVALSHA baseline's requests/s and {:.2}× its p99, against {redis_allow:.2}× and {redis_p99:.2}× \
         with the per-second rule, whose buckets live 2 s.",
        ratio(5, 1, Run::rate),
        ratio(5, 1, p99)
    );
    println!(
        "\nRedis's share of each target on Redis during its runs: check-script calls (`EVALSHA` of \
         `INFO commandstats`) and Redis's own CPU time (`used_cpu_user` and `used_cpu_sys` of `INFO \
         cpu`) per request, the keys it expired per request (`expired_keys` of `INFO stats`), and \
         the longest `expire-cycle` event of its latency monitor (threshold 1 ms):\n"
    );
    println!("| target on Redis | script calls per request (median) | Redis CPU per request, user + kernel (median) | keys expired per request (median) | longest expiry-cycle stall (each round) |");
    println!("|---|---:|---:|---:|---|");
    for t in targets.iter().filter(|t| t.on_redis) {
        let stalls: Vec<String> = t
            .expiry_stall_ms
            .iter()
            .map(|&ms| {
                if ms == 0 {
                    "< 1 ms".to_owned()
                } else {
                    format!("{ms} ms")
                }
            })
            .collect();
        println!(
            "| {} | {:.3} | {:.1} + {:.1} µs | {:.3} | {} |",
            t.name,
            median(t.redis_per_request.clone()),
            median(t.redis_cpu_us.iter().map(|c| c.0).collect()),
            median(t.redis_cpu_us.iter().map(|c| c.1).collect()),
            median(t.expired_per_request.clone()),
            stalls.join(", ")
        );
    }
    print_commands(&targets);
    drop((bare, evalsha, embedded, distributed));
}

/// Where Redis's time went on each allow path on Redis: its commands per request, summed over
/// the rounds, the script's own and those its script ran.
fn print_commands(targets: &[Target]) {
    // What this benchmark itself asks between runs.
    let own =
        |name: &str| name == "info" || name.starts_with("config|") || name.starts_with("latency|");
    let columns: Vec<&Target> = targets.iter().filter(|t| t.on_redis && !t.denies).collect();
    let per_request = |t: &Target, name: &str| {
        let (calls, usec) = t.commands.get(name).copied().unwrap_or((0, 0));
        let requests = t.requests.max(1) as f64;
        (calls as f64 / requests, usec as f64 / requests)
    };
    let mut names: Vec<&String> = columns
        .iter()
        .flat_map(|t| t.commands.keys())
        .filter(|name| !own(name))
        .collect();
    names.sort();
    names.dedup();
    names.retain(|name| columns.iter().any(|t| per_request(t, name).0 >= 0.001));
    let busiest = |name: &str| {
        columns
            .iter()
            .map(|t| per_request(t, name).1)
            .fold(0.0, f64::max)
    };
    names.sort_by(|a, b| busiest(b).total_cmp(&busiest(a)));
    println!(
        "\nRedis's commands per request on each allow path on Redis, all rounds together (`calls` and \
         `usec` of `INFO commandstats`, which count a command a script runs under its own name and \
         also in the script's `EVALSHA`); each cell is calls / µs per request. The last row is \
         `EVALSHA`'s time less that of every other command: the scripts' Lua and the cost of each \
         `redis.call`, less the few commands the server sends outside a script (a few hundred a run):\n"
    );
    let head: String = columns.iter().map(|t| format!(" {} |", t.name)).collect();
    let rule: String = columns.iter().map(|_| "---:|").collect();
    println!("| command |{head}\n|---|{rule}");
    for name in &names {
        let cells: String = columns
            .iter()
            .map(|t| {
                let (calls, us) = per_request(t, name);
                format!(" {calls:.3} / {us:.2} |")
            })
            .collect();
        println!("| `{}` |{cells}", name.to_uppercase());
    }
    let cells: String = columns
        .iter()
        .map(|t| {
            let others: f64 = t
                .commands
                .keys()
                .filter(|name| name.as_str() != "evalsha" && !own(name))
                .map(|name| per_request(t, name).1)
                .sum();
            format!(" {:.2} µs |", per_request(t, "evalsha").1 - others)
        })
        .collect();
    println!("| `EVALSHA` less the other commands |{cells}");
}
