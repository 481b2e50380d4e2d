//! Where the fleet's per-second series live: in Redis for a distributed fleet, in memory for
//! an embedded instance. Both keep the same fields with the same retention.
//!
//! Redis layout (every key carries the hash tag `{fleet}`, so on a Cluster they share one
//! slot and a pipeline reaches one node):
//! - `sld:{fleet}:s:<unix second>` a hash of counters for that second, kept 1 hour;
//! - `sld:{fleet}:m:<unix minute>` the same counters summed per minute, kept 7 days;
//! - `sld:{fleet}:alive` a sorted set: instance id → its last heartbeat (Unix ms);
//! - `sld:{fleet}:beat:<instance>` the instance's last heartbeat (JSON), kept 10 s;
//! - `sld:{fleet}:top:<tenant>:<unix minute>:<rule>` a rule's denials by subject in that
//!   minute, a summary of at most [`top::CAPACITY`] subjects ([`super::top`]);
//!   `sld:{fleet}:top:<tenant>:<unix minute>` the set of those rules, and
//!   `sld:{fleet}:topw:<unix minute>` the instances' seconds merged into the minute; merged by
//!   `lua/top_denied.lua`, each kept [`TOP_MINUTES_KEPT`] + 1 minutes after its last write.
//!
//! A second is written by `lua/dashboard_write.lua`, which marks it as written by the instance
//! so that a retry after a lost reply adds nothing.
//!
//! Fields, separated by `\x1f`: `c|tenant|policy|outcome` decisions, `r|shard|bucket` limiter
//! latency histogram, `d|bucket` check latency histogram, `k|cache|result` cache lookups; all
//! summed with `HINCRBY` by every instance. Maxima are per instance and second only:
//! `rx|shard|instance` and `dx|instance` in µs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use std::sync::LazyLock;

use super::top::{self, ByTenant, Summary};
use crate::limiter::MemoryBackend;
use crate::redis_client::{keys, Error as RedisError, RedisClient};

/// The field separator.
pub const SEP: char = '\x1f';
/// How long per-second series are kept.
pub const SECONDS_KEPT: i64 = 3600;
/// How long per-minute series are kept (7 days).
pub const MINUTES_KEPT: i64 = 7 * 24 * 60;
/// An instance whose last heartbeat is older than this is not alive.
pub const ALIVE_MS: i64 = 5_000;
/// The deadline of dashboard reads and writes: the timeout of their own Redis connection
/// (they are off the check path).
pub const DEADLINE: Duration = Duration::from_secs(2);
/// Adds one instance's second exactly once (see its header).
const WRITE_SOURCE: &str = include_str!("../../../lua/dashboard_write.lua");
/// That script, hashed once.
static WRITE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(WRITE_SOURCE));
/// Merges one instance's second of denials by subject exactly once (see its header).
const TOP_SOURCE: &str = include_str!("../../../lua/top_denied.lua");
static TOP: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(TOP_SOURCE));
/// How long the minutes of denials by subject are kept: the longest range asked, an hour,
/// and the minute now running.
pub const TOP_MINUTES_KEPT: i64 = 62;

/// A hash of one second or minute: field → value.
pub type Fields = HashMap<String, i64>;

/// What an instance says about itself once a second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Beat {
    pub id: String,
    pub version: String,
    pub mode: String,
    pub limiter: String,
    pub started_ms: i64,
    pub last_ms: i64,
    /// Checks this instance decided in its last second.
    pub checks: u64,
}

use keys::{beat as beat_key, fleet_minute as minute_key, fleet_second as second_key, ALIVE};

/// Whether a field is a per-instance maximum (set, not summed; not kept per minute).
pub fn is_max(field: &str) -> bool {
    field.starts_with("rx\x1f") || field.starts_with("dx\x1f")
}

/// The in-memory series of an embedded instance.
#[derive(Debug, Default)]
pub struct MemorySeries {
    seconds: BTreeMap<i64, Fields>,
    minutes: BTreeMap<i64, Fields>,
    beats: HashMap<String, Beat>,
    /// Minute → the tenants' denials by rule and subject.
    top: BTreeMap<i64, ByTenant>,
}

