//! The port between the console and the server: one service trait that every server
//! function calls. The `server` crate implements it over its store, limiter and metrics, and
//! provides it to server functions through Leptos context as a [`SharedConsole`].

use std::sync::Arc;

use leptos::prelude::use_context;

use crate::auth::SignedInUser;
use crate::error::AppError;
use crate::status::Status;

/// Everything the console's server functions need from the server.
#[async_trait::async_trait]
pub trait Console: Send + Sync + 'static {
    /// The instance's configuration and whether its dependencies answer.
    async fn status(&self) -> Result<Status, AppError>;

    /// Checks the credentials and starts a session for the current request.
    async fn sign_in(&self, email: &str, password: &str) -> Result<SignedInUser, AppError>;

    /// Ends the current request's session.
    async fn sign_out(&self) -> Result<(), AppError>;

    /// The user of the current request's session.
    async fn current_user(&self) -> Result<Option<SignedInUser>, AppError>;
}

/// The service as it is stored in Leptos context.
#[derive(Clone)]
pub struct SharedConsole(pub Arc<dyn Console>);

impl std::fmt::Debug for SharedConsole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedConsole")
    }
}

/// The service provided by the server, from inside a server function.
pub fn console() -> Result<Arc<dyn Console>, AppError> {
    use_context::<SharedConsole>()
        .map(|c| c.0)
        .ok_or(AppError::Internal)
}
