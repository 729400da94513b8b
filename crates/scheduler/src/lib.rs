#![doc = include_str!("../README.md")]

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
    describe_job_metrics, ContinueTrace, JOB_DURATION, JOB_INTERRUPTS, JOB_LOCK_HELD, JOB_RUNS,
    JOB_SKIPS,
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
