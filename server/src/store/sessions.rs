//! Console sessions for tower-sessions, on either database. Rows are keyed by the SHA-256 of
//! the session id, never the id itself.

use sha2::{Digest, Sha256};
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

use super::{now_ms, with_exec, with_pool, Db, Exec, StoreError};

/// The key of a session's data that holds its user's id; the store copies it into the row's
/// `user_id`, so that every session of a user can be ended at once ([`end_for_user`]).
pub const USER_ID: &str = "user_id";
/// The keys of a session's data that hold when it began (Unix milliseconds) and the client it
/// began from; the store copies them into the row, for the user's list of their sessions.
pub const SIGNED_IN_AT: &str = "signed_in_at";
pub const CLIENT: &str = "client";

/// One live session of a user, as its owner sees it in their list.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SessionRow {
    /// The SHA-256 of the session id (never the id).
    pub id_hash: String,
    /// When it began; `None` for a session from before this was kept.
    pub created_at: Option<i64>,
    /// When a request last used it.
    pub last_seen_at: Option<i64>,
    /// The client address and browser it began from.
    pub client: Option<String>,
    pub expires_at: i64,
}

/// A tower-sessions store over [`Db`].
#[derive(Debug, Clone)]
pub struct SqlSessionStore {
    db: Db,
}

impl SqlSessionStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Deletes expired sessions; returns how many.
    pub async fn delete_expired(&self) -> Result<u64, StoreError> {
        let sql = "DELETE FROM sessions WHERE expires_at <= $1";
        Ok(
            with_pool!(&self.db, pool => sqlx::query(sql).bind(now_ms()).execute(pool).await?.rows_affected()),
        )
    }
}

/// Ends every session of `user_id` (on every instance, since each request reads its session
/// from here). Returns how many ended.
pub async fn end_for_user(exec: impl Into<Exec<'_>>, user_id: &str) -> Result<u64, StoreError> {
    let sql = "DELETE FROM sessions WHERE user_id = $1";
    Ok(
        with_exec!(exec.into(), conn => sqlx::query(sql).bind(user_id).execute(conn).await?.rows_affected()),
    )
}

impl SessionRow {
    /// The session as its owner (or an operator) is shown it; `current` is the row key of the
    /// session asking, if any.
    pub fn info(self, current: Option<&str>) -> app::auth::SessionInfo {
        app::auth::SessionInfo {
            current: current == Some(self.id_hash.as_str()),
            created_at: self.created_at,
            last_seen_at: self.last_seen_at,
            client: self.client,
            expires_at: self.expires_at,
        }
    }
}

/// A user's live sessions, the most recently used first.
pub async fn list_for_user(db: &Db, user_id: &str) -> Result<Vec<SessionRow>, StoreError> {
    let sql = "SELECT id_hash, created_at, last_seen_at, client, expires_at FROM sessions \
               WHERE user_id = $1 AND expires_at > $2 \
               ORDER BY COALESCE(last_seen_at, 0) DESC, id_hash";
    Ok(with_pool!(db, pool => {
        sqlx::query_as::<_, SessionRow>(sql).bind(user_id).bind(now_ms()).fetch_all(pool).await?
    }))
}

/// Ends every session of `user_id` but the one whose id hashes to `keep` ([`id_hash`]).
/// Returns how many ended.
pub async fn end_others(
    exec: impl Into<Exec<'_>>,
    user_id: &str,
    keep: &str,
) -> Result<u64, StoreError> {
    let sql = "DELETE FROM sessions WHERE user_id = $1 AND id_hash <> $2";
    Ok(with_exec!(exec.into(), conn => {
        sqlx::query(sql).bind(user_id).bind(keep).execute(conn).await?.rows_affected()
    }))
}

fn user_of(record: &Record) -> Option<&str> {
    record.data.get(USER_ID).and_then(|v| v.as_str())
}

fn signed_in_at(record: &Record) -> Option<i64> {
    record
        .data
        .get(SIGNED_IN_AT)
        .and_then(serde_json::Value::as_i64)
}

fn client_of(record: &Record) -> Option<&str> {
    record.data.get(CLIENT).and_then(|v| v.as_str())
}

/// The key of a session's row: the SHA-256 of its id, in hex.
pub fn id_hash(id: &Id) -> String {
    hex::encode(Sha256::digest(id.to_string().as_bytes()))
}

fn backend(e: impl std::fmt::Display) -> session_store::Error {
    session_store::Error::Backend(e.to_string())
}

fn encode(record: &Record) -> session_store::Result<String> {
    serde_json::to_string(&record.data).map_err(|e| session_store::Error::Encode(e.to_string()))
}

fn millis(record: &Record) -> i64 {
    i64::try_from(record.expiry_date.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl SessionStore for SqlSessionStore {
    /// Inserts a new session; on the (astronomically unlikely) collision of ids, draws a new
    /// id and tries again, so an existing session is never overwritten.
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        let data = encode(record)?;
        let sql = "INSERT INTO sessions \
                   (id_hash, data, expires_at, user_id, created_at, last_seen_at, client) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id_hash) DO NOTHING";
        loop {
            let inserted = with_pool!(&self.db, pool => {
                sqlx::query(sql)
                    .bind(id_hash(&record.id))
                    .bind(&data)
                    .bind(millis(record))
                    .bind(user_of(record))
                    .bind(signed_in_at(record))
                    .bind(now_ms())
                    .bind(client_of(record))
                    .execute(pool)
                    .await
                    .map_err(backend)?
                    .rows_affected()
            });
            if inserted == 1 {
                return Ok(());
            }
            record.id = Id::default();
        }
    }

    /// Updates a session that was loaded. Only an update: a session ended while one of its
    /// requests was in flight (signed out, or its user's password changed) stays ended when
    /// that request's response saves it, rather than being written back. New and re-keyed
    /// sessions go through [`SessionStore::create`]. Every request saves its session (the
    /// expiry slides), so this is also when it was last seen.
    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let data = encode(record)?;
        let sql = "UPDATE sessions SET data = $2, expires_at = $3, user_id = $4, \
                   created_at = $5, last_seen_at = $6, client = $7 WHERE id_hash = $1";
        with_pool!(&self.db, pool => {
            sqlx::query(sql)
                .bind(id_hash(&record.id))
                .bind(data)
                .bind(millis(record))
                .bind(user_of(record))
                .bind(signed_in_at(record))
                .bind(now_ms())
                .bind(client_of(record))
                .execute(pool)
                .await
                .map_err(backend)?;
        });
        Ok(())
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let sql = "SELECT data, expires_at FROM sessions WHERE id_hash = $1 AND expires_at > $2";
        let row: Option<(String, i64)> = with_pool!(&self.db, pool => {
            sqlx::query_as(sql).bind(id_hash(id)).bind(now_ms()).fetch_optional(pool).await.map_err(backend)?
        });
        let Some((data, expires_at)) = row else {
            return Ok(None);
        };
        let data =
            serde_json::from_str(&data).map_err(|e| session_store::Error::Decode(e.to_string()))?;
        let expiry_date =
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(expires_at) * 1_000_000)
                .map_err(|e| session_store::Error::Decode(e.to_string()))?;
        Ok(Some(Record {
            id: *id,
            data,
            expiry_date,
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        with_pool!(&self.db, pool => {
            sqlx::query("DELETE FROM sessions WHERE id_hash = $1").bind(id_hash(id)).execute(pool).await.map_err(backend)?;
        });
        Ok(())
    }
}
