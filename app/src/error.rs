//! [`AppError`]: what a server function can answer instead of a value.

use leptos::prelude::{FromServerFnError, ServerFnErrorErr};
use leptos::server_fn::codec::JsonEncoding;
use serde::{Deserialize, Serialize};

/// The error of every server function. It crosses the wire as JSON, so the browser can tell
/// a validation message (show it next to the field) from an outage (offer to retry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AppError {
    /// The input is wrong; the message says how to fix it.
    #[error("{0}")]
    Invalid(String),
    #[error("please sign in")]
    Unauthorized,
    /// Signed in, but not allowed to do this; the message says why.
    #[error("{0}")]
    Forbidden(String),
    /// Also used for resources of other tenants, so their existence is not revealed.
    #[error("not found")]
    NotFound,
    /// The change collides with what exists (a name taken, a cap reached).
    #[error("{0}")]
    Conflict(String),
    /// Too many attempts; the message says when to try again.
    #[error("{0}")]
    TooMany(String),
    /// A backing service is down; retrying later may work.
    #[error("{0} is unavailable; try again shortly")]
    Unavailable(String),
    /// A bug or an unexpected failure; the details are in the server log.
    #[error("internal error; see the server log")]
    Internal,
    /// The request never reached the function, or its answer could not be read.
    #[error("request failed: {0}")]
    Transport(String),
}

impl AppError {
    /// Whether retrying the same call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, AppError::Unavailable(_) | AppError::Transport(_))
    }

    /// The HTTP status the server answers this error with. On the server a `Transport` error
    /// is a call whose arguments could not be read: the caller's mistake.
    pub fn http_status(&self) -> u16 {
        match self {
            AppError::Invalid(_) | AppError::Transport(_) => 400,
            AppError::Unauthorized => 401,
            AppError::Forbidden(_) => 403,
            AppError::NotFound => 404,
            AppError::Conflict(_) => 409,
            AppError::TooMany(_) => 429,
            AppError::Internal => 500,
            AppError::Unavailable(_) => 503,
        }
    }
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        AppError::Transport(value.to_string())
    }
}
