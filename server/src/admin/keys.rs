//! API keys: list, register (the client generated the key and sends only its hash and display
//! prefix), rotate with a grace period, revoke, and expire at a set time. Operator keys are
//! registered only by the CLI; operators list, rotate and revoke them from the CLI or the API.

use app::keys::{is_sha256_hex, KeyInfo, KeyKind, DISPLAY_CHARS};
use serde::Deserialize;
use serde_json::json;

use super::quotas::{self, Quotas};
use super::{dto, invalid, Actor, AdminService, Event, ServiceError};
use crate::propagation::Change;
use crate::store;
use crate::store::keys::{ApiKey, NewKey};

pub use app::keys::MAX_GRACE_SECONDS;

/// A key to register: the client generated it and sends only its hash and display prefix.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    pub kind: KeyKind,
    pub name: String,
    pub hash: String,
    pub prefix: String,
    /// The key stops working this many seconds after it is registered (none: when revoked).
    #[serde(default)]
    pub expires_in_seconds: Option<u64>,
}

/// The longest a key may be set to live when it is registered: 10 years.
pub const MAX_LIFETIME_SECONDS: u64 = 10 * 365 * 86_400;

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
    let shaped = prefix
        .strip_prefix(kind.key_prefix())
        .is_some_and(|random| {
            prefix.len() == DISPLAY_CHARS
                && random
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
    if !shaped {
        return Err(invalid(
            "prefix",
            format!(
                "must be the key's first {DISPLAY_CHARS} characters: `{}` and lower-case hex \
                 digits, as a key of this kind starts",
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
    if let Some(problem) = app::text::unreadable(name) {
        return Err(invalid("name", problem));
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
        let expires_at = match body.expires_in_seconds {
            None => None,
            Some(seconds) if (1..=MAX_LIFETIME_SECONDS).contains(&seconds) => {
                Some(store::now_ms() + i64::try_from(seconds).unwrap_or(i64::MAX / 2_000) * 1000)
            }
            Some(_) => {
                return Err(invalid(
                    "expires_in_seconds",
                    format!("must be from 1 to {MAX_LIFETIME_SECONDS} (10 years)"),
                ))
            }
        };
        let mut tx = self.db.begin().await?;
        if let Some(tenant_id) = tenant_id {
            if !store::tenants::lock(&mut tx, tenant_id).await? {
                return Err(ServiceError::NotFound("tenant"));
            }
            let quotas = Quotas::from(store::quotas::get(&mut tx, tenant_id).await?);
            let live = store::keys::count_live(&mut tx, tenant_id).await?;
            quotas::within(live, quotas.max_keys, "working keys")?;
        }
        let key = store::keys::insert(
            &mut tx,
            &NewKey {
                tenant_id,
                kind: body.kind,
                name,
                prefix: &body.prefix,
                hash: &body.hash,
                expires_at,
            },
        )
        .await?;
        let detail = json!({ "kind": body.kind, "name": key.name, "prefix": key.prefix, "expires_at": expires_at });
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
        self.rotate(actor, old, body).await
    }

    /// Any key by its id, tenant's or operator's (operators only: the CLI finds a key to
    /// rotate or revoke this way).
    pub async fn key_by_id(&self, actor: &Actor, key_id: &str) -> Result<KeyInfo, ServiceError> {
        actor.require_operator("look keys up by id")?;
        store::keys::get(&self.db, key_id)
            .await?
            .ok_or(ServiceError::NotFound("key"))
            .and_then(dto::key)
    }

    /// The operator keys, newest first (operators only).
    pub async fn list_operator_keys(&self, actor: &Actor) -> Result<Vec<KeyInfo>, ServiceError> {
        actor.require_operator("list operator keys")?;
        store::keys::list_operators(&self.db)
            .await?
            .into_iter()
            .map(dto::key)
            .collect()
    }

    async fn operator_key(&self, actor: &Actor, key_id: &str) -> Result<ApiKey, ServiceError> {
        actor.require_operator("manage operator keys")?;
        match store::keys::get(&self.db, key_id).await? {
            Some(key) if key.tenant_id.is_none() => Ok(key),
            _ => Err(ServiceError::NotFound("key")),
        }
    }

    /// Rotates an operator key (operators only), as [`Self::rotate_key`] does a tenant's.
    pub async fn rotate_operator_key(
        &self,
        actor: &Actor,
        key_id: &str,
        body: &RotateBody,
    ) -> Result<KeyInfo, ServiceError> {
        let old = self.operator_key(actor, key_id).await?;
        self.rotate(actor, old, body).await
    }

    /// Revokes an operator key at once (operators only); every instance drops it.
    pub async fn revoke_operator_key(
        &self,
        actor: &Actor,
        key_id: &str,
    ) -> Result<KeyInfo, ServiceError> {
        let key = self.operator_key(actor, key_id).await?;
        self.revoke(actor, key).await
    }

    async fn rotate(
        &self,
        actor: &Actor,
        old: ApiKey,
        body: &RotateBody,
    ) -> Result<KeyInfo, ServiceError> {
        let tenant_id = old.tenant_id.as_deref();
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
            tenant_id,
            kind,
            name: &old.name,
            prefix: &body.prefix,
            hash: &body.hash,
            expires_at: None,
        };
        let mut tx = self.db.begin().await?;
        let Some(key) = store::keys::rotate(&mut tx, &old.id, &new, grace_until).await? else {
            return Err(ServiceError::Conflict(
                "the key was revoked or expired while it was being rotated; nothing changed".into(),
            ));
        };
        let detail = json!({ "replaced": old.id, "grace_seconds": body.grace_seconds, "prefix": key.prefix });
        self.commit(
            tx,
            actor,
            Event {
                tenant: tenant_id,
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
        self.revoke(actor, key).await
    }

    async fn revoke(&self, actor: &Actor, key: ApiKey) -> Result<KeyInfo, ServiceError> {
        let mut tx = self.db.begin().await?;
        store::keys::revoke(&mut tx, &key.id).await?;
        let detail = json!({ "prefix": key.prefix });
        self.commit(
            tx,
            actor,
            Event {
                tenant: key.tenant_id.as_deref(),
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
