//! Why the decision core gives no decision. Transports map each case to their protocol (HTTP
//! 401/403/400/503/500).

use super::input::InputError;
use crate::limiter::LimiterError;
use crate::store::StoreError;

/// Why the core gives no decision.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("a valid API key is required")]
    Unauthorized,
    /// A key of the wrong kind, or a suspended tenant.
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Input(#[from] InputError),
    /// The limiter could not decide and a rule fails closed.
    #[error("{0}")]
    Undecided(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Limiter(#[from] LimiterError),
}
