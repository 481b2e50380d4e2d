//! `sluice`: parse the command line, set up logging, run the command (serving by default).

use clap::Parser;
use sluice::cli::Cli;

/// The server's allocator. A check makes about 50 small, short-lived allocations (hyper's
/// buffers, the body, the key's hash, the Redis command, the answer); mimalloc's thread-local
/// free lists serve them faster than the system allocator (`docs/BENCHMARKS.md`, "What changed
/// at `f76ac6e`"). Only the binary sets it: the library's examples measure allocations with an
/// allocator of their own.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    sluice::telemetry::logging::init(cli.config.log_format);
    sluice::cli::run(cli).await
}
