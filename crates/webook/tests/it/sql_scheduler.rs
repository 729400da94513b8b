//! The SQL preemptive scheduler's store and worker on SQLite and PostgreSQL.
//!
//! Store tests drive the database clock by hand (`DbClock::Manual`), so due-ness, leases and
//! misfires are deterministic: exclusive claims under contention, misfire policies recording
//! every missed fire time, takeover of a silent holder with its writes refused afterwards, stop /
//! resume / trigger, fire times passing during a run recorded as skipped, and racing batches
//! of claims (one poll's jobs in one transaction) winning each job once. Worker tests run the
//! real poll loop on the database's own clock: fire times run once each across two instances,
//! a holder that never heartbeats is taken over, and a poller wakes when a lease runs out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use async_trait::async_trait;
use scheduler::{
    sql::{
        plan_claim, ClaimKind, DbClock, Dialect, Executor, Executors, JobRow, JobStatus, Misfire,
        NewJob, OverlapPolicy, RunStatus, SqlJobStore, SqlScheduler, StoreError, WorkerOptions,
    },
    JobContext,
};

use platform::testing::{wait_until, TestDb};

const SECOND: i64 = 1000;
/// 2026-01-01T00:00:00Z in ms.
const T0: i64 = 1_767_225_600_000;
const LEASE: i64 = 10 * SECOND;
const MISFIRE_AFTER: i64 = 5 * SECOND;

platform::backend_tests!(webook::schema::MIGRATIONS;
    one_of_many_concurrent_claims_wins,
    racing_batches_of_claims_win_each_job_once,
    misfire_policies_record_every_missed_fire_time,
    a_job_twelve_thousand_fire_times_behind_runs_the_latest,
    a_silent_holder_is_taken_over_and_its_writes_refused,
    stop_fences_the_holder_resume_and_trigger_keep_the_schedule,
    fire_times_passing_during_a_run_are_recorded_as_skipped,
    two_workers_run_each_fire_time_once,
    a_worker_takes_over_a_job_whose_holder_never_heartbeats,
    a_worker_wakes_when_a_lease_runs_out_not_at_its_next_poll,
    an_http_job_fails_on_a_non_2xx_answer_and_on_a_timeout,
    instances_polling_at_once_claim_every_due_job_in_one_poll_each,
);

fn dialect(db: &TestDb) -> Dialect {
    webook::jobs::dialect(db.db.kind())
}

fn store(db: &TestDb, clock: DbClock) -> SqlJobStore {
    SqlJobStore::new(
        db.db.pool().any_pool().clone(),
        db.db.writer().any_pool().clone(),
        clock,
    )
}

fn manual(db: &TestDb, at: i64) -> (SqlJobStore, Arc<AtomicI64>) {
    let now = Arc::new(AtomicI64::new(at));
    (store(db, DbClock::Manual(now.clone())), now)
}

fn new_job(name: &str, cron: &str, misfire: Misfire) -> NewJob {
    NewJob {
        name: name.to_owned(),
        cron: cron.to_owned(),
        timezone: "UTC".to_owned(),
        executor: "record".to_owned(),
        cfg: "{}".to_owned(),
        misfire,
        overlap: OverlapPolicy::Forbid,
        timeout_ms: 60_000,
    }
}

/// Polls and claims every claimable job once as `owner`; returns the claims won.
async fn claim_due(store: &SqlJobStore, owner: &str) -> Vec<scheduler::sql::Claim> {
    let due = store.due(100, LEASE).await.unwrap();
    let mut claims = Vec::new();
    for job in &due.jobs {
        let schedule = job.schedule().unwrap();
        let Some(plan) = plan_claim(job, &schedule, due.now, LEASE, MISFIRE_AFTER) else {
            continue;
        };
        if let Some(claim) = store
            .claim(job, &plan, owner, due.now, LEASE)
            .await
            .unwrap()
        {
            claims.push(claim);
        }
    }
    claims
}

async fn runs(store: &SqlJobStore, job_id: i64) -> Vec<(i64, RunStatus, i64)> {
    let mut runs: Vec<_> = store
        .runs(job_id, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|run| (run.scheduled_at - T0, run.status, run.token))
        .collect();
    runs.sort_by_key(|run| run.0);
    runs
}

