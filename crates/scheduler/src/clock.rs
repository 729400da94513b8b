//! The wall clock the scheduler reads fire times from: [`Clock`], real ([`SystemClock`]) or
//! driven by tokio's clock in tests ([`TokioClock`]). Why the engine re-reads it is documented on
//! [`Clock`].

use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc,
};

use chrono::{DateTime, TimeDelta, Utc};

/// A source of wall-clock time.
///
/// Fire times are wall-clock instants (a cron expression names a time of day), but waiting is done
/// with tokio timers on the monotonic clock. The scheduler never trusts one sleep: it sleeps at
/// most [`MAX_SLEEP`](crate::MAX_SLEEP) at a time and re-reads the wall clock, so a clock step
/// (NTP correction, an operator changing the time, a laptop waking from suspend) is noticed within
/// a second and a job never fires early.
///
/// [`SystemClock`] is the real clock. [`TokioClock`] derives the wall clock from tokio's
/// (pausable) clock, so tests run under `#[tokio::test(start_paused = true)]` and a year of
/// schedule passes in milliseconds, deterministically; it can also be stepped to simulate a
/// wall-clock jump.
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> DateTime<Utc>;
}

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A wall clock that starts at a chosen instant and advances with tokio's clock (which tests
/// pause and auto-advance). Cheap to clone; clones share the step offset.
#[derive(Debug, Clone)]
pub struct TokioClock {
    start_wall: DateTime<Utc>,
    start: tokio::time::Instant,
    step_millis: Arc<AtomicI64>,
}

impl TokioClock {
    /// A clock that reads `start` now and advances as tokio's clock does.
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        Self {
            start_wall: start,
            start: tokio::time::Instant::now(),
            step_millis: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Steps the wall clock by `delta` (negative steps it back) without moving tokio's clock,
    /// as an NTP correction or a manual change would.
    pub fn step(&self, delta: TimeDelta) {
        self.step_millis
            .fetch_add(delta.num_milliseconds(), Ordering::SeqCst);
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = TimeDelta::from_std(self.start.elapsed()).unwrap_or(TimeDelta::MAX);
        let step = TimeDelta::milliseconds(self.step_millis.load(Ordering::SeqCst));
        self.start_wall + elapsed + step
    }
}
