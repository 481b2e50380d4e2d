//! Logging set-up: `RUST_LOG` filters (default `info`), `SLUICE_LOG_FORMAT` picks text or JSON.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber once; later calls (tests start many apps) are no-ops.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Logs go to stderr: stdout carries what commands print for people and scripts.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // An error only means a subscriber is already installed.
    drop(result);
}
