//! Commands run on the server host: `sluice key create --operator` bootstraps the first
//! operator key, which is printed once and stored only as its SHA-256; `sluice user create`
//! makes console users; an embedded instance's first start creates an operator account.

use app::keys::{display_prefix, format_key, KeyKind, KEY_BYTES};
use rand::RngCore;

use crate::auth::sha256_hex;
use crate::store::keys::NewKey;
use crate::store::{self, audit, Db};

/// Creates an operator key named `name` and returns the key (to print once).
pub async fn create_operator_key(db: &Db, name: &str) -> anyhow::Result<String> {
    let mut random = [0_u8; KEY_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut random);
    let key = format_key(KeyKind::Operator, &random);
    let prefix = display_prefix(&key);
    let hash = sha256_hex(&key);
    let stored = store::keys::insert(
        db,
        &NewKey {
            tenant_id: None,
            kind: KeyKind::Operator,
            name,
            prefix: &prefix,
            hash: &hash,
            expires_at: None,
        },
    )
    .await?;
    audit::record(
        db,
        None,
        "cli",
        "key.create",
        Some(&stored.id),
        &serde_json::json!({ "kind": "operator", "name": name, "prefix": prefix }),
    )
    .await?;
    Ok(key)
}

/// The account an embedded instance creates on its first start.
pub const BOOTSTRAP_EMAIL: &str = "admin@localhost";

/// Creates a console user with a random password; returns the password (to print once).
pub async fn create_user(db: &Db, email: &str, tenant_id: Option<&str>) -> anyhow::Result<String> {
    let email = email.trim();
    anyhow::ensure!(
        email.contains('@') && email.len() <= 254,
        "{email:?} is not an email address"
    );
    if let Some(tenant) = tenant_id {
        anyhow::ensure!(
            store::tenants::get(db, tenant).await?.is_some(),
            "no tenant {tenant}"
        );
    }
    let password = crate::passwords::generate();
    insert_user(db, email, &password, tenant_id).await?;
    Ok(password)
}

/// Stores a user with `password` hashed (an operator, or a tenant admin of `tenant_id`) and
/// records it in the audit log.
async fn insert_user(
    db: &Db,
    email: &str,
    password: &str,
    tenant_id: Option<&str>,
) -> anyhow::Result<()> {
    let role = if tenant_id.is_some() {
        "tenant_admin"
    } else {
        "operator"
    };
    let hash = crate::passwords::hash(password.to_owned()).await?;
    store::users::insert(db, email, &hash, role, tenant_id).await?;
    let detail = serde_json::json!({ "email": email, "role": role });
    audit::record(db, tenant_id, "cli", "user.create", None, &detail).await?;
    Ok(())
}

/// On an embedded instance with no users yet, creates [`BOOTSTRAP_EMAIL`] as an operator with
/// `password` (or a random one). Returns the password when it created the account.
pub async fn bootstrap_operator(db: &Db, password: Option<&str>) -> anyhow::Result<Option<String>> {
    if store::users::exist(db).await? {
        return Ok(None);
    }
    let password = match password {
        Some(p) => {
            anyhow::ensure!(
                p.chars().count() >= crate::passwords::MIN_PASSWORD_CHARS,
                "SLUICE_ADMIN_PASSWORD must have at least {} characters",
                crate::passwords::MIN_PASSWORD_CHARS
            );
            p.to_owned()
        }
        None => crate::passwords::generate(),
    };
    insert_user(db, BOOTSTRAP_EMAIL, &password, None).await?;
    Ok(Some(password))
}
