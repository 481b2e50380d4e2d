//! Measures how long a dashboard frame takes to compute and render (the two plotters SVG
//! charts and the tables, as pushed to a browser every second) from a full hour of per-second
//! data, and a day of per-minute data. Prints the table of `docs/BENCHMARKS.md`.
//!
//! Run: `cargo run --release -p server --example dashboard_bench`. Needs no service: the view
//! is filled with generated seconds, parsed from the same fields Redis holds.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use app::dashboard::Range;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sluice::dashboard::render;
use sluice::dashboard::series::Fields;
use sluice::dashboard::view::{Scope, View};

const TENANTS: usize = 50;
const POLICIES: usize = 4;
const SHARDS: [&str; 3] = ["10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"];
const INSTANCES: usize = 4;
const RUNS: usize = 300;

/// One second (or minute) of a busy fleet: every tenant and policy decided something, every
/// shard and instance reported latency.
fn fields(rng: &mut SmallRng, scale: i64) -> Fields {
    let mut f = Fields::new();
    for t in 0..TENANTS {
        for p in 0..POLICIES {
            let allowed = rng.gen_range(50..500) * scale;
            f.insert(format!("c\x1ftenant-{t}\x1fpolicy-{p}\x1fallowed"), allowed);
            f.insert(
                format!("c\x1ftenant-{t}\x1fpolicy-{p}\x1fdenied"),
                rng.gen_range(0..50) * scale,
            );
        }
    }
    for shard in SHARDS {
        for bucket in 2..12 {
            f.insert(
                format!("r\x1f{shard}\x1f{bucket}"),
                rng.gen_range(10..3000) * scale,
            );
        }
        for i in 0..INSTANCES {
            f.insert(
                format!("rx\x1f{shard}\x1finstance-{i}"),
                rng.gen_range(2_000..9_000),
            );
        }
    }
    for bucket in 3..13 {
        f.insert(format!("d\x1f{bucket}"), rng.gen_range(10..3000) * scale);
    }
    f.insert("k\x1fkey\x1fhit".into(), 40_000 * scale);
    f.insert("k\x1fkey\x1fmiss".into(), 20 * scale);
    f
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn main() {
    let mut rng = SmallRng::seed_from_u64(7);
    let now = 1_800_000_000_i64;
    let mut view = View::default();
    let seconds: Vec<(i64, Fields)> = (now - 3599..=now)
        .map(|s| (s, fields(&mut rng, 1)))
        .collect();
    view.put_seconds(seconds, now - 3599, now);
    let minute = now.div_euclid(60);
    let minutes: Vec<(i64, Fields)> = (minute - 1439..=minute)
        .map(|m| (m, fields(&mut rng, 60)))
        .collect();
    view.put_minutes(minutes, minute - 1439, minute);
    for t in 0..TENANTS {
        view.names
            .insert(format!("tenant-{t}"), format!("Tenant {t}"));
        view.active
            .insert(format!("tenant-{t}"), 1_000 * (t as u64 + 1));
    }
    println!(
        "{TENANTS} tenants × {POLICIES} policies, {} shards, {INSTANCES} instances; {} s and {} min held; {RUNS} renders each",
        SHARDS.len(),
        view.seconds.len(),
        view.minutes.len()
    );
    println!();
    println!("| dashboard | range | points | frame p50 | render p50 | total p50 | total p99 | max | HTML bytes |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let fleet = Scope::Fleet;
    let tenant = Scope::Tenant("tenant-7".into());
    for (name, scope, range) in [
        ("fleet", &fleet, Range::Hour),
        ("tenant", &tenant, Range::Hour),
        ("fleet", &fleet, Range::FiveMinutes),
        ("fleet", &fleet, Range::Day),
    ] {
        let mut frames = Vec::with_capacity(RUNS);
        let mut renders = Vec::with_capacity(RUNS);
        let mut totals = Vec::with_capacity(RUNS);
        let mut bytes = 0;
        let mut points = 0;
        for _ in 0..RUNS {
            let started = Instant::now();
            let frame = view.frame(scope, range);
            let framed = started.elapsed();
            let html = render::html(&frame);
            let total = started.elapsed();
            frames.push(framed);
            renders.push(total - framed);
            totals.push(total);
            bytes = html.len();
            points = frame.points.len();
            // Two charts (the legends' swatches are small SVGs of their own, without a viewBox).
            assert_eq!(
                html.matches("<svg width=\"760\" height=\"280\" viewBox=")
                    .count(),
                2
            );
        }
        for v in [&mut frames, &mut renders, &mut totals] {
            v.sort();
        }
        let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
        println!(
            "| {name} | {} | {points} | {} | {} | {} | {} | {} | {bytes} |",
            range.as_str(),
            ms(percentile(&frames, 0.5)),
            ms(percentile(&renders, 0.5)),
            ms(percentile(&totals, 0.5)),
            ms(percentile(&totals, 0.99)),
            ms(*totals.last().unwrap()),
        );
    }
}
