//! Rules: what a limit is ([`LimitSpec`], [`Algorithm`]), how it is validated, how each
//! algorithm decides ([`model`]), and the rules page with its behaviour [`preview`]. Browser
//! and server share this code, so a form validates exactly as the server does and the
//! preview runs the server's model.

pub mod model;
pub mod preview;
mod rule;
mod spec;
mod view;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

pub use rule::{
    check_name, check_text, FailureMode, MatchKind, RuleBody, Scope, MAX_NAME_BYTES,
    MAX_ROUTE_BYTES,
};
pub use spec::{
    Algorithm, FieldError, LimitSpec, MAX_COST, MAX_LIMIT, MAX_LOG_LIMIT, MAX_PERIOD_MS,
    MIN_PERIOD_MS,
};
pub use view::RulesPage;

/// A stored rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleInfo {
    pub id: String,
    pub body: RuleBody,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A tenant's rules.
#[server(prefix = "/api", endpoint = "rules/list", input = Json)]
pub async fn list_rules(tenant: String) -> Result<Vec<RuleInfo>, AppError> {
    crate::port::console()?.list_rules(&tenant).await
}

/// Creates a rule (`id: None`) or replaces rule `id`.
#[server(prefix = "/api", endpoint = "rules/save", input = Json)]
pub async fn save_rule(
    tenant: String,
    id: Option<String>,
    body: RuleBody,
) -> Result<RuleInfo, AppError> {
    crate::port::console()?
        .save_rule(&tenant, id.as_deref(), body)
        .await
}

/// Deletes a rule.
#[server(prefix = "/api", endpoint = "rules/delete", input = Json)]
pub async fn delete_rule(tenant: String, id: String) -> Result<(), AppError> {
    crate::port::console()?.delete_rule(&tenant, &id).await
}
