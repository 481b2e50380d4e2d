//! Live dashboards for the whole fleet.
//!
//! - [`crate::telemetry::recorder`] holds what this instance saw in the current second: the
//!   check path records each decision, its limiter round trip (by Cluster slot) and its cache
//!   lookups there, and this module takes it once a second.
//! - [`series`]: where every instance's seconds are summed. That is Redis (1 hour at 1 s
//!   and 7 days at 1 min) or, for an embedded instance, memory. It also holds the instances'
//!   heartbeats and the active-key counts.
//! - [`view`]: this instance's copy of the fleet, refreshed every second, and the
//!   [`view::Frame`] of a scope (the fleet or one tenant) over a range.
//! - [`render`]: a frame as HTML with plotters SVG charts.
//! - `GET /live/dashboard` ([`crate::transport::live`]) pushes a new frame to the browser
//!   every second over server-sent events.
//!
//! One task per instance does the work once a second, just after the second ends. It takes
//! the recorder's second, writes it with a heartbeat, re-reads the last few seconds of the
//! fleet (another instance may write its second a little later), and wakes the streams.
//! A second that cannot be written (Redis down) is kept and written later, for up to 10
//! minutes.

pub mod render;
pub mod series;
pub mod top;
pub mod view;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{broadcast, watch};

use crate::limiter::Limiter;
use crate::redis_client::RedisClient;
use crate::store::{self, Db};
use crate::telemetry::recorder::{self, Outcome, Recorder, Snapshot};
use crate::telemetry::Metrics;
use series::{Beat, SeriesStore, SEP};
use view::{Frame, Scope, View};

/// Seconds kept for a later write while the store cannot be written.
const PENDING_MAX: usize = 600;
/// Seconds re-read each tick, for instances that write a little later.
const REREAD: i64 = 4;
/// How often (in seconds) active keys and tenant names are read; names sooner when a tenant
/// without a name shows up.
const SLOW_EVERY: i64 = 5;

/// How long (seconds) a tenant's dashboard counts as watched after its last frame.
const WATCHED_FOR: i64 = 10;

/// The last HTML of each dashboard: (scope, range) → (its last second, the HTML).
type Rendered = HashMap<(Scope, app::dashboard::Range), (i64, Arc<str>)>;

/// How many instances are alive (a heartbeat within 5 s), as this instance last read the
/// fleet; at least 1. The decision core divides a `local` rule's limit by it while Redis
/// cannot decide. Cloning shares it.
#[derive(Debug, Clone)]
pub struct LiveInstances(Arc<std::sync::atomic::AtomicUsize>);

impl Default for LiveInstances {
    fn default() -> Self {
        Self(Arc::new(std::sync::atomic::AtomicUsize::new(1)))
    }
}

impl LiveInstances {
    pub fn get(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed).max(1)
    }

    fn set(&self, n: usize) {
        self.0.store(n.max(1), std::sync::atomic::Ordering::Relaxed);
    }
}

/// This instance's side of the dashboards. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Dashboard {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    recorder: Arc<Recorder>,
    active_gauge: prometheus::IntGauge,
    store: SeriesStore,
    db: Db,
    view: RwLock<View>,
    /// The second just read into the view; streams wake on it.
    ticks: broadcast::Sender<i64>,
    /// Set when the instance stops: the task and the streams end.
    stop: watch::Sender<bool>,
    /// The last HTML of each scope and range, with the second it ends at: every stream of the
    /// same dashboard shares one render per second.
    rendered: Mutex<Rendered>,
    /// The instances alive, for the decision core's `local` failure mode.
    live: LiveInstances,
    /// Tenant → the last second its dashboard was shown: only watched tenants' most denied
    /// subjects are read.
    watched: Mutex<HashMap<String, i64>>,
    /// The limiter's Redis client, whose breakers the fleet dashboard shows.
    limiter_redis: Option<RedisClient>,
    id: String,
    mode: String,
    limiter_kind: String,
    started_ms: i64,
}

fn now_ms() -> i64 {
    store::now_ms()
}

impl Dashboard {
    /// The dashboards of an instance that records into `recorder`; `mode` is "embedded" or
    /// "distributed".
    /// `series` is the Redis the series live in, on connections of their own (a distributed
    /// instance); an embedded instance keeps them in memory.
    pub fn new(
        metrics: &Metrics,
        limiter: &Limiter,
        series: Option<RedisClient>,
        db: Db,
        mode: &str,
        live: LiveInstances,
    ) -> Self {
        let store = match (limiter, series) {
            (_, Some(redis)) => SeriesStore::Redis(redis),
            (Limiter::InProcess(memory), None) => SeriesStore::memory(memory.clone()),
            (Limiter::Redis(redis, _), None) => SeriesStore::Redis(redis.clone()),
        };
        let (ticks, _) = broadcast::channel(16);
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        Self {
            inner: Arc::new(Inner {
                recorder: metrics.live.clone(),
                active_gauge: metrics.active_keys.clone(),
                store,
                db,
                view: RwLock::default(),
                ticks,
                stop: watch::channel(false).0,
                rendered: Mutex::default(),
                live,
                watched: Mutex::default(),
                limiter_redis: limiter.redis().cloned(),
                id,
                mode: mode.to_owned(),
                limiter_kind: limiter.kind().as_str().to_owned(),
                started_ms: now_ms(),
            }),
        }
    }

