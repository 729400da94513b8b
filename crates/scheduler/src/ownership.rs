//! Ownership for a limited time — of a lock, or of a claimed SQL job — as the holder sees it: a
//! fencing token, and a validity window tracked on the **monotonic** clock.
//! Its semantics are documented on [`Ownership`].

use std::{sync::Mutex, time::Duration};

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// A fencing token with a validity window on the monotonic clock: how the holder of a lock
/// or of a claimed SQL job sees its ownership.
///
/// The window is renewed by each successful acquire/extend/heartbeat and counted from when that
/// request was *sent* (never later than the moment the other side started its timer), so the
/// holder always believes its ownership ends no later than it really does. It ends a safety
/// margin before that: [`Ownership::is_valid`] turns false, and whoever supervises the work
/// cancels it, before anyone else can become the owner. A process that was paused (SIGSTOP, a VM
/// freeze) and resumes sees at once that its window has passed.
#[derive(Debug)]
pub struct Ownership {
    token: u64,
    ttl: Duration,
    margin: Duration,
    renewed_at: Mutex<Instant>,
    lost: CancellationToken,
}

impl Ownership {
    /// Ownership with `token`, valid for `ttl - margin` from `renewed_at` (when the acquiring
    /// request was sent). `margin` is capped at `ttl`.
    pub fn new(token: u64, ttl: Duration, margin: Duration, renewed_at: Instant) -> Self {
        Self {
            token,
            ttl,
            margin: margin.min(ttl),
            renewed_at: Mutex::new(renewed_at),
            lost: CancellationToken::new(),
        }
    }

    /// The fencing token: greater than every earlier owner's.
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// The time-to-live each renewal grants.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long before the real end of ownership this holder stops.
    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// The instant after which this holder no longer considers itself the owner, unless renewed
    /// first: last renewal + ttl - margin.
    pub fn valid_until(&self) -> Instant {
        let renewed_at = *self
            .renewed_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        renewed_at + self.ttl - self.margin
    }

    /// Not marked lost, and within [`Ownership::valid_until`].
    pub fn is_valid(&self) -> bool {
        !self.lost.is_cancelled() && Instant::now() < self.valid_until()
    }

    /// Records a successful renewal whose request was sent at `sent_at`.
    pub fn renewed(&self, sent_at: Instant) {
        let mut renewed_at = self
            .renewed_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *renewed_at = (*renewed_at).max(sent_at);
    }

    /// Marks ownership lost (refused renewal, window passed, released). Idempotent.
    pub fn mark_lost(&self) {
        self.lost.cancel();
    }

    /// Whether [`Ownership::mark_lost`] was called.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Resolves when ownership is marked lost.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.lost.cancelled()
    }

    /// Resolves when the validity window passes without a renewal — the moment to self-fence.
    /// Re-reads the window after each wake, so renewals meanwhile push it out.
    pub async fn expired(&self) {
        loop {
            let until = self.valid_until();
            if Instant::now() >= until {
                return;
            }
            tokio::time::sleep_until(until).await;
        }
    }
}
