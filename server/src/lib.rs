//! The Sluice server: everything that runs only on the server.
//!
//! - [`config`] — typed configuration (flags and environment);
//! - [`startup`] — [`startup::Application`] connects, binds and serves; [`startup::router`]
//!   builds the whole HTTP surface in one place;
//! - [`store`] — the configuration store on SQLite or PostgreSQL, and its migrations;
//! - [`limiter`] — where counters live (in-process, Redis, Redis Cluster);
//! - [`console`] — the implementation of the console's service port;
//! - [`health`] — `/healthz` and `/readyz`;
//! - [`metrics`] — `/metrics`;
//! - [`error`] — the HTTP error boundary (problem+json);
//! - [`telemetry`] — logging.

pub mod config;
pub mod console;
pub mod error;
pub mod health;
pub mod limiter;
pub mod metrics;
pub mod startup;
pub mod store;
pub mod telemetry;
