//! The Sluice server: everything that runs only on the server.
//!
//! - [`config`] — typed configuration (flags and environment);
//! - [`check`] — `POST /v1/check`: key, tenant, rules, one limiter call, headers;
//! - [`admin_api`] — `/v1/admin/*` over [`service::AdminService`], which authorises, changes,
//!   audits and announces every admin operation;
//! - [`auth`] — API keys from headers, through [`cache`] (keys, tenants, compiled rules);
//! - [`openapi`] — `GET /v1/openapi.json`;
//! - [`propagation`] — admin changes announced over Redis pub/sub to every instance;
//! - [`startup`] — [`startup::Application`] connects, binds and serves; [`startup::router`]
//!   builds the whole HTTP surface in one place;
//! - [`store`] — the configuration store on SQLite or PostgreSQL, and its migrations;
//! - [`limiter`] — where counters live (in-process, Redis, Redis Cluster);
//! - [`console`] — the implementation of the console's service port;
//! - [`health`] — `/healthz` and `/readyz`;
//! - [`metrics`] — `/metrics`;
//! - [`dashboard`] — the fleet's per-second series, the dashboards' frames and their live stream;
//! - [`error`] — the HTTP error boundary (problem+json);
//! - [`telemetry`] — logging.

pub mod admin_api;
pub mod auth;
pub mod cache;
pub mod check;
pub mod cli;
pub mod config;
pub mod console;
pub mod dashboard;
pub mod error;
pub mod health;
pub mod limiter;
pub mod metrics;
pub mod openapi;
pub mod passwords;
pub mod propagation;
pub mod service;
pub mod startup;
pub mod store;
pub mod telemetry;
