//! Per-subject overrides of a tenant's rules (`subject_overrides`).

use app::rules::{OverrideBody, OverrideInfo};

use super::{now_ms, with_exec, Exec, StoreError};

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    rule_id: String,
    subject: String,
    limit_count: i64,
    period_ms: Option<i64>,
    burst: Option<i64>,
    created_at: i64,
}

impl From<Row> for OverrideInfo {
    fn from(r: Row) -> Self {
        let to_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
        OverrideInfo {
            id: r.id,
            rule_id: r.rule_id,
            body: OverrideBody {
                subject: r.subject,
                limit: to_u64(r.limit_count),
                period_ms: r.period_ms.map(to_u64),
                burst: r.burst.map(to_u64),
            },
            created_at: r.created_at,
        }
    }
}

const COLUMNS: &str = "id, rule_id, subject, limit_count, period_ms, burst, created_at";

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Every override of a tenant's rules (to compile the tenant), by rule and subject.
pub async fn list(
    exec: impl Into<Exec<'_>>,
    tenant_id: &str,
) -> Result<Vec<OverrideInfo>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM subject_overrides WHERE tenant_id = $1 ORDER BY rule_id, subject"
    );
    let rows = with_exec!(exec.into(), conn => {
        sqlx::query_as::<_, Row>(&sql).bind(tenant_id).fetch_all(conn).await?
    });
    Ok(rows.into_iter().map(OverrideInfo::from).collect())
}

/// The overrides of one rule, by subject.
pub async fn list_for_rule(
    exec: impl Into<Exec<'_>>,
    tenant_id: &str,
    rule_id: &str,
) -> Result<Vec<OverrideInfo>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM subject_overrides WHERE tenant_id = $1 AND rule_id = $2 ORDER BY subject"
    );
    let rows = with_exec!(exec.into(), conn => {
        sqlx::query_as::<_, Row>(&sql).bind(tenant_id).bind(rule_id).fetch_all(conn).await?
    });
    Ok(rows.into_iter().map(OverrideInfo::from).collect())
}

/// Sets the override of `body.subject` on the rule: a new row, or `before` (the subject's
/// override, as the caller read it in the same transaction) replaced, its id kept.
pub async fn set(
    exec: impl Into<Exec<'_>>,
    tenant_id: &str,
    rule_id: &str,
    body: &OverrideBody,
    before: Option<&OverrideInfo>,
) -> Result<OverrideInfo, StoreError> {
    let now = now_ms();
    let id = before.map_or_else(|| uuid::Uuid::new_v4().to_string(), |o| o.id.clone());
    let sql = "INSERT INTO subject_overrides \
               (id, tenant_id, rule_id, subject, limit_count, period_ms, burst, created_at, updated_at) \
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) ON CONFLICT (rule_id, subject) DO UPDATE SET \
               limit_count = excluded.limit_count, period_ms = excluded.period_ms, \
               burst = excluded.burst, updated_at = excluded.updated_at";
    with_exec!(exec.into(), conn => {
        sqlx::query(sql)
            .bind(&id).bind(tenant_id).bind(rule_id).bind(&body.subject)
            .bind(to_i64(body.limit)).bind(body.period_ms.map(to_i64)).bind(body.burst.map(to_i64))
            .bind(now)
            .execute(conn)
            .await?;
    });
    Ok(OverrideInfo {
        id,
        rule_id: rule_id.to_owned(),
        body: body.clone(),
        created_at: before.map_or(now, |o| o.created_at),
    })
}

/// Deletes an override of the rule; the deleted one, or `None` when there was none.
pub async fn delete(
    exec: impl Into<Exec<'_>>,
    tenant_id: &str,
    rule_id: &str,
    id: &str,
) -> Result<Option<OverrideInfo>, StoreError> {
    let mut exec = exec.into();
    let Some(found) = list_for_rule(exec.reborrow(), tenant_id, rule_id)
        .await?
        .into_iter()
        .find(|o| o.id == id)
    else {
        return Ok(None);
    };
    let sql = "DELETE FROM subject_overrides WHERE id = $1 AND tenant_id = $2 AND rule_id = $3";
    with_exec!(exec.reborrow(), conn => {
        sqlx::query(sql).bind(id).bind(tenant_id).bind(rule_id).execute(conn).await?;
    });
    Ok(Some(found))
}
