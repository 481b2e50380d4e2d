//! The Sluice console: a Leptos app rendered on the server and hydrated in the browser.
//!
//! It is organised by feature; each feature folder holds its DTOs, server functions and views:
//! - [`status`] (the instance status widget: mode, store, limiter, readiness);
//! - [`auth`] (sign-in);
//! - [`keys`] (key kinds and the shape of a key);
//! - [`rules`] (rules, limit specs, their validation, and the reference model of every algorithm).
//!
//! Shared pieces:
//! - [`error`] — [`AppError`], the one error type every server function returns;
//! - [`port`] (server only): the [`port::Console`] service trait the server functions call.
//!   The `server` crate implements it; this crate holds no SQL and no Redis code;
//! - [`shell`] and [`App`]: the HTML document and the router.

pub mod auth;
pub mod error;
pub mod keys;
#[cfg(feature = "ssr")]
pub mod port;
mod root;
pub mod rules;
pub mod status;

pub use error::AppError;
pub use root::{shell, App};
