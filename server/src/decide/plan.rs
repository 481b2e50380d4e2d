//! The plan of a check: each matching rule's bucket (per subject where the rule says so), its
//! parameters and the cost, in the limiter's terms; and, once the limiter has answered, the
//! rule whose decision the answer reports.

use std::sync::Arc;

use app::rules::model::{Decision, Verdict};
use app::rules::Scope;

use super::input::{CheckInput, Descriptor, InputError, LimitOverride, Subject};
use super::tenant::CompiledTenant;
use crate::limiter::{keys, RuleCheck, MAX_RULES};
use crate::store::rules::Rule;

/// The limiter's view of `rules` for one check. A subject-scoped rule without a subject is
/// an [`InputError`] that says what to send.
pub fn rule_checks(
    tenant_id: &str,
    rules: &[Arc<Rule>],
    input: &CheckInput,
) -> Result<Vec<RuleCheck>, InputError> {
    rules
        .iter()
        .map(|rule| {
            let subject = match rule.body.scope {
                Scope::Tenant => None,
                Scope::Subject => Some(input.subject.as_ref().ok_or_else(|| InputError {
                    field: "subject",
                    message: format!(
                        "rule {:?} limits each subject separately: send `subject` (a user id, an IP, ...)",
                        rule.body.name
                    ),
                })?),
            };
            Ok(rule_check(
                tenant_id,
                rule,
                subject.map(|s| s.as_str()),
                input.cost.get(),
            ))
        })
        .collect()
}

/// The limiter's view of one rule's bucket (for `subject` when given) charged `cost`.
fn rule_check(tenant_id: &str, rule: &Rule, subject: Option<&str>, cost: u64) -> RuleCheck {
    RuleCheck {
        key: keys::rule_bucket(tenant_id, &rule.id, rule.body.algorithm, subject),
        spec: rule.body.spec(),
        cost,
        shadow: rule.body.shadow,
    }
}

/// Rules matched, their checks, for each descriptor the indices of its rules, and each rule's
/// subject (`None`: its tenant-wide bucket).
pub type DescriptorPlan = (
    Vec<Arc<Rule>>,
    Vec<RuleCheck>,
    Vec<Vec<usize>>,
    Vec<Option<String>>,
);

/// The plan of Envoy descriptors: each descriptor's rules, one check per distinct bucket (two
/// descriptors naming the same bucket are charged once, with the sum of their costs), and
/// which checks each descriptor has. More rules in all than the limiter takes in one call is
/// an [`InputError`].
pub fn descriptor_checks(
    tenant: &CompiledTenant,
    descriptors: &[Descriptor],
) -> Result<DescriptorPlan, InputError> {
    let tenant_id = tenant.tenant.id.as_str();
    let (mut rules, mut checks, mut owners) = (Vec::new(), Vec::<RuleCheck>::new(), Vec::new());
    let mut subjects = Vec::new();
    for descriptor in descriptors {
        let entries: Vec<(&str, &str)> = descriptor
            .entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut mine = Vec::new();
        for (rule, subject) in tenant.resolve_descriptor(&entries) {
            if let Some(subject) = &subject {
                Subject::parse(subject).map_err(|e| InputError {
                    field: "descriptors",
                    message: format!(
                        "rule {:?} limits each subject separately, and this descriptor's values make no valid subject: {}",
                        rule.body.name, e.message
                    ),
                })?;
            }
            let rule = match &subject {
                Some(subject) => tenant.for_subject(&rule, subject).clone(),
                None => rule,
            };
            let (rule, check) = match descriptor.limit {
                None => {
                    let check =
                        rule_check(tenant_id, &rule, subject.as_deref(), descriptor.cost.get());
                    (rule, check)
                }
                Some(limit) => overridden(tenant_id, &rule, limit, subject.as_deref(), descriptor)?,
            };
            let index = match checks.iter().position(|c| c.key == check.key) {
                Some(i) => {
                    checks[i].cost = checks[i].cost.saturating_add(check.cost);
                    i
                }
                None => {
                    checks.push(check);
                    rules.push(rule);
                    subjects.push(subject);
                    checks.len() - 1
                }
            };
            if !mine.contains(&index) {
                mine.push(index);
            }
        }
        owners.push(mine);
    }
    if checks.len() > MAX_RULES {
        return Err(InputError {
            field: "descriptors",
            message: format!(
                "these descriptors match {} rules; one request may match at most {MAX_RULES}",
                checks.len()
            ),
        });
    }
    Ok((rules, checks, owners, subjects))
}