async fn job(store: &SqlJobStore, id: i64) -> JobRow {
    store.get(id).await.unwrap().unwrap()
}

async fn one_of_many_concurrent_claims_wins(db: TestDb) {
    let (store, _now) = manual(&db, T0);
    let id = store
        .create(&new_job("contended", "@every 10s", Misfire::FireOnce))
        .await
        .unwrap();
    // Everyone polled the same snapshot at T0+10s and races the compare-and-swap.
    let (store, _now) = manual(&db, T0 + 10 * SECOND);
    let due = store.due(10, LEASE).await.unwrap();
    assert_eq!(due.jobs.len(), 1);
    let row = due.jobs[0].clone();
    let plan = plan_claim(
        &row,
        &row.schedule().unwrap(),
        due.now,
        LEASE,
        MISFIRE_AFTER,
    )
    .unwrap();
    let mut racers = Vec::new();
    for racer in 0..8 {
        let (store, row, plan) = (store.clone(), row.clone(), plan.clone());
        racers.push(tokio::spawn(async move {
            store
                .claim(&row, &plan, &format!("racer-{racer}"), due.now, LEASE)
                .await
                .unwrap()
        }));
    }
    let mut won = Vec::new();
    for racer in racers {
        won.extend(racer.await.unwrap());
    }
    assert_eq!(won.len(), 1, "exactly one claim wins: {won:?}");
    assert_eq!(won[0].token, row.version + 1);
    let job = job(&store, id).await;
    assert_eq!(job.status, JobStatus::Running);
    assert_eq!(job.next_time, T0 + 20 * SECOND);
    assert_eq!(
        runs(&store, id).await,
        [(10 * SECOND, RunStatus::Running, won[0].token)]
    );
}

async fn racing_batches_of_claims_win_each_job_once(db: TestDb) {
    let (store, _now) = manual(&db, T0);
    let mut ids = Vec::new();
    for index in 0..20 {
        ids.push(
            store
                .create(&new_job(
                    &format!("batch-{index}"),
                    "@every 10s",
                    Misfire::FireOnce,
                ))
                .await
                .unwrap(),
        );
    }
    // One job changes after the poll: its row in the batch is stale.
    let (store, _now) = manual(&db, T0 + 10 * SECOND);
    let due = store.due(100, LEASE).await.unwrap();
    assert_eq!(due.jobs.len(), 20);
    let stale = due.jobs[7].id;
    store.stop(stale).await.unwrap();
    let planned: Vec<_> = due
        .jobs
        .iter()
        .map(|row| {
            let plan =
                plan_claim(row, &row.schedule().unwrap(), due.now, LEASE, MISFIRE_AFTER).unwrap();
            (row.clone(), plan)
        })
        .collect();
    // Four instances claim the same poll's jobs at once, each listing them in another order
    // (the store takes them in id order whatever the caller's).
    let mut racers = Vec::new();
    for racer in 0..4_usize {
        let (store, mut planned) = (store.clone(), planned.clone());
        planned.rotate_left(racer * 5);
        racers.push(tokio::spawn(async move {
            let jobs: Vec<_> = planned.iter().map(|(row, plan)| (row, plan)).collect();
            let claims = store
                .claim_many(&jobs, &format!("racer-{racer}"), due.now, LEASE)
                .await
                .unwrap();
            assert_eq!(claims.len(), jobs.len(), "one result per job");
            for ((row, _), claim) in jobs.iter().zip(&claims) {
                if let Some(claim) = claim {
                    assert_eq!(claim.job_id, row.id, "results in the caller's order");
                }
            }
            claims.into_iter().flatten().collect::<Vec<_>>()
        }));
    }
    let mut won = Vec::new();
    for racer in racers {
        won.extend(racer.await.unwrap());
    }
    let mut claimed: Vec<i64> = won.iter().map(|claim| claim.job_id).collect();
    claimed.sort_unstable();
    let mut expected: Vec<i64> = ids.iter().copied().filter(|id| *id != stale).collect();
    expected.sort_unstable();
    assert_eq!(
        claimed, expected,
        "every job but the stale one, each won once"
    );
    for claim in &won {
        let row = job(&store, claim.job_id).await;
        assert_eq!((row.status, row.version), (JobStatus::Running, claim.token));
        assert_eq!(
            runs(&store, claim.job_id).await,
            [(10 * SECOND, RunStatus::Running, claim.token)]
        );
    }
    assert_eq!(job(&store, stale).await.status, JobStatus::Paused);
    assert!(
        runs(&store, stale).await.is_empty(),
        "the stale row claimed nothing"
    );
}

