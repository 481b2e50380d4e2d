//! The console's transport: the server's implementation of every feature's port
//! ([`app::ports::Console`]), which server functions reach through Leptos context. It owns
//! sessions and sign-in; every other operation goes to the admin service ([`crate::admin`]),
//! the same service behind `/v1/admin`, acting as the session's user, and the service decides
//! what that user may do.

use std::sync::Arc;

use app::audit::{AuditEntry, AuditFilter, AuditPort};
use app::auth::{AuthPort, PasswordReset, Role, SessionInfo, SignedInUser, UserInfo};
use app::dashboard::{DashboardPort, DeniedSubject, Range, DENIED_SUBJECTS_SHOWN};
use app::keys::{sha256_hex, KeyInfo, KeyKind, KeysPort};
use app::rules::{
    Algorithm, FailureMode, ImportPreview, MatchKind, OverrideBody, OverrideInfo, RouteRules,
    RuleBody, RuleInfo, RulesPlan, RulesPort, Scope,
};
use app::simulate::{ResetInput, ResetOutcome, SimulateInput, SimulatePort, Simulation};
use app::status::{Status, StatusPort};
use app::tenants::{TenantInfo, TenantStatus, TenantsPort};
use app::AppError;
use axum::http::request::Parts;
use tower_sessions::Session;

use super::client_ip::ClientIp;
use super::readiness;
use crate::admin::keys::{KeyBody, RotateBody};
use crate::admin::rule_files::{read_rules_file, write_rules_file, FileFormat, RuleSet};
use crate::admin::top_denied::TopRange;
use crate::admin::users::SignIn;
use crate::admin::{Actor, AdminService, ServiceError};
use crate::dashboard::view::Scope as DashboardScope;
use crate::dashboard::Dashboard;
use crate::decide::{Answer, CheckInput, CompiledTenant, Decider, Mode};
use crate::limiter::Limiter;
use crate::passwords;
use crate::store::rules::Rule;
use crate::store::tenants::Tenant;
use crate::store::{self, users::User, Db, StoreError};

/// Session keys: the signed-in user's id, when the session began and its client.
use crate::store::sessions::{CLIENT, SIGNED_IN_AT, USER_ID};
/// Sign-in budgets, each `(limit, period_ms)`, decided by the decision core as the console's
/// own pseudo-tenant (see [`console_limits`]):
/// - per email *and* client: 10 a minute, refilled one every 6 s (GCRA), so a wrong password
///   costs its owner a short wait and a stranger elsewhere cannot lock the account;
const PER_EMAIL_AND_CLIENT: (u64, u64) = (10, 60_000);
/// - per client, whatever the email: 30 a minute (guessing across many accounts);
const PER_CLIENT: (u64, u64) = (30, 60_000);
/// - for the whole instance: `SLUICE_SIGN_IN_RATE` a second (10 by default), refused at once
///   rather than queued. A hash takes tens of milliseconds of a core, so this bounds what
///   sign-ins can take from `/v1/check` (`docs/SECURITY.md` has the benchmark).
const PER_INSTANCE_PERIOD_MS: u64 = 1_000;
/// How long a sign-in waits for a free password hasher before it is told to retry.
const HASHER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a sign-in refused by a budget is held before it is answered. A refusal is cheap,
/// but a client that sends its next attempt as soon as the last is answered would otherwise
/// make tens of thousands a second and take the CPU `/v1/check` needs; held, each connection
/// makes at most two a second, and waiting costs the server a timer, not a core. A client that
/// honours the answer's wait loses nothing: the wait it is told starts after the hold.
pub const REFUSAL_HOLD: std::time::Duration = std::time::Duration::from_millis(500);

