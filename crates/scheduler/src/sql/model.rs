//! The rows of `jobs` and `job_runs`, their enums, and the pure decision at the heart of a claim:
//! given a due job and the database's clock, which fire time runs and which are recorded as
//! misfired ([`plan_claim`]), and which fire times passed during a run ([`passed_during_run`]).

use std::{fmt, str::FromStr, time::Duration};

use chrono::{DateTime, Utc};

use crate::schedule::Schedule;

/// Most missed fire times a single claim or release records as rows. Beyond this they are
/// counted ([`ClaimPlan::unrecorded`]) and logged, not recorded.
pub const MAX_RECORDED_MISSES: usize = 10_000;
/// Most missed fire times `catch_up` runs; older ones are recorded as misfired.
pub const CATCH_UP_CAP: usize = 100;

macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident($label:literal) { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// The value as stored and shown.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(text: &str) -> Result<Self, String> {
                match text {
                    $($text => Ok(Self::$variant),)+
                    other => Err(format!(
                        "unknown {} {other:?}; expected one of: {}",
                        $label,
                        [$($text),+].join(", ")
                    )),
                }
            }
        }
    };
}

text_enum!(
    /// Where a job is in its life.
    JobStatus("status") {
        /// Waiting for its next fire time.
        Waiting = "waiting",
        /// Claimed by `owner`, heartbeating.
        Running = "running",
        /// Stopped by an operator; not claimed until resumed.
        Paused = "paused",
    }
);

text_enum!(
    /// What a claim does with fire times that passed while no instance was up.
    Misfire("misfire policy") {
        /// Record them all as misfired; run at the next future fire time.
        Skip = "skip",
        /// Record all but the latest as misfired; run the latest now (the default).
        FireOnce = "fire_once",
        /// Run each, oldest first, back to back (at most [`CATCH_UP_CAP`]; older ones misfire).
        CatchUp = "catch_up",
    }
);

text_enum!(
    /// What happens to fire times that pass while a run is going.
    OverlapPolicy("overlap policy") {
        /// They are recorded as skipped. (One holder per job is what makes the fencing token
        /// sound, so concurrent runs of one job are not offered.)
        Forbid = "forbid",
    }
);

text_enum!(
    /// How a run ended (or that it is going).
    RunStatus("run status") {
        /// Claimed and executing.
        Running = "running",
        /// Finished successfully.
        Ok = "ok",
        /// The executor returned an error.
        Failed = "failed",
        /// Cancelled at the job's timeout.
        Timeout = "timeout",
        /// Came due while the previous run was going (overlap forbidden).
        Skipped = "skipped",
        /// Came due while no instance claimed it, and the misfire policy did not run it.
        Misfired = "misfired",
        /// Its holder lost the claim (the job was stopped, or the holder was replaced).
        Fenced = "fenced",
    }
);

/// One row of `jobs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// Primary key.
    pub id: i64,
    /// Unique name.
    pub name: String,
    /// Schedule expression (see [`Schedule`]).
    pub cron: String,
    /// IANA zone the expression is evaluated in.
    pub timezone: String,
    /// Name of the executor that runs it.
    pub executor: String,
    /// Executor configuration, JSON text.
    pub cfg: String,
    /// Life-cycle state.
    pub status: JobStatus,
    /// Next fire time (ms).
    pub next_time: i64,
    /// Fire time of the current or last claim (ms).
    pub scheduled_at: i64,
    /// Pending manual trigger time (ms), 0 for none.
    pub trigger_at: i64,
    /// The trace context the pending trigger was made in (a W3C `traceparent`), '' for none.
    pub trigger_trace: String,
    /// Last heartbeat or change (ms, database clock).
    pub utime: i64,
    /// Bumped by every claim and operator action; a claim's value is its fencing token.
    pub version: i64,
    /// Instance holding the running claim ('' when none).
    pub owner: String,
    /// Misfire policy.
    pub misfire: Misfire,
    /// Overlap policy.
    pub overlap: OverlapPolicy,
    /// Run timeout (ms).
    pub timeout_ms: i64,
    /// Creation time (ms).
    pub ctime: i64,
}

