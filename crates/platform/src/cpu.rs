//! CPU-bound work kept off the async workers.
//!
//! The runtime has one worker thread per core; a request that computes for a second on one of
//! them (sanitising a large article, say) stalls every other request queued on that thread, and
//! its own request timeout cannot fire, as the timer runs on the same thread. [`run`] moves such
//! work to tokio's blocking pool, at most one job per core at a time (a semaphore), so a burst
//! of expensive requests queues instead of taking every core, and the async workers keep
//! answering the rest. A caller that goes away (timeout, disconnect) stops waiting; the job
//! itself runs to its end, which is why callers bound the work before handing it over.

use std::sync::LazyLock;

use tokio::sync::Semaphore;

use crate::error::AppError;

/// One permit per core.
static CORES: LazyLock<Semaphore> =
    LazyLock::new(|| Semaphore::new(std::thread::available_parallelism().map_or(1, usize::from)));

/// Runs `job` on the blocking pool once a core is free, and returns its result. A panic in the
/// job answers as an internal error.
pub async fn run<T, F>(job: F) -> Result<T, AppError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let permit = CORES
        .acquire()
        .await
        .map_err(|err| AppError::Internal(anyhow::anyhow!("CPU permits closed: {err}")))?;
    // The permit goes with the job: a caller that stops waiting does not free its core early.
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        job()
    })
    .await
    .map_err(|err| AppError::Internal(anyhow::anyhow!("a CPU job failed: {err}")))
}
