//! The SQL preemptive scheduler: durable jobs in a `jobs` table that every instance polls, each
//! fire time run by exactly one instance.
//!
//! - [`model`]: rows, policies, and the pure claim decision (on time, misfire, trigger,
//!   takeover);
//! - [`store`]: the SQL (SQLite and PostgreSQL), every holder write conditional on its token;
//! - [`worker`]: the poll → claim → run → heartbeat → release loop with bounded concurrency;
//! - [`executor`]: what a job runs — a registry of named executors, and the `http` executor.
//!
//! Guarantees, and how:
//! - **one run per fire time**: a claim is a compare-and-swap on `version`, and each fire time
//!   has one `job_runs` row (`UNIQUE(job_id, scheduled_at)`), written in the claim's transaction
//!   before any work starts;
//! - **no stuck jobs**: a running job whose heartbeat is older than the lease is taken over, and
//!   its fire time re-run under a new token;
//! - **no writes from a replaced holder**: heartbeats and the final write require the holder's
//!   token to still be the job's version; the holder also stops by itself when its validity
//!   window on the monotonic clock passes without a heartbeat (a SIGSTOPped process resumes
//!   already fenced);
//! - **no clock disagreement**: due-ness and staleness use the database's clock only;
//! - **no silent drops after downtime**: every missed fire time is recorded, as `misfired` or by
//!   running it, per the job's misfire policy.
//!
//! The schema is [`SCHEMA`]; the application includes it in its migrations.

pub mod executor;
pub mod model;
pub mod store;
pub mod target;
pub mod worker;

/// The tables of this scheduler (`jobs`, `job_runs`), in the application's migration dialect
/// (`{{id}}` is the auto-increment primary key of the engine).
pub const SCHEMA: &str = include_str!("schema.sql");
/// The index [`SqlJobStore::purge_runs_before`] deletes by: a migration after [`SCHEMA`].
pub const RUNS_RETENTION_SCHEMA: &str = include_str!("schema_runs_retention.sql");

pub use executor::{Executor, Executors, HttpExecutor};
pub use model::{ClaimKind, JobRow, JobStatus, Misfire, OverlapPolicy, RunRow, RunStatus};
pub use store::{Claim, DbClock, Dialect, NewJob, SqlJobStore, StoreError};
pub use target::TargetPolicy;
pub use worker::{RunningSqlScheduler, SqlScheduler, WorkerOptions};
