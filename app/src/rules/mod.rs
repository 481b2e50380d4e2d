//! Rules: what a limit is ([`LimitSpec`], [`Algorithm`]), how it is validated, how each
//! algorithm decides ([`model`]), and the rules page with its behaviour [`preview`]. Browser
//! and server share this code, so a form validates exactly as the server does and the
//! preview runs the server's model.

mod file;
pub mod file_page;
pub mod model;
mod overrides;
pub mod preview;
mod rule;
mod spec;
pub mod view;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

pub use file::{
    changes, FieldChange, PlannedCreate, PlannedDelete, PlannedUpdate, RulesFile, RulesPlan,
};
pub use overrides::{
    matches as subject_matches, OverrideBody, OverrideInfo, SubjectPattern, MAX_OVERRIDES_PER_RULE,
};
pub use rule::{
    check_name, check_text, normal_route, DescriptorEntry, FailureMode, MatchKind, RuleBody, Scope,
    MAX_DESCRIPTOR_ENTRIES, MAX_NAME_BYTES, MAX_ROUTE_BYTES,
};
pub use spec::{
    Algorithm, FieldError, LimitSpec, MAX_COST, MAX_LIMIT, MAX_LOG_LIMIT, MAX_PERIOD_MS,
    MIN_PERIOD_MS,
};

/// A stored rule: the one wire shape of the admin API and the console. The body's fields sit
/// next to the id, as a rule is written (`{"id", "tenant_id", "name", "match", ...}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleInfo {
    pub id: String,
    pub tenant_id: String,
    #[serde(flatten)]
    pub body: RuleBody,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The rules a check of `route` is counted by, as the decision core resolves them: the most
/// specific route rules (exact, else the longest prefix, else the default rules), then the
/// tenant-wide (`all`) rules. Enabled rules only; `route` is in its normal form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRules {
    pub route: String,
    pub rules: Vec<RuleInfo>,
}

/// What importing an envoyproxy/ratelimit configuration does, or would do, to a tenant's
/// descriptor rules (matched by name; route rules are never touched).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportPreview {
    /// The configuration's own `domain` (the gRPC request sends the tenant's name or id).
    pub domain: String,
    pub create: Vec<RuleBody>,
    pub update: Vec<RuleBody>,
    /// The names of the descriptor rules the configuration no longer has.
    pub delete: Vec<String>,
    pub unchanged: usize,
    /// What the configuration says that rules cannot express, one line each.
    pub notes: Vec<String>,
    /// Sent back to apply exactly this preview: the server refuses if the rules it was made
    /// from have changed since.
    pub fingerprint: String,
    /// Whether the changes were made.
    pub applied: bool,
}

/// The largest configuration the import reads.
pub const MAX_IMPORT_BYTES: usize = 256 * 1024;

/// What this feature's server functions need from the server (which implements it). Acting
/// calls act as the session's user: an operator on any tenant, a tenant admin on their own
/// tenant only (any other tenant is `NotFound`); without a session they are `Unauthorized`.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait RulesPort: Send + Sync + 'static {
    async fn list_rules(&self, tenant: &str) -> Result<Vec<RuleInfo>, AppError>;
    async fn save_rule(
        &self,
        tenant: &str,
        id: Option<&str>,
        body: RuleBody,
    ) -> Result<RuleInfo, AppError>;
    async fn delete_rule(&self, tenant: &str, id: &str) -> Result<(), AppError>;
    async fn list_overrides(&self, tenant: &str, rule: &str)
        -> Result<Vec<OverrideInfo>, AppError>;
    async fn set_override(
        &self,
        tenant: &str,
        rule: &str,
        body: OverrideBody,
    ) -> Result<OverrideInfo, AppError>;
    async fn delete_override(&self, tenant: &str, rule: &str, id: &str) -> Result<(), AppError>;
    /// Reads an envoyproxy/ratelimit configuration as the tenant's descriptor rules and says
    /// what it would change; with `apply`, makes those changes in one transaction, provided
    /// they are still those of the preview whose fingerprint is `expect`.
    async fn import_envoy(
        &self,
        tenant: &str,
        yaml: &str,
        apply: bool,
        expect: Option<&str>,
    ) -> Result<ImportPreview, AppError>;
    /// The rules a check of `route` would be counted by ([`RouteRules`]).
    async fn rules_for_route(&self, tenant: &str, route: &str) -> Result<RouteRules, AppError>;
    /// The tenant's rules as a YAML rules file (no ids, ordered by name).
    async fn export_rules(&self, tenant: &str) -> Result<String, AppError>;
    /// Reads a rules file (YAML, or JSON) as the tenant's rules and answers the plan; with
    /// `apply`, carries it out in one transaction, provided it is still the plan whose
    /// fingerprint is `expect`.
    async fn import_rules(
        &self,
        tenant: &str,
        text: &str,
        apply: bool,
        expect: Option<&str>,
    ) -> Result<RulesPlan, AppError>;
}

