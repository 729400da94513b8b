//! Writes that finish even when their caller goes away.
//!
//! A handler's future is dropped when the client disconnects or the request timeout answers
//! 503 (`infra::http`). A write that has committed to the database must still fix the caches
//! and emit its event, or readers see the old state until a TTL expires (a withdrawn article
//! still readable, a like counted in the database but not in the cached counters).
//! [`to_completion`] runs such a write on a task of its own and awaits it: the caller gets the
//! result if it is still there, and the work completes either way.

use std::future::Future;

use crate::error::AppError;

/// Runs `work` on its own task to completion and returns its result; dropping the returned
/// future does not cancel `work`. A panic inside it answers as an internal error.
pub async fn to_completion<T, F>(work: F) -> Result<T, AppError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, AppError>> + Send + 'static,
{
    tokio::spawn(work)
        .await
        .map_err(|err| AppError::Internal(anyhow::anyhow!("a write task failed: {err}")))?
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use futures_util::FutureExt;
    use tokio::sync::oneshot;

    use super::to_completion;
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
    async fn results_and_panics_reach_the_caller() {
        assert_eq!(
            to_completion(async { Ok::<_, AppError>(7) }).await.unwrap(),
            7
        );
        let failed = to_completion(async { Err::<(), _>(AppError::InvalidInput("x".into())) });
        assert!(matches!(failed.await, Err(AppError::InvalidInput(_))));
        let panicked = to_completion(async {
            panic!("boom");
            #[allow(unreachable_code)]
            Ok::<(), AppError>(())
        });
        assert!(matches!(panicked.await, Err(AppError::Internal(_))));
    }
}
