//! SQL of the preemptive scheduler, one implementation for SQLite and PostgreSQL (sqlx `Any`,
//! `$N` placeholders, `ON CONFLICT`, `RETURNING`).
//!
//! Every statement that acts on behalf of a claim is conditional on the claim's token still being
//! the job's `version`: the claim itself (a compare-and-swap that also re-checks due-ness or
//! staleness, so a heartbeat racing a would-be taker cannot be overrun), heartbeats, and the
//! final write of the run (job row and run row in one transaction). A holder whose token is stale
//! is told so and its writes change nothing.
//!
//! Time comes from [`DbClock`]: the database's own clock in production, so application servers'
//! clocks never decide due-ness or staleness; a manual clock in tests.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
};

use sqlx::{any::AnyRow, AnyPool, Row};

use crate::sql::model::{
    next_fire, passed_during_run, ClaimKind, ClaimPlan, JobRow, JobStatus, Misfire, OverlapPolicy,
    RunRow, RunStatus,
};

/// Which SQL engine the pools talk to (for the clock expression).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// Where "now" comes from.
#[derive(Debug, Clone)]
pub enum DbClock {
    /// The database server's clock (ms since the epoch), read with the SQL of the engine each
    /// connection is on (the dialect is for a connection of any other backend).
    Database(Dialect),
    /// A value the test sets (ms since the epoch).
    Manual(Arc<AtomicI64>),
}

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No job with that id or name.
    #[error("no such job")]
    NotFound,
    /// The input is invalid; the message says why.
    #[error("{0}")]
    Invalid(String),
    /// A job with this name exists.
    #[error("a job named {0:?} already exists")]
    Duplicate(String),
    /// The job is stopped; resume it first.
    #[error("job {0:?} is stopped; resume it first")]
    Paused(String),
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A job to create.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Unique name: letters, digits, `.`, `_`, `-`; at most 64 characters.
    pub name: String,
    /// Schedule expression.
    pub cron: String,
    /// IANA time zone of the expression.
    pub timezone: String,
    /// Executor name (the caller checks it exists).
    pub executor: String,
    /// Executor configuration, JSON text (the caller checks it).
    pub cfg: String,
    /// Misfire policy.
    pub misfire: Misfire,
    /// Overlap policy.
    pub overlap: OverlapPolicy,
    /// Run timeout (ms), at least 1 s.
    pub timeout_ms: i64,
}

/// Jobs that may be claimable now, read in one poll.
#[derive(Debug, Clone)]
pub struct Due {
    /// The database time of the poll (ms).
    pub now: i64,
    /// Candidates, earliest fire time first.
    pub jobs: Vec<JobRow>,
    /// When no job was found: the earliest `next_time` among waiting jobs or lease expiry
    /// among running ones, to sleep until (`None` also when there are none).
    pub earliest_next: Option<i64>,
}

/// What one [`poll`](SqlJobStore::poll) found and claimed.
#[derive(Debug)]
pub struct Polled<T> {
    /// The database time of the poll (ms).
    pub now: i64,
    /// How many candidates the poll read (planned or not).
    pub found: usize,
    /// Each planned job with its plan, the planner's payload and its claim (`None`: lost to
    /// another instance, or nothing left to run), in the order read.
    pub claims: Vec<(JobRow, ClaimPlan, T, Option<Claim>)>,
    /// When nothing was found: the earliest `next_time` among waiting jobs or lease expiry
    /// among running ones, to sleep until.
    pub earliest_next: Option<i64>,
}

/// What [`SqlJobStore::probe`] saw.
#[derive(Debug, Clone, Copy)]
struct Probe {
    now: i64,
    any_due: bool,
    earliest_next: Option<i64>,
}

impl<T> From<Probe> for Polled<T> {
    /// A poll that found nothing to claim.
    fn from(probe: Probe) -> Self {
        Self {
            now: probe.now,
            found: 0,
            claims: Vec::new(),
            earliest_next: probe.earliest_next,
        }
    }
}

/// Whether a claim's transaction holds its jobs' row locks already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locked {
    /// Read `FOR UPDATE` in this transaction.
    Yes,
    /// Not yet: lock them in id order first (PostgreSQL).
    No,
}

/// A won claim: what the holder runs and the token its writes carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The job.
    pub job_id: i64,
    /// The fencing token (the job's new version).
    pub token: i64,
    /// The run row.
    pub run_id: i64,
    /// The fire time being run (ms).
    pub run_at: i64,
    /// `next_time` as set by the claim.
    pub next_time: i64,
    /// Why it was claimed.
    pub kind: ClaimKind,
    /// Database time of the claim (ms).
    pub claimed_at: i64,
    /// The trace context of the trigger this claim runs (a W3C `traceparent`), if it was made
    /// in a traced operation ([`SqlJobStore::with_trace_context`]).
    pub trace: Option<String>,
}

const JOB_COLUMNS: &str = "id, name, cron, timezone, executor, cfg, status, next_time, \
     scheduled_at, trigger_at, trigger_trace, utime, version, owner, misfire, overlap, timeout_ms, ctime";
const RUN_COLUMNS: &str =
    "id, job_id, scheduled_at, token, owner, started_at, finished_at, status, error";
