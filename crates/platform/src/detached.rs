//! Writes that finish even when their caller goes away.
//!
//! A handler's future is dropped when the client disconnects or the request timeout answers
//! 503 (`crate::http`). A write that has committed to the database must still fix the caches
//! and emit its event, or readers see the old state until a TTL expires (a withdrawn article
//! still readable, a like counted in the database but not in the cached counters).
//! [`to_completion`] runs such a write on a task of its own and awaits it: the caller gets the
//! result if it is still there, and the work completes either way. The tasks are tracked, and
//! graceful shutdown waits for them ([`drain`]) before it closes the database pool, so a write
//! whose caller left during shutdown still finishes (in cluster mode its cache step goes to
//! Redis, which outlives the process).

use std::{future::Future, sync::LazyLock, time::Duration};

use tokio_util::task::TaskTracker;

use crate::error::AppError;

/// Every detached write of the process (one tracker: tests run several apps in one process, and
/// waiting for another app's writes at shutdown only costs that wait).
static WRITES: LazyLock<TaskTracker> = LazyLock::new(TaskTracker::new);

/// Runs `work` on its own task to completion and returns its result; dropping the returned
/// future does not cancel `work`. A panic inside it answers as an internal error.
pub async fn to_completion<T, F>(work: F) -> Result<T, AppError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, AppError>> + Send + 'static,
{
    // Traced, the work stays in the caller's span (its statements, its events' context).
    let task = if crate::tracing_otlp::enabled() {
        WRITES.spawn(tracing::Instrument::in_current_span(work))
    } else {
        WRITES.spawn(tracing::Instrument::instrument(work, tracing::Span::none()))
    };
    task.await
        .map_err(|err| AppError::Internal(anyhow::anyhow!("a write task failed: {err}")))?
}

/// Waits up to `limit` for the detached writes running now (and any started meanwhile) to
/// finish; returns whether they all did.
pub async fn drain(limit: Duration) -> bool {
    // A closed tracker still takes new tasks; its `wait` then ends whenever it is empty. It
    // stays closed: reopening would stall a second app of a test process draining meanwhile.
    WRITES.close();
    tokio::time::timeout(limit, WRITES.wait()).await.is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use futures_util::FutureExt;
    use tokio::sync::oneshot;

    use std::time::Duration;

    use super::{drain, to_completion};
    use crate::error::AppError;

    #[tokio::test]
    async fn work_goes_on_after_the_caller_is_dropped() {
        let (release, released) = oneshot::channel::<()>();
        let (done, finished) = oneshot::channel();
        let call = to_completion(async move {
            released.await.unwrap();
            done.send("committed and cached").unwrap();
            Ok::<_, AppError>(())
        });
        // Polled once (the task starts), then dropped, as a timed-out handler is.
        assert!(call.now_or_never().is_none());
        release.send(()).unwrap();
        assert_eq!(finished.await.unwrap(), "committed and cached");
    }

    #[tokio::test]
    async fn drain_waits_for_writes_whose_caller_left() {
        let (release, released) = oneshot::channel::<()>();
        let (done, mut finished) = oneshot::channel();
        let call = to_completion(async move {
            released.await.unwrap();
            done.send(()).unwrap();
            Ok::<_, AppError>(())
        });
        assert!(call.now_or_never().is_none());
        // Still blocked: the drain gives up after its limit and says so.
        assert!(!drain(Duration::from_millis(50)).await);
        release.send(()).unwrap();
        assert!(drain(Duration::from_secs(10)).await);
        assert!(
            finished.try_recv().is_ok(),
            "drain returned before the write finished"
        );
    }

    #[tokio::test]
    async fn results_and_panics_reach_the_caller() {
        assert_eq!(
            to_completion(async { Ok::<_, AppError>(7) }).await.unwrap(),
            7
        );
        let failed = to_completion(async {
            Err::<(), _>(AppError::InvalidInput(crate::error::Msg::new("x", "x")))
        });
        assert!(matches!(failed.await, Err(AppError::InvalidInput(_))));
        let panicked = to_completion(async {
            panic!("boom");
            #[allow(unreachable_code)]
            Ok::<(), AppError>(())
        });
        assert!(matches!(panicked.await, Err(AppError::Internal(_))));
    }
}
