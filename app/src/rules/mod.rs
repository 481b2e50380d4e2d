//! Rules: what a limit is ([`LimitSpec`], [`Algorithm`]), how it is validated, and how each
//! algorithm decides ([`model`]). Browser and server share this code, so a form validates
//! exactly as the server does and the behaviour preview runs the server's model.

pub mod model;
mod rule;
mod spec;

pub use rule::{
    check_name, check_text, FailureMode, MatchKind, RuleBody, Scope, MAX_NAME_BYTES,
    MAX_ROUTE_BYTES,
};

pub use spec::{
    Algorithm, FieldError, LimitSpec, MAX_COST, MAX_LIMIT, MAX_LOG_LIMIT, MAX_PERIOD_MS,
    MIN_PERIOD_MS,
};
