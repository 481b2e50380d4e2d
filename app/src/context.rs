//! (server only) How a server function reaches the server.
//!
//! Each feature declares the port its server functions need as a trait next to them (for
//! example [`crate::rules::RulesPort`]). The server implements them and provides each as an
//! `Arc<dyn Port>` in Leptos context ([`crate::ports::provide`]); a server function reads its
//! own back with [`port`]. This module knows no feature, so features import it without a cycle.

use std::sync::Arc;

use leptos::prelude::use_context;

use crate::error::AppError;

/// The port `P` the server provided for the request being served.
pub fn port<P: ?Sized + Send + Sync + 'static>() -> Result<Arc<P>, AppError> {
    use_context::<Arc<P>>().ok_or(AppError::Internal)
}