/// The console's own limits, decided by the decision core like any tenant's: the pseudo-tenant
/// `_console` with one rule per sign-in budget, each on its own route, the instance's at
/// `per_second` sign-ins. They fail open, so an unreachable limiter never locks everyone out.
fn console_limits(per_second: u64) -> CompiledTenant {
    let tenant = Tenant {
        id: "_console".into(),
        name: "_console".into(),
        status: TenantStatus::Active,
        created_at: 0,
        updated_at: 0,
    };
    let rule = |route: &str, scope: Scope, (limit, period_ms): (u64, u64)| Rule {
        id: route.into(),
        tenant_id: tenant.id.clone(),
        body: RuleBody {
            name: route.into(),
            match_kind: MatchKind::Exact,
            route: Some(route.into()),
            descriptor: None,
            scope,
            algorithm: Algorithm::Gcra,
            limit,
            period_ms,
            burst: None,
            penalty: false,
            failure_mode: FailureMode::Open,
            shadow: false,
            enabled: true,
            allow_override: false,
        },
        created_at: 0,
        updated_at: 0,
    };
    let rules = vec![
        rule(
            SIGN_IN_ALL,
            Scope::Tenant,
            (per_second.max(1), PER_INSTANCE_PERIOD_MS),
        ),
        rule(SIGN_IN_CLIENT, Scope::Subject, PER_CLIENT),
        rule(SIGN_IN_EMAIL, Scope::Subject, PER_EMAIL_AND_CLIENT),
    ];
    CompiledTenant::compile(tenant.clone(), rules)
}

/// The routes of the sign-in budgets in [`console_limits`].
const SIGN_IN_ALL: &str = "sign-in";
const SIGN_IN_CLIENT: &str = "sign-in/client";
const SIGN_IN_EMAIL: &str = "sign-in/email-and-client";

