//! Per-tenant quotas: how many rules and how many working keys a tenant may have, and how
//! many live buckets it may hold in the limiter. Operators set them
//! (`PUT /v1/admin/tenants/{tenant}/quotas`); a tenant's admins read them. Rules and keys
//! are counted inside the transaction that adds one, after the tenant's row is locked
//! ([`crate::store::tenants::lock`]), so concurrent requests cannot pass a quota together;
//! past one, the change is refused with 409 and a message that says what to do. Live
//! buckets are counted by the limiter itself (`lua/check.lua`, or the in-process twin): a
//! check that would create one past the quota is refused with 429. A new quota reaches
//! every instance with the tenant's next compile (within a second, like a rule change).

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{invalid, Actor, AdminService, Event, ServiceError};
use crate::propagation::Change;
use crate::store::{self, quotas::StoredQuotas};

/// The rules a tenant may have when an operator set no quota.
pub const DEFAULT_MAX_RULES: u64 = 100;
/// The working keys a tenant may hold when an operator set no quota.
pub const DEFAULT_MAX_KEYS: u64 = 50;
/// The largest quota of rules or keys an operator may set.
pub const MAX_QUOTA: u64 = 10_000;
/// The largest quota of live buckets an operator may set.
pub const MAX_LIVE_BUCKETS_QUOTA: u64 = 1_000_000_000;

/// A tenant's quotas in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Quotas {
    /// The most rules.
    pub max_rules: u64,
    /// The most keys that are neither revoked nor expired.
    pub max_keys: u64,
    /// The most buckets (and records of callers' request_ids) alive in the limiter at once.
    pub max_live_buckets: u64,
}

impl From<StoredQuotas> for Quotas {
    fn from(stored: StoredQuotas) -> Self {
        Self {
            max_rules: stored.max_rules.unwrap_or(DEFAULT_MAX_RULES),
            max_keys: stored.max_keys.unwrap_or(DEFAULT_MAX_KEYS),
            max_live_buckets: stored.live_buckets(),
        }
    }
}

/// New quotas; a field left out (or `null`) goes back to the default.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotasBody {
    #[serde(default)]
    pub max_rules: Option<u64>,
    #[serde(default)]
    pub max_keys: Option<u64>,
    #[serde(default)]
    pub max_live_buckets: Option<u64>,
}

/// Refuses a change that would pass `quota` (`count` is what exists now).
pub(super) fn within(count: u64, quota: u64, what: &str) -> Result<(), ServiceError> {
    if count >= quota {
        return Err(ServiceError::Conflict(format!(
            "the tenant has reached its quota of {quota} {what}; remove one first, or ask an \
             operator to raise the quota (PUT /v1/admin/tenants/{{tenant}}/quotas)"
        )));
    }
    Ok(())
}

impl AdminService {
    /// The quotas in force for a tenant (its admins and operators).
    pub async fn quotas(&self, actor: &Actor, tenant_id: &str) -> Result<Quotas, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        Ok(store::quotas::get(&self.db, tenant_id).await?.into())
    }

    /// Sets a tenant's quotas (operators only). Lowering one below what the tenant has
    /// removes nothing; it only refuses new rules or keys until the tenant is under it.
    pub async fn set_quotas(
        &self,
        actor: &Actor,
        tenant_id: &str,
        body: &QuotasBody,
    ) -> Result<Quotas, ServiceError> {
        actor.require_operator("set quotas")?;
        self.authorize(actor, tenant_id).await?;
        for (field, value, most) in [
            ("max_rules", body.max_rules, MAX_QUOTA),
            ("max_keys", body.max_keys, MAX_QUOTA),
            (
                "max_live_buckets",
                body.max_live_buckets,
                MAX_LIVE_BUCKETS_QUOTA,
            ),
        ] {
            if value.is_some_and(|v| v > most) {
                return Err(invalid(field, format!("must be at most {most}")));
            }
        }
        let stored = StoredQuotas {
            max_rules: body.max_rules,
            max_keys: body.max_keys,
            max_live_buckets: body.max_live_buckets,
        };
        let mut tx = self.db.begin().await?;
        store::quotas::set(&mut tx, tenant_id, stored).await?;
        let quotas = Quotas::from(stored);
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action: "tenant.quotas",
                target: Some(tenant_id),
                detail: json!(quotas),
            },
            [Change::Tenant {
                id: tenant_id.to_owned(),
            }],
        )
        .await?;
        Ok(quotas)
    }
}
