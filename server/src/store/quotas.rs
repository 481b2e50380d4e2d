//! Per-tenant quotas as operators set them: `None` means the instance's default.

use super::{now_ms, with_exec, Exec, StoreError};

/// The live buckets (and records of callers' request_ids) a tenant may hold in the limiter
/// when an operator set no quota. Here rather than with the other defaults in
/// `admin::quotas` because the decision core reads it when it compiles a tenant.
pub const DEFAULT_MAX_LIVE_BUCKETS: u64 = 1_000_000;

/// A tenant's quotas as stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredQuotas {
    pub max_rules: Option<u64>,
    pub max_keys: Option<u64>,
    pub max_live_buckets: Option<u64>,
}

impl StoredQuotas {
    /// The quota of live buckets in force.
    pub fn live_buckets(&self) -> u64 {
        self.max_live_buckets.unwrap_or(DEFAULT_MAX_LIVE_BUCKETS)
    }
}

fn to_u64(v: Option<i64>) -> Option<u64> {
    v.and_then(|v| u64::try_from(v).ok())
}

fn to_i64(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// The quotas of `tenant_id` (all `None` when none were set).
pub async fn get(exec: impl Into<Exec<'_>>, tenant_id: &str) -> Result<StoredQuotas, StoreError> {
    // PostgreSQL keeps the first two as INTEGER: read every quota as a BIGINT on both stores.
    let sql = "SELECT CAST(max_rules AS BIGINT), CAST(max_keys AS BIGINT), \
               CAST(max_live_buckets AS BIGINT) FROM tenant_quotas WHERE tenant_id = $1";
    let row: Option<(Option<i64>, Option<i64>, Option<i64>)> = with_exec!(exec.into(), conn => {
        sqlx::query_as(sql).bind(tenant_id).fetch_optional(conn).await?
    });
    Ok(
        row.map_or_else(StoredQuotas::default, |(rules, keys, buckets)| {
            StoredQuotas {
                max_rules: to_u64(rules),
                max_keys: to_u64(keys),
                max_live_buckets: to_u64(buckets),
            }
        }),
    )
}

/// Replaces the quotas of `tenant_id`.
pub async fn set(
    exec: impl Into<Exec<'_>>,
    tenant_id: &str,
    quotas: StoredQuotas,
) -> Result<(), StoreError> {
    let sql = "INSERT INTO tenant_quotas \
               (tenant_id, max_rules, max_keys, max_live_buckets, updated_at) \
               VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id) DO UPDATE SET \
               max_rules = excluded.max_rules, max_keys = excluded.max_keys, \
               max_live_buckets = excluded.max_live_buckets, updated_at = excluded.updated_at";
    with_exec!(exec.into(), conn => {
        sqlx::query(sql)
            .bind(tenant_id)
            .bind(to_i64(quotas.max_rules))
            .bind(to_i64(quotas.max_keys))
            .bind(to_i64(quotas.max_live_buckets))
            .bind(now_ms())
            .execute(conn)
            .await?;
    });
    Ok(())
}
