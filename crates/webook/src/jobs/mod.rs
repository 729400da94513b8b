//! Durable jobs, administered: the admin API (`/jobs…`, API.md → Jobs (admin)) and the
//! `webook jobs …` command over the SQL preemptive scheduler of the `scheduler` crate
//! ([`scheduler::sql`]).
//!
//! What lives where:
//! - the scheduler crate owns the tables (`jobs`, `job_runs`), the claim/run/release protocol
//!   and the `http` executor; its [`SqlJobStore`] is the only code that touches the tables;
//! - this module decides what a job may be created with ([`service::JobSpec`]: defaults, the
//!   misfire and overlap policies, the executor and its `cfg`, checked against the same
//!   executor registry the instance runs with, [`executors`]), and exposes the store's operator
//!   actions (list, stop, resume, trigger, runs) over HTTP ([`router`], admins only) and on the
//!   command line ([`cli`], for operators with access to the database settings).
//!
//! Data flow: a request (or a command line) becomes a [`service::JobSpec`] or a job id → the
//! spec is checked and turned into a [`scheduler::sql::NewJob`] → [`SqlJobStore`] writes the
//! row. The workers of every instance (`SqlScheduler`, started by `App::run_until` in roles
//! `all` and `worker`) poll the table, so a created, resumed or triggered job is picked up at
//! their next poll (at most `job_poll_max` later); nothing here talks to the workers directly.
//! A stop bumps the job's version, so a run in progress is told at its next heartbeat.

pub mod cli;
mod http;
pub mod purge;
pub mod service;
pub mod settings;

use scheduler::sql::{DbClock, Dialect, Executors, HttpExecutor, SqlJobStore, TargetPolicy};

use crate::ranking::{RankingJob, RankingService};
use platform::{config::DatabaseKind, db::Db};

pub use http::router;
pub use purge::PurgeJobRuns;

/// Prefix of the headers the `http` executor announces a run with: `x-webook-job`,
/// `x-webook-scheduled-at`, `x-webook-token` (docs/JOBS.md).
pub const HTTP_JOB_HEADER_PREFIX: &str = "x-webook-";

/// The executors durable jobs may name: what this build's instances can run, and so what job
/// creation accepts (the API and the CLI check against this same registry). `ranking` is there
/// when the hot list is given; `http` calls public addresses and the internal networks in
/// `allowed_networks` (config `job_http_allowed_networks`).
pub fn executors(
    ranking: Option<RankingService>,
    allowed_networks: Vec<ipnet::IpNet>,
) -> anyhow::Result<Executors> {
    let mut executors = Executors::new();
    executors.register(HttpExecutor::new(
        TargetPolicy::allowing(allowed_networks),
        HTTP_JOB_HEADER_PREFIX,
    )?);
    if let Some(ranking) = ranking {
        executors.register(RankingJob::new(ranking));
    }
    Ok(executors)
}

/// The scheduler's name for the SQL engine of `kind` (it picks the database clock's SQL).
pub fn dialect(kind: DatabaseKind) -> Dialect {
    match kind {
        DatabaseKind::Sqlite => Dialect::Sqlite,
        DatabaseKind::Postgres => Dialect::Postgres,
    }
}

/// The durable-job store on `db`: reads on the shared pool, writes on the writer pool (SQLite's
/// single writer), time from the database's own clock.
pub fn store(db: &Db) -> SqlJobStore {
    SqlJobStore::new(
        db.pool().any_pool().clone(),
        db.writer().any_pool().clone(),
        DbClock::Database(dialect(db.kind())),
    )
}
