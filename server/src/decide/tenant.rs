//! The compiled tenant: a tenant's status and its enabled rules, arranged so that resolving
//! a route to its rules is a hash lookup and a short scan. Compiled once per load and cached
//! (see [`crate::cache`]); simulate compiles the stored rules fresh.

use std::collections::HashMap;
use std::sync::Arc;

use app::rules::{MatchKind, OverrideInfo, Scope, SubjectPattern};
use app::tenants::TenantStatus;

use super::deny_cache::DenyCache;
use crate::limiter::MAX_RULES;
use crate::store::rules::Rule;
use crate::store::tenants::Tenant;

/// At most this many rules of one match (`all`, `default`, or one route) count per tenant, so
/// that a check (its route's rules and the `all` rules) never takes more than the limiter's
/// [`MAX_RULES`]. The admin service refuses a rule past it, atomically; should the store hold
/// more anyway, compiling keeps the oldest and says so in the log.
pub const MAX_RULES_PER_MATCH: usize = MAX_RULES / 2;

/// A tenant's status and its enabled rules, compiled for matching.
#[derive(Debug, Clone)]
pub struct CompiledTenant {
    pub tenant: Tenant,
    exact: HashMap<String, Vec<Arc<Rule>>>,
    /// Prefix rules, longest prefix first.
    prefixes: Vec<Arc<Rule>>,
    default: Vec<Arc<Rule>>,
    all: Vec<Arc<Rule>>,
    /// Descriptor rules by their entry keys, in order.
    descriptors: HashMap<Vec<String>, Vec<Arc<Rule>>>,
    /// The tenant's quota of live buckets (and request_id records); `None`: none.
    pub max_live_buckets: Option<u64>,
    /// The checks the limiter has just denied ([`DenyCache`]): compiled empty, and gone
    /// with the compiled tenant whenever a change to the tenant is announced.
    pub denials: Arc<DenyCache>,
    /// Per-subject overrides by rule id, each compiled into the rule it makes.
    overrides: HashMap<String, SubjectOverrides>,
}

/// One rule's per-subject overrides.
#[derive(Debug, Clone, Default)]
struct SubjectOverrides {
    exact: HashMap<String, Arc<Rule>>,
    /// Longest prefix first.
    prefixes: Vec<(String, Arc<Rule>)>,
}

impl CompiledTenant {
    pub fn compile(tenant: Tenant, rules: Vec<Rule>) -> Self {
        let mut compiled = Self {
            tenant,
            exact: HashMap::new(),
            prefixes: Vec::new(),
            default: Vec::new(),
            all: Vec::new(),
            descriptors: HashMap::new(),
            max_live_buckets: None,
            denials: Arc::default(),
            overrides: HashMap::new(),
        };
        for mut rule in rules.into_iter().filter(|r| r.body.enabled) {
            // Routes are matched in their normal form, the form a check's route takes, even
            // for a rule stored before routes were normalised on save.
            rule.body = rule.body.normalized();
            let rule = Arc::new(rule);
            match (rule.body.match_kind, rule.body.route.clone()) {
                (MatchKind::Exact, Some(route)) => {
                    compiled.exact.entry(route).or_default().push(rule)
                }
                (MatchKind::Prefix, Some(_)) => compiled.prefixes.push(rule),
                (MatchKind::Default, _) => compiled.default.push(rule),
                (MatchKind::All, _) => compiled.all.push(rule),
                (MatchKind::Descriptor, _) => {
                    let keys = rule
                        .body
                        .descriptor
                        .iter()
                        .flatten()
                        .map(|e| e.key.clone())
                        .collect();
                    compiled.descriptors.entry(keys).or_default().push(rule);
                }
                _ => {}
            }
        }
        let tenant = compiled.tenant.id.clone();
        for rules in compiled.exact.values_mut() {
            keep_oldest(&tenant, rules);
        }
        keep_oldest(&tenant, &mut compiled.default);
        keep_oldest(&tenant, &mut compiled.all);
        for rules in compiled.descriptors.values_mut() {
            // Each pattern (keys and values) is one match.
            let mut by_pattern: HashMap<Vec<app::rules::DescriptorEntry>, Vec<Arc<Rule>>> =
                HashMap::new();
            for rule in rules.drain(..) {
                let pattern = rule.body.descriptor.clone().unwrap_or_default();
                by_pattern.entry(pattern).or_default().push(rule);
            }
            for mut same in by_pattern.into_values() {
                keep_oldest(&tenant, &mut same);
                rules.extend(same);
            }
            rules.sort_by(|a, b| order(a, b));
        }
        // Prefix rules: the oldest few of each prefix, longest prefix first.
        let mut by_prefix: HashMap<String, Vec<Arc<Rule>>> = HashMap::new();
        for rule in compiled.prefixes.drain(..) {
            let prefix = rule.body.route.clone().unwrap_or_default();
            by_prefix.entry(prefix).or_default().push(rule);
        }
        for mut rules in by_prefix.into_values() {
            keep_oldest(&tenant, &mut rules);
            compiled.prefixes.extend(rules);
        }
        compiled.prefixes.sort_by(|a, b| {
            let len = |r: &Rule| r.body.route.as_ref().map_or(0, String::len);
            len(b)
                .cmp(&len(a))
                .then_with(|| a.body.name.cmp(&b.body.name))
        });
        compiled
    }

