//! Tenants: the operator's list of them, creating one, suspending and resuming it, and
//! giving it its first admin.

mod view;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

pub use view::{TenantTabs, TenantsPage};

/// A tenant as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantInfo {
    pub id: String,
    pub name: String,
    /// `active` or `suspended`.
    pub status: String,
    pub created_at: i64,
}

impl TenantInfo {
    pub fn is_active(&self) -> bool {
        self.status == "active"
    }
}

/// The shortest password the console accepts for a new account.
pub const MIN_PASSWORD_CHARS: usize = 12;

/// Every tenant (operators only).
#[server(prefix = "/api", endpoint = "tenants/list", input = Json)]
pub async fn list_tenants() -> Result<Vec<TenantInfo>, AppError> {
    crate::port::console()?.list_tenants().await
}

/// One tenant: operators may read any, a tenant admin only their own.
#[server(prefix = "/api", endpoint = "tenants/get", input = Json)]
pub async fn get_tenant(tenant: String) -> Result<TenantInfo, AppError> {
    crate::port::console()?.get_tenant(&tenant).await
}

/// Creates a tenant (operators only).
#[server(prefix = "/api", endpoint = "tenants/create", input = Json)]
pub async fn create_tenant(name: String) -> Result<TenantInfo, AppError> {
    crate::port::console()?.create_tenant(&name).await
}

/// Suspends (`active = false`) or resumes a tenant (operators only).
#[server(prefix = "/api", endpoint = "tenants/set_active", input = Json)]
pub async fn set_tenant_active(tenant: String, active: bool) -> Result<TenantInfo, AppError> {
    crate::port::console()?
        .set_tenant_active(&tenant, active)
        .await
}

/// Creates a tenant admin account (operators only).
#[server(prefix = "/api", endpoint = "tenants/add_admin", input = Json)]
pub async fn add_tenant_admin(
    tenant: String,
    email: String,
    password: String,
) -> Result<(), AppError> {
    crate::port::console()?
        .add_tenant_admin(&tenant, &email, &password)
        .await
}
