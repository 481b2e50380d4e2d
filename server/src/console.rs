//! The server's implementation of the console port ([`app::port::Console`]). Server functions
//! reach it through Leptos context. Every admin operation goes to [`AdminService`], the same
//! service behind `/v1/admin`, acting as the session's user.

use app::audit::{AuditEntry, AuditFilter};
use app::auth::SignedInUser;
use app::keys::{KeyInfo, KeyKind};
use app::port::Console;
use app::rules::{Algorithm, LimitSpec, RuleBody, RuleInfo};
use app::simulate::{SimulateInput, Simulation};
use app::status::Status;
use app::tenants::TenantInfo;
use app::AppError;
use axum::http::request::Parts;
use tower_sessions::Session;

use app::dashboard::Range;

use crate::dashboard::view::Scope;
use crate::dashboard::Dashboard;
use crate::health;
use crate::limiter::{keys, CheckRequest, Limiter, RuleCheck};
use crate::passwords;
use crate::service::{Actor, AdminService, KeyBody, RotateBody, ServiceError};
use crate::store::audit::AuditEvent;
use crate::store::keys::ApiKey;
use crate::store::rules::Rule;
use crate::store::tenants::Tenant;
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
        ServiceError::Store(StoreError::Conflict(what)) => {
            AppError::Invalid(format!("{what} already exists"))
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

fn tenant_info(t: Tenant) -> TenantInfo {
    TenantInfo {
        id: t.id,
        name: t.name,
        status: t.status,
        created_at: t.created_at,
    }
}

fn rule_info(r: Rule) -> RuleInfo {
    RuleInfo {
        id: r.id,
        body: r.body,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

fn key_info(k: ApiKey) -> KeyInfo {
    let mut info = KeyInfo {
        id: k.id,
        kind: k.kind,
        name: k.name,
        prefix: k.prefix,
        created_at: k.created_at,
        expires_at: k.expires_at,
        revoked_at: k.revoked_at,
        last_used_at: k.last_used_at,
        replaced_by: k.replaced_by,
        state: String::new(),
    };
    info.state = info.state_at(store::now_ms()).to_owned();
    info
}

fn audit_entry(e: AuditEvent) -> AuditEntry {
    AuditEntry {
        id: e.id,
        tenant_id: e.tenant_id,
        actor: e.actor,
        action: e.action,
        target: e.target,
        detail: e.detail,
        at: e.at,
    }
}

fn signed_in(user: User) -> SignedInUser {
    SignedInUser {
        email: user.email,
        role: user.role,
        tenant_id: user.tenant_id,
    }
}

/// Who may see which dashboard: an operator the fleet (`tenant` = `None`) or any tenant; a
/// tenant admin their own active tenant only (another tenant is `NotFound`).
pub async fn dashboard_scope(
    db: &Db,
    session: &Session,
    tenant: Option<&str>,
) -> Result<Scope, AppError> {
    let Some(id) = session
        .get::<String>(USER_ID)
        .await
        .map_err(session_error)?
    else {
        return Err(AppError::Unauthorized);
    };
    let user = store::users::get(db, &id)
        .await
        .map_err(store_error)?
        .ok_or(AppError::Unauthorized)?;
    let operator = user.role == "operator";
    let Some(tenant) = tenant else {
        return if operator {
            Ok(Scope::Fleet)
        } else {
            Err(AppError::Forbidden(
                "the fleet dashboard is for operators; your tenant's dashboard is under Dashboard"
                    .into(),
            ))
        };
    };
    if !operator && user.tenant_id.as_deref() != Some(tenant) {
        return Err(AppError::NotFound);
    }
    let found = store::tenants::get(db, tenant)
        .await
        .map_err(store_error)?
        .ok_or(AppError::NotFound)?;
    if !operator && found.status != "active" {
        return Err(AppError::Forbidden(
            "your tenant is suspended; ask an operator to resume it".into(),
        ));
    }
    Ok(Scope::Tenant(found.id))
}

/// The console service over the store, the limiter and the admin service.
#[derive(Debug, Clone)]
pub struct ConsoleService {
    db: Db,
    limiter: Limiter,
    admin: AdminService,
    dashboard: Dashboard,
    embedded: bool,
}

impl ConsoleService {
    pub fn new(
        db: Db,
        limiter: Limiter,
        admin: AdminService,
        dashboard: Dashboard,
        embedded: bool,
    ) -> Self {
        Self {
            db,
            limiter,
            admin,
            dashboard,
            embedded,
        }
    }

    async fn session_user(&self) -> Result<Option<User>, AppError> {
        let Some(id) = session()?
            .get::<String>(USER_ID)
            .await
            .map_err(session_error)?
        else {
            return Ok(None);
        };
        store::users::get(&self.db, &id).await.map_err(store_error)
    }

    /// The session's user as the admin service's actor. A tenant admin of a suspended
    /// tenant is refused, as that tenant's admin keys are on `/v1/admin`.
    async fn actor(&self) -> Result<Actor, AppError> {
        let user = self.session_user().await?.ok_or(AppError::Unauthorized)?;
        let label = format!("user:{}", user.email);
        match (user.role.as_str(), user.tenant_id) {
            ("operator", _) => Ok(Actor::Operator { label }),
            ("tenant_admin", Some(tenant_id)) => {
                let tenant = store::tenants::get(&self.db, &tenant_id)
                    .await
                    .map_err(store_error)?;
                if tenant.is_none_or(|t| t.status != "active") {
                    return Err(AppError::Forbidden(
                        "your tenant is suspended; ask an operator to resume it".into(),
                    ));
                }
                Ok(Actor::TenantAdmin { tenant_id, label })
            }
            _ => Err(AppError::Unauthorized),
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
        Ok(self.session_user().await?.map(signed_in))
    }

    async fn list_tenants(&self) -> Result<Vec<TenantInfo>, AppError> {
        let actor = self.actor().await?;
        let tenants = self
            .admin
            .list_tenants(&actor)
            .await
            .map_err(service_error)?;
        Ok(tenants.into_iter().map(tenant_info).collect())
    }

    async fn get_tenant(&self, tenant: &str) -> Result<TenantInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .get_tenant(&actor, tenant)
            .await
            .map(tenant_info)
            .map_err(service_error)
    }

    async fn create_tenant(&self, name: &str) -> Result<TenantInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .create_tenant(&actor, name)
            .await
            .map(tenant_info)
            .map_err(service_error)
    }

    async fn set_tenant_active(&self, tenant: &str, active: bool) -> Result<TenantInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .set_tenant_active(&actor, tenant, active)
            .await
            .map(tenant_info)
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
            .add_tenant_admin(&actor, tenant, email, password)
            .await
            .map_err(service_error)
    }

    async fn list_rules(&self, tenant: &str) -> Result<Vec<RuleInfo>, AppError> {
        let actor = self.actor().await?;
        let rules = self
            .admin
            .list_rules(&actor, tenant)
            .await
            .map_err(service_error)?;
        Ok(rules.into_iter().map(rule_info).collect())
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
        saved.map(rule_info).map_err(service_error)
    }

    async fn delete_rule(&self, tenant: &str, id: &str) -> Result<(), AppError> {
        let actor = self.actor().await?;
        self.admin
            .delete_rule(&actor, tenant, id)
            .await
            .map_err(service_error)
    }

    async fn list_keys(&self, tenant: &str) -> Result<Vec<KeyInfo>, AppError> {
        let actor = self.actor().await?;
        let keys = self
            .admin
            .list_keys(&actor, tenant)
            .await
            .map_err(service_error)?;
        Ok(keys.into_iter().map(key_info).collect())
    }

    async fn create_key(
        &self,
        tenant: &str,
        kind: KeyKind,
        name: &str,
        hash: &str,
        prefix: &str,
    ) -> Result<KeyInfo, AppError> {
        let actor = self.actor().await?;
        let body = KeyBody {
            kind,
            name: name.to_owned(),
            hash: hash.to_owned(),
            prefix: prefix.to_owned(),
        };
        self.admin
            .create_key(&actor, tenant, &body)
            .await
            .map(key_info)
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
            .map(key_info)
            .map_err(service_error)
    }

    async fn revoke_key(&self, tenant: &str, key: &str) -> Result<KeyInfo, AppError> {
        let actor = self.actor().await?;
        self.admin
            .revoke_key(&actor, tenant, key)
            .await
            .map(key_info)
            .map_err(service_error)
    }

    async fn audit(
        &self,
        tenant: Option<&str>,
        filter: AuditFilter,
    ) -> Result<Vec<AuditEntry>, AppError> {
        let actor = self.actor().await?;
        let events = self
            .admin
            .audit_events(&actor, tenant, &filter)
            .await
            .map_err(service_error)?;
        Ok(events.into_iter().map(audit_entry).collect())
    }

    async fn simulate(&self, tenant: &str, input: SimulateInput) -> Result<Simulation, AppError> {
        let actor = self.actor().await?;
        self.admin
            .simulate(&actor, tenant, &input)
            .await
            .map_err(service_error)
    }

    async fn dashboard(&self, tenant: Option<&str>, range: Range) -> Result<String, AppError> {
        let scope = dashboard_scope(&self.db, &session()?, tenant).await?;
        Ok(self.dashboard.html(&scope, range).to_string())
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
            dry_run: false,
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
