//! The `sluice` command line: its parser, and the commands run on the server host. A command
//! that changes something goes through the admin service as the actor `cli`, so it is
//! validated and audited like a change made over the API: `sluice key create --operator`
//! (the first operator key, printed once and stored only as its SHA-256), `sluice key list
//! --operator`, `sluice key rotate ID`, `sluice key revoke ID`, `sluice user create`, `sluice
//! import envoy-ratelimit`, and `sluice rules export` / `sluice rules import` (a tenant's rules
//! as a file, and a file as a plan). With Redis configured, a change is announced to every
//! running instance at once.

use anyhow::Context as _;
use app::keys::{display_prefix, format_key, sha256_hex, KeyInfo, KeyKind, KEY_BYTES};
use clap::{Parser, Subcommand};
use rand::RngCore;

use crate::admin::keys::{KeyBody, RotateBody};
use crate::admin::{Actor, AdminService};
use crate::config::{Config, LimiterTarget};
use crate::limiter::{Limiter, RedisOptions};
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
    /// Import another rate limiter's configuration as a tenant's rules.
    #[command(subcommand)]
    Import(ImportCommand),
    /// A tenant's rules as a file: export them, or import a file as a plan and apply it.
    #[command(subcommand)]
    Rules(RulesCommand),
}

/// `sluice rules …`
#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Print the tenant's rules as a file (without ids, ordered by name), or write it to --out.
    Export {
        /// The tenant's id.
        #[arg(long)]
        tenant: String,
        /// json or yaml (default: yaml when --out ends in .yaml or .yml, else json).
        #[arg(long)]
        format: Option<String>,
        /// The file to write (default: standard output).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Read a rules file and print the plan: the rules it would create, update (each changed
    /// field) and delete, those it leaves unchanged, and every problem. With --apply, make
    /// the changes in one transaction. A plan with problems exits with an error.
    Import {
        /// The rules file (YAML when it ends in .yaml or .yml, else JSON).
        file: std::path::PathBuf,
        /// The tenant's id.
        #[arg(long)]
        tenant: String,
        /// Make the changes (without it, only print them).
        #[arg(long)]
        apply: bool,
    },
}

/// The format a rules file is written in: `--format`, else from its name's extension.
fn file_format(
    given: Option<&str>,
    path: Option<&std::path::Path>,
) -> anyhow::Result<crate::admin::rule_files::FileFormat> {
    use crate::admin::rule_files::FileFormat;
    match given {
        Some("json") => Ok(FileFormat::Json),
        Some("yaml") => Ok(FileFormat::Yaml),
        Some(other) => anyhow::bail!("unknown format {other:?}: use json or yaml"),
        None => Ok(
            match path.and_then(|p| p.extension()).and_then(|e| e.to_str()) {
                Some("yaml" | "yml") => FileFormat::Yaml,
                _ => FileFormat::Json,
            },
        ),
    }
}