/// Which jobs may be claimable at `clock.db_now` (the poll's time, from a `clock` CTE) with a
/// lease of `$1` ms: waiting and due or triggered, or running with a heartbeat older than the
/// lease.
const DUE: &str = "((status = 'waiting' AND (next_time <= clock.db_now OR trigger_at > 0)) \
     OR (status = 'running' AND utime < clock.db_now - $1))";
/// Rows per multi-row insert (5 parameters each; well under both engines' limits).
const INSERT_CHUNK: usize = 500;
/// Jobs per claim statement (6 parameters each).
const CLAIM_CHUNK: usize = 500;

fn decode_error(column: &str, problem: String) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: problem.into(),
    }
}

/// A text column holding one of the scheduler's enums.
fn enum_column<T: std::str::FromStr<Err = String>>(row: &AnyRow, column: &str) -> sqlx::Result<T> {
    row.try_get::<String, _>(column)?
        .parse()
        .map_err(|err| decode_error(column, err))
}

fn job_from_row(row: &AnyRow) -> sqlx::Result<JobRow> {
    Ok(JobRow {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        cron: row.try_get("cron")?,
        timezone: row.try_get("timezone")?,
        executor: row.try_get("executor")?,
        cfg: row.try_get("cfg")?,
        status: enum_column(row, "status")?,
        next_time: row.try_get("next_time")?,
        scheduled_at: row.try_get("scheduled_at")?,
        trigger_at: row.try_get("trigger_at")?,
        trigger_trace: row.try_get("trigger_trace")?,
        utime: row.try_get("utime")?,
        version: row.try_get("version")?,
        owner: row.try_get("owner")?,
        misfire: enum_column(row, "misfire")?,
        overlap: enum_column(row, "overlap")?,
        timeout_ms: row.try_get("timeout_ms")?,
        ctime: row.try_get("ctime")?,
    })
}

fn run_from_row(row: &AnyRow) -> sqlx::Result<RunRow> {
    Ok(RunRow {
        id: row.try_get("id")?,
        job_id: row.try_get("job_id")?,
        scheduled_at: row.try_get("scheduled_at")?,
        token: row.try_get("token")?,
        owner: row.try_get("owner")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        status: enum_column(row, "status")?,
        error: row.try_get("error")?,
    })
}

/// `($1, $2, …), (…)` for `rows` rows of `columns` parameters.
fn values_list(rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|row| {
            let params: Vec<String> = (1..=columns)
                .map(|column| format!("${}", row * columns + column))
                .collect();
            format!("({})", params.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks a job name: non-empty, at most 64 characters of `[A-Za-z0-9._-]`.
pub fn check_name(name: &str) -> Result<(), StoreError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if valid {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "invalid job name {name:?}: use 1-64 letters, digits, '.', '_' or '-'"
        )))
    }
}

/// Where the store's connections come from, asked at every operation: fixed pools, or pools an
/// online database move re-routes while the process runs (then the engine can change too).
#[async_trait::async_trait]
pub trait PoolSource: Send + Sync + std::fmt::Debug {
    /// The pool for reads, once queries may run (a source that can pause — an online database
    /// move — makes the caller wait here).
    async fn reads(&self) -> AnyPool;
    /// The pool for writes and transactions, likewise.
    async fn writes(&self) -> AnyPool;
}

/// Two pools that never change.
#[derive(Debug)]
struct FixedPools {
    reads: AnyPool,
    writes: AnyPool,
}

#[async_trait::async_trait]
impl PoolSource for FixedPools {
    async fn reads(&self) -> AnyPool {
        self.reads.clone()
    }

    async fn writes(&self) -> AnyPool {
        self.writes.clone()
    }
}

/// The `jobs` and `job_runs` tables.
#[derive(Debug, Clone)]
pub struct SqlJobStore {
    pools: Arc<dyn PoolSource>,
    clock: DbClock,
    trace_context: Option<TraceContext>,
}

/// The trace context of the operation running now (a W3C `traceparent`), if it is traced: the
/// hook [`SqlJobStore::with_trace_context`] takes.
pub type TraceContext = fn() -> Option<String>;

impl SqlJobStore {
    /// A store reading through `reads` and writing through `writes` (the same pool on
    /// PostgreSQL; SQLite's one-connection writer pool otherwise), with time from `clock`.
    pub fn new(reads: AnyPool, writes: AnyPool, clock: DbClock) -> Self {
        Self::with_pools(Arc::new(FixedPools { reads, writes }), clock)
    }

    /// A store taking its pools from `pools` at every operation.
    pub fn with_pools(pools: Arc<dyn PoolSource>, clock: DbClock) -> Self {
        Self {
            pools,
            clock,
            trace_context: None,
        }
    }

    /// Has [`Self::trigger`] store the trace context `current` reports (the operator's request),
    /// so the run the trigger causes continues that trace ([`Claim::trace`]).
    #[must_use]
    pub fn with_trace_context(mut self, current: TraceContext) -> Self {
        self.trace_context = Some(current);
        self
    }

    /// The current time (ms) by [`DbClock`].
    pub async fn now(&self) -> sqlx::Result<i64> {
        let mut connection = self.pools.reads().await.acquire().await?;
        self.now_on(&mut connection).await
    }