/// The client the request came from (the socket's peer, or through trusted proxies the
/// address they forwarded: [`super::client_ip`]), or `unknown` when it was served without a
/// socket (tests that call the router directly).
fn client_address() -> String {
    leptos::prelude::use_context::<Parts>()
        .and_then(|parts| {
            parts
                .extensions
                .get::<ClientIp>()
                .map(|ip| ip.0.to_string())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The most characters of a browser's `User-Agent` a session keeps.
const AGENT_CHARS: usize = 120;

/// The client as the user's list of their sessions names it: its address, then its browser
/// (`User-Agent`, cut to [`AGENT_CHARS`]; left out when unreadable).
fn client_description() -> String {
    let address = client_address();
    let agent = leptos::prelude::use_context::<Parts>().and_then(|parts| {
        parts
            .headers
            .get(axum::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|a| !a.is_empty() && app::text::unreadable(a).is_none())
            .map(|a| a.chars().take(AGENT_CHARS).collect::<String>())
    });
    match agent {
        Some(agent) => format!("{address}, {agent}"),
        None => address,
    }
}

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

fn service_error(e: ServiceError) -> AppError {
    match e {
        ServiceError::NotFound(_) => AppError::NotFound,
        ServiceError::Forbidden(m) => AppError::Forbidden(m),
        ServiceError::Invalid(problems) => AppError::Invalid(
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        ),
        ServiceError::Conflict(m) => AppError::Conflict(m),
        ServiceError::Store(StoreError::Conflict(what)) => {
            AppError::Conflict(format!("{what} already exists"))
        }
        ServiceError::Store(e) => store_error(e),
        ServiceError::Limiter(e) if e.is_transient() => {
            AppError::Unavailable("the limiter's Redis".into())
        }
        ServiceError::Limiter(e) => {
            tracing::error!(error = %e, "console limiter error");
            AppError::Internal
        }
        ServiceError::Internal(m) => {
            tracing::error!(error = %m, "console operation failed");
            AppError::Internal
        }
    }
}

fn signed_in(user: User) -> SignedInUser {
    SignedInUser {
        email: user.email,
        role: user.role,
        tenant_id: user.tenant_id,
    }
}

/// The signed-in user of `session`, read from the store (not from a cached object), as the
/// admin service's actor. Without a session, or for a user who no longer exists, it is
/// `Unauthorized`.
pub async fn session_actor(db: &Db, session: &Session) -> Result<Actor, AppError> {
    actor_of(
        session_owner(db, session)
            .await?
            .ok_or(AppError::Unauthorized)?,
    )
}

/// The session's data key that holds [`password_mark`] of the hash the user signed in with.
const PASSWORD_MARK: &str = "password_mark";

/// A short digest of a stored password hash (each hash has its own salt, so every new
/// password gives a new mark). Kept in the session, it ties the session to the password it
/// was started with.
fn password_mark(password_hash: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(password_hash.as_bytes())[..8])
}

/// The user `session` belongs to, read from the store on every call: none without a session,
/// for a user who no longer exists or is disabled, or for a session started with a password
/// the user no longer has. The last two are second locks: disabling a user and changing or
/// resetting a password end the user's sessions, but a sign-in already past its password
/// check writes its session after that (a session from before marks were kept has none, and
/// is ended by the row deletion alone).
async fn session_owner(db: &Db, session: &Session) -> Result<Option<User>, AppError> {
    let Some(id) = session
        .get::<String>(USER_ID)
        .await
        .map_err(session_error)?
    else {
        return Ok(None);
    };
    let mark = session
        .get::<String>(PASSWORD_MARK)
        .await
        .map_err(session_error)?;
    Ok(store::users::get(db, &id)
        .await
        .map_err(store_error)?
        .filter(|u| u.disabled_at.is_none())
        .filter(|u| {
            mark.as_deref()
                .is_none_or(|m| m == password_mark(&u.password_hash))
        }))
}

fn actor_of(user: User) -> Result<Actor, AppError> {
    let label = format!("user:{}", user.email);
    match (user.role, user.tenant_id) {
        (Role::Operator, _) => Ok(Actor::Operator { label }),
        (Role::TenantAdmin, Some(tenant_id)) => Ok(Actor::TenantAdmin { tenant_id, label }),
        (Role::TenantAdmin, None) => Err(AppError::Unauthorized),
    }
}

/// Which dashboard the session may watch, as the admin service decides it.
pub async fn dashboard_scope(
    db: &Db,
    admin: &AdminService,
    session: &Session,
    tenant: Option<&str>,
) -> Result<DashboardScope, AppError> {
    let actor = session_actor(db, session).await?;
    Ok(
        match admin
            .authorize_dashboard(&actor, tenant)
            .await
            .map_err(service_error)?
        {
            None => DashboardScope::Fleet,
            Some(id) => DashboardScope::Tenant(id),
        },
    )
}

/// The console service over the store, the limiter and the admin service.
#[derive(Debug, Clone)]
pub struct ConsoleService {
    db: Db,
    limiter: Limiter,
    decider: Decider,
    admin: AdminService,
    dashboard: Dashboard,
    embedded: bool,
    /// The password hashers sign-ins share.
    hashers: passwords::Hashers,
    /// The console's own sign-in budgets.
    limits: CompiledTenant,
}

impl ConsoleService {
    /// The console over these parts; at most `hashers` sign-ins verify a password at once,
    /// and at most `sign_ins_per_second` are attempted on the instance.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        db: Db,
        limiter: Limiter,
        decider: Decider,
        admin: AdminService,
        dashboard: Dashboard,
        embedded: bool,
        hashers: usize,
        sign_ins_per_second: u64,
    ) -> Self {
        Self {
            db,
            limiter,
            decider,
            admin,
            dashboard,
            embedded,
            hashers: passwords::Hashers::new(hashers),
            limits: console_limits(sign_ins_per_second),
        }
    }

    async fn session_user(&self) -> Result<Option<User>, AppError> {
        session_owner(&self.db, &session()?).await
    }

    /// The session's user as the admin service's actor.
    async fn actor(&self) -> Result<Actor, AppError> {
        session_actor(&self.db, &session()?).await
    }
}

#[async_trait::async_trait]
impl StatusPort for ConsoleService {
    async fn status(&self) -> Result<Status, AppError> {
        let readiness = readiness::probe(&self.db, &self.limiter).await;
        let signed_in = matches!(self.session_user().await, Ok(Some(_)));
        Ok(Status {
            version: signed_in.then(|| env!("CARGO_PKG_VERSION").to_owned()),
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
}

#[async_trait::async_trait]
impl AuthPort for ConsoleService {
    async fn sign_in(&self, email: &str, password: &str) -> Result<SignedInUser, AppError> {
        let email = email.trim().to_lowercase();
        if email.is_empty() || password.is_empty() {
            return Err(AppError::Invalid(
                "enter your email and your password".into(),
            ));
        }
        self.limit_sign_in(&email, &client_address()).await?;
        let user = store::users::find_by_email(&self.db, &email)
            .await
            .map_err(store_error)?;
        let stored = user.as_ref().map(|u| u.password_hash.clone());
        // Each hash takes 19 MiB and a core for a moment: at most a few at once, in memory
        // allocated once.
        let matched = self
            .hashers
            .verify(password.to_owned(), stored, HASHER_WAIT)
            .await
            .map_err(|_| {
                AppError::Unavailable(
                    "sign-in (too many at once; try again in a few seconds)".into(),
                )
            })?;
        // Every checked password is audited (attempts the budgets refused are not, so these
        // writes are bounded by the sign-in rate); a failure to record does not change the
        // answer.
        let client = client_address();
        let enabled = user.as_ref().is_some_and(|u| u.disabled_at.is_none());
        let outcome = match (matched && user.is_some(), enabled) {
            (false, _) => SignIn::Wrong,
            (true, false) => SignIn::Disabled,
            (true, true) => SignIn::Done,
        };
        if let Err(e) = self.admin.record_sign_in(&email, &client, outcome).await {
            tracing::warn!(error = %e, "a sign-in could not be audited");
        }
        let Some(user) = user.filter(|_| matched) else {
            return Err(AppError::Invalid("wrong email or password".into()));
        };
        // Said only to whoever knows the password.
        if !enabled {
            return Err(AppError::Forbidden(
                "this account is disabled: ask an operator to enable it".into(),
            ));
        }
        let session = session()?;
        // A new id on sign-in, so a session id planted before it is worthless.
        session.cycle_id().await.map_err(session_error)?;
        session
            .insert(USER_ID, &user.id)
            .await
            .map_err(session_error)?;
        session
            .insert(PASSWORD_MARK, password_mark(&user.password_hash))
            .await
            .map_err(session_error)?;
        session
            .insert(SIGNED_IN_AT, store::now_ms())
            .await
            .map_err(session_error)?;
        session
            .insert(CLIENT, client_description())
            .await
            .map_err(session_error)?;
        Ok(signed_in(user))
    }

    async fn sign_out(&self) -> Result<(), AppError> {
        session()?.flush().await.map_err(session_error)
    }

    async fn change_password(&self, current: &str, new: &str) -> Result<u64, AppError> {
        let user = self.session_user().await?.ok_or(AppError::Unauthorized)?;
        // The current password could be guessed here as at sign-in: the same budgets apply.
        self.limit_sign_in(&user.email, &client_address()).await?;
        let matched = self
            .hashers
            .verify(
                current.to_owned(),
                Some(user.password_hash.clone()),
                HASHER_WAIT,
            )
            .await
            .map_err(|_| {
                AppError::Unavailable(
                    "password change (too many at once; try again in a few seconds)".into(),
                )
            })?;
        if !matched {
            return Err(AppError::Invalid(
                "current_password: is not your current password".into(),
            ));
        }
        let actor = actor_of(user.clone())?;
        let ended = self
            .admin
            .change_password(&actor, &user, new)
            .await
            .map_err(service_error)?;
        // This session ended with the others; it goes on under a new id (so a copy of its
        // old cookie is worthless too), marked with the new password.
        let changed = store::users::get(&self.db, &user.id)
            .await
            .map_err(store_error)?
            .ok_or(AppError::Unauthorized)?;
        let session = session()?;
        session.cycle_id().await.map_err(session_error)?;
        session
            .insert(PASSWORD_MARK, password_mark(&changed.password_hash))
            .await
            .map_err(session_error)?;
        Ok(ended.saturating_sub(1))
    }

    async fn list_users(&self) -> Result<Vec<UserInfo>, AppError> {
        let actor = self.actor().await?;
        let users = self.admin.list_users(&actor).await.map_err(service_error)?;
        Ok(users.into_iter().map(UserInfo::from).collect())
    }

    async fn set_user_disabled(&self, user: &str, disabled: bool) -> Result<UserInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .set_user_disabled(&actor, user, disabled)
            .await
            .map(UserInfo::from)
            .map_err(service_error)
    }

    async fn reset_user_password(&self, user: &str) -> Result<PasswordReset, AppError> {
        let actor = self.actor().await?;
        let (email, password) = self
            .admin
            .reset_password(&actor, user)
            .await
            .map_err(service_error)?;
        Ok(PasswordReset { email, password })
    }

    async fn list_tenant_admins(&self, tenant: &str) -> Result<Vec<UserInfo>, AppError> {
        let actor = self.actor().await?;
        let admins = self
            .admin
            .list_tenant_admins(&actor, tenant)
            .await
            .map_err(service_error)?;
        Ok(admins.into_iter().map(UserInfo::from).collect())
    }

    async fn delete_user(&self, user: &str) -> Result<(), AppError> {
        let actor = self.actor().await?;
        self.admin
            .delete_user(&actor, user)
            .await
            .map_err(service_error)
    }

    async fn list_sessions(&self) -> Result<Vec<SessionInfo>, AppError> {
        let user = self.session_user().await?.ok_or(AppError::Unauthorized)?;
        let current = session()?.id().map(|id| store::sessions::id_hash(&id));
        let rows = store::sessions::list_for_user(&self.db, &user.id)
            .await
            .map_err(store_error)?;
        Ok(rows
            .into_iter()
            .map(|row| row.info(current.as_deref()))
            .collect())
    }

    async fn sign_out_others(&self) -> Result<u64, AppError> {
        let user = self.session_user().await?.ok_or(AppError::Unauthorized)?;
        let keep = session()?
            .id()
            .map(|id| store::sessions::id_hash(&id))
            .ok_or(AppError::Unauthorized)?;
        let actor = actor_of(user.clone())?;
        self.admin
            .sign_out_others(&actor, &user, &keep)
            .await
            .map_err(service_error)
    }

    async fn current_user(&self) -> Result<Option<SignedInUser>, AppError> {
        Ok(self.session_user().await?.map(signed_in))
    }
}

#[async_trait::async_trait]
impl TenantsPort for ConsoleService {
    async fn list_tenants(&self) -> Result<Vec<TenantInfo>, AppError> {
        let actor = self.actor().await?;
        self.admin.list_tenants(&actor).await.map_err(service_error)
    }

    async fn get_tenant(&self, tenant: &str) -> Result<TenantInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .get_tenant(&actor, tenant)
            .await
            .map_err(service_error)
    }

    async fn create_tenant(&self, name: &str) -> Result<TenantInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .create_tenant(&actor, name)
            .await
            .map_err(service_error)
    }

    async fn set_tenant_active(&self, tenant: &str, active: bool) -> Result<TenantInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .set_tenant_active(&actor, tenant, active)
            .await
            .map_err(service_error)
    }

    async fn add_tenant_admin(
        &self,
        tenant: &str,
        email: &str,
        password: &str,
    ) -> Result<(), AppError> {
        let actor = self.actor().await?;
        self.admin
            .create_user(&actor, email, Some(tenant), password)
            .await
            .map(|_| ())
            .map_err(service_error)
    }
}