impl JobRow {
    /// The schedule this row describes.
    pub fn schedule(&self) -> Result<Schedule, crate::schedule::ScheduleError> {
        Schedule::parse_in(&self.cron, &self.timezone)
    }

    /// The run timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.timeout_ms).unwrap_or(0))
    }
}

/// One row of `job_runs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    /// Primary key.
    pub id: i64,
    /// The job.
    pub job_id: i64,
    /// The fire time (ms).
    pub scheduled_at: i64,
    /// Fencing token of the claim that ran it (0 for rows recorded without a run).
    pub token: i64,
    /// Instance that ran it.
    pub owner: String,
    /// Start (ms, database clock).
    pub started_at: Option<i64>,
    /// End (ms, database clock).
    pub finished_at: Option<i64>,
    /// Outcome.
    pub status: RunStatus,
    /// Error text for failed, timeout and fenced runs.
    pub error: Option<String>,
}

/// Why a claim is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimKind {
    /// A fire time came due.
    Scheduled,
    /// An operator asked for a run now.
    Triggered,
    /// The previous holder stopped heartbeating; its fire time runs again under a new token.
    Takeover,
    /// Only misfired fire times are recorded; nothing runs (misfire policy `skip`).
    RecordOnly,
}

impl ClaimKind {
    /// Label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Triggered => "triggered",
            Self::Takeover => "takeover",
            Self::RecordOnly => "record_only",
        }
    }
}

/// What a claim of one job will do, decided before the compare-and-swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPlan {
    /// Why.
    pub kind: ClaimKind,
    /// The fire time that runs (ms); meaningless for [`ClaimKind::RecordOnly`].
    pub run_at: i64,
    /// `next_time` after the claim.
    pub next_time: i64,
    /// Fire times recorded as misfired (ms, ascending).
    pub misfired: Vec<i64>,
    /// Further missed fire times, beyond [`MAX_RECORDED_MISSES`], counted but not recorded.
    pub unrecorded: u64,
}

/// The first fire time at or after `at_ms`.
fn fire_at_or_after(schedule: &Schedule, at_ms: i64) -> Option<i64> {
    next_fire(schedule, at_ms.saturating_sub(1))
}

/// The newest `n` fire times in `[first, now]` (ascending; fewer when fewer exist), found without
/// walking from `first`: a window ending at `now` doubles until it holds `n` of them (or reaches
/// `first`), so a job years behind costs a few dozen steps, not one per missed fire time.
fn newest_fire_times(schedule: &Schedule, first: i64, now: i64, n: usize) -> Vec<i64> {
    let mut width: i64 = 1_000;
    loop {
        let from = now.saturating_sub(width).max(first);
        let mut times = Vec::new();
        let mut cursor = fire_at_or_after(schedule, from);
        while let Some(time) = cursor.filter(|time| *time <= now) {
            times.push(time);
            cursor = next_fire(schedule, time);
        }
        if times.len() >= n || from == first {
            let keep = times.len().saturating_sub(n);
            return times.split_off(keep);
        }
        width = width.saturating_mul(2);
    }
}

