//! Durable jobs, administered: the admin API (`/jobs…`, API.md → Jobs (admin)) and the
//! `webook jobs …` command over the SQL preemptive scheduler of the `scheduler` crate
//! ([`scheduler::sql`]).
//!
//! What lives where:
//! - the scheduler crate owns the tables (`jobs`, `job_runs`), the claim/run/release protocol
//!   and the `http` executor; its [`SqlJobStore`] is the only code that touches the tables;
//! - this module decides what a job may be created with ([`service::JobSpec`]: defaults, the
//!   misfire and overlap policies, the executor and its `cfg`, checked against the same
//!   executor registry the instance runs with, `Feature::offline_executors`), and exposes the
//!   store's operator actions (list, stop, resume, trigger, runs) over HTTP (`http::router`,
//!   admins only) and on the command line ([`cli`], for operators with access to the database
//!   settings).
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

use std::sync::Arc;

use async_trait::async_trait;
use clap::FromArgMatches;
use scheduler::sql::{
    DbClock, Dialect, Executors, HttpExecutor, SqlJobStore, TargetPolicy, WorkerOptions,
    RUNS_RETENTION_SCHEMA, SCHEMA, TRIGGER_TRACE_SCHEMA,
};

use platform::{
    config::{Config, DatabaseKind, SettingsSpec},
    db::{Db, Migration},
    feature::{CliCommands, Feature, Platform, Registry, Service},
};

pub use purge::PurgeJobRuns;
pub use settings::JobSettings;

/// The durable-jobs feature: the SQL scheduler's worker on every instance that runs work, the
/// `http` executor and the admin API. Install it after every feature that registers executors:
/// job creation is checked against the executors registered before it.
pub struct Jobs;

#[async_trait]
impl Feature for Jobs {
    fn name(&self) -> &'static str {
        "jobs"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<WorkerInstance>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(5, "jobs", SCHEMA),
            Migration::new(9, "job runs retention", RUNS_RETENTION_SCHEMA),
            Migration::new(45, "job trigger traces", TRIGGER_TRACE_SCHEMA),
        ];
        MIGRATIONS
    }

    fn offline_executors(
        &self,
        config: &Config,
        _db: &Db,
        executors: &mut Executors,
    ) -> anyhow::Result<()> {
        let settings = config.settings::<JobSettings>()?;
        executors.register(http_executor(settings.job_http_allowed_networks()?)?);
        Ok(())
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<cli::JobsCli>(|matches, context| {
            Box::pin(async move {
                let cli::JobsCli::Jobs { command } = cli::JobsCli::from_arg_matches(&matches)?;
                let executors = |db: &Db| (context.executors)(&context.config, db);
                cli::run(&context.config, context.schema, executors, command).await
            })
        }))
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::JobsApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let settings = platform.config.settings::<JobSettings>()?;
        let job_store = store(&platform.db);
        if !settings.job_runs_retention.is_zero() {
            registry.maintenance(
                &platform.config,
                PurgeJobRuns::new(job_store.clone(), settings.job_runs_retention),
            )?;
        }
        registry.executor(http_executor(settings.job_http_allowed_networks()?)?);
        let options = worker_options(settings);
        registry.provide(WorkerInstance(options.instance.clone()));
        registry.durable_jobs(job_store.clone(), options);
        registry.provide(job_store.clone());
        registry.routes(http::router(
            http::JobRoutes {
                job_store,
                job_executors: registry.executors().clone(),
                lease: settings.job_lease,
            },
            platform.idempotency.clone(),
        ));
        Ok(())
    }
}

/// This process's id as its durable-job worker records it (`owner` of the jobs it runs):
/// `<host>-<pid>-<random>`.
#[derive(Debug, Clone)]
pub struct WorkerInstance(pub String);

/// Tuning of this instance's durable-job worker.
fn worker_options(settings: &JobSettings) -> WorkerOptions {
    WorkerOptions {
        permits: settings.job_permits,
        heartbeat: settings.job_heartbeat,
        lease: settings.job_lease,
        max_idle_poll: settings.job_poll_max,
        // A triggered run continues its trigger's request trace (platform::tracing_otlp).
        continue_trace: Some(platform::tracing_otlp::continue_from),
        ..WorkerOptions::default()
    }
}

/// The `http` executor: calls public addresses and the internal networks in `allowed_networks`
/// (config `job_http_allowed_networks`).
pub fn http_executor(allowed_networks: Vec<ipnet::IpNet>) -> anyhow::Result<HttpExecutor> {
    Ok(HttpExecutor::new(
        TargetPolicy::allowing(allowed_networks),
        HTTP_JOB_HEADER_PREFIX,
    )?
    // Traced, each call carries the run's `traceparent` (platform::tracing_otlp).
    .with_propagation(platform::tracing_otlp::inject_current))
}

/// Prefix of the headers the `http` executor announces a run with: `x-webook-job`,
/// `x-webook-scheduled-at`, `x-webook-token` (docs/JOBS.md).
pub const HTTP_JOB_HEADER_PREFIX: &str = "x-webook-";

/// The scheduler's name for the SQL engine of `kind` (it picks the database clock's SQL).
pub fn dialect(kind: DatabaseKind) -> Dialect {
    match kind {
        DatabaseKind::Sqlite => Dialect::Sqlite,
        DatabaseKind::Postgres => Dialect::Postgres,
    }
}

/// Creates `job` unless a job of its name exists (operators' changes to an existing one are
/// kept): how features create the durable jobs they run (`ranking`, `sms_code_retries`,
/// `payment_sweep`, …) at start-up. Safe when several instances start at once.
pub async fn ensure_job(jobs: &SqlJobStore, job: &scheduler::sql::NewJob) -> anyhow::Result<()> {
    if jobs.find(&job.name).await?.is_some() {
        return Ok(());
    }
    match jobs.create(job).await {
        Ok(id) => {
            tracing::info!(id, name = %job.name, schedule = %job.cron, "created a durable job");
            Ok(())
        }
        Err(scheduler::sql::StoreError::Duplicate(_)) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// The durable-job store on `db`: reads on the shared pool, writes on the writer pool (SQLite's
/// single writer), time from the database's own clock — each asked of `db` at every operation,
/// so the store follows an online database move. A trigger keeps the trace context of the
/// request that made it, and the run continues it.
pub fn store(db: &Db) -> SqlJobStore {
    SqlJobStore::with_pools(
        Arc::new(RoutedPools(db.clone())),
        DbClock::Database(dialect(db.kind())),
    )
    .with_trace_context(platform::tracing_otlp::current_traceparent)
}

/// The pools `db` routes to at the moment of asking, once its routing is open: while an online
/// database move pauses this process, the scheduler waits like every store does (a pause that
/// begins just after the check waits for the connection to come back; a write that still
/// reaches the old database after its fence is refused there).
#[derive(Debug)]
struct RoutedPools(Db);

#[async_trait::async_trait]
impl scheduler::sql::PoolSource for RoutedPools {
    async fn reads(&self) -> sqlx::AnyPool {
        self.0.wait_until_open().await;
        self.0.pool().any_pool()
    }

    async fn writes(&self) -> sqlx::AnyPool {
        self.0.wait_until_open().await;
        self.0.writer().any_pool()
    }
}
