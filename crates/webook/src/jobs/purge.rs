//! Retention of durable-job history: every fire time of every job leaves a `job_runs` row (run,
//! misfired, skipped…), so an `@every 1s` job writes 86 400 a day. The maintenance job
//! [`PurgeJobRuns`] (on `purge_schedule`) deletes finished runs whose fire time is older than
//! `job_runs_retention` (database clock), in batches; running runs are never touched.

use std::time::Duration;

use async_trait::async_trait;
use scheduler::{sql::SqlJobStore, Job, JobContext};

/// Rows deleted per statement: short enough that SQLite's single writer is never held long.
const PURGE_BATCH: i64 = 10_000;

/// Deletes finished job runs older than the retention.
#[derive(Debug, Clone)]
pub struct PurgeJobRuns {
    store: SqlJobStore,
    retention: Duration,
}

impl PurgeJobRuns {
    /// The job's name in logs, metrics and lock keys.
    pub const NAME: &'static str = "purge_job_runs";

    /// The job over `store`, keeping `retention` of history.
    pub fn new(store: SqlJobStore, retention: Duration) -> Self {
        Self { store, retention }
    }
}

#[async_trait]
impl Job for PurgeJobRuns {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn run(&self, _ctx: JobContext) -> anyhow::Result<()> {
        let retention = i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX);
        let before = self.store.now().await?.saturating_sub(retention);
        let deleted = self.store.purge_runs_before(before, PURGE_BATCH).await?;
        tracing::info!(deleted, "purged old job runs");
        Ok(())
    }
}
