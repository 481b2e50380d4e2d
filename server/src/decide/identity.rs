//! Who is calling: a presented API key, hashed and looked up through the key cache; and the
//! caller's tenant, compiled, through the tenant cache. On the steady path both are cache
//! hits and no SQL runs. When the database is down, cached entries keep serving and only
//! misses fail, with 503 rather than 401. Transports only find the key in their protocol
//! (a header, gRPC metadata) and hand it here.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use app::keys::{is_well_formed, HexDigest, KeyKind};

use super::error::DecideError;
use super::tenant::CompiledTenant;
use crate::cache::{CachedKey, Caches, Loads, Lookup};
use crate::hashing::FastSet;
use crate::store::{self, Db};
use crate::telemetry::Metrics;

/// Key ids seen since the last flush; `last_used_at` is written in batches, off the check path.
#[derive(Debug, Clone, Default)]
pub struct UsageRecorder(Arc<Mutex<FastSet<String>>>);

impl UsageRecorder {
    pub fn record(&self, key_id: &str) {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !seen.contains(key_id) {
            seen.insert(key_id.to_owned());
        }
    }

    fn take(&self) -> Vec<String> {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.drain().collect()
    }

    /// Writes the recorded ids every `every`, until the process ends.
    pub fn spawn_flusher(self, db: Db, every: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let ids = self.take();
                if ids.is_empty() {
                    continue;
                }
                if let Err(e) = store::keys::touch(&db, &ids, store::now_ms()).await {
                    tracing::warn!(error = %e, keys = ids.len(), "could not record key usage; will retry");
                    let mut seen = self
                        .0
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    seen.extend(ids);
                }
            }
        })
    }
}

/// The key and tenant lookups of the check path and the admin API.
#[derive(Debug, Clone)]
pub struct Identities {
    pub db: Db,
    pub caches: Caches<CompiledTenant>,
    pub metrics: Metrics,
    pub usage: UsageRecorder,
    /// One load per key or tenant at a time.
    pub loads: Arc<Loads>,
}

impl Identities {
    /// The live key presented (`raw`, as the transport found it), or 401 (503 when the
    /// database is needed and down).
    pub async fn key(&self, raw: Option<&str>) -> Result<Arc<CachedKey>, DecideError> {
        let raw = raw
            .filter(|k| !k.is_empty())
            .ok_or(DecideError::Unauthorized)?;
        // Anything not shaped like a key (a kind prefix and 64 hex digits) is refused before
        // any cache or database lookup.
        if !is_well_formed(raw) {
            return Err(DecideError::Unauthorized);
        }
        let digest = HexDigest::of(raw);
        let hash = digest.as_str();
        let key = match self.caches.key(hash) {
            Lookup::Fresh(key) => {
                self.metrics.cache("key", "hit");
                key
            }
            Lookup::Absent => {
                self.metrics.cache("key", "absent");
                return Err(DecideError::Unauthorized);
            }
            Lookup::Stale(key) => {
                self.metrics.cache("key", "stale");
                let generation = self.caches.generation();
                match self.load_key(hash).await {
                    Ok(found) => found.ok_or(DecideError::Unauthorized)?,
                    Err(e) if e.is_transient() => {
                        // Serve the stale entry, and wait a refresh period before asking the
                        // store again rather than on every request.
                        self.caches.put_key(hash, key.clone(), generation);
                        key
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Lookup::Miss => {
                self.metrics.cache("key", "miss");
                self.load_key(hash)
                    .await?
                    .ok_or(DecideError::Unauthorized)?
            }
        };
        if !key.is_live(store::now_ms()) {
            return Err(DecideError::Unauthorized);
        }
        self.usage.record(&key.id);
        Ok(key)
    }

    async fn load_key(&self, hash: &str) -> Result<Option<Arc<CachedKey>>, store::StoreError> {
        let _turn = self.loads.turn(&format!("key:{hash}")).await;
        // A load that ran while this one waited has filled the cache.
        match self.caches.key(hash) {
            Lookup::Fresh(key) => return Ok(Some(key)),
            Lookup::Absent => return Ok(None),
            Lookup::Stale(_) | Lookup::Miss => {}
        }
        self.metrics.cache_load("key");
        let generation = self.caches.generation();
        match store::keys::find_by_hash(&self.db, hash).await? {
            Some(key) => {
                let cached = Arc::new(CachedKey::from(&key));
                self.caches.put_key(hash, cached.clone(), generation);
                Ok(Some(cached))
            }
            None => {
                self.caches.put_unknown_key(hash, generation);
                Ok(None)
            }
        }
    }

    /// A check key's tenant, which must be active: the identity every check transport needs.
    /// An admin or operator key is 403, a suspended tenant 403.
    pub async fn check_tenant(&self, key: &CachedKey) -> Result<Arc<CompiledTenant>, DecideError> {
        if key.kind != Some(KeyKind::Check) {
            return Err(DecideError::Forbidden(
                "only check keys may call /v1/check; admin and operator keys are for /v1/admin"
                    .into(),
            ));
        }
        let tenant_id = key.tenant_id.as_deref().ok_or(DecideError::Unauthorized)?;
        let tenant = self.tenant(tenant_id).await?;
        if !tenant.is_active() {
            return Err(DecideError::Forbidden(
                "this tenant is suspended; its keys cannot be used".into(),
            ));
        }
        Ok(tenant)
    }

    /// A tenant's status and compiled rules.
    pub async fn tenant(&self, tenant_id: &str) -> Result<Arc<CompiledTenant>, DecideError> {
        match self.caches.tenant(tenant_id) {
            Lookup::Fresh(t) => {
                self.metrics.cache("tenant", "hit");
                Ok(t)
            }
            Lookup::Stale(t) => {
                self.metrics.cache("tenant", "stale");
                let generation = self.caches.generation();
                match self.load_tenant(tenant_id).await {
                    Ok(Some(fresh)) => Ok(fresh),
                    Ok(None) => Err(DecideError::Unauthorized),
                    Err(e) if e.is_transient() => {
                        self.caches.put_tenant(tenant_id, t.clone(), generation);
                        Ok(t)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Lookup::Absent | Lookup::Miss => {
                self.metrics.cache("tenant", "miss");
                self.load_tenant(tenant_id)
                    .await?
                    .ok_or(DecideError::Unauthorized)
            }
        }
    }

    async fn load_tenant(
        &self,
        tenant_id: &str,
    ) -> Result<Option<Arc<CompiledTenant>>, store::StoreError> {
        let _turn = self.loads.turn(&format!("tenant:{tenant_id}")).await;
        if let Lookup::Fresh(t) = self.caches.tenant(tenant_id) {
            return Ok(Some(t));
        }
        self.metrics.cache_load("tenant");
        let generation = self.caches.generation();
        let Some(tenant) = store::tenants::get(&self.db, tenant_id).await? else {
            return Ok(None);
        };
        let rules = store::rules::list(&self.db, tenant_id).await?;
        let quotas = store::quotas::get(&self.db, tenant_id).await?;
        let overrides = store::overrides::list(&self.db, tenant_id).await?;
        let compiled = Arc::new(
            CompiledTenant::compile(tenant, rules)
                .with_overrides(overrides)
                .with_live_bucket_quota(quotas.live_buckets()),
        );
        self.caches
            .put_tenant(tenant_id, compiled.clone(), generation);
        Ok(Some(compiled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_lower_case_hex_sha256() {
        let expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(HexDigest::of("abc").as_str(), expected);
        assert_eq!(app::keys::sha256_hex("abc"), expected);
    }
}
