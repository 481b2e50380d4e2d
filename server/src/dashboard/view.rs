//! The fleet as this instance last read it (1 hour of seconds, 24 hours of minutes, the live
//! instances, active keys), and the [`Frame`] a dashboard shows for a scope and a range.

use std::collections::{BTreeMap, HashMap};

use app::dashboard::Range;

use super::series::{Beat, Fields, SEP};
use crate::telemetry::recorder::{Histogram, Outcome, BOUNDS_US, BUCKETS};

/// Whose traffic a dashboard shows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Fleet,
    Tenant(String),
}

/// One second or minute of the fleet, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bucket {
    /// Counts by [`Outcome::index`] of each series (a tenant's policy, numbered by
    /// [`View::series`]), so that summing an hour is additions into a vector.
    pub decisions: Vec<(u32, [u64; 6])>,
    /// Limiter round trips by shard.
    pub limiter: BTreeMap<String, Histogram>,
    pub check: Histogram,
    /// (cache, result) → lookups.
    pub cache: HashMap<(String, String), u64>,
}

impl View {
    /// The number of the series of `tenant`'s `policy`.
    fn series_id(&mut self, tenant: &str, policy: &str) -> u32 {
        let key = (tenant.to_owned(), policy.to_owned());
        if let Some(&id) = self.series_ids.get(&key) {
            return id;
        }
        let id = u32::try_from(self.series.len()).unwrap_or(u32::MAX);
        self.series.push(key.clone());
        self.series_ids.insert(key, id);
        id
    }

    /// Reads a stored hash; unknown or malformed fields are skipped.
    pub fn parse(&mut self, fields: &Fields) -> Bucket {
        let mut b = Bucket::default();
        let mut decisions: HashMap<u32, [u64; 6]> = HashMap::new();
        for (field, &value) in fields {
            let value = u64::try_from(value).unwrap_or(0);
            let parts: Vec<&str> = field.split(SEP).collect();
            let bucket = |s: &str| s.parse::<usize>().ok().filter(|&i| i < BUCKETS);
            match parts.as_slice() {
                ["c", tenant, policy, outcome] => {
                    if let Some(o) = Outcome::parse(outcome) {
                        let id = self.series_id(tenant, policy);
                        decisions.entry(id).or_default()[o.index()] += value;
                    }
                }
                ["r", shard, i] => {
                    if let Some(i) = bucket(i) {
                        b.limiter.entry((*shard).to_owned()).or_default().counts[i] += value;
                    }
                }
                ["rx", shard, _instance] => {
                    let h = b.limiter.entry((*shard).to_owned()).or_default();
                    h.max_us = h.max_us.max(value);
                }
                ["d", i] => {
                    if let Some(i) = bucket(i) {
                        b.check.counts[i] += value;
                    }
                }
                ["dx", _instance] => b.check.max_us = b.check.max_us.max(value),
                ["k", cache, result] => {
                    *b.cache
                        .entry(((*cache).to_owned(), (*result).to_owned()))
                        .or_default() += value;
                }
                _ => {}
            }
        }
        b.decisions = decisions.into_iter().collect();
        b.decisions.sort_unstable_by_key(|(id, _)| *id);
        b
    }
}

/// What this instance knows of the fleet.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub seconds: BTreeMap<i64, Bucket>,
    pub minutes: BTreeMap<i64, Bucket>,
    /// The last complete second read.
    pub latest: i64,
    pub instances: Vec<Beat>,
    /// Active keys by tenant.
    pub active: HashMap<String, u64>,
    /// Tenant id → name.
    pub names: HashMap<String, String>,
    /// A Redis Cluster's slot ranges and their masters (empty without a Cluster).
    pub shard_map: Vec<(u16, u16, String)>,
    /// The most denied subjects of the last 5 minutes of each tenant whose dashboard is
    /// watched, as last read (every 5 s).
    pub denied_subjects: HashMap<String, DeniedSubjects>,
    /// Every (tenant, policy) seen, numbered in order of appearance.
    pub series: Vec<(String, String)>,
    series_ids: HashMap<(String, String), u32>,
}

