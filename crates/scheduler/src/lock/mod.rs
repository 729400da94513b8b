//! Distributed locks for jobs: one small trait, [`LockBackend`], with two implementations —
//! [`InProcessLocks`] (one process, embedded mode) and [`RedisLocks`] (any number of processes) —
//! and [`Lease`], what a caller holds once it has a lock. Fencing tokens are explained on
//! [`LockBackend`], the lease's validity window on [`Lease`].

mod in_process;
#[cfg(feature = "redis")]
mod redis;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ownership::Ownership;

pub use in_process::InProcessLocks;
#[cfg(feature = "redis")]
pub use redis::RedisLocks;

/// A lock backend failed to answer (network, server error). Distinct from "the lock is held by
/// someone else", which is a normal answer.
#[derive(Debug, thiserror::Error)]
#[error("lock backend error: {0}")]
pub struct LockError(#[source] pub anyhow::Error);

/// A successful acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Random token identifying this acquisition; extend and release compare it.
    pub owner: String,
    /// Strictly greater than the token of every earlier acquisition of the same key.
    pub fencing_token: u64,
}

/// Storage for locks. Implementations must make each method atomic.
///
/// A backend only knows keys, owner tokens and time-to-live. Every successful acquisition also
/// yields a **fencing token**: a per-key counter incremented atomically with the acquisition, so
/// the tokens of successive holders strictly increase. A job attaches its token to the writes it
/// makes, and a store that remembers the highest token it has seen rejects a stale holder's late
/// write (Kleppmann's fencing).
#[async_trait]
pub trait LockBackend: Send + Sync + 'static {
    /// Takes `key` for `ttl` unless someone holds it; `Ok(None)` when held.
    ///
    /// With `tick = Some(t)` the acquisition also claims fire time `t` (ms since the epoch) for
    /// this key: it fails if a tick `>= t` was already claimed, so however skewed the instances'
    /// clocks and however fast a run finishes and releases, each fire time runs at most once.
    async fn try_acquire(
        &self,
        key: &str,
        ttl: Duration,
        tick: Option<i64>,
    ) -> Result<Option<Grant>, LockError>;
    /// Resets the ttl of `key` if `owner` still holds it; `Ok(false)` when it does not.
    async fn extend(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, LockError>;
    /// Deletes `key` if `owner` still holds it; `Ok(false)` when it does not (it expired and may
    /// belong to someone else now, whose lock is left alone).
    async fn release(&self, key: &str, owner: &str) -> Result<bool, LockError>;
}

/// A held lock, with its validity tracked on the monotonic clock.
///
/// A lease starts counting the ttl at the instant the acquire (or extend) request was *sent*,
/// which is never later than the instant the backend started its expiry timer, so the holder
/// always believes its lock expires no later than it really does. It stops considering itself the
/// owner a safety margin before that, which is what lets the [`Scheduler`](crate::Scheduler)
/// cancel a job before anyone else can take the lock.
#[derive(Debug)]
pub struct Lease {
    backend: Arc<dyn LockBackend>,
    key: String,
    owner: String,
    ownership: Arc<Ownership>,
}

impl std::fmt::Debug for dyn LockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockBackend")
    }
}

impl Lease {
    /// Tries once to take `key` for `ttl` (claiming fire time `tick`, if given: see
    /// [`LockBackend::try_acquire`]). The lease counts itself valid until `ttl - margin` after the
    /// request was sent; an answer that arrives later than that is given back and reported as
    /// not acquired.
    pub async fn acquire(
        backend: Arc<dyn LockBackend>,
        key: &str,
        ttl: Duration,
        margin: Duration,
        tick: Option<i64>,
    ) -> Result<Option<Lease>, LockError> {
        let margin = margin.min(ttl);
        let sent_at = Instant::now();
        // An answer after ttl - margin would be unusable anyway, so a hung backend costs no more.
        let answer = tokio::time::timeout(ttl - margin, backend.try_acquire(key, ttl, tick))
            .await
            .map_err(|_| {
                LockError(anyhow::anyhow!(
                    "no answer to acquire within {:?}",
                    ttl - margin
                ))
            })?;
        let Some(grant) = answer? else {
            return Ok(None);
        };
        let lease = Lease {
            backend,
            key: key.to_owned(),
            owner: grant.owner,
            ownership: Arc::new(Ownership::new(grant.fencing_token, ttl, margin, sent_at)),
        };
        if lease.is_valid() {
            Ok(Some(lease))
        } else {
            tracing::warn!(key, "lock granted too late to use; giving it back");
            lease.release().await;
            Ok(None)
        }
    }

    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This acquisition's fencing token.
    pub fn fencing_token(&self) -> u64 {
        self.ownership.fencing_token()
    }

