//! The worker loop of the preemptive scheduler: poll, claim, run, heartbeat, release.
//!
//! One poller task per instance:
//! 1. takes the number of free permits (bounded concurrency; with none free it waits for one);
//! 2. polls ([`SqlJobStore::poll`]): reads up to that many candidates together with the
//!    database time, decides each claim ([`plan_claim`]: on time, misfired, triggered or
//!    takeover) and makes all the compare-and-swaps in one transaction — on PostgreSQL the read
//!    is `FOR UPDATE SKIP LOCKED` in that transaction, so instances polling together take
//!    different jobs at once; a won claim is durable (run row committed) before work starts;
//! 3. stops any job whose schedule no longer parses;
//! 4. sleeps until the earliest next fire time or lease expiry, at most `max_idle_poll`, unless
//!    it just claimed something or lost a claim to another instance (then it polls again at
//!    once: more may be due) or is woken ([`RunningSqlScheduler::wake`]).
//!
//! Each claimed run gets a task that heartbeats every `heartbeat` and supervises the executor:
//! the run is cancelled at its timeout, when a heartbeat is refused (the job was stopped or the
//! claim taken over), when its claim's validity window on the monotonic clock passes without a
//! successful heartbeat (lease minus a safety margin — a process resumed after SIGSTOP sees this at
//! once), or at shutdown; a run that ignores cancellation is aborted after a grace. The final write
//! is conditional on the token, so a replaced holder changes nothing.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use tokio::{sync::Semaphore, time::Instant};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    instrument::{ContinueTrace, Instrumented},
    job::{Job, JobContext},
    ownership::Ownership,
    schedule::Schedule,
    scheduler::{lock_margin, CANCEL_GRACE},
    sql::{
        executor::{Executor, Executors},
        model::{plan_claim, ClaimKind, ClaimPlan, JobRow, RunStatus},
        store::{Claim, SqlJobStore},
    },
};

/// Counter: won claims by `kind` (`scheduled`, `triggered`, `takeover`, `record_only`).
pub const SQL_CLAIMS: &str = "scheduler_sql_claims_total";
/// Counter: runs whose holder lost its claim (stopped, replaced, or heartbeats failing), by `job`.
pub const SQL_FENCED: &str = "scheduler_sql_fenced_total";
/// Histogram: seconds from a fire time (or a trigger) to its claim (schedule lag), database
/// clock. Takeovers are not included: their lag is the lease, counted by `SQL_CLAIMS`.
pub const SQL_SCHEDULE_LAG: &str = "scheduler_sql_schedule_lag_seconds";

/// Describes the metrics above to the installed recorder. Harmless to repeat.
pub fn describe_metrics() {
    metrics::describe_counter!(SQL_CLAIMS, "Durable-job claims won, by kind");
    metrics::describe_counter!(
        SQL_FENCED,
        "Durable-job runs whose holder lost its claim before finishing"
    );
    metrics::describe_histogram!(
        SQL_SCHEDULE_LAG,
        metrics::Unit::Seconds,
        "Seconds from a durable job's fire time to its claim"
    );
    metrics::describe_counter!(
        crate::sql::model::SQL_MISFIRED,
        "Durable-job fire times recorded as misfired (passed while no instance ran the job)"
    );
    // Exported from the start (0), so a restart shows as a counter reset, not a new series.
    metrics::counter!(crate::sql::model::SQL_MISFIRED).increment(0);
}

/// Tuning of one instance.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// This instance's id, recorded as `owner`.
    pub instance: String,
    /// Most runs at once on this instance.
    pub permits: usize,
    /// Heartbeat interval.
    pub heartbeat: Duration,
    /// A running job whose heartbeat is older than this is taken over.
    pub lease: Duration,
    /// Longest sleep between polls when idle.
    pub max_idle_poll: Duration,
    /// A fire time claimed later than this after it came due is a misfire.
    pub misfire_after: Duration,
    /// Makes the span of a run whose trigger kept a trace context ([`Claim::trace`]) continue
    /// that trace; `None`: runs start traces of their own.
    pub continue_trace: Option<ContinueTrace>,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            instance: default_instance_id(),
            permits: 16,
            heartbeat: Duration::from_secs(1),
            lease: Duration::from_secs(4),
            max_idle_poll: Duration::from_secs(1),
            misfire_after: Duration::from_secs(5),
            continue_trace: None,
        }
    }
}

/// `<host>-<pid>-<random>`: unique per process start, readable in `owner` columns.
pub fn default_instance_id() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{}-{}-{}", host_name(), std::process::id(), &random[..8])
}

