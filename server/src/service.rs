//! The admin service: every admin operation, its authorisation and its audit event, written
//! once. `/v1/admin/*` calls it; the console's server functions will call the same service.

use app::audit::AuditFilter;
use app::keys::{is_sha256_hex, KeyKind};
use app::rules::{check_text, FieldError, MatchKind, RuleBody, MAX_COST};
use app::simulate::{SimulateInput, SimulatedRule, Simulation};
use serde::Deserialize;
use serde_json::json;

use crate::cache::CompiledTenant;
use crate::limiter::{CheckRequest, Limiter, LimiterError};
use crate::propagation::{Bus, Change};
use crate::store::keys::{ApiKey, NewKey};
use crate::store::rules::Rule;
use crate::store::tenants::Tenant;
use crate::store::{self, audit, Db, StoreError};

/// At most this many rules of one match (`all`, `default`, or one route) per tenant, so
/// that a check never evaluates more than [`crate::limiter::MAX_RULES`].
pub const MAX_RULES_PER_MATCH: usize = 4;
/// The longest grace period of a rotation: 30 days.
pub const MAX_GRACE_SECONDS: u64 = 30 * 86_400;
/// The most audit events one listing returns.
pub const AUDIT_PAGE: i64 = 500;

/// Who is acting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// Acts on every tenant.
    Operator { label: String },
    /// Acts inside one tenant only.
    TenantAdmin { tenant_id: String, label: String },
}

impl Actor {
    pub fn label(&self) -> &str {
        match self {
            Actor::Operator { label } | Actor::TenantAdmin { label, .. } => label,
        }
    }

    /// Another tenant's resources do not exist for a tenant admin.
    fn may_access(&self, tenant_id: &str) -> Result<(), ServiceError> {
        match self {
            Actor::Operator { .. } => Ok(()),
            Actor::TenantAdmin { tenant_id: own, .. } if own == tenant_id => Ok(()),
            Actor::TenantAdmin { .. } => Err(ServiceError::NotFound("tenant")),
        }
    }

    fn require_operator(&self) -> Result<(), ServiceError> {
        match self {
            Actor::Operator { .. } => Ok(()),
            Actor::TenantAdmin { .. } => Err(ServiceError::Forbidden(
                "only operators manage tenants".into(),
            )),
        }
    }
}

/// Why an admin operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    Forbidden(String),
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Limiter(#[from] LimiterError),
    /// A failure that is neither the caller's nor a dependency's; details are logged.
    #[error("{0}")]
    Internal(String),
}

fn invalid(field: &str, message: impl Into<String>) -> ServiceError {
    ServiceError::Invalid(vec![FieldError::new(field, message)])
}

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

/// The admin service.
#[derive(Debug, Clone)]
pub struct AdminService {
    db: Db,
    bus: Bus,
    limiter: Limiter,
}

impl AdminService {
    pub fn new(db: Db, bus: Bus, limiter: Limiter) -> Self {
        Self { db, bus, limiter }
    }

    async fn tenant(&self, actor: &Actor, tenant_id: &str) -> Result<Tenant, ServiceError> {
        actor.may_access(tenant_id)?;
        store::tenants::get(&self.db, tenant_id)
            .await?
            .ok_or(ServiceError::NotFound("tenant"))
    }

    async fn audit(
        &self,
        tenant: Option<&str>,
        actor: &Actor,
        action: &str,
        target: Option<&str>,
        detail: serde_json::Value,
    ) -> Result<(), ServiceError> {
        audit::record(&self.db, tenant, actor.label(), action, target, &detail).await?;
        Ok(())
    }

    // ---- tenants (operators) ----

    pub async fn list_tenants(&self, actor: &Actor) -> Result<Vec<Tenant>, ServiceError> {
        actor.require_operator()?;
        Ok(store::tenants::list(&self.db).await?)
    }

    pub async fn create_tenant(&self, actor: &Actor, name: &str) -> Result<Tenant, ServiceError> {
        actor.require_operator()?;
        let name = name.trim();
        if name.is_empty() || name.len() > 100 {
            return Err(invalid("name", "must be 1 to 100 characters"));
        }
        let tenant = store::tenants::insert(&self.db, name).await?;
        self.audit(
            Some(&tenant.id),
            actor,
            "tenant.create",
            Some(&tenant.id),
            json!({ "name": name }),
        )
        .await?;
        Ok(tenant)
    }

