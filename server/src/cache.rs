//! The check path's caches: keys by hash (with a bounded negative cache, so a flood of random
//! keys cannot hammer the database) and each tenant as the decision core compiled it
//! ([`crate::decide::CompiledTenant`], a type parameter here).
//!
//! Entries are dropped when an admin change is announced on the [`crate::propagation`] bus;
//! a time-based refresh is only a safety net. When the database is down a stale entry keeps
//! serving: [`Lookup::Stale`] tells the caller to try a reload and fall back to it.
//!
//! After a lost subscription to admin changes, [`Caches::mark_stale`] makes every entry stale
//! rather than dropping it: each is reloaded on its next use, and while the database cannot
//! answer it keeps serving, so a Redis blip does not send every key and tenant to the database
//! at once. [`Loads`] lets one load per key or tenant run at a time; the others wait for it and
//! read its result from the cache.
//!
//! Every drop or clear bumps a generation counter. A loader reads the generation before it
//! queries the store and stores its result only if no drop happened meanwhile, so a row read
//! just before a revocation cannot be cached after the revocation was announced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use app::keys::KeyKind;

use crate::hashing::FastMap;
use crate::store::keys::ApiKey;

/// After this long an entry is reloaded (if the database answers).
pub const REFRESH_AFTER: Duration = Duration::from_secs(60);
/// How long an unknown key is remembered as unknown.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(10);
/// At most this many keys are cached; past it the least recently used one makes room.
pub const MAX_KEYS: usize = 100_000;
/// At most this many unknown hashes are remembered.
pub const MAX_NEGATIVE: usize = 10_000;
/// At most this many tenants are cached (the least recently used one makes room).
pub const MAX_TENANTS: usize = 10_000;

/// What the check path needs to know about a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedKey {
    pub id: String,
    pub tenant_id: Option<String>,
    pub kind: Option<KeyKind>,
    pub prefix: String,
    pub expires_at: Option<i64>,
    pub revoked: bool,
}

impl From<&ApiKey> for CachedKey {
    fn from(key: &ApiKey) -> Self {
        Self {
            id: key.id.clone(),
            tenant_id: key.tenant_id.clone(),
            kind: key.kind(),
            prefix: key.prefix.clone(),
            expires_at: key.expires_at,
            revoked: key.revoked_at.is_some(),
        }
    }
}

impl CachedKey {
    pub fn is_live(&self, now_ms: i64) -> bool {
        !self.revoked && self.expires_at.is_none_or(|at| at > now_ms)
    }
}

/// A cache lookup.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<T> {
    Fresh(T),
    /// Older than [`REFRESH_AFTER`]: reload, and use this if the database does not answer.
    Stale(T),
    /// Known not to exist (keys only).
    Absent,
    Miss,
}

struct Entry<T> {
    value: T,
    loaded: Instant,
    /// When it was last looked up, in milliseconds since the caches were made.
    used: AtomicU64,
}

/// Removes the least recently used entry of a full map (one scan, only when a new entry
/// needs the room: a miss, which costs a database query anyway).
fn evict_least_recently_used<V, S: std::hash::BuildHasher>(map: &mut HashMap<String, Entry<V>, S>) {
    let oldest = map
        .iter()
        .min_by_key(|(_, entry)| entry.used.load(Ordering::Relaxed))
        .map(|(id, _)| id.clone());
    if let Some(id) = oldest {
        map.remove(&id);
    }
}

/// The caches of one instance. Cloning shares them. `T` is what a tenant is cached as (the
/// decision core's compiled tenant); this module does not look inside it.
pub struct Caches<T> {
    /// The origin of the entries' `used` times.
    epoch: Instant,
    refresh_after: Duration,
    negative_ttl: Duration,
    generation: Arc<AtomicU64>,
    // Keyed by the digests of what clients present: SipHash (`crate::hashing`).
    keys: Arc<RwLock<HashMap<String, Entry<Arc<CachedKey>>>>>,
    unknown: Arc<RwLock<HashMap<String, Instant>>>,
    tenants: Arc<RwLock<FastMap<String, Entry<Arc<T>>>>>,
}

