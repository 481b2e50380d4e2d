//! An open-loop load generator: requests leave at a constant arrival rate whatever the
//! server's latency (a slow server cannot slow the generator down, so queueing shows up in
//! the latencies and the achieved rate rather than hiding). Latency is measured from the
//! moment a request is sent; how late requests left against their schedule is reported
//! separately (`lag`), since tokio's timer has millisecond granularity and the generator
//! shares the machine with the server.

use std::collections::BTreeMap;
use std::error::Error as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// How tenants and subjects are picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    Uniform,
    /// Zipf with exponent 1.1 over tenants and over subjects.
    Zipf,
    /// Every request on one tenant and one subject.
    Hot,
}

impl std::str::FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(Mix::Uniform),
            "zipf" => Ok(Mix::Zipf),
            "hot" => Ok(Mix::Hot),
            other => Err(format!("unknown mix {other:?}: use uniform, zipf or hot")),
        }
    }
}

/// One run's parameters.
#[derive(Debug, Clone)]
pub struct Load {
    pub url: String,
    /// One check key per tenant.
    pub keys: Vec<String>,
    pub route: String,
    pub subjects: usize,
    pub mix: Mix,
    pub rate: u32,
    pub duration: Duration,
    /// Requests still in flight beyond this are not sent and count as errors.
    pub max_in_flight: usize,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: u32,
    pub achieved: f64,
    pub sent: usize,
    pub allowed: usize,
    pub denied: usize,
    pub errors: usize,
    /// What the errors were, and how many of each: an answer's status, a request that failed
    /// (reqwest's error and its causes), or one not sent because too many were in flight.
    pub error_kinds: BTreeMap<String, usize>,
    pub p50: Duration,
    pub p90: Duration,
    pub p95: Duration,
    pub p99: Duration,
    /// 99th percentile of how late requests were sent against their schedule.
    pub lag_p99: Duration,
}

impl Report {
    pub fn error_rate(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.errors as f64 / self.sent as f64
        }
    }
}

fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let weights: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect()
}

fn pick(rng: &mut SmallRng, n: usize, mix: Mix, cdf: &[f64]) -> usize {
    match mix {
        Mix::Uniform => rng.gen_range(0..n),
        Mix::Hot => 0,
        Mix::Zipf => {
            let u: f64 = rng.r#gen();
            cdf.partition_point(|&c| c < u).min(n - 1)
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// Runs `load` and reports.
pub async fn run(client: &reqwest::Client, load: &Load) -> Report {
    let url = Arc::new(format!("{}/v1/check", load.url.trim_end_matches('/')));
    let tenant_cdf = zipf_cdf(load.keys.len(), 1.1);
    let subject_cdf = zipf_cdf(load.subjects, 1.1);
    let mut rng = SmallRng::seed_from_u64(42);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let interval = Duration::from_secs_f64(1.0 / f64::from(load.rate));
    let total = (f64::from(load.rate) * load.duration.as_secs_f64()) as usize;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    let mut skipped = 0;
    for i in 0..total {
        let due = started + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        if in_flight.load(Ordering::Relaxed) >= load.max_in_flight {
            skipped += 1;
            continue;
        }
        let tenant = pick(&mut rng, load.keys.len(), load.mix, &tenant_cdf);
        let subject = pick(&mut rng, load.subjects, load.mix, &subject_cdf);
        let body = format!(r#"{{"route":"{}","subject":"user-{subject}"}}"#, load.route);
        let request = client
            .post(url.as_str())
            .header("x-api-key", &load.keys[tenant])
            .header("content-type", "application/json")
            .body(body);
        let in_flight = in_flight.clone();
        in_flight.fetch_add(1, Ordering::Relaxed);
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let lag = sent.saturating_duration_since(due);
            let outcome = match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    match response.bytes().await {
                        Ok(_) => Ok(status),
                        Err(e) => Err(format!("HTTP {status}, body unread: {}", causes(&e))),
                    }
                }
                Err(e) => Err(causes(&e)),
            };
            in_flight.fetch_sub(1, Ordering::Relaxed);
            (outcome, sent.elapsed(), lag)
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    let mut lags = Vec::with_capacity(total);
    let (mut allowed, mut denied, mut errors) = (0, 0, skipped);
    let mut error_kinds = BTreeMap::new();
    if skipped > 0 {
        error_kinds.insert(
            format!(
                "not sent: {} requests already in flight",
                load.max_in_flight
            ),
            skipped,
        );
    }
    for task in tasks {
        let (outcome, latency, lag) = task.await.unwrap_or_else(|e| {
            (
                Err(format!("the request's task failed: {e}")),
                Duration::ZERO,
                Duration::ZERO,
            )
        });
        lags.push(lag);
        match outcome {
            Ok(200) => allowed += 1,
            Ok(429) => denied += 1,
            Ok(status) => {
                errors += 1;
                *error_kinds.entry(format!("HTTP {status}")).or_insert(0) += 1;
            }
            Err(kind) => {
                errors += 1;
                *error_kinds.entry(kind).or_insert(0) += 1;
            }
        }
        latencies.push(latency);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    lags.sort();
    Report {
        target: load.rate,
        achieved: (allowed + denied) as f64 / elapsed.max(load.duration.as_secs_f64()),
        sent: total,
        allowed,
        denied,
        errors,
        error_kinds,
        p50: percentile(&latencies, 0.50),
        p90: percentile(&latencies, 0.90),
        p95: percentile(&latencies, 0.95),
        p99: percentile(&latencies, 0.99),
        lag_p99: percentile(&lags, 0.99),
    }
}

/// An error and its causes, outermost first: reqwest's own message ("error sending request")
/// says little without hyper's and the socket's beneath it. The server's URL is left out, so
/// that errors of one kind read the same whatever port the server had.
fn causes(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" for url ({url})"), "");
    }
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
