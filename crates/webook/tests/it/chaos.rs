//! Chaos test of the SQL preemptive scheduler with real processes, on SQLite (three processes
//! sharing one file) and PostgreSQL.
//!
//! Three `webook serve --role worker` processes run an `@every 1s` job and two slower ones (2 s
//! and 4 s runs), all `http` jobs calling a receiver in this test, for about 60 s, while the test
//! SIGKILLs and restarts a worker every few seconds and once SIGSTOPs one past its lease before
//! SIGCONTing it. Then, over `job_runs` and what the receiver saw:
//! - every fire time in the window has exactly one row, and it is ok, misfired, skipped or
//!   fenced — never lost, never still running;
//! - a committed (ok) run carries the highest token that executed its fire time: a replaced
//!   holder's result was never accepted;
//! - committed runs of one job never overlap in time (overlap is forbidden);
//! - with one worker left running past the lease, no job stays `running` on a dead holder, and
//!   each job's backlog inside the window is claimed and finished;
//! - a fire time re-run after a kill or stop was taken over within the lease (p50/p99
//!   printed).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{extract::Query, http::HeaderMap, routing::post, Router};
use scheduler::sql::{Misfire, NewJob, OverlapPolicy, RunStatus};

use crate::common::Lcg;
use platform::testing::{wait_until, TestDb};

const BINARY: &str = env!("CARGO_BIN_EXE_webook");
/// The defaults (`job_lease`, `job_heartbeat`), set explicitly so the bounds below follow them.
const LEASE: Duration = Duration::from_secs(4);
const HEARTBEAT: Duration = Duration::from_secs(1);
const POLL_MAX: Duration = Duration::from_secs(1);
const CHAOS_FOR: Duration = Duration::from_secs(60);
const WORKERS: usize = 3;
/// Claim + HTTP call time allowed on top of the lease when measuring takeovers (pollers wake
/// when a lease runs out, not at their next poll).
const TAKEOVER_SLACK: Duration = Duration::from_millis(750);

platform::backend_tests!(webook::schema::MIGRATIONS; workers_survive_kills_and_pauses_without_duplicates_or_stuck_jobs);

fn wall_millis() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// One call the receiver got.
#[derive(Debug, Clone)]
struct Call {
    job: String,
    tick: i64,
    token: i64,
    received_at: i64,
}

#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<Call>>>);