#[async_trait::async_trait]
impl RulesPort for ConsoleService {
    async fn list_rules(&self, tenant: &str) -> Result<Vec<RuleInfo>, AppError> {
        let actor = self.actor().await?;
        self.admin
            .list_rules(&actor, tenant)
            .await
            .map_err(service_error)
    }

    async fn save_rule(
        &self,
        tenant: &str,
        id: Option<&str>,
        body: RuleBody,
    ) -> Result<RuleInfo, AppError> {
        let actor = self.actor().await?;
        let saved = match id {
            None => self.admin.create_rule(&actor, tenant, &body).await,
            Some(id) => self.admin.update_rule(&actor, tenant, id, &body).await,
        };
        saved.map_err(service_error)
    }

    async fn delete_rule(&self, tenant: &str, id: &str) -> Result<(), AppError> {
        let actor = self.actor().await?;
        self.admin
            .delete_rule(&actor, tenant, id)
            .await
            .map_err(service_error)
    }

    async fn list_overrides(
        &self,
        tenant: &str,
        rule: &str,
    ) -> Result<Vec<OverrideInfo>, AppError> {
        let actor = self.actor().await?;
        self.admin
            .list_overrides(&actor, tenant, rule)
            .await
            .map_err(service_error)
    }

    async fn set_override(
        &self,
        tenant: &str,
        rule: &str,
        body: OverrideBody,
    ) -> Result<OverrideInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .set_override(&actor, tenant, rule, &body)
            .await
            .map(|(set, _)| set)
            .map_err(service_error)
    }

    async fn delete_override(&self, tenant: &str, rule: &str, id: &str) -> Result<(), AppError> {
        let actor = self.actor().await?;
        self.admin
            .delete_override(&actor, tenant, rule, id)
            .await
            .map_err(service_error)
    }

    async fn import_envoy(
        &self,
        tenant: &str,
        yaml: &str,
        apply: bool,
        expect: Option<&str>,
    ) -> Result<ImportPreview, AppError> {
        let actor = self.actor().await?;
        let translation = crate::admin::import::translate(yaml).map_err(AppError::Invalid)?;
        let plan = self
            .admin
            .import_descriptor_rules(&actor, tenant, &translation.rules, apply, expect)
            .await
            .map_err(service_error)?;
        Ok(ImportPreview {
            domain: translation.domain,
            create: plan.create.into_iter().map(|c| c.rule).collect(),
            update: plan.update.into_iter().map(|u| u.rule).collect(),
            delete: plan.delete.into_iter().map(|d| d.name).collect(),
            unchanged: plan.unchanged.len(),
            notes: translation.notes,
            fingerprint: plan.fingerprint,
            applied: plan.applied,
        })
    }

    async fn rules_for_route(&self, tenant: &str, route: &str) -> Result<RouteRules, AppError> {
        let actor = self.actor().await?;
        self.admin
            .rules_for_route(&actor, tenant, route)
            .await
            .map_err(service_error)
    }

    async fn export_rules(&self, tenant: &str) -> Result<String, AppError> {
        let actor = self.actor().await?;
        let file = self
            .admin
            .export_rules(&actor, tenant)
            .await
            .map_err(service_error)?;
        Ok(write_rules_file(&file, FileFormat::Yaml))
    }

    async fn import_rules(
        &self,
        tenant: &str,
        text: &str,
        apply: bool,
        expect: Option<&str>,
    ) -> Result<RulesPlan, AppError> {
        let actor = self.actor().await?;
        let file = read_rules_file(text, FileFormat::Yaml).map_err(AppError::Invalid)?;
        self.admin
            .import_rules(&actor, tenant, &file.rules, RuleSet::All, apply, expect)
            .await
            .map_err(service_error)
    }
}

