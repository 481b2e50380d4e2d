//! The Sluice server: everything that runs only on the server, in three layers whose imports
//! only point down (`scripts/check-imports` fails the build on an arrow that points up, and on
//! any import cycle):
//!
//! **Transports** (top): each translates one protocol and decides nothing.
//! - [`transport`]: `/v1/check`, `/v1/admin/*`, the console's server functions, the live
//!   dashboard stream, `/healthz`, `/readyz`, `/metrics`, `/v1/openapi.json`; the shared
//!   [`transport::state::AppState`] and [`transport::router::router`];
//! - [`cli`]: the `sluice` command line (its parser and the commands run on the host);
//! - [`startup`]: [`startup::Application`] assembles the layers, binds and serves.
//!
//! **Core** (middle): the decisions.
//! - [`decide`]: the decision core (one check-input parser, identities, the compiled tenant,
//!   the plan, the deciding rule, `decide`);
//! - [`admin`]: the admin service, one module per resource, owning every authorisation and
//!   writing each change with its audit event in one transaction.
//!
//! **Infrastructure** (bottom):
//! - [`store`]: the configuration store on SQLite or PostgreSQL, and its migrations;
//! - [`limiter`]: where counters live (in-process, Redis, Redis Cluster);
//! - [`redis_client`]: the one Redis client (pool, deadlines, scripts) of the limiter, the
//!   dashboards and propagation, and every Redis key ([`redis_client::keys`]);
//! - [`cache`]: the key and tenant caches; [`propagation`]: admin changes announced to every
//!   instance;
//! - [`dashboard`]: the fleet's per-second series and the dashboards' frames;
//! - [`telemetry`]: Prometheus metrics, the per-second recorder, logging;
//! - [`passwords`]: argon2id; [`config`]: typed settings.

pub mod admin;
pub mod cache;
pub mod cli;
pub mod config;
pub mod dashboard;
pub mod decide;
pub mod hashing;
pub mod limiter;
pub mod passwords;
pub mod propagation;
pub mod redis_client;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod transport;