impl Receiver {
    async fn start(&self) -> String {
        let calls = self.0.clone();
        let app = Router::new().route(
            "/run",
            post(
                move |headers: HeaderMap, Query(query): Query<HashMap<String, u64>>| {
                    let calls = calls.clone();
                    async move {
                        let header = |name: &str| {
                            headers
                                .get(name)
                                .and_then(|value| value.to_str().ok())
                                .unwrap_or_default()
                                .to_owned()
                        };
                        calls.lock().unwrap().push(Call {
                            job: header("x-webook-job"),
                            tick: header("x-webook-scheduled-at").parse().unwrap_or(-1),
                            token: header("x-webook-token").parse().unwrap_or(-1),
                            received_at: wall_millis(),
                        });
                        if let Some(ms) = query.get("sleep_ms") {
                            tokio::time::sleep(Duration::from_millis(*ms)).await;
                        }
                        "ok"
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/run")
    }

    fn calls(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }
}

struct Worker {
    child: Child,
}

fn start_worker(db_url: &str, dir: &Path, index: usize, generation: usize) -> Worker {
    let log = std::fs::File::create(dir.join(format!("worker-{index}-{generation}.log"))).unwrap();
    let mut command = Command::new(BINARY);
    for (key, _) in std::env::vars() {
        if key.starts_with("WEBOOK_") {
            command.env_remove(key);
        }
    }
    let child = command
        .args(["serve", "--role", "worker"])
        .current_dir(dir)
        .env("WEBOOK_DATA_DIR", dir.join("data"))
        .env("WEBOOK_DATABASE_URL", db_url)
        .env("WEBOOK_LISTEN", "127.0.0.1:0")
        .env("WEBOOK_LOG", "info,sqlx=warn")
        .env("WEBOOK_JOB_LEASE", format!("{}ms", LEASE.as_millis()))
        .env(
            "WEBOOK_JOB_HEARTBEAT",
            format!("{}ms", HEARTBEAT.as_millis()),
        )
        .env("WEBOOK_JOB_POLL_MAX", format!("{}ms", POLL_MAX.as_millis()))
        .env("WEBOOK_SHUTDOWN_TIMEOUT", "5s")
        // The job receiver listens on loopback, which http jobs may not call by default.
        .env("WEBOOK_JOB_HTTP_ALLOWED_NETWORKS", "127.0.0.0/8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start a webook worker");
    Worker { child }
}

fn signal(worker: &Worker, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), worker.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} failed");
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

async fn workers_survive_kills_and_pauses_without_duplicates_or_stuck_jobs(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let store = webook::jobs::store(&db.db);
    let receiver = Receiver::default();
    let url = receiver.start().await;
    let jobs = [
        ("tick", "@every 1s", 0),
        ("slow-2s", "@every 3s", 2000),
        ("slow-4s", "*/5 * * * * *", 4000),
    ];
    let mut job_ids = BTreeMap::new();
    for (name, cron, sleep_ms) in jobs {
        let id = store
            .create(&NewJob {
                name: name.to_owned(),
                cron: cron.to_owned(),
                timezone: "UTC".to_owned(),
                executor: "http".to_owned(),
                cfg: format!(r#"{{"url": "{url}?sleep_ms={sleep_ms}", "timeout_ms": 20000}}"#),
                misfire: Misfire::FireOnce,
                overlap: OverlapPolicy::Forbid,
                timeout_ms: 60_000,
            })
            .await
            .unwrap();
        job_ids.insert(name, id);
    }

    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|index| start_worker(&db.url, dir.path(), index, 0))
        .collect();
    let mut generation = 1;
    wait_until("the first run", || async { !receiver.calls().is_empty() }).await;
    let window_start = wall_millis() + 2000;

    // Chaos: every 3-6 s kill one worker (restarting it 1-2 s later); once, half-way, pause
    // another past its lease.
    let mut random = Lcg(0x5eed_cafe);
    let mut disruptions: Vec<i64> = Vec::new();
    let started = Instant::now();
    let mut paused_once = false;
    while started.elapsed() < CHAOS_FOR {
        tokio::time::sleep(Duration::from_millis(3000 + random.below(3000))).await;
        let victim = usize::try_from(random.below(WORKERS as u64)).unwrap();
        if !paused_once && started.elapsed() > CHAOS_FOR / 2 {
            paused_once = true;
            signal(&workers[victim], "STOP");
            disruptions.push(wall_millis());
            tokio::time::sleep(LEASE + Duration::from_secs(2)).await;
            signal(&workers[victim], "CONT");
            continue;
        }
        workers[victim].child.kill().unwrap(); // SIGKILL
        workers[victim].child.wait().unwrap();
        disruptions.push(wall_millis());
        tokio::time::sleep(Duration::from_millis(1000 + random.below(1000))).await;
        workers[victim] = start_worker(&db.url, dir.path(), victim, generation);
        generation += 1;
    }
    let window_end = wall_millis() - 6000;

    // Settle: kill all but one, leave it running past the lease, then no job may be stuck on a
    // dead holder.
    for worker in workers.iter_mut().skip(1) {
        worker.child.kill().unwrap();
        worker.child.wait().unwrap();
    }
    let settle_from = wall_millis();
    disruptions.push(settle_from);
    wait_until("no job stuck running on a dead holder", || async {
        let now = store.now().await.unwrap();
        let lease = i64::try_from(LEASE.as_millis()).unwrap();
        wall_millis() > settle_from + lease + 2000
            && store
                .list()
                .await
                .unwrap()
                .iter()
                .all(|job| job.status.as_str() != "running" || job.utime >= now - lease)
    })
    .await;
    // A fire time that came due while its job was held (a takeover finding the next fire time
    // already due leaves it for the next claim) gets its row at the job's next claim. Wait until
    // each job has been seen waiting past the window — from then on, every fire time in the
    // window has its final row — so the stop below cannot interrupt a run inside the window.
    let settled: Arc<Mutex<BTreeMap<String, bool>>> = Arc::new(Mutex::new(
        job_ids
            .keys()
            .map(|name| (name.to_string(), false))
            .collect(),
    ));
    wait_until("every fire time in the window claimed and finished", || {
        let (settled, store) = (settled.clone(), store.clone());
        async move {
            let jobs = store.list().await.unwrap();
            let mut settled = settled.lock().unwrap();
            for job in jobs {
                if job.status.as_str() == "waiting" && job.next_time > window_end {
                    settled.insert(job.name, true);
                }
            }
            settled.values().all(|done| *done)
        }
    })
    .await;
    signal(&workers[0], "TERM");
    let exit = workers[0].child.wait().unwrap();
    assert!(
        exit.success(),
        "the last worker exited with {exit} on SIGTERM"
    );
    for job in store.list().await.unwrap() {
        assert_eq!(
            job.status.as_str(),
            "waiting",
            "{} after a clean stop",
            job.name
        );
    }

    let calls = receiver.calls();
    let mut max_token: HashMap<(String, i64), i64> = HashMap::new();
    for call in &calls {
        let entry = max_token
            .entry((call.job.clone(), call.tick))
            .or_insert(call.token);
        *entry = (*entry).max(call.token);
    }
    let mut fenced = 0;
    let mut misfired = 0;
    for (name, id) in &job_ids {
        let schedule = store.get(*id).await.unwrap().unwrap().schedule().unwrap();
        let rows = store.runs(*id, 100_000).await.unwrap();
        let by_tick: BTreeMap<i64, _> = rows.iter().map(|row| (row.scheduled_at, row)).collect();
        // Every fire time in the window has its row.
        let mut tick = scheduler::sql::next_fire(&schedule, window_start).unwrap();
        while tick <= window_end {
            let row = by_tick
                .get(&tick)
                .unwrap_or_else(|| panic!("{name}: fire time {tick} has no row"));
            match row.status {
                RunStatus::Ok | RunStatus::Skipped => {}
                RunStatus::Misfired => misfired += 1,
                RunStatus::Fenced => fenced += 1,
                other => panic!("{name}: fire time {tick} ended {other}: {row:?}"),
            }
            tick = scheduler::sql::next_fire(&schedule, tick).unwrap();
        }
        // Committed runs carry the newest token that ran them, and never overlap.
        let mut committed: Vec<_> = rows
            .iter()
            .filter(|row| row.status == RunStatus::Ok)
            .collect();
        for row in &committed {
            assert_eq!(
                max_token.get(&(name.to_string(), row.scheduled_at)),
                Some(&row.token),
                "{name}: the committed run of {} is not the newest holder's",
                row.scheduled_at
            );
        }
        committed.sort_by_key(|row| row.started_at);
        for pair in committed.windows(2) {
            assert!(
                pair[0].finished_at.unwrap() <= pair[1].started_at.unwrap(),
                "{name}: committed runs overlap: {:?} and {:?}",
                pair[0],
                pair[1]
            );
        }
    }

    // Takeovers: a fire time executed again under a newer token, after a disruption.
    let mut first_call: HashMap<(String, i64), &Call> = HashMap::new();
    let mut takeovers = Vec::new();
    for call in &calls {
        let key = (call.job.clone(), call.tick);
        match first_call.get(&key) {
            None => {
                first_call.insert(key, call);
            }
            Some(first) if call.token > first.token => {
                let disruption = disruptions
                    .iter()
                    .copied()
                    .filter(|at| *at <= call.received_at)
                    .max()
                    .unwrap_or(first.received_at);
                takeovers.push(call.received_at - disruption.max(first.received_at));
            }
            Some(_) => {}
        }
    }
    takeovers.sort_unstable();
    let bound = i64::try_from((LEASE + TAKEOVER_SLACK).as_millis()).unwrap();
    println!(
        "chaos: {} calls, {} takeovers (p50 {} ms, p99 {} ms, max {} ms; bound {bound} ms), \
         {misfired} misfired, {fenced} fenced, {} disruptions",
        calls.len(),
        takeovers.len(),
        percentile(&takeovers, 0.5),
        percentile(&takeovers, 0.99),
        takeovers.last().copied().unwrap_or(0),
        disruptions.len()
    );
    assert!(
        takeovers.iter().all(|delay| *delay <= bound),
        "a takeover took longer than the lease: {takeovers:?}"
    );
}