    /// This tenant with its rules' per-subject overrides, each compiled into the rule it
    /// makes (the rule with the override's limit, period and burst). Overrides of a rule that
    /// is not compiled (disabled) or not per subject, or that no longer fit their rule, are
    /// left out.
    pub fn with_overrides(mut self, overrides: Vec<OverrideInfo>) -> Self {
        let rules: HashMap<String, Arc<Rule>> = self
            .exact
            .values()
            .flatten()
            .chain(&self.prefixes)
            .chain(&self.default)
            .chain(&self.all)
            .chain(self.descriptors.values().flatten())
            .map(|r| (r.id.clone(), r.clone()))
            .collect();
        for o in overrides {
            let Some(rule) = rules.get(&o.rule_id) else {
                continue;
            };
            if rule.body.scope != Scope::Subject {
                continue;
            }
            // The admin service refuses a rule edit its overrides would not fit, but an Envoy
            // import may still change a descriptor rule under them: such an override is left
            // out (decided by the rule) rather than handed to the limiter as an invalid rule.
            if let Some(problem) = o.body.problems(&rule.body).first() {
                tracing::warn!(tenant = %rule.tenant_id, rule = %rule.body.name, subject = %o.body.subject, %problem, "an override that no longer fits its rule is ignored");
                continue;
            }
            let made = Arc::new(Rule {
                body: o.body.apply(&rule.body),
                ..(**rule).clone()
            });
            let mine = self.overrides.entry(o.rule_id.clone()).or_default();
            match o.body.pattern() {
                SubjectPattern::Exact(subject) => {
                    mine.exact.insert(subject.to_owned(), made);
                }
                SubjectPattern::Prefix(prefix) => mine.prefixes.push((prefix.to_owned(), made)),
            }
        }
        for mine in self.overrides.values_mut() {
            mine.prefixes
                .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        }
        self
    }

    /// The rule that decides `subject` where `rule` applies: its override for that exact
    /// subject, else for the longest prefix of it, else `rule` itself.
    pub fn for_subject<'a>(&'a self, rule: &'a Arc<Rule>, subject: &str) -> &'a Arc<Rule> {
        let Some(mine) = self.overrides.get(&rule.id) else {
            return rule;
        };
        if let Some(exact) = mine.exact.get(subject) {
            return exact;
        }
        mine.prefixes
            .iter()
            .find(|(prefix, _)| subject.starts_with(prefix.as_str()))
            .map_or(rule, |(_, made)| made)
    }

