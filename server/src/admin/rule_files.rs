//! A tenant's rules as a file, and applying a set of rules as a plan: [`AdminService::export_rules`]
//! writes the rules without ids, ordered by name (so two exports diff cleanly), and
//! [`AdminService::import_rules`] compares a set of rules with the stored ones by name and says,
//! or does, what changes: create, update (with each changed field), delete (with the overrides
//! that go with the rule) and unchanged, each with its problems. Applying is one transaction
//! and one `rules.import` audit event, announced to every instance. The envoyproxy/ratelimit
//! import ([`super::import`]) is the same plan over the tenant's descriptor rules only.
//!
//! A rule is matched by its name, so a rule renamed in a file is a delete and a create: the
//! new rule has a new id, so new buckets, and no overrides.

use std::collections::{HashMap, HashSet};

use app::rules::{
    changes, FieldError, MatchKind, PlannedCreate, PlannedDelete, PlannedUpdate, RuleBody,
    RulesFile, RulesPlan, MAX_IMPORT_BYTES,
};
use serde_json::json;

use super::quotas::Quotas;
use super::{Actor, AdminService, Event, ServiceError};
use crate::decide::MAX_RULES_PER_MATCH;
use crate::propagation::Change;
use crate::store;

/// Which of a tenant's rules a set of rules stands for: the rules of the tenant it does not
/// name are deleted, and only those.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleSet {
    /// Every rule (a rules file).
    All,
    /// The descriptor rules only; route rules are never touched (an envoyproxy/ratelimit
    /// configuration).
    Descriptor,
}

impl RuleSet {
    fn holds(self, rule: &RuleBody) -> bool {
        match self {
            RuleSet::All => true,
            RuleSet::Descriptor => rule.match_kind == MatchKind::Descriptor,
        }
    }

    fn audit_source(self) -> &'static str {
        match self {
            RuleSet::All => "rules file",
            RuleSet::Descriptor => "envoyproxy/ratelimit configuration",
        }
    }
}

/// The two ways a file is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    #[default]
    Json,
    Yaml,
}

/// Writes `file` as JSON (pretty, with a final newline) or YAML.
pub fn write_rules_file(file: &RulesFile, format: FileFormat) -> String {
    match format {
        FileFormat::Json => {
            let mut text = serde_json::to_string_pretty(file).unwrap_or_default();
            text.push('\n');
            text
        }
        FileFormat::Yaml => serde_yaml::to_string(file).unwrap_or_default(),
    }
}

/// Reads a rules file, JSON or YAML (a JSON file is also read as YAML). An error says where.
pub fn read_rules_file(text: &str, format: FileFormat) -> Result<RulesFile, String> {
    if text.len() > MAX_IMPORT_BYTES {
        return Err(format!(
            "the file is {} KiB; at most {} KiB is read",
            text.len().div_ceil(1024),
            MAX_IMPORT_BYTES / 1024
        ));
    }
    match format {
        FileFormat::Json => serde_json::from_str(text)
            .map_err(|e| format!("not a rules file (JSON, `{{\"rules\": [...]}}`): {e}")),
        FileFormat::Yaml => serde_yaml::from_str(text)
            .map_err(|e| format!("not a rules file (YAML, `rules:` and a list): {e}")),
    }
}

/// Why a plan cannot be applied: invalid rules (400), or valid rules that collide with the
/// tenant's quota, caps or overrides (409).
#[derive(Debug, Default)]
struct Verdict {
    invalid: Vec<FieldError>,
    conflicts: Vec<String>,
}

impl Verdict {
    fn refusal(self) -> Option<ServiceError> {
        if !self.invalid.is_empty() {
            Some(ServiceError::Invalid(self.invalid))
        } else if !self.conflicts.is_empty() {
            Some(ServiceError::Conflict(self.conflicts.join("; ")))
        } else {
            None
        }
    }
}

