//! The scheduled backup: a periodic job on `backup_schedule` (one instance per fire time: a
//! short lock claims it, Redis's in cluster mode) that takes a backup into `backup_dir`, then
//! deletes all but the newest `backup_keep`. Its outcome is in the metrics an alert reads —
//! the last success's time, duration and size, and the failures — and in the log.

use std::path::PathBuf;

use async_trait::async_trait;
use scheduler::{Job, JobContext};

use super::{
    manifest::{self, Manifest},
    take::{take, Source},
    FAILURES_TOTAL, LAST_DURATION_SECONDS, LAST_FAILURE_SECONDS, LAST_SIZE_BYTES,
    LAST_SUCCESS_SECONDS, SUCCESSES_TOTAL,
};

/// Counts a failed backup (or pruning) and stamps its time, for the alert that fires while the
/// newest attempt is a failure.
fn note_failure() {
    metrics::counter!(FAILURES_TOTAL).increment(1);
    metrics::gauge!(LAST_FAILURE_SECONDS).set(platform::db::now_millis() as f64 / 1000.0);
}

/// Name of the job.
pub const BACKUP_JOB: &str = "backup";

/// Takes a backup into a directory and prunes the old ones.
#[derive(Debug, Clone)]
pub struct BackupJob {
    /// What it copies.
    pub source: Source,
    /// Where the backups go.
    pub dir: PathBuf,
    /// How many it keeps.
    pub keep: usize,
}

impl BackupJob {
    /// Sets the last-success metrics from the newest backup already in the directory, so that a
    /// restart does not read as "no backup yet" (nor a fresh one) to an alert.
    pub fn report_newest(&self) {
        // Present from the start, so an alert on their increase has a series to read.
        metrics::counter!(FAILURES_TOTAL).increment(0);
        metrics::counter!(SUCCESSES_TOTAL).increment(0);
        metrics::gauge!(LAST_FAILURE_SECONDS).set(0.0);
        let newest = manifest::list(&self.dir)
            .ok()
            .and_then(|backups| backups.last().cloned())
            .and_then(|newest| Manifest::read(&newest).ok());
        if let Some(manifest) = newest {
            metrics::gauge!(LAST_SUCCESS_SECONDS).set(manifest.finished_at as f64 / 1000.0);
            metrics::gauge!(LAST_SIZE_BYTES).set(manifest.bytes() as f64);
        }
    }
}

#[async_trait]
impl Job for BackupJob {
    fn name(&self) -> &str {
        BACKUP_JOB
    }

    async fn run(&self, ctx: JobContext) -> anyhow::Result<()> {
        let job = self.clone();
        let taken = tokio::task::spawn_blocking(move || {
            take(&job.source, &job.dir, &|_, _, _| {}, &|| ctx.is_cancelled())
        })
        .await
        .map_err(anyhow::Error::from)
        .and_then(|taken| taken);
        let taken = match taken {
            Ok(taken) => taken,
            Err(err) => {
                note_failure();
                return Err(err.context("taking the scheduled backup"));
            }
        };
        metrics::gauge!(LAST_SUCCESS_SECONDS).set(taken.manifest.finished_at as f64 / 1000.0);
        metrics::gauge!(LAST_DURATION_SECONDS).set(taken.seconds);
        metrics::gauge!(LAST_SIZE_BYTES).set(taken.manifest.bytes() as f64);
        tracing::info!(
            backup = %taken.dir.display(),
            bytes = taken.manifest.bytes(),
            seconds = taken.seconds,
            "backup taken"
        );
        let (dir, keep) = (self.dir.clone(), self.keep);
        let pruned = tokio::task::spawn_blocking(move || manifest::prune(&dir, keep))
            .await
            .map_err(anyhow::Error::from)
            .and_then(|pruned| pruned);
        match pruned {
            Ok(deleted) => {
                metrics::counter!(SUCCESSES_TOTAL).increment(1);
                for old in deleted {
                    tracing::info!(backup = %old.display(), "old backup deleted (backup_keep)");
                }
                Ok(())
            }
            Err(err) => {
                note_failure();
                Err(err.context("deleting old backups (backup_keep)"))
            }
        }
    }
}
