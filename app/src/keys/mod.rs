//! API keys: their kinds, their shape, and the keys page. A key is 256 random bits in hex
//! behind a visible kind prefix (`sl_chk_`, `sl_adm_`, `sl_op_`). The console generates it in
//! the browser (WASM, from the browser's cryptographic RNG), shows it once, and sends only its
//! SHA-256 and its display prefix: the server never sees a plaintext key.

pub mod view;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use sha2::{Digest, Sha256};

use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyKind {
    /// `/v1/check` only.
    Check,
    /// `/v1/admin/*` inside its own tenant.
    Admin,
    /// `/v1/admin/*` on every tenant (platform operators).
    Operator,
}

impl KeyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Check => "check",
            KeyKind::Admin => "admin",
            KeyKind::Operator => "operator",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [KeyKind::Check, KeyKind::Admin, KeyKind::Operator]
            .into_iter()
            .find(|k| k.as_str() == s)
    }

    /// The visible start of every key of this kind.
    pub fn key_prefix(self) -> &'static str {
        match self {
            KeyKind::Check => "sl_chk_",
            KeyKind::Admin => "sl_adm_",
            KeyKind::Operator => "sl_op_",
        }
    }
}

/// Bytes of randomness in a key.
pub const KEY_BYTES: usize = 32;
/// Characters of a key kept for display (its kind prefix and a few random characters).
pub const DISPLAY_CHARS: usize = 12;
/// The longest grace period of a rotation: 30 days (the server refuses more; the console's
/// form says so before sending).
pub const MAX_GRACE_SECONDS: u64 = 30 * 86_400;

/// Builds a key of `kind` from 32 random bytes.
pub fn format_key(kind: KeyKind, random: &[u8; KEY_BYTES]) -> String {
    let mut key = String::with_capacity(kind.key_prefix().len() + 2 * KEY_BYTES);
    key.push_str(kind.key_prefix());
    for byte in random {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

/// The part of a key that lists show.
pub fn display_prefix(key: &str) -> String {
    key.chars().take(DISPLAY_CHARS).collect()
}

/// Whether `key` has the shape of a Sluice key (a kind prefix and 64 hex digits). Anything
/// else is refused before any lookup.
pub fn is_well_formed(key: &str) -> bool {
    [KeyKind::Check, KeyKind::Admin, KeyKind::Operator]
        .into_iter()
        .any(|kind| {
            key.strip_prefix(kind.key_prefix()).is_some_and(|rest| {
                rest.len() == 2 * KEY_BYTES && rest.bytes().all(|b| b.is_ascii_hexdigit())
            })
        })
}

/// Whether `hash` is a lower-case hex SHA-256.
pub fn is_sha256_hex(hash: &str) -> bool {
    hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The lower-case hex SHA-256 of a key: what the server stores and looks keys up by.
pub fn sha256_hex(key: &str) -> String {
    HexDigest::of(key).as_str().to_owned()
}

/// [`sha256_hex`] on the stack: the server hashes the presented key on every check, and
/// looks it up without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HexDigest([u8; 64]);

impl HexDigest {
    pub fn of(key: &str) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digest = Sha256::digest(key.as_bytes());
        let mut out = [0_u8; 64];
        for (i, byte) in digest.iter().enumerate() {
            out[2 * i] = HEX[usize::from(byte >> 4)];
            out[2 * i + 1] = HEX[usize::from(byte & 0x0f)];
        }
        Self(out)
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// A freshly generated key: the plaintext (shown once), and what is sent to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedKey {
    pub plaintext: String,
    pub hash: String,
    pub prefix: String,
}

impl GeneratedKey {
    /// Builds a key of `kind` from 32 random bytes.
    pub fn from_random(kind: KeyKind, random: &[u8; KEY_BYTES]) -> Self {
        let plaintext = format_key(kind, random);
        Self {
            hash: sha256_hex(&plaintext),
            prefix: display_prefix(&plaintext),
            plaintext,
        }
    }

    /// Generates a key of `kind` from the browser's cryptographic RNG.
    #[cfg(feature = "hydrate")]
    pub fn generate(kind: KeyKind) -> Result<Self, String> {
        let mut random = [0_u8; KEY_BYTES];
        let crypto = web_sys::window()
            .ok_or("no browser window")?
            .crypto()
            .map_err(|_| "this browser offers no Web Crypto; use a current browser")?;
        crypto
            .get_random_values_with_u8_array(&mut random)
            .map_err(|_| "the browser refused to generate random bytes")?;
        if random.iter().all(|b| *b == 0) {
            return Err("the browser's random generator returned zeros".into());
        }
        Ok(Self::from_random(kind, &random))
    }

    /// Keys are generated only in the browser.
    #[cfg(not(feature = "hydrate"))]
    pub fn generate(_kind: KeyKind) -> Result<Self, String> {
        Err("keys are generated in the browser once the page is live".into())
    }
}

/// Whether a key authenticates, and why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    Live,
    /// Rotated: still works until its grace period ends.
    Grace,
    Expired,
    Revoked,
}

impl KeyState {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Live => "live",
            KeyState::Grace => "grace",
            KeyState::Expired => "expired",
            KeyState::Revoked => "revoked",
        }
    }
}

