//! The in-process limiter: the reference model over sharded in-memory maps.
//!
//! Keys are spread over [`SHARDS`] mutex-guarded maps, so checks on different keys rarely
//! contend. A check locks the shards of all its keys in ascending order (no deadlock) and
//! evaluates them with [`model::check_all`], exactly like the Lua script on Redis. Every
//! stored state carries the expiry the script would give its key; expired entries read as
//! absent and each shard is swept as it is used, so memory follows the active keys.
//!
//! The tenant's quota of live keys is kept as the script keeps it: each tenant's count of
//! stored buckets and request_id records goes up when a check stores a new one and down when
//! a sweep removes it. A check that would pass the quota first sweeps every shard (at most
//! every [`FORCED_SWEEP_MS`], so refusals cannot be made to sweep without end), then is
//! refused if it still would.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use smallvec::SmallVec;

use app::rules::model::{self, RuleInput, State};
use app::rules::LimitSpec;

use super::check::{
    CheckOutcome, CheckRequest, LimiterError, Released, Settlement, MAX_RULES, REQUEST_ID_TTL,
    SETTLED_TTL,
};
use crate::hashing::FastMap;
use crate::redis_client::keys;

/// Number of independently locked shards.
pub const SHARDS: usize = 64;

/// What a check keeps per rule (and per record), inline up to `MAX_RULES` and three records.
type Small<T> = SmallVec<[T; MAX_RULES + 3]>;

/// A shard removes its expired entries after this many writes.
const SWEEP_EVERY: u32 = 1024;
/// A check refused by its tenant's quota sweeps every shard first, unless one did within
/// this many ms.
pub const FORCED_SWEEP_MS: i64 = 100;

/// The tenant of a bucket or request key: what its hash tag `{<tenant>}` names.
fn tenant_of(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map_or("", |(tenant, _)| tenant)
}

/// Stored keys per tenant, expired or not (what the quota counts).
type Counts = Mutex<FastMap<String, u64>>;

/// Takes `n` keys off `tenant`'s count, forgetting the tenant at zero.
fn take_off(counts: &mut FastMap<String, u64>, tenant: &str, n: u64) {
    if let Some(count) = counts.get_mut(tenant) {
        *count = count.saturating_sub(n);
        if *count == 0 {
            counts.remove(tenant);
        }
    }
}

/// Adds `n` to `tenant`'s count (its name is copied only the first time).
fn add<S: BuildHasher>(counts: &mut HashMap<String, u64, S>, tenant: &str, n: u64) {
    match counts.get_mut(tenant) {
        Some(count) => *count += n,
        None => {
            counts.insert(tenant.to_owned(), n);
        }
    }
}

/// What a reservation charged, as `lua/check.lua` records it.
#[derive(Debug, Clone)]
struct Reservation {
    /// Per bucket written: its key, parameters, cost charged, and where the charge went
    /// ([`model::charge_mark`]).
    charged: Vec<(String, LimitSpec, u64, f64)>,
    estimate: u64,
    /// The final cost, once settled.
    settled: Option<u64>,
}

/// What a lease holds, as `lua/check.lua` records it: the concurrency buckets it took a slot
/// in, with when it ends in each (which, with its id, names its entry), and whether it has
/// been released.
#[derive(Debug, Clone)]
struct Lease {
    held: Vec<(String, f64)>,
    released: bool,
}

#[derive(Default)]
struct Shard {
    // Keyed by what clients choose (subjects, request ids): SipHash (`crate::hashing`).
    buckets: HashMap<String, (State, i64)>,
    replies: HashMap<String, (CheckOutcome, i64)>,
    reservations: HashMap<String, (Reservation, i64)>,
    leases: HashMap<String, (Lease, i64)>,
    writes: u32,
}

impl Shard {
    /// Counts a write; every [`SWEEP_EVERY`] writes the shard drops what has expired.
    fn wrote(&mut self, now: i64, counts: &Counts) {
        self.writes += 1;
        if self.writes >= SWEEP_EVERY {
            self.sweep(now, counts);
        }
    }

