//! The one application state: an `Arc` around the shared parts, so a handler's extractor
//! clones one pointer, never a struct of many.

use std::ops::Deref;
use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;

use super::console::ConsoleService;
use super::stream_slots::StreamSlots;
use crate::admin::AdminService;
use crate::dashboard::Dashboard;
use crate::decide::{Decider, Identities};
use crate::limiter::Limiter;
use crate::store::Db;
use crate::telemetry::Metrics;

/// Everything a request handler may need. Handlers take `State<AppState>` and borrow.
#[derive(Debug, Clone)]
pub struct AppState(pub Arc<App>);

/// The shared parts of an instance.
#[derive(Debug)]
pub struct App {
    pub leptos_options: LeptosOptions,
    pub db: Db,
    pub limiter: Limiter,
    pub metrics: Metrics,
    pub identities: Identities,
    pub decider: Decider,
    pub admin: AdminService,
    pub console: Arc<ConsoleService>,
    pub dashboard: Dashboard,
    /// The dashboard streams each console session holds open.
    pub streams: StreamSlots,
    /// Whether the session cookie is marked `Secure` (`SLUICE_SECURE_COOKIES`).
    pub secure_cookies: bool,
    /// `/metrics` has a listener of its own (`SLUICE_METRICS_LISTEN`), so the main one
    /// does not serve it.
    pub metrics_apart: bool,
}

impl Deref for AppState {
    type Target = App;

    fn deref(&self) -> &App {
        &self.0
    }
}

/// Leptos' routes and file handler read their options from the state.
impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}