    pub async fn get_tenant(&self, actor: &Actor, tenant_id: &str) -> Result<Tenant, ServiceError> {
        self.tenant(actor, tenant_id).await
    }

    /// Suspends (`active = false`) or resumes a tenant.
    pub async fn set_tenant_active(
        &self,
        actor: &Actor,
        tenant_id: &str,
        active: bool,
    ) -> Result<Tenant, ServiceError> {
        actor.require_operator()?;
        let status = if active { "active" } else { "suspended" };
        if !store::tenants::set_status(&self.db, tenant_id, status).await? {
            return Err(ServiceError::NotFound("tenant"));
        }
        self.bus
            .publish(Change::Tenant {
                id: tenant_id.to_owned(),
            })
            .await;
        let action = if active {
            "tenant.resume"
        } else {
            "tenant.suspend"
        };
        self.audit(Some(tenant_id), actor, action, Some(tenant_id), json!({}))
            .await?;
        store::tenants::get(&self.db, tenant_id)
            .await?
            .ok_or(ServiceError::NotFound("tenant"))
    }

    /// Creates a tenant admin account with an initial password (operators only).
    pub async fn add_tenant_admin(
        &self,
        actor: &Actor,
        tenant_id: &str,
        email: &str,
        password: &str,
    ) -> Result<(), ServiceError> {
        actor.require_operator()?;
        self.tenant(actor, tenant_id).await?;
        let email = email.trim().to_lowercase();
        if !email.contains('@') || email.len() > 254 || email.chars().any(char::is_whitespace) {
            return Err(invalid("email", "must be an email address"));
        }
        let min = crate::passwords::MIN_PASSWORD_CHARS;
        if password.chars().count() < min {
            return Err(invalid(
                "password",
                format!("must have at least {min} characters"),
            ));
        }
        let hash = crate::passwords::hash(password.to_owned())
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?;
        store::users::insert(&self.db, &email, &hash, "tenant_admin", Some(tenant_id)).await?;
        let detail = json!({ "email": email, "role": "tenant_admin" });
        self.audit(Some(tenant_id), actor, "user.create", None, detail)
            .await
    }

    // ---- rules ----

    pub async fn list_rules(
        &self,
        actor: &Actor,
        tenant_id: &str,
    ) -> Result<Vec<Rule>, ServiceError> {
        self.tenant(actor, tenant_id).await?;
        Ok(store::rules::list(&self.db, tenant_id).await?)
    }

    pub async fn get_rule(
        &self,
        actor: &Actor,
        tenant_id: &str,
        id: &str,
    ) -> Result<Rule, ServiceError> {
        self.tenant(actor, tenant_id).await?;
        store::rules::get(&self.db, tenant_id, id)
            .await?
            .ok_or(ServiceError::NotFound("rule"))
    }

    async fn check_rule(
        &self,
        tenant_id: &str,
        body: &RuleBody,
        replacing: Option<&str>,
    ) -> Result<(), ServiceError> {
        let problems = body.problems();
        if !problems.is_empty() {
            return Err(ServiceError::Invalid(problems));
        }
        let same_match = store::rules::list(&self.db, tenant_id)
            .await?
            .into_iter()
            .filter(|r| Some(r.id.as_str()) != replacing)
            .filter(|r| r.body.match_kind == body.match_kind)
            .filter(|r| !body.match_kind.needs_route() || r.body.route == body.route)
            .count();
        if same_match >= MAX_RULES_PER_MATCH {
            let what = match body.match_kind {
                MatchKind::Exact | MatchKind::Prefix => "rules on this route",
                MatchKind::Default => "default rules",
                MatchKind::All => "tenant-wide (all) rules",
            };
            return Err(invalid(
                "match",
                format!("a tenant may have at most {MAX_RULES_PER_MATCH} {what}"),
            ));
        }
        Ok(())
    }