async fn misfire_policies_record_every_missed_fire_time(db: TestDb) {
    let (store, now) = manual(&db, T0);
    let skip = store
        .create(&new_job("skip", "@every 10s", Misfire::Skip))
        .await
        .unwrap();
    let once = store
        .create(&new_job("once", "@every 10s", Misfire::FireOnce))
        .await
        .unwrap();
    let catch_up = store
        .create(&new_job("catch-up", "@every 10s", Misfire::CatchUp))
        .await
        .unwrap();
    // All instances were down from T0 to T0+65s: fire times 10 … 60 s passed.
    now.store(T0 + 65 * SECOND, Ordering::SeqCst);
    let claims = claim_due(&store, "w").await;
    assert_eq!(claims.len(), 2, "skip runs nothing: {claims:?}");

    let skip_runs = runs(&store, skip).await;
    assert_eq!(
        skip_runs
            .iter()
            .map(|run| (run.0, run.1))
            .collect::<Vec<_>>(),
        (1..=6)
            .map(|i| (i * 10 * SECOND, RunStatus::Misfired))
            .collect::<Vec<_>>()
    );
    assert_eq!(job(&store, skip).await.next_time, T0 + 70 * SECOND);
    assert_eq!(job(&store, skip).await.status, JobStatus::Waiting);

    let once_runs = runs(&store, once).await;
    assert_eq!(once_runs.len(), 6);
    assert!(once_runs[..5]
        .iter()
        .all(|run| run.1 == RunStatus::Misfired));
    assert_eq!(once_runs[5].0, 60 * SECOND);
    assert_eq!(once_runs[5].1, RunStatus::Running);

    // Catch-up runs the oldest first and leaves the rest due: run, finish, claim again.
    let schedule = job(&store, catch_up).await.schedule().unwrap();
    let mut ran = Vec::new();
    let mut claim = claims
        .into_iter()
        .find(|claim| claim.job_id == catch_up)
        .unwrap();
    loop {
        ran.push(claim.run_at - T0);
        assert!(store
            .finish(&claim, &schedule, RunStatus::Ok, None)
            .await
            .unwrap());
        match claim_due(&store, "w")
            .await
            .into_iter()
            .find(|claim| claim.job_id == catch_up)
        {
            Some(next) => claim = next,
            None => break,
        }
    }
    assert_eq!(ran, (1..=6).map(|i| i * 10 * SECOND).collect::<Vec<_>>());
    assert!(runs(&store, catch_up)
        .await
        .iter()
        .all(|run| run.1 == RunStatus::Ok));
    assert_eq!(job(&store, catch_up).await.next_time, T0 + 70 * SECOND);
}

