//! Importing an envoyproxy/ratelimit configuration (its YAML) as a tenant's descriptor rules:
//! [`translate`] reads the file and says plainly what it cannot express;
//! [`AdminService::import_descriptor_rules`] compares the result with the tenant's descriptor
//! rules (by name) and, when asked, creates, updates and deletes them in one transaction: the
//! plan of [`super::rule_files`], over the descriptor rules only.
//!
//! Each descriptor with a `rate_limit` becomes one `fixed_window` rule (envoyproxy/ratelimit
//! counts in windows aligned to the epoch, as Sluice's fixed window does) whose entries are the
//! path from the top of the file to it: keys with their values where the file gives one. The
//! unit is the period (a month is 30 days and a year 365, as that service counts them);
//! `shadow_mode` is a shadow rule; every imported rule takes a request's per-descriptor limit
//! override, as that service does. Route rules are never touched.

use std::collections::HashSet;

use app::rules::{
    check_name, Algorithm, DescriptorEntry, FailureMode, MatchKind, RuleBody, RulesPlan, Scope,
    MAX_IMPORT_BYTES, MAX_NAME_BYTES,
};
use serde::{Deserialize, Serialize};

use super::rule_files::RuleSet;
use super::{Actor, AdminService, ServiceError};

/// The file's top level.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    domain: String,
    #[serde(default)]
    descriptors: Vec<Node>,
}

/// One descriptor of the file, with its children.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Node {
    key: String,
    value: Option<String>,
    rate_limit: Option<Limit>,
    #[serde(default)]
    descriptors: Vec<Node>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    quota_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    metadata: Option<serde_yaml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Limit {
    unit: Option<String>,
    requests_per_unit: Option<u64>,
    #[serde(default)]
    unlimited: bool,
    name: Option<String>,
    replaces: Option<serde_yaml::Value>,
}

/// What a file becomes: its domain, the rules, and what it says that Sluice does not do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Translation {
    pub domain: String,
    pub rules: Vec<RuleBody>,
    /// One line per thing the file says that the rules cannot express, naming where.
    pub notes: Vec<String>,
}

/// The length of a unit of envoyproxy/ratelimit in ms, by its (case-insensitive) name.
fn unit_ms(unit: &str) -> Option<u64> {
    const SECOND: u64 = 1_000;
    const DAY: u64 = 86_400 * SECOND;
    Some(match unit.to_ascii_lowercase().as_str() {
        "second" => SECOND,
        "minute" => 60 * SECOND,
        "hour" => 3_600 * SECOND,
        "day" => DAY,
        "week" => 7 * DAY,
        "month" => 30 * DAY,
        "year" => 365 * DAY,
        _ => return None,
    })
}

/// Reads an envoyproxy/ratelimit configuration. A file that is not one (bad YAML, an unknown
/// field, a limit without its unit) is an error that says where; what is valid there but not
/// expressible here is a note, and that descriptor gets no rule.
pub fn translate(yaml: &str) -> Result<Translation, String> {
    if yaml.len() > MAX_IMPORT_BYTES {
        return Err(format!(
            "the configuration is {} KiB; at most {} KiB is read",
            yaml.len().div_ceil(1024),
            MAX_IMPORT_BYTES / 1024
        ));
    }
    let file: File = serde_yaml::from_str(yaml)
        .map_err(|e| format!("not an envoyproxy/ratelimit configuration: {e}"))?;
    if file.domain.trim().is_empty() {
        return Err("`domain` must not be empty".to_owned());
    }
    let mut out = Translation {
        domain: file.domain,
        rules: Vec::new(),
        notes: Vec::new(),
    };
    let mut names = HashSet::new();
    for node in &file.descriptors {
        walk(node, &mut Vec::new(), &mut out, &mut names)?;
    }
    Ok(out)
}

