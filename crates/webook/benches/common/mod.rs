//! Helpers the benches share (each bench is its own crate and includes this module): the
//! bench database, and latency percentiles for the stderr reports, since criterion reports
//! means and medians and the targets are p99.

#![allow(dead_code)] // each bench uses what it needs

use std::time::Duration;

use platform::db::Db;
use webook::schema::MIGRATIONS;

/// The database a bench runs on, migrated: `WEBOOK_BENCH_DATABASE_URL` when set (a PostgreSQL
/// database of its own), else a SQLite file in the returned temp dir (keep it alive); with its
/// URL, for reports.
pub async fn bench_db(pool: u32) -> (tempfile::TempDir, Db, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = std::env::var("WEBOOK_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| format!("sqlite://{}", dir.path().join("webook.db").display()));
    let db = Db::connect_url(&url, pool).await.unwrap();
    db.migrate(&MIGRATIONS).await.unwrap();
    (dir, db, url)
}

/// `duration` in milliseconds.
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The `p`th percentile (nearest rank) of `sorted`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Prints one line of percentiles of `samples` (milliseconds) labelled `label`.
pub fn summary(label: &str, mut samples: Vec<f64>) {
    samples.sort_by(f64::total_cmp);
    eprintln!(
        "  {label:<44} n={:<5} p50 {:>6.2} ms  p90 {:>6.2} ms  p99 {:>6.2} ms  max {:>6.2} ms",
        samples.len(),
        percentile(&samples, 50.0),
        percentile(&samples, 90.0),
        percentile(&samples, 99.0),
        samples[samples.len() - 1]
    );
}

/// Latency percentiles of `calls` runs of `call`: one caller, then `callers` concurrent
/// callers sharing the work (as an HTTP server's handlers would), with their rate.
pub async fn latencies<F, Fut>(label: &str, calls: usize, callers: usize, call: F)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = std::time::Instant::now();
        call().await;
        samples.push(ms(started.elapsed()));
    }
    summary(&format!("{label}, 1 caller"), samples);
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let call = call.clone();
            tokio::spawn(async move {
                let mut samples = Vec::with_capacity(calls / callers);
                for _ in 0..calls / callers {
                    let started = std::time::Instant::now();
                    call().await;
                    samples.push(ms(started.elapsed()));
                }
                samples
            })
        })
        .collect();
    let started = std::time::Instant::now();
    let mut samples = Vec::with_capacity(calls);
    for task in tasks {
        samples.extend(task.await.unwrap_or_default());
    }
    #[allow(clippy::cast_precision_loss)]
    let rate = calls as f64 / started.elapsed().as_secs_f64();
    summary(
        &format!("{label}, {callers} callers ({rate:.0} pages/s)"),
        samples,
    );
}