impl<T> Clone for Caches<T> {
    fn clone(&self) -> Self {
        Self {
            epoch: self.epoch,
            refresh_after: self.refresh_after,
            negative_ttl: self.negative_ttl,
            generation: self.generation.clone(),
            keys: self.keys.clone(),
            unknown: self.unknown.clone(),
            tenants: self.tenants.clone(),
        }
    }
}

impl<T> Default for Caches<T> {
    fn default() -> Self {
        Self::with_times(REFRESH_AFTER, NEGATIVE_TTL)
    }
}

impl<T> Caches<T> {
    /// Caches whose entries turn stale after `refresh_after` and whose unknown keys are
    /// forgotten after `negative_ttl` ([`REFRESH_AFTER`] and [`NEGATIVE_TTL`] by default).
    pub fn with_times(refresh_after: Duration, negative_ttl: Duration) -> Self {
        Self {
            epoch: Instant::now(),
            refresh_after,
            negative_ttl,
            generation: Arc::default(),
            keys: Arc::default(),
            unknown: Arc::default(),
            tenants: Arc::default(),
        }
    }
}

impl<T> std::fmt::Debug for Caches<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches").finish_non_exhaustive()
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<T> Caches<T> {
    /// Now, as an entry's `used` time.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn fresh_entry<V>(&self, value: V) -> Entry<V> {
        Entry {
            value,
            loaded: Instant::now(),
            used: AtomicU64::new(self.now_ms()),
        }
    }

    pub fn key(&self, hash: &str) -> Lookup<Arc<CachedKey>> {
        if let Some(entry) = read(&self.keys).get(hash) {
            entry.used.store(self.now_ms(), Ordering::Relaxed);
            let value = entry.value.clone();
            return if entry.loaded.elapsed() < self.refresh_after {
                Lookup::Fresh(value)
            } else {
                Lookup::Stale(value)
            };
        }
        match read(&self.unknown).get(hash) {
            Some(at) if at.elapsed() < self.negative_ttl => Lookup::Absent,
            _ => Lookup::Miss,
        }
    }

    /// The current generation; pass it back to the `put_*` calls of a load.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Caches a key loaded at `generation`; false (and nothing stored) if a drop happened
    /// since. Locks are always taken in the order keys, tenants, unknown.
    pub fn put_key(&self, hash: &str, key: Arc<CachedKey>, generation: u64) -> bool {
        let mut keys = write(&self.keys);
        if self.generation() != generation {
            return false;
        }
        if keys.len() >= MAX_KEYS && !keys.contains_key(hash) {
            evict_least_recently_used(&mut keys);
        }
        keys.insert(hash.to_owned(), self.fresh_entry(key));
        write(&self.unknown).remove(hash);
        true
    }

    /// Remembers that no key has this hash, unless a drop happened since `generation`.
    pub fn put_unknown_key(&self, hash: &str, generation: u64) {
        let _keys = write(&self.keys);
        if self.generation() != generation {
            return;
        }
        let mut unknown = write(&self.unknown);
        if unknown.len() >= MAX_NEGATIVE {
            let ttl = self.negative_ttl;
            unknown.retain(|_, at| at.elapsed() < ttl);
            if unknown.len() >= MAX_NEGATIVE {
                unknown.clear();
            }
        }
        unknown.insert(hash.to_owned(), Instant::now());
    }

    pub fn tenant(&self, tenant_id: &str) -> Lookup<Arc<T>> {
        let tenants = read(&self.tenants);
        let Some(e) = tenants.get(tenant_id) else {
            return Lookup::Miss;
        };
        e.used.store(self.now_ms(), Ordering::Relaxed);
        if e.loaded.elapsed() < self.refresh_after {
            Lookup::Fresh(e.value.clone())
        } else {
            Lookup::Stale(e.value.clone())
        }
    }

    /// Caches tenant `tenant_id` loaded at `generation`, unless a drop happened since.
    pub fn put_tenant(&self, tenant_id: &str, compiled: Arc<T>, generation: u64) {
        let mut tenants = write(&self.tenants);
        if self.generation() != generation {
            return;
        }
        if tenants.len() >= MAX_TENANTS && !tenants.contains_key(tenant_id) {
            evict_least_recently_used(&mut tenants);
        }
        tenants.insert(tenant_id.to_owned(), self.fresh_entry(compiled));
    }

    /// Forgets a key, known or unknown (a key created with this hash must be found next).
    pub fn drop_key(&self, hash: &str) {
        let mut keys = write(&self.keys);
        self.generation.fetch_add(1, Ordering::SeqCst);
        keys.remove(hash);
        write(&self.unknown).remove(hash);
    }

    pub fn drop_tenant(&self, tenant_id: &str) {
        let mut tenants = write(&self.tenants);
        self.generation.fetch_add(1, Ordering::SeqCst);
        tenants.remove(tenant_id);
    }

    /// Makes every entry stale (reloaded on its next use, served while the store is down)
    /// and forgets the unknown keys: changes may have been missed.
    pub fn mark_stale(&self) {
        let mut keys = write(&self.keys);
        let mut tenants = write(&self.tenants);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let long_ago = Instant::now()
            .checked_sub(self.refresh_after)
            .unwrap_or_else(Instant::now);
        for entry in keys.values_mut() {
            entry.loaded = entry.loaded.min(long_ago);
        }
        for entry in tenants.values_mut() {
            entry.loaded = entry.loaded.min(long_ago);
        }
        write(&self.unknown).clear();
    }

    pub fn clear(&self) {
        let mut keys = write(&self.keys);
        let mut tenants = write(&self.tenants);
        self.generation.fetch_add(1, Ordering::SeqCst);
        keys.clear();
        tenants.clear();
        write(&self.unknown).clear();
    }
}

