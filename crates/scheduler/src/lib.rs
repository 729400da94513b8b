//! The generic job engine of webook. It knows nothing about articles or users: applications
//! implement [`Job`], describe when and where it runs with [`JobOptions`], and register it with a
//! [`Scheduler`].
//!
//! - [`schedule`]: when — cron expressions with seconds, `@every`, descriptors, per-job IANA time
//!   zones with defined DST behaviour;
//! - [`job`]: what — the [`Job`] trait and the [`JobContext`] a run receives (cancellation,
//!   fencing token, ownership check);
//! - [`lock`]: where — [`LockBackend`] with an in-process and a Redis implementation, and
//!   [`Lease`], a held lock whose validity is tracked on the monotonic clock;
//! - [`scheduler`]: the engine — drivers per job, overlap policy, short and long locks with
//!   self-fencing, graceful stop;
//! - [`instrument`]: the decorator every job is wrapped in (span, metrics, error log);
//! - [`clock`]: the wall clock, real or driven by tokio's paused clock in tests.
//!
//! Flow: `Scheduler::add(job, options)` → `start()` spawns one driver per job → at each fire time
//! the driver spawns a run that takes the guard's lock (or skips), runs the instrumented job under
//! supervision and releases → `stop(grace)` drains and releases every lock.
//!
//! The SQL preemptive scheduler (a `jobs` table every instance polls) joins this crate later.

pub mod clock;
pub mod instrument;
pub mod job;
pub mod lock;
pub mod schedule;
pub mod scheduler;

pub use clock::{Clock, SystemClock, TokioClock};
pub use job::{Job, JobContext};
pub use lock::{Grant, InProcessLocks, Lease, LockBackend, LockError, RedisLocks};
pub use schedule::{Schedule, ScheduleError};
pub use scheduler::{Guard, JobOptions, Overlap, RunningScheduler, Scheduler, SchedulerError};