/// A key: the one wire shape of the admin API and the console. The hash is not included: it
/// is of no use to a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    pub id: String,
    /// `None` for an operator key.
    pub tenant_id: Option<String>,
    pub kind: KeyKind,
    pub name: String,
    pub prefix: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
    /// The key that replaced this one in a rotation.
    pub replaced_by: Option<String>,
    /// [`KeyInfo::state_at`] when the server listed it, so that the page the server renders
    /// and the page the browser hydrates agree.
    pub state: KeyState,
    /// When the server listed it (ms since the epoch): the moment `state` and the time left
    /// of a key in its grace period are counted from.
    #[serde(default)]
    pub listed_at: i64,
}

impl KeyInfo {
    /// The key's state at `now_ms`.
    pub fn state_at(&self, now_ms: i64) -> KeyState {
        if self.revoked_at.is_some() {
            KeyState::Revoked
        } else if self.expires_at.is_some_and(|e| e <= now_ms) {
            KeyState::Expired
        } else if self.replaced_by.is_some() {
            KeyState::Grace
        } else {
            KeyState::Live
        }
    }
}

/// What this feature's server functions need from the server (which implements it). Acting
/// calls act as the session's user: an operator on any tenant, a tenant admin on their own
/// tenant only (any other tenant is `NotFound`); without a session they are `Unauthorized`.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait KeysPort: Send + Sync + 'static {
    async fn list_keys(&self, tenant: &str) -> Result<Vec<KeyInfo>, AppError>;
    async fn create_key(
        &self,
        tenant: &str,
        kind: KeyKind,
        name: &str,
        hash: &str,
        prefix: &str,
        expires_in_seconds: Option<u64>,
    ) -> Result<KeyInfo, AppError>;
    async fn rotate_key(
        &self,
        tenant: &str,
        key: &str,
        hash: &str,
        prefix: &str,
        grace_seconds: u64,
    ) -> Result<KeyInfo, AppError>;
    async fn revoke_key(&self, tenant: &str, key: &str) -> Result<KeyInfo, AppError>;
}

/// A tenant's keys, newest first.
#[server(prefix = "/api", endpoint = "keys/list", input = Json)]
pub async fn list_keys(tenant: String) -> Result<Vec<KeyInfo>, AppError> {
    crate::context::port::<dyn KeysPort>()?
        .list_keys(&tenant)
        .await
}

/// Registers a key the browser generated: only its hash and display prefix arrive here.
#[server(prefix = "/api", endpoint = "keys/create", input = Json)]
pub async fn create_key(
    tenant: String,
    kind: KeyKind,
    name: String,
    hash: String,
    prefix: String,
    /// The key stops working this long after it is registered; none: only when revoked.
    #[server(default)]
    expires_in_seconds: Option<u64>,
) -> Result<KeyInfo, AppError> {
    crate::context::port::<dyn KeysPort>()?
        .create_key(&tenant, kind, &name, &hash, &prefix, expires_in_seconds)
        .await
}

/// Replaces a key with a new one (generated in the browser); the old one keeps working for
/// `grace_seconds`.
#[server(prefix = "/api", endpoint = "keys/rotate", input = Json)]
pub async fn rotate_key(
    tenant: String,
    key: String,
    hash: String,
    prefix: String,
    grace_seconds: u64,
) -> Result<KeyInfo, AppError> {
    crate::context::port::<dyn KeysPort>()?
        .rotate_key(&tenant, &key, &hash, &prefix, grace_seconds)
        .await
}