    /// Drops what has expired at `now` and takes it off its tenant's count.
    fn sweep(&mut self, now: i64, counts: &Counts) -> usize {
        let mut removed: FastMap<String, u64> = FastMap::default();
        let mut drop_expired = |key: &String, expires: i64| {
            if expires > now {
                return true;
            }
            add(&mut removed, tenant_of(key), 1);
            false
        };
        self.buckets
            .retain(|key, (_, expires)| drop_expired(key, *expires));
        self.replies
            .retain(|key, (_, expires)| drop_expired(key, *expires));
        self.reservations
            .retain(|key, (_, expires)| drop_expired(key, *expires));
        self.leases
            .retain(|key, (_, expires)| drop_expired(key, *expires));
        self.writes = 0;
        if removed.is_empty() {
            return 0;
        }
        let mut counts = lock(counts);
        let mut total = 0;
        for (tenant, n) in removed {
            total += n as usize;
            take_off(&mut counts, &tenant, n);
        }
        total
    }
}

/// Which of a check's locked shards it wrote to, once a write.
#[derive(Default)]
struct Touched {
    guards: [usize; MAX_RULES + 3],
    len: usize,
}

impl Touched {
    fn push(&mut self, guard: usize) {
        if let Some(slot) = self.guards.get_mut(self.len) {
            *slot = guard;
            self.len += 1;
        }
    }

    fn get(&self) -> &[usize] {
        &self.guards[..self.len]
    }
}

/// Shards locked by [`MemoryBackend::lock_keys`]: their indices, in ascending order, and
/// their guards.
struct Locked<'a> {
    order: Vec<usize>,
    guards: Vec<MutexGuard<'a, Shard>>,
}

impl Locked<'_> {
    /// Shard `index`, which must be one of those locked.
    fn shard(&mut self, index: usize) -> &mut Shard {
        let at = self
            .order
            .iter()
            .position(|&i| i == index)
            .expect("every shard used is locked");
        &mut self.guards[at]
    }
}

