//! The engine under tokio's paused clock: every test is deterministic and a day of schedule passes
//! in milliseconds. The wall clock is a [`TokioClock`], so fire times are asserted exactly:
//! schedules with seconds, `@every`, time zones and both DST transitions in two zones, overlap
//! policy, timeouts, clock jumps, stop semantics, and long locks (single owner, release on stop,
//! self-fencing when refreshes stall).

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use scheduler::{
    Clock, Grant, Guard, InProcessLocks, Job, JobContext, JobOptions, LockBackend, LockError,
    Overlap, Schedule, Scheduler, TokioClock,
};

fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339).unwrap().to_utc()
}

fn iso(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// One run as the job saw it.
#[derive(Debug, Clone)]
struct Run {
    instance: &'static str,
    scheduled: DateTime<Utc>,
    started: DateTime<Utc>,
    token: u64,
    ended: Option<(DateTime<Utc>, &'static str)>,
}

#[derive(Clone, Default)]
struct RunLog(Arc<Mutex<Vec<Run>>>);

impl RunLog {
    fn runs(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }

    fn scheduled(&self) -> Vec<String> {
        self.runs().iter().map(|run| iso(run.scheduled)).collect()
    }
}

/// A job that records its runs and works for `work`, stopping early on cancellation only if
/// `honours_cancel`.
#[derive(Clone)]
struct Recorder {
    instance: &'static str,
    clock: TokioClock,
    log: RunLog,
    work: Duration,
    honours_cancel: bool,
    concurrent: Arc<AtomicUsize>,
    max_concurrent: Arc<AtomicUsize>,
}

impl Recorder {
    fn new(clock: &TokioClock, work: Duration) -> Self {
        Self {
            instance: "a",
            clock: clock.clone(),
            log: RunLog::default(),
            work,
            honours_cancel: true,
            concurrent: Arc::default(),
            max_concurrent: Arc::default(),
        }
    }

    fn instance(mut self, instance: &'static str) -> Self {
        self.instance = instance;
        self
    }
}

/// Marks a run ended "aborted" if it is dropped before finishing.
struct EndGuard {
    log: RunLog,
    index: usize,
    clock: TokioClock,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        let mut runs = self.log.0.lock().unwrap();
        if runs[self.index].ended.is_none() {
            runs[self.index].ended = Some((self.clock.now(), "aborted"));
        }
    }
}

#[async_trait]
impl Job for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    async fn run(&self, ctx: JobContext) -> anyhow::Result<()> {
        let index = {
            let mut runs = self.log.0.lock().unwrap();
            runs.push(Run {
                instance: self.instance,
                scheduled: ctx.scheduled_at(),
                started: self.clock.now(),
                token: ctx.fencing_token(),
                ended: None,
            });
            runs.len() - 1
        };
        let _end = EndGuard {
            log: self.log.clone(),
            index,
            clock: self.clock.clone(),
        };
        let now_running = self.concurrent.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_concurrent.fetch_max(now_running, Ordering::SeqCst);
        let how = if self.honours_cancel {
            tokio::select! {
                () = tokio::time::sleep(self.work) => "done",
                () = ctx.cancelled() => "cancelled",
            }
        } else {
            tokio::time::sleep(self.work).await;
            "done"
        };
        self.concurrent.fetch_sub(1, Ordering::SeqCst);
        self.log.0.lock().unwrap()[index].ended = Some((self.clock.now(), how));
        Ok(())
    }
}

fn scheduler_on(clock: &TokioClock, locks: Arc<dyn LockBackend>) -> Scheduler {
    Scheduler::new(locks).with_clock(Arc::new(clock.clone()))
}

