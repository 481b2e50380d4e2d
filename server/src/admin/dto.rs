//! Store rows to the wire: the one place where a row becomes the DTO (from `app`) that the
//! admin API and the console both serialise, so a rule, a key or a tenant has one JSON shape.

use app::audit::AuditEntry;
use app::keys::{KeyInfo, KeyKind};
use app::rules::RuleInfo;
use app::tenants::TenantInfo;

use super::ServiceError;
use crate::store::audit::AuditEvent;
use crate::store::keys::ApiKey;
use crate::store::rules::Rule;
use crate::store::tenants::Tenant;
use crate::store::{self, StoreError};

pub fn tenant(t: Tenant) -> TenantInfo {
    TenantInfo {
        id: t.id,
        name: t.name,
        status: t.status,
        created_at: t.created_at,
        updated_at: t.updated_at,
    }
}

pub fn rule(r: Rule) -> RuleInfo {
    RuleInfo {
        id: r.id,
        tenant_id: r.tenant_id,
        body: r.body,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

/// A key as listed now: its state is the state at this moment, so that the page the server
/// renders and the page the browser hydrates agree.
pub fn key(k: ApiKey) -> Result<KeyInfo, ServiceError> {
    let kind = KeyKind::parse(&k.kind).ok_or_else(|| {
        ServiceError::Store(StoreError::Corrupt(format!("api_keys.kind = {:?}", k.kind)))
    })?;
    let mut info = KeyInfo {
        id: k.id,
        tenant_id: k.tenant_id,
        kind,
        name: k.name,
        prefix: k.prefix,
        created_at: k.created_at,
        expires_at: k.expires_at,
        revoked_at: k.revoked_at,
        last_used_at: k.last_used_at,
        replaced_by: k.replaced_by,
        state: app::keys::KeyState::Live,
        listed_at: store::now_ms(),
    };
    info.state = info.state_at(info.listed_at);
    Ok(info)
}

pub fn audit(e: AuditEvent) -> AuditEntry {
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
