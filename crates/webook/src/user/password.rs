//! Password hashing with argon2id, off the async runtime.
//!
//! Parameters follow OWASP's recommendation for argon2id: 19 MiB of memory, 2 passes, 1 lane
//! (`docs/PERFORMANCE.md` has the measured cost). Hashes are PHC strings carrying their own
//! parameters, so raising them later keeps old hashes verifiable.
//!
//! Each hash runs on tokio's blocking pool, and at most one per CPU runs at a time (a semaphore),
//! so a login burst queues instead of exhausting memory or starving the async workers. Unknown
//! emails are verified against a dummy hash, so they cost the same time as a wrong password.

use std::sync::Arc;

use anyhow::Context;
use argon2::{
    password_hash::{
        rand_core::OsRng, PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString,
    },
    Algorithm, Argon2, Params, Version,
};
use tokio::sync::{OnceCell, Semaphore};

/// Memory cost in KiB.
pub const MEMORY_KIB: u32 = 19 * 1024;
/// Passes over memory.
pub const ITERATIONS: u32 = 2;
/// Lanes.
pub const PARALLELISM: u32 = 1;

/// Hashes and verifies passwords; cheap to clone.
#[derive(Clone)]
pub struct PasswordHasher {
    argon2: Argon2<'static>,
    permits: Arc<Semaphore>,
    dummy_hash: Arc<OnceCell<String>>,
}

impl std::fmt::Debug for PasswordHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PasswordHasher(argon2id)")
    }
}

impl PasswordHasher {
    /// A hasher with the production parameters.
    pub fn new() -> anyhow::Result<Self> {
        let params = Params::new(MEMORY_KIB, ITERATIONS, PARALLELISM, None)
            .map_err(|err| anyhow::anyhow!("argon2 parameters: {err}"))?;
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(Self {
            argon2: Argon2::new(Algorithm::Argon2id, Version::V0x13, params),
            permits: Arc::new(Semaphore::new(cpus)),
            dummy_hash: Arc::new(OnceCell::new()),
        })
    }

    /// A PHC-format argon2id hash of `password` with a fresh random salt.
    pub async fn hash(&self, password: String) -> anyhow::Result<String> {
        let _permit = self.permits.acquire().await?;
        let argon2 = self.argon2.clone();
        tokio::task::spawn_blocking(move || {
            let salt = SaltString::generate(&mut OsRng);
            argon2
                .hash_password(password.as_bytes(), &salt)
                .map(|hash| hash.to_string())
                .map_err(|err| anyhow::anyhow!("hashing a password: {err}"))
        })
        .await
        .context("password hashing task")?
    }

    /// Whether `password` matches `stored`. With no stored hash (unknown account) it still does
    /// the full work against a dummy hash and answers false, so timing does not tell.
    pub async fn verify(&self, password: String, stored: Option<String>) -> anyhow::Result<bool> {
        let account_exists = stored.is_some();
        let stored = match stored {
            Some(stored) => stored,
            None => self.dummy_hash().await?,
        };
        let _permit = self.permits.acquire().await?;
        let argon2 = self.argon2.clone();
        let matches = tokio::task::spawn_blocking(move || {
            let parsed = PasswordHash::new(&stored)
                .map_err(|err| anyhow::anyhow!("stored password hash is malformed: {err}"))?;
            // The comparison inside verify_password is constant-time.
            Ok::<_, anyhow::Error>(argon2.verify_password(password.as_bytes(), &parsed).is_ok())
        })
        .await
        .context("password verification task")??;
        Ok(matches && account_exists)
    }

    async fn dummy_hash(&self) -> anyhow::Result<String> {
        self.dummy_hash
            .get_or_try_init(|| self.hash("dummy password for unknown accounts".to_owned()))
            .await
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hashes_verify_and_differ_by_salt() {
        let hasher = PasswordHasher::new().unwrap();
        let first = hasher.hash("hello#123".into()).await.unwrap();
        let second = hasher.hash("hello#123".into()).await.unwrap();
        assert!(
            first.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{first}"
        );
        assert_ne!(first, second, "salted");
        assert!(hasher
            .verify("hello#123".into(), Some(first.clone()))
            .await
            .unwrap());
        assert!(!hasher
            .verify("hello#124".into(), Some(first))
            .await
            .unwrap());
    }

    #[tokio::test]
    async fn unknown_accounts_never_verify() {
        let hasher = PasswordHasher::new().unwrap();
        assert!(!hasher
            .verify("dummy password for unknown accounts".into(), None)
            .await
            .unwrap());
    }

    #[tokio::test]
    async fn a_malformed_stored_hash_is_an_error_not_a_match() {
        let hasher = PasswordHasher::new().unwrap();
        assert!(hasher
            .verify("x".into(), Some("plaintext".into()))
            .await
            .is_err());
    }
}
