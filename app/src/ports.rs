//! (server only) Every feature's port in one trait, and the one call that provides them all.
//!
//! The server implements [`Console`] (the sum of the features' ports) once and calls
//! [`provide`] for each request; server functions find their own port with
//! [`crate::context::port`]. Features never import this module, so the arrows only point from
//! here to them.

use std::sync::Arc;

use leptos::prelude::provide_context;

use crate::audit::AuditPort;
use crate::auth::AuthPort;
use crate::dashboard::DashboardPort;
use crate::keys::KeysPort;
use crate::rules::RulesPort;
use crate::simulate::SimulatePort;
use crate::status::StatusPort;
use crate::tenants::TenantsPort;

/// Everything the console's server functions need from the server.
pub trait Console:
    StatusPort
    + AuthPort
    + TenantsPort
    + RulesPort
    + KeysPort
    + AuditPort
    + SimulatePort
    + DashboardPort
{
}

impl<T> Console for T where
    T: StatusPort
        + AuthPort
        + TenantsPort
        + RulesPort
        + KeysPort
        + AuditPort
        + SimulatePort
        + DashboardPort
{
}

/// Provides `console` as every feature's port, in the context of the current request.
pub fn provide<C: Console>(console: &Arc<C>) {
    provide_context::<Arc<dyn StatusPort>>(console.clone());
    provide_context::<Arc<dyn AuthPort>>(console.clone());
    provide_context::<Arc<dyn TenantsPort>>(console.clone());
    provide_context::<Arc<dyn RulesPort>>(console.clone());
    provide_context::<Arc<dyn KeysPort>>(console.clone());
    provide_context::<Arc<dyn AuditPort>>(console.clone());
    provide_context::<Arc<dyn SimulatePort>>(console.clone());
    provide_context::<Arc<dyn DashboardPort>>(console.clone());
}
