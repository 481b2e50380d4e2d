//! `sluice`: parse the configuration, build the instance, serve until stopped.

use clap::Parser;
use sluice::config::{Cli, Command, KeyCommand, UserCommand};
use sluice::startup::Application;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    sluice::telemetry::init(cli.config.log_format);
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = Application::build(cli.config).await?;
            announce(&app);
            app.run_until_stopped().await
        }
        Command::Key(KeyCommand::Create { operator, name }) => {
            anyhow::ensure!(operator, "only operator keys are created here (--operator); tenant keys come from the API or the console");
            let db = sluice::store::Db::connect(&cli.config.database_url()).await?;
            db.migrate().await?;
            let key = sluice::cli::create_operator_key(&db, &name).await?;
            print_secret(
                &key,
                "This operator key is shown once and stored only as its SHA-256. Keep it secret;\n\
                 send it as `X-API-Key` (or `Authorization: Bearer`) to /v1/admin.",
            );
            Ok(())
        }
        Command::User(UserCommand::Create {
            operator: _,
            tenant,
            email,
        }) => {
            let db = sluice::store::Db::connect(&cli.config.database_url()).await?;
            db.migrate().await?;
            let password = sluice::cli::create_user(&db, &email, tenant.as_deref()).await?;
            print_secret(
                &password,
                &format!("The password of {email}, shown once. Sign in at /sign-in."),
            );
            Ok(())
        }
        Command::Migrate => {
            let url = cli.config.database_url();
            let db = sluice::store::Db::connect(&url).await?;
            db.migrate().await?;
            tracing::info!("migrations applied");
            Ok(())
        }
    }
}

/// Tells the person who started the server where it is.
#[allow(clippy::print_stdout)]
fn announce(app: &Application) {
    let address = app.address();
    println!();
    println!("  Sluice is running at http://{address}/");
    println!("  Health: http://{address}/healthz   Readiness: http://{address}/readyz");
    match app.metrics_address() {
        Some(metrics) => println!("  Metrics: http://{metrics}/metrics"),
        None => println!("  Metrics: http://{address}/metrics"),
    }
    if app.is_embedded() {
        println!("  Mode: embedded (SQLite in SLUICE_DATA_DIR, in-process limiter).");
    } else {
        println!("  Mode: distributed.");
    }
    println!("  Open the URL in a browser; the console shows the instance status.");
    match app.bootstrap_password() {
        Some(password) => {
            println!(
                "  Sign in at http://{address}/sign-in as {} with password {password}",
                sluice::cli::BOOTSTRAP_EMAIL
            );
            println!(
                "  (the account was created on this first start; the password is shown only now)."
            );
        }
        None => {
            println!("  Sign in at http://{address}/sign-in (more accounts: `sluice user create`).")
        }
    }
    println!("  Admin API: make an operator key with `sluice key create --operator` (same");
    println!("  SLUICE_DATA_DIR / DATABASE_URL) and send it as X-API-Key to /v1/admin/*.");
    println!("  The API is described at http://{address}/v1/openapi.json");
    println!("  Stop with Ctrl-C.");
    println!();
}

/// Prints a new secret (a key or a password) once on stdout, for scripts, and what to do with
/// it on stderr, for people.
#[allow(clippy::print_stdout, clippy::print_stderr)]
fn print_secret(secret: &str, hint: &str) {
    println!("{secret}");
    eprintln!("{hint}");
}