/// Latency percentiles of one point, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    fn of(h: &Histogram) -> Option<Latency> {
        let ms = |q: f64| h.quantile_us(q).map(|us| us as f64 / 1000.0);
        Some(Latency {
            p50: ms(0.5)?,
            p90: ms(0.9)?,
            p99: ms(0.99)?,
            max: if h.max_us > 0 {
                h.max_us as f64 / 1000.0
            } else {
                ms(1.0)?
            },
        })
    }
}

/// One point of the charts.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The first second the point covers (Unix seconds).
    pub t: i64,
    /// Counts by [`Outcome::index`] over the point.
    pub counts: [u64; 6],
    /// Limiter round trips of the whole fleet.
    pub limiter: Option<Latency>,
    /// p99 of each shard of [`Frame::shards`].
    pub shard_p99: Vec<Option<f64>>,
    /// Whole check handling.
    pub check: Option<Latency>,
}

/// A row of a "top" table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Top {
    pub tenant: String,
    pub tenant_name: String,
    /// Empty in the tenants table.
    pub policy: String,
    pub denied: u64,
    pub decided: u64,
}

/// Everything one dashboard shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub scope: Scope,
    pub range: Range,
    /// The last second shown.
    pub latest: i64,
    pub bin_seconds: i64,
    pub points: Vec<Point>,
    pub shards: Vec<String>,
    /// The limiter is in process (embedded mode): no Redis.
    pub in_process: bool,
    /// Counts by [`Outcome::index`] over the range.
    pub totals: [u64; 6],
    pub top_policies: Vec<Top>,
    pub top_tenants: Vec<Top>,
    /// (cache, hits, lookups) over the range.
    pub cache: Vec<(String, u64, u64)>,
    pub active_total: u64,
    /// The tenants with the most active keys: (id, name, keys).
    pub active_top: Vec<(String, String, u64)>,
    /// A tenant's most denied subjects of the last 5 minutes (`None` on the fleet's).
    pub denied_subjects: Option<DeniedSubjects>,
    pub instances: Vec<Beat>,
    /// Over the last 10 seconds: decisions/s allowed and denied, and limiter latency.
    pub recent_rate: (f64, f64),
    pub recent_latency: Option<Latency>,
    /// The Redis nodes whose circuit breaker is open in this instance (fleet scope only).
    pub breakers_open: Vec<String>,
}

/// A tenant's most denied subjects over the last 5 minutes, from the fleet's summaries
/// ([`super::top`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeniedSubjects {
    /// The second they were read at; `None` until the first read.
    pub read_at: Option<i64>,
    /// (rule name, subject or `""` for a tenant-wide bucket, denials), most first.
    pub rows: Vec<(String, String, u64)>,
    /// The largest error of the rules shown: no count is more than this below the truth.
    pub error: u64,
}

impl DeniedSubjects {
    /// The [`TOP`] most denied (rule, subject) pairs of a tenant's summaries by rule id.
    pub fn of(summaries: &HashMap<String, super::top::Summary>, read_at: i64) -> Self {
        // (rule name, subject, denials, the rule's error)
        let mut rows: Vec<(String, String, u64, u64)> = Vec::new();
        for summary in summaries.values() {
            for (subject, n) in summary.top(TOP) {
                rows.push((summary.policy.clone(), subject.to_owned(), n, summary.error));
            }
        }
        rows.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
        rows.truncate(TOP);
        Self {
            read_at: Some(read_at),
            error: rows.iter().map(|r| r.3).max().unwrap_or(0),
            rows: rows.into_iter().map(|(p, s, n, _)| (p, s, n)).collect(),
        }
    }
}

/// Rows in the top tables.
pub const TOP: usize = 10;

impl View {
    /// Replaces the seconds read from the store, and forgets seconds older than an hour.
    pub fn put_seconds(&mut self, read: Vec<(i64, Fields)>, from: i64, to: i64) {
        let mut seconds = std::mem::take(&mut self.seconds);
        self.replace(&mut seconds, read, from, to);
        self.seconds = seconds;
        self.latest = self.latest.max(to);
        self.seconds = self
            .seconds
            .split_off(&(self.latest - super::series::SECONDS_KEPT));
    }