    /// The current time (ms) read on `connection` — inside a transaction, after its writes have
    /// waited for any conflicting commit, so it is later than that commit.
    async fn now_on(&self, connection: &mut sqlx::AnyConnection) -> sqlx::Result<i64> {
        if let DbClock::Manual(now) = &self.clock {
            return Ok(now.load(Ordering::SeqCst));
        }
        let sql = format!("SELECT {}", self.clock_sql(connection));
        sqlx::query_scalar(&sql).fetch_one(connection).await
    }

    /// The SQL expression of the current time (ms) on `connection`'s engine, for statements
    /// that read the clock along with their rows (one round trip instead of two). A manual
    /// clock is its value, as a literal.
    fn clock_sql(&self, connection: &sqlx::AnyConnection) -> String {
        let dialect = match &self.clock {
            DbClock::Manual(now) => {
                return format!("CAST({} AS BIGINT)", now.load(Ordering::SeqCst));
            }
            // The engine of this connection, which a source that re-routes may have changed
            // since the store was made.
            DbClock::Database(dialect) => match connection.backend_name() {
                "PostgreSQL" => Dialect::Postgres,
                "SQLite" => Dialect::Sqlite,
                _ => *dialect,
            },
        };
        match dialect {
            Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
            Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        }
        .to_owned()
    }

    /// Creates a job; its first fire time is the schedule's next after now. Returns its id.
    pub async fn create(&self, job: &NewJob) -> Result<i64, StoreError> {
        check_name(&job.name)?;
        let (now, next_time) = self.first_fire(job).await?;
        let inserted = sqlx::query_scalar::<_, i64>(
            "INSERT INTO jobs (name, cron, timezone, executor, cfg, status, next_time, utime, \
             misfire, overlap, timeout_ms, ctime) \
             VALUES ($1, $2, $3, $4, $5, 'waiting', $6, $7, $8, $9, $10, $7) \
             ON CONFLICT (name) DO NOTHING RETURNING id",
        )
        .bind(&job.name)
        .bind(job.cron.trim())
        .bind(job.timezone.trim())
        .bind(&job.executor)
        .bind(&job.cfg)
        .bind(next_time)
        .bind(now)
        .bind(job.misfire.as_str())
        .bind(job.overlap.as_str())
        .bind(job.timeout_ms)
        // To completion (`fetch_all`, not `fetch_optional`): SQLite reports a failed autocommit
        // (a full disk) only when the statement finishes, after its row was read.
        .fetch_all(&self.pools.writes().await)
        .await?;
        inserted
            .first()
            .copied()
            .ok_or_else(|| StoreError::Duplicate(job.name.clone()))
    }

    /// Changes a job's schedule, time zone, executor configuration, misfire policy and timeout
    /// (the name, executor and overlap policy stay): a waiting job's next fire time is the new
    /// schedule's next after now (a stopped job gets it when resumed), and the version moves so a
    /// claim read before the change fails its compare-and-swap. Refused while a run holds the
    /// job, so a run never finishes under a schedule it did not start with.
    pub async fn update(&self, id: i64, job: &NewJob) -> Result<(), StoreError> {
        let (now, next_time) = self.first_fire(job).await?;
        let updated = sqlx::query(
            "UPDATE jobs SET cron = $2, timezone = $3, cfg = $4, misfire = $5, timeout_ms = $6, \
             next_time = CASE WHEN status = 'waiting' THEN $7 ELSE next_time END, \
             version = version + 1, utime = $8 WHERE id = $1 AND status <> 'running'",
        )
        .bind(id)
        .bind(job.cron.trim())
        .bind(job.timezone.trim())
        .bind(&job.cfg)
        .bind(job.misfire.as_str())
        .bind(job.timeout_ms)
        .bind(next_time)
        .bind(now)
        .execute(&self.pools.writes().await)
        .await?
        .rows_affected();
        if updated == 1 {
            return Ok(());
        }
        match self.get(id).await? {
            None => Err(StoreError::NotFound),
            Some(job) => Err(StoreError::Invalid(format!(
                "job \"{}\" is running; change it when the run has ended",
                job.name
            ))),
        }
    }

    /// Checks `job`'s schedule (in its time zone) and timeout; returns the database time now and
    /// the schedule's next fire time after it ([`crate::sql::model::NEVER`] when none).
    async fn first_fire(&self, job: &NewJob) -> Result<(i64, i64), StoreError> {
        let schedule = crate::schedule::Schedule::parse_in(&job.cron, &job.timezone)
            .map_err(|err| StoreError::Invalid(err.to_string()))?;
        if job.timeout_ms < 1000 {
            return Err(StoreError::Invalid(
                "timeout must be at least 1000 ms".to_owned(),
            ));
        }
        let now = self.now().await?;
        Ok((
            now,
            next_fire(&schedule, now).unwrap_or(crate::sql::model::NEVER),
        ))
    }

    /// Every job, by id.
    pub async fn list(&self) -> sqlx::Result<Vec<JobRow>> {
        let rows = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs ORDER BY id"))
            .fetch_all(&self.pools.reads().await)
            .await?;
        rows.iter().map(job_from_row).collect()
    }