/// A tenant's rules.
#[server(prefix = "/api", endpoint = "rules/list", input = Json)]
pub async fn list_rules(tenant: String) -> Result<Vec<RuleInfo>, AppError> {
    crate::context::port::<dyn RulesPort>()?
        .list_rules(&tenant)
        .await
}

/// Creates a rule (`id: None`) or replaces rule `id`.
#[server(prefix = "/api", endpoint = "rules/save", input = Json)]
pub async fn save_rule(
    tenant: String,
    id: Option<String>,
    body: RuleBody,
) -> Result<RuleInfo, AppError> {
    crate::context::port::<dyn RulesPort>()?
        .save_rule(&tenant, id.as_deref(), body)
        .await
}

/// Deletes a rule.
#[server(prefix = "/api", endpoint = "rules/delete", input = Json)]
pub async fn delete_rule(tenant: String, id: String) -> Result<(), AppError> {
    crate::context::port::<dyn RulesPort>()?
        .delete_rule(&tenant, &id)
        .await
}

/// The per-subject overrides of rule `rule`.
#[server(prefix = "/api", endpoint = "rules/overrides/list", input = Json)]
pub async fn list_overrides(tenant: String, rule: String) -> Result<Vec<OverrideInfo>, AppError> {
    crate::context::port::<dyn RulesPort>()?
        .list_overrides(&tenant, &rule)
        .await
}

/// Sets the override of `body.subject` on rule `rule` (creates or replaces it).
#[server(prefix = "/api", endpoint = "rules/overrides/set", input = Json)]
pub async fn set_override(
    tenant: String,
    rule: String,
    body: OverrideBody,
) -> Result<OverrideInfo, AppError> {
    crate::context::port::<dyn RulesPort>()?
        .set_override(&tenant, &rule, body)
        .await
}

/// Deletes override `id` of rule `rule`.
#[server(prefix = "/api", endpoint = "rules/overrides/delete", input = Json)]
pub async fn delete_override(tenant: String, rule: String, id: String) -> Result<(), AppError> {
    crate::context::port::<dyn RulesPort>()?
        .delete_override(&tenant, &rule, &id)
        .await
}

/// Previews (`apply: false`) or applies an envoyproxy/ratelimit configuration; `expect`, a
/// preview's fingerprint, makes Apply refuse a plan that is no longer the one previewed.
#[server(prefix = "/api", endpoint = "rules/import_envoy", input = Json)]
pub async fn import_envoy(
    tenant: String,
    yaml: String,
    apply: bool,
    expect: Option<String>,
) -> Result<ImportPreview, AppError> {
    crate::context::port::<dyn RulesPort>()?
        .import_envoy(&tenant, &yaml, apply, expect.as_deref())
        .await
}

/// The rules a check of `route` would be counted by.
#[server(prefix = "/api", endpoint = "rules/for_route", input = Json)]
pub async fn rules_for_route(tenant: String, route: String) -> Result<RouteRules, AppError> {
    crate::context::port::<dyn RulesPort>()?
        .rules_for_route(&tenant, &route)
        .await
}

