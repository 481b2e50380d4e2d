//! `sluice`: parse the command line, set up logging, run the command (serving by default).

use clap::Parser;
use sluice::cli::Cli;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    sluice::telemetry::logging::init(cli.config.log_format);
    sluice::cli::run(cli).await
}
