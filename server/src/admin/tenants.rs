//! Tenants: list, create, read, suspend and resume.

use app::tenants::{TenantInfo, TenantStatus};
use serde_json::json;

use super::{dto, invalid, Actor, AdminService, Event, ServiceError};
use crate::propagation::Change;
use crate::store;

impl AdminService {
    pub async fn list_tenants(&self, actor: &Actor) -> Result<Vec<TenantInfo>, ServiceError> {
        actor.require_operator("manage tenants")?;
        let tenants = store::tenants::list(&self.db).await?;
        Ok(tenants.into_iter().map(dto::tenant).collect())
    }

    pub async fn create_tenant(
        &self,
        actor: &Actor,
        name: &str,
    ) -> Result<TenantInfo, ServiceError> {
        actor.require_operator("manage tenants")?;
        let name = name.trim();
        if name.is_empty() || name.len() > 100 {
            return Err(invalid("name", "must be 1 to 100 characters"));
        }
        if let Some(problem) = app::text::unreadable(name) {
            return Err(invalid("name", problem));
        }
        let mut tx = self.db.begin().await?;
        let tenant = store::tenants::insert(&mut tx, name).await?;
        let detail = json!({ "name": name });
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(&tenant.id),
                action: "tenant.create",
                target: Some(&tenant.id),
                detail,
            },
            [],
        )
        .await?;
        Ok(dto::tenant(tenant))
    }

    pub async fn get_tenant(
        &self,
        actor: &Actor,
        tenant_id: &str,
    ) -> Result<TenantInfo, ServiceError> {
        Ok(dto::tenant(self.authorize(actor, tenant_id).await?))
    }

    /// Suspends (`active = false`) or resumes a tenant.
    pub async fn set_tenant_active(
        &self,
        actor: &Actor,
        tenant_id: &str,
        active: bool,
    ) -> Result<TenantInfo, ServiceError> {
        actor.require_operator("manage tenants")?;
        let (status, action) = if active {
            (TenantStatus::Active, "tenant.resume")
        } else {
            (TenantStatus::Suspended, "tenant.suspend")
        };
        let mut tx = self.db.begin().await?;
        if !store::tenants::set_status(&mut tx, tenant_id, status).await? {
            return Err(ServiceError::NotFound("tenant"));
        }
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action,
                target: Some(tenant_id),
                detail: json!({}),
            },
            [Change::Tenant {
                id: tenant_id.to_owned(),
            }],
        )
        .await?;
        store::tenants::get(&self.db, tenant_id)
            .await?
            .map(dto::tenant)
            .ok_or(ServiceError::NotFound("tenant"))
    }
}
