//! Per-subject overrides of a rule: list, set, delete. Each change is audited and announced as
//! a change of the tenant, so every instance compiles it into the tenant within a second and
//! resolves it there, with no extra limiter call (`CompiledTenant::for_subject`).

use app::rules::{OverrideBody, OverrideInfo, MAX_OVERRIDES_PER_RULE};
use serde_json::json;

use super::{Actor, AdminService, Event, ServiceError};
use crate::propagation::Change;
use crate::store;

impl AdminService {
    /// The overrides of rule `rule_id`, by subject.
    pub async fn list_overrides(
        &self,
        actor: &Actor,
        tenant_id: &str,
        rule_id: &str,
    ) -> Result<Vec<OverrideInfo>, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        store::rules::get(&self.db, tenant_id, rule_id)
            .await?
            .ok_or(ServiceError::NotFound("rule"))?;
        Ok(store::overrides::list_for_rule(&self.db, tenant_id, rule_id).await?)
    }

    /// Sets the override of `body.subject` on rule `rule_id`: creates it, or replaces the
    /// subject's override. Returns it and whether it is new. A rule has at most
    /// [`MAX_OVERRIDES_PER_RULE`], counted after locking the tenant's row.
    pub async fn set_override(
        &self,
        actor: &Actor,
        tenant_id: &str,
        rule_id: &str,
        body: &OverrideBody,
    ) -> Result<(OverrideInfo, bool), ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let mut tx = self.db.begin().await?;
        if !store::tenants::lock(&mut tx, tenant_id).await? {
            return Err(ServiceError::NotFound("tenant"));
        }
        let rule = store::rules::get(&mut tx, tenant_id, rule_id)
            .await?
            .ok_or(ServiceError::NotFound("rule"))?;
        let problems = body.problems(&rule.body);
        if !problems.is_empty() {
            return Err(ServiceError::Invalid(problems));
        }
        let existing = store::overrides::list_for_rule(&mut tx, tenant_id, rule_id).await?;
        let before = existing.iter().find(|o| o.body.subject == body.subject);
        if before.is_none() && existing.len() >= MAX_OVERRIDES_PER_RULE {
            return Err(ServiceError::Conflict(format!(
                "rule {:?} has {MAX_OVERRIDES_PER_RULE} overrides, the most a rule may have; delete one, or cover several subjects with a prefix (`acme-*`)",
                rule.body.name
            )));
        }
        let set = store::overrides::set(&mut tx, tenant_id, rule_id, body, before).await?;
        let created = before.is_none();
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action: "override.set",
                target: Some(rule_id),
                detail: json!({ "policy": rule.body.name, "override": body, "before": before.map(|o| &o.body) }),
            },
            [Change::Tenant {
                id: tenant_id.to_owned(),
            }],
        )
        .await?;
        Ok((set, created))
    }

    /// Deletes override `id` of rule `rule_id`: the subject is decided by the rule again.
    pub async fn delete_override(
        &self,
        actor: &Actor,
        tenant_id: &str,
        rule_id: &str,
        id: &str,
    ) -> Result<(), ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let mut tx = self.db.begin().await?;
        let deleted = store::overrides::delete(&mut tx, tenant_id, rule_id, id)
            .await?
            .ok_or(ServiceError::NotFound("override"))?;
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action: "override.delete",
                target: Some(rule_id),
                detail: json!({ "override": deleted.body }),
            },
            [Change::Tenant {
                id: tenant_id.to_owned(),
            }],
        )
        .await?;
        Ok(())
    }
}
