//! A job that runs every second, each run under an in-process lock, on the in-process engine.
//!
//! ```text
//! cargo run -p scheduler --example every_second
//! ```
//!
//! It stops by itself after three runs (so tests and CI can run it: `cargo test -p scheduler
//! --example every_second` does), or earlier on Ctrl-C. Either way the scheduler stops
//! gracefully: running jobs get a grace to finish and every lock is released.
//!
//! The guard is [`Guard::ShortLock`]: each run takes the job's lock in an [`InProcessLocks`]
//! table and claims its fire time, so schedulers sharing the table (or, with `RedisLocks`,
//! processes sharing a Redis) run each fire time once. Each acquisition has a new fencing token.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use async_trait::async_trait;
use scheduler::{Guard, InProcessLocks, Job, JobContext, JobOptions, Schedule, Scheduler};
use tokio::sync::Notify;

/// Runs after which the example stops by itself.
const RUNS: u32 = 3;

/// Prints each run and says when the last one is done.
struct Tick {
    runs: Arc<AtomicU32>,
    done: Arc<Notify>,
}

#[async_trait]
impl Job for Tick {
    fn name(&self) -> &str {
        "tick"
    }

    async fn run(&self, ctx: JobContext) -> anyhow::Result<()> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        println!(
            "run {run}/{RUNS}: fire time {}, fencing token {}, still the owner: {}",
            ctx.scheduled_at().format("%H:%M:%S"),
            ctx.fencing_token(),
            ctx.still_owner(),
        );
        if run >= RUNS {
            // Stores a permit if `main` is not waiting yet, so the signal is never lost.
            self.done.notify_one();
        }
        Ok(())
    }
}

/// Runs the job every second until it has run [`RUNS`] times or `interrupt` resolves, then
/// stops the scheduler. Returns how many runs there were.
async fn run_until(interrupt: impl Future<Output = ()>) -> anyhow::Result<u32> {
    let runs = Arc::new(AtomicU32::new(0));
    let done = Arc::new(Notify::new());
    let mut scheduler = Scheduler::new(Arc::new(InProcessLocks::new()));
    scheduler.add(
        Tick {
            runs: runs.clone(),
            done: done.clone(),
        },
        JobOptions::new(Schedule::parse("@every 1s")?)
            .guard(Guard::ShortLock)
            .timeout(Duration::from_secs(5)),
    )?;
    let running = scheduler.start();
    tokio::select! {
        () = done.notified() => println!("{RUNS} runs done; stopping"),
        () = interrupt => println!("interrupted; stopping"),
    }
    let interrupted = running.stop(Duration::from_secs(5)).await;
    println!("stopped ({interrupted} runs had to be interrupted)");
    Ok(runs.load(Ordering::SeqCst))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            eprintln!("cannot listen for Ctrl-C ({err}); stopping after {RUNS} runs only");
            std::future::pending::<()>().await;
        }
    };
    run_until(ctrl_c).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn stops_by_itself_after_three_runs() {
        let started = tokio::time::Instant::now();
        let runs = super::run_until(std::future::pending()).await;
        assert_eq!(runs.ok(), Some(super::RUNS));
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
}
