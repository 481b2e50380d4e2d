//! The `sluice` command line: its parser, and the commands run on the server host. A command
//! that changes something goes through the admin service as the actor `cli`, so it is
//! validated and audited like a change made over the API: `sluice key create --operator`
//! (the first operator key, printed once and stored only as its SHA-256) and
//! `sluice user create`.

use app::keys::{display_prefix, format_key, sha256_hex, KeyKind, KEY_BYTES};
use clap::{Parser, Subcommand};
use rand::RngCore;

use crate::admin::keys::KeyBody;
use crate::admin::{Actor, AdminService};
use crate::config::Config;
use crate::startup::Application;
use crate::store::Db;

/// The `sluice` command line.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: a multi-tenant, distributed rate limiter"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub config: Config,
}

/// What to do; serving is the default.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the console, `/v1/*`, `/healthz`, `/readyz` and `/metrics` (the default).
    Serve,
    /// Apply the database migrations and exit.
    Migrate,
    /// Manage API keys from the server host.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Manage console users from the server host.
    #[command(subcommand)]
    User(UserCommand),
}

/// `sluice user …`
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a console user with a random password, printed once.
    Create {
        /// An operator (sees every tenant).
        #[arg(long, conflicts_with = "tenant")]
        operator: bool,
        /// The tenant of a tenant admin.
        #[arg(long, required_unless_present = "operator")]
        tenant: Option<String>,
        /// The sign-in email.
        #[arg(long)]
        email: String,
    },
}

/// `sluice key …`
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create a key and print it once. Only its SHA-256 is stored.
    Create {
        /// An operator key (acts on every tenant). The first one can only come from here.
        #[arg(long)]
        operator: bool,
        /// A name to recognise the key by in lists and the audit log.
        #[arg(long, default_value = "operator")]
        name: String,
    },
}

/// Runs the command line's command (serving by default).
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = Application::build(cli.config).await?;
            announce(&app);
            app.run_until_stopped().await
        }
        Command::Key(KeyCommand::Create { operator, name }) => {
            anyhow::ensure!(operator, "only operator keys are created here (--operator); tenant keys come from the API or the console");
            let admin = offline_service(&cli.config).await?;
            let key = create_operator_key(&admin, &name).await?;
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
            let admin = offline_service(&cli.config).await?;
            let password = create_user(&admin, &email, tenant.as_deref()).await?;
            print_secret(
                &password,
                &format!("The password of {email}, shown once. Sign in at /sign-in."),
            );
            Ok(())
        }
        Command::Migrate => {
            let db = Db::connect(&cli.config.database_url()).await?;
            db.migrate().await?;
            tracing::info!("migrations applied");
            Ok(())
        }
    }
}

/// The admin service of a command that is not a server: the configured database, migrated.
async fn offline_service(config: &Config) -> anyhow::Result<AdminService> {
    let db = Db::connect(&config.database_url()).await?;
    db.migrate().await?;
    Ok(AdminService::offline(db))
}

/// Generates an operator key named `name`, registers its hash and returns the key (to print
/// once).
pub async fn create_operator_key(admin: &AdminService, name: &str) -> anyhow::Result<String> {
    let mut random = [0_u8; KEY_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut random);
    let key = format_key(KeyKind::Operator, &random);
    let body = KeyBody {
        kind: KeyKind::Operator,
        name: name.to_owned(),
        hash: sha256_hex(&key),
        prefix: display_prefix(&key),
    };
    admin.create_operator_key(&Actor::Cli, &body).await?;
    Ok(key)
}

/// Creates a console user (an operator, or a tenant admin of `tenant_id`) with a random
/// password; returns the password (to print once).
pub async fn create_user(
    admin: &AdminService,
    email: &str,
    tenant_id: Option<&str>,
) -> anyhow::Result<String> {
    let password = crate::passwords::generate();
    admin
        .create_user(&Actor::Cli, email, tenant_id, &password)
        .await?;
    Ok(password)
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
                crate::admin::users::BOOTSTRAP_EMAIL
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
