//! Checks while a crowd of anonymous clients tries to sign in, as `docs/SECURITY.md` reports
//! it: the release `sluice` server in its own process (embedded mode), checks at a steady
//! `--rate` (2,000 a second by default, spread over 4 clients), first alone, then beside
//! `--attackers` clients that each send one sign-in every second, all at the same instant
//! (100 concurrent sign-ins each second), then beside the same clients sending sign-ins as
//! fast as they are answered (a flood). Each attacker comes from its own loopback address and
//! tries a new email every time, so neither the per-client nor the per-email budget stops it:
//! only the instance's budget and the cap on concurrent password hashes stand between it and
//! the server. For each phase: the checks' latency percentiles, how the sign-ins were
//! answered, and the server's resident memory (sampled every 50 ms; and its peak over the
//! whole run from `/proc/<pid>/status`).
//!
//! The attackers run on threads of their own at the lowest priority (nice 19): on a
//! 2-core machine the load generator shares the server's cores, and a profile of the sign-in
//! waves (`perf sched`) showed the server's workers waiting up to 4.8 ms behind the
//! generator's own 2 ms runs of attacker work. At the lowest priority, the attackers still
//! send every request (the server answers each wave within the second), but what the checks
//! measure is the server's answer to them, not the generator's. `--lower-attackers 0`
//! measures the old way.
//!
//! A p99 over one phase on a shared 2-core machine moves by several times from one phase to
//! the next with nothing changed, so the paced phases are then run again `--rounds` times
//! (9 by default), interleaved (alone, sign-ins, control, alone, …): the verdict is the median
//! over rounds of each phase's p99, and of each round's ratio to the checks alone beside it.
//!
//! Run: `scripts/bench` (it builds the release server first), or alone:
//! `cargo run --release -p server --example sign_in_bench -- [--seconds N] [--attackers N] [--rate N]
//! [--sign-in-rate N] [--rounds N] [--lower-attackers 0|1]` (`--sign-in-rate` is the server's
//! `SLUICE_SIGN_IN_RATE`, 10 by default).

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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use release_server::{arg, operator_key, post, start_server, tenant};
use serde_json::json;

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

/// What one phase measured.
struct Phase {
    checks: Vec<Duration>,
    sign_ins: Vec<u16>,
    peak_rss_mib: f64,
}

/// What the attackers send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    None,
    /// Each attacker one sign-in a second, all at the same instant.
    SignInWaves,
    /// The control: the same waves, of a server function that neither limits nor hashes
    /// (`/api/me` without a session), to tell the cost of a burst of requests from the cost
    /// of signing in.
    MeWaves,
    /// Each attacker its next sign-in as soon as the last is answered.
    Flood,
}

/// How the checks are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// At this many checks a second in all: latency at a steady rate.
    Paced(u64),
    /// Each client its next check as soon as the last is answered: the server saturated.
    Saturating,
}