/// The in-process backend. Cloning shares the state.
#[derive(Clone)]
pub struct MemoryBackend {
    shards: Arc<[Mutex<Shard>]>,
    hasher: RandomState,
    /// Stored keys per tenant. Locked after shards, never before.
    counts: Arc<Counts>,
    /// When a refused check last swept every shard (Unix ms).
    forced_sweep: Arc<AtomicI64>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a shard cannot leave a half-written state (writes are single
    // inserts), so a poisoned lock is still safe to use.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            counts: Arc::default(),
            forced_sweep: Arc::new(AtomicI64::new(i64::MIN)),
        }
    }

    fn shard_of(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    /// Decides `request` (already validated). Past the tenant's quota, it sweeps every
    /// shard (at most every [`FORCED_SWEEP_MS`]) and tries once more before refusing.
    pub fn check(&self, request: &CheckRequest) -> Result<CheckOutcome, LimiterError> {
        let now = request.now_ms.unwrap_or_else(crate::store::now_ms);
        match self.check_at(request, now) {
            Err(LimiterError::OverQuota { .. }) if self.may_force_sweep() => {
                self.sweep(now);
                self.check_at(request, now)
            }
            other => other,
        }
    }

    /// Whether a refused check may sweep every shard now (and if so, notes that it did).
    fn may_force_sweep(&self) -> bool {
        let wall = crate::store::now_ms();
        let last = self.forced_sweep.load(Ordering::Relaxed);
        wall.saturating_sub(last) >= FORCED_SWEEP_MS
            && self
                .forced_sweep
                .compare_exchange(last, wall, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    fn check_at(&self, request: &CheckRequest, now: i64) -> Result<CheckOutcome, LimiterError> {
        let reply_key = request.request_id.as_deref().map(|_| request.reply_key());
        let reservation = request
            .reserve
            .as_ref()
            .filter(|_| !request.dry_run)
            .map(|r| (keys::reservation(&request.tenant, &r.id), r.ttl_ms));

        // Each key's shard, hashed once; the rules' first, in the rules' order. Inline: a
        // check has at most `MAX_RULES` rules and three records, so none of these allocates.
        let rule_shards: Small<usize> = request
            .rules
            .iter()
            .map(|r| self.shard_of(&r.key))
            .collect();
        let reply_shard = reply_key.as_deref().map(|k| self.shard_of(k));
        let reservation_shard = reservation.as_ref().map(|(k, _)| self.shard_of(k));
        let lease = request
            .lease_id()
            .filter(|_| !request.dry_run)
            .map(|id| (keys::lease(&request.tenant, &id), id.into_owned()));
        let lease_shard = lease.as_ref().map(|(k, _)| self.shard_of(k));
        let mut order: Small<usize> = rule_shards.clone();
        order.extend(reply_shard);
        order.extend(reservation_shard);
        order.extend(lease_shard);
        order.sort_unstable();
        order.dedup();
        let mut guards: Small<(usize, MutexGuard<'_, Shard>)> =
            order.iter().map(|&i| (i, lock(&self.shards[i]))).collect();
        // Where each shard is among the guards.
        let position = |shard: usize| {
            guards
                .iter()
                .position(|(i, _)| *i == shard)
                .expect("every shard used is locked")
        };
        let rule_guards: Small<usize> = rule_shards.iter().map(|&s| position(s)).collect();
        let reply_guard = reply_shard.map(position);
        let reservation_guard = reservation_shard.map(position);
        let lease_guard = lease_shard.map(position);

        if let (Some(key), Some(g)) = (&reply_key, reply_guard) {
            if let Some((reply, expires)) = guards[g].1.replies.get(key) {
                if *expires > now {
                    return Ok(CheckOutcome {
                        deduplicated: true,
                        ..reply.clone()
                    });
                }
            }
        }

        // Each rule's stored state (`None`: absent or expired), and whether its key is
        // stored at all (an expired one still counts until a sweep removes it).
        let mut stored: Small<bool> = SmallVec::new();
        let states: Small<Option<State>> = request
            .rules
            .iter()
            .zip(&rule_guards)
            .map(|(rule, &g)| {
                let found = guards[g].1.buckets.get(&rule.key);
                stored.push(found.is_some());
                match found {
                    Some((state, expires)) if *expires > now => Some(state.clone()),
                    _ => None,
                }
            })
            .collect();
        let inputs: Small<RuleInput<'_>> = request
            .rules
            .iter()
            .map(|r| RuleInput {
                spec: &r.spec,
                cost: r.cost,
                shadow: r.shadow,
            })
            .collect();
        let state_refs: Small<Option<&State>> = states.iter().map(Option::as_ref).collect();
        let result = model::check_all(&inputs, &state_refs, now);

        let mut writes = if request.dry_run {
            Vec::new()
        } else {
            result.writes
        };
        // The concurrency buckets an admitted check takes a slot in, under its lease's id.
        let mut held = Vec::new();
        if let Some((_, id)) = &lease {
            for (rule, write) in request.rules.iter().zip(writes.iter_mut()) {
                if let Some((state, _)) = write {
                    if result.allowed && rule.spec.algorithm == app::rules::Algorithm::Concurrency {
                        model::name_leases(state, id);
                        held.push((rule.key.clone(), rule.spec.period_ms));
                        // Any earlier lease of the same id (a request_id used again after its
                        // record expired) keeps counting: only this one is named now.
                    }
                }
            }
        }
        let lease = lease.filter(|_| !held.is_empty());
        // The keys this check stores that are not stored yet (an expired one still counts
        // until a sweep removes it, so replacing it adds nothing).
        let mut fresh = writes
            .iter()
            .zip(&stored)
            .filter(|(write, &stored)| write.is_some() && !stored)
            .count() as u64;
        if let (Some(key), Some(g)) = (&reply_key, reply_guard) {
            fresh += u64::from(!guards[g].1.replies.contains_key(key));
        }
        let reservation = reservation.filter(|_| result.allowed);
        if let (Some((key, _)), Some(g)) = (&reservation, reservation_guard) {
            fresh += u64::from(!guards[g].1.reservations.contains_key(key));
        }
        if let (Some((key, _)), Some(g)) = (&lease, lease_guard) {
            fresh += u64::from(!guards[g].1.leases.contains_key(key));
        }
        if fresh > 0 {
            let mut counts = lock(&self.counts);
            let live = counts.get(&request.tenant).copied().unwrap_or(0);
            if let Some(quota) = request.max_live_keys {
                if live + fresh > quota {
                    return Err(LimiterError::OverQuota {
                        live,
                        quota,
                        retry_after_ms: FORCED_SWEEP_MS as u64,
                    });
                }
            }
            add(&mut counts, &request.tenant, fresh);
        }
        // The guards written to, one entry a write: the rules, the reply, a reservation and
        // a lease at most. On the stack: the in-process check allocates nothing for it.
        let mut touched = Touched::default();
        if let (Some((key, _)), Some(g)) = (lease, lease_guard) {
            let longest = held.iter().map(|(_, p)| *p).max().unwrap_or(0);
            let expires = now
                .saturating_add(i64::try_from(longest).unwrap_or(i64::MAX))
                .saturating_add(model::TTL_MARGIN_MS as i64);
            let record = Lease {
                held: held
                    .into_iter()
                    .map(|(k, period)| (k, (now as f64) + period as f64))
                    .collect(),
                released: false,
            };
            guards[g].1.leases.insert(key, (record, expires));
            touched.push(g);
        }
        if let (Some((key, ttl)), Some(g)) = (reservation, reservation_guard) {
            let charged = request
                .rules
                .iter()
                .zip(&writes)
                .filter_map(|(rule, write)| {
                    let (state, _) = write.as_ref()?;
                    let mark = model::charge_mark(state);
                    Some((rule.key.clone(), rule.spec, rule.cost, mark))
                })
                .collect();
            let record = Reservation {
                charged,
                estimate: request.rules[0].cost,
                settled: None,
            };
            let expires = now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX));
            guards[g].1.reservations.insert(key, (record, expires));
            touched.push(g);
        }
        for ((rule, &g), write) in request.rules.iter().zip(&rule_guards).zip(writes) {
            if let Some((state, ttl)) = write {
                let ttl = i64::try_from(ttl).unwrap_or(i64::MAX);
                let entry = (state, now.saturating_add(ttl));
                let buckets = &mut guards[g].1.buckets;
                // A stored bucket is written over in place; only a new one copies its key.
                match buckets.get_mut(&rule.key) {
                    Some(slot) => *slot = entry,
                    None => {
                        buckets.insert(rule.key.clone(), entry);
                    }
                }
                touched.push(g);
            }
        }
        let outcome = CheckOutcome {
            allowed: result.allowed,
            decisions: result.decisions,
            deduplicated: false,
            now_ms: now,
        };
        if let (Some(key), Some(g)) = (reply_key, reply_guard) {
            let expires = now.saturating_add(REQUEST_ID_TTL.as_millis() as i64);
            guards[g].1.replies.insert(key, (outcome.clone(), expires));
            touched.push(g);
        }
        // Counted only once every key is stored: a sweep in between could drop an expired
        // key that `fresh` took as stored, and the count would miss the one written over it.
        for &g in touched.get() {
            guards[g].1.wrote(now, &self.counts);
        }
        Ok(outcome)
    }

    /// Locks the shards of `record` and of `buckets` in ascending order, as a check locks
    /// its shards, so that no two callers can wait for each other.
    fn lock_keys<'a>(&'a self, record: &str, buckets: &[String]) -> Locked<'a> {
        let mut order: Vec<usize> = buckets.iter().map(|k| self.shard_of(k)).collect();
        order.push(self.shard_of(record));
        order.sort_unstable();
        order.dedup();
        let guards = order.iter().map(|&i| lock(&self.shards[i])).collect();
        Locked { order, guards }
    }

    /// Settles `tenant`'s reservation `id` at `cost` (see `lua/settle.lua`, which this
    /// mirrors): every bucket it charged in one step, under all their shards' locks.
    pub fn settle(&self, tenant: &str, id: &str, cost: u64, now_ms: Option<i64>) -> Settlement {
        let now = now_ms.unwrap_or_else(crate::store::now_ms);
        let record_key = keys::reservation(tenant, id);
        let record_shard = self.shard_of(&record_key);
        // The buckets it charged, to lock their shards in order with the record's.
        let buckets: Vec<String> = match lock(&self.shards[record_shard])
            .reservations
            .get(&record_key)
        {
            Some((record, expires)) if *expires > now => {
                record.charged.iter().map(|c| c.0.clone()).collect()
            }
            _ => return Settlement::Unknown,
        };
        let mut locked = self.lock_keys(&record_key, &buckets);
        // Read again under every lock: it may have been settled or have expired meanwhile.
        let record = match locked.shard(record_shard).reservations.get(&record_key) {
            Some((record, expires)) if *expires > now => record.clone(),
            _ => return Settlement::Unknown,
        };
        if let Some(first) = record.settled {
            return Settlement::Settled {
                estimate: record.estimate,
                cost: first,
                repeated: true,
                buckets,
            };
        }
        let mut created = 0;
        for (key, spec, charged, mark) in &record.charged {
            let shard = locked.shard(self.shard_of(key));
            let state = match shard.buckets.get(key) {
                Some((state, expires)) if *expires > now => Some(state),
                _ => None,
            };
            if let Some((state, ttl)) =
                model::settle(spec, state, *charged as f64, *mark, now, cost)
            {
                let expires = now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX));
                if shard
                    .buckets
                    .insert(key.clone(), (state, expires))
                    .is_none()
                {
                    created += 1;
                }
                shard.wrote(now, &self.counts);
            }
        }
        if created > 0 {
            add(&mut lock(&self.counts), tenant, created);
        }
        let expires = now.saturating_add(SETTLED_TTL.as_millis() as i64);
        let settled = Reservation {
            settled: Some(cost),
            ..record
        };
        locked
            .shard(record_shard)
            .reservations
            .insert(record_key, (settled.clone(), expires));
        Settlement::Settled {
            estimate: settled.estimate,
            cost,
            repeated: false,
            buckets,
        }
    }

    /// Releases `tenant`'s lease `id` (see `lua/release.lua`, which this mirrors): its slot in
    /// every bucket it holds is freed in one step, under all their shards' locks.
    pub fn release(&self, tenant: &str, id: &str, now_ms: Option<i64>) -> Released {
        let now = now_ms.unwrap_or_else(crate::store::now_ms);
        let record_key = keys::lease(tenant, id);
        let record_shard = self.shard_of(&record_key);
        let held: Vec<(String, f64)> =
            match lock(&self.shards[record_shard]).leases.get(&record_key) {
                Some((record, expires)) if *expires > now => record.held.clone(),
                _ => return Released::Unknown,
            };
        let buckets: Vec<String> = held.iter().map(|(k, _)| k.clone()).collect();
        let mut locked = self.lock_keys(&record_key, &buckets);
        match locked.shard(record_shard).leases.get_mut(&record_key) {
            Some((record, expires)) if *expires > now => {
                if record.released {
                    return Released::Before;
                }
                record.released = true;
                // Kept to answer a repeat, but not for a long lease's whole period.
                *expires = (*expires).min(now.saturating_add(SETTLED_TTL.as_millis() as i64));
            }
            _ => return Released::Unknown,
        }
        for (key, ends) in &held {
            if let Some((state, _)) = locked.shard(self.shard_of(key)).buckets.get_mut(key) {
                if let Some(freed) = model::release(state, id, *ends) {
                    *state = freed;
                }
            }
        }
        Released::Now
    }

    /// Removes the bucket `key` (a reset: its next check starts it afresh) and takes it off
    /// its tenant's count of stored keys, the quota's. Whether a live bucket was there.
    pub fn remove(&self, key: &str, now: i64) -> bool {
        let removed = lock(&self.shards[self.shard_of(key)]).buckets.remove(key);
        let Some((_, expires)) = removed else {
            return false;
        };
        take_off(&mut lock(&self.counts), tenant_of(key), 1);
        expires > now
    }

    /// The stored state of `key`, expired or not (for tests and diagnostics).
    pub fn peek(&self, key: &str) -> Option<(State, i64)> {
        lock(&self.shards[self.shard_of(key)])
            .buckets
            .get(key)
            .cloned()
    }

    /// Sweeps every shard every `every`, so shards that see no writes still shed expired
    /// entries; runs until the process ends.
    pub fn spawn_sweeper(&self, every: std::time::Duration) -> tokio::task::JoinHandle<()> {
        let memory = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                memory.sweep(crate::store::now_ms());
            }
        })
    }

    /// Removes every entry expired at `now`; returns how many were removed.
    pub fn sweep(&self, now: i64) -> usize {
        self.shards
            .iter()
            .map(|s| lock(s).sweep(now, &self.counts))
            .sum()
    }

    /// Live buckets per tenant at `now` (the in-process twin of the active-key
    /// HyperLogLogs: exact, and a bucket counts until it expires rather than for five
    /// minutes after its last check).
    pub fn active_by_tenant(&self, now: i64) -> HashMap<String, u64> {
        let mut counts: HashMap<String, u64> = HashMap::new();
        for shard in self.shards.iter() {
            let shard = lock(shard);
            for (key, (_, expires)) in &shard.buckets {
                if *expires <= now {
                    continue;
                }
                add(&mut counts, tenant_of(key), 1);
            }
        }
        counts
    }

    /// The number of stored keys (buckets and idempotency records), expired or not.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let shard = lock(s);
                shard.buckets.len()
                    + shard.replies.len()
                    + shard.reservations.len()
                    + shard.leases.len()
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
