//! The audit log: a tenant's events (its admins and operators), or the whole platform's
//! (operators only).

use app::audit::{AuditEntry, AuditFilter, AUDIT_PAGE};

use super::{dto, invalid, Actor, AdminService, ServiceError};
use crate::store;

impl AdminService {
    /// A tenant's events, or (`None`, operators only) the whole platform's; newest first.
    pub async fn audit_events(
        &self,
        actor: &Actor,
        tenant_id: Option<&str>,
        filter: &AuditFilter,
    ) -> Result<Vec<AuditEntry>, ServiceError> {
        match tenant_id {
            Some(t) => {
                self.authorize(actor, t).await?;
            }
            None => actor.require_operator("read the platform's audit log")?,
        }
        if let (Some(since), Some(until)) = (filter.since_ms, filter.until_ms) {
            if since > until {
                return Err(invalid("since", "the start of the range is after its end"));
            }
        }
        let events = store::audit::list(&self.db, tenant_id, filter, AUDIT_PAGE as i64).await?;
        Ok(events.into_iter().map(dto::audit).collect())
    }
}