fn merge(into: &mut Fields, fields: &[(String, i64)]) {
    for (field, value) in fields {
        let slot = into.entry(field.clone()).or_default();
        if is_max(field) {
            *slot = (*slot).max(*value);
        } else {
            *slot += value;
        }
    }
}

/// One rule's hash of a minute's denials by subject (see `lua/top_denied.lua`) as a summary.
fn read_summary(fields: &HashMap<String, String>) -> Summary {
    let mut summary = Summary::default();
    for (field, value) in fields {
        let count = || value.parse::<u64>().unwrap_or(0);
        match field.as_str() {
            "n" => summary.denials = count(),
            "e" => summary.error = count(),
            "p" => summary.policy.clone_from(value),
            _ => {
                if let Some(subject) = field.strip_prefix("s\x1f") {
                    summary.counts.insert(subject.to_owned(), count());
                }
            }
        }
    }
    summary
}

/// The store of the series.
#[derive(Debug, Clone)]
pub enum SeriesStore {
    Memory {
        series: Arc<Mutex<MemorySeries>>,
        limiter: MemoryBackend,
    },
    Redis(RedisClient),
}

impl SeriesStore {
    pub fn memory(limiter: MemoryBackend) -> Self {
        SeriesStore::Memory {
            series: Arc::default(),
            limiter,
        }
    }

    /// Adds one instance's second `sec` (its fields) and its heartbeat.
    pub async fn write(
        &self,
        sec: i64,
        fields: &[(String, i64)],
        beat: &Beat,
    ) -> Result<(), RedisError> {
        let minute = sec.div_euclid(60);
        match self {
            SeriesStore::Memory { series, .. } => {
                let mut s = series.lock().unwrap_or_else(|e| e.into_inner());
                merge(s.seconds.entry(sec).or_default(), fields);
                let per_minute: Vec<(String, i64)> =
                    fields.iter().filter(|(f, _)| !is_max(f)).cloned().collect();
                merge(s.minutes.entry(minute).or_default(), &per_minute);
                s.beats.insert(beat.id.clone(), beat.clone());
                let oldest_second = sec - SECONDS_KEPT;
                s.seconds = s.seconds.split_off(&oldest_second);
                let oldest_minute = minute - MINUTES_KEPT;
                s.minutes = s.minutes.split_off(&oldest_minute);
                s.beats
                    .retain(|_, b| b.last_ms > beat.last_ms - SECONDS_KEPT * 1000);
                Ok(())
            }
            SeriesStore::Redis(redis) => {
                let beat_json = serde_json::to_string(beat).expect("a beat serializes");
                let _added: i64 = redis
                    .run_script(&WRITE, WRITE_SOURCE, &second_key(sec), |cmd| {
                        cmd.arg(4)
                            .arg(second_key(sec))
                            .arg(minute_key(minute))
                            .arg(ALIVE)
                            .arg(beat_key(&beat.id))
                            .arg((SECONDS_KEPT + 60) * 1000)
                            .arg((MINUTES_KEPT + 60) * 60_000)
                            .arg(&beat.id)
                            .arg(beat.last_ms)
                            .arg(&beat_json)
                            .arg(ALIVE_MS * 2)
                            .arg(beat.last_ms - SECONDS_KEPT * 1000);
                        for (field, value) in fields {
                            cmd.arg(field).arg(value);
                        }
                    })
                    .await?;
                Ok(())
            }
        }
    }

