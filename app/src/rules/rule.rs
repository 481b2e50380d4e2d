//! [`RuleBody`]: a tenant's rule as the API and the console exchange it, and its validation.

use serde::{Deserialize, Serialize};

use super::spec::{Algorithm, FieldError, LimitSpec};

/// Longest route, subject or rule name, in bytes.
pub const MAX_ROUTE_BYTES: usize = 256;
/// Longest rule name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Which checks a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchKind {
    /// The check's route equals `route`.
    Exact,
    /// The check's route starts with `route`; the longest matching prefix wins.
    Prefix,
    /// Applies when no exact or prefix rule matches.
    Default,
    /// Applies to every check of the tenant, in addition to the route rule.
    All,
}

impl MatchKind {
    pub const ALL: [MatchKind; 4] = [
        MatchKind::Exact,
        MatchKind::Prefix,
        MatchKind::Default,
        MatchKind::All,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MatchKind::Exact => "exact",
            MatchKind::Prefix => "prefix",
            MatchKind::Default => "default",
            MatchKind::All => "all",
        }
    }

    pub fn needs_route(self) -> bool {
        matches!(self, MatchKind::Exact | MatchKind::Prefix)
    }
}

/// Whose bucket a request is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One bucket for the whole tenant.
    Tenant,
    /// One bucket per `subject` the caller sends (an end user, an IP, ...).
    Subject,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Self> {
        [Scope::Tenant, Scope::Subject]
            .into_iter()
            .find(|m| m.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Tenant => "tenant",
            Scope::Subject => "subject",
        }
    }
}

/// What to answer when the limiter cannot decide (Redis down or too slow).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// 503: the caller must not proceed without a decision.
    #[default]
    Closed,
    /// Allow, and count the request as a fail-open allow.
    Open,
    /// Keep limiting in each instance's memory with an equal share of the limit (the limit ÷
    /// the instances alive), and mark the answer `degraded: "local"`.
    Local,
}

impl FailureMode {
    pub fn parse(s: &str) -> Option<Self> {
        [FailureMode::Closed, FailureMode::Open, FailureMode::Local]
            .into_iter()
            .find(|m| m.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Closed => "closed",
            FailureMode::Open => "open",
            FailureMode::Local => "local",
        }
    }
}

fn yes() -> bool {
    true
}

/// A rule as created or replaced through the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleBody {
    /// Reported as the `policy` that decided a check.
    pub name: String,
    #[serde(rename = "match")]
    pub match_kind: MatchKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    pub scope: Scope,
    pub algorithm: Algorithm,
    pub limit: u64,
    pub period_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(default)]
    pub penalty: bool,
    #[serde(default)]
    pub failure_mode: FailureMode,
    #[serde(default)]
    pub shadow: bool,
    #[serde(default = "yes")]
    pub enabled: bool,
}

impl RuleBody {
    /// The limit parameters of this rule.
    pub fn spec(&self) -> LimitSpec {
        LimitSpec {
            algorithm: self.algorithm,
            limit: self.limit,
            period_ms: self.period_ms,
            burst: self.burst,
            penalty: self.penalty,
        }
    }

    /// Every problem, each tied to its field. Empty means valid.
    pub fn problems(&self) -> Vec<FieldError> {
        let mut problems = Vec::new();
        if let Err(message) = check_name(&self.name) {
            problems.push(FieldError::new("name", message));
        }
        match (&self.route, self.match_kind.needs_route()) {
            (None, true) => problems.push(FieldError::new(
                "route",
                format!(
                    "a {} rule needs the route it matches",
                    self.match_kind.as_str()
                ),
            )),
            (Some(_), false) => problems.push(FieldError::new(
                "route",
                format!(
                    "a {} rule matches no route; leave it out",
                    self.match_kind.as_str()
                ),
            )),
            (Some(route), true) => {
                if let Err(message) = check_text("route", route) {
                    problems.push(FieldError::new("route", message));
                }
            }
            (None, false) => {}
        }
        problems.extend(self.spec().problems());
        problems
    }
}

/// Routes, subjects: 1 to [`MAX_ROUTE_BYTES`] bytes of printable text.
pub fn check_text(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if value.len() > MAX_ROUTE_BYTES {
        return Err(format!(
            "{what} is {} bytes; the maximum is {MAX_ROUTE_BYTES}",
            value.len()
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{what} must not contain control characters"));
    }
    Ok(())
}

/// Rule names appear in headers, so they are short and plain: letters, digits and `_.:/-`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!("must be 1 to {MAX_NAME_BYTES} characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.:/-".contains(c))
    {
        return Err("may contain only letters, digits and _ . : / -".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> RuleBody {
        serde_json::from_str(
            r#"{"name":"payments","match":"exact","route":"POST /payments","scope":"subject",
                "algorithm":"token_bucket","limit":10,"period_ms":1000}"#,
        )
        .unwrap()
    }

    #[test]
    fn defaults_are_applied_on_input() {
        let rule = body();
        assert_eq!(rule.failure_mode, FailureMode::Closed);
        assert!(rule.enabled && !rule.shadow && !rule.penalty);
        assert_eq!(rule.problems(), vec![]);
    }

    #[test]
    fn routes_are_required_exactly_when_matched() {
        let mut rule = body();
        rule.route = None;
        assert_eq!(rule.problems()[0].field, "route");
        rule.match_kind = MatchKind::Default;
        assert_eq!(rule.problems(), vec![]);
        rule.route = Some("GET /x".into());
        assert_eq!(rule.problems()[0].field, "route");
    }

    #[test]
    fn names_and_routes_are_bounded() {
        let mut rule = body();
        rule.name = "has space".into();
        rule.route = Some("x".repeat(257));
        let fields: Vec<String> = rule.problems().into_iter().map(|p| p.field).collect();
        assert_eq!(fields, ["name", "route"]);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<RuleBody>(
            r#"{"name":"a","match":"all","scope":"tenant","algorithm":"gcra","limit":1,"period_ms":1,"colour":1}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
    }
}
