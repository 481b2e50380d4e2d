//! API keys: only the SHA-256 of a key is stored, with a display prefix.

use app::keys::KeyKind;
use serde::Serialize;

use super::{conflict_as, now_ms, with_exec, with_pool, Db, Exec, StoreError, Tx};

/// A key as stored (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ApiKey {
    pub id: String,
    pub tenant_id: Option<String>,
    pub kind: String,
    pub name: String,
    pub prefix: String,
    #[serde(skip)]
    pub hash: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
    pub replaced_by: Option<String>,
}

impl ApiKey {
    pub fn kind(&self) -> Option<KeyKind> {
        KeyKind::parse(&self.kind)
    }

    /// Whether the key authenticates at `now` (not revoked, not past its expiry).
    pub fn is_live(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| at > now)
    }
}

/// A key to create.
#[derive(Debug, Clone)]
pub struct NewKey<'a> {
    pub tenant_id: Option<&'a str>,
    pub kind: KeyKind,
    pub name: &'a str,
    pub prefix: &'a str,
    pub hash: &'a str,
    pub expires_at: Option<i64>,
}

const COLUMNS: &str =
    "id, tenant_id, kind, name, prefix, hash, created_at, expires_at, revoked_at, last_used_at, replaced_by";

fn new_row(key: &NewKey<'_>) -> ApiKey {
    ApiKey {
        id: uuid::Uuid::new_v4().to_string(),
        tenant_id: key.tenant_id.map(str::to_owned),
        kind: key.kind.as_str().to_owned(),
        name: key.name.to_owned(),
        prefix: key.prefix.to_owned(),
        hash: key.hash.to_owned(),
        created_at: now_ms(),
        expires_at: key.expires_at,
        revoked_at: None,
        last_used_at: None,
        replaced_by: None,
    }
}

const INSERT: &str =
    "INSERT INTO api_keys (id, tenant_id, kind, name, prefix, hash, created_at, expires_at) \
                      VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// Stores a new key. A hash that already exists is a [`StoreError::Conflict`].
pub async fn insert(exec: impl Into<Exec<'_>>, key: &NewKey<'_>) -> Result<ApiKey, StoreError> {
    let row = new_row(key);
    with_exec!(exec.into(), conn => {
        sqlx::query(INSERT)
            .bind(&row.id).bind(&row.tenant_id).bind(&row.kind).bind(&row.name)
            .bind(&row.prefix).bind(&row.hash).bind(row.created_at).bind(row.expires_at)
            .execute(conn)
            .await
            .map_err(conflict_as("a key with this hash"))?;
    });
    Ok(row)
}

/// The key with this SHA-256, live or not: the check path's lookup.
pub async fn find_by_hash(db: &Db, hash: &str) -> Result<Option<ApiKey>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM api_keys WHERE hash = $1");
    Ok(
        with_pool!(db, pool => sqlx::query_as::<_, ApiKey>(&sql).bind(hash).fetch_optional(pool).await?),
    )
}

pub async fn get(db: &Db, id: &str) -> Result<Option<ApiKey>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM api_keys WHERE id = $1");
    Ok(
        with_pool!(db, pool => sqlx::query_as::<_, ApiKey>(&sql).bind(id).fetch_optional(pool).await?),
    )
}

/// A tenant's keys, newest first.
pub async fn list_for_tenant(db: &Db, tenant_id: &str) -> Result<Vec<ApiKey>, StoreError> {
    let sql =
        format!("SELECT {COLUMNS} FROM api_keys WHERE tenant_id = $1 ORDER BY created_at DESC, id");
    Ok(
        with_pool!(db, pool => sqlx::query_as::<_, ApiKey>(&sql).bind(tenant_id).fetch_all(pool).await?),
    )
}

/// How many keys of `tenant_id` work now (neither revoked nor expired; keys in a rotation's
/// grace count).
pub async fn count_live(exec: impl Into<Exec<'_>>, tenant_id: &str) -> Result<u64, StoreError> {
    let sql = "SELECT COUNT(*) FROM api_keys WHERE tenant_id = $1 AND revoked_at IS NULL \
               AND (expires_at IS NULL OR expires_at > $2)";
    let count: i64 = with_exec!(exec.into(), conn => {
        sqlx::query_scalar(sql).bind(tenant_id).bind(now_ms()).fetch_one(conn).await?
    });
    Ok(u64::try_from(count).unwrap_or(0))
}

/// The operator keys (no tenant), newest first.
pub async fn list_operators(db: &Db) -> Result<Vec<ApiKey>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM api_keys WHERE tenant_id IS NULL ORDER BY created_at DESC, id"
    );
    Ok(with_pool!(db, pool => sqlx::query_as::<_, ApiKey>(&sql).fetch_all(pool).await?))
}

/// Revokes a key now; false when it does not exist or was already revoked.
pub async fn revoke(exec: impl Into<Exec<'_>>, id: &str) -> Result<bool, StoreError> {
    let sql = "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL";
    let affected = with_exec!(exec.into(), conn => {
        sqlx::query(sql).bind(now_ms()).bind(id).execute(conn).await?.rows_affected()
    });
    Ok(affected == 1)
}

/// Issues `new` in place of key `old_id`, which keeps working until `grace_until` (or its
/// own earlier expiry). It takes a transaction: the two writes (and the caller's audit
/// event) commit together or not at all. `None` when the old key is no longer live as the
/// transaction sees it (revoked or expired by a concurrent change): the caller must then
/// drop the transaction, which undoes the new key.
pub async fn rotate(
    tx: &mut Tx,
    old_id: &str,
    new: &NewKey<'_>,
    grace_until: i64,
) -> Result<Option<ApiKey>, StoreError> {
    let row = insert(&mut *tx, new).await?;
    // On PostgreSQL this waits for a concurrent revocation of the row and then sees it.
    let expire = "UPDATE api_keys SET replaced_by = $1, \
                  expires_at = CASE WHEN expires_at IS NULL OR expires_at > $2 THEN $2 ELSE expires_at END \
                  WHERE id = $3 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $4)";
    let affected = with_exec!(Exec::Tx(tx), conn => {
        sqlx::query(expire)
            .bind(&row.id)
            .bind(grace_until)
            .bind(old_id)
            .bind(now_ms())
            .execute(conn)
            .await?
            .rows_affected()
    });
    Ok((affected == 1).then_some(row))
}

/// Records that these keys were used at `at` (called in batches, off the check path).
pub async fn touch(db: &Db, ids: &[String], at: i64) -> Result<(), StoreError> {
    let sql = "UPDATE api_keys SET last_used_at = $1 WHERE id = $2";
    with_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        for id in ids {
            sqlx::query(sql).bind(at).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
    });
    Ok(())
}
