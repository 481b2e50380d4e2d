//! A tenant's rules: list, read, create, replace, delete, and reset one of a rule's buckets.
//! A rule's route is stored in its normal form (`RuleBody::normalized`). Validation is `app`'s (the console's form runs the same code); the per-match cap
//! ([`MAX_RULES_PER_MATCH`]) keeps every check within the limiter's rules. The cap is counted
//! inside the transaction that writes the rule, after locking the tenant's row, so concurrent
//! creates cannot pass it together.

use app::rules::{changes, normal_route, MatchKind, RuleBody, RuleInfo, Scope};
use app::simulate::{ResetInput, ResetOutcome};
use serde_json::json;

use super::quotas::{self, Quotas};
use super::{dto, invalid, Actor, AdminService, Event, ServiceError};
use crate::decide::Subject;
use crate::limiter::keys;
use crate::propagation::Change;
use crate::store;

pub use crate::decide::MAX_RULES_PER_MATCH;

impl AdminService {
    pub async fn list_rules(
        &self,
        actor: &Actor,
        tenant_id: &str,
    ) -> Result<Vec<RuleInfo>, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let rules = store::rules::list(&self.db, tenant_id).await?;
        Ok(rules.into_iter().map(dto::rule).collect())
    }

    pub async fn get_rule(
        &self,
        actor: &Actor,
        tenant_id: &str,
        id: &str,
    ) -> Result<RuleInfo, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        store::rules::get(&self.db, tenant_id, id)
            .await?
            .map(dto::rule)
            .ok_or(ServiceError::NotFound("rule"))
    }

    /// Refuses `body` when it is invalid, when the tenant already has [`MAX_RULES_PER_MATCH`]
    /// rules of its match (not counting `replacing`), or when a per-subject override of the
    /// rule it replaces would not fit it. Runs inside `tx` after [`store::tenants::lock`], so
    /// the counts cannot change before the commit.
    async fn check_rule(
        tx: &mut store::Tx,
        tenant_id: &str,
        body: &RuleBody,
        replacing: Option<&str>,
    ) -> Result<(), ServiceError> {
        let rules = store::rules::list_in(&mut *tx, tenant_id).await?;
        if replacing.is_none() {
            let quotas = Quotas::from(store::quotas::get(&mut *tx, tenant_id).await?);
            quotas::within(rules.len() as u64, quotas.max_rules, "rules")?;
        }
        let same_match = rules
            .into_iter()
            .filter(|r| Some(r.id.as_str()) != replacing)
            .filter(|r| r.body.match_kind == body.match_kind)
            // Compared in the form routes are compiled in (a rule may predate normal forms).
            .filter(|r| {
                !body.match_kind.needs_route()
                    || r.body.route.as_deref().map(normal_route)
                        == body.route.as_deref().map(normal_route)
            })
            .filter(|r| r.body.descriptor == body.descriptor)
            .count();
        if let Some(id) = replacing {
            let misfits: Vec<String> = store::overrides::list_for_rule(&mut *tx, tenant_id, id)
                .await?
                .into_iter()
                .filter_map(|o| {
                    let problems = o.body.problems(body);
                    problems
                        .first()
                        .map(|p| format!("{} ({p})", o.body.subject))
                })
                .collect();
            if !misfits.is_empty() {
                return Err(ServiceError::Conflict(format!(
                    "rule {:?} has overrides that would not fit it: {}; change or delete them first",
                    body.name,
                    misfits.join(", ")
                )));
            }
        }
        if same_match >= MAX_RULES_PER_MATCH {
            let what = match body.match_kind {
                MatchKind::Exact | MatchKind::Prefix => "rules on this route",
                MatchKind::Default => "default rules",
                MatchKind::All => "tenant-wide (all) rules",
                MatchKind::Descriptor => "descriptor rules with these entries",
            };
            return Err(ServiceError::Conflict(format!(
                "a tenant may have at most {MAX_RULES_PER_MATCH} {what}; delete or change one first"
            )));
        }
        Ok(())
    }

    /// Opens the transaction of a rule change: the rule is valid, the tenant exists and its
    /// row is locked until the commit.
    async fn begin_rule_change(
        &self,
        tenant_id: &str,
        body: &RuleBody,
    ) -> Result<store::Tx, ServiceError> {
        let problems = body.problems();
        if !problems.is_empty() {
            return Err(ServiceError::Invalid(problems));
        }
        let mut tx = self.db.begin().await?;
        if !store::tenants::lock(&mut tx, tenant_id).await? {
            return Err(ServiceError::NotFound("tenant"));
        }
        Ok(tx)
    }

    pub async fn create_rule(
        &self,
        actor: &Actor,
        tenant_id: &str,
        body: &RuleBody,
    ) -> Result<RuleInfo, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let body = &body.clone().normalized();
        let mut tx = self.begin_rule_change(tenant_id, body).await?;
        Self::check_rule(&mut tx, tenant_id, body, None).await?;
        let rule = store::rules::insert(&mut tx, tenant_id, body).await?;
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action: "rule.create",
                target: Some(&rule.id),
                detail: json!(body),
            },
            [Change::Tenant {
                id: tenant_id.to_owned(),
            }],
        )
        .await?;
        Ok(dto::rule(rule))
    }

    pub async fn update_rule(
        &self,
        actor: &Actor,
        tenant_id: &str,
        id: &str,
        body: &RuleBody,
    ) -> Result<RuleInfo, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let body = &body.clone().normalized();
        let mut tx = self.begin_rule_change(tenant_id, body).await?;
        Self::check_rule(&mut tx, tenant_id, body, Some(id)).await?;
        let before = store::rules::get(&mut tx, tenant_id, id)
            .await?
            .ok_or(ServiceError::NotFound("rule"))?;
        let rule = store::rules::update(&mut tx, tenant_id, id, body)
            .await?
            .ok_or(ServiceError::NotFound("rule"))?;
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action: "rule.update",
                target: Some(id),
                // The rule as it now is, and what changed (the audit log shows the changes).
                detail: json!({ "rule": body, "changes": changes(&before.body, body) }),
            },
            [Change::Tenant {
                id: tenant_id.to_owned(),
            }],
        )
        .await?;
        Ok(dto::rule(rule))
    }

    pub async fn delete_rule(
        &self,
        actor: &Actor,
        tenant_id: &str,
        id: &str,
    ) -> Result<(), ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let mut tx = self.db.begin().await?;
        let deleted = store::rules::get(&mut tx, tenant_id, id)
            .await?
            .ok_or(ServiceError::NotFound("rule"))?;
        if !store::rules::delete(&mut tx, tenant_id, id).await? {
            return Err(ServiceError::NotFound("rule"));
        }
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action: "rule.delete",
                target: Some(id),
                // What was deleted, so that the audit log can say (and it can be made again).
                detail: json!({ "rule": deleted.body }),
            },
            [Change::Tenant {
                id: tenant_id.to_owned(),
            }],
        )
        .await?;
        Ok(())
    }

    /// Clears one bucket of a rule: `input.subject`'s, or the rule's tenant-wide bucket. With a
    /// transaction open, the bucket is removed from the limiter (Redis, or this process), the
    /// reset audited and committed, and the tenant's change announced, which drops every
    /// instance's deny cache of the tenant, so no instance keeps denying what the cleared
    /// bucket now admits. Buckets counted under a limit an Envoy descriptor set (`limit` in
    /// the request) are not touched: they are keyed by that limit's period, which the reset
    /// does not name.
    pub async fn reset_bucket(
        &self,
        actor: &Actor,
        tenant_id: &str,
        rule_id: &str,
        input: &ResetInput,
    ) -> Result<ResetOutcome, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let rule = store::rules::get(&self.db, tenant_id, rule_id)
            .await?
            .ok_or(ServiceError::NotFound("rule"))?;
        let name = &rule.body.name;
        let subject = match (rule.body.scope, input.subject.as_deref()) {
            (Scope::Subject, Some(subject)) => Some(
                Subject::parse(subject)
                    .map_err(|e| invalid(e.field, e.message))?
                    .as_str()
                    .to_owned(),
            ),
            (Scope::Subject, None) => {
                return Err(invalid(
                    "subject",
                    format!("rule {name:?} limits each subject separately: name the subject whose bucket to clear"),
                ))
            }
            (Scope::Tenant, Some(_)) => {
                return Err(invalid(
                    "subject",
                    format!("rule {name:?} has one bucket for the whole tenant: leave `subject` out"),
                ))
            }
            (Scope::Tenant, None) => None,
        };
        let key = keys::rule_bucket(tenant_id, &rule.id, rule.body.algorithm, subject.as_deref());
        // The store first: if it cannot take the audit event, nothing is cleared.
        let tx = self.db.begin().await?;
        let cleared = self.decider.reset(tenant_id, &key).await?;
        let audited = self
            .commit(
                tx,
                actor,
                Event {
                    tenant: Some(tenant_id),
                    action: "rule.reset",
                    target: Some(rule_id),
                    detail: json!({ "policy": name, "subject": subject, "cleared": cleared }),
                },
                std::iter::empty(),
            )
            .await;
        // Cleared is cleared: every instance drops its denials of the tenant even if the
        // audit event could not be committed (the caller then gets the store's error).
        self.bus
            .publish(Change::Tenant {
                id: tenant_id.to_owned(),
            })
            .await;
        audited?;
        Ok(ResetOutcome {
            rule_id: rule.id.clone(),
            policy: name.clone(),
            subject,
            cleared,
        })
    }
}
