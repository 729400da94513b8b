//! The in-process cron engine: register jobs with their options, [`Scheduler::start`], and
//! [`RunningScheduler::stop`] on shutdown. Its behaviour — how a fire time becomes a run,
//! self-fencing, stopping — is documented on [`Scheduler`].

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    clock::{Clock, SystemClock},
    instrument::{Instrumented, JOB_INTERRUPTS, JOB_LOCK_HELD, JOB_RUNS, JOB_SKIPS},
    job::{Job, JobContext},
    lock::{Lease, LockBackend, LockError},
    schedule::Schedule,
};

/// The longest the driver sleeps before re-reading the wall clock.
pub const MAX_SLEEP: Duration = Duration::from_secs(1);
/// How long a cancelled run (timeout, shutdown) may take to return before it is aborted.
pub const CANCEL_GRACE: Duration = Duration::from_secs(1);
/// Default run timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Shortest lock ttl accepted: refreshing every ttl/3 faster than this is pointless load.
pub const MIN_LOCK_TTL: Duration = Duration::from_millis(300);
/// Most missed fire times counted after a clock jump (counting is a walk over the schedule).
const MAX_MISSED_COUNTED: u32 = 10_000;

/// What happens when a fire time comes while the previous run is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Skip this fire time and count it (`scheduler_job_skips_total{reason="overlap"}`).
    #[default]
    Forbid,
    /// Start another run alongside.
    Allow,
}

/// Which instances run a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Guard {
    /// Every instance runs it (fine for purely local work).
    #[default]
    None,
    /// Each run takes the job's lock (ttl = the run timeout) and claims its fire time; released
    /// when the run ends.
    ShortLock,
    /// One instance holds the job's lock across runs, refreshing it every `ttl / 3`.
    LongLock {
        /// The lock's time-to-live: how long a dead holder blocks the others at most.
        ttl: Duration,
    },
}

/// How a job is scheduled.
#[derive(Debug, Clone)]
pub struct JobOptions {
    schedule: Schedule,
    overlap: Overlap,
    guard: Guard,
    timeout: Duration,
}

