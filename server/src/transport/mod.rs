//! Transports: each translates one protocol to the layers below and holds no decision of
//! its own.
//!
//! - [`check`]: `POST /v1/check` over the decision core ([`crate::decide`]);
//! - [`grpc`]: Envoy's rate limit service (gRPC `ShouldRateLimit`) over the same core;
//! - [`admin_api`]: `/v1/admin/*` over the admin service ([`crate::admin`]);
//! - [`console`]: the console's server functions (sessions, sign-in) over the same service;
//!   [`console_runtime`]: the threads every request but a check or a probe runs on;
//! - [`listener`]: accepting connections, with header and idle timeouts and a cap;
//! - [`live`]: `GET /live/dashboard`, the dashboards' server-sent events;
//!   [`stream_slots`]: how many streams each session holds open;
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics` and the request-counting middleware;
//!   [`readiness`]: the probe of the database and the limiter behind `/readyz`;
//! - [`openapi`]: `GET /v1/openapi.json`;
//! - [`browser`]: security headers, and same-origin calls only for server functions;
//! - [`client_ip`]: who a request comes from, through trusted proxies;
//! - [`credentials`]: the API key a request presents;
//! - [`error`]: the HTTP error boundary (problem+json);
//! - [`state`]: the one shared application state; [`router`]: every route in one place.

pub mod admin_api;
pub mod browser;
pub mod check;
pub mod client_ip;
pub mod console;
pub mod console_runtime;
pub mod credentials;
pub mod error;
pub mod grpc;
pub mod listener;
pub mod live;
pub mod openapi;
pub mod ops;
pub mod readiness;
pub mod router;
pub mod state;
pub mod stream_slots;
