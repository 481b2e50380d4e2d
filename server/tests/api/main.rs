//! The server's integration tests: one binary, real services.
//!
//! Every test that needs Redis, a Redis Cluster or PostgreSQL starts a private one through
//! [`services`]; a missing binary fails the test with the install hint, never skips it.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod helpers;
/// The benchmark's open-loop load generator, reused to load the dashboards.
#[allow(dead_code)]
#[path = "../../examples/check_bench/loadgen.rs"]
mod loadgen;
mod services;

mod admin_service;
mod check_api;
mod concurrency;
mod console_admin;
mod console_auth;
mod dashboard;
mod grpc;
mod harness;
mod health;
mod hostile;
mod lifecycle;
mod limiter;
mod openapi;
mod overrides;
mod redis_failure;
mod reserve;
mod reset;
mod rule_files;
mod store;
mod top_denied;