    /// Replaces each per-subject rule of `rules` by its override for `subject`, if any.
    pub fn apply_overrides(&self, rules: &mut [Arc<Rule>], subject: &str) {
        if self.overrides.is_empty() {
            return;
        }
        for rule in rules.iter_mut() {
            if rule.body.scope == Scope::Subject {
                let decides = self.for_subject(rule, subject);
                if !Arc::ptr_eq(decides, rule) {
                    *rule = decides.clone();
                }
            }
        }
    }

    /// This tenant with a quota of live buckets.
    pub fn with_live_bucket_quota(self, quota: u64) -> Self {
        Self {
            max_live_buckets: Some(quota),
            ..self
        }
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

impl CompiledTenant {
    /// The rules that apply to an Envoy descriptor (its entries' keys and values, in order),
    /// each with its subject: the descriptor rules with exactly these keys whose values match,
    /// and of those only the most specific pattern (at the first entry where two differ, a
    /// value beats none, as envoyproxy/ratelimit prefers `key_value` to `key`).
    pub fn resolve_descriptor(&self, entries: &[(&str, &str)]) -> Vec<(Arc<Rule>, Option<String>)> {
        let keys: Vec<String> = entries.iter().map(|(k, _)| (*k).to_owned()).collect();
        let Some(rules) = self.descriptors.get(&keys) else {
            return Vec::new();
        };
        let pattern = |rule: &Rule| -> Vec<bool> {
            rule.body
                .descriptor
                .iter()
                .flatten()
                .map(|e| e.value.is_some())
                .collect()
        };
        let matching: Vec<&Arc<Rule>> = rules
            .iter()
            .filter(|rule| {
                rule.body
                    .descriptor
                    .iter()
                    .flatten()
                    .zip(entries)
                    .all(|(want, (_, value))| want.value.as_deref().is_none_or(|v| v == *value))
            })
            .collect();
        let Some(best) = matching.iter().map(|r| pattern(r)).max() else {
            return Vec::new();
        };
        matching
            .into_iter()
            .filter(|rule| pattern(rule) == best)
            .map(|rule| {
                let subject = descriptor_subject(rule, entries);
                (rule.clone(), subject)
            })
            .collect()
    }
}

/// The subject of a descriptor rule: the values of the entries it gives no value for, joined
/// by `|` (a `|` or `\\` in a value escaped with `\\`, so two descriptors never share a
/// subject); `None` when every entry has a value.
fn descriptor_subject(rule: &Rule, entries: &[(&str, &str)]) -> Option<String> {
    let mut subject: Option<String> = None;
    for (want, (_, value)) in rule.body.descriptor.iter().flatten().zip(entries) {
        if want.value.is_some() {
            continue;
        }
        let s = match subject.as_mut() {
            Some(s) => {
                s.push('|');
                s
            }
            None => subject.insert(String::new()),
        };
        for c in value.chars() {
            if c == '|' || c == '\\' {
                s.push('\\');
            }
            s.push(c);
        }
    }
    subject
}

/// Rules in the order they were stored (then by id, so the order is total).
fn order(a: &Rule, b: &Rule) -> std::cmp::Ordering {
    (a.created_at, &a.id).cmp(&(b.created_at, &b.id))
}

/// Keeps the [`MAX_RULES_PER_MATCH`] oldest of `rules` (all of one match), in their order,
/// and logs the rest.
fn keep_oldest(tenant: &str, rules: &mut Vec<Arc<Rule>>) {
    if rules.len() <= MAX_RULES_PER_MATCH {
        return;
    }
    let mut by_age: Vec<&Arc<Rule>> = rules.iter().collect();
    by_age.sort_by(|a, b| order(a, b));
    let ignored: Vec<String> = by_age[MAX_RULES_PER_MATCH..]
        .iter()
        .map(|r| r.id.clone())
        .collect();
    tracing::warn!(
        tenant,
        ?ignored,
        "more rules of one match than a check can take; the newest are ignored"
    );
    rules.retain(|r| !ignored.contains(&r.id));
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
                descriptor: None,
                scope: Scope::Tenant,
                algorithm: Algorithm::Gcra,
                limit: 1,
                period_ms: 1,
                burst: None,
                penalty: false,
                failure_mode: FailureMode::Closed,
                shadow: false,
                enabled: true,
                allow_override: false,
            },
            created_at: 0,
            updated_at: 0,
        }
    }

    fn descriptor_rule(name: &str, entries: &[(&str, Option<&str>)]) -> Rule {
        let mut rule = rule(name, MatchKind::Descriptor, None);
        rule.body.descriptor = Some(
            entries
                .iter()
                .map(|(k, v)| app::rules::DescriptorEntry {
                    key: (*k).to_owned(),
                    value: v.map(str::to_owned),
                })
                .collect(),
        );
        rule
    }

    #[test]
    fn a_rule_stored_with_a_route_in_another_form_still_matches_its_normal_form() {
        let t = compiled(vec![
            rule("exact", MatchKind::Exact, Some(" post  /payments ")),
            rule("prefix", MatchKind::Prefix, Some("get /api/")),
        ]);
        let names = |route: &str| -> Vec<String> {
            t.resolve(route)
                .iter()
                .map(|r| r.body.name.clone())
                .collect()
        };
        assert_eq!(names("POST /payments"), ["exact"]);
        assert_eq!(names("GET /api/v1"), ["prefix"]);
    }

    #[test]
    fn a_descriptor_resolves_to_its_most_specific_rules_with_the_keyless_values_as_subject() {
        let t = compiled(vec![
            descriptor_rule("any-path", &[("path", None)]),
            descriptor_rule("login", &[("path", Some("/login"))]),
            descriptor_rule("login-2", &[("path", Some("/login"))]),
            descriptor_rule(
                "nested",
                &[("svc", Some("api")), ("user", None), ("ip", None)],
            ),
            descriptor_rule(
                "nested-any",
                &[("svc", None), ("user", Some("ann")), ("ip", None)],
            ),
        ]);
        let resolve = |entries: &[(&str, &str)]| -> Vec<(String, Option<String>)> {
            t.resolve_descriptor(entries)
                .into_iter()
                .map(|(r, s)| (r.body.name.clone(), s))
                .collect()
        };
        assert_eq!(
            resolve(&[("path", "/login")]),
            [("login".into(), None), ("login-2".into(), None)]
        );
        assert_eq!(
            resolve(&[("path", "/x")]),
            [("any-path".into(), Some("/x".into()))]
        );
        // A value at the first entry beats one at a later entry; keyless values joined by |,
        // escaped so that no two descriptors share a subject.
        assert_eq!(
            resolve(&[("svc", "api"), ("user", "ann"), ("ip", "a|b")]),
            [("nested".into(), Some("ann|a\\|b".into()))]
        );
        assert_eq!(
            resolve(&[("svc", "web"), ("user", "ann"), ("ip", "1")]),
            [("nested-any".into(), Some("web|1".into()))]
        );
        assert!(resolve(&[("user", "ann"), ("svc", "api"), ("ip", "1")]).is_empty());
        assert!(resolve(&[("path", "/x"), ("more", "y")]).is_empty());
        // Route resolution never sees descriptor rules.
        assert!(t.resolve("path").is_empty());
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

    fn set(rule: &str, subject: &str, limit: u64) -> OverrideInfo {
        OverrideInfo {
            id: format!("{rule}/{subject}"),
            rule_id: rule.to_owned(),
            body: app::rules::OverrideBody {
                subject: subject.to_owned(),
                limit,
                period_ms: None,
                burst: None,
            },
            created_at: 0,
        }
    }

    #[test]
    fn a_subject_gets_its_exact_override_else_the_longest_prefix_else_the_rule() {
        let per_subject = |name: &str, kind: MatchKind, enabled: bool| {
            let mut r = rule(name, kind, None);
            r.body.scope = Scope::Subject;
            r.body.enabled = enabled;
            r
        };
        let mut by_path = descriptor_rule("by-path", &[("path", None)]);
        by_path.body.scope = Scope::Subject;
        let t = compiled(vec![
            per_subject("users", MatchKind::Default, true),
            per_subject("off", MatchKind::All, false),
            rule("site", MatchKind::All, None),
            by_path,
        ])
        .with_overrides(vec![
            set("users", "acme-*", 3),
            set("users", "acme-vip-*", 5),
            set("users", "acme-vip-7", 2),
            set("off", "acme-*", 9),
            set("site", "acme-*", 9),
            set("by-path", "/admin*", 7),
            // No longer a valid override of its rule (a limit of 0): left out.
            set("users", "broken", 0),
        ]);
        let limit = |name: &str, subject: &str| {
            let mut rules = t.resolve("GET /x");
            t.apply_overrides(&mut rules, subject);
            rules
                .iter()
                .find(|r| r.body.name == name)
                .map(|r| r.body.limit)
        };
        assert_eq!(limit("users", "zed"), Some(1));
        assert_eq!(limit("users", "acme-1"), Some(3));
        assert_eq!(limit("users", "acme-vip-1"), Some(5));
        assert_eq!(limit("users", "acme-vip-7"), Some(2));
        assert_eq!(limit("users", "broken"), Some(1));
        // An override of a tenant-wide rule is ignored; a disabled rule is not compiled.
        assert_eq!(limit("site", "acme-1"), Some(1));
        assert_eq!(limit("off", "acme-1"), None);
        // The overridden rule is the same rule: same id, so the same bucket.
        let mut rules = t.resolve("GET /x");
        t.apply_overrides(&mut rules, "acme-1");
        assert!(rules.iter().any(|r| r.id == "users" && r.body.limit == 3));
        // Descriptor rules per subject take overrides of the subject their values make.
        let (rule, subject) = t.resolve_descriptor(&[("path", "/admin/x")]).remove(0);
        assert_eq!(
            t.for_subject(&rule, subject.as_deref().unwrap()).body.limit,
            7
        );
        let (rule, subject) = t.resolve_descriptor(&[("path", "/home")]).remove(0);
        assert_eq!(
            t.for_subject(&rule, subject.as_deref().unwrap()).body.limit,
            1
        );
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
    fn a_check_never_takes_more_rules_than_the_limiter_accepts() {
        // More rules than the admin service allows (written behind its back): the oldest
        // of each match count, so a check still fits the limiter.
        let aged = |name: &str, kind, route, created_at| {
            let mut r = rule(name, kind, route);
            r.created_at = created_at;
            r
        };
        let mut rules = Vec::new();
        for i in 0..6 {
            rules.push(aged(
                &format!("exact-{i}"),
                MatchKind::Exact,
                Some("GET /a"),
                10 - i,
            ));
            rules.push(aged(
                &format!("prefix-{i}"),
                MatchKind::Prefix,
                Some("GET /"),
                i,
            ));
            rules.push(aged(&format!("all-{i}"), MatchKind::All, None, i));
        }
        let t = compiled(rules);
        let on_a = t.resolve("GET /a");
        assert_eq!(on_a.len(), MAX_RULES);
        assert_eq!(
            names(&on_a),
            ["exact-2", "exact-3", "exact-4", "exact-5", "all-0", "all-1", "all-2", "all-3"]
        );
        assert_eq!(
            names(&t.resolve("GET /b")),
            ["prefix-0", "prefix-1", "prefix-2", "prefix-3", "all-0", "all-1", "all-2", "all-3"]
        );
    }

    #[test]
    fn no_rule_matches_nothing() {
        let t = compiled(vec![rule("exact", MatchKind::Exact, Some("GET /a"))]);
        assert!(t.resolve("GET /b").is_empty());
    }
}
