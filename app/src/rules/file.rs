//! Rules as a file: [`RulesFile`] is what an export writes and an import reads (a tenant's
//! rules without ids, by name, so two exports diff cleanly), and [`RulesPlan`] is what an
//! import would do, or did: the rules it creates, updates (with each [`FieldChange`]) and
//! deletes, those it leaves as they are, and every problem that stops it.

use serde::{Deserialize, Serialize};

use super::rule::{DescriptorEntry, RuleBody};
use super::spec::FieldError;

/// A tenant's rules as a file. Names are unique in a tenant and are how an import matches a
/// rule of the file with a stored one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesFile {
    pub rules: Vec<RuleBody>,
}

/// A rule the import creates, with what is wrong with it (empty: nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedCreate {
    pub rule: RuleBody,
    pub problems: Vec<FieldError>,
}

/// A stored rule the import replaces: its id, its new body, what changes, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedUpdate {
    pub id: String,
    pub rule: RuleBody,
    pub changes: Vec<FieldChange>,
    pub problems: Vec<FieldError>,
}

/// A stored rule the import deletes, with the number of per-subject overrides that go with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedDelete {
    pub id: String,
    pub name: String,
    pub overrides: usize,
}

/// One field of a rule that an update changes, each side as the file writes it (`-` when the
/// field is absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldChange {
    pub field: String,
    pub before: String,
    pub after: String,
}

/// What an import does to a tenant's rules, or did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesPlan {
    pub create: Vec<PlannedCreate>,
    pub update: Vec<PlannedUpdate>,
    pub delete: Vec<PlannedDelete>,
    /// The names of the rules the file leaves exactly as they are.
    pub unchanged: Vec<String>,
    /// What stops the file as a whole (names given twice, the tenant's quota of rules, the
    /// per-match cap); a rule's own problems are on its entry.
    pub problems: Vec<FieldError>,
    /// Sent back (`expect`) to apply exactly this plan: the server refuses when the rules it
    /// was made from have changed since.
    pub fingerprint: String,
    /// Whether the changes were made.
    pub applied: bool,
}

impl RulesPlan {
    /// Every problem of the plan, each rule's named by the rule: empty means it can be applied.
    pub fn all_problems(&self) -> Vec<FieldError> {
        let named = |name: &str, problems: &[FieldError]| -> Vec<FieldError> {
            problems
                .iter()
                .map(|p| FieldError::new(&p.field, format!("rule {name:?}: {}", p.message)))
                .collect()
        };
        let mut all = self.problems.clone();
        for c in &self.create {
            all.extend(named(&c.rule.name, &c.problems));
        }
        for u in &self.update {
            all.extend(named(&u.rule.name, &u.problems));
        }
        all
    }

    /// Whether applying would change nothing.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }

    /// "2 to create, 1 to update, 0 to delete, 5 unchanged".
    pub fn summary(&self) -> String {
        format!(
            "{} to create, {} to update, {} to delete, {} unchanged",
            self.create.len(),
            self.update.len(),
            self.delete.len(),
            self.unchanged.len()
        )
    }
}

/// The fields in which `after` differs from `before`, in the order a rule is written.
pub fn changes(before: &RuleBody, after: &RuleBody) -> Vec<FieldChange> {
    fn opt<T: ToString>(v: &Option<T>) -> String {
        v.as_ref().map_or_else(|| "-".to_owned(), T::to_string)
    }
    fn entries(d: &Option<Vec<DescriptorEntry>>) -> String {
        d.as_ref().map_or_else(
            || "-".to_owned(),
            |d| {
                d.iter()
                    .map(DescriptorEntry::show)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        )
    }
    let sides: [(&str, String, String); 14] = [
        ("name", before.name.clone(), after.name.clone()),
        (
            "match",
            before.match_kind.as_str().to_owned(),
            after.match_kind.as_str().to_owned(),
        ),
        ("route", opt(&before.route), opt(&after.route)),
        (
            "descriptor",
            entries(&before.descriptor),
            entries(&after.descriptor),
        ),
        (
            "scope",
            before.scope.as_str().to_owned(),
            after.scope.as_str().to_owned(),
        ),
        (
            "algorithm",
            before.algorithm.as_str().to_owned(),
            after.algorithm.as_str().to_owned(),
        ),
        ("limit", before.limit.to_string(), after.limit.to_string()),
        (
            "period_ms",
            before.period_ms.to_string(),
            after.period_ms.to_string(),
        ),
        ("burst", opt(&before.burst), opt(&after.burst)),
        (
            "penalty",
            before.penalty.to_string(),
            after.penalty.to_string(),
        ),
        (
            "failure_mode",
            before.failure_mode.as_str().to_owned(),
            after.failure_mode.as_str().to_owned(),
        ),
        (
            "shadow",
            before.shadow.to_string(),
            after.shadow.to_string(),
        ),
        (
            "enabled",
            before.enabled.to_string(),
            after.enabled.to_string(),
        ),
        (
            "allow_override",
            before.allow_override.to_string(),
            after.allow_override.to_string(),
        ),
    ];
    sides
        .into_iter()
        .filter(|(_, b, a)| b != a)
        .map(|(field, before, after)| FieldChange {
            field: field.to_owned(),
            before,
            after,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Algorithm, FailureMode, MatchKind, Scope};

    fn rule() -> RuleBody {
        RuleBody {
            name: "search".into(),
            match_kind: MatchKind::Exact,
            route: Some("GET /search".into()),
            descriptor: None,
            scope: Scope::Subject,
            algorithm: Algorithm::TokenBucket,
            limit: 10,
            period_ms: 1_000,
            burst: None,
            penalty: false,
            failure_mode: FailureMode::Closed,
            shadow: false,
            enabled: true,
            allow_override: false,
        }
    }

    #[test]
    fn changes_name_each_changed_field_with_both_sides_and_nothing_else() {
        assert_eq!(changes(&rule(), &rule()), vec![]);
        let mut after = rule();
        after.limit = 20;
        after.burst = Some(40);
        after.shadow = true;
        let shown: Vec<(String, String, String)> = changes(&rule(), &after)
            .into_iter()
            .map(|c| (c.field, c.before, c.after))
            .collect();
        assert_eq!(
            shown,
            [
                ("limit".into(), "10".into(), "20".into()),
                ("burst".into(), "-".into(), "40".into()),
                ("shadow".into(), "false".into(), "true".into()),
            ]
        );
    }

    #[test]
    fn a_file_names_its_fields_and_refuses_unknown_ones() {
        let file = RulesFile {
            rules: vec![rule()],
        };
        let json = serde_json::to_string(&file).unwrap();
        assert!(!json.contains("\"id\""), "{json}");
        assert_eq!(serde_json::from_str::<RulesFile>(&json).unwrap(), file);
        let err = serde_json::from_str::<RulesFile>(r#"{"rules": [], "tenant": "x"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `tenant`"), "{err}");
    }

    #[test]
    fn every_problem_of_a_plan_names_its_rule() {
        let plan = RulesPlan {
            create: vec![PlannedCreate {
                rule: rule(),
                problems: vec![FieldError::new("limit", "must be at least 1")],
            }],
            problems: vec![FieldError::new("rules", "a name is given twice")],
            ..RulesPlan::default()
        };
        let all = plan.all_problems();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].field, "limit");
        assert_eq!(all[1].message, "rule \"search\": must be at least 1");
    }
}