    /// Replaces the minutes read from the store, and forgets minutes older than a day.
    pub fn put_minutes(&mut self, read: Vec<(i64, Fields)>, from: i64, to: i64) {
        let mut minutes = std::mem::take(&mut self.minutes);
        self.replace(&mut minutes, read, from, to);
        self.minutes = minutes;
        self.minutes = self.minutes.split_off(&(to - 24 * 60));
    }

    /// Replaces `from..=to` of `map` with what was read (a time read empty is dropped).
    fn replace(
        &mut self,
        map: &mut BTreeMap<i64, Bucket>,
        read: Vec<(i64, Fields)>,
        from: i64,
        to: i64,
    ) {
        let mut tail = map.split_off(&from);
        let mut after = tail.split_off(&(to + 1));
        drop(tail);
        for (t, fields) in read {
            let bucket = self.parse(&fields);
            map.insert(t, bucket);
        }
        map.append(&mut after);
    }

    /// The Cluster master that holds `tenant`'s counters, when there is a Cluster.
    fn shard_of(&self, tenant: &str) -> Option<&str> {
        let slot = crate::limiter::keys::slot(&format!("{{{tenant}}}"));
        self.shard_map
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, shard)| shard.as_str())
    }

    /// The tenants with decisions (or, when `denials`, with denials) in the seconds since
    /// `from`.
    pub fn tenants_since(&self, from: i64, denials: bool) -> Vec<String> {
        let mut seen = vec![false; self.series.len()];
        for (_, b) in self.seconds.range(from..) {
            for (id, counts) in &b.decisions {
                if denials && counts[Outcome::Denied.index()] == 0 {
                    continue;
                }
                if let Some(s) = seen.get_mut(*id as usize) {
                    *s = true;
                }
            }
        }
        let mut tenants: Vec<String> = self
            .series
            .iter()
            .zip(seen)
            .filter(|(_, seen)| *seen)
            .map(|((tenant, _), _)| tenant.clone())
            .collect();
        tenants.sort_unstable();
        tenants.dedup();
        tenants
    }

    fn name(&self, tenant: &str) -> String {
        self.names
            .get(tenant)
            .cloned()
            .unwrap_or_else(|| tenant.to_owned())
    }

    /// The dashboard of `scope` over `range`, ending at the last complete second.
    pub fn frame(&self, scope: &Scope, range: Range) -> Frame {
        let bin = range.bin_seconds();
        let n = (range.seconds() / bin) as usize;
        let end = self.latest;
        // The day is whole minutes, ending with the current one.
        let start = if range == Range::Day {
            (end.div_euclid(60) + 1) * 60 - range.seconds()
        } else {
            end - range.seconds() + 1
        };
        let fleet = *scope == Scope::Fleet;
        let wanted = |tenant: &str| match scope {
            Scope::Fleet => true,
            Scope::Tenant(t) => t == tenant,
        };
        let wanted_series: Vec<bool> = self.series.iter().map(|(t, _)| wanted(t)).collect();

        // Which stored buckets feed which point: seconds for the short ranges, minutes for
        // the day (a minute's second 0 stands for the minute).
        let sources: Vec<(i64, &Bucket)> = if range == Range::Day {
            let (from, to) = (start / 60, end.div_euclid(60));
            self.minutes
                .range(from..=to)
                .map(|(m, b)| (m * 60, b))
                .collect()
        } else {
            self.seconds
                .range(start..=end)
                .map(|(s, b)| (*s, b))
                .collect()
        };
        let in_process = self
            .seconds
            .values()
            .next_back()
            .is_some_and(|b| b.limiter.contains_key("in-process"))
            || self.instances.iter().any(|i| i.limiter == "in-process");
        let mut shards: Vec<String> = Vec::new();
        if fleet {
            for (_, b) in &sources {
                for shard in b.limiter.keys() {
                    if !shards.contains(shard) {
                        shards.push(shard.clone());
                    }
                }
            }
            shards.sort();
        }

        struct Acc {
            counts: [u64; 6],
            limiter: Histogram,
            shards: Vec<Histogram>,
            check: Histogram,
        }
        let mut acc: Vec<Acc> = (0..n)
            .map(|_| Acc {
                counts: [0; 6],
                limiter: Histogram::default(),
                shards: vec![Histogram::default(); shards.len()],
                check: Histogram::default(),
            })
            .collect();
        let mut totals = [0_u64; 6];
        let mut by_series = vec![[0_u64; 6]; self.series.len()];
        let mut cache: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        // A tenant's latency is that of the shard holding its counters (every shard when
        // there is no Cluster); the whole check's latency is only the fleet's.
        let tenant_shard: Option<&str> = match scope {
            Scope::Tenant(t) => self.shard_of(t),
            Scope::Fleet => None,
        };
        let counted = |shard: &str| tenant_shard.is_none_or(|s| s == shard);
        for (t, b) in &sources {
            let i = ((t - start).max(0) / bin) as usize;
            let Some(point) = acc.get_mut(i.min(n - 1)) else {
                continue;
            };
            for (id, counts) in &b.decisions {
                let id = *id as usize;
                if !wanted_series.get(id).copied().unwrap_or(false) {
                    continue;
                }
                let sum = &mut by_series[id];
                for o in 0..6 {
                    point.counts[o] += counts[o];
                    sum[o] += counts[o];
                }
            }
            for (shard, h) in &b.limiter {
                if !counted(shard) {
                    continue;
                }
                point.limiter.merge(h);
                if let Some(k) = shards.iter().position(|s| s == shard) {
                    point.shards[k].merge(h);
                }
            }
            if fleet {
                point.check.merge(&b.check);
            }
            if fleet {
                for ((name, result), v) in &b.cache {
                    let c = cache.entry(name.as_str()).or_default();
                    if result == "hit" {
                        c.0 += v;
                    }
                    c.1 += v;
                }
            }
        }
        let points = acc
            .into_iter()
            .enumerate()
            .map(|(i, a)| Point {
                t: start + i as i64 * bin,
                counts: a.counts,
                limiter: Latency::of(&a.limiter),
                shard_p99: a
                    .shards
                    .iter()
                    .map(|h| h.quantile_us(0.99).map(|us| us as f64 / 1000.0))
                    .collect(),
                check: Latency::of(&a.check),
            })
            .collect();

        for counts in &by_series {
            for o in 0..6 {
                totals[o] += counts[o];
            }
        }
        let denied_of = |c: &[u64; 6]| c[Outcome::Denied.index()];
        let decided_of = |c: &[u64; 6]| c[Outcome::Allowed.index()] + c[Outcome::Denied.index()];
        let mut top_policies: Vec<Top> = Vec::new();
        let mut per_tenant: HashMap<&str, (u64, u64)> = HashMap::new();
        for (id, c) in by_series.iter().enumerate() {
            let (denied, decided) = (denied_of(c), decided_of(c));
            if decided == 0 {
                continue;
            }
            let (tenant, policy) = &self.series[id];
            let row = per_tenant.entry(tenant.as_str()).or_default();
            row.0 += denied;
            row.1 += decided;
            if denied > 0 {
                top_policies.push(Top {
                    tenant: tenant.clone(),
                    tenant_name: self.name(tenant),
                    policy: policy.clone(),
                    denied,
                    decided,
                });
            }
        }
        top_policies.sort_by(|a, b| {
            b.denied
                .cmp(&a.denied)
                .then_with(|| a.tenant_name.cmp(&b.tenant_name))
                .then_with(|| a.policy.cmp(&b.policy))
        });
        let mut top_tenants: Vec<Top> = per_tenant
            .into_iter()
            .filter(|(_, (denied, _))| fleet && *denied > 0)
            .map(|(tenant, (denied, decided))| Top {
                tenant: tenant.to_owned(),
                tenant_name: self.name(tenant),
                policy: String::new(),
                denied,
                decided,
            })
            .collect();
        top_tenants.sort_by(|a, b| {
            b.denied
                .cmp(&a.denied)
                .then_with(|| a.tenant_name.cmp(&b.tenant_name))
        });
        top_policies.truncate(TOP);
        top_tenants.truncate(TOP);

        let mut active_top: Vec<(String, String, u64)> = self
            .active
            .iter()
            .filter(|(tenant, _)| wanted(tenant))
            .map(|(tenant, n)| (tenant.clone(), self.name(tenant), *n))
            .collect();
        let active_total = active_top.iter().map(|(_, _, n)| n).sum();
        active_top.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
        active_top.truncate(TOP);

        // "Now" is the last 10 seconds whatever the range.
        let mut recent_counts = [0_u64; 6];
        let mut recent_latency = Histogram::default();
        for b in self.seconds.range(end - 9..=end).map(|(_, b)| b) {
            for (id, counts) in &b.decisions {
                if wanted_series.get(*id as usize).copied().unwrap_or(false) {
                    for o in 0..6 {
                        recent_counts[o] += counts[o];
                    }
                }
            }
            for (shard, h) in &b.limiter {
                if counted(shard) {
                    recent_latency.merge(h);
                }
            }
        }
        let window = 10.0;
        Frame {
            scope: scope.clone(),
            range,
            latest: end,
            bin_seconds: bin,
            points,
            shards,
            in_process,
            totals,
            top_policies,
            top_tenants,
            cache: cache
                .into_iter()
                .map(|(name, (hits, all))| (name.to_owned(), hits, all))
                .collect(),
            active_total,
            active_top,
            denied_subjects: match scope {
                Scope::Fleet => None,
                Scope::Tenant(t) => Some(self.denied_subjects.get(t).cloned().unwrap_or_default()),
            },
            instances: if fleet {
                self.instances.clone()
            } else {
                Vec::new()
            },
            recent_rate: (
                recent_counts[Outcome::Allowed.index()] as f64 / window,
                recent_counts[Outcome::Denied.index()] as f64 / window,
            ),
            recent_latency: Latency::of(&recent_latency),
            breakers_open: Vec::new(),
        }
    }
}

