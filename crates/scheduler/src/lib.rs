//! The generic job engine of webook. It knows nothing about articles or users: applications
//! implement its `Job` trait and register jobs by name.
//!
//! What it will hold (see `DESIGN.md` §4 "Jobs"):
//! - `Job` and its run context (cancellation token, fencing token);
//! - schedules: cron expressions with seconds, `@every`, per-job IANA time zones;
//! - a builder that wraps any job with tracing, metrics and error logging;
//! - locks with an in-process and a Redis implementation, as short per-run locks or a long,
//!   auto-refreshed, self-fencing lock;
//! - the SQL preemptive scheduler: a `jobs` table every instance polls, compare-and-swap claims,
//!   heartbeats, takeover of crashed holders, and a `job_runs` history.
//!
//! It is empty until the job-engine issue lands; the crate exists so the workspace layout is
//! final from the first commit.