/// One load at a time per key or tenant: a caller takes its turn, then looks in the cache
/// again before going to the store, so concurrent misses of the same id cost one query.
#[derive(Debug, Default)]
pub struct Loads {
    gates: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A caller's turn to load one id; the next caller's turn starts when it is dropped.
#[derive(Debug)]
pub struct Turn<'a> {
    loads: &'a Loads,
    id: String,
    gate: Arc<tokio::sync::Mutex<()>>,
    _held: tokio::sync::OwnedMutexGuard<()>,
}

impl Loads {
    fn gates(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for the turn to load `id`.
    pub async fn turn(&self, id: &str) -> Turn<'_> {
        let gate = self.gates().entry(id.to_owned()).or_default().clone();
        let held = gate.clone().lock_owned().await;
        Turn {
            loads: self,
            id: id.to_owned(),
            gate,
            _held: held,
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut gates = self.loads.gates();
        // The map, this turn and its guard hold the gate: nobody else waits, forget it.
        if Arc::strong_count(&self.gate) <= 3 {
            gates.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> Arc<CachedKey> {
        Arc::new(CachedKey {
            id: id.into(),
            tenant_id: None,
            kind: None,
            prefix: String::new(),
            expires_at: None,
            revoked: false,
        })
    }

    #[test]
    fn a_full_key_cache_makes_room_by_dropping_the_least_recently_used_key_only() {
        let caches = Caches::<()>::default();
        let generation = caches.generation();
        for i in 0..MAX_KEYS {
            assert!(caches.put_key(&format!("h{i}"), key(&format!("k{i}")), generation));
        }
        // Used after the others were cached: the most recent use.
        std::thread::sleep(Duration::from_millis(2));
        assert!(matches!(caches.key("h0"), Lookup::Fresh(_)));
        assert!(caches.put_key("new", key("new"), generation));
        let keys = read(&caches.keys);
        assert_eq!(keys.len(), MAX_KEYS, "one entry made room, no more");
        assert!(keys.contains_key("h0"), "the recently used key stays");
        assert!(keys.contains_key("new"));
    }

    #[test]
    fn a_full_tenant_cache_drops_one_tenant_not_all() {
        let caches = Caches::<u8>::default();
        let generation = caches.generation();
        for i in 0..MAX_TENANTS {
            caches.put_tenant(&format!("t{i}"), Arc::new(0), generation);
        }
        std::thread::sleep(Duration::from_millis(2));
        assert!(matches!(caches.tenant("t0"), Lookup::Fresh(_)));
        caches.put_tenant("new", Arc::new(1), generation);
        let tenants = read(&caches.tenants);
        assert_eq!(tenants.len(), MAX_TENANTS);
        assert!(tenants.contains_key("t0") && tenants.contains_key("new"));
    }

    #[test]
    fn a_load_that_raced_a_drop_is_not_cached() {
        let caches = Caches::<()>::default();
        let before = caches.generation();
        // A revocation is announced while the row is being read...
        caches.drop_key("h");
        // ... so the row read before it must not land in the cache.
        assert!(!caches.put_key("h", key("k"), before));
        assert_eq!(caches.key("h"), Lookup::Miss);
        assert!(caches.put_key("h", key("k"), caches.generation()));
        assert!(matches!(caches.key("h"), Lookup::Fresh(_)));
    }

    #[test]
    fn an_entry_turns_stale_after_the_refresh_interval() {
        let caches = Caches::<u8>::with_times(Duration::from_millis(30), NEGATIVE_TTL);
        assert!(caches.put_key("h", key("k"), caches.generation()));
        caches.put_tenant("t", Arc::new(1), caches.generation());
        assert!(matches!(caches.key("h"), Lookup::Fresh(_)));
        assert!(matches!(caches.tenant("t"), Lookup::Fresh(_)));
        std::thread::sleep(Duration::from_millis(40));
        assert!(matches!(caches.key("h"), Lookup::Stale(_)));
        assert!(matches!(caches.tenant("t"), Lookup::Stale(_)));
        // A reload (or a stale entry re-stamped while the store is down) is fresh again.
        assert!(caches.put_key("h", key("k"), caches.generation()));
        assert!(matches!(caches.key("h"), Lookup::Fresh(_)));
    }

    #[test]
    fn an_unknown_key_is_forgotten_after_the_negative_ttl() {
        let caches = Caches::<()>::with_times(REFRESH_AFTER, Duration::from_millis(30));
        caches.put_unknown_key("u", caches.generation());
        assert_eq!(caches.key("u"), Lookup::Absent);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(caches.key("u"), Lookup::Miss, "asked of the store again");
    }

    #[test]
    fn a_lost_subscription_makes_entries_stale_not_gone() {
        let caches = Caches::<()>::default();
        assert!(caches.put_key("h", key("k"), caches.generation()));
        caches.put_unknown_key("u", caches.generation());
        let before = caches.generation();
        caches.mark_stale();
        assert!(matches!(caches.key("h"), Lookup::Stale(_)));
        assert_eq!(caches.key("u"), Lookup::Miss);
        assert_ne!(caches.generation(), before, "loads in flight do not store");
    }

    #[tokio::test]
    async fn one_load_per_id_at_a_time() {
        let loads = Arc::new(Loads::default());
        let first = loads.turn("a").await;
        let waiting = {
            let loads = loads.clone();
            tokio::spawn(async move {
                let _turn = loads.turn("a").await;
            })
        };
        // Another id is not held up.
        drop(loads.turn("b").await);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the second load of a waits");
        drop(first);
        waiting.await.unwrap();
        assert!(loads.gates().is_empty(), "gates are forgotten once idle");
    }

    #[test]
    fn unknown_keys_are_remembered_briefly_and_boundedly() {
        let caches = Caches::<()>::default();
        assert_eq!(caches.key("h"), Lookup::Miss);
        caches.put_unknown_key("h", caches.generation());
        assert_eq!(caches.key("h"), Lookup::Absent);
        for i in 0..MAX_NEGATIVE + 10 {
            caches.put_unknown_key(&format!("x{i}"), caches.generation());
        }
        assert!(read(&caches.unknown).len() <= MAX_NEGATIVE);
        caches.drop_key("h");
        assert_eq!(caches.key("h"), Lookup::Miss);
    }
}
