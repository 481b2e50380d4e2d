//! The audit trail: who changed what, and when.

use serde::Serialize;

use super::{now_ms, with_pool, Db, StoreError};

/// One recorded change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct AuditEvent {
    pub id: i64,
    pub tenant_id: Option<String>,
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    /// JSON text with the details of the change.
    pub detail: String,
    pub at: i64,
}

/// Records an event now.
pub async fn record(
    db: &Db,
    tenant_id: Option<&str>,
    actor: &str,
    action: &str,
    target: Option<&str>,
    detail: &serde_json::Value,
) -> Result<(), StoreError> {
    let sql = "INSERT INTO audit_events (tenant_id, actor, action, target, detail, at) VALUES ($1, $2, $3, $4, $5, $6)";
    with_pool!(db, pool => {
        sqlx::query(sql)
            .bind(tenant_id).bind(actor).bind(action).bind(target).bind(detail.to_string()).bind(now_ms())
            .execute(pool)
            .await?;
    });
    Ok(())
}

/// The newest events first, of one tenant or (`None`) of the whole platform.
pub async fn list(
    db: &Db,
    tenant_id: Option<&str>,
    limit: i64,
) -> Result<Vec<AuditEvent>, StoreError> {
    let columns = "id, tenant_id, actor, action, target, detail, at";
    let events = with_pool!(db, pool => match tenant_id {
        Some(t) => {
            let sql = format!("SELECT {columns} FROM audit_events WHERE tenant_id = $1 ORDER BY id DESC LIMIT $2");
            sqlx::query_as::<_, AuditEvent>(&sql).bind(t).bind(limit).fetch_all(pool).await?
        }
        None => {
            let sql = format!("SELECT {columns} FROM audit_events ORDER BY id DESC LIMIT $1");
            sqlx::query_as::<_, AuditEvent>(&sql).bind(limit).fetch_all(pool).await?
        }
    });
    Ok(events)
}