    /// Merges `instance`'s denials by subject of second `sec` into the minute's summaries;
    /// a retry of a write already made adds nothing.
    pub async fn write_top(
        &self,
        sec: i64,
        instance: &str,
        denied: &ByTenant,
    ) -> Result<(), RedisError> {
        if denied.is_empty() {
            return Ok(());
        }
        let minute = sec.div_euclid(60);
        match self {
            SeriesStore::Memory { series, .. } => {
                let mut s = series.lock().unwrap_or_else(|e| e.into_inner());
                let tenants = s.top.entry(minute).or_default();
                for (tenant, rules) in denied {
                    let mine = tenants.entry(tenant.clone()).or_default();
                    for (rule, summary) in rules {
                        mine.entry(rule.clone()).or_default().merge(summary);
                    }
                }
                s.top = s.top.split_off(&(minute - TOP_MINUTES_KEPT + 1));
                Ok(())
            }
            SeriesStore::Redis(redis) => {
                // Keys and arguments in one order, read once.
                let tenants: Vec<(&String, Vec<(&String, &Summary)>)> = denied
                    .iter()
                    .map(|(tenant, rules)| (tenant, rules.iter().collect()))
                    .collect();
                let marks = keys::fleet_top_marks(minute);
                let _merged: i64 = redis
                    .run_script(&TOP, TOP_SOURCE, &marks, |cmd| {
                        let keys: usize =
                            1 + tenants.iter().map(|(_, r)| 1 + r.len()).sum::<usize>();
                        cmd.arg(keys).arg(&marks);
                        for (tenant, rules) in &tenants {
                            cmd.arg(keys::fleet_top(tenant, minute));
                            for (rule, _) in rules {
                                cmd.arg(keys::fleet_top_rule(tenant, minute, rule));
                            }
                        }
                        cmd.arg(format!("{instance}{SEP}{sec}"))
                            .arg((TOP_MINUTES_KEPT + 1) * 60_000)
                            .arg(top::CAPACITY);
                        for (_, rules) in &tenants {
                            cmd.arg(rules.len());
                            for (rule, summary) in rules {
                                cmd.arg(rule)
                                    .arg(&summary.policy)
                                    .arg(summary.denials)
                                    .arg(summary.error)
                                    .arg(summary.counts.len());
                                for (subject, n) in &summary.counts {
                                    cmd.arg(subject).arg(*n);
                                }
                            }
                        }
                    })
                    .await?;
                Ok(())
            }
        }
    }

    /// `tenant`'s denials by rule and subject over the minutes `from..=to`: each rule's
    /// summaries of those minutes summed, with the sum of their errors.
    pub async fn top_denied(
        &self,
        tenant: &str,
        from: i64,
        to: i64,
    ) -> Result<HashMap<String, Summary>, RedisError> {
        let mut out: HashMap<String, Summary> = HashMap::new();
        match self {
            SeriesStore::Memory { series, .. } => {
                let s = series.lock().unwrap_or_else(|e| e.into_inner());
                for (_, tenants) in s.top.range(from..=to) {
                    for (rule, summary) in tenants.get(tenant).into_iter().flatten() {
                        out.entry(rule.clone()).or_default().sum(summary);
                    }
                }
            }
            SeriesStore::Redis(redis) => {
                let mut pipe = redis::pipe();
                for minute in from..=to {
                    pipe.cmd("SMEMBERS").arg(keys::fleet_top(tenant, minute));
                }
                let rules: Vec<Vec<String>> = redis.pipeline(&pipe).await?;
                let wanted: Vec<(i64, String)> = (from..=to)
                    .zip(rules)
                    .flat_map(|(minute, rules)| rules.into_iter().map(move |r| (minute, r)))
                    .collect();
                if wanted.is_empty() {
                    return Ok(out);
                }
                let mut pipe = redis::pipe();
                for (minute, rule) in &wanted {
                    pipe.cmd("HGETALL")
                        .arg(keys::fleet_top_rule(tenant, *minute, rule));
                }
                let hashes: Vec<HashMap<String, String>> = redis.pipeline(&pipe).await?;
                for ((_, rule), fields) in wanted.into_iter().zip(hashes) {
                    out.entry(rule).or_default().sum(&read_summary(&fields));
                }
            }
        }
        Ok(out)
    }

    /// The seconds `from..=to` that hold anything.
    pub async fn seconds(&self, from: i64, to: i64) -> Result<Vec<(i64, Fields)>, RedisError> {
        self.read(from, to, true).await
    }

    /// The minutes `from..=to` that hold anything.
    pub async fn minutes(&self, from: i64, to: i64) -> Result<Vec<(i64, Fields)>, RedisError> {
        self.read(from, to, false).await
    }