/// More fire times missed than a claim records (`MAX_RECORDED_MISSES`): `fire_once` still runs
/// the true latest one — it used to run the 10 000th, 33 minutes stale, and leave the rest
/// without a row or a log — and `catch_up` runs exactly the newest 100.
async fn a_job_twelve_thousand_fire_times_behind_runs_the_latest(db: TestDb) {
    use scheduler::sql::{CATCH_UP_CAP, MAX_RECORDED_MISSES};

    let (store, now) = manual(&db, T0);
    let once = store
        .create(&new_job("once", "@every 1s", Misfire::FireOnce))
        .await
        .unwrap();
    let catch_up = store
        .create(&new_job("catch-up", "@every 1s", Misfire::CatchUp))
        .await
        .unwrap();
    // Down from T0 to T0 + 12 000.3 s: fire times 1 … 12 000 s passed.
    now.store(T0 + 12_000 * SECOND + 300, Ordering::SeqCst);
    let claims = claim_due(&store, "w").await;

    let once_claim = claims.iter().find(|claim| claim.job_id == once).unwrap();
    assert_eq!(
        once_claim.run_at,
        T0 + 12_000 * SECOND,
        "the latest fire time runs"
    );
    let once_runs = store.runs(once, 20_000).await.unwrap();
    let misfired = once_runs
        .iter()
        .filter(|run| run.status == RunStatus::Misfired)
        .count();
    assert_eq!(misfired, MAX_RECORDED_MISSES);
    assert_eq!(once_runs.len(), MAX_RECORDED_MISSES + 1);
    assert_eq!(job(&store, once).await.next_time, T0 + 12_001 * SECOND);

    let schedule = job(&store, catch_up).await.schedule().unwrap();
    let mut claim = claims
        .into_iter()
        .find(|claim| claim.job_id == catch_up)
        .unwrap();
    let mut ran = Vec::new();
    loop {
        ran.push((claim.run_at - T0) / SECOND);
        assert!(store
            .finish(&claim, &schedule, RunStatus::Ok, None)
            .await
            .unwrap());
        match claim_due(&store, "w")
            .await
            .into_iter()
            .find(|claim| claim.job_id == catch_up)
        {
            Some(next) => claim = next,
            None => break,
        }
    }
    let newest: Vec<i64> = (12_001 - CATCH_UP_CAP as i64..=12_000).collect();
    assert_eq!(
        ran, newest,
        "catch_up runs the newest {CATCH_UP_CAP}, oldest first"
    );
    assert_eq!(job(&store, catch_up).await.next_time, T0 + 12_001 * SECOND);
}

async fn a_silent_holder_is_taken_over_and_its_writes_refused(db: TestDb) {
    let (store, now) = manual(&db, T0);
    let id = store
        .create(&new_job("silent", "@every 10s", Misfire::FireOnce))
        .await
        .unwrap();
    now.store(T0 + 10 * SECOND, Ordering::SeqCst);
    let first = claim_due(&store, "a").await.pop().unwrap();
    let schedule = job(&store, id).await.schedule().unwrap();
    // Within the lease nobody else may claim it.
    now.store(T0 + 20 * SECOND, Ordering::SeqCst);
    assert!(claim_due(&store, "b").await.is_empty());
    // "a" goes silent; one lease after its last heartbeat "b" takes over the same fire time.
    now.store(T0 + 20 * SECOND + 1, Ordering::SeqCst);
    let second = claim_due(&store, "b").await.pop().unwrap();
    assert_eq!(second.kind, ClaimKind::Takeover);
    assert_eq!(second.run_at, first.run_at);
    assert!(second.token > first.token);
    assert_eq!(
        runs(&store, id).await,
        [(10 * SECOND, RunStatus::Running, second.token)]
    );
    // "a" wakes up: every write it attempts is refused and changes nothing.
    assert!(!store.heartbeat(&first).await.unwrap());
    assert!(!store
        .finish(&first, &schedule, RunStatus::Ok, None)
        .await
        .unwrap());
    assert_eq!(job(&store, id).await.owner, "b");
    assert_eq!(
        runs(&store, id).await,
        [(10 * SECOND, RunStatus::Running, second.token)]
    );
    assert!(store.heartbeat(&second).await.unwrap());
    assert!(store
        .finish(&second, &schedule, RunStatus::Ok, None)
        .await
        .unwrap());
    let released = job(&store, id).await;
    assert_eq!(released.status, JobStatus::Waiting);
    assert_eq!(released.owner, "");
    assert_eq!(
        runs(&store, id).await,
        [(10 * SECOND, RunStatus::Ok, second.token)]
    );
}

