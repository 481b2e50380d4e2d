//! The in-process limiter: the reference model over sharded in-memory maps.
//!
//! Keys are spread over [`SHARDS`] mutex-guarded maps, so checks on different keys rarely
//! contend. A check locks the shards of all its keys in ascending order (no deadlock) and
//! evaluates them with [`model::check_all`], exactly like the Lua script on Redis. Every
//! stored state carries the expiry the script would give its key; expired entries read as
//! absent and each shard is swept as it is used, so memory follows the active keys.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};

use app::rules::model::{self, RuleInput, State};

use super::check::{CheckOutcome, CheckRequest, REQUEST_ID_TTL};

/// Number of independently locked shards.
pub const SHARDS: usize = 64;
/// A shard removes its expired entries after this many writes.
const SWEEP_EVERY: u32 = 1024;

#[derive(Default)]
struct Shard {
    buckets: HashMap<String, (State, i64)>,
    replies: HashMap<String, (CheckOutcome, i64)>,
    writes: u32,
}

impl Shard {
    /// Counts a write; every [`SWEEP_EVERY`] writes the shard drops what has expired.
    fn wrote(&mut self, now: i64) {
        self.writes += 1;
        if self.writes >= SWEEP_EVERY {
            self.sweep(now);
        }
    }

    fn sweep(&mut self, now: i64) -> usize {
        let before = self.buckets.len() + self.replies.len();
        self.buckets.retain(|_, (_, expires)| *expires > now);
        self.replies.retain(|_, (_, expires)| *expires > now);
        self.writes = 0;
        before - self.buckets.len() - self.replies.len()
    }
}

/// The in-process backend. Cloning shares the state.
#[derive(Clone)]
pub struct MemoryBackend {
    shards: Arc<[Mutex<Shard>]>,
    hasher: RandomState,
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

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while holding a shard cannot leave a half-written state (writes are single
    // inserts), so a poisoned lock is still safe to use.
    shard
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
        }
    }

    fn shard_of(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    /// Decides `request` (already validated).
    pub fn check(&self, request: &CheckRequest) -> CheckOutcome {
        let now = request.now_ms.unwrap_or_else(crate::store::now_ms);
        let reply_key = request.request_id.as_deref().map(|_| request.reply_key());

        let mut order: Vec<usize> = request
            .rules
            .iter()
            .map(|r| self.shard_of(&r.key))
            .collect();
        order.extend(reply_key.as_deref().map(|k| self.shard_of(k)));
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> =
            order.iter().map(|&i| (i, lock(&self.shards[i]))).collect();
        let position = |shard: usize, guards: &[(usize, MutexGuard<'_, Shard>)]| {
            guards
                .iter()
                .position(|(i, _)| *i == shard)
                .expect("every shard used is locked")
        };

        if let Some(key) = &reply_key {
            let g = position(self.shard_of(key), &guards);
            if let Some((reply, expires)) = guards[g].1.replies.get(key) {
                if *expires > now {
                    return CheckOutcome {
                        deduplicated: true,
                        ..reply.clone()
                    };
                }
            }
        }

        let states: Vec<Option<State>> = request
            .rules
            .iter()
            .map(|rule| {
                let g = position(self.shard_of(&rule.key), &guards);
                match guards[g].1.buckets.get(&rule.key) {
                    Some((state, expires)) if *expires > now => Some(state.clone()),
                    _ => None,
                }
            })
            .collect();
        let inputs: Vec<RuleInput<'_>> = request
            .rules
            .iter()
            .map(|r| RuleInput {
                spec: &r.spec,
                cost: r.cost,
                shadow: r.shadow,
            })
            .collect();
        let state_refs: Vec<Option<&State>> = states.iter().map(Option::as_ref).collect();
        let result = model::check_all(&inputs, &state_refs, now);

        let writes = if request.dry_run {
            Vec::new()
        } else {
            result.writes
        };
        for (rule, write) in request.rules.iter().zip(writes) {
            if let Some((state, ttl)) = write {
                let g = position(self.shard_of(&rule.key), &guards);
                let ttl = i64::try_from(ttl).unwrap_or(i64::MAX);
                let shard = &mut guards[g].1;
                shard
                    .buckets
                    .insert(rule.key.clone(), (state, now.saturating_add(ttl)));
                shard.wrote(now);
            }
        }
        let outcome = CheckOutcome {
            allowed: result.allowed,
            decisions: result.decisions,
            deduplicated: false,
            now_ms: now,
        };
        if let Some(key) = reply_key {
            let g = position(self.shard_of(&key), &guards);
            let expires = now.saturating_add(REQUEST_ID_TTL.as_millis() as i64);
            let shard = &mut guards[g].1;
            shard.replies.insert(key, (outcome.clone(), expires));
            shard.wrote(now);
        }
        outcome
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
        self.shards.iter().map(|s| lock(s).sweep(now)).sum()
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
                let tenant = key
                    .split_once('{')
                    .and_then(|(_, rest)| rest.split_once('}'))
                    .map_or("", |(tenant, _)| tenant);
                match counts.get_mut(tenant) {
                    Some(n) => *n += 1,
                    None => {
                        counts.insert(tenant.to_owned(), 1);
                    }
                }
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
                shard.buckets.len() + shard.replies.len()
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