/// The tenant's rules as a YAML rules file.
#[server(prefix = "/api", endpoint = "rules/export", input = Json)]
pub async fn export_rules(tenant: String) -> Result<String, AppError> {
    crate::context::port::<dyn RulesPort>()?
        .export_rules(&tenant)
        .await
}

/// Plans (`apply: false`) or applies a rules file; `expect`, a plan's fingerprint, makes
/// Apply refuse a plan that is no longer the one shown.
#[server(prefix = "/api", endpoint = "rules/import", input = Json)]
pub async fn import_rules(
    tenant: String,
    text: String,
    apply: bool,
    expect: Option<String>,
) -> Result<RulesPlan, AppError> {
    crate::context::port::<dyn RulesPort>()?
        .import_rules(&tenant, &text, apply, expect.as_deref())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_is_one_flat_object_on_the_wire_and_reads_back() {
        let rule = RuleInfo {
            id: "r1".into(),
            tenant_id: "t1".into(),
            body: RuleBody {
                name: "transfers".into(),
                match_kind: MatchKind::Prefix,
                route: Some("POST /transfers".into()),
                descriptor: None,
                scope: Scope::Subject,
                algorithm: Algorithm::Gcra,
                limit: 10,
                period_ms: 1000,
                burst: None,
                penalty: false,
                failure_mode: FailureMode::Closed,
                shadow: false,
                enabled: true,
                allow_override: false,
            },
            created_at: 1,
            updated_at: 2,
        };
        let json = serde_json::to_value(&rule).unwrap();
        assert_eq!(json["id"], "r1");
        assert_eq!(json["tenant_id"], "t1");
        assert_eq!(json["match"], "prefix");
        assert_eq!(json["limit"], 10);
        assert!(json.get("body").is_none(), "{json}");
        let back: RuleInfo = serde_json::from_value(json).unwrap();
        assert_eq!(back, rule);
    }

    mod properties {
        use crate::rules::*;
        use proptest::prelude::*;

        fn body() -> impl Strategy<Value = RuleBody> {
            (
                "[ -~]{0,70}",
                proptest::sample::select(MatchKind::ALL.to_vec()),
                proptest::option::of("[ -~]{0,260}"),
                prop_oneof![Just(Scope::Tenant), Just(Scope::Subject)],
                proptest::sample::select(Algorithm::ALL.to_vec()),
                prop_oneof![0..100u64, any::<u64>()],
                prop_oneof![0..100_000u64, any::<u64>()],
                proptest::option::of(prop_oneof![0..100u64, any::<u64>()]),
                any::<bool>(),
            )
                .prop_map(
                    |(
                        name,
                        match_kind,
                        route,
                        scope,
                        algorithm,
                        limit,
                        period_ms,
                        burst,
                        penalty,
                    )| RuleBody {
                        name,
                        match_kind,
                        route,
                        descriptor: None,
                        scope,
                        algorithm,
                        limit,
                        period_ms,
                        burst,
                        penalty,
                        failure_mode: FailureMode::Closed,
                        shadow: false,
                        enabled: true,
                        allow_override: false,
                    },
                )
        }

        proptest! {
            /// What the console's form and the admin API accept, the limiter accepts: a body
            /// without problems has a spec the limiter's own check lets through.
            #[test]
            fn a_rule_without_problems_is_one_the_limiter_takes(body in body()) {
                let problems = body.problems();
                if problems.is_empty() {
                    prop_assert!(body.spec().validate().is_ok(), "{:?}", body);
                    prop_assert!(body.limit >= 1 && body.period_ms >= MIN_PERIOD_MS);
                } else {
                    prop_assert!(problems.iter().all(|p| !p.message.is_empty()));
                }
            }

            /// A body reads back from its JSON exactly, whatever its values.
            #[test]
            fn a_rule_round_trips_through_json(body in body()) {
                let json = serde_json::to_string(&body).unwrap();
                let back: RuleBody = serde_json::from_str(&json).unwrap();
                prop_assert_eq!(back, body);
            }
        }
    }
}