/// `clients` check clients sending as `load` says for `seconds`, beside `attackers` clients
/// attacking as `attack` says.
#[allow(clippy::too_many_arguments)]
async fn phase(
    attack_runtime: &tokio::runtime::Handle,
    url: &str,
    key: &str,
    pid: u32,
    clients: usize,
    load: Load,
    attackers: u8,
    attack: Attack,
    seconds: u64,
) -> Phase {
    let began = Instant::now();
    let until = began + Duration::from_secs(seconds);
    let interval = match load {
        Load::Paced(rate) => Duration::from_secs_f64(clients as f64 / rate as f64),
        Load::Saturating => Duration::ZERO,
    };
    let checks = Arc::new(Mutex::new(Vec::new()));
    let sign_ins = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (url, key, checks) = (format!("{url}/v1/check"), key.to_owned(), checks.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut next = Instant::now();
            while Instant::now() < until {
                if load != Load::Saturating {
                    tokio::time::sleep_until(next.into()).await;
                }
                let sent = Instant::now();
                let (status, _) = post(&client, &url, &key, json!({ "route": "GET /api" })).await;
                assert_eq!(status, 200);
                // From when the check was sent; but from when it was due if the client fell
                // behind (a stall the server caused must not hide in the client's wait). The
                // timer's own lateness (up to a millisecond) is the client's, not the server's.
                let late = load != Load::Saturating
                    && sent.duration_since(next) > Duration::from_millis(2);
                let took = if late { next.elapsed() } else { sent.elapsed() };
                checks.lock().unwrap().push(took);
                next += interval;
            }
        }));
    }
    let attackers = if attack == Attack::None { 0 } else { attackers };
    let endpoint = if attack == Attack::MeWaves {
        "me"
    } else {
        "sign_in"
    };
    for a in 0..attackers {
        let (url, sign_ins) = (format!("{url}/api/{endpoint}"), sign_ins.clone());
        tasks.push(attack_runtime.spawn(async move {
            // Its own loopback address: the per-client budget does not stop the crowd.
            let client = reqwest::Client::builder()
                .local_address(std::net::IpAddr::from([127, 0, 2, a.saturating_add(1)]))
                .build()
                .unwrap();
            let mut n = 0_u64;
            while Instant::now() < until {
                if attack != Attack::Flood {
                    // The next whole second since the phase began: every attacker at once.
                    let second = Duration::from_secs(began.elapsed().as_secs() + 1);
                    tokio::time::sleep_until((began + second).into()).await;
                    if Instant::now() >= until {
                        break;
                    }
                }
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
    let rate = arg("--rate", 2_000);
    let sign_in_rate = arg("--sign-in-rate", 10);
    let saturating_clients = arg("--saturating-clients", 16) as usize;
    let rounds = arg("--rounds", 9) as usize;
    let lower_attackers = arg("--lower-attackers", 1) == 1;
    let attack_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("attacker")
        .on_thread_start(move || {
            if lower_attackers {
                // A normal thread at the lowest priority: nice 19 on Linux.
                thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min)
                    .expect("an attacker thread at the lowest priority");
            }
        })
        .enable_all()
        .build()
        .expect("the attackers' runtime");
    let attackers_on = attack_runtime.handle().clone();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("sign_in_bench: {rate} checks/s over {clients} clients, {attackers} attackers, {seconds} s a phase");
    let env = [
        (
            "SLUICE_ADMIN_PASSWORD",
            "the bench operator's password".to_owned(),
        ),
        ("RUST_LOG", "error".to_owned()),
        ("SLUICE_SIGN_IN_RATE", sign_in_rate.to_string()),
    ];
    let server = start_server(&env, false);
    let pid = server.pid();
    let operator = operator_key(&env, &server);
    let client = reqwest::Client::new();
    let url = &server.url;
    let rule = json!({ "name": "api", "match": "exact", "route": "GET /api", "scope": "tenant",
                       "algorithm": "gcra", "limit": 1_000_000_000, "period_ms": 1000 });
    let key = tenant(&client, url, &operator, "bench", &[rule]).await;

    let phases = [
        ("checks alone".to_owned(), Attack::None),
        (
            format!("beside {attackers} concurrent sign-ins every second"),
            Attack::SignInWaves,
        ),
        (
            format!("control: beside {attackers} concurrent `/api/me` calls every second"),
            Attack::MeWaves,
        ),
        (
            format!("beside {attackers} clients flooding sign-ins"),
            Attack::Flood,
        ),
    ];
    let loads = [
        (
            format!("{rate} checks a second over {clients} clients"),
            clients,
            Load::Paced(rate),
        ),
        (
            format!("{saturating_clients} closed-loop check clients (the server saturated)"),
            saturating_clients,
            Load::Saturating,
        ),
    ];
    let mut tables = Vec::new();
    for (title, clients, load) in &loads {
        let mut rows = Vec::new();
        for (name, attack) in &phases {
            let measured = phase(
                &attackers_on,
                url,
                &key,
                pid,
                *clients,
                *load,
                attackers,
                *attack,
                seconds,
            )
            .await;
            rows.push((name.clone(), measured));
        }
        tables.push((title.clone(), rows));
    }
    // The paced phases again, interleaved, round after round.
    let mut by_round: Vec<[Duration; 3]> = Vec::new();
    for _ in 0..rounds {
        let mut p99s = [Duration::ZERO; 3];
        for (i, attack) in [Attack::None, Attack::SignInWaves, Attack::MeWaves]
            .into_iter()
            .enumerate()
        {
            let mut measured = phase(
                &attackers_on,
                url,
                &key,
                pid,
                clients,
                Load::Paced(rate),
                attackers,
                attack,
                seconds,
            )
            .await;
            measured.checks.sort();
            p99s[i] = percentile(&measured.checks, 0.99);
        }
        by_round.push(p99s);
    }
    let peak = memory_mib(pid, "VmHWM:");

    attack_runtime.shutdown_background();
    println!(
        "One release `sluice` process (embedded, `SLUICE_SIGN_IN_RATE={sign_in_rate}`), {seconds} s \
         a phase; check clients, attackers ({}) and server share this machine's \
         {cores} cores.\n",
        if lower_attackers {
            "at the lowest priority, nice 19"
        } else {
            "at normal priority"
        }
    );
    for (title, rows) in tables {
        println!("{title}:\n");
        println!("| phase | checks | p50 ms | p99 ms | max ms | p99 ÷ alone | answered 400 | refused by budget (429) | told to retry (503) | peak RSS MiB |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let mut alone = None;
        for (name, mut p) in rows {
            p.checks.sort();
            let count = |s: u16| p.sign_ins.iter().filter(|x| **x == s).count();
            let p99 = percentile(&p.checks, 0.99);
            let base = *alone.get_or_insert(p99);
            println!(
                "| {name} | {} | {} | {} | {} | {:.2}× | {} | {} | {} | {:.0} |",
                p.checks.len(),
                ms(percentile(&p.checks, 0.5)),
                ms(p99),
                ms(*p.checks.last().unwrap()),
                p99.as_secs_f64() / base.as_secs_f64(),
                count(400),
                count(429),
                count(503),
                p.peak_rss_mib,
            );
        }
        println!();
    }
    if !by_round.is_empty() {
        println!(
            "The paced phases again, {rounds} rounds of {seconds} s each, interleaved ({rate} checks a second):\n"
        );
        println!("| round | p99 alone ms | p99 beside sign-ins ms | p99 beside control ms | sign-ins ÷ alone | control ÷ alone |");
        println!("|---|---:|---:|---:|---:|---:|");
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        for (i, [alone, sign_ins, control]) in by_round.iter().enumerate() {
            println!(
                "| {} | {} | {} | {} | {:.2}× | {:.2}× |",
                i + 1,
                ms(*alone),
                ms(*sign_ins),
                ms(*control),
                ratio(*sign_ins, *alone),
                ratio(*control, *alone),
            );
        }
        let median = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let column = |i: usize| {
            median(
                by_round
                    .iter()
                    .map(|r| r[i].as_secs_f64() * 1000.0)
                    .collect(),
            )
        };
        let ratios = |i: usize| median(by_round.iter().map(|r| ratio(r[i], r[0])).collect());
        println!(
            "| median | {:.2} | {:.2} | {:.2} | {:.2}× | {:.2}× |\n",
            column(0),
            column(1),
            column(2),
            ratios(1),
            ratios(2),
        );
    }
    println!("The server's peak resident memory over the whole run (VmHWM): {peak:.0} MiB.");
}
