//! The admin service: every admin operation, written once, for every transport (the REST API,
//! the console, the dashboard stream and the CLI). It owns all authorisation: who may act on
//! which tenant ([`AdminService::authorize`], suspension included) and which operations are
//! for operators only. Each change and its audit event are written in one transaction, and
//! only once it commits is the change announced to every instance.
//!
//! One module per resource: [`tenants`], [`quotas`], [`rules`], [`keys`], [`users`], [`audit`],
//! [`simulate`], [`top_denied`]; [`dto`] turns store rows into the one wire shape (`app`'s DTOs) that REST and
//! the console both send.

pub mod audit;
pub mod dto;
pub mod import;
pub mod keys;
pub mod overrides;
pub mod quotas;
pub mod rule_files;
pub mod rules;
pub mod simulate;
pub mod tenants;
pub mod top_denied;
pub mod users;

use app::rules::FieldError;
use app::tenants::TenantStatus;

use crate::cache::Caches;
use crate::decide::{CompiledTenant, DecideError, Decider};
use crate::limiter::{Limiter, LimiterError, MemoryBackend};
use crate::propagation::{Bus, Change};
use crate::redis_client::RedisClient;
use crate::store::tenants::Tenant;
use crate::store::{self, Db, StoreError, Tx};
use crate::telemetry::Metrics;

/// Who is acting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// Acts on every tenant.
    Operator { label: String },
    /// Acts inside one tenant only.
    TenantAdmin { tenant_id: String, label: String },
    /// The `sluice` command on the server host: acts as an operator, audited as `cli`.
    Cli,
}

impl Actor {
    /// How the audit log names the actor.
    pub fn label(&self) -> &str {
        match self {
            Actor::Operator { label } | Actor::TenantAdmin { label, .. } => label,
            Actor::Cli => "cli",
        }
    }

    /// Another tenant's resources do not exist for a tenant admin.
    fn may_access(&self, tenant_id: &str) -> Result<(), ServiceError> {
        match self {
            Actor::Operator { .. } | Actor::Cli => Ok(()),
            Actor::TenantAdmin { tenant_id: own, .. } if own == tenant_id => Ok(()),
            Actor::TenantAdmin { .. } => Err(ServiceError::NotFound("tenant")),
        }
    }

    fn require_operator(&self, what: &str) -> Result<(), ServiceError> {
        match self {
            Actor::Operator { .. } | Actor::Cli => Ok(()),
            Actor::TenantAdmin { .. } => {
                Err(ServiceError::Forbidden(format!("only operators {what}")))
            }
        }
    }
}

/// Why an admin operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    Forbidden(String),
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// The change is valid but collides with what exists (a cap or a quota reached).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Limiter(#[from] LimiterError),
    /// A failure that is neither the caller's nor a dependency's; details are logged.
    #[error("{0}")]
    Internal(String),
}

impl From<DecideError> for ServiceError {
    fn from(e: DecideError) -> Self {
        match e {
            DecideError::Input(e) => invalid(e.field, e.message),
            DecideError::Store(e) => ServiceError::Store(e),
            DecideError::Limiter(e) => ServiceError::Limiter(e),
            DecideError::Unauthorized => ServiceError::NotFound("key"),
            DecideError::Forbidden(m) => ServiceError::Forbidden(m),
            DecideError::Undecided(m) => ServiceError::Internal(m),
        }
    }
}

fn invalid(field: &str, message: impl Into<String>) -> ServiceError {
    ServiceError::Invalid(vec![FieldError::new(field, message)])
}

/// The audit event that goes with a change.
#[derive(Debug)]
struct Event<'a> {
    tenant: Option<&'a str>,
    action: &'a str,
    target: Option<&'a str>,
    detail: serde_json::Value,
}

/// The admin service. Cloning shares it.
#[derive(Debug, Clone)]
pub struct AdminService {
    db: Db,
    bus: Bus<CompiledTenant>,
    decider: Decider,
}

impl AdminService {
    pub fn new(db: Db, bus: Bus<CompiledTenant>, decider: Decider) -> Self {
        Self { db, bus, decider }
    }

    /// The service of a command run on the server host (the CLI): no instance to announce
    /// changes to (servers notice a new key or user on their next lookup), no counters.
    pub fn offline(db: Db) -> Self {
        Self::offline_announcing(db, None)
    }

    /// The service of a command run on the server host that announces its changes on
    /// `redis` (the instances' channel), so running instances drop what changed at once.
    pub fn offline_announcing(db: Db, redis: Option<RedisClient>) -> Self {
        let limiter = Limiter::InProcess(MemoryBackend::new());
        let bus = Bus::new(Caches::default(), redis);
        let metrics = Metrics::new("cli", db.dialect().as_str(), limiter.kind().as_str());
        Self::new(db, bus, Decider::new(limiter, metrics, Default::default()))
    }

    /// Whether `actor` may act on `tenant_id`, and the tenant if so: the one place that
    /// decides tenant access for every transport. A tenant admin sees only their own tenant
    /// (any other is `NotFound`, so its existence is not revealed), and nothing of it while it
    /// is suspended (`Forbidden`). Operators act on every tenant, suspended or not.
    pub async fn authorize(&self, actor: &Actor, tenant_id: &str) -> Result<Tenant, ServiceError> {
        actor.may_access(tenant_id)?;
        let tenant = store::tenants::get(&self.db, tenant_id)
            .await?
            .ok_or(ServiceError::NotFound("tenant"))?;
        if matches!(actor, Actor::TenantAdmin { .. }) && tenant.status != TenantStatus::Active {
            return Err(ServiceError::Forbidden(
                "your tenant is suspended; its keys cannot be used until an operator resumes it"
                    .into(),
            ));
        }
        Ok(tenant)
    }

    /// Which dashboard `actor` may watch: the fleet's (`tenant` = `None`, operators only) or a
    /// tenant's ([`AdminService::authorize`]). Returns the tenant id of a tenant dashboard.
    pub async fn authorize_dashboard(
        &self,
        actor: &Actor,
        tenant: Option<&str>,
    ) -> Result<Option<String>, ServiceError> {
        match tenant {
            None => {
                actor.require_operator(
                    "see the fleet dashboard; your tenant's dashboard is under Dashboard",
                )?;
                Ok(None)
            }
            Some(id) => Ok(Some(self.authorize(actor, id).await?.id)),
        }
    }

    /// Records `event` inside `tx`, commits the change with it, and only then announces
    /// `changes` to the caches (this instance's at once, the others' on the bus).
    async fn commit(
        &self,
        mut tx: Tx,
        actor: &Actor,
        event: Event<'_>,
        changes: impl IntoIterator<Item = Change>,
    ) -> Result<(), ServiceError> {
        store::audit::record(
            &mut tx,
            event.tenant,
            actor.label(),
            event.action,
            event.target,
            &event.detail,
        )
        .await?;
        tx.commit().await?;
        for change in changes {
            self.bus.publish(change).await;
        }
        Ok(())
    }
}
