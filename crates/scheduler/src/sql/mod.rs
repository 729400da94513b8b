//! The SQL preemptive scheduler: durable jobs in a `jobs` table that every instance polls, each
//! fire time run by exactly one instance.
//!
//! - rows and policies ([`JobRow`], [`RunRow`], [`Misfire`], [`OverlapPolicy`]), and the pure
//!   claim decision ([`plan_claim`]: on time, misfire, trigger, takeover);
//! - [`SqlJobStore`]: the SQL (SQLite and PostgreSQL), every holder write conditional on its
//!   token;
//! - [`SqlScheduler`]: the poll → claim → run → heartbeat → release loop with bounded
//!   concurrency;
//! - [`Executors`]: what a job runs — a registry of named [`Executor`]s, among them the `http`
//!   executor (`HttpExecutor`, feature `http`).
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

mod executor;
#[cfg(feature = "http")]
mod http;
mod model;
mod store;
#[cfg(feature = "http")]
mod target;
mod worker;

/// The tables of this scheduler (`jobs`, `job_runs`), in the application's migration dialect
/// (`{{id}}` is the auto-increment primary key of the engine).
pub const SCHEMA: &str = include_str!("schema.sql");
/// The index [`SqlJobStore::purge_runs_before`] deletes by: a migration after [`SCHEMA`].
pub const RUNS_RETENTION_SCHEMA: &str = include_str!("schema_runs_retention.sql");

pub use executor::{Executor, Executors};
#[cfg(feature = "http")]
pub use http::HttpExecutor;
pub use model::{
    next_fire, plan_claim, ClaimKind, ClaimPlan, JobRow, JobStatus, Misfire, OverlapPolicy, RunRow,
    RunStatus, CATCH_UP_CAP, MAX_RECORDED_MISSES, NEVER, SQL_UNRECORDED_FIRE_TIMES,
};
pub use store::{check_name, Claim, DbClock, Dialect, Due, NewJob, SqlJobStore, StoreError};
#[cfg(feature = "http")]
pub use target::TargetPolicy;
pub use worker::{
    default_instance_id, describe_metrics, RunningSqlScheduler, SqlScheduler, WorkerOptions,
    SQL_CLAIMS, SQL_FENCED, SQL_SCHEDULE_LAG,
};