async fn stop_fences_the_holder_resume_and_trigger_keep_the_schedule(db: TestDb) {
    let (store, now) = manual(&db, T0);
    let id = store
        .create(&new_job("stoppable", "0 0 * * * *", Misfire::FireOnce))
        .await
        .unwrap();
    assert_eq!(job(&store, id).await.next_time, T0 + 3600 * SECOND);
    assert!(matches!(
        store
            .create(&new_job("stoppable", "@daily", Misfire::Skip))
            .await,
        Err(StoreError::Duplicate(_))
    ));
    assert!(
        matches!(store.create(&new_job("bad", "0 0 25 * * *", Misfire::Skip)).await, Err(StoreError::Invalid(message)) if message.contains("hour field"))
    );

    // A triggered run happens now and leaves the hourly schedule alone.
    now.store(T0 + 5 * SECOND, Ordering::SeqCst);
    store.trigger(id).await.unwrap();
    let triggered = claim_due(&store, "a").await.pop().unwrap();
    assert_eq!(triggered.kind, ClaimKind::Triggered);
    assert_eq!(triggered.run_at, T0 + 5 * SECOND);
    assert_eq!(job(&store, id).await.next_time, T0 + 3600 * SECOND);

    // Stopping while it runs fences the holder.
    store.stop(id).await.unwrap();
    let stopped = job(&store, id).await;
    assert_eq!(stopped.status, JobStatus::Paused);
    assert!(!store.heartbeat(&triggered).await.unwrap());
    let schedule = stopped.schedule().unwrap();
    assert!(!store
        .finish(&triggered, &schedule, RunStatus::Ok, None)
        .await
        .unwrap());
    assert_eq!(runs(&store, id).await[0].1, RunStatus::Fenced);
    assert!(matches!(
        store.trigger(id).await,
        Err(StoreError::Paused(_))
    ));
    now.store(T0 + 7200 * SECOND, Ordering::SeqCst);
    assert!(
        claim_due(&store, "a").await.is_empty(),
        "a stopped job is never claimed"
    );

    // Resume continues from the next fire time after now: no misfire storm.
    now.store(T0 + 7200 * SECOND + 30 * SECOND, Ordering::SeqCst);
    store.resume(id).await.unwrap();
    let resumed = job(&store, id).await;
    assert_eq!(resumed.status, JobStatus::Waiting);
    assert_eq!(resumed.next_time, T0 + 3 * 3600 * SECOND);
    assert!(claim_due(&store, "a").await.is_empty());
    assert!(matches!(store.stop(9999).await, Err(StoreError::NotFound)));
}

async fn fire_times_passing_during_a_run_are_recorded_as_skipped(db: TestDb) {
    let (store, now) = manual(&db, T0);
    let id = store
        .create(&new_job("slow", "@every 10s", Misfire::FireOnce))
        .await
        .unwrap();
    now.store(T0 + 10 * SECOND, Ordering::SeqCst);
    let claim = claim_due(&store, "a").await.pop().unwrap();
    // The run takes 35 s, heartbeating; fire times 20, 30 and 40 pass meanwhile.
    for at in [18, 26, 34, 42] {
        now.store(T0 + at * SECOND, Ordering::SeqCst);
        assert!(store.heartbeat(&claim).await.unwrap());
        assert!(claim_due(&store, "b").await.is_empty());
    }
    now.store(T0 + 45 * SECOND, Ordering::SeqCst);
    let schedule = job(&store, id).await.schedule().unwrap();
    assert!(store
        .finish(&claim, &schedule, RunStatus::Failed, Some("boom"))
        .await
        .unwrap());
    let recorded = runs(&store, id).await;
    assert_eq!(
        recorded
            .iter()
            .map(|run| (run.0, run.1))
            .collect::<Vec<_>>(),
        [
            (10 * SECOND, RunStatus::Failed),
            (20 * SECOND, RunStatus::Skipped),
            (30 * SECOND, RunStatus::Skipped),
            (40 * SECOND, RunStatus::Skipped)
        ]
    );
    assert_eq!(
        store
            .runs(id, 10)
            .await
            .unwrap()
            .last()
            .unwrap()
            .error
            .as_deref(),
        Some("boom")
    );
    assert_eq!(job(&store, id).await.next_time, T0 + 50 * SECOND);
}

/// Records each execution (job, fire time, token).
#[derive(Clone, Default)]
struct Recording(Arc<Mutex<Vec<(String, i64, u64)>>>);

#[async_trait]
impl Executor for Recording {
    fn name(&self) -> &str {
        "record"
    }

    fn check_cfg(&self, _cfg: &serde_json::Value) -> Result<(), String> {
        Ok(())
    }

    async fn execute(&self, job: &JobRow, ctx: JobContext) -> anyhow::Result<()> {
        self.0.lock().unwrap().push((
            job.name.clone(),
            ctx.scheduled_at().timestamp_millis(),
            ctx.fencing_token(),
        ));
        Ok(())
    }
}

