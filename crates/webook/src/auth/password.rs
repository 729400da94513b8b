//! Password hashing with argon2id, off the async runtime and with bounded memory.
//!
//! Parameters follow OWASP's recommendation for argon2id: 19 MiB of memory, 2 passes, 1 lane
//! (`docs/PERFORMANCE.md` has the measured cost). Hashes are PHC strings carrying their own
//! parameters, so raising them later keeps old hashes verifiable.
//!
//! Hashing runs on a small pool of dedicated threads, one per CPU, each owning one reusable
//! 19 MiB work area while it is busy: allocated at the first job, released after
//! [`IDLE_RELEASE`] without one (an idle server does not keep 19 MiB per CPU after one login).
//! Requests queue for a worker (a burst waits instead of exhausting memory or starving the async
//! workers), and no 19 MiB buffer is allocated per request: with a buffer per call on tokio's
//! blocking pool, glibc kept ~60 MB per blocking thread after a login burst (RSS 450–720 MB). Unknown emails are verified against a dummy hash, so they cost the same
//! time as a wrong password.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use argon2::{
    password_hash::{rand_core::OsRng, Output, ParamsString, PasswordHash, SaltString},
    Algorithm, Argon2, Block, Params, Version,
};
use tokio::sync::{oneshot, OnceCell};

/// Memory cost in KiB.
pub const MEMORY_KIB: u32 = 19 * 1024;
/// Passes over memory.
pub const ITERATIONS: u32 = 2;
/// Lanes.
pub const PARALLELISM: u32 = 1;
/// Length of the stored hash output, bytes.
const OUTPUT_LEN: usize = 32;
/// Hash jobs waiting for a worker before callers wait to enqueue.
const QUEUE_CAPACITY: usize = 1024;
/// A worker without a job for this long gives its work area back.
pub const IDLE_RELEASE: Duration = Duration::from_secs(2);

enum Job {
    Hash {
        password: String,
        reply: oneshot::Sender<anyhow::Result<String>>,
    },
    Verify {
        password: String,
        stored: String,
        reply: oneshot::Sender<anyhow::Result<bool>>,
    },
}

/// Hashes and verifies passwords; cheap to clone. The worker threads stop when the last clone
/// is dropped.
#[derive(Clone)]
pub struct PasswordHasher {
    jobs: flume::Sender<Job>,
    dummy_hash: Arc<OnceCell<String>>,
}

impl std::fmt::Debug for PasswordHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PasswordHasher(argon2id)")
    }
}

fn params() -> anyhow::Result<Params> {
    Params::new(MEMORY_KIB, ITERATIONS, PARALLELISM, Some(OUTPUT_LEN))
        .map_err(|err| anyhow::anyhow!("argon2 parameters: {err}"))
}

impl PasswordHasher {
    /// Starts one worker thread per CPU.
    pub fn new() -> anyhow::Result<Self> {
        let params = params()?;
        let workers = std::thread::available_parallelism().map_or(1, usize::from);
        let (jobs, queue) = flume::bounded(QUEUE_CAPACITY);
        for index in 0..workers {
            let (queue, params) = (queue.clone(), params.clone());
            std::thread::Builder::new()
                .name(format!("argon2-{index}"))
                .spawn(move || work(&queue, params, IDLE_RELEASE))
                .context("starting a password hashing thread")?;
        }
        Ok(Self {
            jobs,
            dummy_hash: Arc::new(OnceCell::new()),
        })
    }

    /// A PHC-format argon2id hash of `password` with a fresh random salt.
    pub async fn hash(&self, password: String) -> anyhow::Result<String> {
        let (reply, answer) = oneshot::channel();
        self.submit(Job::Hash { password, reply }).await?;
        answer.await.context("password hashing thread stopped")?
    }

    /// Whether `password` matches `stored`. With no stored hash (unknown account) it still does
    /// the full work against a dummy hash and answers false, so timing does not tell.
    pub async fn verify(&self, password: String, stored: Option<String>) -> anyhow::Result<bool> {
        let account_exists = stored.is_some();
        let stored = match stored {
            Some(stored) => stored,
            None => self.dummy_hash().await?,
        };
        let (reply, answer) = oneshot::channel();
        self.submit(Job::Verify {
            password,
            stored,
            reply,
        })
        .await?;
        let matches = answer.await.context("password hashing thread stopped")??;
        Ok(matches && account_exists)
    }

    async fn submit(&self, job: Job) -> anyhow::Result<()> {
        self.jobs
            .send_async(job)
            .await
            .map_err(|_| anyhow::anyhow!("password hashing threads stopped"))
    }

    async fn dummy_hash(&self) -> anyhow::Result<String> {
        self.dummy_hash
            .get_or_try_init(|| self.hash("dummy password for unknown accounts".to_owned()))
            .await
            .cloned()
    }
}

