//! The compiled tenant: a tenant's status and its enabled rules, arranged so that resolving
//! a route to its rules is a hash lookup and a short scan. Compiled once per load and cached
//! (see [`crate::cache`]); simulate compiles the stored rules fresh.

use std::collections::HashMap;
use std::sync::Arc;

use app::rules::MatchKind;
use app::tenants::TenantStatus;

use crate::store::rules::Rule;
use crate::store::tenants::Tenant;

/// A tenant's status and its enabled rules, compiled for matching.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledTenant {
    pub tenant: Tenant,
    exact: HashMap<String, Vec<Arc<Rule>>>,
    /// Prefix rules, longest prefix first.
    prefixes: Vec<Arc<Rule>>,
    default: Vec<Arc<Rule>>,
    all: Vec<Arc<Rule>>,
}

impl CompiledTenant {
    pub fn compile(tenant: Tenant, rules: Vec<Rule>) -> Self {
        let mut compiled = Self {
            tenant,
            exact: HashMap::new(),
            prefixes: Vec::new(),
            default: Vec::new(),
            all: Vec::new(),
        };
        for rule in rules.into_iter().filter(|r| r.body.enabled) {
            let rule = Arc::new(rule);
            match (rule.body.match_kind, rule.body.route.clone()) {
                (MatchKind::Exact, Some(route)) => {
                    compiled.exact.entry(route).or_default().push(rule)
                }
                (MatchKind::Prefix, Some(_)) => compiled.prefixes.push(rule),
                (MatchKind::Default, _) => compiled.default.push(rule),
                (MatchKind::All, _) => compiled.all.push(rule),
                _ => {}
            }
        }
        compiled
            .prefixes
            .sort_by_key(|r| std::cmp::Reverse(r.body.route.as_ref().map_or(0, String::len)));
        compiled
    }

    pub fn is_active(&self) -> bool {
        self.tenant.status == TenantStatus::Active
    }

    /// The rules that apply to `route`: the most specific route rules (exact, else the
    /// longest matching prefix, else the defaults), then every `all` rule.
    pub fn resolve(&self, route: &str) -> Vec<Arc<Rule>> {
        let route_rules: Vec<Arc<Rule>> = if let Some(rules) = self.exact.get(route) {
            rules.clone()
        } else if let Some(first) = self.prefixes.iter().find(|r| {
            r.body
                .route
                .as_deref()
                .is_some_and(|p| route.starts_with(p))
        }) {
            let len = first.body.route.as_ref().map_or(0, String::len);
            self.prefixes
                .iter()
                .filter(|r| {
                    r.body
                        .route
                        .as_ref()
                        .is_some_and(|p| p.len() == len && route.starts_with(p.as_str()))
                })
                .cloned()
                .collect()
        } else {
            self.default.clone()
        };
        route_rules
            .into_iter()
            .chain(self.all.iter().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::rules::{Algorithm, FailureMode, RuleBody, Scope};
    use app::tenants::TenantStatus;

    fn rule(name: &str, match_kind: MatchKind, route: Option<&str>) -> Rule {
        Rule {
            id: name.to_owned(),
            tenant_id: "t".to_owned(),
            body: RuleBody {
                name: name.to_owned(),
                match_kind,
                route: route.map(str::to_owned),
                scope: Scope::Tenant,
                algorithm: Algorithm::Gcra,
                limit: 1,
                period_ms: 1,
                burst: None,
                penalty: false,
                failure_mode: FailureMode::Closed,
                shadow: false,
                enabled: true,
            },
            created_at: 0,
            updated_at: 0,
        }
    }

    fn names(rules: &[Arc<Rule>]) -> Vec<&str> {
        rules.iter().map(|r| r.body.name.as_str()).collect()
    }

    fn compiled(rules: Vec<Rule>) -> CompiledTenant {
        let tenant = Tenant {
            id: "t".into(),
            name: "t".into(),
            status: TenantStatus::Active,
            created_at: 0,
            updated_at: 0,
        };
        CompiledTenant::compile(tenant, rules)
    }

    #[test]
    fn exact_beats_the_longest_prefix_which_beats_the_default() {
        let mut disabled = rule("off", MatchKind::Exact, Some("GET /users/me"));
        disabled.body.enabled = false;
        let t = compiled(vec![
            rule("exact", MatchKind::Exact, Some("GET /users/me")),
            rule("short", MatchKind::Prefix, Some("GET /")),
            rule("long", MatchKind::Prefix, Some("GET /users/")),
            rule("fallback", MatchKind::Default, None),
            rule("tenant-wide", MatchKind::All, None),
            disabled,
        ]);
        assert_eq!(names(&t.resolve("GET /users/me")), ["exact", "tenant-wide"]);
        assert_eq!(names(&t.resolve("GET /users/42")), ["long", "tenant-wide"]);
        assert_eq!(names(&t.resolve("GET /orders")), ["short", "tenant-wide"]);
        assert_eq!(
            names(&t.resolve("POST /orders")),
            ["fallback", "tenant-wide"]
        );
    }

    #[test]
    fn no_rule_matches_nothing() {
        let t = compiled(vec![rule("exact", MatchKind::Exact, Some("GET /a"))]);
        assert!(t.resolve("GET /b").is_empty());
    }
}
