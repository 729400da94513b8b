//! What a job is: [`Job`], and the [`JobContext`] each run receives (semantics on [`Job`]).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::ownership::Ownership;

/// A unit of scheduled work.
///
/// A run is cooperative: the scheduler asks it to stop by cancelling the context (on shutdown,
/// at its timeout, or when its lock is lost) and aborts it only if it does not stop within a short
/// grace. A job that writes somewhere other jobs' holders could also write should check
/// [`JobContext::still_owner`] before each write and attach [`JobContext::fencing_token`] to it.
#[async_trait]
pub trait Job: Send + Sync + 'static {
    /// A stable name: the job's identity in logs, metrics and lock keys.
    fn name(&self) -> &str;

    /// Does one run. An error is logged and counted; the job still runs at its next fire time.
    async fn run(&self, ctx: JobContext) -> anyhow::Result<()>;
}

/// What one run knows about itself.
#[derive(Debug, Clone)]
pub struct JobContext {
    cancel: CancellationToken,
    scheduled_at: DateTime<Utc>,
    ownership: Option<Arc<Ownership>>,
}

impl JobContext {
    /// A context for a run at `scheduled_at`, cancelled through `cancel`, optionally owning a
    /// lock or a claim. The schedulers build these; tests and manual runs may too.
    pub fn new(
        scheduled_at: DateTime<Utc>,
        cancel: CancellationToken,
        ownership: Option<Arc<Ownership>>,
    ) -> Self {
        Self {
            cancel,
            scheduled_at,
            ownership,
        }
    }

    /// The fire time this run is for (not when it started): identical on every instance, so it
    /// names the run across a cluster.
    pub fn scheduled_at(&self) -> DateTime<Utc> {
        self.scheduled_at
    }

    /// The fencing token of the lock or claim this run holds; 0 for a job that runs without one.
    pub fn fencing_token(&self) -> u64 {
        self.ownership
            .as_ref()
            .map_or(0, |ownership| ownership.fencing_token())
    }

    /// Whether the run has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the run is asked to stop; use in `select!` around long awaits.
    pub fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Whether this run may still write as the owner: not cancelled, and its lock or claim (if
    /// any) still valid on the monotonic clock. Check it right before each externally visible
    /// write.
    pub fn still_owner(&self) -> bool {
        !self.is_cancelled()
            && self
                .ownership
                .as_ref()
                .is_none_or(|ownership| ownership.is_valid())
    }
}
