//! Simulate: how a check would be decided against a tenant's current rules and counters,
//! without consuming anything. The admin API offers the same dry run.

pub mod view;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::rules::model::Verdict;
use crate::rules::Scope;

/// What to simulate: the fields of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulateInput {
    pub route: String,
    #[serde(default)]
    pub subject: Option<String>,
    /// Defaults to 1.
    #[serde(default)]
    pub cost: Option<u64>,
}

/// One rule's decision in a simulation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimulatedRule {
    pub rule_id: String,
    pub policy: String,
    pub shadow: bool,
    /// Whether the rule counts the subject's own bucket or one for the whole tenant.
    pub scope: Scope,
    pub verdict: Verdict,
    pub limit: u64,
    /// Capacity that would be left if the check were made now.
    pub remaining: f64,
    pub reset_after_ms: u64,
    pub retry_after_ms: u64,
}

/// How a check would be decided now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Simulation {
    pub allowed: bool,
    /// The rule a real check would report, or `None` when no rule applies.
    pub policy: Option<String>,
    /// Every rule that applies to the route, in evaluation order.
    pub rules: Vec<SimulatedRule>,
    /// The time the simulation was evaluated at (Unix ms).
    pub now_ms: i64,
}

/// Which bucket of a rule to clear: a subject's, or (left out) the rule's tenant-wide one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetInput {
    #[serde(default)]
    pub subject: Option<String>,
}

/// A bucket cleared: its next check starts it full, on every instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetOutcome {
    pub rule_id: String,
    pub policy: String,
    pub subject: Option<String>,
    /// Whether the bucket held anything (false: it was already empty or expired).
    pub cleared: bool,
}

/// What this feature's server functions need from the server (which implements it). Acting
/// calls act as the session's user: an operator on any tenant, a tenant admin on their own
/// tenant only (any other tenant is `NotFound`); without a session they are `Unauthorized`.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait SimulatePort: Send + Sync + 'static {
    async fn simulate(&self, tenant: &str, input: SimulateInput) -> Result<Simulation, AppError>;
    /// Clears one bucket of the tenant's rule `rule_id`, as `POST …/rules/{id}/reset` does.
    async fn reset(
        &self,
        tenant: &str,
        rule_id: &str,
        input: ResetInput,
    ) -> Result<ResetOutcome, AppError>;
}

/// Runs a dry check for `tenant`.
#[server(prefix = "/api", endpoint = "simulate", input = Json)]
pub async fn simulate(tenant: String, input: SimulateInput) -> Result<Simulation, AppError> {
    crate::context::port::<dyn SimulatePort>()?
        .simulate(&tenant, input)
        .await
}

/// Clears one bucket of `rule_id` (a subject's, or the tenant-wide one) on every instance.
#[server(prefix = "/api", endpoint = "reset_bucket", input = Json)]
pub async fn reset_bucket(
    tenant: String,
    rule_id: String,
    input: ResetInput,
) -> Result<ResetOutcome, AppError> {
    crate::context::port::<dyn SimulatePort>()?
        .reset(&tenant, &rule_id, input)
        .await
}
