//! The audit trail: who changed what, and when.

use app::audit::AuditFilter;
use serde::Serialize;

use super::{now_ms, with_exec, with_pool, Db, Exec, StoreError};

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
    exec: impl Into<Exec<'_>>,
    tenant_id: Option<&str>,
    actor: &str,
    action: &str,
    target: Option<&str>,
    detail: &serde_json::Value,
) -> Result<(), StoreError> {
    let sql = "INSERT INTO audit_events (tenant_id, actor, action, target, detail, at) VALUES ($1, $2, $3, $4, $5, $6)";
    with_exec!(exec.into(), conn => {
        sqlx::query(sql)
            .bind(tenant_id).bind(actor).bind(action).bind(target).bind(detail.to_string()).bind(now_ms())
            .execute(conn)
            .await?;
    });
    Ok(())
}

/// The newest events first, of one tenant or (`None`) of the whole platform, narrowed by
/// `filter` (actors containing a text in any case, an exact action, a time range, events
/// before an id); at most `limit`.
pub async fn list(
    db: &Db,
    tenant_id: Option<&str>,
    filter: &AuditFilter,
    limit: i64,
) -> Result<Vec<AuditEvent>, StoreError> {
    // Placeholders are numbered in the order their values are bound below.
    let mut conditions = Vec::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        format!("${n}")
    };
    if tenant_id.is_some() {
        conditions.push(format!("tenant_id = {}", next()));
    }
    if filter.actor.is_some() {
        conditions.push(format!("LOWER(actor) LIKE {} ESCAPE '!'", next()));
    }
    if filter.action.is_some() {
        conditions.push(format!("action = {}", next()));
    }
    if filter.since_ms.is_some() {
        conditions.push(format!("at >= {}", next()));
    }
    if filter.until_ms.is_some() {
        conditions.push(format!("at <= {}", next()));
    }
    if filter.before_id.is_some() {
        conditions.push(format!("id < {}", next()));
    }
    let limit_param = next();
    let where_clause = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    let sql = format!(
        "SELECT id, tenant_id, actor, action, target, detail, at FROM audit_events \
         {where_clause} ORDER BY id DESC LIMIT {limit_param}"
    );
    let events = with_pool!(db, pool => {
        let mut query = sqlx::query_as::<_, AuditEvent>(&sql);
        if let Some(t) = tenant_id {
            query = query.bind(t);
        }
        if let Some(actor) = &filter.actor {
            query = query.bind(contains_pattern(actor));
        }
        if let Some(action) = &filter.action {
            query = query.bind(action);
        }
        if let Some(since) = filter.since_ms {
            query = query.bind(since);
        }
        if let Some(until) = filter.until_ms {
            query = query.bind(until);
        }
        if let Some(before) = filter.before_id {
            query = query.bind(before);
        }
        query.bind(limit).fetch_all(pool).await?
    });
    Ok(events)
}

/// A `LIKE` pattern (escape character `!`, the same on both databases whatever their string
/// settings) matching text that contains `text`, lower-cased in ASCII (matched against
/// `LOWER(column)`, which SQLite folds in ASCII only: so in any ASCII case on both).
fn contains_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.to_ascii_lowercase().chars() {
        if matches!(c, '%' | '_' | '!') {
            pattern.push('!');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}
