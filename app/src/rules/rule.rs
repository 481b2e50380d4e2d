//! [`RuleBody`]: a tenant's rule as the API and the console exchange it, and its validation.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::spec::{Algorithm, FieldError, LimitSpec};

/// The one form of a route, used wherever a route is named (a rule when it is saved or
/// compiled, a check, a simulation), so that matching never differs by case or spacing:
/// `METHOD /path`, the method upper-cased, one space, no query or fragment, no surrounding
/// spaces. `" post  /payments?x=1 "` is `"POST /payments"`. Text that does not start with a
/// method (letters) and a space is only trimmed; no rule can have such a route
/// ([`RuleBody::problems`]). Borrows when the route is already in its normal form.
pub fn normal_route(route: &str) -> Cow<'_, str> {
    let trimmed = route.trim();
    let Some((method, rest)) = trimmed.split_once(char::is_whitespace) else {
        return Cow::Borrowed(trimmed);
    };
    if !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Cow::Borrowed(trimmed);
    }
    let path = rest.trim_start();
    let path = path
        .find(['?', '#'])
        .map_or(path, |end| &path[..end])
        .trim_end();
    let normal = method.bytes().all(|b| b.is_ascii_uppercase())
        && trimmed.as_bytes()[method.len()] == b' '
        && trimmed.len() == method.len() + 1 + path.len()
        && !path.is_empty();
    if normal {
        Cow::Borrowed(trimmed)
    } else if path.is_empty() {
        Cow::Owned(method.to_ascii_uppercase())
    } else {
        Cow::Owned(format!("{} {path}", method.to_ascii_uppercase()))
    }
}

/// Whether a route in its normal form is a method and a path (`POST /payments`): what a
/// rule's route must be.
fn is_method_and_path(normal: &str) -> bool {
    normal.split_once(' ').is_some_and(|(method, path)| {
        !method.is_empty()
            && method.bytes().all(|b| b.is_ascii_uppercase())
            && path.starts_with('/')
            && !path.contains(char::is_whitespace)
    })
}

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
    /// An Envoy rate-limit descriptor with exactly the rule's `descriptor` entry keys, in
    /// order (gRPC `ShouldRateLimit`); never a `/v1/check` route.
    Descriptor,
}

impl MatchKind {
    pub const ALL: [MatchKind; 5] = [
        MatchKind::Exact,
        MatchKind::Prefix,
        MatchKind::Default,
        MatchKind::All,
        MatchKind::Descriptor,
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
            MatchKind::Descriptor => "descriptor",
        }
    }

    pub fn needs_route(self) -> bool {
        matches!(self, MatchKind::Exact | MatchKind::Prefix)
    }
}

/// Most entries in a descriptor rule (Envoy's descriptors are a few entries long).
pub const MAX_DESCRIPTOR_ENTRIES: usize = 8;

/// One entry of a descriptor rule: the descriptor's entry at this place must have this
/// `key`, and this `value` when one is given. The values of the entries without one are the
/// rule's subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorEntry {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

