//! Tenants: the operator's list of them, creating one, suspending and resuming it, and
//! giving it its first admin.

pub mod view;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// Whether a tenant's keys work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantStatus {
    Active,
    /// Every key of the tenant is refused (403), and its admins may only read that it is.
    Suspended,
}

impl TenantStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TenantStatus::Active => "active",
            TenantStatus::Suspended => "suspended",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [TenantStatus::Active, TenantStatus::Suspended]
            .into_iter()
            .find(|t| t.as_str() == s)
    }
}

/// A stored value that names no status (read back from the database).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tenant status {0:?}")]
pub struct UnknownStatus(pub String);

impl TryFrom<String> for TenantStatus {
    type Error = UnknownStatus;

    fn try_from(s: String) -> Result<Self, UnknownStatus> {
        Self::parse(&s).ok_or(UnknownStatus(s))
    }
}

impl std::fmt::Display for TenantStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tenant: the one wire shape of the admin API and the console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantInfo {
    pub id: String,
    pub name: String,
    pub status: TenantStatus,
    pub created_at: i64,
    pub updated_at: i64,
}

impl TenantInfo {
    pub fn is_active(&self) -> bool {
        self.status == TenantStatus::Active
    }
}

/// The shortest password the console accepts for a new account.
pub const MIN_PASSWORD_CHARS: usize = 12;

/// What a new password being typed still lacks ("at least 12 characters (5 so far)"), or
/// `None` when it is empty or long enough.
pub fn password_too_short(typed: &str) -> Option<String> {
    let count = typed.chars().count();
    (count > 0 && count < MIN_PASSWORD_CHARS)
        .then(|| format!("at least {MIN_PASSWORD_CHARS} characters ({count} so far)"))
}

/// What this feature's server functions need from the server (which implements it). Acting
/// calls act as the session's user: an operator on any tenant, a tenant admin on their own
/// tenant only (any other tenant is `NotFound`); without a session they are `Unauthorized`.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait TenantsPort: Send + Sync + 'static {
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
}

/// Every tenant (operators only).
#[server(prefix = "/api", endpoint = "tenants/list", input = Json)]
pub async fn list_tenants() -> Result<Vec<TenantInfo>, AppError> {
    crate::context::port::<dyn TenantsPort>()?
        .list_tenants()
        .await
}

/// One tenant: operators may read any, a tenant admin only their own.
#[server(prefix = "/api", endpoint = "tenants/get", input = Json)]
pub async fn get_tenant(tenant: String) -> Result<TenantInfo, AppError> {
    crate::context::port::<dyn TenantsPort>()?
        .get_tenant(&tenant)
        .await
}

/// Creates a tenant (operators only).
#[server(prefix = "/api", endpoint = "tenants/create", input = Json)]
pub async fn create_tenant(name: String) -> Result<TenantInfo, AppError> {
    crate::context::port::<dyn TenantsPort>()?
        .create_tenant(&name)
        .await
}

/// Suspends (`active = false`) or resumes a tenant (operators only).
#[server(prefix = "/api", endpoint = "tenants/set_active", input = Json)]
pub async fn set_tenant_active(tenant: String, active: bool) -> Result<TenantInfo, AppError> {
    crate::context::port::<dyn TenantsPort>()?
        .set_tenant_active(&tenant, active)
        .await
}

/// Creates a tenant admin account: operators for any tenant, a tenant admin for their own.
#[server(prefix = "/api", endpoint = "tenants/add_admin", input = Json)]
pub async fn add_tenant_admin(
    tenant: String,
    email: String,
    password: String,
) -> Result<(), AppError> {
    crate::context::port::<dyn TenantsPort>()?
        .add_tenant_admin(&tenant, &email, &password)
        .await
}