#[async_trait::async_trait]
impl KeysPort for ConsoleService {
    async fn list_keys(&self, tenant: &str) -> Result<Vec<KeyInfo>, AppError> {
        let actor = self.actor().await?;
        self.admin
            .list_keys(&actor, tenant)
            .await
            .map_err(service_error)
    }

    async fn create_key(
        &self,
        tenant: &str,
        kind: KeyKind,
        name: &str,
        hash: &str,
        prefix: &str,
        expires_in_seconds: Option<u64>,
    ) -> Result<KeyInfo, AppError> {
        let actor = self.actor().await?;
        let body = KeyBody {
            kind,
            name: name.to_owned(),
            hash: hash.to_owned(),
            prefix: prefix.to_owned(),
            expires_in_seconds,
        };
        self.admin
            .create_key(&actor, tenant, &body)
            .await
            .map_err(service_error)
    }

    async fn rotate_key(
        &self,
        tenant: &str,
        key: &str,
        hash: &str,
        prefix: &str,
        grace_seconds: u64,
    ) -> Result<KeyInfo, AppError> {
        let actor = self.actor().await?;
        let body = RotateBody {
            hash: hash.to_owned(),
            prefix: prefix.to_owned(),
            grace_seconds,
        };
        self.admin
            .rotate_key(&actor, tenant, key, &body)
            .await
            .map_err(service_error)
    }