/// This host's name (`uname(2)`, which needs no `/proc`; `$HOSTNAME` is a shell variable, seldom
/// in a service's environment), `host` when it has none: the first part of the ids that say
/// where a process runs (job owners, trace resources, stream consumers).
pub fn host_name() -> String {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .trim()
        .to_owned();
    if host.is_empty() {
        "host".to_owned()
    } else {
        host
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A preemptive scheduler instance, not yet started.
#[derive(Debug)]
pub struct SqlScheduler {
    store: SqlJobStore,
    executors: Executors,
    options: WorkerOptions,
}

struct Shared {
    store: SqlJobStore,
    executors: Executors,
    options: WorkerOptions,
    permits: Arc<Semaphore>,
    stopping: CancellationToken,
    interrupt_runs: CancellationToken,
    wake: tokio::sync::Notify,
    runs: TaskTracker,
}

impl SqlScheduler {
    /// An instance polling `store`, running jobs with `executors`.
    pub fn new(store: SqlJobStore, executors: Executors, options: WorkerOptions) -> Self {
        Self {
            store,
            executors,
            options,
        }
    }

    /// Starts polling.
    pub fn start(self) -> RunningSqlScheduler {
        tracing::info!(
            instance = %self.options.instance,
            permits = self.options.permits,
            executors = ?self.executors.names(),
            "SQL job scheduler started"
        );
        let shared = Arc::new(Shared {
            permits: Arc::new(Semaphore::new(self.options.permits.max(1))),
            store: self.store,
            executors: self.executors,
            options: self.options,
            stopping: CancellationToken::new(),
            interrupt_runs: CancellationToken::new(),
            wake: tokio::sync::Notify::new(),
            runs: TaskTracker::new(),
        });
        let poller = tokio::spawn(poll_loop(shared.clone()));
        RunningSqlScheduler { shared, poller }
    }
}

/// A started instance; [`RunningSqlScheduler::stop`] shuts it down.
pub struct RunningSqlScheduler {
    shared: Arc<Shared>,
    poller: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for RunningSqlScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningSqlScheduler")
            .field("instance", &self.shared.options.instance)
            .finish_non_exhaustive()
    }
}

impl RunningSqlScheduler {
    /// Polls now instead of at the next planned poll (after an operator's trigger or resume).
    pub fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// This instance's id.
    pub fn instance(&self) -> &str {
        &self.shared.options.instance
    }

    /// Stops claiming; running jobs get `grace` to finish, then are cancelled (recorded as
    /// failed, "interrupted by shutdown") and aborted if they ignore it.
    pub async fn stop(self, grace: Duration) {
        self.shared.stopping.cancel();
        if let Err(err) = self.poller.await {
            tracing::error!(%err, "SQL scheduler poller ended abnormally");
        }
        self.shared.runs.close();
        if tokio::time::timeout(grace, self.shared.runs.wait())
            .await
            .is_err()
        {
            tracing::warn!(?grace, "job runs outlived the stop grace; cancelling them");
            self.shared.interrupt_runs.cancel();
            self.shared.runs.wait().await;
        }
        tracing::info!(instance = %self.shared.options.instance, "SQL job scheduler stopped");
    }
}

async fn poll_loop(shared: Arc<Shared>) {
    let options = &shared.options;
    let mut failures: u32 = 0;
    loop {
        if shared.stopping.is_cancelled() {
            return;
        }
        let free = shared.permits.available_permits();
        if free == 0 {
            tokio::select! {
                permit = shared.permits.clone().acquire_owned() => drop(permit),
                () = shared.stopping.cancelled() => return,
            }
            continue;
        }
        let polled_at = Instant::now();
        // Jobs with a schedule that no longer parses, found by this poll: stopped after it.
        let mut invalid: Vec<(i64, String)> = Vec::new();
        // What this poll found due is claimed in one transaction (one commit, not one per job),
        // each with a permit; claims race other instances, which lose the ones this one won.
        let polled = shared
            .store
            .poll(
                free,
                millis(options.lease),
                &options.instance,
                |job, now| {
                    let permit = shared.permits.clone().try_acquire_owned().ok()?;
                    let (schedule, executor, plan) = plan_job(&shared, job, now, &mut invalid)?;
                    Some((
                        plan,
                        ToRun {
                            schedule,
                            executor,
                            permit,
                        },
                    ))
                },
            )
            .await;
        for (id, name) in invalid {
            if let Err(err) = shared.store.stop(id).await {
                tracing::warn!(job = %name, %err, "could not stop the invalid job");
            }
        }
        let polled = match polled {
            Ok(polled) => {
                failures = 0;
                polled
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                let backoff = (Duration::from_millis(50) * 2u32.saturating_pow(failures.min(8)))
                    .min(options.max_idle_poll);
                tracing::warn!(%err, ?backoff, "polling jobs failed");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = shared.stopping.cancelled() => return,
                }
                continue;
            }
        };
        let (now, found, earliest_next) = (polled.now, polled.found, polled.earliest_next);
        let (runs, lost) = won_runs(options, polled.claims, polled_at);
        let claimed = runs.len();
        for (run, permit) in runs {
            let task_shared = shared.clone();
            shared.runs.spawn(async move {
                run.execute(&task_shared).await;
                drop(permit);
            });
        }
        // Claimed something, or lost races: poll again at once. Another instance won those
        // jobs, and more may be due behind them.
        if claimed > 0 || lost > 0 {
            continue;
        }
        let max = millis(options.max_idle_poll);
        let wait_ms = match earliest_next {
            _ if found > 0 => max / 5,
            Some(next) if next > now => (next - now).clamp(1, max),
            Some(_) => max / 5,
            None => max,
        };
        let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shared.wake.notified() => {}
            () = shared.stopping.cancelled() => return,
        }
    }
}

