//! The audit log: who changed what and when, filterable by actor, action and time. A tenant
//! admin sees their own tenant's events only; operators also see the whole platform's.

pub mod describe;
pub mod view;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// Every action the audit log records.
pub const ACTIONS: [&str; 24] = [
    "tenant.create",
    "tenant.suspend",
    "tenant.resume",
    "tenant.quotas",
    "user.create",
    "user.password",
    "user.disable",
    "user.enable",
    "user.reset_password",
    "user.delete",
    "user.sign_out",
    "user.sign_out_others",
    "user.sign_in",
    "user.sign_in_failed",
    "rule.create",
    "rule.update",
    "rule.delete",
    "rule.reset",
    "rules.import",
    "override.set",
    "override.delete",
    "key.create",
    "key.rotate",
    "key.revoke",
];

/// One recorded change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: i64,
    pub tenant_id: Option<String>,
    /// `user:<email>` for console users, `key:<prefix>` for API keys, `cli` for the host.
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    /// JSON text with the details of the change.
    pub detail: String,
    pub at: i64,
}

/// Which events to list; every field narrows the list, `None` does not filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditFilter {
    /// Actors containing this text, in any case, e.g. `ops@` or `user:ops@example.com`.
    #[serde(default)]
    pub actor: Option<String>,
    /// The exact action, e.g. `key.revoke`.
    #[serde(default)]
    pub action: Option<String>,
    /// Events at or after this Unix time (ms).
    #[serde(default)]
    pub since_ms: Option<i64>,
    /// Events at or before this Unix time (ms).
    #[serde(default)]
    pub until_ms: Option<i64>,
    /// Events older than the event with this id: the next page after a page that ended
    /// with it.
    #[serde(default)]
    pub before_id: Option<i64>,
}

/// The most events one listing returns; a full page has older events after it (ask with
/// [`AuditFilter::before_id`] set to its last event's id).
pub const AUDIT_PAGE: usize = 100;

impl AuditFilter {
    /// Drops empty strings, so a blank form field means "any".
    pub fn normalized(mut self) -> Self {
        let blank = |s: &Option<String>| s.as_deref().is_none_or(|s| s.trim().is_empty());
        if blank(&self.actor) {
            self.actor = None;
        }
        if blank(&self.action) {
            self.action = None;
        }
        self.actor = self.actor.map(|s| s.trim().to_owned());
        self.action = self.action.map(|s| s.trim().to_owned());
        self
    }
}

/// What this feature's server functions need from the server (which implements it). Acting
/// calls act as the session's user: an operator on any tenant, a tenant admin on their own
/// tenant only (any other tenant is `NotFound`); without a session they are `Unauthorized`.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait AuditPort: Send + Sync + 'static {
    /// A tenant's events, or the platform's (`None`, operators only).
    async fn audit(
        &self,
        tenant: Option<&str>,
        filter: AuditFilter,
    ) -> Result<Vec<AuditEntry>, AppError>;
}

/// A tenant's events, or (with `tenant: None`, operators only) the whole platform's; newest
/// first, at most [`AUDIT_PAGE`].
#[server(prefix = "/api", endpoint = "audit/list", input = Json)]
pub async fn list_audit(
    tenant: Option<String>,
    filter: AuditFilter,
) -> Result<Vec<AuditEntry>, AppError> {
    crate::context::port::<dyn AuditPort>()?
        .audit(tenant.as_deref(), filter.normalized())
        .await
}
