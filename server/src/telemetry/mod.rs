//! Telemetry: what the instance tells about itself.
//!
//! - [`metrics`]: [`Metrics`], the Prometheus registry, and the few named methods the check
//!   path calls ([`Metrics::outcome`], [`Metrics::cache`], [`Metrics::limiter_call`],
//!   [`Metrics::check_done`]); each also counts into the dashboards' current second;
//! - [`recorder`]: [`Recorder`], that current second, which the dashboards take once a
//!   second;
//! - [`logging`]: the log subscriber.
//!
//! The dashboards read from here; nothing here reads the dashboards.

pub mod logging;
pub mod metrics;
pub mod recorder;

pub use metrics::Metrics;
pub use recorder::{Outcome, Recorder, Snapshot};
