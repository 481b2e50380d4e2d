//! Per-subject overrides of a rule: a different limit (and optionally period and burst) for
//! one subject (`acme-42`) or every subject with a prefix (`acme-*`). An exact subject beats
//! the longest matching prefix, which beats the rule. Validated here, so the console's form
//! and the admin API say the same.

use serde::{Deserialize, Serialize};

use super::rule::{check_text, RuleBody, Scope};
use super::spec::FieldError;

/// The most overrides one rule may have.
pub const MAX_OVERRIDES_PER_RULE: usize = 100;

/// What to set for a subject or a subject prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideBody {
    /// An exact subject, or a prefix followed by `*` (`acme-*`).
    pub subject: String,
    pub limit: u64,
    /// The rule's period when left out.
    #[serde(default)]
    pub period_ms: Option<u64>,
    /// Left out: equal to `limit` (for the bucket algorithms; windows have none).
    #[serde(default)]
    pub burst: Option<u64>,
}

/// A stored override.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideInfo {
    pub id: String,
    pub rule_id: String,
    #[serde(flatten)]
    pub body: OverrideBody,
    pub created_at: i64,
}

/// How a subject pattern matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectPattern<'a> {
    Exact(&'a str),
    /// Every subject that starts with this (not empty).
    Prefix(&'a str),
}

impl OverrideBody {
    /// The override's subject pattern: a trailing `*` makes a prefix.
    pub fn pattern(&self) -> SubjectPattern<'_> {
        match self.subject.strip_suffix('*') {
            Some(prefix) => SubjectPattern::Prefix(prefix),
            None => SubjectPattern::Exact(&self.subject),
        }
    }

    /// `rule` as this override makes it: its limit, period and burst replaced.
    pub fn apply(&self, rule: &RuleBody) -> RuleBody {
        let mut body = rule.clone();
        body.limit = self.limit;
        body.period_ms = self.period_ms.unwrap_or(rule.period_ms);
        body.burst = self.burst;
        body
    }

    /// Every problem with this override of `rule`, each on its field. Empty means valid.
    pub fn problems(&self, rule: &RuleBody) -> Vec<FieldError> {
        let mut problems = Vec::new();
        if rule.scope != Scope::Subject {
            problems.push(FieldError::new(
                "subject",
                format!(
                    "rule {:?} has one bucket for the whole tenant; overrides apply to rules that limit each subject",
                    rule.name
                ),
            ));
            return problems;
        }
        if let Err(message) = check_text("subject", &self.subject) {
            problems.push(FieldError::new("subject", message));
        } else if let SubjectPattern::Prefix(prefix) = self.pattern() {
            if prefix.is_empty() {
                problems.push(FieldError::new(
                    "subject",
                    "a prefix needs at least one character before `*`; to change every subject, edit the rule",
                ));
            } else if prefix.contains('*') {
                problems.push(FieldError::new(
                    "subject",
                    "only one `*`, at the end, is allowed",
                ));
            }
        }
        problems.extend(self.apply(rule).spec().problems());
        problems
    }
}

/// Whether `subject` is matched by the pattern `pattern`.
pub fn matches(pattern: SubjectPattern<'_>, subject: &str) -> bool {
    match pattern {
        SubjectPattern::Exact(s) => s == subject,
        SubjectPattern::Prefix(p) => subject.starts_with(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Algorithm, FailureMode, MatchKind};

    fn per_subject() -> RuleBody {
        RuleBody {
            name: "per-user".into(),
            match_kind: MatchKind::Default,
            route: None,
            descriptor: None,
            scope: Scope::Subject,
            algorithm: Algorithm::TokenBucket,
            limit: 10,
            period_ms: 1000,
            burst: Some(20),
            penalty: false,
            failure_mode: FailureMode::Closed,
            shadow: false,
            enabled: true,
            allow_override: false,
        }
    }

    fn set(subject: &str, limit: u64) -> OverrideBody {
        OverrideBody {
            subject: subject.into(),
            limit,
            period_ms: None,
            burst: None,
        }
    }

    #[test]
    fn an_override_replaces_limit_period_and_burst_only() {
        let rule = per_subject();
        let o = OverrideBody {
            period_ms: Some(60_000),
            ..set("acme-*", 500)
        };
        let body = o.apply(&rule);
        assert_eq!(
            (body.limit, body.period_ms, body.burst),
            (500, 60_000, None)
        );
        assert_eq!((&body.name, body.algorithm), (&rule.name, rule.algorithm));
        assert_eq!(set("a", 5).apply(&rule).period_ms, 1000);
    }

    #[test]
    fn patterns_are_exact_or_a_prefix() {
        assert_eq!(
            set("acme-42", 1).pattern(),
            SubjectPattern::Exact("acme-42")
        );
        assert_eq!(set("acme-*", 1).pattern(), SubjectPattern::Prefix("acme-"));
        assert!(matches(SubjectPattern::Prefix("acme-"), "acme-42"));
        assert!(!matches(SubjectPattern::Prefix("acme-"), "acme"));
        assert!(!matches(SubjectPattern::Exact("acme-4"), "acme-42"));
    }

    #[test]
    fn bad_overrides_say_which_field() {
        let rule = per_subject();
        let fields = |o: OverrideBody, rule: &RuleBody| {
            o.problems(rule)
                .into_iter()
                .map(|p| p.field)
                .collect::<Vec<_>>()
        };
        assert!(fields(set("acme-*", 5), &rule).is_empty());
        assert_eq!(fields(set("*", 5), &rule), ["subject"]);
        assert_eq!(fields(set("a*b*", 5), &rule), ["subject"]);
        assert_eq!(fields(set("", 5), &rule), ["subject"]);
        assert_eq!(fields(set("ok", 0), &rule), ["limit"]);
        let huge_period = OverrideBody {
            period_ms: Some(u64::MAX),
            ..set("ok", 5)
        };
        assert_eq!(fields(huge_period, &rule), ["period_ms"]);
        let tenant_wide = RuleBody {
            scope: Scope::Tenant,
            ..per_subject()
        };
        assert_eq!(fields(set("ok", 5), &tenant_wide), ["subject"]);
        let window = RuleBody {
            algorithm: Algorithm::FixedWindow,
            burst: None,
            ..per_subject()
        };
        let with_burst = OverrideBody {
            burst: Some(9),
            ..set("ok", 5)
        };
        assert_eq!(fields(with_burst, &window), ["burst"]);
    }
}
