//! The server's implementation of the console port ([`app::port::Console`]). Server functions
//! reach it through Leptos context; the admin REST API will call the same service.

use app::auth::SignedInUser;
use app::port::Console;
use app::rules::{Algorithm, LimitSpec};
use app::status::Status;
use app::AppError;
use axum::http::request::Parts;
use tower_sessions::Session;

use crate::health;
use crate::limiter::{keys, CheckRequest, Limiter, RuleCheck};
use crate::passwords;
use crate::store::{self, users::User, Db, StoreError};

/// Session key of the signed-in user's id.
const USER_ID: &str = "user_id";
/// Sign-in attempts allowed per email: 10 a minute (Sluice's own limiter).
const SIGN_IN_LIMIT: (u64, u64) = (10, 60_000);
/// The pseudo-tenant whose buckets limit the console itself.
const CONSOLE_TENANT: &str = "_console";

/// The session of the request being served (tower-sessions puts it in the request's
/// extensions; leptos_axum provides the request parts to server functions).
fn session() -> Result<Session, AppError> {
    leptos::prelude::use_context::<Parts>()
        .and_then(|parts| parts.extensions.get::<Session>().cloned())
        .ok_or(AppError::Internal)
}

fn store_error(e: StoreError) -> AppError {
    if e.is_transient() {
        AppError::Unavailable("the configuration store".into())
    } else {
        tracing::error!(error = %e, "console store error");
        AppError::Internal
    }
}

fn session_error(e: tower_sessions::session::Error) -> AppError {
    tracing::error!(error = %e, "session error");
    AppError::Unavailable("the session store".into())
}

fn signed_in(user: User) -> SignedInUser {
    SignedInUser {
        email: user.email,
        role: user.role,
        tenant_id: user.tenant_id,
    }
}

/// The console service over the store and the limiter.
#[derive(Debug, Clone)]
pub struct ConsoleService {
    db: Db,
    limiter: Limiter,
    embedded: bool,
}

impl ConsoleService {
    pub fn new(db: Db, limiter: Limiter, embedded: bool) -> Self {
        Self {
            db,
            limiter,
            embedded,
        }
    }
}

#[async_trait::async_trait]
impl Console for ConsoleService {
    async fn status(&self) -> Result<Status, AppError> {
        let readiness = health::probe(&self.db, &self.limiter).await;
        Ok(Status {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            mode: if self.embedded {
                "embedded"
            } else {
                "distributed"
            }
            .to_owned(),
            database: self.db.dialect().as_str().to_owned(),
            limiter: self.limiter.kind().as_str().to_owned(),
            down: readiness.down.iter().map(|d| (*d).to_owned()).collect(),
            checked_at_ms: store::now_ms(),
        })
    }

    async fn sign_in(&self, email: &str, password: &str) -> Result<SignedInUser, AppError> {
        let email = email.trim().to_lowercase();
        if email.is_empty() || password.is_empty() {
            return Err(AppError::Invalid(
                "enter your email and your password".into(),
            ));
        }
        self.limit_sign_in(&email).await?;
        let user = store::users::find_by_email(&self.db, &email)
            .await
            .map_err(store_error)?;
        let stored = user.as_ref().map(|u| u.password_hash.clone());
        let matched = passwords::verify(password.to_owned(), stored).await;
        let Some(user) = user.filter(|_| matched) else {
            return Err(AppError::Invalid("wrong email or password".into()));
        };
        let session = session()?;
        // A new id on sign-in, so a session id planted before it is worthless.
        session.cycle_id().await.map_err(session_error)?;
        session
            .insert(USER_ID, &user.id)
            .await
            .map_err(session_error)?;
        Ok(signed_in(user))
    }

    async fn sign_out(&self) -> Result<(), AppError> {
        session()?.flush().await.map_err(session_error)
    }

    async fn current_user(&self) -> Result<Option<SignedInUser>, AppError> {
        let Some(id) = session()?
            .get::<String>(USER_ID)
            .await
            .map_err(session_error)?
        else {
            return Ok(None);
        };
        Ok(store::users::get(&self.db, &id)
            .await
            .map_err(store_error)?
            .map(signed_in))
    }
}

impl ConsoleService {
    /// Sign-in attempts are rate-limited per email by Sluice's own limiter. If the limiter
    /// itself is down, sign-in stays possible (it fails open) and says so in the log.
    async fn limit_sign_in(&self, email: &str) -> Result<(), AppError> {
        let (limit, period) = SIGN_IN_LIMIT;
        let request = CheckRequest {
            tenant: CONSOLE_TENANT.into(),
            rules: vec![RuleCheck {
                key: keys::bucket(CONSOLE_TENANT, "sign-in", Some(email)),
                spec: LimitSpec::new(Algorithm::Gcra, limit, period),
                cost: 1,
                shadow: false,
            }],
            request_id: None,
            now_ms: None,
        };
        match self.limiter.check(&request).await {
            Ok(outcome) if !outcome.allowed => {
                let wait = outcome.decisions[0].retry_after_ms.div_ceil(1000);
                Err(AppError::Invalid(format!(
                    "too many sign-in attempts for this email; try again in {wait} s"
                )))
            }
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!(error = %e, "sign-in limiter unavailable; allowing the attempt");
                Ok(())
            }
        }
    }
}