impl JobOptions {
    /// Runs on `schedule`, overlap forbidden, no lock, [`DEFAULT_TIMEOUT`].
    pub fn new(schedule: Schedule) -> Self {
        Self {
            schedule,
            overlap: Overlap::default(),
            guard: Guard::default(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Sets the overlap policy.
    #[must_use]
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// Sets which instances run the job.
    #[must_use]
    pub fn guard(mut self, guard: Guard) -> Self {
        self.guard = guard;
        self
    }

    /// Sets the run timeout (also the short lock's ttl).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }
}

/// A job cannot be registered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchedulerError {
    /// Another job already has this name.
    #[error("a job named {0:?} is already registered")]
    DuplicateName(String),
    /// A name must be non-empty and printable.
    #[error("invalid job name {0:?}: use letters, digits, '.', '_' or '-'")]
    InvalidName(String),
    /// A duration option is unusable.
    #[error("job {job:?}: {problem}")]
    InvalidOptions {
        /// The job.
        job: String,
        /// What is wrong.
        problem: String,
    },
}

/// The safety margin of a lock with `ttl`: a fifth of it, at most 5 s.
pub fn lock_margin(ttl: Duration) -> Duration {
    (ttl / 5).min(Duration::from_secs(5))
}

/// The in-process cron engine: jobs registered but not yet started. Register jobs with
/// [`Scheduler::add`], then [`Scheduler::start`]; call [`RunningScheduler::stop`] on shutdown.
///
/// # How a fire time becomes a run
///
/// Each job has one driver task. It computes the next fire time from its [`Schedule`] and the
/// wall clock, then sleeps towards it in steps of at most [`MAX_SLEEP`], re-reading the wall clock
/// after each step: it never fires early, and a clock step or a suspend is noticed within a
/// second. When the fire time has passed the driver fires once; if the clock jumped over several
/// fire times they are coalesced into that one run and counted as `missed`. The next fire time is
/// computed from the later of now and the fire time just handled, so no fire time runs twice
/// even when the clock steps back.
///
/// Firing spawns a run task (the driver never waits on a lock or a job):
/// 1. **overlap** — with [`Overlap::Forbid`] (the default) a fire time that finds the previous run
///    still going is skipped and counted (`overlap`);
/// 2. **guard** — [`Guard::None`] runs on every instance; [`Guard::ShortLock`] takes the job's lock
///    for this run with ttl = the timeout, claiming the fire time so it runs at most once across
///    instances, and releases it when the run ends; [`Guard::LongLock`] runs only on the instance
///    that holds the job's long lock, which it keeps across runs by refreshing every ttl/3.
///    Instances that are not the owner skip (`not_owner`); a lock backend error skips
///    (`lock_error`);
/// 3. **run** — the job runs in its own task with a [`JobContext`]. It is cancelled at its timeout,
///    when its lock is lost, or when a stop's grace runs out; if it has not returned within a
///    short grace after that it is aborted.
///
/// # Self-fencing
///
/// A [`Lease`] stops considering itself valid a safety margin before its lock can expire
/// (measured on the monotonic clock from when the acquire or refresh was sent). The run's task is
/// cancelled at that moment and aborted within half the margin, so it has stopped before another
/// instance can take the lock. [`JobContext::still_owner`] lets a job check before each write.
///
/// # Stopping
///
/// [`RunningScheduler::stop`]: drivers stop (no new runs); running jobs get the grace to finish;
/// then they are cancelled and, after a short grace, aborted; then long locks are released so
/// another instance takes over at its next fire time instead of after the ttl.
pub struct Scheduler {
    locks: Arc<dyn LockBackend>,
    clock: Arc<dyn Clock>,
    jobs: Vec<Arc<JobState>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("jobs", &self.job_names())
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler taking its locks from `locks`, on the system clock.
    pub fn new(locks: Arc<dyn LockBackend>) -> Self {
        Self {
            locks,
            clock: Arc::new(SystemClock),
            jobs: Vec::new(),
        }
    }

    /// Uses `clock` as the wall clock (tests use [`TokioClock`](crate::TokioClock)).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Registers `job`. Each run is instrumented: a tracing span, the job metrics
    /// ([`JOB_RUNS`] and the others), and an error log line when it fails. Its
    /// metrics appear as soon as it is registered, with zero runs.
    pub fn add(&mut self, job: impl Job, options: JobOptions) -> Result<(), SchedulerError> {
        let name = job.name().to_owned();
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid_name {
            return Err(SchedulerError::InvalidName(name));
        }
        if self.jobs.iter().any(|state| state.name == name) {
            return Err(SchedulerError::DuplicateName(name));
        }
        let invalid = |problem: String| SchedulerError::InvalidOptions {
            job: name.clone(),
            problem,
        };
        if options.timeout < MIN_LOCK_TTL {
            return Err(invalid(format!(
                "timeout {:?} is shorter than {MIN_LOCK_TTL:?}",
                options.timeout
            )));
        }
        let long_lock = match options.guard {
            Guard::LongLock { ttl } if ttl < MIN_LOCK_TTL => {
                return Err(invalid(format!(
                    "long lock ttl {ttl:?} is shorter than {MIN_LOCK_TTL:?}"
                )));
            }
            Guard::LongLock { ttl } => Some(LongLock {
                ttl,
                current: Mutex::new(None),
                acquiring: tokio::sync::Mutex::new(()),
            }),
            Guard::None | Guard::ShortLock => None,
        };
        for outcome in ["success", "error"] {
            metrics::counter!(JOB_RUNS, "job" => name.clone(), "outcome" => outcome).absolute(0);
        }
        if long_lock.is_some() {
            metrics::gauge!(JOB_LOCK_HELD, "job" => name.clone()).set(0.0);
        }
        tracing::info!(job = %name, schedule = %options.schedule, guard = ?options.guard, "job registered");
        self.jobs.push(Arc::new(JobState {
            lock_key: format!("job:{name}"),
            name,
            job: Arc::new(Instrumented::new(job)),
            options,
            running: AtomicUsize::new(0),
            long_lock,
        }));
        Ok(())
    }

    /// The registered jobs' names, in registration order.
    pub fn job_names(&self) -> Vec<&str> {
        self.jobs.iter().map(|state| state.name.as_str()).collect()
    }

    /// Starts every job's driver.
    pub fn start(self) -> RunningScheduler {
        let shared = Arc::new(Shared {
            locks: self.locks,
            clock: self.clock,
            stopping: CancellationToken::new(),
            interrupt_runs: CancellationToken::new(),
            keepers_stop: CancellationToken::new(),
            runs: TaskTracker::new(),
            keepers: TaskTracker::new(),
        });
        let drivers = TaskTracker::new();
        for state in &self.jobs {
            drivers.spawn(drive(state.clone(), shared.clone()));
        }
        drivers.close();
        RunningScheduler {
            shared,
            drivers,
            jobs: self.jobs,
        }
    }
}

/// A started scheduler; call [`RunningScheduler::stop`] to shut it down cleanly.
pub struct RunningScheduler {
    shared: Arc<Shared>,
    drivers: TaskTracker,
    jobs: Vec<Arc<JobState>>,
}

impl std::fmt::Debug for RunningScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningScheduler")
            .field("jobs", &self.jobs.len())
            .finish_non_exhaustive()
    }
}

