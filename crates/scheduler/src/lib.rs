//! A generic job engine. It knows nothing about the application's domain: applications
//! implement [`Job`], describe when and where it runs with [`JobOptions`], and register it with a
//! [`Scheduler`].
//!
//! - when — [`Schedule`]: cron expressions with seconds, `@every`, descriptors, per-job IANA time
//!   zones with defined DST behaviour;
//! - what — the [`Job`] trait and the [`JobContext`] a run receives (cancellation, fencing
//!   token, ownership check);
//! - where — [`LockBackend`] with an in-process ([`InProcessLocks`]) and a Redis
//!   ([`RedisLocks`]) implementation, and [`Lease`], a held lock whose validity is tracked on the
//!   monotonic clock;
//! - the engine — [`Scheduler`]: drivers per job, overlap policy, short and long locks with
//!   self-fencing, graceful stop;
//! - instrumentation: every job runs in a span, with the metrics [`JOB_DURATION`], [`JOB_RUNS`],
//!   [`JOB_SKIPS`], [`JOB_INTERRUPTS`] and [`JOB_LOCK_HELD`] ([`describe_job_metrics`]);
//! - [`Ownership`]: a fencing token with a validity window on the monotonic clock, shared by
//!   lock leases and SQL claims;
//! - [`Clock`]: the wall clock, real ([`SystemClock`]) or driven by tokio's paused clock in tests
//!   ([`TokioClock`]).
//!
//! Flow: `Scheduler::add(job, options)` → `start()` spawns one driver per job → at each fire time
//! the driver spawns a run that takes the guard's lock (or skips), runs the instrumented job under
//! supervision and releases → `stop(grace)` drains and releases every lock.
//!
//! [`sql`] is the second mechanism: the preemptive scheduler, durable jobs in a `jobs` table that
//! every instance polls and claims by compare-and-swap, with heartbeats, takeover and fencing.
//!
//! Every public item has one path: the in-process engine's items are at the crate root, the SQL
//! scheduler's in [`sql`].

mod clock;
mod instrument;
mod job;
mod lock;
mod ownership;
mod schedule;
mod scheduler;
#[cfg(feature = "sql")]
pub mod sql;

pub use clock::{Clock, SystemClock, TokioClock};
pub use instrument::{
    describe_job_metrics, JOB_DURATION, JOB_INTERRUPTS, JOB_LOCK_HELD, JOB_RUNS, JOB_SKIPS,
};
pub use job::{Job, JobContext};
#[cfg(feature = "redis")]
pub use lock::RedisLocks;
pub use lock::{Grant, InProcessLocks, Lease, LockBackend, LockError};
pub use ownership::Ownership;
pub use schedule::{CronField, FieldProblem, IntervalProblem, Schedule, ScheduleError};
pub use scheduler::{
    lock_margin, Guard, JobOptions, Overlap, RunningScheduler, Scheduler, SchedulerError,
    CANCEL_GRACE, DEFAULT_TIMEOUT, MAX_SLEEP, MIN_LOCK_TTL,
};