/// `sluice import …`
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Read an envoyproxy/ratelimit configuration (YAML) as the tenant's descriptor rules:
    /// print the rules it would create, update and delete, and what it cannot express; with
    /// --apply, make those changes in one transaction.
    EnvoyRatelimit {
        /// The configuration file.
        file: std::path::PathBuf,
        /// The tenant's id.
        #[arg(long)]
        tenant: String,
        /// Make the changes (without it, only print them).
        #[arg(long)]
        apply: bool,
    },
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
        /// The key stops working this many days after it is created (default: never).
        #[arg(long)]
        expires_in_days: Option<u64>,
    },
    /// List keys: id, name, display prefix, state and dates.
    List {
        /// The operator keys (the only keys listed here; a tenant's keys are in the console
        /// and the API).
        #[arg(long)]
        operator: bool,
    },
    /// Issue a new key in place of key ID (any kind) and print it once; the old key keeps
    /// working for the grace period.
    Rotate {
        /// The key's id (see `sluice key list --operator`).
        id: String,
        /// How long the old key keeps working, in seconds (at most 30 days).
        #[arg(long, default_value_t = 0)]
        grace_seconds: u64,
    },
    /// Revoke key ID (any kind) at once.
    Revoke {
        /// The key's id.
        id: String,
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
        Command::Key(KeyCommand::Create {
            operator,
            name,
            expires_in_days,
        }) => {
            anyhow::ensure!(operator, "only operator keys are created here (--operator); tenant keys come from the API or the console");
            let admin = offline_service(&cli.config).await?;
            let lifetime = expires_in_days.map(|days| days.saturating_mul(86_400));
            let key = create_operator_key_for(&admin, &name, lifetime).await?;
            print_secret(
                &key,
                "This operator key is shown once and stored only as its SHA-256. Keep it secret;\n\
                 send it as `X-API-Key` (or `Authorization: Bearer`) to /v1/admin.",
            );
            Ok(())
        }
        Command::Key(KeyCommand::List { operator }) => {
            anyhow::ensure!(operator, "only operator keys are listed here (--operator); a tenant's keys are in the console and at /v1/admin/tenants/ID/keys");
            let admin = offline_service(&cli.config).await?;
            print_keys(&admin.list_operator_keys(&Actor::Cli).await?);
            Ok(())
        }
        Command::Key(KeyCommand::Rotate { id, grace_seconds }) => {
            let admin = offline_service(&cli.config).await?;
            let key = rotate_key(&admin, &id, grace_seconds).await?;
            print_secret(
                &key,
                &format!(
                    "The new key, shown once. The old key keeps working for {grace_seconds} s."
                ),
            );
            Ok(())
        }
        Command::Key(KeyCommand::Revoke { id }) => {
            let admin = offline_service(&cli.config).await?;
            let revoked = revoke_key(&admin, &id).await?;
            print_keys(&[revoked]);
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
        Command::Import(ImportCommand::EnvoyRatelimit {
            file,
            tenant,
            apply,
        }) => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let translation = crate::admin::import::translate(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let admin = offline_service(&cli.config).await?;
            let plan = admin
                .import_descriptor_rules(&Actor::Cli, &tenant, &translation.rules, apply, None)
                .await?;
            print_import(&translation, &plan);
            Ok(())
        }
        Command::Rules(RulesCommand::Export {
            tenant,
            format,
            out,
        }) => {
            let format = file_format(format.as_deref(), out.as_deref())?;
            let admin = offline_service(&cli.config).await?;
            let file = admin.export_rules(&Actor::Cli, &tenant).await?;
            let text = crate::admin::rule_files::write_rules_file(&file, format);
            match out {
                Some(path) => {
                    std::fs::write(&path, text)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    print_note(&format!(
                        "{} rules written to {}",
                        file.rules.len(),
                        path.display()
                    ));
                }
                None => print_text(&text),
            }
            Ok(())
        }
        Command::Rules(RulesCommand::Import {
            file,
            tenant,
            apply,
        }) => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let rules =
                crate::admin::rule_files::read_rules_file(&text, file_format(None, Some(&file))?)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let admin = offline_service(&cli.config).await?;
            let plan = admin
                .import_rules(
                    &Actor::Cli,
                    &tenant,
                    &rules.rules,
                    crate::admin::rule_files::RuleSet::All,
                    apply,
                    None,
                )
                .await?;
            print_plan(&plan);
            let problems = plan.all_problems();
            anyhow::ensure!(
                problems.is_empty(),
                "{} problem(s) in {}; nothing changed",
                problems.len(),
                file.display()
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

/// The admin service of a command that is not a server: the configured database, migrated,
/// and (when Redis is configured) the channel that tells running instances of a change.
async fn offline_service(config: &Config) -> anyhow::Result<AdminService> {
    let db = Db::connect(&config.database_url()).await?;
    db.migrate().await?;
    let redis = match config.limiter_target() {
        LimiterTarget::InProcess => None,
        target => {
            let options = RedisOptions {
                timeout: std::time::Duration::from_millis(config.redis_timeout_ms),
                connections: 1,
            };
            match Limiter::connect(&target, options).await {
                Ok(limiter) => limiter.redis().cloned(),
                Err(e) => {
                    warn_unannounced(&e);
                    None
                }
            }
        }
    };
    Ok(AdminService::offline_announcing(db, redis))
}

/// Says that running instances will learn of this command's change only at their next refresh.
#[allow(clippy::print_stderr)]
fn warn_unannounced(e: &dyn std::fmt::Display) {
    eprintln!(
        "warning: Redis is unreachable ({e}); running instances notice this change within {} s",
        crate::cache::REFRESH_AFTER.as_secs()
    );
}

/// A new random key of `kind`.
fn generate_key(kind: KeyKind) -> String {
    let mut random = [0_u8; KEY_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut random);
    format_key(kind, &random)
}

/// Generates an operator key named `name`, registers its hash and returns the key (to print
/// once).
pub async fn create_operator_key(admin: &AdminService, name: &str) -> anyhow::Result<String> {
    create_operator_key_for(admin, name, None).await
}

/// [`create_operator_key`], working for `lifetime_seconds` (none: until revoked).
pub async fn create_operator_key_for(
    admin: &AdminService,
    name: &str,
    lifetime_seconds: Option<u64>,
) -> anyhow::Result<String> {
    let key = generate_key(KeyKind::Operator);
    let body = KeyBody {
        kind: KeyKind::Operator,
        name: name.to_owned(),
        hash: sha256_hex(&key),
        prefix: display_prefix(&key),
        expires_in_seconds: lifetime_seconds,
    };
    admin.create_operator_key(&Actor::Cli, &body).await?;
    Ok(key)
}

/// Rotates key `id` (a tenant's or an operator's): returns the new key, to print once.
pub async fn rotate_key(
    admin: &AdminService,
    id: &str,
    grace_seconds: u64,
) -> anyhow::Result<String> {
    let old = admin
        .key_by_id(&Actor::Cli, id)
        .await
        .with_context(|| format!("no key with id {id}; see `sluice key list --operator`"))?;
    let key = generate_key(old.kind);
    let body = RotateBody {
        hash: sha256_hex(&key),
        prefix: display_prefix(&key),
        grace_seconds,
    };
    match &old.tenant_id {
        Some(tenant) => admin.rotate_key(&Actor::Cli, tenant, id, &body).await?,
        None => admin.rotate_operator_key(&Actor::Cli, id, &body).await?,
    };
    Ok(key)
}

/// Revokes key `id` (a tenant's or an operator's).
pub async fn revoke_key(admin: &AdminService, id: &str) -> anyhow::Result<KeyInfo> {
    let old = admin
        .key_by_id(&Actor::Cli, id)
        .await
        .with_context(|| format!("no key with id {id}; see `sluice key list --operator`"))?;
    Ok(match &old.tenant_id {
        Some(tenant) => admin.revoke_key(&Actor::Cli, tenant, id).await?,
        None => admin.revoke_operator_key(&Actor::Cli, id).await?,
    })
}

/// Prints what an import found and did, for people.
#[allow(clippy::print_stdout)]
fn print_import(t: &crate::admin::import::Translation, plan: &app::rules::RulesPlan) {
    let show = |r: &app::rules::RuleBody| {
        let entries: Vec<String> = r
            .descriptor
            .iter()
            .flatten()
            .map(app::rules::DescriptorEntry::show)
            .collect();
        format!(
            "{}  [{}]  {} per {} ms{}",
            r.name,
            entries.join(", "),
            r.limit,
            r.period_ms,
            if r.shadow { "  (shadow)" } else { "" }
        )
    };
    println!(
        "domain {:?}: send it as the gRPC request's domain only if it is the tenant's name or id",
        t.domain
    );
    for note in &t.notes {
        println!("not imported: {note}");
    }
    for c in &plan.create {
        println!("create  {}", show(&c.rule));
    }
    for u in &plan.update {
        println!("update  {}", show(&u.rule));
    }
    for d in &plan.delete {
        println!("delete  {}", d.name);
    }
    println!(
        "{}: {}",
        plan.summary(),
        if plan.applied {
            "applied"
        } else {
            "nothing changed yet; run again with --apply to make these changes"
        }
    );
}

/// Prints a rules file's plan, for people: one line per rule, each changed field and each
/// problem under its rule, then the totals.
#[allow(clippy::print_stdout)]
fn print_plan(plan: &app::rules::RulesPlan) {
    let problems = |problems: &[app::rules::FieldError]| {
        for p in problems {
            println!("          problem: {p}");
        }
    };
    for c in &plan.create {
        println!("create  {}", c.rule.name);
        problems(&c.problems);
    }
    for u in &plan.update {
        println!("update  {}", u.rule.name);
        for change in &u.changes {
            println!(
                "          {}: {} -> {}",
                change.field, change.before, change.after
            );
        }
        problems(&u.problems);
    }
    for d in &plan.delete {
        match d.overrides {
            0 => println!("delete  {}", d.name),
            n => println!("delete  {} (and its {n} override(s))", d.name),
        }
    }
    for p in &plan.problems {
        println!("problem: {p}");
    }
    println!(
        "{}: {}",
        plan.summary(),
        if plan.applied {
            "applied"
        } else if plan.all_problems().is_empty() {
            "nothing changed yet; run again with --apply to make these changes"
        } else {
            "nothing changed"
        }
    );
}

/// Writes a file's text to standard output as it is.
#[allow(clippy::print_stdout)]
fn print_text(text: &str) {
    print!("{text}");
}

/// Says what a command did, on standard error (standard output is for data).
#[allow(clippy::print_stderr)]
fn print_note(note: &str) {
    eprintln!("{note}");
}

/// Prints keys as a table, for people.
#[allow(clippy::print_stdout)]
fn print_keys(keys: &[KeyInfo]) {
    let date = |ms: Option<i64>| {
        ms.and_then(|ms| {
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()
        })
        .map_or_else(
            || "-".to_owned(),
            |t| {
                format!(
                    "{:04}-{:02}-{:02} {:02}:{:02}",
                    t.year(),
                    u8::from(t.month()),
                    t.day(),
                    t.hour(),
                    t.minute()
                )
            },
        )
    };
    println!(
        "{:<36}  {:<20}  {:<12}  {:<8}  {:<16}  {:<16}  {:<16}",
        "ID", "NAME", "PREFIX", "STATE", "CREATED", "EXPIRES", "LAST USED"
    );
    for key in keys {
        println!(
            "{:<36}  {:<20}  {:<12}  {:<8}  {:<16}  {:<16}  {:<16}",
            key.id,
            key.name,
            key.prefix,
            key.state.as_str(),
            date(Some(key.created_at)),
            date(key.expires_at.or(key.revoked_at)),
            date(key.last_used_at),
        );
    }
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
            println!(
                "  Sign in at http://{address}/sign-in (more accounts: `sluice user create`)."
            );
            println!(
                "  A first start with SLUICE_ADMIN_PASSWORD set creates {} with that password.",
                crate::admin::users::BOOTSTRAP_EMAIL
            );
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