    /// The instances alive as last read (at least 1).
    pub fn live_instances(&self) -> usize {
        self.inner.live.get()
    }

    /// This instance's id in the fleet.
    pub fn instance_id(&self) -> &str {
        &self.inner.id
    }

    /// `tenant`'s denials by rule and subject over the last `minutes` minutes, the one now
    /// running included, read from the fleet's series; also the first counted minute's start
    /// (Unix ms).
    pub async fn top_denied(
        &self,
        tenant: &str,
        minutes: i64,
    ) -> Result<(i64, HashMap<String, top::Summary>), crate::redis_client::Error> {
        let now = now_ms().div_euclid(60_000);
        let from = now - minutes + 1;
        let rules = self.inner.store.top_denied(tenant, from, now).await?;
        Ok((from * 60_000, rules))
    }

    /// The frame of `scope` over `range`, from the view as last read.
    pub fn frame(&self, scope: &Scope, range: app::dashboard::Range) -> Frame {
        let mut frame = self.view().frame(scope, range);
        if let Scope::Tenant(tenant) = scope {
            self.inner
                .watched
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(tenant.clone(), frame.latest);
        }
        if *scope == Scope::Fleet {
            if let Some(redis) = &self.inner.limiter_redis {
                frame.breakers_open = redis.open_breakers();
            }
        }
        frame
    }

    fn view(&self) -> std::sync::RwLockReadGuard<'_, View> {
        self.inner
            .view
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn view_mut(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        self.inner
            .view
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A receiver woken with each second read into the view.
    pub fn subscribe(&self) -> broadcast::Receiver<i64> {
        self.inner.ticks.subscribe()
    }

    /// The last second in the view.
    pub fn view_latest(&self) -> i64 {
        self.view().latest
    }

    /// A receiver that changes to `true` when the instance stops.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.inner.stop.subscribe()
    }

    /// Ends the once-a-second task and every live stream (the instance is shutting down).
    pub fn stop(&self) {
        let _ = self.inner.stop.send(true);
    }