    async fn revoke_key(&self, tenant: &str, key: &str) -> Result<KeyInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .revoke_key(&actor, tenant, key)
            .await
            .map_err(service_error)
    }
}

#[async_trait::async_trait]
impl AuditPort for ConsoleService {
    async fn audit(
        &self,
        tenant: Option<&str>,
        filter: AuditFilter,
    ) -> Result<Vec<AuditEntry>, AppError> {
        let actor = self.actor().await?;
        self.admin
            .audit_events(&actor, tenant, &filter)
            .await
            .map_err(service_error)
    }
}

#[async_trait::async_trait]
impl SimulatePort for ConsoleService {
    async fn simulate(&self, tenant: &str, input: SimulateInput) -> Result<Simulation, AppError> {
        let actor = self.actor().await?;
        self.admin
            .simulate(&actor, tenant, &input)
            .await
            .map_err(service_error)
    }

    async fn reset(
        &self,
        tenant: &str,
        rule_id: &str,
        input: ResetInput,
    ) -> Result<ResetOutcome, AppError> {
        let actor = self.actor().await?;
        self.admin
            .reset_bucket(&actor, tenant, rule_id, &input)
            .await
            .map_err(service_error)
    }
}

#[async_trait::async_trait]
impl DashboardPort for ConsoleService {
    async fn dashboard(&self, tenant: Option<&str>, range: Range) -> Result<String, AppError> {
        let scope = dashboard_scope(&self.db, &self.admin, &session()?, tenant).await?;
        Ok(self.dashboard.html(&scope, range).to_string())
    }