    pub async fn create_rule(
        &self,
        actor: &Actor,
        tenant_id: &str,
        body: &RuleBody,
    ) -> Result<Rule, ServiceError> {
        self.tenant(actor, tenant_id).await?;
        self.check_rule(tenant_id, body, None).await?;
        let rule = store::rules::insert(&self.db, tenant_id, body).await?;
        self.bus
            .publish(Change::Tenant {
                id: tenant_id.to_owned(),
            })
            .await;
        self.audit(
            Some(tenant_id),
            actor,
            "rule.create",
            Some(&rule.id),
            json!(body),
        )
        .await?;
        Ok(rule)
    }

    pub async fn update_rule(
        &self,
        actor: &Actor,
        tenant_id: &str,
        id: &str,
        body: &RuleBody,
    ) -> Result<Rule, ServiceError> {
        self.tenant(actor, tenant_id).await?;
        self.check_rule(tenant_id, body, Some(id)).await?;
        let rule = store::rules::update(&self.db, tenant_id, id, body)
            .await?
            .ok_or(ServiceError::NotFound("rule"))?;
        self.bus
            .publish(Change::Tenant {
                id: tenant_id.to_owned(),
            })
            .await;
        self.audit(Some(tenant_id), actor, "rule.update", Some(id), json!(body))
            .await?;
        Ok(rule)
    }

    pub async fn delete_rule(
        &self,
        actor: &Actor,
        tenant_id: &str,
        id: &str,
    ) -> Result<(), ServiceError> {
        self.tenant(actor, tenant_id).await?;
        if !store::rules::delete(&self.db, tenant_id, id).await? {
            return Err(ServiceError::NotFound("rule"));
        }
        self.bus
            .publish(Change::Tenant {
                id: tenant_id.to_owned(),
            })
            .await;
        self.audit(Some(tenant_id), actor, "rule.delete", Some(id), json!({}))
            .await?;
        Ok(())
    }

    // ---- keys ----

    pub async fn list_keys(
        &self,
        actor: &Actor,
        tenant_id: &str,
    ) -> Result<Vec<ApiKey>, ServiceError> {
        self.tenant(actor, tenant_id).await?;
        Ok(store::keys::list_for_tenant(&self.db, tenant_id).await?)
    }

    pub async fn create_key(
        &self,
        actor: &Actor,
        tenant_id: &str,
        body: &KeyBody,
    ) -> Result<ApiKey, ServiceError> {
        self.tenant(actor, tenant_id).await?;
        if body.kind == KeyKind::Operator {
            return Err(invalid(
                "kind",
                "operator keys are created on the server host: `sluice key create --operator`",
            ));
        }
        if body.name.trim().is_empty() || body.name.len() > 100 {
            return Err(invalid("name", "must be 1 to 100 characters"));
        }
        check_key_material(body.kind, &body.hash, &body.prefix)?;
        let key = store::keys::insert(
            &self.db,
            &NewKey {
                tenant_id: Some(tenant_id),
                kind: body.kind,
                name: body.name.trim(),
                prefix: &body.prefix,
                hash: &body.hash,
                expires_at: None,
            },
        )
        .await?;
        self.bus
            .publish(Change::Key {
                hash: body.hash.clone(),
            })
            .await;
        let detail = json!({ "kind": body.kind, "name": key.name, "prefix": key.prefix });
        self.audit(Some(tenant_id), actor, "key.create", Some(&key.id), detail)
            .await?;
        Ok(key)
    }

    async fn tenant_key(
        &self,
        actor: &Actor,
        tenant_id: &str,
        key_id: &str,
    ) -> Result<ApiKey, ServiceError> {
        self.tenant(actor, tenant_id).await?;
        match store::keys::get(&self.db, key_id).await? {
            Some(key) if key.tenant_id.as_deref() == Some(tenant_id) => Ok(key),
            _ => Err(ServiceError::NotFound("key")),
        }
    }

    /// Issues a new key in place of `key_id`; the old one works for `grace_seconds` more.
    pub async fn rotate_key(
        &self,
        actor: &Actor,
        tenant_id: &str,
        key_id: &str,
        body: &RotateBody,
    ) -> Result<ApiKey, ServiceError> {
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
        let key = store::keys::rotate(&self.db, &old.id, &new, grace_until).await?;
        self.bus
            .publish(Change::Key {
                hash: old.hash.clone(),
            })
            .await;
        self.bus
            .publish(Change::Key {
                hash: body.hash.clone(),
            })
            .await;
        let detail = json!({ "replaced": old.id, "grace_seconds": body.grace_seconds, "prefix": key.prefix });
        self.audit(Some(tenant_id), actor, "key.rotate", Some(&key.id), detail)
            .await?;
        Ok(key)
    }

