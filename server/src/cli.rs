//! Commands run on the server host: `sluice key create --operator` bootstraps the first
//! operator key, which is printed once and stored only as its SHA-256.

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
