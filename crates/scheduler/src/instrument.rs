//! The decorator every registered job is wrapped in: a tracing span per run, a duration
//! histogram and a run counter by job and outcome, and one error log line with the cause chain
//! when a run fails.
//!
//! Outcomes: `success`, `error`, `cancelled` (the run returned after being asked to stop),
//! `aborted` (the run was dropped before finishing: it ignored cancellation past the grace) and
//! `panicked`.

use std::time::Instant;

use async_trait::async_trait;
use tracing::Instrument;

use crate::job::{Job, JobContext};

/// Histogram: run duration in seconds, by `job` and `outcome` (`success`, `error`, `cancelled`:
/// the run returned after being asked to stop, `aborted`: it was dropped before finishing because
/// it ignored cancellation past the grace, `panicked`).
pub const JOB_DURATION: &str = "scheduler_job_duration_seconds";
/// Counter: finished runs by `job` and `outcome`.
pub const JOB_RUNS: &str = "scheduler_job_runs_total";
/// Counter: fire times that did not run, by `job` and `reason` (`overlap`, `not_owner`,
/// `lock_error`, `missed`).
pub const JOB_SKIPS: &str = "scheduler_job_skips_total";
/// Counter: runs interrupted by the scheduler, by `job` and `reason` (`timeout`, `lock_lost`,
/// `shutdown`).
pub const JOB_INTERRUPTS: &str = "scheduler_job_interrupts_total";
/// Gauge: 1 while this instance holds the job's long lock, else 0.
pub const JOB_LOCK_HELD: &str = "scheduler_job_lock_held";

/// Describes the in-process engine's metrics ([`JOB_DURATION`], [`JOB_RUNS`], [`JOB_SKIPS`],
/// [`JOB_INTERRUPTS`], [`JOB_LOCK_HELD`]) to the installed `metrics` recorder (help texts,
/// units). Call once after installing it; harmless to repeat.
pub fn describe_job_metrics() {
    metrics::describe_histogram!(JOB_DURATION, metrics::Unit::Seconds, "Job run duration");
    metrics::describe_counter!(JOB_RUNS, "Finished job runs by outcome");
    metrics::describe_counter!(JOB_SKIPS, "Job fire times that did not run, by reason");
    metrics::describe_counter!(JOB_INTERRUPTS, "Job runs interrupted by the scheduler");
    metrics::describe_gauge!(
        JOB_LOCK_HELD,
        "Whether this instance holds the job's long lock"
    );
}

/// Makes a run's span (not yet entered) continue the trace a context names (a W3C
/// `traceparent`): the hook [`crate::sql::WorkerOptions::continue_trace`] takes. The crate
/// knows no tracing system; the application's hook does.
pub type ContinueTrace = fn(&tracing::Span, &str);

/// `job` wrapped with tracing, metrics and error logging.
#[derive(Debug)]
pub(crate) struct Instrumented<J> {
    inner: J,
    /// The trace this run continues, and the hook that makes its span do so.
    parent: Option<(ContinueTrace, String)>,
}

impl<J: Job> Instrumented<J> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: J) -> Self {
        Self {
            inner,
            parent: None,
        }
    }

    /// Has the run's span continue the trace `context` names, through `hook`.
    #[cfg_attr(not(feature = "sql"), allow(dead_code))]
    pub(crate) fn continuing(mut self, hook: ContinueTrace, context: String) -> Self {
        self.parent = Some((hook, context));
        self
    }
}

/// Records the outcome when dropped, so a run dropped mid-way (aborted) or unwinding from a panic
/// is counted too.
struct RunRecord<'a> {
    job: &'a str,
    started: Instant,
    outcome: Option<&'static str>,
}

impl Drop for RunRecord<'_> {
    fn drop(&mut self) {
        let outcome = self.outcome.unwrap_or(if std::thread::panicking() {
            "panicked"
        } else {
            "aborted"
        });
        let labels = [
            ("job", self.job.to_owned()),
            ("outcome", outcome.to_owned()),
        ];
        metrics::histogram!(JOB_DURATION, &labels).record(self.started.elapsed().as_secs_f64());
        metrics::counter!(JOB_RUNS, &labels).increment(1);
        if self.outcome.is_none() {
            tracing::error!(job = self.job, outcome, "job run did not finish");
        }
    }
}

#[async_trait]
impl<J: Job> Job for Instrumented<J> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn run(&self, ctx: JobContext) -> anyhow::Result<()> {
        let name = self.inner.name();
        let span = tracing::info_span!(
            "job",
            job = name,
            scheduled_at = %ctx.scheduled_at().to_rfc3339(),
            fencing_token = ctx.fencing_token(),
        );
        if let Some((hook, context)) = &self.parent {
            hook(&span, context);
        }
        let mut record = RunRecord {
            job: name,
            started: Instant::now(),
            outcome: None,
        };
        let cancelled_ctx = ctx.clone();
        let result = self.inner.run(ctx).instrument(span.clone()).await;
        let outcome = match &result {
            Ok(()) if cancelled_ctx.is_cancelled() => "cancelled",
            Ok(()) => "success",
            Err(_) if cancelled_ctx.is_cancelled() => "cancelled",
            Err(_) => "error",
        };
        span.in_scope(|| match &result {
            Ok(()) => tracing::debug!(
                outcome,
                elapsed_ms = record.started.elapsed().as_millis(),
                "job run finished"
            ),
            Err(err) => tracing::error!(outcome, error = format!("{err:#}"), "job run failed"),
        });
        record.outcome = Some(outcome);
        result
    }
}
