//! The configuration store: tenants, users, keys, rules and audit events, on SQLite
//! (embedded mode) or PostgreSQL (distributed mode).
//!
//! Both dialects run the same SQL: ids are UUID text, times are Unix milliseconds and
//! placeholders are numbered (`$1`) in the order they appear. [`Db`] holds one pool of either
//! kind, and the small functions in the submodules dispatch on it with [`with_pool!`], so no
//! caller ever sees which database is in use.
//!
//! Functions that write take an [`Exec`]: the pool (`&db`) or an open transaction
//! (`&mut tx` from [`Db::begin`]). The admin service writes a change and its audit event
//! through one [`Tx`], so both commit or neither does.

pub mod audit;
pub mod keys;
pub mod overrides;
pub mod quotas;
pub mod rules;
pub mod sessions;
pub mod tenants;
pub mod users;

use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/postgres");
static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/sqlite");

/// Errors from the store. `transient` ones (the database is unreachable or overloaded) may
/// succeed on retry and map to 503; the others are bugs or bad data and map to 500.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the database URL {0:?} is not sqlite://… or postgres://…")]
    UnsupportedUrl(String),
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("database error: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0} already exists")]
    Conflict(String),
    #[error("unexpected value in the database: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Whether a retry could succeed: the database was unreachable, not the query wrong.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Sqlx(sqlx::Error::Database(db)) => {
                // Connection exceptions (08), insufficient resources such as too many
                // connections (53), and a server shutting down or starting up (57P0x).
                db.code().is_some_and(|code| {
                    code.starts_with("08") || code.starts_with("53") || code.starts_with("57P0")
                })
            }
            StoreError::Sqlx(e) => matches!(
                e,
                sqlx::Error::Io(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::WorkerCrashed
            ),
            _ => false,
        }
    }
}

/// Which database is behind a [`Db`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
        }
    }
}

/// A pool on one of the two supported databases. Cloning is cheap (it is a handle).
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the concrete pool, whichever database it is.
macro_rules! with_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::store::Db::Sqlite($pool) => $body,
            $crate::store::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// An open transaction on either database; [`Tx::commit`] ends it, dropping it rolls back.
pub enum Tx {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl std::fmt::Debug for Tx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tx::Sqlite(_) => "Tx(sqlite)",
            Tx::Postgres(_) => "Tx(postgres)",
        })
    }
}

impl Tx {
    pub async fn commit(self) -> Result<(), StoreError> {
        match self {
            Tx::Sqlite(tx) => tx.commit().await?,
            Tx::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }
}

/// Where a write runs: straight on the pool, or inside a transaction.
#[derive(Debug)]
pub enum Exec<'a> {
    Pool(&'a Db),
    Tx(&'a mut Tx),
}

impl Exec<'_> {
    /// The same executor for one more statement.
    pub fn reborrow(&mut self) -> Exec<'_> {
        match self {
            Exec::Pool(db) => Exec::Pool(db),
            Exec::Tx(tx) => Exec::Tx(tx),
        }
    }
}

impl<'a> From<&'a Db> for Exec<'a> {
    fn from(db: &'a Db) -> Self {
        Exec::Pool(db)
    }
}

impl<'a> From<&'a mut Tx> for Exec<'a> {
    fn from(tx: &'a mut Tx) -> Self {
        Exec::Tx(tx)
    }
}

/// Runs `$body` with `$conn` bound to a concrete executor (a pool, or a transaction's
/// connection) of whichever database the [`Exec`] is on. `$conn` may be used once.
macro_rules! with_exec {
    ($exec:expr, $conn:ident => $body:expr) => {
        match $exec {
            $crate::store::Exec::Pool($crate::store::Db::Sqlite($conn)) => $body,
            $crate::store::Exec::Pool($crate::store::Db::Postgres($conn)) => $body,
            $crate::store::Exec::Tx($crate::store::Tx::Sqlite(tx)) => {
                let $conn = &mut **tx;
                $body
            }
            $crate::store::Exec::Tx($crate::store::Tx::Postgres(tx)) => {
                let $conn = &mut **tx;
                $body
            }
        }
    };
}
pub(crate) use with_exec;

impl Db {
    /// Opens a pool for `url`. For SQLite the file and its directory are created when
    /// missing. The pool connects lazily, so a database that is down at start-up is reported
    /// by [`Db::ping`] and `/readyz` rather than by a crash.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_as(url, "sluice", 16).await
    }

    /// [`Db::connect`] with its own PostgreSQL `application_name` and pool size, so that
    /// `pg_stat_activity` and the server's log tell its statements apart (SQLite has no
    /// such name).
    pub async fn connect_as(
        url: &str,
        application_name: &str,
        max_connections: u32,
    ) -> Result<Self, StoreError> {
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            let file = path.split('?').next().unwrap_or_default();
            if let Some(dir) = std::path::Path::new(file).parent() {
                if !dir.as_os_str().is_empty() {
                    std::fs::create_dir_all(dir).map_err(|source| StoreError::DataDir {
                        path: dir.display().to_string(),
                        source,
                    })?;
                }
            }
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(5));
            let pool = SqlitePoolOptions::new()
                .max_connections(8)
                .connect_with(options)
                .await?;
            Ok(Db::Sqlite(pool))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)?.application_name(application_name);
            let pool = PgPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(2))
                .connect_lazy_with(options);
            Ok(Db::Postgres(pool))
        } else {
            Err(StoreError::UnsupportedUrl(url.to_owned()))
        }
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Applies every migration of this dialect that has not run yet.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Db::Sqlite(pool) => SQLITE_MIGRATIONS.run(pool).await?,
            Db::Postgres(pool) => POSTGRES_MIGRATIONS.run(pool).await?,
        }
        Ok(())
    }

    /// The versions of the migrations this binary carries, oldest first.
    pub fn known_migrations(&self) -> Vec<i64> {
        let migrator = match self {
            Db::Sqlite(_) => &SQLITE_MIGRATIONS,
            Db::Postgres(_) => &POSTGRES_MIGRATIONS,
        };
        migrator.iter().map(|m| m.version).collect()
    }

    /// The migrations recorded as applied in the database, oldest first.
    pub async fn applied_migrations(&self) -> Result<Vec<i64>, StoreError> {
        let sql = "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version";
        let versions = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(sql).fetch_all(pool).await?
        });
        Ok(versions)
    }

    /// Opens a transaction; pass `&mut tx` to the write functions, then [`Tx::commit`].
    ///
    /// On SQLite it takes the write lock at once (`BEGIN IMMEDIATE`): a transaction that
    /// reads first (a rule, before deleting it) and writes later would otherwise fail with
    /// "database is locked" at its first write whenever another connection wrote in between
    /// (in WAL mode that upgrade is refused at once, whatever the busy timeout), as a
    /// session saved by a concurrent page load does. Waiting for the lock up front is subject
    /// to the busy timeout like any write.
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        Ok(match self {
            Db::Sqlite(pool) => Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
            Db::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }

    /// One round trip to the database, for `/readyz`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        with_pool!(self, pool => { sqlx::query("SELECT 1").execute(pool).await?; });
        Ok(())
    }

    pub async fn close(&self) {
        with_pool!(self, pool => pool.close().await);
    }
}

/// The current time as Unix milliseconds, the store's time representation.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// Maps a unique-constraint violation to [`StoreError::Conflict`] naming `what`.
pub(crate) fn conflict_as(what: &str) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
    move |e| match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(what.to_owned())
        }
        _ => StoreError::Sqlx(e),
    }
}