    pub async fn revoke_key(
        &self,
        actor: &Actor,
        tenant_id: &str,
        key_id: &str,
    ) -> Result<ApiKey, ServiceError> {
        let key = self.tenant_key(actor, tenant_id, key_id).await?;
        store::keys::revoke(&self.db, &key.id).await?;
        self.bus
            .publish(Change::Key {
                hash: key.hash.clone(),
            })
            .await;
        self.audit(
            Some(tenant_id),
            actor,
            "key.revoke",
            Some(&key.id),
            json!({ "prefix": key.prefix }),
        )
        .await?;
        store::keys::get(&self.db, &key.id)
            .await?
            .ok_or(ServiceError::NotFound("key"))
    }

    // ---- audit ----

    /// A tenant's events, or (`None`, operators only) the whole platform's; newest first.
    pub async fn audit_events(
        &self,
        actor: &Actor,
        tenant_id: Option<&str>,
        filter: &AuditFilter,
    ) -> Result<Vec<audit::AuditEvent>, ServiceError> {
        match tenant_id {
            Some(t) => {
                self.tenant(actor, t).await?;
            }
            None => actor.require_operator()?,
        }
        if let (Some(since), Some(until)) = (filter.since_ms, filter.until_ms) {
            if since > until {
                return Err(invalid("since", "the start of the range is after its end"));
            }
        }
        Ok(audit::list(&self.db, tenant_id, filter, AUDIT_PAGE).await?)
    }

    // ---- simulate ----

    /// Decides a check against the tenant's current rules (read from the store, so a rule
    /// saved a moment ago counts) and current counters, consuming nothing.
    pub async fn simulate(
        &self,
        actor: &Actor,
        tenant_id: &str,
        input: &SimulateInput,
    ) -> Result<Simulation, ServiceError> {
        let tenant = self.tenant(actor, tenant_id).await?;
        if tenant.status != "active" {
            return Err(ServiceError::Forbidden(
                "this tenant is suspended: every check of its keys gets 403".into(),
            ));
        }
        check_text("route", &input.route).map_err(|m| invalid("route", m))?;
        if let Some(subject) = &input.subject {
            check_text("subject", subject).map_err(|m| invalid("subject", m))?;
        }
        let cost = input.cost.unwrap_or(1);
        if !(1..=MAX_COST).contains(&cost) {
            return Err(invalid(
                "cost",
                format!("must be a whole number from 1 to {MAX_COST}"),
            ));
        }
        let rules = store::rules::list(&self.db, tenant_id).await?;
        let compiled = CompiledTenant::compile(tenant, rules);
        let rules = compiled.resolve(&input.route);
        if rules.is_empty() {
            return Ok(Simulation {
                allowed: true,
                policy: None,
                rules: Vec::new(),
                now_ms: store::now_ms(),
            });
        }
        let checks = crate::check::rule_checks(tenant_id, &rules, cost, input.subject.as_deref())
            .map_err(|m| invalid("subject", m))?;
        let outcome = self
            .limiter
            .check(&CheckRequest {
                tenant: tenant_id.to_owned(),
                rules: checks,
                request_id: None,
                now_ms: None,
                dry_run: true,
            })
            .await?;
        let deciding = crate::check::deciding_rule(&rules, &outcome.decisions, outcome.allowed);
        Ok(Simulation {
            allowed: outcome.allowed,
            policy: Some(rules[deciding].body.name.clone()),
            rules: rules
                .iter()
                .zip(&outcome.decisions)
                .map(|(rule, d)| SimulatedRule {
                    rule_id: rule.id.clone(),
                    policy: rule.body.name.clone(),
                    shadow: rule.body.shadow,
                    verdict: d.verdict,
                    limit: d.limit,
                    remaining: d.remaining,
                    reset_after_ms: d.reset_after_ms,
                    retry_after_ms: d.retry_after_ms,
                })
                .collect(),
            now_ms: outcome.now_ms,
        })
    }
}