/// Revokes a key at once.
#[server(prefix = "/api", endpoint = "keys/revoke", input = Json)]
pub async fn revoke_key(tenant: String, key: String) -> Result<KeyInfo, AppError> {
    crate::context::port::<dyn KeysPort>()?
        .revoke_key(&tenant, &key)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_their_kind_and_256_bits() {
        let key = format_key(KeyKind::Check, &[0xab; 32]);
        assert!(key.starts_with("sl_chk_"));
        assert_eq!(key.len(), 7 + 64);
        assert_eq!(display_prefix(&key), "sl_chk_ababa");
        assert_eq!(KeyKind::parse("admin"), Some(KeyKind::Admin));
        assert_eq!(KeyKind::parse("root"), None);
        assert!(is_well_formed(&key));
        assert!(is_well_formed(&format_key(KeyKind::Operator, &[1; 32])));
        assert!(!is_well_formed("sl_chk_abc"));
        assert!(!is_well_formed(&key.replace("sl_chk_", "sl_xyz_")));
        assert!(!is_well_formed(&format!("{key}0")));
    }

    #[test]
    fn hashes_must_be_lower_case_hex_sha256() {
        assert!(is_sha256_hex(&"a1".repeat(32)));
        assert!(!is_sha256_hex(&"A1".repeat(32)));
        assert!(!is_sha256_hex("abc"));
    }

    #[test]
    fn generated_keys_send_the_sha256_and_a_short_prefix() {
        // Known answer: SHA-256 of "abc".
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let key = GeneratedKey::from_random(KeyKind::Admin, &[7; 32]);
        assert!(key.plaintext.starts_with("sl_adm_0707"));
        assert_eq!(key.hash, sha256_hex(&key.plaintext));
        assert!(is_sha256_hex(&key.hash));
        assert_eq!(key.prefix, "sl_adm_07070");
        assert!(!key.plaintext.contains(&key.hash) && key.plaintext.len() == 71);
    }

    #[test]
    fn key_states_follow_revocation_rotation_and_expiry() {
        let mut key = KeyInfo {
            id: "k".into(),
            tenant_id: None,
            kind: KeyKind::Check,
            name: "n".into(),
            prefix: "sl_chk_00000".into(),
            created_at: 0,
            expires_at: None,
            revoked_at: None,
            last_used_at: None,
            replaced_by: None,
            state: KeyState::Live,
            listed_at: 0,
        };
        assert_eq!(key.state_at(10), KeyState::Live);
        key.replaced_by = Some("k2".into());
        key.expires_at = Some(20);
        assert_eq!(key.state_at(10), KeyState::Grace);
        assert_eq!(key.state_at(20), KeyState::Expired);
        key.revoked_at = Some(5);
        assert_eq!(key.state_at(10), KeyState::Revoked);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        fn kind() -> impl Strategy<Value = KeyKind> {
            prop_oneof![
                Just(KeyKind::Check),
                Just(KeyKind::Admin),
                Just(KeyKind::Operator)
            ]
        }

        proptest! {
            #[test]
            fn every_generated_key_has_the_shape_of_its_kind(
                random in any::<[u8; KEY_BYTES]>(), kind in kind()
            ) {
                let key = format_key(kind, &random);
                prop_assert!(is_well_formed(&key));
                prop_assert!(key.starts_with(kind.key_prefix()));
                let prefix = display_prefix(&key);
                prop_assert!(prefix.starts_with(kind.key_prefix()) && key.starts_with(&prefix));
                prop_assert!(is_sha256_hex(&sha256_hex(&key)));
            }

            #[test]
            fn a_key_with_one_character_broken_is_not_a_key(
                random in any::<[u8; KEY_BYTES]>(),
                kind in kind(),
                at in 0..(2 * KEY_BYTES),
                bad in "[g-zG-Z_ .!-]",
            ) {
                let key = format_key(kind, &random);
                let start = kind.key_prefix().len();
                let broken = format!("{}{}{}", &key[..start + at], bad, &key[start + at + 1..]);
                prop_assert!(!is_well_formed(&broken), "{}", broken);
                prop_assert!(!is_well_formed(&key[..key.len() - 1]));
                let longer = format!("{key}0");
                prop_assert!(!is_well_formed(&longer));
            }

            #[test]
            fn whatever_is_well_formed_has_a_kind_prefix_and_64_hex_digits(s in "\\PC{0,80}") {
                if is_well_formed(&s) {
                    let kind = [KeyKind::Check, KeyKind::Admin, KeyKind::Operator]
                        .into_iter()
                        .find(|k| s.starts_with(k.key_prefix()));
                    prop_assert!(kind.is_some());
                    prop_assert_eq!(s.len(), kind.unwrap().key_prefix().len() + 2 * KEY_BYTES);
                }
            }
        }
    }
}