    /// The dashboard of `scope` over `range` as HTML, rendered once per second however many
    /// pages show it.
    pub fn html(&self, scope: &Scope, range: app::dashboard::Range) -> Arc<str> {
        let latest = self.view().latest;
        let key = (scope.clone(), range);
        if let Some((at, html)) = self.cache().get(&key) {
            if *at == latest {
                return html.clone();
            }
        }
        let frame = self.frame(scope, range);
        let html: Arc<str> = render::html(&frame).into();
        let mut cache = self.cache();
        // Scopes come and go with tenants: keep only this second's renders.
        cache.retain(|_, (at, _)| *at >= frame.latest);
        cache.insert(key, (frame.latest, html.clone()));
        html
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Rendered> {
        self.inner
            .rendered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs the once-a-second work until the process ends.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let dashboard = self.clone();
        tokio::spawn(async move { dashboard.run().await })
    }

    async fn run(&self) {
        let mut pending: VecDeque<(i64, Vec<(String, i64)>)> = VecDeque::new();
        // Seconds of denials by subject not yet merged, apart from the series: a failure of
        // theirs never holds the series back.
        let mut pending_top: VecDeque<(i64, top::ByTenant)> = VecDeque::new();
        let mut shard_map: Option<Vec<(u16, u16, String)>> = None;
        // The next second this instance has not read yet (None: read the whole hour).
        let mut unread: Option<i64> = None;
        let mut failing = false;
        let mut tick: i64 = 0;
        let mut stop = self.inner.stop.subscribe();
        loop {
            // Wake just after the second ends.
            let now = now_ms();
            let next = (now.div_euclid(1000) + 1) * 1000 + 30;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis((next - now) as u64)) => {}
                _ = stop.changed() => return,
            }
            let second = now_ms().div_euclid(1000) - 1;
            tick += 1;

            if tick % 30 == 1 {
                match self.inner.store.shard_map().await {
                    Ok(map) => {
                        self.view_mut().shard_map = map.clone().unwrap_or_default();
                        shard_map = map;
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot read the Cluster's slots"),
                }
            }
            let mut snapshot = self.inner.recorder.take();
            let checks = snapshot.decision.count();
            pending.push_back((second, self.fields(&snapshot, shard_map.as_deref())));
            while pending.len() > PENDING_MAX {
                pending.pop_front();
            }
            let mut denied = std::mem::take(&mut snapshot.denied);
            if !denied.is_empty() {
                // Kept at its capacity while it waits (it is merged so anyway).
                for summary in denied.values_mut().flat_map(HashMap::values_mut) {
                    summary.reduce();
                }
                pending_top.push_back((second, denied));
                while pending_top.len() > PENDING_MAX {
                    pending_top.pop_front();
                }
            }
            let beat = Beat {
                id: self.inner.id.clone(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                mode: self.inner.mode.clone(),
                limiter: self.inner.limiter_kind.clone(),
                started_ms: self.inner.started_ms,
                last_ms: now_ms(),
                checks,
            };
            // Seconds written late (after an outage) must be read again.
            let mut oldest_written = second;
            while let Some((sec, fields)) = pending.front() {
                if *sec < second - series::SECONDS_KEPT {
                    pending.pop_front();
                    continue;
                }
                match self.inner.store.write(*sec, fields, &beat).await {
                    Ok(()) => {
                        oldest_written = oldest_written.min(*sec);
                        pending.pop_front();
                        if failing {
                            tracing::info!("dashboard series written again");
                            failing = false;
                        }
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(error = %e, pending = pending.len(), "cannot write the dashboard series; keeping them to retry");
                            failing = true;
                        }
                        break;
                    }
                }
            }
            while let Some((sec, denied)) = pending_top.front() {
                if *sec < second - series::TOP_MINUTES_KEPT * 60 {
                    pending_top.pop_front();
                    continue;
                }
                match self
                    .inner
                    .store
                    .write_top(*sec, &self.inner.id, denied)
                    .await
                {
                    Ok(()) => {
                        pending_top.pop_front();
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, pending = pending_top.len(), "cannot merge the most denied subjects; keeping them to retry");
                        break;
                    }
                }
            }

            // Read again: the last few seconds (other instances write a little later), what
            // this instance wrote late or missed, and every 30 s the last 10 minutes (other
            // instances' late writes).
            let mut from = match unread {
                None => second - series::SECONDS_KEPT + 1,
                Some(next) => next.min(second - REREAD).min(oldest_written),
            };
            if tick % 30 == 0 {
                from = from.min(second - 600);
            }
            let from = from.max(second - series::SECONDS_KEPT + 1);
            let everything = unread.is_none();
            if let Err(e) = self.refresh(second, from, everything).await {
                tracing::debug!(error = %e, "cannot read the dashboard series");
                continue;
            }
            unread = Some(second + 1);
            if tick % SLOW_EVERY == 1 || everything || self.has_unnamed() {
                self.refresh_tenants(second, tick % SLOW_EVERY == 1 || everything)
                    .await;
            }
            self.refresh_denied(second).await;
            let _ = self.inner.ticks.send(second);
        }
    }

    /// Reads the most denied subjects of the last 5 minutes of each tenant whose dashboard was
    /// shown in the last [`WATCHED_FOR`] seconds, at most every [`SLOW_EVERY`] seconds each; a
    /// tenant without denials in that time is answered without a read. Tenants no longer
    /// watched are forgotten.
    async fn refresh_denied(&self, second: i64) {
        let due: Vec<String> = {
            let mut watched = self
                .inner
                .watched
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            watched.retain(|_, at| *at >= second - WATCHED_FOR);
            let mut view = self.view_mut();
            view.denied_subjects
                .retain(|tenant, _| watched.contains_key(tenant));
            watched
                .keys()
                .filter(|t| {
                    view.denied_subjects
                        .get(*t)
                        .and_then(|d| d.read_at)
                        .is_none_or(|at| at <= second - SLOW_EVERY)
                })
                .cloned()
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let denying = self.view().tenants_since(second - 300, true);
        let minute = second.div_euclid(60);
        let store = &self.inner.store;
        let read: Vec<(String, Result<HashMap<String, top::Summary>, _>)> =
            futures::stream::iter(due)
                .map(|tenant| {
                    let denied = denying.binary_search(&tenant).is_ok();
                    async move {
                        let summaries = if denied {
                            store.top_denied(&tenant, minute - 4, minute).await
                        } else {
                            Ok(HashMap::new())
                        };
                        (tenant, summaries)
                    }
                })
                .buffer_unordered(16)
                .collect()
                .await;
        let mut view = self.view_mut();
        for (tenant, summaries) in read {
            match summaries {
                Ok(summaries) => {
                    view.denied_subjects
                        .insert(tenant, view::DeniedSubjects::of(&summaries, second));
                }
                // Unreadable now: the last read stands, and is tried again next second.
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read a tenant's most denied subjects");
                }
            }
        }
    }

    /// Whether a tenant in the view has no name yet (it was created since the last read).
    fn has_unnamed(&self) -> bool {
        let view = self.view();
        view.series.iter().any(|(t, _)| !view.names.contains_key(t))
    }

    /// Reads the fleet into the view: seconds `from..=second` and their minutes (or the whole
    /// day at first), and the instances alive.
    async fn refresh(
        &self,
        second: i64,
        from: i64,
        everything: bool,
    ) -> Result<(), crate::redis_client::Error> {
        let store = &self.inner.store;
        let seconds = store.seconds(from, second).await?;
        let minute = second.div_euclid(60);
        let minute_from = if everything {
            minute - 24 * 60
        } else {
            from.div_euclid(60)
        };
        let minutes = store.minutes(minute_from, minute).await?;
        let instances = store.alive(now_ms()).await?;
        let mut view = self.view_mut();
        view.put_seconds(seconds, from, second);
        view.put_minutes(minutes, minute_from, minute);
        // An in-process limiter is one instance's alone, whatever else shares the database.
        if self.inner.limiter_kind != "in-process" {
            self.inner.live.set(instances.len());
        }
        view.instances = instances;
        Ok(())
    }

    /// Reads the tenants' names and, when `count`, the active keys of the tenants that had
    /// checks in the last 6 minutes. A tenant whose count cannot be read keeps its last one.
    async fn refresh_tenants(&self, second: i64, count: bool) {
        let tenants = match store::tenants::list(&self.inner.db).await {
            Ok(tenants) => tenants,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list tenants for the dashboards");
                return;
            }
        };
        let names: HashMap<String, String> = tenants.into_iter().map(|t| (t.id, t.name)).collect();
        let mut active = None;
        if count {
            let recent: Vec<String> = self
                .view()
                .tenants_since(second - 360, false)
                .into_iter()
                .filter(|t| names.contains_key(t))
                .collect();
            let (counts, failed) = self.inner.store.active_keys(&recent, now_ms()).await;
            if !failed.is_empty() {
                tracing::debug!(
                    tenants = failed.len(),
                    "cannot count some tenants' active keys"
                );
            }
            active = Some((counts, failed));
        }
        let mut view = self.view_mut();
        view.names = names;
        if let Some((counts, failed)) = active {
            let kept: Vec<(String, u64)> = failed
                .iter()
                .filter_map(|t| view.active.get(t).map(|n| (t.clone(), *n)))
                .collect();
            view.active = counts;
            view.active.extend(kept);
            self.inner
                .active_gauge
                .set(i64::try_from(view.active.values().sum::<u64>()).unwrap_or(i64::MAX));
        }
    }

    /// A snapshot as stored fields. Slots become shards through the Cluster's slot map.
    fn fields(&self, s: &Snapshot, shard_map: Option<&[(u16, u16, String)]>) -> Vec<(String, i64)> {
        let id = &self.inner.id;
        let mut out = Vec::new();
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for (tenant, policies) in &s.decisions {
            for (policy, counts) in policies {
                for o in Outcome::ALL {
                    if counts[o.index()] > 0 {
                        out.push((
                            format!("c{SEP}{tenant}{SEP}{policy}{SEP}{}", o.as_str()),
                            n(counts[o.index()]),
                        ));
                    }
                }
            }
        }
        let mut by_shard: std::collections::BTreeMap<String, recorder::Histogram> =
            std::collections::BTreeMap::new();
        for (slot, h) in &s.limiter {
            let shard = match (slot, shard_map) {
                (Some(slot), Some(map)) => map
                    .iter()
                    .find(|(start, end, _)| (start..=end).contains(&slot))
                    .map_or_else(|| "unknown".to_owned(), |(_, _, s)| s.clone()),
                (Some(_), None) => "cluster".to_owned(),
                (None, _) => self.inner.limiter_kind.clone(),
            };
            by_shard.entry(shard).or_default().merge(h);
        }
        for (shard, h) in &by_shard {
            for (i, c) in h.counts.iter().enumerate() {
                if *c > 0 {
                    out.push((format!("r{SEP}{shard}{SEP}{i}"), n(*c)));
                }
            }
            out.push((format!("rx{SEP}{shard}{SEP}{id}"), n(h.max_us)));
        }
        for (i, c) in s.decision.counts.iter().enumerate() {
            if *c > 0 {
                out.push((format!("d{SEP}{i}"), n(*c)));
            }
        }
        if s.decision.count() > 0 {
            out.push((format!("dx{SEP}{id}"), n(s.decision.max_us)));
        }
        for ((cache, result), v) in &s.cache {
            out.push((format!("k{SEP}{cache}{SEP}{result}"), n(*v)));
        }
        out
    }
}