fn worker(
    db: &TestDb,
    recording: &Recording,
    instance: &str,
    lease: Duration,
) -> scheduler::sql::RunningSqlScheduler {
    worker_polling(db, recording, instance, lease, Duration::from_millis(200))
}

/// [`worker`] with its longest idle poll.
fn worker_polling(
    db: &TestDb,
    recording: &Recording,
    instance: &str,
    lease: Duration,
    max_idle_poll: Duration,
) -> scheduler::sql::RunningSqlScheduler {
    let mut executors = Executors::new();
    executors.register(recording.clone());
    SqlScheduler::new(
        store(db, DbClock::Database(dialect(db))),
        executors,
        WorkerOptions {
            instance: instance.to_owned(),
            permits: 4,
            heartbeat: lease / 4,
            lease,
            max_idle_poll,
            misfire_after: Duration::from_secs(5),
            continue_trace: None,
        },
    )
    .start()
}

/// Creates an `@every 1s` job named `name` and claims its first fire time as a "ghost"
/// instance that then dies without a word (never heartbeats); returns the job and the claim.
async fn ghost_claims(store: &SqlJobStore, name: &str) -> (i64, scheduler::sql::Claim) {
    let id = store
        .create(&new_job(name, "@every 1s", Misfire::FireOnce))
        .await
        .unwrap();
    loop {
        if let Some(claim) = claim_due(store, "ghost").await.pop() {
            return (id, claim);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn ok_runs(store: &SqlJobStore, id: i64) -> Vec<scheduler::sql::RunRow> {
    store
        .runs(id, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|run| run.status == RunStatus::Ok)
        .collect()
}

async fn two_workers_run_each_fire_time_once(db: TestDb) {
    let store = store(&db, DbClock::Database(dialect(&db)));
    let id = store
        .create(&new_job("every-second", "@every 1s", Misfire::FireOnce))
        .await
        .unwrap();
    let recording = Recording::default();
    let a = worker(&db, &recording, "a", Duration::from_secs(4));
    let b = worker(&db, &recording, "b", Duration::from_secs(4));
    wait_until("five successful runs", || async {
        ok_runs(&store, id).await.len() >= 5
    })
    .await;
    a.stop(Duration::from_secs(5)).await;
    b.stop(Duration::from_secs(5)).await;

    let executions = recording.0.lock().unwrap().clone();
    let ticks: HashSet<i64> = executions.iter().map(|(_, tick, _)| *tick).collect();
    assert_eq!(
        ticks.len(),
        executions.len(),
        "a fire time ran twice: {executions:?}"
    );
    let ok = ok_runs(&store, id).await;
    assert_eq!(
        ok.len(),
        executions.len(),
        "every execution was recorded ok"
    );
    for run in &ok {
        assert!(executions.contains(&(
            "every-second".to_owned(),
            run.scheduled_at,
            u64::try_from(run.token).unwrap()
        )));
        assert!(run.started_at.unwrap() >= run.scheduled_at, "never early");
    }
    let job = job(&store, id).await;
    assert_eq!(job.status, JobStatus::Waiting);
    assert_eq!(job.owner, "");
}

async fn a_worker_takes_over_a_job_whose_holder_never_heartbeats(db: TestDb) {
    let store = store(&db, DbClock::Database(dialect(&db)));
    let (id, ghost) = ghost_claims(&store, "orphan").await;
    let recording = Recording::default();
    let worker = worker(&db, &recording, "rescuer", Duration::from_secs(1));
    wait_until(
        "the ghost's fire time to be re-run by the rescuer",
        || async {
            ok_runs(&store, id)
                .await
                .iter()
                .any(|run| run.scheduled_at == ghost.run_at && run.owner == "rescuer")
        },
    )
    .await;
    worker.stop(Duration::from_secs(5)).await;
    let rerun = ok_runs(&store, id)
        .await
        .into_iter()
        .find(|run| run.scheduled_at == ghost.run_at)
        .unwrap();
    assert!(rerun.token > ghost.token);
    assert!(!store.heartbeat(&ghost).await.unwrap());
}

async fn a_worker_wakes_when_a_lease_runs_out_not_at_its_next_poll(db: TestDb) {
    let store = store(&db, DbClock::Database(dialect(&db)));
    let (id, ghost) = ghost_claims(&store, "lapsed").await;
    // Nothing else is due: a poller that slept until its next poll would wake in 30 s.
    let started = std::time::Instant::now();
    let worker = worker_polling(
        &db,
        &Recording::default(),
        "rescuer",
        Duration::from_secs(1),
        Duration::from_secs(30),
    );
    let taken_over = || async {
        store
            .runs(id, 10)
            .await
            .unwrap()
            .into_iter()
            .any(|run| run.scheduled_at == ghost.run_at && run.token > ghost.token)
    };
    wait_until("the ghost's fire time to be taken over", taken_over).await;
    let waited = started.elapsed();
    worker.stop(Duration::from_secs(5)).await;
    assert!(
        waited < Duration::from_secs(5),
        "taken over {waited:?} after start: the lease is 1 s, the idle poll 30 s"
    );
}

/// A receiver answering 500 on `/fail` and never answering on `/hang`.
async fn unhappy_receiver() -> String {
    use axum::{http::StatusCode, routing::post, Router};
    let app = Router::new()
        .route(
            "/fail",
            post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "no") }),
        )
        .route("/hang", post(std::future::pending::<&'static str>));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn failed_error(store: &SqlJobStore, id: i64) -> String {
    store.runs(id, 10).await.unwrap().remove(0).error.unwrap()
}

async fn an_http_job_fails_on_a_non_2xx_answer_and_on_a_timeout(db: TestDb) {
    let base = unhappy_receiver().await;
    let store = store(&db, DbClock::Database(dialect(&db)));
    let mut ids = Vec::new();
    for (name, path, timeout_ms) in [
        ("answers-500", "fail?token=s3cret", 5000),
        ("never-answers", "hang?token=s3cret", 300),
    ] {
        let id = store
            .create(&NewJob {
                executor: "http".to_owned(),
                cfg: format!(r#"{{"url": "{base}/{path}", "timeout_ms": {timeout_ms}}}"#),
                ..new_job(name, "@yearly", Misfire::FireOnce)
            })
            .await
            .unwrap();
        store.trigger(id).await.unwrap();
        ids.push(id);
    }
    let mut executors = Executors::new();
    executors.register(
        scheduler::sql::HttpExecutor::new(
            scheduler::sql::TargetPolicy::allowing(vec!["127.0.0.0/8".parse().unwrap()]),
            "x-webook-",
        )
        .unwrap(),
    );
    let worker = SqlScheduler::new(
        store.clone(),
        executors,
        WorkerOptions {
            max_idle_poll: Duration::from_millis(100),
            ..WorkerOptions::default()
        },
    )
    .start();
    let finished = |id: i64| {
        let store = store.clone();
        async move {
            store
                .runs(id, 10)
                .await
                .unwrap()
                .first()
                .is_some_and(|run| run.status != RunStatus::Running)
        }
    };
    wait_until("both runs to finish", || async {
        finished(ids[0]).await && finished(ids[1]).await
    })
    .await;
    worker.stop(Duration::from_secs(5)).await;
    let failed = store.runs(ids[0], 10).await.unwrap().remove(0);
    assert_eq!(failed.status, RunStatus::Failed);
    let error = failed.error.unwrap();
    assert!(error.contains("500") && error.contains("/fail"), "{error}");
    let timed_out = store.runs(ids[1], 10).await.unwrap().remove(0);
    assert_eq!(timed_out.status, RunStatus::Failed);
    let error = timed_out.error.unwrap();
    assert!(error.contains("calling"), "{error}");
    // A query may hold a secret: the recorded errors never show it.
    for error in [&failed_error(&store, ids[0]).await, &error] {
        assert!(!error.contains("s3cret"), "{error}");
    }
}

/// Plans a due job as the worker does, with no payload.
fn plan_unit(job: &JobRow, now: i64) -> Option<(scheduler::sql::ClaimPlan, ())> {
    plan_claim(job, &job.schedule().unwrap(), now, LEASE, MISFIRE_AFTER).map(|plan| (plan, ()))
}

/// Three instances poll at the same fire time for a hundred due jobs, 64 each at most: between
/// them they claim all hundred in one poll each, each job once, and none of them loses a claim.
/// (When every instance read the same candidates and then claimed them, they queued on each
/// other's locks, lost the overlap and left the jobs none had read for another round.)
async fn instances_polling_at_once_claim_every_due_job_in_one_poll_each(db: TestDb) {
    let (store, now) = manual(&db, T0);
    for index in 0..100 {
        store
            .create(&new_job(
                &format!("tick-{index}"),
                "@every 10s",
                Misfire::FireOnce,
            ))
            .await
            .unwrap();
    }
    now.store(T0 + 10 * SECOND, Ordering::SeqCst);
    let mut polls = Vec::new();
    for instance in 0..3 {
        let store = store.clone();
        polls.push(tokio::spawn(async move {
            store
                .poll(64, LEASE, &format!("instance-{instance}"), plan_unit)
                .await
                .unwrap()
        }));
    }
    let mut won = HashSet::new();
    for poll in polls {
        let polled = poll.await.unwrap();
        assert_eq!(polled.now, T0 + 10 * SECOND);
        for (job, plan, (), claim) in polled.claims {
            assert_eq!(plan.kind, ClaimKind::Scheduled);
            let claim = claim.unwrap_or_else(|| panic!("{} lost its claim", job.name));
            assert!(won.insert(claim.job_id), "job {} claimed twice", job.name);
        }
    }
    assert_eq!(won.len(), 100, "every due job claimed in the first round");
    let after = store.poll(64, LEASE, "late", plan_unit).await.unwrap();
    assert_eq!(after.found, 0, "nothing left due");
    assert_eq!(after.earliest_next, Some(T0 + 10 * SECOND + LEASE + 1));
}

/// On PostgreSQL a poll passes over the jobs another transaction holds (another instance in the
/// middle of claiming them) and claims the others at once; the next poll finds the rest. The
/// claim of the same jobs through `claim_many`, which locks them all in id order, waits.
#[tokio::test]
async fn a_poll_on_postgresql_skips_jobs_another_transaction_holds() {
    use platform::config::DatabaseKind;
    let db = TestDb::new(DatabaseKind::Postgres, &webook::schema::MIGRATIONS).await;
    let (store, now) = manual(&db, T0);
    let mut ids = Vec::new();
    for index in 0..10 {
        ids.push(
            store
                .create(&new_job(
                    &format!("held-{index}"),
                    "@every 10s",
                    Misfire::FireOnce,
                ))
                .await
                .unwrap(),
        );
    }
    now.store(T0 + 10 * SECOND, Ordering::SeqCst);
    let held = &ids[..4];
    let mut other = db.db.writer().begin().await.unwrap();
    for id in held {
        sqlx::query("SELECT id FROM jobs WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_one(&mut *other)
            .await
            .unwrap();
    }

    let due = store.due(100, LEASE).await.unwrap();
    assert_eq!(due.jobs.len(), 10, "all ten are due");
    let plans: Vec<_> = due
        .jobs
        .iter()
        .map(|job| plan_unit(job, due.now).unwrap().0)
        .collect();
    let queued = {
        let store = store.clone();
        let jobs = due.jobs.clone();
        tokio::spawn(async move {
            let pairs: Vec<_> = jobs.iter().zip(&plans).collect();
            store
                .claim_many(&pairs, "queued", T0 + 10 * SECOND, LEASE)
                .await
                .unwrap()
        })
    };

    let polled = tokio::time::timeout(
        Duration::from_secs(10),
        store.poll(100, LEASE, "skipper", plan_unit),
    )
    .await
    .expect("the poll waited for the held rows")
    .unwrap();
    let claimed: HashSet<i64> = polled
        .claims
        .iter()
        .filter_map(|(_, _, (), claim)| claim.as_ref().map(|claim| claim.job_id))
        .collect();
    assert_eq!(polled.found, 6, "the held jobs are not read");
    let free: HashSet<i64> = ids[4..].iter().copied().collect();
    assert_eq!(claimed, free, "the others are claimed at once");
    assert!(!queued.is_finished(), "claim_many queues on the held rows");

    other.rollback().await.unwrap();
    let queued = queued.await.unwrap();
    let queued_won: HashSet<i64> = queued.iter().flatten().map(|claim| claim.job_id).collect();
    assert_eq!(
        queued_won,
        held.iter().copied().collect(),
        "once released, the queued claim wins the held jobs, and only those"
    );
}