    /// One job by id.
    pub async fn get(&self, id: i64) -> sqlx::Result<Option<JobRow>> {
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pools.reads().await)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// One job by id (all digits) or name.
    pub async fn find(&self, id_or_name: &str) -> sqlx::Result<Option<JobRow>> {
        if let Ok(id) = id_or_name.parse::<i64>() {
            if let Some(job) = self.get(id).await? {
                return Ok(Some(job));
            }
        }
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE name = $1"))
            .bind(id_or_name)
            .fetch_optional(&self.pools.reads().await)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Stops a job: status `paused`, version bumped (so a running holder's next heartbeat and
    /// final write are refused), its running run recorded as fenced. Idempotent.
    pub async fn stop(&self, id: i64) -> Result<(), StoreError> {
        let now = self.now().await?;
        let mut tx = self.pools.writes().await.begin().await?;
        let exists = sqlx::query_scalar::<_, i64>("SELECT id FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Err(StoreError::NotFound);
        }
        sqlx::query(
            "UPDATE jobs SET status = 'paused', version = version + 1, owner = '', \
             trigger_at = 0, utime = $2 WHERE id = $1 AND status <> 'paused'",
        )
        .bind(id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE job_runs SET status = 'fenced', finished_at = $2, \
             error = 'the job was stopped while running' \
             WHERE job_id = $1 AND status = 'running'",
        )
        .bind(id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Resumes a stopped job from the schedule's next fire time after now. Idempotent.
    pub async fn resume(&self, id: i64) -> Result<(), StoreError> {
        let job = self.get(id).await?.ok_or(StoreError::NotFound)?;
        if job.status != JobStatus::Paused {
            return Ok(());
        }
        let schedule = job
            .schedule()
            .map_err(|err| StoreError::Invalid(err.to_string()))?;
        let now = self.now().await?;
        let next_time = next_fire(&schedule, now).unwrap_or(crate::sql::model::NEVER);
        sqlx::query(
            "UPDATE jobs SET status = 'waiting', next_time = $2, version = version + 1, \
             utime = $3 WHERE id = $1 AND status = 'paused'",
        )
        .bind(id)
        .bind(next_time)
        .bind(now)
        .execute(&self.pools.writes().await)
        .await?;
        Ok(())
    }

    /// Asks for one run now, without moving the schedule (a running job runs it after the
    /// current run). A stopped job refuses. The trigger keeps the caller's trace context, if
    /// the store was given a hook for it (a later trigger before the run replaces both).
    pub async fn trigger(&self, id: i64) -> Result<(), StoreError> {
        let job = self.get(id).await?.ok_or(StoreError::NotFound)?;
        if job.status == JobStatus::Paused {
            return Err(StoreError::Paused(job.name));
        }
        let now = self.now().await?;
        let trace = self
            .trace_context
            .and_then(|current| current())
            .unwrap_or_default();
        sqlx::query(
            "UPDATE jobs SET trigger_at = $2, trigger_trace = $3 \
             WHERE id = $1 AND status <> 'paused'",
        )
        .bind(id)
        .bind(now)
        .bind(trace)
        .execute(&self.pools.writes().await)
        .await?;
        Ok(())
    }

    /// Deletes the finished runs whose fire time is before `before` (ms, database clock), at most
    /// `batch` rows per statement so SQLite's single writer is never held long; runs still
    /// `running` are kept. Returns how many were deleted.
    pub async fn purge_runs_before(&self, before: i64, batch: i64) -> sqlx::Result<u64> {
        let batch = batch.max(1);
        let mut deleted = 0;
        loop {
            let purged = sqlx::query(
                "DELETE FROM job_runs WHERE id IN (SELECT id FROM job_runs \
                 WHERE scheduled_at < $1 AND status <> 'running' LIMIT $2)",
            )
            .bind(before)
            .bind(batch)
            .execute(&self.pools.writes().await)
            .await?
            .rows_affected();
            deleted += purged;
            if purged < u64::try_from(batch).unwrap_or(u64::MAX) {
                return Ok(deleted);
            }
        }
    }

    /// The job's runs, newest fire time first, at most `limit`.
    pub async fn runs(&self, job_id: i64, limit: i64) -> sqlx::Result<Vec<RunRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM job_runs WHERE job_id = $1 \
             ORDER BY scheduled_at DESC LIMIT $2"
        ))
        .bind(job_id)
        .bind(limit)
        .fetch_all(&self.pools.reads().await)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// Up to `limit` jobs that may be claimable now: waiting and due or triggered, or running
    /// with a heartbeat older than `lease_ms`; earliest first, jobs due at the same time in a
    /// random order (instances polling together then mostly claim different ones instead of
    /// all racing for the same first few).
    ///
    /// One round trip when something is due: the database time is read by the same statement.
    /// When nothing is, a second statement reads the time to sleep until. (The worker polls
    /// with [`poll`](Self::poll), which reads and claims in one transaction.)
    pub async fn due(&self, limit: usize, lease_ms: i64) -> sqlx::Result<Due> {
        let mut connection = self.pools.reads().await.acquire().await?;
        let order = "next_time, random()";
        if let Some(due) = self
            .read_due(&mut connection, limit, lease_ms, order, "")
            .await?
        {
            return Ok(due);
        }
        let probe = self.probe(&mut connection, lease_ms).await?;
        Ok(Due {
            now: probe.now,
            jobs: Vec::new(),
            earliest_next: probe.earliest_next,
        })
    }

    /// Up to `limit` jobs that may be claimable now, read on `connection` with the database
    /// time in one statement, in `order`, with `lock` (a locking clause, or nothing) applied;
    /// `None` when there are none.
    async fn read_due(
        &self,
        connection: &mut sqlx::AnyConnection,
        limit: usize,
        lease_ms: i64,
        order: &str,
        lock: &str,
    ) -> sqlx::Result<Option<Due>> {
        let rows = sqlx::query(&format!(
            "WITH clock AS (SELECT {} AS db_now) \
             SELECT clock.db_now, {JOB_COLUMNS} FROM clock JOIN jobs ON {DUE} \
             ORDER BY {order} LIMIT $2 {lock}",
            self.clock_sql(connection)
        ))
        .bind(lease_ms)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *connection)
        .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        Ok(Some(Due {
            now: first.try_get("db_now")?,
            jobs: rows.iter().map(job_from_row).collect::<sqlx::Result<_>>()?,
            earliest_next: None,
        }))
    }

    /// A look at the jobs without reading any: the database time, whether any job may be
    /// claimable now, and the earliest `next_time` among waiting jobs or lease expiry among
    /// running ones (`None` when there are none), in one statement.
    async fn probe(
        &self,
        connection: &mut sqlx::AnyConnection,
        lease_ms: i64,
    ) -> sqlx::Result<Probe> {
        // A running job's holder that stops heartbeating can be taken over the moment its
        // lease runs out: that moment is a wake-up time like a fire time.
        let (now, any_due, earliest_next) = sqlx::query_as::<_, (i64, i64, Option<i64>)>(&format!(
            "WITH clock AS (SELECT {} AS db_now) \
             SELECT clock.db_now, \
                CAST(CASE WHEN EXISTS (SELECT 1 FROM jobs WHERE {DUE}) THEN 1 ELSE 0 END \
                     AS BIGINT), \
                (SELECT MIN(CASE WHEN status = 'waiting' THEN next_time \
                                 ELSE utime + $1 + 1 END) \
                 FROM jobs WHERE status IN ('waiting', 'running')) \
             FROM clock",
            self.clock_sql(connection)
        ))
        .bind(lease_ms)
        .fetch_one(connection)
        .await?;
        Ok(Probe {
            now,
            any_due: any_due != 0,
            earliest_next,
        })
    }

    /// Claims `job` as `owner` per `plan` (decided at database time `now`): one transaction with
    /// the compare-and-swap on `version`, the run row and any misfired rows. `None` when another
    /// instance won, or when nothing was left to run (record-only claims, a fire time that
    /// already has a row).
    pub async fn claim(
        &self,
        job: &JobRow,
        plan: &ClaimPlan,
        owner: &str,
        now: i64,
        lease_ms: i64,
    ) -> sqlx::Result<Option<Claim>> {
        let mut claims = self
            .claim_many(&[(job, plan)], owner, now, lease_ms)
            .await?;
        Ok(claims.pop().flatten())
    }

    /// [`claim`](Self::claim) of several jobs in one transaction: what one poll found due is
    /// claimed with one commit, not one per job (on SQLite's single writer, a hundred jobs due
    /// in the same second were a hundred commits in a row, and the last one started that much
    /// late). The compare-and-swaps run in job id order, so two instances claiming overlapping
    /// sets on PostgreSQL queue on the same rows in the same order instead of deadlocking; the
    /// loser of each finds the version moved and claims nothing. Results are in the order of
    /// `jobs`. A database error claims none of them (they stay due for the next poll).
    pub async fn claim_many(
        &self,
        jobs: &[(&JobRow, &ClaimPlan)],
        owner: &str,
        now: i64,
        lease_ms: i64,
    ) -> sqlx::Result<Vec<Option<Claim>>> {
        let mut tx = self.pools.writes().await.begin().await?;
        let claims = self
            .claim_in(&mut tx, jobs, owner, now, lease_ms, Locked::No)
            .await?;
        tx.commit().await?;
        Ok(claims)
    }

    /// One poll: reads up to `limit` jobs that may be claimable now (as [`due`](Self::due)),
    /// plans each with `plan` (given the job and the database time; `None` declines it) and
    /// claims the planned ones in one transaction. The results keep `plan`'s payload.
    ///
    /// The read is the claim's first statement, so instances polling at the same fire time
    /// take different jobs, all of them at once, instead of reading the same candidates and
    /// queueing on each other's row locks (three instances claimed a hundred due jobs in four
    /// rounds, one after the other, each waiting for the previous commit and then polling again
    /// for what none of them had read). On PostgreSQL it is `FOR UPDATE SKIP LOCKED`: a row
    /// another transaction holds is not seen by this poll, and the next one finds it if it is
    /// still due. On SQLite it runs under the write lock (`BEGIN IMMEDIATE`), after a look on
    /// the read pool, so a poll that finds nothing never takes the single writer.
    pub async fn poll<T>(
        &self,
        limit: usize,
        lease_ms: i64,
        owner: &str,
        plan: impl FnMut(&JobRow, i64) -> Option<(ClaimPlan, T)>,
    ) -> sqlx::Result<Polled<T>> {
        let writes = self.pools.writes().await;
        let postgres = writes
            .connect_options()
            .database_url
            .scheme()
            .starts_with("postgres");
        let mut connection;
        let mut tx = if postgres {
            connection = writes.acquire().await?;
            sqlx::Connection::begin(&mut *connection).await?
        } else {
            // Look before taking the single writer: most polls find nothing.
            let mut look = self.pools.reads().await.acquire().await?;
            let probe = self.probe(&mut look, lease_ms).await?;
            if !probe.any_due {
                return Ok(probe.into());
            }
            // Read them under the write lock, which another instance's claim of the same jobs
            // held: what it took is no longer due, and this one takes the rest at once.
            connection = writes.acquire().await?;
            sqlx::Connection::begin_with(&mut *connection, "BEGIN IMMEDIATE").await?
        };
        // Under SQLite's write lock no other instance claims at the same time: earliest first,
        // no shuffle needed.
        let (order, lock) = if postgres {
            ("next_time, random()", "FOR UPDATE OF jobs SKIP LOCKED")
        } else {
            ("next_time", "")
        };
        let Some(due) = self.read_due(&mut tx, limit, lease_ms, order, lock).await? else {
            tx.rollback().await?;
            // Any candidate another instance holds (being claimed, or released) shows here as
            // due or soon: the poller looks again shortly.
            return Ok(self.probe(&mut connection, lease_ms).await?.into());
        };
        let polled = self
            .claim_polled(&mut tx, due, owner, lease_ms, plan)
            .await?;
        tx.commit().await?;
        Ok(polled)
    }

    /// Plans the jobs of `due` and claims the planned ones in `tx`, which read them under lock
    /// (see [`poll`](Self::poll)) and which the caller commits.
    async fn claim_polled<T>(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        due: Due,
        owner: &str,
        lease_ms: i64,
        mut plan: impl FnMut(&JobRow, i64) -> Option<(ClaimPlan, T)>,
    ) -> sqlx::Result<Polled<T>> {
        let found = due.jobs.len();
        let mut planned: Vec<(JobRow, ClaimPlan, T)> = Vec::new();
        for job in due.jobs {
            if let Some((claim_plan, payload)) = plan(&job, due.now) {
                planned.push((job, claim_plan, payload));
            }
        }
        let jobs: Vec<(&JobRow, &ClaimPlan)> =
            planned.iter().map(|(job, plan, _)| (job, plan)).collect();
        // One result per job (none and no statement when nothing was planned).
        let claims = self
            .claim_in(tx, &jobs, owner, due.now, lease_ms, Locked::Yes)
            .await?;
        Ok(Polled {
            now: due.now,
            found,
            claims: planned
                .into_iter()
                .zip(claims)
                .map(|((job, plan, payload), claim)| (job, plan, payload, claim))
                .collect(),
            earliest_next: None,
        })
    }

    /// [`claim_many`](Self::claim_many) in `tx`, which the caller commits. `locked`: the rows
    /// are locked by `tx` already (read `FOR UPDATE`), so no other instance can move them.
    async fn claim_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        jobs: &[(&JobRow, &ClaimPlan)],
        owner: &str,
        now: i64,
        lease_ms: i64,
        locked: Locked,
    ) -> sqlx::Result<Vec<Option<Claim>>> {
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_unstable_by_key(|&index| jobs[index].0.id);
        let clock = self.clock_sql(tx);
        // (index in `jobs`, token) of each compare-and-swap won, in id order.
        let mut won: Vec<(usize, i64)> = Vec::new();
        // The start is read by the compare-and-swaps, after they waited for the previous
        // holders' releases to commit: on the record, a run never starts before the previous
        // one ended.
        let mut started_at = i64::MIN;
        for chunk in order.chunks(CLAIM_CHUNK) {
            if locked == Locked::No {
                lock_in_id_order(tx, jobs, chunk).await?;
            }
            let (tokens, read_at) =
                claim_rows(tx, jobs, chunk, owner, now, lease_ms, &clock).await?;
            started_at = started_at.max(read_at);
            won.extend(
                chunk.iter().filter_map(|&index| {
                    tokens.get(&jobs[index].0.id).map(|&token| (index, token))
                }),
            );
        }
        let mut claims: Vec<Option<Claim>> = vec![None; jobs.len()];
        if won.is_empty() {
            return Ok(claims);
        }
        let mut misfired = 0;
        // Run rows: a takeover passes the fire time's row to its new holder; the others get a
        // new row, all in one insert.
        let mut run_ids: HashMap<i64, i64> = HashMap::new();
        let mut fresh = Vec::new();
        for &(index, token) in &won {
            let (job, plan) = jobs[index];
            insert_runs(
                tx,
                job.id,
                &plan.misfired,
                token,
                owner,
                RunStatus::Misfired,
            )
            .await?;
            misfired += plan.misfired.len();
            match plan.kind {
                ClaimKind::RecordOnly => {}
                ClaimKind::Takeover => {
                    let taken = sqlx::query_scalar::<_, i64>(
                        "UPDATE job_runs SET token = $3, owner = $4, started_at = $5, \
                         finished_at = NULL, status = 'running', error = NULL \
                         WHERE job_id = $1 AND scheduled_at = $2 RETURNING id",
                    )
                    .bind(job.id)
                    .bind(plan.run_at)
                    .bind(token)
                    .bind(owner)
                    .bind(started_at)
                    .fetch_optional(&mut **tx)
                    .await?;
                    match taken {
                        Some(id) => {
                            run_ids.insert(job.id, id);
                        }
                        None => fresh.push((job.id, plan.run_at, token)),
                    }
                }
                ClaimKind::Scheduled | ClaimKind::Triggered => {
                    fresh.push((job.id, plan.run_at, token));
                }
            }
        }
        for chunk in fresh.chunks(INSERT_CHUNK) {
            run_ids.extend(insert_running(tx, chunk, owner, started_at).await?);
        }
        for &(index, token) in &won {
            let (job, plan) = jobs[index];
            if plan.kind == ClaimKind::RecordOnly {
                continue;
            }
            let Some(&run_id) = run_ids.get(&job.id) else {
                // The fire time already has a row (a trigger landing on a recorded fire time):
                // nothing to run; hand the job back.
                sqlx::query(
                    "UPDATE jobs SET status = 'waiting', owner = '' WHERE id = $1 AND version = $2",
                )
                .bind(job.id)
                .bind(token)
                .execute(&mut **tx)
                .await?;
                tracing::warn!(job = %job.name, run_at = plan.run_at, "fire time already recorded; not running it again");
                continue;
            };
            claims[index] = Some(Claim {
                job_id: job.id,
                token,
                run_id,
                run_at: plan.run_at,
                next_time: plan.next_time,
                kind: plan.kind,
                claimed_at: now,
                trace: (plan.kind == ClaimKind::Triggered && !job.trigger_trace.is_empty())
                    .then(|| job.trigger_trace.clone()),
            });
        }
        crate::sql::model::note_misfired(misfired);
        Ok(claims)
    }