    /// The validity window, shared with the runs that hold this lease.
    pub fn ownership(&self) -> &Arc<Ownership> {
        &self.ownership
    }

    /// The ttl requested on acquire and every extend.
    pub fn ttl(&self) -> Duration {
        self.ownership.ttl()
    }

    /// See [`Ownership::valid_until`].
    pub fn valid_until(&self) -> Instant {
        self.ownership.valid_until()
    }

    /// See [`Ownership::is_valid`].
    pub fn is_valid(&self) -> bool {
        self.ownership.is_valid()
    }

    /// Resolves when the lease is marked lost.
    pub fn lost(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.ownership.lost()
    }

    /// Marks the lease lost. Idempotent.
    pub fn mark_lost(&self) {
        self.ownership.mark_lost();
    }

    /// Extends the lock by its ttl. `Ok(true)` renews the validity window (measured from when
    /// this request was sent); `Ok(false)` means the lock is no longer ours and marks the lease
    /// lost. Errors leave the lease as it was.
    pub async fn extend(&self) -> Result<bool, LockError> {
        if self.ownership.is_lost() {
            return Ok(false);
        }
        let sent_at = Instant::now();
        let extended = self
            .backend
            .extend(&self.key, &self.owner, self.ttl())
            .await?;
        if extended {
            self.ownership.renewed(sent_at);
        } else {
            self.mark_lost();
        }
        Ok(extended)
    }

    /// Marks the lease lost and deletes the lock if it is still ours. Failures are logged: the
    /// lock then simply expires after its ttl, which is also the longest this waits.
    pub async fn release(&self) {
        self.mark_lost();
        let released =
            tokio::time::timeout(self.ttl(), self.backend.release(&self.key, &self.owner)).await;
        match released {
            Ok(Ok(true)) => tracing::debug!(key = %self.key, "lock released"),
            Ok(Ok(false)) => tracing::debug!(key = %self.key, "lock had already expired"),
            Ok(Err(err)) => {
                tracing::warn!(key = %self.key, err = %err, "could not release lock; it will expire");
            }
            Err(_) => tracing::warn!(key = %self.key, "lock release got no answer; it will expire"),
        }
    }

    /// Keeps the lease alive until `stop` is cancelled or the lease is lost: extends every
    /// `ttl / 3`, retries failed extends sooner, and marks the lease lost the moment
    /// [`Lease::valid_until`] passes without a successful extend — even while an extend request
    /// is still hanging, so a holder cut off from the backend stops before its lock can expire.
    pub async fn keep_alive(&self, stop: CancellationToken) {
        let interval = self.ttl() / 3;
        let retry = (interval / 4).max(Duration::from_millis(10));
        let mut wait = interval;
        loop {
            let fence = self.valid_until();
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.lost() => return,
                () = tokio::time::sleep_until(fence) => {
                    self.expired_unrenewed();
                    return;
                }
                () = tokio::time::sleep(wait) => {}
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(fence) => {
                    self.expired_unrenewed();
                    return;
                }
                extended = self.extend() => match extended {
                    Ok(true) => wait = interval,
                    Ok(false) => {
                        tracing::warn!(key = %self.key, "lock was taken over; no longer the owner");
                        return;
                    }
                    Err(err) => {
                        tracing::warn!(key = %self.key, err = %err, "could not extend lock; retrying");
                        wait = retry;
                    }
                },
            }
        }
    }

    fn expired_unrenewed(&self) {
        tracing::warn!(
            key = %self.key,
            ttl = ?self.ttl(),
            "no successful lock refresh within ttl minus the safety margin; no longer the owner"
        );
        self.mark_lost();
    }
}