/// A won claim, ready to run.
struct ClaimedRun {
    claim: Claim,
    job: JobRow,
    schedule: Schedule,
    executor: Arc<dyn Executor>,
    ownership: Arc<Ownership>,
}

/// What a planned claim runs with, if won: the job's schedule, its executor and the permit.
struct ToRun<P> {
    schedule: Schedule,
    executor: Arc<dyn Executor>,
    permit: P,
}

/// Plans the claim of a due `job` at database time `now`: its schedule, its executor and the
/// claim's plan. `None` when there is nothing to claim: an executor this instance lacks, nothing
/// due, or a schedule that no longer parses (the job goes to `invalid`, to be stopped).
fn plan_job(
    shared: &Shared,
    job: &JobRow,
    now: i64,
    invalid: &mut Vec<(i64, String)>,
) -> Option<(Schedule, Arc<dyn Executor>, ClaimPlan)> {
    let options = &shared.options;
    let schedule = match job.schedule() {
        Ok(schedule) => schedule,
        Err(err) => {
            tracing::error!(job = %job.name, %err, "job has an invalid schedule; stopping it");
            invalid.push((job.id, job.name.clone()));
            return None;
        }
    };
    let executor = shared.executors.get(&job.executor)?;
    let plan = plan_claim(
        job,
        &schedule,
        now,
        millis(options.lease),
        millis(options.misfire_after),
    )?;
    Some((schedule, executor, plan))
}

/// The won claims of a poll, ready to run, each with its permit (the permits of lost claims are
/// released), and how many claims were lost (another instance won them, or their fire time had
/// run already).
fn won_runs<P>(
    options: &WorkerOptions,
    claims: Vec<(JobRow, ClaimPlan, ToRun<P>, Option<Claim>)>,
    polled_at: Instant,
) -> (Vec<(ClaimedRun, P)>, usize) {
    let mut runs = Vec::new();
    let mut lost = 0;
    for (job, plan, to_run, claim) in claims {
        let ToRun {
            schedule,
            executor,
            permit,
        } = to_run;
        if !plan.misfired.is_empty() {
            tracing::warn!(job = %job.name, misfired = plan.misfired.len(), policy = %job.misfire, "fire times passed while no instance ran the job");
        }
        crate::sql::model::note_unrecorded(plan.unrecorded, "misfired");
        let Some(claim) = claim else {
            if plan.kind == ClaimKind::RecordOnly {
                metrics::counter!(SQL_CLAIMS, "kind" => ClaimKind::RecordOnly.as_str())
                    .increment(1);
            } else {
                lost += 1;
            }
            continue;
        };
        metrics::counter!(SQL_CLAIMS, "kind" => claim.kind.as_str()).increment(1);
        if matches!(claim.kind, ClaimKind::Scheduled | ClaimKind::Triggered) {
            let lag = (claim.claimed_at - claim.run_at).max(0);
            #[allow(clippy::cast_precision_loss)] // lag in ms fits f64 exactly far beyond any lag
            metrics::histogram!(SQL_SCHEDULE_LAG).record(lag as f64 / 1000.0);
        }
        if claim.kind == ClaimKind::Takeover {
            tracing::warn!(job = %job.name, previous_owner = %job.owner, token = claim.token, "took over a job whose holder stopped heartbeating");
        }
        let ownership = Arc::new(Ownership::new(
            u64::try_from(claim.token).unwrap_or(0),
            options.lease,
            lock_margin(options.lease),
            polled_at,
        ));
        runs.push((
            ClaimedRun {
                claim,
                job,
                schedule,
                executor,
                ownership,
            },
            permit,
        ));
    }
    (runs, lost)
}