/// Runs `expr` in `zone` from `start` for `span` and returns the fire times.
async fn fire_times(expr: &str, zone: &str, start: &str, span: Duration) -> Vec<String> {
    let clock = TokioClock::starting_at(at(start));
    let job = Recorder::new(&clock, Duration::from_millis(10));
    let log = job.log.clone();
    let mut scheduler = scheduler_on(&clock, Arc::new(InProcessLocks::new()));
    scheduler
        .add(
            job,
            JobOptions::new(Schedule::parse_in(expr, zone).unwrap()),
        )
        .unwrap();
    let running = scheduler.start();
    tokio::time::sleep(span).await;
    running.stop(Duration::from_secs(1)).await;
    for run in log.runs() {
        let late = run.started - run.scheduled;
        assert!(
            late >= TimeDelta::zero() && late < TimeDelta::milliseconds(5),
            "run for {} started {late} after its fire time",
            iso(run.scheduled)
        );
    }
    log.scheduled()
}

#[tokio::test(start_paused = true)]
async fn seconds_fields_fire_on_time_never_early() {
    let fired = fire_times(
        "*/10 * * * * *",
        "UTC",
        "2026-01-01T00:00:05Z",
        Duration::from_secs(36),
    )
    .await;
    assert_eq!(
        fired,
        [
            "2026-01-01T00:00:10Z",
            "2026-01-01T00:00:20Z",
            "2026-01-01T00:00:30Z",
            "2026-01-01T00:00:40Z"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn every_interval_is_aligned_to_the_epoch() {
    let fired = fire_times(
        "@every 1m30s",
        "UTC",
        "2026-01-01T00:00:10Z",
        Duration::from_secs(5 * 60),
    )
    .await;
    assert_eq!(
        fired,
        [
            "2026-01-01T00:01:30Z",
            "2026-01-01T00:03:00Z",
            "2026-01-01T00:04:30Z"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_time_zone_shifts_daily_fire_times() {
    let fired = fire_times(
        "0 0 9 * * *",
        "Asia/Tokyo",
        "2026-01-01T00:30:00Z",
        Duration::from_secs(2 * 24 * 3600),
    )
    .await;
    assert_eq!(fired, ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"]);
}

#[tokio::test(start_paused = true)]
async fn new_york_spring_forward_runs_a_skipped_time_once_after_the_jump() {
    // 2026-03-08 02:00 EST → 03:00 EDT (07:00Z): 02:30 does not exist that day.
    let fired = fire_times(
        "0 30 2 * * *",
        "America/New_York",
        "2026-03-07T12:00:00Z",
        Duration::from_secs(3 * 24 * 3600),
    )
    .await;
    assert_eq!(
        fired,
        [
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:30:00Z",
            "2026-03-10T06:30:00Z"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn new_york_fall_back_runs_a_repeated_time_once() {
    // 2026-11-01 02:00 EDT → 01:00 EST: 01:30 happens at 05:30Z and again at 06:30Z.
    let fired = fire_times(
        "0 30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00:00Z",
        Duration::from_secs(2 * 24 * 3600),
    )
    .await;
    assert_eq!(fired, ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]);
}

#[tokio::test(start_paused = true)]
async fn berlin_spring_forward_collapses_the_gap_into_one_run() {
    // 2026-03-29 02:00 CET → 03:00 CEST (01:00Z): 02:00 and 02:30 fold onto 03:00.
    let fired = fire_times(
        "0 */30 * * * *",
        "Europe/Berlin",
        "2026-03-29T00:10:00Z",
        Duration::from_secs(115 * 60),
    )
    .await;
    assert_eq!(
        fired,
        [
            "2026-03-29T00:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:30:00Z",
            "2026-03-29T02:00:00Z"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn berlin_fall_back_does_not_repeat_the_hour() {
    // 2026-10-25 03:00 CEST → 02:00 CET (01:00Z): 02:00 and 02:30 run in the first pass only.
    let fired = fire_times(
        "0 */30 * * * *",
        "Europe/Berlin",
        "2026-10-24T23:10:00Z",
        Duration::from_secs(205 * 60),
    )
    .await;
    assert_eq!(
        fired,
        [
            "2026-10-24T23:30:00Z",
            "2026-10-25T00:00:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T02:00:00Z",
            "2026-10-25T02:30:00Z"
        ]
    );
}

/// A job taking 25 s on a 10 s schedule.
async fn overlap_run(overlap: Overlap) -> (Vec<String>, usize) {
    let clock = TokioClock::starting_at(at("2026-01-01T00:00:05Z"));
    let job = Recorder::new(&clock, Duration::from_secs(25));
    let (log, max_concurrent) = (job.log.clone(), job.max_concurrent.clone());
    let mut scheduler = scheduler_on(&clock, Arc::new(InProcessLocks::new()));
    scheduler
        .add(
            job,
            JobOptions::new(Schedule::parse("*/10 * * * * *").unwrap()).overlap(overlap),
        )
        .unwrap();
    let running = scheduler.start();
    tokio::time::sleep(Duration::from_secs(40)).await;
    running.stop(Duration::from_secs(60)).await;
    (log.scheduled(), max_concurrent.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn overlap_forbid_skips_fire_times_while_a_run_is_going() {
    let (fired, max_concurrent) = overlap_run(Overlap::Forbid).await;
    assert_eq!(fired, ["2026-01-01T00:00:10Z", "2026-01-01T00:00:40Z"]);
    assert_eq!(max_concurrent, 1);
}

#[tokio::test(start_paused = true)]
async fn overlap_allow_starts_runs_alongside() {
    let (fired, max_concurrent) = overlap_run(Overlap::Allow).await;
    assert_eq!(
        fired,
        [
            "2026-01-01T00:00:10Z",
            "2026-01-01T00:00:20Z",
            "2026-01-01T00:00:30Z",
            "2026-01-01T00:00:40Z"
        ]
    );
    assert_eq!(max_concurrent, 3);
}

#[tokio::test(start_paused = true)]
async fn a_run_past_its_timeout_is_cancelled_and_a_deaf_one_aborted() {
    let mut logs = Vec::new();
    for honours_cancel in [true, false] {
        let clock = TokioClock::starting_at(at("2026-01-01T00:00:00Z"));
        let mut job = Recorder::new(&clock, Duration::from_secs(60));
        job.honours_cancel = honours_cancel;
        logs.push(job.log.clone());
        let mut scheduler = scheduler_on(&clock, Arc::new(InProcessLocks::new()));
        scheduler
            .add(
                job,
                JobOptions::new(Schedule::parse("0 0 * * * *").unwrap())
                    .timeout(Duration::from_secs(5)),
            )
            .unwrap();
        let running = scheduler.start();
        tokio::time::sleep(Duration::from_secs(3600 + 30)).await;
        assert_eq!(running.stop(Duration::from_secs(1)).await, 0);
    }
    let (polite, deaf) = (logs[0].runs(), logs[1].runs());
    assert_eq!(
        polite[0].ended,
        Some((at("2026-01-01T01:00:05Z"), "cancelled"))
    );
    // Cancelled at the timeout, ignored it, dropped after the 1 s cancel grace.
    assert_eq!(deaf[0].ended, Some((at("2026-01-01T01:00:06Z"), "aborted")));
}

#[tokio::test(start_paused = true)]
async fn wall_clock_jumps_neither_repeat_nor_flood_runs() {
    let clock = TokioClock::starting_at(at("2026-01-01T00:00:05Z"));
    let job = Recorder::new(&clock, Duration::from_millis(10));
    let log = job.log.clone();
    let mut scheduler = scheduler_on(&clock, Arc::new(InProcessLocks::new()));
    scheduler
        .add(
            job,
            JobOptions::new(Schedule::parse("*/10 * * * * *").unwrap()),
        )
        .unwrap();
    let running = scheduler.start();
    tokio::time::sleep(Duration::from_secs(6)).await; // runs 00:00:10
    clock.step(TimeDelta::hours(1)); // wall clock now 01:00:11
    tokio::time::sleep(Duration::from_secs(10)).await; // 01:00:21
    clock.step(TimeDelta::minutes(-30)); // wall clock now 00:30:21
    tokio::time::sleep(Duration::from_secs(60)).await; // 00:31:21
    running.stop(Duration::from_secs(1)).await;
    // The jump forward folds 360 missed fire times into one run (for the first one, 00:00:20),
    // started within a second of the jump; after the jump back nothing runs until the wall
    // clock is past 01:00:20 again.
    let runs = log.runs();
    assert_eq!(
        log.scheduled(),
        [
            "2026-01-01T00:00:10Z",
            "2026-01-01T00:00:20Z",
            "2026-01-01T01:00:20Z"
        ]
    );
    assert!(runs[1].started >= at("2026-01-01T01:00:11Z"));
    assert!(runs[1].started <= at("2026-01-01T01:00:12Z"));
}

#[tokio::test(start_paused = true)]
async fn stop_lets_a_run_finish_within_the_grace_and_starts_nothing_new() {
    let clock = TokioClock::starting_at(at("2026-01-01T00:00:00Z"));
    let job = Recorder::new(&clock, Duration::from_secs(5));
    let log = job.log.clone();
    let mut scheduler = scheduler_on(&clock, Arc::new(InProcessLocks::new()));
    scheduler
        .add(job, JobOptions::new(Schedule::parse("@every 10s").unwrap()))
        .unwrap();
    let running = scheduler.start();
    tokio::time::sleep(Duration::from_secs(12)).await; // the 00:00:10 run is 2 s in
    assert_eq!(running.running(), 1);
    assert_eq!(running.stop(Duration::from_secs(10)).await, 0);
    assert_eq!(
        clock.now(),
        at("2026-01-01T00:00:15Z"),
        "stop waited for the run"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    let runs = log.runs();
    assert_eq!(runs.len(), 1, "no run after stop: {runs:?}");
    assert_eq!(runs[0].ended, Some((at("2026-01-01T00:00:15Z"), "done")));
}

#[tokio::test(start_paused = true)]
async fn stop_cancels_runs_that_outlive_the_grace() {
    let clock = TokioClock::starting_at(at("2026-01-01T00:00:00Z"));
    let job = Recorder::new(&clock, Duration::from_secs(600));
    let log = job.log.clone();
    let mut scheduler = scheduler_on(&clock, Arc::new(InProcessLocks::new()));
    scheduler
        .add(job, JobOptions::new(Schedule::parse("@every 10s").unwrap()))
        .unwrap();
    let running = scheduler.start();
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(running.stop(Duration::from_secs(3)).await, 1);
    assert_eq!(
        log.runs()[0].ended,
        Some((at("2026-01-01T00:00:15Z"), "cancelled"))
    );
}

fn long_locked(job: Recorder, ttl: Duration) -> (Recorder, JobOptions) {
    (
        job,
        JobOptions::new(Schedule::parse("@every 1s").unwrap()).guard(Guard::LongLock { ttl }),
    )
}

/// Asserts no fire time ran twice and returns them per instance.
fn assert_each_tick_once(runs: &[Run]) {
    let mut ticks: Vec<_> = runs.iter().map(|run| run.scheduled).collect();
    ticks.sort();
    let total = ticks.len();
    ticks.dedup();
    assert_eq!(ticks.len(), total, "a fire time ran twice: {runs:?}");
}

#[tokio::test(start_paused = true)]
async fn a_long_lock_has_one_owner_and_is_handed_over_on_stop() {
    let clock = TokioClock::starting_at(at("2026-01-01T00:00:00Z"));
    let locks: Arc<dyn LockBackend> = Arc::new(InProcessLocks::new());
    let log = RunLog::default();
    let mut instances = Vec::new();
    for name in ["a", "b", "c"] {
        let mut job = Recorder::new(&clock, Duration::from_millis(100)).instance(name);
        job.log = log.clone();
        let (job, options) = long_locked(job, Duration::from_secs(3));
        let mut scheduler = scheduler_on(&clock, locks.clone());
        scheduler.add(job, options).unwrap();
        instances.push((name, scheduler.start()));
    }
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    let runs = log.runs();
    assert_eq!(runs.len(), 10, "one run per second: {runs:?}");
    let owner = runs[0].instance;
    assert!(runs
        .iter()
        .all(|run| run.instance == owner && run.token == runs[0].token));

    let position = instances
        .iter()
        .position(|(name, _)| *name == owner)
        .unwrap();
    let (_, stopped) = instances.remove(position);
    stopped.stop(Duration::from_secs(5)).await; // releases the lock at 00:00:10.5
    tokio::time::sleep(Duration::from_secs(5)).await;
    for (_, running) in instances {
        running.stop(Duration::from_secs(5)).await;
    }
    let runs = log.runs();
    assert_each_tick_once(&runs);
    let successor: Vec<_> = runs.iter().filter(|run| run.instance != owner).collect();
    assert_eq!(
        iso(successor[0].scheduled),
        "2026-01-01T00:00:11Z",
        "released on stop, so taken at the very next fire time"
    );
    assert!(successor[0].token > runs[0].token);
    assert_eq!(successor.len(), 5);
}

/// Wraps a backend; while stalled every call hangs, as over a partitioned network.
struct Stalling {
    inner: Arc<dyn LockBackend>,
    stalled: AtomicBool,
}

impl Stalling {
    fn call<'a, T: Send + 'a>(
        &'a self,
        call: Pin<Box<dyn Future<Output = T> + Send + 'a>>,
    ) -> Pin<Box<dyn Future<Output = T> + Send + 'a>> {
        Box::pin(async move {
            if self.stalled.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            call.await
        })
    }
}

#[async_trait]
impl LockBackend for Stalling {
    async fn try_acquire(
        &self,
        key: &str,
        ttl: Duration,
        tick: Option<i64>,
    ) -> Result<Option<Grant>, LockError> {
        self.call(self.inner.try_acquire(key, ttl, tick)).await
    }
    async fn extend(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, LockError> {
        self.call(self.inner.extend(key, owner, ttl)).await
    }
    async fn release(&self, key: &str, owner: &str) -> Result<bool, LockError> {
        self.call(self.inner.release(key, owner)).await
    }
}

#[tokio::test(start_paused = true)]
async fn an_owner_whose_refreshes_stall_stops_before_another_takes_over() {
    let clock = TokioClock::starting_at(at("2026-01-01T00:00:00Z"));
    let shared_locks: Arc<dyn LockBackend> = Arc::new(InProcessLocks::new());
    let cut_off = Arc::new(Stalling {
        inner: shared_locks.clone(),
        stalled: AtomicBool::new(false),
    });
    let log = RunLog::default();
    // "a" starts first and takes the lock; its runs last 1.5 s so one is going when it is cut off.
    let mut first = Recorder::new(&clock, Duration::from_millis(1500)).instance("a");
    first.log = log.clone();
    let (job, options) = long_locked(first, Duration::from_secs(3));
    let mut a = scheduler_on(&clock, cut_off.clone());
    a.add(job, options.overlap(Overlap::Allow)).unwrap();
    let a = a.start();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut second = Recorder::new(&clock, Duration::from_millis(100)).instance("b");
    second.log = log.clone();
    let (job, options) = long_locked(second, Duration::from_secs(3));
    let mut b = scheduler_on(&clock, shared_locks.clone());
    b.add(job, options).unwrap();
    let b = b.start();

    tokio::time::sleep(Duration::from_secs(5)).await; // 00:00:06.5
    cut_off.stalled.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    b.stop(Duration::from_secs(5)).await;
    a.stop(Duration::from_secs(5)).await;

    let runs = log.runs();
    assert_each_tick_once(&runs);
    let a_runs: Vec<_> = runs.iter().filter(|run| run.instance == "a").collect();
    let b_runs: Vec<_> = runs.iter().filter(|run| run.instance == "b").collect();
    let b_first = b_runs.first().expect("b takes over");
    // a's last run was interrupted (lock lost) and had ended before b's first run started.
    let a_last_end = a_runs
        .iter()
        .filter_map(|run| run.ended)
        .map(|(end, _)| end)
        .max()
        .unwrap();
    assert!(
        a_last_end <= b_first.started,
        "a ran until {a_last_end}, b started {}",
        b_first.started
    );
    assert!(a_runs
        .iter()
        .any(|run| matches!(run.ended, Some((_, "cancelled")))));
    assert!(b_first.token > a_runs[0].token);
    // a's last good refresh was at or before 00:00:06.5, so its lock expired by 00:00:09.5 and
    // b took over at the next fire time.
    assert!(b_first.scheduled <= at("2026-01-01T00:00:10Z"));
}