impl RunningScheduler {
    /// How many runs are in progress right now, across jobs.
    pub fn running(&self) -> usize {
        self.jobs
            .iter()
            .map(|state| state.running.load(Ordering::SeqCst))
            .sum()
    }

    /// Stops: no new runs; running jobs get `grace` to finish, are then cancelled and (after
    /// [`CANCEL_GRACE`]) aborted; long locks are released. Returns how many runs had to be
    /// interrupted.
    pub async fn stop(self, grace: Duration) -> usize {
        self.shared.stopping.cancel();
        self.drivers.wait().await;
        self.shared.runs.close();
        let mut interrupted = 0;
        if tokio::time::timeout(grace, self.shared.runs.wait())
            .await
            .is_err()
        {
            interrupted = self.running();
            tracing::warn!(
                interrupted,
                ?grace,
                "job runs outlived the stop grace; cancelling them"
            );
            self.shared.interrupt_runs.cancel();
            self.shared.runs.wait().await;
        }
        self.shared.keepers_stop.cancel();
        for state in &self.jobs {
            if let Some(long_lock) = &state.long_lock {
                long_lock.release(&state.name).await;
            }
        }
        self.shared.keepers.close();
        self.shared.keepers.wait().await;
        tracing::info!("scheduler stopped");
        interrupted
    }
}

/// What every task of one scheduler shares.
struct Shared {
    locks: Arc<dyn LockBackend>,
    clock: Arc<dyn Clock>,
    /// Cancelled by stop: drivers end, no new runs or lock acquisitions.
    stopping: CancellationToken,
    /// Cancelled when the stop grace runs out: running jobs are cancelled.
    interrupt_runs: CancellationToken,
    /// Cancelled once runs are over: lease keep-alive tasks end.
    keepers_stop: CancellationToken,
    runs: TaskTracker,
    keepers: TaskTracker,
}

/// One registered job.
struct JobState {
    name: String,
    lock_key: String,
    job: Arc<dyn Job>,
    options: JobOptions,
    running: AtomicUsize,
    long_lock: Option<LongLock>,
}

/// The long lock of one job on this instance.
struct LongLock {
    ttl: Duration,
    current: Mutex<Option<Arc<Lease>>>,
    /// Serialises acquisition when overlapping runs both find no valid lease.
    acquiring: tokio::sync::Mutex<()>,
}