fn walk(
    node: &Node,
    path: &mut Vec<DescriptorEntry>,
    out: &mut Translation,
    names: &mut HashSet<String>,
) -> Result<(), String> {
    path.push(DescriptorEntry {
        key: node.key.clone(),
        value: node.value.clone(),
    });
    let here = path
        .iter()
        .map(DescriptorEntry::show)
        .collect::<Vec<_>>()
        .join(" / ");
    let mut note = |what: &str| out.notes.push(format!("{here}: {what}"));
    // That service reads a value ending in `*` as a prefix; a `*` elsewhere is literal.
    if node.value.as_deref().is_some_and(|v| v.ends_with('*')) {
        note("a wildcard value (a prefix ending in `*`) is not supported: no rule for it or below it");
        path.pop();
        return Ok(());
    }
    if node.quota_mode {
        note("quota_mode is not supported: its limit is imported as an ordinary limit");
    }
    if node.share_threshold {
        note("share_threshold applies only to wildcard values; ignored");
    }
    if node.detailed_metric || node.value_to_metric || node.metadata.is_some() {
        note("detailed_metric, value_to_metric and metadata shape that service's statistics; ignored (Sluice's metrics are by rule)");
    }
    if let Some(limit) = &node.rate_limit {
        if limit.replaces.is_some() {
            note("`replaces` is not supported: every rule that matches a descriptor applies; this limit is imported without it");
        }
        if limit.unlimited {
            if limit.unit.is_some() || limit.requests_per_unit.is_some() {
                return Err(format!(
                    "{here}: an unlimited rate_limit has no unit or requests_per_unit"
                ));
            }
            note("unlimited: no rule, so these descriptors are not limited (unless another rule with the same keys matches them)");
        } else {
            let unit = limit
                .unit
                .as_deref()
                .ok_or_else(|| format!("{here}: rate_limit needs a unit"))?;
            let period_ms = unit_ms(unit).ok_or_else(|| {
                format!("{here}: unknown unit {unit:?}: use second, minute, hour, day, week, month or year")
            })?;
            let requests = limit
                .requests_per_unit
                .ok_or_else(|| format!("{here}: rate_limit needs requests_per_unit"))?;
            if requests == 0 {
                note("requests_per_unit 0 (refuse every request) is not supported: no rule");
            } else {
                let per_subject = path.iter().any(|e| e.value.is_none());
                let name = rule_name(limit.name.as_deref(), path, names);
                out.rules.push(RuleBody {
                    name,
                    match_kind: MatchKind::Descriptor,
                    route: None,
                    descriptor: Some(path.clone()),
                    scope: if per_subject {
                        Scope::Subject
                    } else {
                        Scope::Tenant
                    },
                    algorithm: Algorithm::FixedWindow,
                    limit: requests,
                    period_ms,
                    burst: None,
                    penalty: false,
                    failure_mode: FailureMode::Closed,
                    shadow: node.shadow_mode,
                    enabled: true,
                    allow_override: true,
                });
            }
        }
    } else if node.shadow_mode {
        note("shadow_mode without a rate_limit has nothing to shadow; ignored");
    }
    for child in &node.descriptors {
        walk(child, path, out, names)?;
    }
    path.pop();
    Ok(())
}

/// A rule's name: the limit's own `name` when it is a valid, unused rule name; otherwise made
/// from the path (`envoy.key_value.key`), shortened with a digest when too long, and made
/// unique in the file with a number.
fn rule_name(given: Option<&str>, path: &[DescriptorEntry], used: &mut HashSet<String>) -> String {
    if let Some(name) = given.filter(|n| check_name(n).is_ok() && !used.contains(*n)) {
        used.insert(name.to_owned());
        return name.to_owned();
    }
    let plain = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_:/-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut name = format!(
        "envoy.{}",
        path.iter()
            .map(|e| match &e.value {
                Some(v) => format!("{}_{}", plain(&e.key), plain(v)),
                None => plain(&e.key),
            })
            .collect::<Vec<_>>()
            .join(".")
    );
    if name.len() > MAX_NAME_BYTES {
        let digest = app::keys::sha256_hex(&name);
        name = format!("{}.{}", &name[..MAX_NAME_BYTES - 9], &digest[..8]);
    }
    let mut unique = name.clone();
    let mut n = 2;
    while used.contains(&unique) {
        let suffix = format!("-{n}");
        unique = format!(
            "{}{suffix}",
            &name[..name.len().min(MAX_NAME_BYTES - suffix.len())]
        );
        n += 1;
    }
    used.insert(unique.clone());
    unique
}

