//! Who is calling: the API key from `X-API-Key` or `Authorization: Bearer`, hashed and looked
//! up through the key cache; and the caller's tenant, through the tenant cache. On the steady
//! path both are cache hits and no SQL runs. When the database is down, cached entries keep
//! serving and only misses fail, with 503 rather than 401.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;

use crate::cache::{CachedKey, Caches, CompiledTenant, Lookup};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::store::{self, Db};

/// The raw key of a request, if it sent one.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim());
    }
    let auth = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = auth.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Lower-case hex SHA-256, the form keys are stored in: the console computes the same
/// function in the browser.
pub use app::keys::sha256_hex;

/// Key ids seen since the last flush; `last_used_at` is written in batches, off the check path.
#[derive(Debug, Clone, Default)]
pub struct UsageRecorder(Arc<Mutex<HashSet<String>>>);

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

/// The key lookups of the check path and the admin API.
#[derive(Debug, Clone)]
pub struct Authenticator {
    pub db: Db,
    pub caches: Caches,
    pub metrics: Metrics,
    pub usage: UsageRecorder,
}

impl Authenticator {
    /// The live key the request presents, or 401 (503 when the database is needed and down).
    pub async fn key(&self, headers: &HeaderMap) -> Result<CachedKey, ApiError> {
        let raw = presented_key(headers)
            .filter(|k| !k.is_empty())
            .ok_or(ApiError::Unauthorized)?;
        let hash = sha256_hex(raw);
        let key = match self.caches.key(&hash) {
            Lookup::Fresh(key) => {
                self.metrics.cache("key", "hit");
                key
            }
            Lookup::Absent => {
                self.metrics.cache("key", "absent");
                return Err(ApiError::Unauthorized);
            }
            Lookup::Stale(key) => {
                self.metrics.cache("key", "stale");
                let generation = self.caches.generation();
                match self.load_key(&hash).await {
                    Ok(found) => found.ok_or(ApiError::Unauthorized)?,
                    Err(e) if e.is_transient() => {
                        // Serve the stale entry, and wait a refresh period before asking the
                        // store again rather than on every request.
                        self.caches.put_key(&hash, key.clone(), generation);
                        key
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Lookup::Miss => {
                self.metrics.cache("key", "miss");
                self.load_key(&hash).await?.ok_or(ApiError::Unauthorized)?
            }
        };
        if !key.is_live(store::now_ms()) {
            return Err(ApiError::Unauthorized);
        }
        self.usage.record(&key.id);
        Ok(key)
    }

    async fn load_key(&self, hash: &str) -> Result<Option<CachedKey>, store::StoreError> {
        let generation = self.caches.generation();
        match store::keys::find_by_hash(&self.db, hash).await? {
            Some(key) => {
                let cached = CachedKey::from(&key);
                self.caches.put_key(hash, cached.clone(), generation);
                Ok(Some(cached))
            }
            None => {
                self.caches.put_unknown_key(hash, generation);
                Ok(None)
            }
        }
    }

    /// A tenant's status and compiled rules.
    pub async fn tenant(&self, tenant_id: &str) -> Result<Arc<CompiledTenant>, ApiError> {
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
                    Ok(None) => Err(ApiError::Unauthorized),
                    Err(e) if e.is_transient() => {
                        self.caches.put_tenant(t.clone(), generation);
                        Ok(t)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Lookup::Absent | Lookup::Miss => {
                self.metrics.cache("tenant", "miss");
                self.load_tenant(tenant_id)
                    .await?
                    .ok_or(ApiError::Unauthorized)
            }
        }
    }

    async fn load_tenant(
        &self,
        tenant_id: &str,
    ) -> Result<Option<Arc<CompiledTenant>>, store::StoreError> {
        let generation = self.caches.generation();
        let Some(tenant) = store::tenants::get(&self.db, tenant_id).await? else {
            return Ok(None);
        };
        let rules = store::rules::list(&self.db, tenant_id).await?;
        let compiled = Arc::new(CompiledTenant::compile(tenant, rules));
        self.caches.put_tenant(compiled.clone(), generation);
        Ok(Some(compiled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_either_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(presented_key(&headers), None);
        headers.insert("authorization", "Bearer sl_chk_abc".parse().unwrap());
        assert_eq!(presented_key(&headers), Some("sl_chk_abc"));
        headers.insert("x-api-key", "sl_chk_def".parse().unwrap());
        assert_eq!(presented_key(&headers), Some("sl_chk_def"));
        let mut basic = HeaderMap::new();
        basic.insert("authorization", "Basic xyz".parse().unwrap());
        assert_eq!(presented_key(&basic), None);
    }

    #[test]
    fn hashes_are_lower_case_hex_sha256() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