impl DescriptorEntry {
    /// `key`, or `key=value`, as the console and the rules list show an entry.
    pub fn show(&self) -> String {
        match &self.value {
            Some(value) => format!("{}={value}", self.key),
            None => self.key.clone(),
        }
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
    /// The entries a `descriptor` rule matches, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptor: Option<Vec<DescriptorEntry>>,
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
    /// A `descriptor` rule only: a gRPC request may set this descriptor's limit itself
    /// (Envoy's per-descriptor `limit` override), counted in a bucket of its own per limit.
    #[serde(default)]
    pub allow_override: bool,
}

impl RuleBody {
    /// This rule with its route in the normal form ([`normal_route`]): what is stored and
    /// what is compiled, whatever spacing or case it was written with.
    pub fn normalized(mut self) -> Self {
        if let Some(route) = &self.route {
            if let Cow::Owned(normal) = normal_route(route) {
                self.route = Some(normal);
            }
        }
        self
    }

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
                } else if !is_method_and_path(&normal_route(route)) {
                    problems.push(FieldError::new(
                        "route",
                        "a route is a method and a path, e.g. POST /payments (a prefix rule's path may stop anywhere, e.g. GET /api/)",
                    ));
                }
            }
            (None, false) => {}
        }
        problems.extend(self.descriptor_problems());
        if self.allow_override && self.match_kind != MatchKind::Descriptor {
            problems.push(FieldError::new(
                "allow_override",
                "only a descriptor rule takes a limit from the request; leave it out",
            ));
        } else if self.allow_override && self.algorithm != Algorithm::FixedWindow {
            problems.push(FieldError::new(
                "allow_override",
                "a limit from the request needs algorithm fixed_window (a window count compares with any limit; the other algorithms' state is shaped by theirs)",
            ));
        }
        problems.extend(self.spec().problems());
        problems
    }

    /// A `descriptor` rule has 1 to [`MAX_DESCRIPTOR_ENTRIES`] entries, and is per subject
    /// exactly when some entry has no value; any other rule has no descriptor.
    fn descriptor_problems(&self) -> Vec<FieldError> {
        let field = |message: String| vec![FieldError::new("descriptor", message)];
        let entries = match (&self.descriptor, self.match_kind) {
            (None, MatchKind::Descriptor) => {
                return field(
                    "a descriptor rule needs its entries, e.g. [{\"key\": \"remote_address\"}]"
                        .to_owned(),
                )
            }
            (Some(_), kind) if kind != MatchKind::Descriptor => {
                return field(format!(
                    "a {} rule matches routes, not descriptors; leave it out",
                    kind.as_str()
                ))
            }
            (None, _) => return Vec::new(),
            (Some(entries), _) => entries,
        };
        if entries.is_empty() || entries.len() > MAX_DESCRIPTOR_ENTRIES {
            return field(format!(
                "a descriptor rule has 1 to {MAX_DESCRIPTOR_ENTRIES} entries, not {}",
                entries.len()
            ));
        }
        for entry in entries {
            if let Err(message) = check_text("an entry's key", &entry.key) {
                return field(message);
            }
            if let Some(Err(message)) = entry.value.as_deref().map(|v| check_text("a value", v)) {
                return field(message);
            }
        }
        let per_subject = entries.iter().any(|e| e.value.is_none());
        match (per_subject, self.scope) {
            (true, Scope::Tenant) => vec![FieldError::new(
                "scope",
                "entries without a value make the subject: this rule's scope is \"subject\"",
            )],
            (false, Scope::Subject) => vec![FieldError::new(
                "scope",
                "every entry has a value, so there is no subject: this rule's scope is \"tenant\"",
            )],
            _ => Vec::new(),
        }
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
    fn a_route_has_one_normal_form_whatever_its_case_spacing_or_query() {
        for written in [
            "POST /payments",
            "post /payments",
            "  post   /payments ",
            "Post /payments?x=1",
            "POST /payments#top",
            "POST\u{a0}/payments",
        ] {
            assert_eq!(normal_route(written), "POST /payments", "{written:?}");
        }
        assert!(matches!(normal_route("GET /x"), Cow::Borrowed("GET /x")));
        // Text that is not a method and a path is only trimmed (a check may name a route
        // no rule can have).
        assert_eq!(normal_route(" payments "), "payments");
        assert_eq!(normal_route("sign-in/client"), "sign-in/client");
        assert_eq!(normal_route("get ?q=1"), "GET");
        assert_eq!(normal_route("GET /x ?a=1"), "GET /x");
        // Normal is normal: a second pass changes nothing.
        for written in ["  post   /payments ", "GET /x ?a=1", "get ?q", " a b ", "x"] {
            let once = normal_route(written).into_owned();
            assert_eq!(normal_route(&once), once, "{written:?}");
        }

        let mut rule = body();
        for route in [
            "payments",
            "/payments",
            "POST payments",
            "FOO/bar",
            "GET /a b",
        ] {
            rule.route = Some(route.into());
            assert_eq!(rule.problems()[0].field, "route", "{route:?}");
        }
        rule.route = Some(" post  /payments?x=1".into());
        assert_eq!(rule.problems(), vec![], "written any way, it is a route");
        assert_eq!(
            rule.normalized().route.as_deref(),
            Some("POST /payments"),
            "and it is stored in its normal form"
        );
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
    fn descriptor_rules_need_entries_and_a_scope_that_follows_from_them() {
        let parse = |json: &str| serde_json::from_str::<RuleBody>(json).unwrap();
        let base = r#""name":"d","match":"descriptor","algorithm":"fixed_window","limit":1,"period_ms":1000"#;
        let per_client = parse(&format!(
            r#"{{{base},"scope":"subject","descriptor":[{{"key":"remote_address"}}]}}"#
        ));
        assert_eq!(per_client.problems(), vec![]);
        let valued = parse(&format!(
            r#"{{{base},"scope":"tenant","descriptor":[{{"key":"path","value":"/login"}}]}}"#
        ));
        assert_eq!(valued.problems(), vec![]);
        let fields = |rule: &RuleBody| -> Vec<String> {
            rule.problems().into_iter().map(|p| p.field).collect()
        };
        // The scope follows from the entries.
        let mut wrong = per_client.clone();
        wrong.scope = Scope::Tenant;
        assert_eq!(fields(&wrong), ["scope"]);
        let mut wrong = valued.clone();
        wrong.scope = Scope::Subject;
        assert_eq!(fields(&wrong), ["scope"]);
        // No entries, too many, or an empty key.
        let mut none = per_client.clone();
        none.descriptor = None;
        assert_eq!(fields(&none), ["descriptor"]);
        none.descriptor = Some(vec![]);
        assert_eq!(fields(&none), ["descriptor"]);
        let mut many = per_client.clone();
        many.descriptor = Some(vec![
            DescriptorEntry {
                key: "k".into(),
                value: None
            };
            MAX_DESCRIPTOR_ENTRIES + 1
        ]);
        assert_eq!(fields(&many), ["descriptor"]);
        let mut empty = per_client.clone();
        empty.descriptor = Some(vec![DescriptorEntry {
            key: String::new(),
            value: None,
        }]);
        assert_eq!(fields(&empty), ["descriptor"]);
        // Route rules have no descriptor, and descriptor rules no route.
        let mut route_rule = body();
        route_rule.descriptor = per_client.descriptor.clone();
        assert_eq!(fields(&route_rule), ["descriptor"]);
        let mut routed = per_client.clone();
        routed.route = Some("GET /".into());
        assert_eq!(fields(&routed), ["route"]);
        // Only a descriptor rule takes a limit from the request, and only with a window count.
        let mut flexible = per_client;
        flexible.allow_override = true;
        flexible.algorithm = Algorithm::FixedWindow;
        assert_eq!(fields(&flexible), Vec::<&str>::new());
        flexible.algorithm = Algorithm::TokenBucket;
        assert_eq!(fields(&flexible), ["allow_override"]);
        let mut route_rule = body();
        route_rule.allow_override = true;
        assert_eq!(fields(&route_rule), ["allow_override"]);
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