impl AdminService {
    /// Makes the tenant's descriptor rules those of `rules` (by name), as
    /// [`AdminService::import_rules`] does over [`RuleSet::Descriptor`]: route rules are not
    /// touched. A plan with problems is refused even as a preview.
    pub async fn import_descriptor_rules(
        &self,
        actor: &Actor,
        tenant_id: &str,
        rules: &[RuleBody],
        apply: bool,
        expect: Option<&str>,
    ) -> Result<RulesPlan, ServiceError> {
        self.import_rules_strictly(actor, tenant_id, rules, RuleSet::Descriptor, apply, expect)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_descriptors_become_rules_and_what_cannot_be_expressed_is_named() {
        let t = translate(
            r#"
domain: acme
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 60 }
  - key: path
    value: /login
    shadow_mode: true
    rate_limit: { unit: SECOND, requests_per_unit: 5, name: login }
    descriptors:
      - key: user
        rate_limit: { unit: hour, requests_per_unit: 100 }
  - key: path
    value: /health
    rate_limit: { unlimited: true }
  - key: path
    value: "/img/*"
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: path
    value: "a*b"
    rate_limit: { unit: day, requests_per_unit: 7 }
"#,
        )
        .unwrap();
        assert_eq!(t.domain, "acme");
        let names: Vec<&str> = t.rules.iter().map(|r| r.name.as_str()).collect();
        // A `*` that does not end the value is literal, as that service reads it.
        assert_eq!(
            names,
            [
                "envoy.remote_address",
                "login",
                "envoy.path_/login.user",
                "envoy.path_a_b"
            ]
        );
        let login = &t.rules[1];
        assert_eq!(
            (login.limit, login.period_ms, login.shadow),
            (5, 1_000, true)
        );
        assert_eq!(login.scope, Scope::Tenant);
        let nested = &t.rules[2];
        assert_eq!(nested.scope, Scope::Subject);
        assert_eq!(nested.period_ms, 3_600_000);
        assert_eq!(
            nested
                .descriptor
                .as_ref()
                .unwrap()
                .iter()
                .map(DescriptorEntry::show)
                .collect::<Vec<_>>(),
            ["path=/login", "user"]
        );
        for rule in &t.rules {
            assert_eq!(rule.problems(), vec![], "{}", rule.name);
            assert!(
                rule.allow_override,
                "{}: that service honours a request's limit",
                rule.name
            );
        }
        assert_eq!(t.notes.len(), 2, "{:?}", t.notes);
        assert!(
            t.notes[0].starts_with("path=/health: unlimited"),
            "{:?}",
            t.notes
        );
        assert!(t.notes[1].contains("wildcard"), "{:?}", t.notes);
    }

    #[test]
    fn a_file_that_is_not_a_configuration_says_where() {
        let err = |yaml: &str| translate(yaml).unwrap_err();
        assert!(err("domain: a\ndescriptors:\n  - key: k\n    colour: red\n").contains("colour"));
        assert!(err(
            "domain: a\ndescriptors:\n  - key: k\n    rate_limit: { requests_per_unit: 1 }\n"
        )
        .contains("k: rate_limit needs a unit"));
        assert!(err("domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n")
            .contains("unknown unit"));
        assert!(err("domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unlimited: true, unit: second }\n")
            .contains("unlimited"));
    }

    #[test]
    fn long_or_repeated_names_stay_valid_and_unique() {
        let mut used = HashSet::new();
        let long = vec![
            DescriptorEntry {
                key: "k".repeat(80),
                value: None,
            };
            2
        ];
        let a = rule_name(None, &long, &mut used);
        let b = rule_name(None, &long, &mut used);
        assert!(check_name(&a).is_ok() && check_name(&b).is_ok(), "{a} {b}");
        assert_ne!(a, b);
    }
}
