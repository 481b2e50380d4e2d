//! API keys: list, register (the client generated the key and sends only its hash and display
//! prefix), rotate with a grace period, revoke. Operator keys are registered only by the CLI.

use app::keys::{is_sha256_hex, KeyInfo, KeyKind};
use serde::Deserialize;
use serde_json::json;

use super::{dto, invalid, Actor, AdminService, Event, ServiceError};
use crate::propagation::Change;
use crate::store;
use crate::store::keys::{ApiKey, NewKey};

/// The longest grace period of a rotation: 30 days.
pub const MAX_GRACE_SECONDS: u64 = 30 * 86_400;

/// A key to register: the client generated it and sends only its hash and display prefix.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    pub kind: KeyKind,
    pub name: String,
    pub hash: String,
    pub prefix: String,
}

/// A rotation: the new key's hash and prefix, and how long the old one keeps working.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotateBody {
    pub hash: String,
    pub prefix: String,
    #[serde(default)]
    pub grace_seconds: u64,
}

fn check_key_material(kind: KeyKind, hash: &str, prefix: &str) -> Result<(), ServiceError> {
    if !is_sha256_hex(hash) {
        return Err(invalid(
            "hash",
            "must be the lower-case hex SHA-256 of the key (64 characters)",
        ));
    }
    if !prefix.starts_with(kind.key_prefix())
        || prefix.len() > 16
        || prefix.len() < kind.key_prefix().len() + 2
    {
        return Err(invalid(
            "prefix",
            format!(
                "must be the key's first characters: {}… (at most 16)",
                kind.key_prefix()
            ),
        ));
    }
    Ok(())
}

fn check_name(name: &str) -> Result<&str, ServiceError> {
    let name = name.trim();
    if name.is_empty() || name.len() > 100 {
        return Err(invalid("name", "must be 1 to 100 characters"));
    }
    Ok(name)
}

impl AdminService {
    pub async fn list_keys(
        &self,
        actor: &Actor,
        tenant_id: &str,
    ) -> Result<Vec<KeyInfo>, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        store::keys::list_for_tenant(&self.db, tenant_id)
            .await?
            .into_iter()
            .map(dto::key)
            .collect()
    }

    pub async fn create_key(
        &self,
        actor: &Actor,
        tenant_id: &str,
        body: &KeyBody,
    ) -> Result<KeyInfo, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        if body.kind == KeyKind::Operator {
            return Err(invalid(
                "kind",
                "operator keys are created on the server host: `sluice key create --operator`",
            ));
        }
        self.register_key(actor, Some(tenant_id), body).await
    }

    /// Registers an operator key (the CLI's `sluice key create --operator`).
    pub async fn create_operator_key(
        &self,
        actor: &Actor,
        body: &KeyBody,
    ) -> Result<KeyInfo, ServiceError> {
        actor.require_operator("create operator keys")?;
        if body.kind != KeyKind::Operator {
            return Err(invalid("kind", "must be `operator`"));
        }
        self.register_key(actor, None, body).await
    }

    async fn register_key(
        &self,
        actor: &Actor,
        tenant_id: Option<&str>,
        body: &KeyBody,
    ) -> Result<KeyInfo, ServiceError> {
        let name = check_name(&body.name)?;
        check_key_material(body.kind, &body.hash, &body.prefix)?;
        let mut tx = self.db.begin().await?;
        let key = store::keys::insert(
            &mut tx,
            &NewKey {
                tenant_id,
                kind: body.kind,
                name,
                prefix: &body.prefix,
                hash: &body.hash,
                expires_at: None,
            },
        )
        .await?;
        let detail = json!({ "kind": body.kind, "name": key.name, "prefix": key.prefix });
        self.commit(
            tx,
            actor,
            Event {
                tenant: tenant_id,
                action: "key.create",
                target: Some(&key.id),
                detail,
            },
            [Change::Key {
                hash: body.hash.clone(),
            }],
        )
        .await?;
        dto::key(key)
    }

    async fn tenant_key(
        &self,
        actor: &Actor,
        tenant_id: &str,
        key_id: &str,
    ) -> Result<ApiKey, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        match store::keys::get(&self.db, key_id).await? {
            Some(key) if key.tenant_id.as_deref() == Some(tenant_id) => Ok(key),
            _ => Err(ServiceError::NotFound("key")),
        }
    }

    /// Issues a new key in place of `key_id`; the old one works for `grace_seconds` more.
    /// The new key, the old key's expiry and the audit event commit together.
    pub async fn rotate_key(
        &self,
        actor: &Actor,
        tenant_id: &str,
        key_id: &str,
        body: &RotateBody,
    ) -> Result<KeyInfo, ServiceError> {
        let old = self.tenant_key(actor, tenant_id, key_id).await?;
        if !old.is_live(store::now_ms()) {
            return Err(invalid(
                "key",
                "a revoked or expired key cannot be rotated; create a new one",
            ));
        }
        let kind = old.kind().ok_or(ServiceError::NotFound("key"))?;
        check_key_material(kind, &body.hash, &body.prefix)?;
        if body.grace_seconds > MAX_GRACE_SECONDS {
            return Err(invalid(
                "grace_seconds",
                format!("must be at most {MAX_GRACE_SECONDS} (30 days)"),
            ));
        }
        let grace_until = store::now_ms() + (body.grace_seconds as i64) * 1000;
        let new = NewKey {
            tenant_id: Some(tenant_id),
            kind,
            name: &old.name,
            prefix: &body.prefix,
            hash: &body.hash,
            expires_at: None,
        };
        let mut tx = self.db.begin().await?;
        let key = store::keys::rotate(&mut tx, &old.id, &new, grace_until).await?;
        let detail = json!({ "replaced": old.id, "grace_seconds": body.grace_seconds, "prefix": key.prefix });
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action: "key.rotate",
                target: Some(&key.id),
                detail,
            },
            [
                Change::Key {
                    hash: old.hash.clone(),
                },
                Change::Key {
                    hash: body.hash.clone(),
                },
            ],
        )
        .await?;
        dto::key(key)
    }

    pub async fn revoke_key(
        &self,
        actor: &Actor,
        tenant_id: &str,
        key_id: &str,
    ) -> Result<KeyInfo, ServiceError> {
        let key = self.tenant_key(actor, tenant_id, key_id).await?;
        let mut tx = self.db.begin().await?;
        store::keys::revoke(&mut tx, &key.id).await?;
        let detail = json!({ "prefix": key.prefix });
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action: "key.revoke",
                target: Some(&key.id),
                detail,
            },
            [Change::Key {
                hash: key.hash.clone(),
            }],
        )
        .await?;
        store::keys::get(&self.db, &key.id)
            .await?
            .ok_or(ServiceError::NotFound("key"))
            .and_then(dto::key)
    }
}