/// A rule that allows it, decided under the limit a descriptor sets: the rule with that
/// limit and period (and no burst beyond the limit), in the window count of that period.
fn overridden(
    tenant_id: &str,
    rule: &Arc<Rule>,
    limit: LimitOverride,
    subject: Option<&str>,
    descriptor: &Descriptor,
) -> Result<(Arc<Rule>, RuleCheck), InputError> {
    if !rule.body.allow_override {
        return Err(InputError {
            field: "limit",
            message: format!(
                "rule {:?} sets this descriptor's limit and takes none from the request: leave `limit` out, or allow overrides on the rule",
                rule.body.name
            ),
        });
    }
    let mut body = rule.body.clone();
    body.limit = limit.limit;
    body.period_ms = limit.period_ms;
    body.burst = None;
    if let Some(problem) = body.spec().problems().into_iter().next() {
        return Err(InputError {
            field: "limit",
            message: format!(
                "the override does not suit rule {:?}: {problem}",
                rule.body.name
            ),
        });
    }
    let check = RuleCheck {
        key: keys::bucket(
            tenant_id,
            &keys::override_part(&keys::rule_part(&rule.id, body.algorithm), limit.period_ms),
            subject,
        ),
        spec: body.spec(),
        cost: descriptor.cost.get(),
        shadow: body.shadow,
    };
    let rule = Arc::new(Rule {
        body,
        ..(**rule).clone()
    });
    Ok((rule, check))
}

/// The rule the answer describes: on a denial the enforced rule with the longest wait (a
/// rule the cost can never fit first); otherwise the one with the least capacity left.
/// Shadow rules decide only when every rule is a shadow.
pub fn deciding_rule(rules: &[Arc<Rule>], decisions: &[Decision], allowed: bool) -> usize {
    let enforced: Vec<usize> = (0..rules.len())
        .filter(|&i| !rules[i].body.shadow)
        .collect();
    let candidates = if enforced.is_empty() {
        (0..rules.len()).collect()
    } else {
        enforced
    };
    if allowed {
        candidates
            .into_iter()
            .min_by(|&a, &b| decisions[a].remaining.total_cmp(&decisions[b].remaining))
            .unwrap_or(0)
    } else {
        candidates
            .into_iter()
            .filter(|&i| !decisions[i].allowed())
            .max_by_key(|&i| {
                (
                    decisions[i].verdict == Verdict::NeverFits,
                    decisions[i].retry_after_ms,
                )
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::rules::{Algorithm, FailureMode, MatchKind, RuleBody};

    fn rule(id: &str, scope: Scope, shadow: bool) -> Arc<Rule> {
        Arc::new(Rule {
            id: id.into(),
            tenant_id: "t".into(),
            body: RuleBody {
                name: id.into(),
                match_kind: MatchKind::All,
                route: None,
                descriptor: None,
                scope,
                algorithm: Algorithm::TokenBucket,
                limit: 10,
                period_ms: 1000,
                burst: None,
                penalty: false,
                failure_mode: FailureMode::Closed,
                shadow,
                enabled: true,
                allow_override: false,
            },
            created_at: 0,
            updated_at: 0,
        })
    }

    fn decision(verdict: Verdict, remaining: f64, retry_after_ms: u64) -> Decision {
        Decision {
            verdict,
            limit: 10,
            remaining,
            reset_after_ms: 0,
            retry_after_ms,
        }
    }

    #[test]
    fn buckets_are_per_subject_only_for_subject_rules() {
        let rules = [
            rule("a", Scope::Tenant, false),
            rule("b", Scope::Subject, false),
        ];
        let input = CheckInput::new("GET /", Some("u1")).unwrap();
        let checks = rule_checks("t", &rules, &input).unwrap();
        assert!(checks[0].key.starts_with("sl:{t}:a") && !checks[0].key.contains("u1"));
        assert!(checks[1].key.starts_with("sl:{t}:b") && checks[1].key.ends_with("u1"));
        let anonymous = CheckInput::new("GET /", None).unwrap();
        assert_eq!(
            rule_checks("t", &rules, &anonymous).unwrap_err().field,
            "subject"
        );
    }

    #[test]
    fn a_denial_reports_the_longest_wait_and_never_a_shadow() {
        let rules = [
            rule("short", Scope::Tenant, false),
            rule("long", Scope::Tenant, false),
            rule("shadow", Scope::Tenant, true),
        ];
        let decisions = [
            decision(Verdict::Deny, 0.0, 100),
            decision(Verdict::Deny, 0.0, 900),
            decision(Verdict::Deny, 0.0, 5_000),
        ];
        assert_eq!(deciding_rule(&rules, &decisions, false), 1);
        let never = [
            decision(Verdict::NeverFits, 0.0, 0),
            decision(Verdict::Deny, 0.0, 900),
            decision(Verdict::Allow, 5.0, 0),
        ];
        assert_eq!(deciding_rule(&rules, &never, false), 0);
    }

    #[test]
    fn an_admission_reports_the_least_capacity_left() {
        let rules = [
            rule("a", Scope::Tenant, false),
            rule("b", Scope::Tenant, false),
        ];
        let decisions = [
            decision(Verdict::Allow, 7.0, 0),
            decision(Verdict::Allow, 2.0, 0),
        ];
        assert_eq!(deciding_rule(&rules, &decisions, true), 1);
    }
}