/// Adapts an executor to [`Job`], so every run is instrumented like the cron engine's.
struct ExecutorRun {
    job: JobRow,
    executor: Arc<dyn Executor>,
}

#[async_trait::async_trait]
impl Job for ExecutorRun {
    fn name(&self) -> &str {
        &self.job.name
    }

    async fn run(&self, ctx: JobContext) -> anyhow::Result<()> {
        self.executor.execute(&self.job, ctx).await
    }
}

impl ClaimedRun {
    async fn execute(self, shared: &Shared) {
        let Self {
            claim,
            job,
            schedule,
            executor,
            ownership,
        } = self;
        let scheduled_at = DateTime::<Utc>::from_timestamp_millis(claim.run_at).unwrap_or_default();
        let cancel = CancellationToken::new();
        let ctx = JobContext::new(scheduled_at, cancel.clone(), Some(ownership.clone()));
        let stop_heartbeat = CancellationToken::new();
        let heartbeat = tokio::spawn(heartbeat_loop(
            shared.store.clone(),
            claim.clone(),
            ownership.clone(),
            shared.options.heartbeat,
            stop_heartbeat.clone(),
        ));
        let mut run = Instrumented::new(ExecutorRun {
            job: job.clone(),
            executor,
        });
        if let (Some(hook), Some(context)) = (shared.options.continue_trace, claim.trace.clone()) {
            run = run.continuing(hook, context);
        }
        let mut handle = tokio::spawn(async move { run.run(ctx).await });
        let deadline = Instant::now() + job.timeout();
        let finished = tokio::select! {
            joined = &mut handle => Some(joined),
            () = tokio::time::sleep_until(deadline) => None,
            () = ownership.lost() => None,
            () = ownership.expired() => {
                ownership.mark_lost();
                None
            }
            () = shared.interrupt_runs.cancelled() => None,
        };
        let (status, error) = match finished {
            Some(Ok(Ok(()))) => (RunStatus::Ok, None),
            Some(Ok(Err(err))) => (RunStatus::Failed, Some(format!("{err:#}"))),
            Some(Err(join)) => (RunStatus::Failed, Some(format!("the run panicked: {join}"))),
            None => {
                let (status, error, grace) = if ownership.is_lost() {
                    (
                        RunStatus::Fenced,
                        "lost the claim: stopped, taken over, or no heartbeat within the lease",
                        ownership.margin() / 2,
                    )
                } else if shared.interrupt_runs.is_cancelled() {
                    (RunStatus::Failed, "interrupted by shutdown", CANCEL_GRACE)
                } else {
                    (RunStatus::Timeout, "timed out", CANCEL_GRACE)
                };
                tracing::warn!(job = %job.name, token = claim.token, reason = error, "interrupting job run");
                cancel.cancel();
                if tokio::time::timeout(grace, &mut handle).await.is_err() {
                    handle.abort();
                    let _aborted = handle.await;
                }
                (status, Some(error.to_owned()))
            }
        };
        stop_heartbeat.cancel();
        let _stopped = heartbeat.await;
        // Conditional on the token: a replaced holder's write changes nothing.
        let accepted = match shared
            .store
            .finish(&claim, &schedule, status, error.as_deref())
            .await
        {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::error!(job = %job.name, %err, "could not record the run's end; the job is taken over after the lease");
                return;
            }
        };
        if !accepted || status == RunStatus::Fenced {
            metrics::counter!(SQL_FENCED, "job" => job.name.clone()).increment(1);
            tracing::warn!(job = %job.name, token = claim.token, "run fenced: its claim is no longer current, nothing of it was recorded");
        }
    }
}

/// Renews the claim every `interval` until stopped; marks ownership lost when a heartbeat is
/// refused (the token is stale).
async fn heartbeat_loop(
    store: SqlJobStore,
    claim: Claim,
    ownership: Arc<Ownership>,
    interval: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stop.cancelled() => return,
            () = ownership.lost() => return,
        }
        let sent_at = Instant::now();
        match store.heartbeat(&claim).await {
            Ok(true) => ownership.renewed(sent_at),
            Ok(false) => {
                tracing::warn!(
                    job_id = claim.job_id,
                    token = claim.token,
                    "heartbeat refused: the job was stopped or taken over"
                );
                ownership.mark_lost();
                return;
            }
            Err(err) => tracing::warn!(job_id = claim.job_id, %err, "heartbeat failed; retrying"),
        }
    }
}