impl AdminService {
    /// The tenant's rules as a file: every rule, without ids or dates, ordered by name.
    pub async fn export_rules(
        &self,
        actor: &Actor,
        tenant_id: &str,
    ) -> Result<RulesFile, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let mut rules: Vec<RuleBody> = store::rules::list(&self.db, tenant_id)
            .await?
            .into_iter()
            .map(|r| r.body)
            .collect();
        rules.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(RulesFile { rules })
    }

    /// Makes the tenant's rules of `set` those of `rules` (by name) and answers the plan. With
    /// `apply` false, only says what it would do, with every problem on its entry: nothing is
    /// written. With `apply`, refuses a plan with any problem (400 for invalid rules, 409 for a
    /// quota, a cap or an override that would not fit), and with `expect`, the fingerprint of
    /// an earlier preview, refuses (409) unless the plan is still exactly that preview's.
    pub async fn import_rules(
        &self,
        actor: &Actor,
        tenant_id: &str,
        rules: &[RuleBody],
        set: RuleSet,
        apply: bool,
        expect: Option<&str>,
    ) -> Result<RulesPlan, ServiceError> {
        self.run_import(actor, tenant_id, rules, set, apply, expect, false)
            .await
    }

    /// [`Self::import_rules`] that refuses a plan with problems even when only previewing:
    /// the envoyproxy/ratelimit import's behaviour (its translation makes only valid rules,
    /// so a problem is a collision worth an error).
    pub(super) async fn import_rules_strictly(
        &self,
        actor: &Actor,
        tenant_id: &str,
        rules: &[RuleBody],
        set: RuleSet,
        apply: bool,
        expect: Option<&str>,
    ) -> Result<RulesPlan, ServiceError> {
        self.run_import(actor, tenant_id, rules, set, apply, expect, true)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_import(
        &self,
        actor: &Actor,
        tenant_id: &str,
        rules: &[RuleBody],
        set: RuleSet,
        apply: bool,
        expect: Option<&str>,
        strict: bool,
    ) -> Result<RulesPlan, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let mut tx = self.db.begin().await?;
        if !store::tenants::lock(&mut tx, tenant_id).await? {
            return Err(ServiceError::NotFound("tenant"));
        }
        let existing = store::rules::list_in(&mut tx, tenant_id).await?;
        let overrides = store::overrides::list(&mut tx, tenant_id).await?;
        let quotas = Quotas::from(store::quotas::get(&mut tx, tenant_id).await?);
        // Routes are stored in their normal form, so `post /x` in a file is the rule on `POST /x`.
        let rules: Vec<RuleBody> = rules.iter().cloned().map(RuleBody::normalized).collect();
        let (mut plan, verdict) = plan(&existing, &overrides, &rules, set, quotas.max_rules);
        if strict || apply {
            if let Some(refusal) = verdict.refusal() {
                return Err(refusal);
            }
        }
        if !apply {
            return Ok(plan);
        }
        if expect.is_some_and(|e| e != plan.fingerprint) {
            return Err(ServiceError::Conflict(
                "the tenant's rules changed since this import was previewed: preview it again"
                    .to_owned(),
            ));
        }
        if plan.is_empty() {
            // Nothing to change: nothing written, audited or announced.
            plan.applied = true;
            return Ok(plan);
        }
        // A rule deleted since the plan was read (a delete does not wait for the tenant's
        // lock) makes the plan wrong: nothing is written.
        let gone = || {
            ServiceError::Conflict(
                "a rule of the plan was deleted meanwhile; nothing changed: preview it again"
                    .to_owned(),
            )
        };
        for d in &plan.delete {
            if !store::rules::delete(&mut tx, tenant_id, &d.id).await? {
                return Err(gone());
            }
        }
        for u in &plan.update {
            if store::rules::update(&mut tx, tenant_id, &u.id, &u.rule)
                .await?
                .is_none()
            {
                return Err(gone());
            }
        }
        for c in &plan.create {
            store::rules::insert(&mut tx, tenant_id, &c.rule).await?;
        }
        let detail = json!({
            "source": set.audit_source(),
            "created": plan.create.iter().map(|c| &c.rule.name).collect::<Vec<_>>(),
            "updated": plan.update.iter().map(|u| json!({ "name": u.rule.name, "changes": u.changes })).collect::<Vec<_>>(),
            "deleted": plan.delete.iter().map(|d| &d.name).collect::<Vec<_>>(),
            "unchanged": plan.unchanged.len(),
        });
        self.commit(
            tx,
            actor,
            Event {
                tenant: Some(tenant_id),
                action: "rules.import",
                target: None,
                detail,
            },
            [Change::Tenant {
                id: tenant_id.to_owned(),
            }],
        )
        .await?;
        plan.applied = true;
        Ok(plan)
    }
}