    async fn read(
        &self,
        from: i64,
        to: i64,
        seconds: bool,
    ) -> Result<Vec<(i64, Fields)>, RedisError> {
        match self {
            SeriesStore::Memory { series, .. } => {
                let s = series.lock().unwrap_or_else(|e| e.into_inner());
                let map = if seconds { &s.seconds } else { &s.minutes };
                Ok(map.range(from..=to).map(|(t, f)| (*t, f.clone())).collect())
            }
            SeriesStore::Redis(redis) => {
                let mut out = Vec::new();
                // In chunks, so that a long read does not hold up checks sharing the
                // connection.
                let mut start = from;
                while start <= to {
                    let end = (start + 299).min(to);
                    let mut pipe = redis::pipe();
                    for t in start..=end {
                        let key = if seconds {
                            second_key(t)
                        } else {
                            minute_key(t)
                        };
                        pipe.cmd("HGETALL").arg(key);
                    }
                    let hashes: Vec<Fields> = redis.pipeline(&pipe).await?;
                    out.extend(
                        (start..=end)
                            .zip(hashes)
                            .filter(|(_, fields)| !fields.is_empty()),
                    );
                    start = end + 1;
                }
                Ok(out)
            }
        }
    }

    /// The instances whose last heartbeat is at most [`ALIVE_MS`] old at `now_ms`.
    pub async fn alive(&self, now_ms: i64) -> Result<Vec<Beat>, RedisError> {
        let mut beats = match self {
            SeriesStore::Memory { series, .. } => {
                let s = series.lock().unwrap_or_else(|e| e.into_inner());
                s.beats
                    .values()
                    .filter(|b| b.last_ms >= now_ms - ALIVE_MS)
                    .cloned()
                    .collect()
            }
            SeriesStore::Redis(redis) => {
                let mut cmd = redis::cmd("ZRANGEBYSCORE");
                cmd.arg(ALIVE).arg(now_ms - ALIVE_MS).arg("+inf");
                let ids: Vec<String> = redis.query(&cmd).await?;
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let mut mget = redis::cmd("MGET");
                for id in &ids {
                    mget.arg(beat_key(id));
                }
                let raw: Vec<Option<String>> = redis.query(&mget).await?;
                raw.into_iter()
                    .flatten()
                    .filter_map(|json| serde_json::from_str::<Beat>(&json).ok())
                    .collect::<Vec<_>>()
            }
        };
        beats.sort_by(|a, b| a.started_ms.cmp(&b.started_ms).then(a.id.cmp(&b.id)));
        Ok(beats)
    }

    /// Active keys of each of `tenants` at `now_ms`: on Redis the union of the tenant's last
    /// [`keys::ACTIVE_WINDOW_MINUTES`] HyperLogLogs (standard error 0.81%); in process, the
    /// exact number of live buckets. Also returns the tenants whose count could not be read.
    pub async fn active_keys(
        &self,
        tenants: &[String],
        now_ms: i64,
    ) -> (HashMap<String, u64>, Vec<String>) {
        match self {
            SeriesStore::Memory { limiter, .. } => {
                let wanted: std::collections::HashSet<&String> = tenants.iter().collect();
                let mut counts = limiter.active_by_tenant(now_ms);
                counts.retain(|tenant, _| wanted.contains(tenant));
                (counts, Vec::new())
            }
            SeriesStore::Redis(redis) => {
                // One PFCOUNT per tenant (a tenant's keys share a slot; tenants do not).
                let results: Vec<(String, Result<u64, RedisError>)> =
                    futures::stream::iter(tenants.iter().cloned())
                        .map(|tenant| async move {
                            let mut cmd = redis::cmd("PFCOUNT");
                            for key in keys::active_window(&tenant, now_ms) {
                                cmd.arg(key);
                            }
                            let n = redis.query(&cmd).await;
                            (tenant, n)
                        })
                        .buffer_unordered(16)
                        .collect()
                        .await;
                let mut counts = HashMap::new();
                let mut failed = Vec::new();
                for (tenant, result) in results {
                    match result {
                        Ok(0) => {}
                        Ok(n) => {
                            counts.insert(tenant, n);
                        }
                        Err(_) => failed.push(tenant),
                    }
                }
                (counts, failed)
            }
        }
    }

    /// Cluster slot → shard ("host:port" of the master), when the limiter is a Cluster.
    pub async fn shard_map(&self) -> Result<Option<Vec<(u16, u16, String)>>, RedisError> {
        match self {
            SeriesStore::Redis(redis) => redis.shard_map().await,
            SeriesStore::Memory { .. } => Ok(None),
        }
    }
}
