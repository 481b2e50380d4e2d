//! API keys: their kinds and their shape. A key is 256 random bits in hex behind a visible
//! kind prefix (`sl_chk_`, `sl_adm_`, `sl_op_`). Only its SHA-256 is ever stored.

use serde::{Deserialize, Serialize};

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
}