/// A worker: takes jobs until every sender is gone, reusing one work area while jobs keep
/// coming and releasing it after `idle_release` without one.
fn work(queue: &flume::Receiver<Job>, params: Params, idle_release: Duration) {
    let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
    // Allocated at the first job, so an idle process does not hold 19 MiB per CPU.
    let mut memory: Vec<Block> = Vec::new();
    loop {
        let job = if memory.is_empty() {
            queue.recv().ok()
        } else {
            match queue.recv_timeout(idle_release) {
                Ok(job) => Some(job),
                Err(flume::RecvTimeoutError::Timeout) => {
                    memory = Vec::new();
                    continue;
                }
                Err(flume::RecvTimeoutError::Disconnected) => None,
            }
        };
        if job.is_some() && memory.is_empty() {
            memory = vec![Block::default(); argon2.params().block_count()];
        }
        match job {
            None => return,
            Some(Job::Hash { password, reply }) => {
                let _ = reply.send(hash_with(&argon2, &mut memory, &password));
            }
            Some(Job::Verify {
                password,
                stored,
                reply,
            }) => {
                let _ = reply.send(verify_with(&mut memory, &password, &stored));
            }
        }
    }
}

fn hash_with(argon2: &Argon2<'_>, memory: &mut [Block], password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    let mut salt_buf = [0u8; 64];
    let salt_bytes = salt
        .decode_b64(&mut salt_buf)
        .map_err(|err| anyhow::anyhow!("salt: {err}"))?;
    let mut out = [0u8; OUTPUT_LEN];
    argon2
        .hash_password_into_with_memory(password.as_bytes(), salt_bytes, &mut out, &mut *memory)
        .map_err(|err| anyhow::anyhow!("hashing a password: {err}"))?;
    let hash = PasswordHash {
        algorithm: argon2::ARGON2ID_IDENT,
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(argon2.params())
            .map_err(|err| anyhow::anyhow!("argon2 parameters: {err}"))?,
        salt: Some(salt.as_salt()),
        hash: Some(Output::new(&out).map_err(|err| anyhow::anyhow!("hash output: {err}"))?),
    };
    Ok(hash.to_string())
}

/// Recomputes the hash with the stored hash's own algorithm, version and parameters and compares
/// outputs in constant time (`Output`'s equality is constant-time).
fn verify_with(memory: &mut [Block], password: &str, stored: &str) -> anyhow::Result<bool> {
    let malformed = |what: &str| anyhow::anyhow!("stored password hash is malformed: {what}");
    let parsed = PasswordHash::new(stored).map_err(|err| malformed(&err.to_string()))?;
    let algorithm =
        Algorithm::try_from(parsed.algorithm).map_err(|err| malformed(&err.to_string()))?;
    let version = parsed
        .version
        .map(Version::try_from)
        .transpose()
        .map_err(|err| malformed(&err.to_string()))?
        .unwrap_or_default();
    let params = Params::try_from(&parsed).map_err(|err| malformed(&err.to_string()))?;
    let expected = parsed.hash.ok_or_else(|| malformed("no hash"))?;
    let salt = parsed.salt.ok_or_else(|| malformed("no salt"))?;
    let mut salt_buf = [0u8; 64];
    let salt_bytes = salt
        .decode_b64(&mut salt_buf)
        .map_err(|err| malformed(&err.to_string()))?;
    let argon2 = Argon2::new(algorithm, version, params);
    let mut out = vec![0u8; expected.len()];
    let block_count = argon2.params().block_count();
    let computed = match memory.get_mut(..block_count) {
        Some(memory) => {
            argon2.hash_password_into_with_memory(password.as_bytes(), salt_bytes, &mut out, memory)
        }
        // A hash made with more memory than today's parameters: allocate for this one.
        None => argon2.hash_password_into(password.as_bytes(), salt_bytes, &mut out),
    };
    computed.map_err(|err| anyhow::anyhow!("verifying a password: {err}"))?;
    let computed = Output::new(&out).map_err(|err| malformed(&err.to_string()))?;
    Ok(computed == expected)
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
    async fn hashes_made_with_other_parameters_still_verify() {
        use argon2::PasswordHasher as _;
        let hasher = PasswordHasher::new().unwrap();
        let salt = SaltString::generate(&mut OsRng);
        for params in [
            Params::new(8 * 1024, 1, 1, None).unwrap(),
            Params::new(32 * 1024, 1, 1, None).unwrap(),
        ] {
            let legacy = Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
                .hash_password(b"old#pass1", &salt)
                .unwrap()
                .to_string();
            assert!(hasher
                .verify("old#pass1".into(), Some(legacy.clone()))
                .await
                .unwrap());
            assert!(!hasher
                .verify("old#pass2".into(), Some(legacy))
                .await
                .unwrap());
        }
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
