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
//! The schema is [`SCHEMA`], [`RUNS_RETENTION_SCHEMA`] and [`TRIGGER_TRACE_SCHEMA`], in this
//! order; the application includes them in its migrations.
//!
//! Traces: a trigger made inside a traced operation (an admin's request) stores that
//! operation's context with the trigger ([`SqlJobStore::with_trace_context`]), and the run it
//! causes continues it ([`WorkerOptions::continue_trace`]), so a request and the job run it
//! asked for are one trace. The crate knows no tracing system: both are hooks.
//!
//! # Example
//!
//! An instance on an in-memory SQLite database, with one executor and one job:
//!
//! ```rust
//! use std::time::Duration;
//!
//! use async_trait::async_trait;
//! use scheduler::{
//!     sql::{
//!         DbClock, Dialect, Executor, Executors, JobRow, Misfire, NewJob, OverlapPolicy,
//!         SqlJobStore, SqlScheduler, WorkerOptions, RUNS_RETENTION_SCHEMA, SCHEMA,
//!         TRIGGER_TRACE_SCHEMA,
//!     },
//!     JobContext,
//! };
//!
//! /// Sends a report; jobs name it as their executor.
//! struct Report;
//!
//! #[async_trait]
//! impl Executor for Report {
//!     fn name(&self) -> &str {
//!         "report"
//!     }
//!
//!     fn check_cfg(&self, _cfg: &serde_json::Value) -> Result<(), String> {
//!         Ok(())
//!     }
//!
//!     async fn execute(&self, job: &JobRow, ctx: JobContext) -> anyhow::Result<()> {
//!         println!("{} for {} (token {})", job.name, ctx.scheduled_at(), ctx.fencing_token());
//!         Ok(())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> anyhow::Result<()> {
//!     sqlx::any::install_default_drivers();
//!     let pool = sqlx::any::AnyPoolOptions::new()
//!         .max_connections(1)
//!         .connect("sqlite::memory:")
//!         .await?;
//!     // `{{id}}` is the engine's auto-increment primary key.
//!     for schema in [SCHEMA, RUNS_RETENTION_SCHEMA, TRIGGER_TRACE_SCHEMA] {
//!         let schema = schema.replace("{{id}}", "INTEGER PRIMARY KEY AUTOINCREMENT");
//!         sqlx::raw_sql(&schema).execute(&pool).await?;
//!     }
//!     let store = SqlJobStore::new(pool.clone(), pool, DbClock::Database(Dialect::Sqlite));
//!
//!     let mut executors = Executors::new();
//!     executors.register(Report);
//!     executors.check("report", "{}").map_err(anyhow::Error::msg)?;
//!     store
//!         .create(&NewJob {
//!             name: "nightly-report".to_owned(),
//!             cron: "0 0 3 * * *".to_owned(),
//!             timezone: "Europe/Berlin".to_owned(),
//!             executor: "report".to_owned(),
//!             cfg: "{}".to_owned(),
//!             misfire: Misfire::FireOnce,
//!             overlap: OverlapPolicy::Forbid,
//!             timeout_ms: 60_000,
//!         })
//!         .await?;
//!
//!     let running = SqlScheduler::new(store, executors, WorkerOptions::default()).start();
//!     tokio::time::sleep(Duration::from_millis(50)).await;
//!     running.stop(Duration::from_secs(10)).await;
//!     Ok(())
//! }
//! ```

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
/// The column a trigger's trace context is kept in ([`SqlJobStore::with_trace_context`]): a
/// migration after [`RUNS_RETENTION_SCHEMA`].
pub const TRIGGER_TRACE_SCHEMA: &str = include_str!("schema_trigger_trace.sql");

pub use executor::{Executor, Executors};
#[cfg(feature = "http")]
pub use http::HttpExecutor;
pub use model::{
    next_fire, plan_claim, ClaimKind, ClaimPlan, JobRow, JobStatus, Misfire, OverlapPolicy, RunRow,
    RunStatus, CATCH_UP_CAP, MAX_RECORDED_MISSES, NEVER, SQL_MISFIRED, SQL_UNRECORDED_FIRE_TIMES,
};
pub use store::{
    check_name, Claim, DbClock, Dialect, Due, NewJob, Polled, PoolSource, SqlJobStore, StoreError,
    TraceContext,
};
#[cfg(feature = "http")]
pub use target::TargetPolicy;
pub use worker::{
    default_instance_id, describe_metrics, host_name, RunningSqlScheduler, SqlScheduler,
    WorkerOptions, SQL_CLAIMS, SQL_FENCED, SQL_SCHEDULE_LAG,
};