impl LongLock {
    fn take_current(&self) -> Option<Arc<Lease>> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn current(&self) -> Option<Arc<Lease>> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The valid lease this instance holds, acquiring one if it holds none.
    async fn ensure(
        &self,
        state: &JobState,
        shared: &Shared,
    ) -> Result<Option<Arc<Lease>>, LockError> {
        let _acquiring = self.acquiring.lock().await;
        if let Some(lease) = self.current() {
            if lease.is_valid() {
                return Ok(Some(lease));
            }
            // Lost (refused or unrenewed). If the backend merely was slow the key may still
            // hold our owner token: give it back in the background so the next try can win.
            self.take_current();
            shared.keepers.spawn(async move { lease.release().await });
        }
        if shared.stopping.is_cancelled() {
            return Ok(None);
        }
        let Some(lease) = Lease::acquire(
            shared.locks.clone(),
            &state.lock_key,
            self.ttl,
            lock_margin(self.ttl),
            None,
        )
        .await?
        else {
            return Ok(None);
        };
        let lease = Arc::new(lease);
        tracing::info!(job = %state.name, fencing_token = lease.fencing_token(), "took the long lock");
        metrics::gauge!(JOB_LOCK_HELD, "job" => state.name.clone()).set(1.0);
        *self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(lease.clone());
        let keeper = lease.clone();
        let stop = shared.keepers_stop.clone();
        let name = state.name.clone();
        shared.keepers.spawn(async move {
            keeper.keep_alive(stop).await;
            if !keeper.is_valid() {
                metrics::gauge!(JOB_LOCK_HELD, "job" => name).set(0.0);
            }
        });
        Ok(Some(lease))
    }

    async fn release(&self, name: &str) {
        if let Some(lease) = self.take_current() {
            lease.release().await;
            tracing::info!(job = name, "released the long lock");
        }
        metrics::gauge!(JOB_LOCK_HELD, "job" => name.to_owned()).set(0.0);
    }
}

/// The driver of one job: waits for each fire time and fires (see [`Scheduler`]).
async fn drive(state: Arc<JobState>, shared: Arc<Shared>) {
    let schedule = &state.options.schedule;
    let mut next = schedule.next_after(shared.clock.now());
    while let Some(fire_at) = next {
        if !wait_for_wall_clock(fire_at, &shared).await {
            return;
        }
        let now = shared.clock.now();
        let missed = count_missed(schedule, fire_at, now);
        if missed > 0 {
            tracing::warn!(job = %state.name, missed, %fire_at, %now, "clock jumped over fire times; running once for all of them");
            metrics::counter!(JOB_SKIPS, "job" => state.name.clone(), "reason" => "missed")
                .increment(u64::from(missed));
        }
        fire(&state, &shared, fire_at);
        next = schedule.next_after(now.max(fire_at));
    }
    tracing::info!(job = %state.name, "schedule has no further fire times");
}

