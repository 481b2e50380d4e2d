//! The Sluice console: a Leptos app rendered on the server and hydrated in the browser.
//!
//! It is organised by feature; each feature folder holds its DTOs, server functions and views:
//! - [`status`] (the instance status widget: mode, store, limiter, readiness);
//! - [`auth`] (sign-in, sign-out, the signed-in user and their role);
//! - [`tenants`] (operators: list, create, suspend, resume, add a tenant admin);
//! - [`rules`] (rules, limit specs, their validation, the reference model of every
//!   algorithm, and the behaviour preview);
//! - [`keys`] (key kinds, the shape of a key, keys generated and hashed in the browser);
//! - [`dashboard`] (the live fleet and tenant dashboards);
//! - [`audit`] (the audit log and its filters);
//! - [`simulate`] (a dry-run check against a tenant's rules and counters).
//!
//! Shared pieces:
//! - [`error`] — [`AppError`], the one error type every server function returns;
//! - each feature declares the port its server functions call (`RulesPort`, `KeysPort`, ...);
//!   [`context`] (server only) finds a port in the request's context, and [`ports`] (server
//!   only) sums them into [`ports::Console`], which the `server` crate implements. Features
//!   never import `ports`, so no import runs in a circle. This crate holds no SQL and no
//!   Redis code;
//! - [`text`]: what a name people read may not contain;
//! - [`ui`]: dates, error notes, the inline confirmation;
//! - [`gate`]: who may see a page (sign-in and back, operators only, a tenant's own pages);
//! - [`shell`] and [`App`]: the HTML document and the router.

// The server renders what the browser hydrates, so both must be built with erased components
// (.cargo/config.toml). A RUSTFLAGS variable or a host rustflags in another cargo config replaces
// that setting, and a console built without it on one side does not hydrate.
#[cfg(all(any(feature = "ssr", feature = "hydrate"), not(erase_components)))]
compile_error!(
    "build with `--cfg erase_components` (set in .cargo/config.toml): the server and the browser must agree"
);

pub mod audit;
pub mod auth;
#[cfg(feature = "ssr")]
pub mod context;
pub mod dashboard;
pub mod error;
pub mod gate;
pub mod keys;
#[cfg(feature = "ssr")]
pub mod ports;
mod root;
pub mod rules;
pub mod simulate;
pub mod status;
pub mod tenants;
pub mod text;
pub mod ui;

pub use error::AppError;
pub use root::{shell, App};
