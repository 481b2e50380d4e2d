//! Console passwords: argon2id, always off the async runtime (`spawn_blocking`). A sign-in for
//! an unknown email verifies against a dummy hash, so it takes as long as a real one and the
//! timing does not reveal which emails exist.

use std::sync::LazyLock;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rand::Rng;

/// The shortest password accepted anywhere (the console says the same while you type).
pub const MIN_PASSWORD_CHARS: usize = app::tenants::MIN_PASSWORD_CHARS;

static DUMMY_HASH: LazyLock<String> = LazyLock::new(|| hash_now(&generate()).unwrap_or_default());

fn hash_now(password: &str) -> Result<String, argon2::password_hash::Error> {
    let salt = SaltString::generate(&mut OsRng);
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)?
        .to_string())
}

/// Hashes `password` (argon2id, default parameters) into a PHC string.
pub async fn hash(password: String) -> anyhow::Result<String> {
    let hashed = tokio::task::spawn_blocking(move || hash_now(&password)).await?;
    hashed.map_err(|e| anyhow::anyhow!("cannot hash the password: {e}"))
}

/// Whether `password` matches `stored`. With no stored hash (unknown user) the dummy hash is
/// verified instead and the answer is always false.
pub async fn verify(password: String, stored: Option<String>) -> bool {
    let known = stored.is_some();
    let stored = stored.unwrap_or_else(|| DUMMY_HASH.clone());
    let matched = tokio::task::spawn_blocking(move || {
        PasswordHash::new(&stored).is_ok_and(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
    })
    .await
    .unwrap_or(false);
    known && matched
}

/// A random 20-character password (letters and digits), for bootstrap accounts.
pub fn generate() -> String {
    const CHARS: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut rng = OsRng;
    (0..20)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_only_its_password() {
        let hashed = hash("correct horse battery".into()).await.unwrap();
        assert!(hashed.starts_with("$argon2id$"));
        assert!(verify("correct horse battery".into(), Some(hashed.clone())).await);
        assert!(!verify("wrong".into(), Some(hashed)).await);
        assert!(!verify("anything".into(), None).await);
    }

    #[test]
    fn generated_passwords_are_long_and_different() {
        let (a, b) = (generate(), generate());
        assert_eq!(a.chars().count(), 20);
        assert_ne!(a, b);
    }
}