    async fn denied_subjects(&self, tenant: &str) -> Result<Vec<DeniedSubject>, AppError> {
        let actor = self.actor().await?;
        let top = self
            .admin
            .top_denied(
                &actor,
                tenant,
                TopRange::FiveMinutes,
                DENIED_SUBJECTS_SHOWN,
                &self.dashboard,
            )
            .await
            .map_err(service_error)?;
        let mut rows: Vec<DeniedSubject> = top
            .rules
            .into_iter()
            .filter(|rule| rule.exists)
            .flat_map(|rule| {
                rule.subjects.into_iter().map(move |s| DeniedSubject {
                    rule_id: rule.rule_id.clone(),
                    policy: rule.policy.clone(),
                    subject: s.subject,
                    denied: s.denied,
                    error: rule.error,
                })
            })
            .collect();
        rows.sort_by(|a, b| {
            b.denied
                .cmp(&a.denied)
                .then_with(|| (&a.policy, &a.subject).cmp(&(&b.policy, &b.subject)))
        });
        rows.truncate(DENIED_SUBJECTS_SHOWN);
        Ok(rows)
    }
}

impl ConsoleService {
    /// A sign-in attempt spends from three budgets, decided by the decision core against the
    /// console's own limits ([`console_limits`]): the instance's, the client's, and the email's
    /// from this client. The first one spent refuses the attempt before any password is hashed.
    /// If the limiter itself is down, sign-in stays possible (the rules fail open) and the core
    /// says so in the log.
    async fn limit_sign_in(&self, email: &str, client: &str) -> Result<(), AppError> {
        // An email can be long; its digest keeps the subject within its 256 bytes.
        let email_and_client = format!("{client} {}", sha256_hex(email));
        let budgets = [
            (SIGN_IN_ALL, None, "sign-ins on this instance"),
            (
                SIGN_IN_CLIENT,
                Some(client),
                "sign-in attempts from your address",
            ),
            (
                SIGN_IN_EMAIL,
                Some(email_and_client.as_str()),
                "sign-in attempts for this email",
            ),
        ];
        for (route, subject, what) in budgets {
            let input = CheckInput::new(route, subject)
                .map_err(|_| AppError::Invalid("wrong email or password".into()))?;
            match self
                .decider
                .decide(&self.limits, &input, Mode::Internal)
                .await
            {
                Ok(Answer::Decided(d)) if !d.allowed => {
                    tokio::time::sleep(REFUSAL_HOLD).await;
                    let hold_ms = REFUSAL_HOLD.as_millis() as u64;
                    let wait = d
                        .deciding()
                        .1
                        .retry_after_ms
                        .saturating_sub(hold_ms)
                        .div_ceil(1000)
                        .max(1);
                    return Err(AppError::TooMany(format!(
                        "too many {what}; try again in {wait} s"
                    )));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "sign-in limiter unavailable; allowing the attempt");
                }
            }
        }
        Ok(())
    }
}

/// The console service, shared.
pub type SharedConsole = Arc<ConsoleService>;