/// How many fire times lie strictly between `after` and `until` (both fire times), counted up to
/// `cap` (a count at the cap means "at least").
fn fire_times_between(schedule: &Schedule, after: i64, until: i64, cap: u64) -> u64 {
    if let Some(interval) = schedule.interval() {
        let step = i64::try_from(interval.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        return u64::try_from((until - after) / step - 1).unwrap_or(0);
    }
    let mut count = 0;
    let mut cursor = next_fire(schedule, after);
    while let Some(time) = cursor.filter(|time| *time < until) {
        count += 1;
        if count >= cap {
            break;
        }
        cursor = next_fire(schedule, time);
    }
    count
}

/// Fire times from `first` (included) up to `until` (included), at most `cap` of them.
fn fire_times_through(schedule: &Schedule, first: i64, until: i64, cap: usize) -> Vec<i64> {
    let mut times = Vec::new();
    let mut cursor = first;
    while cursor <= until && times.len() < cap {
        times.push(cursor);
        match next_fire(schedule, cursor) {
            Some(next) => cursor = next,
            None => break,
        }
    }
    times
}

/// The first fire time strictly after `after_ms`, in ms; `None` when there is none.
pub fn next_fire(schedule: &Schedule, after_ms: i64) -> Option<i64> {
    let after = DateTime::<Utc>::from_timestamp_millis(after_ms)?;
    schedule
        .next_after(after)
        .map(|time| time.timestamp_millis())
}

/// A `next_time` for a schedule that never fires again: far enough to never come due.
pub const NEVER: i64 = i64::MAX / 2;

/// Decides a claim of `job` at database time `now` (ms), or `None` if it is not claimable now.
/// A waiting job more than `misfire_after` ms past its fire time (or with several fire times
/// passed) is misfired and handled by its policy; a running job whose heartbeat is older than
/// `lease_ms` is taken over, re-running its fire time under a new token.
pub fn plan_claim(
    job: &JobRow,
    schedule: &Schedule,
    now: i64,
    lease_ms: i64,
    misfire_after_ms: i64,
) -> Option<ClaimPlan> {
    match job.status {
        JobStatus::Paused => None,
        JobStatus::Running if job.utime < now - lease_ms => Some(ClaimPlan {
            kind: ClaimKind::Takeover,
            run_at: job.scheduled_at,
            next_time: job.next_time,
            misfired: Vec::new(),
            unrecorded: 0,
        }),
        JobStatus::Running => None,
        JobStatus::Waiting if job.trigger_at > 0 => Some(ClaimPlan {
            kind: ClaimKind::Triggered,
            run_at: job.trigger_at,
            next_time: job.next_time,
            misfired: Vec::new(),
            unrecorded: 0,
        }),
        JobStatus::Waiting if job.next_time > now => None,
        JobStatus::Waiting => {
            let recorded = fire_times_through(schedule, job.next_time, now, MAX_RECORDED_MISSES);
            let (Some(&oldest), Some(&last_recorded)) = (recorded.first(), recorded.last()) else {
                return None;
            };
            let after = |time: i64| next_fire(schedule, time).unwrap_or(NEVER);
            if recorded.len() == 1 && after(oldest) > now && now - oldest <= misfire_after_ms {
                return Some(ClaimPlan {
                    kind: ClaimKind::Scheduled,
                    run_at: oldest,
                    next_time: after(oldest),
                    misfired: Vec::new(),
                    unrecorded: 0,
                });
            }
            // The true latest due fire time, even when more passed than are recorded.
            let latest = if after(last_recorded) > now {
                last_recorded
            } else {
                newest_fire_times(schedule, last_recorded, now, 1)
                    .last()
                    .copied()
                    .unwrap_or(last_recorded)
            };
            let next_after_now = after(now.max(latest));
            // Missed fire times beyond the recorded ones, up to (not including) `until`.
            let unrecorded_before = |until: i64| {
                if until > last_recorded {
                    fire_times_between(schedule, last_recorded, until, u64::MAX)
                } else {
                    0
                }
            };
            Some(match job.misfire {
                Misfire::Skip => ClaimPlan {
                    kind: ClaimKind::RecordOnly,
                    run_at: latest,
                    next_time: next_after_now,
                    unrecorded: unrecorded_before(latest) + u64::from(latest > last_recorded),
                    misfired: recorded,
                },
                Misfire::FireOnce => ClaimPlan {
                    kind: ClaimKind::Scheduled,
                    run_at: latest,
                    next_time: next_after_now,
                    unrecorded: unrecorded_before(latest),
                    misfired: recorded.into_iter().filter(|time| *time < latest).collect(),
                },
                Misfire::CatchUp => {
                    // The newest ones run, oldest of them first; everything older misfires.
                    let newest = newest_fire_times(schedule, oldest, now, CATCH_UP_CAP);
                    let run_at = newest.first().copied().unwrap_or(latest);
                    ClaimPlan {
                        kind: ClaimKind::Scheduled,
                        run_at,
                        next_time: newest.get(1).copied().unwrap_or(next_after_now),
                        unrecorded: unrecorded_before(run_at),
                        misfired: recorded.into_iter().filter(|time| *time < run_at).collect(),
                    }
                }
            })
        }
    }
}

/// At the end of a run claimed with `next_time`, at database time `now`: the fire times that
/// passed during the run (recorded as skipped: overlap is forbidden) and the `next_time` to
/// release with.
pub fn passed_during_run(schedule: &Schedule, next_time: i64, now: i64) -> (Vec<i64>, i64) {
    if next_time > now {
        return (Vec::new(), next_time);
    }
    let passed = fire_times_through(schedule, next_time, now, MAX_RECORDED_MISSES);
    let last = passed.last().copied().unwrap_or(now).max(now);
    let next = next_fire(schedule, last).unwrap_or(NEVER);
    if passed.len() == MAX_RECORDED_MISSES {
        if let Some(&last_recorded) = passed.last() {
            let unrecorded = fire_times_between(schedule, last_recorded, next, u64::MAX);
            note_unrecorded(unrecorded, "skipped during a run");
        }
    }
    (passed, next)
}

/// Counter: missed fire times beyond [`MAX_RECORDED_MISSES`] that got no row.
pub const SQL_UNRECORDED_FIRE_TIMES: &str = "scheduler_sql_unrecorded_fire_times_total";
/// Counter: fire times recorded as `misfired` (they passed while no instance ran the job, or were
/// claimed more than `misfire_after` late), counted by the instance whose claim recorded them.
pub const SQL_MISFIRED: &str = "scheduler_sql_misfired_total";

/// Counts `count` fire times a committed claim recorded as misfired ([`SQL_MISFIRED`]).
pub fn note_misfired(count: usize) {
    if count > 0 {
        metrics::counter!(SQL_MISFIRED).increment(u64::try_from(count).unwrap_or(u64::MAX));
    }
}

/// Logs and counts fire times that passed without a row of their own.
pub fn note_unrecorded(count: u64, what: &str) {
    if count > 0 {
        metrics::counter!(SQL_UNRECORDED_FIRE_TIMES).increment(count);
        tracing::warn!(
            count,
            recorded = MAX_RECORDED_MISSES,
            "{what}: more fire times passed than are recorded; the oldest {MAX_RECORDED_MISSES} \
             have rows, the rest are only counted"
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const SECOND: i64 = 1000;
    /// 2026-01-01T00:00:00Z in ms.
    const T0: i64 = 1_767_225_600_000;

    fn job(status: JobStatus, next_time: i64, misfire: Misfire) -> JobRow {
        JobRow {
            id: 1,
            name: "j".into(),
            cron: "@every 10s".into(),
            timezone: "UTC".into(),
            executor: "noop".into(),
            cfg: "{}".into(),
            status,
            next_time,
            scheduled_at: 0,
            trigger_at: 0,
            trigger_trace: String::new(),
            utime: T0,
            version: 7,
            owner: String::new(),
            misfire,
            overlap: OverlapPolicy::Forbid,
            timeout_ms: 60_000,
            ctime: T0,
        }
    }

    fn plan(job: &JobRow, now: i64) -> Option<ClaimPlan> {
        plan_claim(job, &job.schedule().unwrap(), now, 10 * SECOND, 5 * SECOND)
    }

    #[test]
    fn a_due_job_on_time_runs_its_fire_time() {
        let job = job(JobStatus::Waiting, T0 + 10 * SECOND, Misfire::FireOnce);
        assert_eq!(plan(&job, T0 + 9 * SECOND), None);
        let plan = plan(&job, T0 + 10 * SECOND + 300).unwrap();
        assert_eq!(plan.kind, ClaimKind::Scheduled);
        assert_eq!(plan.run_at, T0 + 10 * SECOND);
        assert_eq!(plan.next_time, T0 + 20 * SECOND);
        assert!(plan.misfired.is_empty());
    }

    #[test]
    fn misfire_policies_after_downtime() {
        // Fire times 10 s … 60 s passed; now is 65 s.
        let now = T0 + 65 * SECOND;
        let fire_once = plan(
            &job(JobStatus::Waiting, T0 + 10 * SECOND, Misfire::FireOnce),
            now,
        )
        .unwrap();
        assert_eq!(fire_once.kind, ClaimKind::Scheduled);
        assert_eq!(fire_once.run_at, T0 + 60 * SECOND);
        assert_eq!(
            fire_once.misfired,
            (1..=5).map(|i| T0 + i * 10 * SECOND).collect::<Vec<_>>()
        );
        assert_eq!(fire_once.next_time, T0 + 70 * SECOND);

        let skip = plan(
            &job(JobStatus::Waiting, T0 + 10 * SECOND, Misfire::Skip),
            now,
        )
        .unwrap();
        assert_eq!(skip.kind, ClaimKind::RecordOnly);
        assert_eq!(skip.misfired.len(), 6);
        assert_eq!(skip.next_time, T0 + 70 * SECOND);

        let catch_up = plan(
            &job(JobStatus::Waiting, T0 + 10 * SECOND, Misfire::CatchUp),
            now,
        )
        .unwrap();
        assert_eq!(catch_up.run_at, T0 + 10 * SECOND);
        assert_eq!(catch_up.next_time, T0 + 20 * SECOND, "the rest stay due");
        assert!(catch_up.misfired.is_empty());
    }

    #[test]
    fn catch_up_is_capped() {
        let first = T0 + 10 * SECOND;
        let now = first + 150 * 10 * SECOND; // 151 fire times passed
        let plan = plan(&job(JobStatus::Waiting, first, Misfire::CatchUp), now).unwrap();
        assert_eq!(plan.misfired.len(), 51);
        assert_eq!(plan.run_at, first + 51 * 10 * SECOND);
        assert_eq!(plan.next_time, first + 52 * 10 * SECOND);
    }

    /// A job 12 000 s behind on `@every 1s`: more fire times passed than are recorded. The latest
    /// one runs (not the 10 000th, 33 minutes stale), the recorded 10 000 are misfired and the rest
    /// counted; `catch_up` runs the newest 100 (it used to run ones outside them).
    #[test]
    fn more_missed_fire_times_than_recorded_still_run_the_latest() {
        let mut every_second = job(JobStatus::Waiting, T0, Misfire::FireOnce);
        every_second.cron = "@every 1s".to_owned();
        let now = T0 + 12_000 * SECOND + 300;
        let fire_once = plan(&every_second, now).unwrap();
        assert_eq!(
            fire_once.run_at,
            T0 + 12_000 * SECOND,
            "the true latest fire time"
        );
        assert_eq!(fire_once.next_time, T0 + 12_001 * SECOND);
        assert_eq!(fire_once.misfired.len(), MAX_RECORDED_MISSES);
        assert_eq!(fire_once.misfired[0], T0);
        // 12 001 fire times passed: 10 000 recorded, 1 runs, 2 000 only counted.
        assert_eq!(fire_once.unrecorded, 2_000);

        every_second.misfire = Misfire::Skip;
        let skip = plan(&every_second, now).unwrap();
        assert_eq!(
            (skip.misfired.len(), skip.unrecorded),
            (MAX_RECORDED_MISSES, 2_001)
        );
        assert_eq!(skip.next_time, T0 + 12_001 * SECOND);

        every_second.misfire = Misfire::CatchUp;
        let catch_up = plan(&every_second, now).unwrap();
        assert_eq!(
            catch_up.run_at,
            T0 + (12_000 - 99) * SECOND,
            "the oldest of the newest 100"
        );
        assert_eq!(catch_up.next_time, T0 + (12_000 - 98) * SECOND);
        assert_eq!(catch_up.misfired.len(), MAX_RECORDED_MISSES);
        assert_eq!(
            catch_up.unrecorded,
            12_000 - 99 - MAX_RECORDED_MISSES as u64
        );

        // A cron schedule (no fixed interval) finds its latest fire time the same way.
        let mut cron = job(JobStatus::Waiting, T0, Misfire::FireOnce);
        cron.cron = "* * * * * *".to_owned();
        let plan = plan(&cron, now).unwrap();
        assert_eq!(plan.run_at, T0 + 12_000 * SECOND);
        assert_eq!(plan.unrecorded, 2_000);
    }

    #[test]
    fn a_single_late_fire_time_is_a_misfire_handled_by_policy() {
        let job = job(JobStatus::Waiting, T0 + 10 * SECOND, Misfire::Skip);
        let plan = plan(&job, T0 + 17 * SECOND).unwrap();
        assert_eq!(plan.kind, ClaimKind::RecordOnly);
        assert_eq!(plan.misfired, vec![T0 + 10 * SECOND]);
        assert_eq!(plan.next_time, T0 + 20 * SECOND);
    }

    #[test]
    fn stale_running_jobs_are_taken_over_and_fresh_ones_left_alone() {
        let mut running = job(JobStatus::Running, T0 + 20 * SECOND, Misfire::FireOnce);
        running.scheduled_at = T0 + 10 * SECOND;
        running.utime = T0 + 10 * SECOND;
        assert_eq!(
            plan(&running, T0 + 20 * SECOND),
            None,
            "heartbeat 10 s old = lease"
        );
        let takeover = plan(&running, T0 + 20 * SECOND + 1).unwrap();
        assert_eq!(takeover.kind, ClaimKind::Takeover);
        assert_eq!(takeover.run_at, T0 + 10 * SECOND);
        assert_eq!(takeover.next_time, T0 + 20 * SECOND);
    }

    #[test]
    fn triggers_run_now_without_moving_the_schedule_and_paused_jobs_never_claim() {
        let mut triggered = job(JobStatus::Waiting, T0 + 3600 * SECOND, Misfire::FireOnce);
        triggered.trigger_at = T0 + 5 * SECOND;
        let plan = plan(&triggered, T0 + 5 * SECOND).unwrap();
        assert_eq!(plan.kind, ClaimKind::Triggered);
        assert_eq!(plan.run_at, T0 + 5 * SECOND);
        assert_eq!(plan.next_time, T0 + 3600 * SECOND);
        let paused = job(JobStatus::Paused, T0, Misfire::FireOnce);
        assert_eq!(
            super::plan_claim(&paused, &paused.schedule().unwrap(), T0 + 60 * SECOND, 1, 1),
            None
        );
    }

    #[test]
    fn fire_times_passing_during_a_run_are_skipped() {
        let schedule = Schedule::parse("@every 10s").unwrap();
        assert_eq!(
            passed_during_run(&schedule, T0 + 20 * SECOND, T0 + 15 * SECOND),
            (Vec::new(), T0 + 20 * SECOND)
        );
        assert_eq!(
            passed_during_run(&schedule, T0 + 20 * SECOND, T0 + 35 * SECOND),
            (vec![T0 + 20 * SECOND, T0 + 30 * SECOND], T0 + 40 * SECOND)
        );
    }

    #[test]
    fn enums_round_trip_and_name_the_choices() {
        for misfire in [Misfire::Skip, Misfire::FireOnce, Misfire::CatchUp] {
            assert_eq!(misfire.as_str().parse::<Misfire>().unwrap(), misfire);
        }
        assert_eq!(
            "later".parse::<Misfire>().unwrap_err(),
            "unknown misfire policy \"later\"; expected one of: skip, fire_once, catch_up"
        );
        assert_eq!(
            "allow".parse::<OverlapPolicy>().unwrap_err(),
            "unknown overlap policy \"allow\"; expected one of: forbid"
        );
    }
}