/// The plan that makes the `set` part of `existing` into `rules`, and why it cannot be
/// applied, if it cannot. Pure: the caller reads what it needs inside its transaction.
fn plan(
    existing: &[store::rules::Rule],
    overrides: &[app::rules::OverrideInfo],
    rules: &[RuleBody],
    set: RuleSet,
    max_rules: u64,
) -> (RulesPlan, Verdict) {
    let mut plan = RulesPlan::default();
    let mut verdict = Verdict::default();
    let by_name: HashMap<&str, &store::rules::Rule> =
        existing.iter().map(|r| (r.body.name.as_str(), r)).collect();
    let mut seen = HashSet::new();
    for rule in rules {
        if !seen.insert(rule.name.as_str()) {
            let problem = FieldError::new(
                "name",
                format!(
                    "{:?} names more than one rule in the file; a tenant's rule names are unique",
                    rule.name
                ),
            );
            verdict.invalid.push(problem.clone());
            plan.problems.push(problem);
            continue;
        }
        let mut problems = rule.problems();
        if !set.holds(rule) {
            problems.push(FieldError::new(
                "match",
                "this import holds descriptor rules only",
            ));
        }
        // A rule the file leaves as stored is not written, so its problems (a route saved
        // before routes had to be a method and a path) do not stop the file.
        let named = |problems: &[FieldError]| -> Vec<FieldError> {
            problems
                .iter()
                .map(|p| FieldError::new(&p.field, format!("rule {:?}: {}", rule.name, p.message)))
                .collect()
        };
        match by_name.get(rule.name.as_str()) {
            Some(stored) if !set.holds(&stored.body) => {
                let message = format!(
                    "the tenant has a {} rule named {:?}, which this import does not replace; rename one of them",
                    stored.body.match_kind.as_str(),
                    rule.name
                );
                verdict.conflicts.push(message.clone());
                plan.problems.push(FieldError::new("name", message));
                verdict.invalid.extend(named(&problems));
            }
            Some(stored) if stored.body == *rule => plan.unchanged.push(rule.name.clone()),
            Some(stored) => {
                verdict.invalid.extend(named(&problems));
                for o in overrides.iter().filter(|o| o.rule_id == stored.id) {
                    if let Some(p) = o.body.problems(rule).first() {
                        let message = format!(
                            "its override of {:?} would not fit ({p}); change or delete the override first",
                            o.body.subject
                        );
                        verdict
                            .conflicts
                            .push(format!("rule {:?}: {message}", rule.name));
                        problems.push(FieldError::new("overrides", message));
                    }
                }
                plan.update.push(PlannedUpdate {
                    id: stored.id.clone(),
                    rule: rule.clone(),
                    changes: changes(&stored.body, rule),
                    problems,
                });
            }
            None => {
                verdict.invalid.extend(named(&problems));
                plan.create.push(PlannedCreate {
                    rule: rule.clone(),
                    problems,
                });
            }
        }
    }
    for stored in existing {
        if set.holds(&stored.body) && !seen.contains(stored.body.name.as_str()) {
            plan.delete.push(PlannedDelete {
                id: stored.id.clone(),
                name: stored.body.name.clone(),
                overrides: overrides.iter().filter(|o| o.rule_id == stored.id).count(),
            });
        }
    }

    // The tenant's rules afterwards: within its quota (unless the import adds none) and the
    // per-match cap.
    let deleted: HashSet<&str> = plan.delete.iter().map(|d| d.id.as_str()).collect();
    let updated: HashMap<&str, &RuleBody> = plan
        .update
        .iter()
        .map(|u| (u.id.as_str(), &u.rule))
        .collect();
    // In the form they are compiled in, so that `post /x` and `POST /x` count as one route.
    let after: Vec<RuleBody> = existing
        .iter()
        .filter(|r| !deleted.contains(r.id.as_str()))
        .map(|r| updated.get(r.id.as_str()).copied().unwrap_or(&r.body))
        .chain(plan.create.iter().map(|c| &c.rule))
        .map(|r| r.clone().normalized())
        .collect();
    if after.len() as u64 > max_rules && after.len() > existing.len() {
        let message = format!(
            "the import would leave the tenant {} rules; its quota is {max_rules}: ask an operator to raise it (PUT /v1/admin/tenants/{{tenant}}/quotas)",
            after.len()
        );
        verdict.conflicts.push(message.clone());
        plan.problems.push(FieldError::new("rules", message));
    }
    let mut by_match: HashMap<_, Vec<&str>> = HashMap::new();
    for r in &after {
        let route = r.match_kind.needs_route().then_some(&r.route);
        by_match
            .entry((r.match_kind, route, &r.descriptor))
            .or_default()
            .push(r.name.as_str());
    }
    let mut crowded: Vec<Vec<&str>> = by_match
        .into_values()
        .filter(|names| names.len() > MAX_RULES_PER_MATCH)
        .collect();
    crowded.sort();
    for names in crowded {
        let message = format!(
            "{} rules would share one match ({}); a tenant may have at most {MAX_RULES_PER_MATCH}",
            names.len(),
            names.join(", ")
        );
        verdict.conflicts.push(message.clone());
        plan.problems.push(FieldError::new("match", message));
    }

    // What the plan was made from: applying with a preview's fingerprint refuses if any of it
    // has changed since.
    plan.fingerprint = app::keys::sha256_hex(
        &serde_json::to_string(&(
            existing,
            overrides,
            &plan.create,
            &plan.update,
            &plan.delete,
            &plan.unchanged,
        ))
        .unwrap_or_default(),
    );
    (plan, verdict)
}