/// Sleeps until the wall clock reads `at` or later, re-reading it at least every [`MAX_SLEEP`].
/// False when the scheduler is stopping.
async fn wait_for_wall_clock(at: DateTime<Utc>, shared: &Shared) -> bool {
    loop {
        let now = shared.clock.now();
        if now >= at {
            return true;
        }
        let wait = (at - now).to_std().unwrap_or(Duration::ZERO).min(MAX_SLEEP);
        tokio::select! {
            () = shared.stopping.cancelled() => return false,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Fire times strictly between `fired` and `now` (inclusive of `now`) that are folded into the
/// run for `fired`.
fn count_missed(schedule: &Schedule, fired: DateTime<Utc>, now: DateTime<Utc>) -> u32 {
    let mut missed = 0;
    let mut cursor = fired;
    while missed < MAX_MISSED_COUNTED {
        match schedule.next_after(cursor) {
            Some(time) if time <= now => {
                missed += 1;
                cursor = time;
            }
            _ => break,
        }
    }
    missed
}

fn skip(state: &JobState, reason: &'static str) {
    metrics::counter!(JOB_SKIPS, "job" => state.name.clone(), "reason" => reason).increment(1);
}

/// Decides whether the fire time at `scheduled_at` starts a run, and spawns it.
fn fire(state: &Arc<JobState>, shared: &Arc<Shared>, scheduled_at: DateTime<Utc>) {
    if state.options.overlap == Overlap::Forbid && state.running.load(Ordering::SeqCst) > 0 {
        tracing::info!(job = %state.name, %scheduled_at, "previous run still going; skipping this fire time");
        skip(state, "overlap");
        return;
    }
    // Only this job's driver increments, so the check above cannot race another increment.
    state.running.fetch_add(1, Ordering::SeqCst);
    let state = state.clone();
    let task_shared = shared.clone();
    shared.runs.spawn(async move {
        run_guarded(&state, &task_shared, scheduled_at).await;
        state.running.fetch_sub(1, Ordering::SeqCst);
    });
}

/// Takes the guard's lock (or skips), runs the job supervised, releases a short lock.
async fn run_guarded(state: &JobState, shared: &Shared, scheduled_at: DateTime<Utc>) {
    let acquire = async {
        match state.options.guard {
            Guard::None => Ok(Some(None)),
            Guard::ShortLock => Lease::acquire(
                shared.locks.clone(),
                &state.lock_key,
                state.options.timeout,
                lock_margin(state.options.timeout),
                Some(scheduled_at.timestamp_millis()),
            )
            .await
            .map(|lease| lease.map(|lease| Some(Arc::new(lease)))),
            Guard::LongLock { .. } => match &state.long_lock {
                Some(long_lock) => long_lock
                    .ensure(state, shared)
                    .await
                    .map(|lease| lease.map(Some)),
                None => Ok(None),
            },
        }
    };
    // A stop makes any acquisition still in flight pointless.
    let acquired = tokio::select! {
        acquired = acquire => acquired,
        () = shared.stopping.cancelled() => return,
    };
    // Ok(Some(lease or None)): run; Ok(None): another instance owns this run.
    let lease = match acquired {
        Ok(Some(lease)) => lease,
        Ok(None) => {
            tracing::debug!(job = %state.name, %scheduled_at, "another instance owns this run");
            skip(state, "not_owner");
            return;
        }
        Err(err) => {
            tracing::warn!(job = %state.name, %scheduled_at, err = %err, "cannot take the job's lock; skipping");
            skip(state, "lock_error");
            return;
        }
    };
    supervise(state, shared, scheduled_at, lease.clone()).await;
    if state.options.guard == Guard::ShortLock {
        if let Some(lease) = lease {
            lease.release().await;
        }
    }
}

/// Runs the job in its own task and interrupts it at its deadline, on lock loss or at shutdown.
async fn supervise(
    state: &JobState,
    shared: &Shared,
    scheduled_at: DateTime<Utc>,
    lease: Option<Arc<Lease>>,
) {
    let cancel = CancellationToken::new();
    let ctx = JobContext::new(
        scheduled_at,
        cancel.clone(),
        lease.as_ref().map(|lease| lease.ownership().clone()),
    );
    let mut deadline = Instant::now() + state.options.timeout;
    if let Some(lease) = &lease {
        if state.options.guard == Guard::ShortLock {
            deadline = deadline.min(lease.valid_until());
        }
    }
    let job = state.job.clone();
    let mut handle = tokio::spawn(async move { job.run(ctx).await });
    let lock_lost = async {
        match &lease {
            Some(lease) => lease.lost().await,
            None => std::future::pending().await,
        }
    };
    let interrupt = tokio::select! {
        joined = &mut handle => {
            report_join(state, joined);
            return;
        }
        () = tokio::time::sleep_until(deadline) => ("timeout", CANCEL_GRACE),
        () = lock_lost => {
            let margin = lease.as_ref().map_or(CANCEL_GRACE, |lease| lock_margin(lease.ttl()));
            ("lock_lost", margin / 2)
        }
        () = shared.interrupt_runs.cancelled() => ("shutdown", CANCEL_GRACE),
    };
    let (reason, grace) = interrupt;
    tracing::warn!(job = %state.name, %scheduled_at, reason, "interrupting job run");
    metrics::counter!(JOB_INTERRUPTS, "job" => state.name.clone(), "reason" => reason).increment(1);
    cancel.cancel();
    match tokio::time::timeout(grace, &mut handle).await {
        Ok(joined) => report_join(state, joined),
        Err(_) => {
            tracing::error!(job = %state.name, %scheduled_at, ?grace, "job ignored cancellation; aborting it");
            handle.abort();
            // The task is dropped at its next await point; a job blocking its thread is the one
            // case the scheduler cannot stop (its writes are then refused by their fencing token).
            let _aborted = handle.await;
        }
    }
}

/// Logs a run task that did not return normally (the job's own errors are logged by
/// [`Instrumented`]).
fn report_join(state: &JobState, joined: Result<anyhow::Result<()>, tokio::task::JoinError>) {
    if let Err(err) = joined {
        if err.is_panic() {
            tracing::error!(job = %state.name, "job run panicked");
        }
    }
}