    /// Renews the claim's heartbeat. `Ok(false)`: the token is stale (stopped or taken over).
    pub async fn heartbeat(&self, claim: &Claim) -> sqlx::Result<bool> {
        let now = self.now().await?;
        let updated = sqlx::query(
            "UPDATE jobs SET utime = $3 WHERE id = $1 AND version = $2 AND status = 'running'",
        )
        .bind(claim.job_id)
        .bind(claim.token)
        .bind(now)
        .execute(&self.pools.writes().await)
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    /// Records the run's outcome and releases the job with its next fire time (fire times that
    /// came due during the run are recorded as skipped), in one transaction conditional on the
    /// token.
    /// `Ok(false)`: the token is stale and nothing was written.
    pub async fn finish(
        &self,
        claim: &Claim,
        schedule: &crate::schedule::Schedule,
        status: RunStatus,
        error: Option<&str>,
    ) -> sqlx::Result<bool> {
        let now = self.now().await?;
        // Fire times already due when the claim was made are a backlog (catch-up, or a takeover
        // after a silent holder): they stay due for the next claim and its misfire policy. Only
        // fire times that came due during this run are skipped (overlap is forbidden).
        let (skipped, next_time) = if claim.next_time <= claim.claimed_at {
            (Vec::new(), claim.next_time)
        } else {
            passed_during_run(schedule, claim.next_time, now)
        };
        let mut tx = self.pools.writes().await.begin().await?;
        let released = sqlx::query(
            "UPDATE jobs SET status = 'waiting', owner = '', utime = $3, next_time = $4 \
             WHERE id = $1 AND version = $2 AND status = 'running'",
        )
        .bind(claim.job_id)
        .bind(claim.token)
        .bind(now)
        .bind(next_time)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if released != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query(
            "UPDATE job_runs SET status = $3, finished_at = $4, error = $5 \
             WHERE id = $1 AND token = $2",
        )
        .bind(claim.run_id)
        .bind(claim.token)
        .bind(status.as_str())
        .bind(now)
        .bind(error)
        .execute(&mut *tx)
        .await?;
        // The fire time being run may itself be among them (a trigger): its row exists already.
        insert_runs(
            &mut tx,
            claim.job_id,
            &skipped,
            claim.token,
            "",
            RunStatus::Skipped,
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}

/// Locks the rows of the jobs at `indexes` in id order, on PostgreSQL, before their
/// compare-and-swaps: the update locks its rows in its plan's order, which differs between
/// statements (seen: deadlocks between instances claiming overlapping sets). An instance
/// claiming some of the same jobs waits here, then finds them taken. (SQLite has one writer:
/// nothing to order.)
async fn lock_in_id_order(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    jobs: &[(&JobRow, &ClaimPlan)],
    indexes: &[usize],
) -> sqlx::Result<()> {
    if tx.backend_name() != "PostgreSQL" {
        return Ok(());
    }
    let ids: Vec<String> = indexes
        .iter()
        .map(|&index| jobs[index].0.id.to_string())
        .collect();
    sqlx::query("SELECT id FROM jobs WHERE id = ANY(CAST($1 AS BIGINT[])) ORDER BY id FOR UPDATE")
        .bind(format!("{{{}}}", ids.join(",")))
        .fetch_all(&mut **tx)
        .await?;
    Ok(())
}

/// The compare-and-swaps of the jobs at `indexes` (in id order) as one statement; returns the
/// new version (the token) of each job won, by id, and the latest time (`clock`, an SQL
/// expression) the statement read after a row's compare-and-swap (`i64::MIN` when it won
/// none). One statement, not one per job: on PostgreSQL each is a round trip, and the claims'
/// start is read after the last of them.
async fn claim_rows(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    jobs: &[(&JobRow, &ClaimPlan)],
    indexes: &[usize],
    owner: &str,
    now: i64,
    lease_ms: i64,
    clock: &str,
) -> sqlx::Result<(HashMap<i64, i64>, i64)> {
    const COLUMNS: usize = 6;
    let after = indexes.len() * COLUMNS;
    // Each row of `c`: the job, the version it was read at, the fire time to run, the next
    // fire time, whether it is a trigger's claim, whether it runs (not record-only). Columns
    // are renamed from VALUES' own names, which both engines give (`column1`, …).
    let sql = format!(
        "UPDATE jobs SET status = CASE WHEN c.running = 1 THEN 'running' ELSE 'waiting' END, \
             version = version + 1, \
             owner = CASE WHEN c.running = 1 THEN ${owner} ELSE '' END, utime = ${now}, \
             scheduled_at = CASE WHEN c.running = 1 THEN c.run_at ELSE scheduled_at END, \
             next_time = c.next, \
             trigger_at = CASE WHEN c.triggered = 1 THEN 0 ELSE trigger_at END, \
             trigger_trace = CASE WHEN c.triggered = 1 THEN '' ELSE trigger_trace END \
         FROM (SELECT v.column1 AS id, v.column2 AS seen, v.column3 AS run_at, \
                      v.column4 AS next, v.column5 AS triggered, v.column6 AS running \
               FROM (VALUES {values}) AS v) AS c \
         WHERE jobs.id = c.id AND jobs.version = c.seen AND ( \
             (jobs.status = 'waiting' AND (jobs.next_time <= ${now} OR jobs.trigger_at > 0)) \
             OR (jobs.status = 'running' AND jobs.utime < ${stale})) \
         RETURNING jobs.id, jobs.version, {clock}",
        values = values_list(indexes.len(), COLUMNS),
        owner = after + 1,
        now = after + 2,
        stale = after + 3,
    );
    let mut query = sqlx::query(&sql);
    for &index in indexes {
        let (job, plan) = jobs[index];
        query = query
            .bind(job.id)
            .bind(job.version)
            .bind(plan.run_at)
            .bind(plan.next_time)
            .bind(i64::from(plan.kind == ClaimKind::Triggered))
            .bind(i64::from(plan.kind != ClaimKind::RecordOnly));
    }
    let rows = query
        .bind(owner)
        .bind(now)
        .bind(now - lease_ms)
        .fetch_all(&mut **tx)
        .await?;
    let mut read_at = i64::MIN;
    for row in &rows {
        read_at = read_at.max(row.try_get::<i64, _>(2)?);
    }
    Ok((id_pairs(&rows)?, read_at))
}

/// Inserts the running rows of claims, `(job, fire time, token)` each; returns the run id of
/// each job whose fire time had no row yet (the others already have one), by job.
async fn insert_running(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    runs: &[(i64, i64, i64)],
    owner: &str,
    now: i64,
) -> sqlx::Result<HashMap<i64, i64>> {
    let sql = format!(
        "INSERT INTO job_runs (job_id, scheduled_at, token, owner, started_at, status) VALUES {} \
         ON CONFLICT (job_id, scheduled_at) DO NOTHING RETURNING job_id, id",
        values_list(runs.len(), 6)
    );
    let mut query = sqlx::query(&sql);
    for &(job_id, run_at, token) in runs {
        query = query
            .bind(job_id)
            .bind(run_at)
            .bind(token)
            .bind(owner)
            .bind(now)
            .bind(RunStatus::Running.as_str());
    }
    id_pairs(&query.fetch_all(&mut **tx).await?)
}

/// The first two columns of each row, both integers.
fn id_pairs(rows: &[AnyRow]) -> sqlx::Result<HashMap<i64, i64>> {
    rows.iter()
        .map(|row| Ok((row.try_get::<i64, _>(0)?, row.try_get::<i64, _>(1)?)))
        .collect()
}

/// Records fire times that did not run (misfired, skipped); existing rows are left alone.
async fn insert_runs(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    job_id: i64,
    times: &[i64],
    token: i64,
    owner: &str,
    status: RunStatus,
) -> sqlx::Result<()> {
    for chunk in times.chunks(INSERT_CHUNK) {
        let sql = format!(
            "INSERT INTO job_runs (job_id, scheduled_at, token, owner, status) VALUES {} \
             ON CONFLICT (job_id, scheduled_at) DO NOTHING",
            values_list(chunk.len(), 5)
        );
        let mut query = sqlx::query(&sql);
        for &time in chunk {
            query = query
                .bind(job_id)
                .bind(time)
                .bind(token)
                .bind(owner)
                .bind(status.as_str());
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::values_list;

    #[test]
    fn values_list_numbers_parameters_row_by_row() {
        assert_eq!(values_list(2, 3), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(values_list(1, 1), "($1)");
    }
}
