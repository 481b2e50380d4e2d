//! Console users. Passwords arrive here already hashed (argon2id PHC strings); sign-in and
//! sessions build on these functions.

use serde::Serialize;

use app::auth::Role;

use super::{conflict_as, now_ms, with_exec, with_pool, Db, Exec, StoreError};

/// A console user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct User {
    pub id: String,
    pub email: String,
    #[serde(skip)]
    pub password_hash: String,
    #[sqlx(try_from = "String")]
    pub role: Role,
    /// The tenant of a tenant admin; `None` for operators.
    pub tenant_id: Option<String>,
    pub created_at: i64,
    /// When an operator disabled the user (who may then not sign in); `None` while enabled.
    pub disabled_at: Option<i64>,
}

/// A user as the console and the admin API show it (never its password hash).
impl From<User> for app::auth::UserInfo {
    fn from(u: User) -> Self {
        app::auth::UserInfo {
            id: u.id,
            email: u.email,
            role: u.role,
            tenant_id: u.tenant_id,
            created_at: u.created_at,
            disabled_at: u.disabled_at,
        }
    }
}

const COLUMNS: &str = "id, email, password_hash, role, tenant_id, created_at, disabled_at";

/// Stores a user. Emails are unique (compared in lower case).
pub async fn insert(
    exec: impl Into<Exec<'_>>,
    email: &str,
    password_hash: &str,
    role: Role,
    tenant_id: Option<&str>,
) -> Result<User, StoreError> {
    let user = User {
        id: uuid::Uuid::new_v4().to_string(),
        email: email.trim().to_lowercase(),
        password_hash: password_hash.to_owned(),
        role,
        tenant_id: tenant_id.map(str::to_owned),
        created_at: now_ms(),
        disabled_at: None,
    };
    let sql = format!("INSERT INTO users ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)");
    with_exec!(exec.into(), conn => {
        sqlx::query(&sql)
            .bind(&user.id)
            .bind(&user.email)
            .bind(&user.password_hash)
            .bind(user.role.as_str())
            .bind(&user.tenant_id)
            .bind(user.created_at)
            .bind(user.disabled_at)
            .execute(conn)
            .await
            .map_err(conflict_as("a user with this email"))?;
    });
    Ok(user)
}

/// The user with this email (any case), if any.
pub async fn find_by_email(db: &Db, email: &str) -> Result<Option<User>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM users WHERE email = $1");
    let email = email.trim().to_lowercase();
    Ok(
        with_pool!(db, pool => sqlx::query_as::<_, User>(&sql).bind(&email).fetch_optional(pool).await?),
    )
}

pub async fn get(db: &Db, id: &str) -> Result<Option<User>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM users WHERE id = $1");
    Ok(with_pool!(db, pool => sqlx::query_as::<_, User>(&sql).bind(id).fetch_optional(pool).await?))
}

/// Whether any user exists (one indexed row at most, for start-up).
pub async fn exist(db: &Db) -> Result<bool, StoreError> {
    let sql = "SELECT id FROM users LIMIT 1";
    let any =
        with_pool!(db, pool => sqlx::query_scalar::<_, String>(sql).fetch_optional(pool).await?);
    Ok(any.is_some())
}

/// Every user, by email.
pub async fn list(db: &Db) -> Result<Vec<User>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM users ORDER BY email");
    Ok(with_pool!(db, pool => sqlx::query_as::<_, User>(&sql).fetch_all(pool).await?))
}

/// The admins of one tenant, by email.
pub async fn list_for_tenant(db: &Db, tenant_id: &str) -> Result<Vec<User>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM users WHERE tenant_id = $1 ORDER BY email");
    Ok(
        with_pool!(db, pool => sqlx::query_as::<_, User>(&sql).bind(tenant_id).fetch_all(pool).await?),
    )
}

/// Deletes a user. Returns whether it existed.
pub async fn delete(exec: impl Into<Exec<'_>>, id: &str) -> Result<bool, StoreError> {
    let sql = "DELETE FROM users WHERE id = $1";
    let deleted = with_exec!(exec.into(), conn => {
        sqlx::query(sql).bind(id).execute(conn).await?.rows_affected()
    });
    Ok(deleted == 1)
}

/// Replaces a user's password hash; with `expected`, only while the stored hash is still that
/// one (so a change checked against the old password cannot undo a reset that committed in
/// between). Returns whether it replaced it.
pub async fn set_password_hash(
    exec: impl Into<Exec<'_>>,
    id: &str,
    expected: Option<&str>,
    password_hash: &str,
) -> Result<bool, StoreError> {
    let sql =
        "UPDATE users SET password_hash = $2 WHERE id = $1 AND ($3 IS NULL OR password_hash = $3)";
    let changed = with_exec!(exec.into(), conn => {
        sqlx::query(sql).bind(id).bind(password_hash).bind(expected).execute(conn).await?.rows_affected()
    });
    Ok(changed == 1)
}

/// Disables a user (`Some(when)`) or enables it (`None`). Returns whether the user exists.
pub async fn set_disabled(
    exec: impl Into<Exec<'_>>,
    id: &str,
    disabled_at: Option<i64>,
) -> Result<bool, StoreError> {
    let sql = "UPDATE users SET disabled_at = $2 WHERE id = $1";
    let changed = with_exec!(exec.into(), conn => {
        sqlx::query(sql).bind(id).bind(disabled_at).execute(conn).await?.rows_affected()
    });
    Ok(changed == 1)
}