impl Frame {
    /// Denied over decided (allowed + denied) across the range; `None` without decisions.
    pub fn denial_rate(&self) -> Option<f64> {
        let denied = self.totals[Outcome::Denied.index()];
        let decided = denied + self.totals[Outcome::Allowed.index()];
        (decided > 0).then(|| denied as f64 / decided as f64)
    }

    pub fn total(&self, outcome: Outcome) -> u64 {
        self.totals[outcome.index()]
    }
}

/// The largest latency bound the histograms distinguish, in ms (for axes).
pub fn max_bound_ms() -> f64 {
    BOUNDS_US[BOUNDS_US.len() - 1] as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_day_is_720_points_of_whole_minutes_ending_with_the_current_one() {
        let mut view = View::default();
        let one = || fields(&[("c|t|p|denied", 1)]);
        // Minute 100 is the current one (second 6,030); minute -1,340 is a day and a minute ago.
        view.put_minutes(
            vec![(100, one()), (99, one()), (-1_339, one()), (-1_340, one())],
            -1_400,
            100,
        );
        view.put_seconds(Vec::new(), 6_030, 6_030);
        let day = view.frame(&Scope::Fleet, Range::Day);
        assert_eq!(day.points.len(), 720);
        assert_eq!(day.points[0].t, -1_339 * 60);
        assert_eq!(day.points[0].counts[1], 1);
        assert_eq!(day.points[719].t, 99 * 60);
        assert_eq!(day.points[719].counts[1], 2);
        assert_eq!(
            day.total(Outcome::Denied),
            3,
            "the minute before the day is out"
        );
    }

    #[test]
    fn a_tenant_sees_the_latency_of_its_own_shard_only() {
        let mut view = View::default();
        let slot = crate::limiter::keys::slot("{t1}");
        view.shard_map = vec![
            (0, slot, "a:7000".into()),
            (slot + 1, 16_383, "b:7000".into()),
        ];
        view.put_seconds(
            vec![(
                50,
                fields(&[
                    ("r|a:7000|4", 5),
                    ("r|b:7000|20", 5),
                    ("d|9", 10),
                    ("c|t1|p|allowed", 10),
                ]),
            )],
            50,
            50,
        );
        let fleet = view.frame(&Scope::Fleet, Range::FiveMinutes);
        assert_eq!(fleet.recent_latency.unwrap().max, 75.0);
        assert!(fleet.points[299].check.is_some());
        let tenant = view.frame(&Scope::Tenant("t1".into()), Range::FiveMinutes);
        assert_eq!(tenant.recent_latency.unwrap().max, 0.3);
        assert_eq!(tenant.points[299].limiter.unwrap().p99, 0.3);
        assert!(
            tenant.points[299].check.is_none(),
            "the check's latency is the fleet's"
        );
    }

    fn fields(pairs: &[(&str, i64)]) -> Fields {
        pairs
            .iter()
            .map(|(k, v)| (k.replace('|', "\x1f"), *v))
            .collect()
    }

    #[test]
    fn a_frame_sums_the_fleet_and_scopes_a_tenant() {
        let mut view = View::default();
        view.names.insert("t1".into(), "Acme".into());
        let second = |allowed: i64, denied: i64| {
            fields(&[
                ("c|t1|checkout|allowed", allowed),
                ("c|t1|checkout|denied", denied),
                ("c|t2||allowed", 5),
                ("r|10.0.0.1:7000|6", 9),
                ("r|10.0.0.2:7000|14", 1),
                ("rx|10.0.0.2:7000|a", 6_000),
                ("k|key|hit", 9),
                ("k|key|miss", 1),
                ("bogus", 1),
            ])
        };
        view.put_seconds(vec![(100, second(3, 1)), (101, second(2, 4))], 98, 101);
        let fleet = view.frame(&Scope::Fleet, Range::FiveMinutes);
        assert_eq!(fleet.latest, 101);
        assert_eq!(fleet.points.len(), 300);
        assert_eq!(fleet.points[299].t, 101);
        assert_eq!(fleet.points[299].counts[..2], [7, 4]);
        assert_eq!(fleet.total(Outcome::Allowed), 15);
        assert_eq!(fleet.total(Outcome::Denied), 5);
        assert_eq!(fleet.denial_rate(), Some(0.25));
        assert_eq!(fleet.shards, vec!["10.0.0.1:7000", "10.0.0.2:7000"]);
        let last = fleet.points[299].limiter.unwrap();
        assert_eq!((last.p50, last.p99, last.max), (0.5, 6.0, 6.0));
        assert_eq!(fleet.points[299].shard_p99, vec![Some(0.5), Some(6.0)]);
        assert_eq!(fleet.top_policies[0].tenant_name, "Acme");
        assert_eq!(
            (fleet.top_policies[0].denied, fleet.top_policies[0].decided),
            (5, 10)
        );
        assert_eq!(fleet.top_tenants.len(), 1);
        assert_eq!(fleet.cache, vec![("key".to_owned(), 18, 20)]);

        let tenant = view.frame(&Scope::Tenant("t2".into()), Range::FiveMinutes);
        assert_eq!(tenant.total(Outcome::Allowed), 10);
        assert_eq!(tenant.denial_rate(), Some(0.0));
        assert!(tenant.top_policies.is_empty() && tenant.cache.is_empty());
        assert!(tenant.shards.is_empty());

        // Now is the last 10 s of seconds whatever the range.
        let day = view.frame(&Scope::Fleet, Range::Day);
        assert_eq!(day.recent_rate, (1.5, 0.5));

        // An hour bins 5 seconds a point.
        let hour = view.frame(&Scope::Fleet, Range::Hour);
        assert_eq!(hour.points.len(), 720);
        assert_eq!(hour.points[719].counts[..2], [15, 5]);
    }
}
