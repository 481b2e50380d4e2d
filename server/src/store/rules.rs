//! A tenant's rules.

use app::rules::{FailureMode, MatchKind, RuleBody, Scope};
use serde::Serialize;

use super::{conflict_as, now_ms, with_exec, Db, Exec, StoreError};

/// A stored rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    pub id: String,
    pub tenant_id: String,
    #[serde(flatten)]
    pub body: RuleBody,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    tenant_id: String,
    name: String,
    match_kind: String,
    route: Option<String>,
    descriptor: Option<String>,
    scope: String,
    algorithm: String,
    limit_count: i64,
    period_ms: i64,
    burst: Option<i64>,
    penalty: bool,
    failure_mode: String,
    shadow: bool,
    enabled: bool,
    allow_override: bool,
    created_at: i64,
    updated_at: i64,
}

fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::Corrupt(format!("rules.{what} = {value:?}"))
}

impl TryFrom<Row> for Rule {
    type Error = StoreError;

    fn try_from(r: Row) -> Result<Self, StoreError> {
        let match_kind = match r.match_kind.as_str() {
            "exact" => MatchKind::Exact,
            "prefix" => MatchKind::Prefix,
            "default" => MatchKind::Default,
            "all" => MatchKind::All,
            "descriptor" => MatchKind::Descriptor,
            other => return Err(corrupt("match_kind", other)),
        };
        let scope = match r.scope.as_str() {
            "tenant" => Scope::Tenant,
            "subject" => Scope::Subject,
            other => return Err(corrupt("scope", other)),
        };
        let failure_mode = match r.failure_mode.as_str() {
            "closed" => FailureMode::Closed,
            "open" => FailureMode::Open,
            "local" => FailureMode::Local,
            other => return Err(corrupt("failure_mode", other)),
        };
        let algorithm = r
            .algorithm
            .parse()
            .map_err(|_| corrupt("algorithm", &r.algorithm))?;
        let descriptor = r
            .descriptor
            .map(|d| serde_json::from_str(&d).map_err(|_| corrupt("descriptor", &d)))
            .transpose()?;
        let unsigned =
            |what: &str, v: i64| u64::try_from(v).map_err(|_| corrupt(what, &v.to_string()));
        Ok(Rule {
            id: r.id,
            tenant_id: r.tenant_id,
            body: RuleBody {
                name: r.name,
                match_kind,
                route: r.route,
                descriptor,
                scope,
                algorithm,
                limit: unsigned("limit_count", r.limit_count)?,
                period_ms: unsigned("period_ms", r.period_ms)?,
                burst: r.burst.map(|b| unsigned("burst", b)).transpose()?,
                penalty: r.penalty,
                failure_mode,
                shadow: r.shadow,
                enabled: r.enabled,
                allow_override: r.allow_override,
            },
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

const COLUMNS: &str =
    "id, tenant_id, name, match_kind, route, scope, algorithm, limit_count, period_ms, \
                       burst, penalty, failure_mode, shadow, enabled, created_at, updated_at, descriptor, allow_override";

/// A descriptor rule's entries as the `descriptor` column holds them (JSON), or NULL.
fn descriptor_column(body: &RuleBody) -> Option<String> {
    body.descriptor
        .as_ref()
        .map(|entries| serde_json::to_string(entries).unwrap_or_default())
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Stores a new (already validated) rule. A duplicate name in the tenant is a conflict.
pub async fn insert(
    exec: impl Into<Exec<'_>>,
    tenant_id: &str,
    body: &RuleBody,
) -> Result<Rule, StoreError> {
    let now = now_ms();
    let rule = Rule {
        id: uuid::Uuid::new_v4().to_string(),
        tenant_id: tenant_id.to_owned(),
        body: body.clone(),
        created_at: now,
        updated_at: now,
    };
    let sql = format!(
        "INSERT INTO rules ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
    );
    with_exec!(exec.into(), conn => {
        sqlx::query(&sql)
            .bind(&rule.id).bind(tenant_id).bind(&body.name).bind(body.match_kind.as_str())
            .bind(&body.route).bind(body.scope.as_str()).bind(body.algorithm.as_str())
            .bind(to_i64(body.limit)).bind(to_i64(body.period_ms)).bind(body.burst.map(to_i64))
            .bind(body.penalty).bind(body.failure_mode.as_str()).bind(body.shadow).bind(body.enabled)
            .bind(now).bind(now).bind(descriptor_column(body)).bind(body.allow_override)
            .execute(conn)
            .await
            .map_err(conflict_as("a rule with this name"))?;
    });
    Ok(rule)
}

/// Replaces a rule; `None` when the tenant has no such rule.
pub async fn update(
    exec: impl Into<Exec<'_>>,
    tenant_id: &str,
    id: &str,
    body: &RuleBody,
) -> Result<Option<Rule>, StoreError> {
    let now = now_ms();
    let sql = "UPDATE rules SET name = $1, match_kind = $2, route = $3, scope = $4, algorithm = $5, \
               limit_count = $6, period_ms = $7, burst = $8, penalty = $9, failure_mode = $10, shadow = $11, \
               enabled = $12, updated_at = $13, descriptor = $16, allow_override = $17 WHERE id = $14 AND tenant_id = $15";
    let mut exec = exec.into();
    let affected = with_exec!(exec.reborrow(), conn => {
        sqlx::query(sql)
            .bind(&body.name).bind(body.match_kind.as_str()).bind(&body.route).bind(body.scope.as_str())
            .bind(body.algorithm.as_str()).bind(to_i64(body.limit)).bind(to_i64(body.period_ms))
            .bind(body.burst.map(to_i64)).bind(body.penalty).bind(body.failure_mode.as_str())
            .bind(body.shadow).bind(body.enabled).bind(now).bind(id).bind(tenant_id)
            .bind(descriptor_column(body)).bind(body.allow_override)
            .execute(conn)
            .await
            .map_err(conflict_as("a rule with this name"))?
            .rows_affected()
    });
    if affected == 0 {
        return Ok(None);
    }
    get(exec, tenant_id, id).await
}

pub async fn delete(
    exec: impl Into<Exec<'_>>,
    tenant_id: &str,
    id: &str,
) -> Result<bool, StoreError> {
    let sql = "DELETE FROM rules WHERE id = $1 AND tenant_id = $2";
    let affected = with_exec!(exec.into(), conn => {
        sqlx::query(sql).bind(id).bind(tenant_id).execute(conn).await?.rows_affected()
    });
    Ok(affected == 1)
}

pub async fn get(
    exec: impl Into<Exec<'_>>,
    tenant_id: &str,
    id: &str,
) -> Result<Option<Rule>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM rules WHERE id = $1 AND tenant_id = $2");
    let row = with_exec!(exec.into(), conn => {
        sqlx::query_as::<_, Row>(&sql).bind(id).bind(tenant_id).fetch_optional(conn).await?
    });
    row.map(Rule::try_from).transpose()
}

/// A tenant's rules, by name.
pub async fn list(db: &Db, tenant_id: &str) -> Result<Vec<Rule>, StoreError> {
    list_in(db, tenant_id).await
}

/// A tenant's rules, by name, read through `exec` (inside a transaction, what it sees).
pub async fn list_in(exec: impl Into<Exec<'_>>, tenant_id: &str) -> Result<Vec<Rule>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM rules WHERE tenant_id = $1 ORDER BY name");
    let rows = with_exec!(exec.into(), conn => {
        sqlx::query_as::<_, Row>(&sql).bind(tenant_id).fetch_all(conn).await?
    });
    rows.into_iter().map(Rule::try_from).collect()
}
