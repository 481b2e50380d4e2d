//! The port between the console and the server: one service trait that every server
//! function calls. The `server` crate implements it over its store, limiter and metrics, and
//! provides it to server functions through Leptos context as a [`SharedConsole`].

use std::sync::Arc;

use leptos::prelude::use_context;

use crate::audit::{AuditEntry, AuditFilter};
use crate::auth::SignedInUser;
use crate::dashboard::Range;
use crate::error::AppError;
use crate::keys::{KeyInfo, KeyKind};
use crate::rules::{RuleBody, RuleInfo};
use crate::simulate::{SimulateInput, Simulation};
use crate::status::Status;
use crate::tenants::TenantInfo;

/// Everything the console's server functions need from the server.
#[async_trait::async_trait]
pub trait Console: Send + Sync + 'static {
    /// The instance's configuration and whether its dependencies answer.
    async fn status(&self) -> Result<Status, AppError>;

    /// Checks the credentials and starts a session for the current request.
    async fn sign_in(&self, email: &str, password: &str) -> Result<SignedInUser, AppError>;

    /// Ends the current request's session.
    async fn sign_out(&self) -> Result<(), AppError>;

    /// The user of the current request's session.
    async fn current_user(&self) -> Result<Option<SignedInUser>, AppError>;

    // Everything below acts as the session's user: an operator on any tenant, a tenant admin
    // on their own tenant only (any other tenant is `NotFound`). Without a session it is
    // `Unauthorized`.

    async fn list_tenants(&self) -> Result<Vec<TenantInfo>, AppError>;
    async fn get_tenant(&self, tenant: &str) -> Result<TenantInfo, AppError>;
    async fn create_tenant(&self, name: &str) -> Result<TenantInfo, AppError>;
    async fn set_tenant_active(&self, tenant: &str, active: bool) -> Result<TenantInfo, AppError>;
    async fn add_tenant_admin(
        &self,
        tenant: &str,
        email: &str,
        password: &str,
    ) -> Result<(), AppError>;

    async fn list_rules(&self, tenant: &str) -> Result<Vec<RuleInfo>, AppError>;
    async fn save_rule(
        &self,
        tenant: &str,
        id: Option<&str>,
        body: RuleBody,
    ) -> Result<RuleInfo, AppError>;
    async fn delete_rule(&self, tenant: &str, id: &str) -> Result<(), AppError>;

    async fn list_keys(&self, tenant: &str) -> Result<Vec<KeyInfo>, AppError>;
    async fn create_key(
        &self,
        tenant: &str,
        kind: KeyKind,
        name: &str,
        hash: &str,
        prefix: &str,
    ) -> Result<KeyInfo, AppError>;
    async fn rotate_key(
        &self,
        tenant: &str,
        key: &str,
        hash: &str,
        prefix: &str,
        grace_seconds: u64,
    ) -> Result<KeyInfo, AppError>;
    async fn revoke_key(&self, tenant: &str, key: &str) -> Result<KeyInfo, AppError>;

    /// A tenant's events, or the platform's (`None`, operators only).
    async fn audit(
        &self,
        tenant: Option<&str>,
        filter: AuditFilter,
    ) -> Result<Vec<AuditEntry>, AppError>;

    async fn simulate(&self, tenant: &str, input: SimulateInput) -> Result<Simulation, AppError>;

    /// The dashboard of the fleet (`None`, operators) or of a tenant, as HTML.
    async fn dashboard(&self, tenant: Option<&str>, range: Range) -> Result<String, AppError>;
}

/// The service as it is stored in Leptos context.
#[derive(Clone)]
pub struct SharedConsole(pub Arc<dyn Console>);

impl std::fmt::Debug for SharedConsole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedConsole")
    }
}

/// The service provided by the server, from inside a server function.
pub fn console() -> Result<Arc<dyn Console>, AppError> {
    use_context::<SharedConsole>()
        .map(|c| c.0)
        .ok_or(AppError::Internal)
}
