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
//! - [`ownership`]: a fencing token with a validity window on the monotonic clock, shared by
//!   lock leases and SQL claims;
//! - [`clock`]: the wall clock, real or driven by tokio's paused clock in tests.
//!
//! Flow: `Scheduler::add(job, options)` → `start()` spawns one driver per job → at each fire time
//! the driver spawns a run that takes the guard's lock (or skips), runs the instrumented job under
//! supervision and releases → `stop(grace)` drains and releases every lock.
//!
//! [`sql`] is the second mechanism: the preemptive scheduler, durable jobs in a `jobs` table that
//! every instance polls and claims by compare-and-swap, with heartbeats, takeover and fencing.

pub mod clock;
pub mod instrument;
pub mod job;
pub mod lock;
pub mod ownership;
pub mod schedule;
pub mod scheduler;
pub mod sql;

pub use clock::{Clock, SystemClock, TokioClock};
pub use job::{Job, JobContext};
pub use lock::{Grant, InProcessLocks, Lease, LockBackend, LockError, RedisLocks};
pub use ownership::Ownership;
pub use schedule::{Schedule, ScheduleError};
pub use scheduler::{Guard, JobOptions, Overlap, RunningScheduler, Scheduler, SchedulerError};
