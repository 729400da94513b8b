//! Throughput and latency of the durable job scheduler, on SQLite and PostgreSQL (not a
//! criterion bench: the figures are whole-system rates with several instances).
//!
//! - **claims/s**: 1 000 jobs are due at once; 1 or 3 scheduler instances (each with its own
//!   pool, as separate processes would have) claim, run (a no-op executor) and release them all.
//!   Reported: jobs completed per second, from start until every job has an `ok` run.
//! - **schedule lag**: 100 `@every 1s` jobs run for 10 s on 3 instances; lag = a run's start
//!   minus its fire time (both from the database's clock), p50 and p99. Each instance has 64
//!   permits (runs at once), so the three can start all 100 together: the lag is the
//!   scheduler's, not a wait for a permit (with 32 each, 4 of every 100 waited for a run to
//!   end).
//!
//! Run with the test services (PostgreSQL needs them): `scripts/with-services.sh cargo bench -p
//! webook --bench job_claims`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};
use webook::schema::MIGRATIONS;

use async_trait::async_trait;
use platform::testing::TestDb;
use platform::{config::DatabaseKind, db::Db};
use scheduler::{
    sql::{
        Executor, Executors, JobRow, RunningSqlScheduler, SqlJobStore, SqlScheduler, WorkerOptions,
    },
    JobContext,
};
use webook::testing::test_config;

/// Does nothing, successfully.
struct Noop;

#[async_trait]
impl Executor for Noop {
    fn name(&self) -> &str {
        "noop"
    }

    fn check_cfg(&self, _cfg: &serde_json::Value) -> Result<(), String> {
        Ok(())
    }

    async fn execute(&self, _job: &JobRow, _ctx: JobContext) -> anyhow::Result<()> {
        Ok(())
    }
}

/// A store on its own pool to `url`, as a separate process would have.
async fn own_store(url: &str) -> (Db, SqlJobStore) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&test_config(dir.path(), url)).await.unwrap();
    let store = webook::jobs::store(&db);
    (db, store)
}

async fn start_instances(url: &str, count: usize) -> (Vec<Db>, Vec<RunningSqlScheduler>) {
    let mut pools = Vec::new();
    let mut instances = Vec::new();
    for index in 0..count {
        let (db, store) = own_store(url).await;
        let mut executors = Executors::new();
        executors.register(Noop);
        instances.push(
            SqlScheduler::new(
                store,
                executors,
                WorkerOptions {
                    instance: format!("bench-{index}"),
                    permits: 64,
                    max_idle_poll: Duration::from_millis(200),
                    ..WorkerOptions::default()
                },
            )
            .start(),
        );
        pools.push(db);
    }
    (pools, instances)
}

async fn insert_jobs(db: &Db, count: usize, cron: &str, next_time: i64) {
    let mut tx = db.writer().begin().await.unwrap();
    for index in 0..count {
        sqlx::query(
            "INSERT INTO jobs (name, cron, timezone, executor, cfg, status, next_time, utime, \
             ctime) VALUES ($1, $2, 'UTC', 'noop', '{}', 'waiting', $3, $3, $3)",
        )
        .bind(format!("job-{index}"))
        .bind(cron)
        .bind(next_time)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

async fn count(db: &Db, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(db.pool()).await.unwrap()
}

async fn claims_per_second(kind: DatabaseKind, instances: usize) -> f64 {
    const JOBS: usize = 1000;
    let test_db = TestDb::new(kind, &MIGRATIONS).await;
    let (_, store) = own_store(&test_db.url).await;
    let now = store.now().await.unwrap();
    insert_jobs(&test_db.db, JOBS, "@every 1h", now - 100).await;
    let started = Instant::now();
    let (_pools, running) = start_instances(&test_db.url, instances).await;
    while count(
        &test_db.db,
        "SELECT COUNT(*) FROM job_runs WHERE status = 'ok'",
    )
    .await
        < i64::try_from(JOBS).unwrap()
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    for instance in running {
        instance.stop(Duration::from_secs(5)).await;
    }
    #[allow(clippy::cast_precision_loss)]
    let rate = JOBS as f64 / elapsed.as_secs_f64();
    rate
}

async fn schedule_lag(kind: DatabaseKind) -> (i64, i64, usize) {
    let test_db = TestDb::new(kind, &MIGRATIONS).await;
    let (_, store) = own_store(&test_db.url).await;
    let now = store.now().await.unwrap();
    insert_jobs(&test_db.db, 100, "@every 1s", (now / 1000 + 1) * 1000).await;
    let (_pools, running) = start_instances(&test_db.url, 3).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    for instance in running {
        instance.stop(Duration::from_secs(5)).await;
    }
    let mut lags: Vec<i64> = sqlx::query_scalar(
        "SELECT started_at - scheduled_at FROM job_runs WHERE status = 'ok' ORDER BY 1",
    )
    .fetch_all(test_db.db.pool())
    .await
    .unwrap();
    lags.sort_unstable();
    let at = |p: usize| lags[(lags.len() - 1) * p / 100];
    (at(50), at(99), lags.len())
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; any other argument filters backends by name.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    for (name, kind) in [
        ("sqlite", DatabaseKind::Sqlite),
        ("postgres", DatabaseKind::Postgres),
    ] {
        if !filter.is_empty() && !filter.iter().any(|wanted| name.contains(wanted.as_str())) {
            continue;
        }
        for instances in [1, 3] {
            let rate = claims_per_second(kind, instances).await;
            println!("{name}: 1000 due jobs, {instances} instance(s): {rate:.0} claims/s");
        }
        let (p50, p99, runs) = schedule_lag(kind).await;
        println!("{name}: schedule lag over {runs} runs: p50 {p50} ms, p99 {p99} ms");
    }
}
