//! Tenants: create, read, list and change status.

use serde::Serialize;

use app::tenants::TenantStatus;

use super::{conflict_as, now_ms, with_exec, with_pool, Db, Exec, StoreError, Tx};

/// A tenant as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Tenant {
    pub id: String,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub status: TenantStatus,
    pub created_at: i64,
    pub updated_at: i64,
}

const COLUMNS: &str = "id, name, status, created_at, updated_at";

/// Inserts a new active tenant. A duplicate name is a [`StoreError::Conflict`].
pub async fn insert(exec: impl Into<Exec<'_>>, name: &str) -> Result<Tenant, StoreError> {
    let now = now_ms();
    let tenant = Tenant {
        id: uuid::Uuid::new_v4().to_string(),
        name: name.to_owned(),
        status: TenantStatus::Active,
        created_at: now,
        updated_at: now,
    };
    let sql = "INSERT INTO tenants (id, name, status, created_at, updated_at) \
               VALUES ($1, $2, $3, $4, $5)";
    with_exec!(exec.into(), conn => {
        sqlx::query(sql)
            .bind(&tenant.id)
            .bind(&tenant.name)
            .bind(tenant.status.as_str())
            .bind(tenant.created_at)
            .bind(tenant.updated_at)
            .execute(conn)
            .await
            .map_err(conflict_as("a tenant with this name"))?;
    });
    Ok(tenant)
}

pub async fn get(db: &Db, id: &str) -> Result<Option<Tenant>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM tenants WHERE id = $1");
    let tenant = with_pool!(db, pool => {
        sqlx::query_as::<_, Tenant>(&sql).bind(id).fetch_optional(pool).await?
    });
    Ok(tenant)
}

/// Every tenant, by name.
pub async fn list(db: &Db) -> Result<Vec<Tenant>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM tenants ORDER BY name");
    let tenants = with_pool!(db, pool => {
        sqlx::query_as::<_, Tenant>(&sql).fetch_all(pool).await?
    });
    Ok(tenants)
}

/// Locks the tenant's row until the transaction ends (a write that changes nothing: a row
/// lock on PostgreSQL, the database's write lock on SQLite), so that counts read after it
/// inside the transaction stay true until the commit. False when there is no such tenant.
pub async fn lock(tx: &mut Tx, id: &str) -> Result<bool, StoreError> {
    let sql = "UPDATE tenants SET updated_at = updated_at WHERE id = $1";
    let affected = with_exec!(Exec::from(tx), conn => {
        sqlx::query(sql).bind(id).execute(conn).await?.rows_affected()
    });
    Ok(affected == 1)
}

/// Sets the status; returns false when there is no such tenant.
pub async fn set_status(
    exec: impl Into<Exec<'_>>,
    id: &str,
    status: TenantStatus,
) -> Result<bool, StoreError> {
    let sql = "UPDATE tenants SET status = $1, updated_at = $2 WHERE id = $3";
    let affected = with_exec!(exec.into(), conn => {
        sqlx::query(sql)
            .bind(status.as_str())
            .bind(now_ms())
            .bind(id)
            .execute(conn)
            .await?
            .rows_affected()
    });
    Ok(affected == 1)
}
