//! The hot list as a job: the `ranking` executor of the durable scheduler (the default: one row
//! in `jobs`, created at start-up when absent, `ranking_schedule`, changeable by operators), or a
//! long-locked in-process cron job (`ranking_mode = "cron"`). Either way each run computes the
//! list fenced by its fire time and token, and publishes only while it still owns the run.

use async_trait::async_trait;
use scheduler::{
    sql::{Executor, JobRow},
    Job, JobContext,
};

use crate::ranking::RankingService;
use platform::db::now_millis;

/// Name of the job (and of the durable executor).
pub const RANKING_JOB: &str = "ranking";

/// Computes and publishes the hot list.
#[derive(Debug, Clone)]
pub struct RankingJob {
    ranking: RankingService,
}

impl RankingJob {
    /// The job over `ranking`.
    pub fn new(ranking: RankingService) -> Self {
        Self { ranking }
    }

    async fn compute(&self, ctx: &JobContext) -> anyhow::Result<()> {
        let fence = (
            ctx.scheduled_at().timestamp_millis(),
            i64::try_from(ctx.fencing_token()).unwrap_or(i64::MAX),
        );
        let report = self
            .ranking
            .compute(fence, now_millis(), |_| {}, || ctx.still_owner())
            .await?;
        tracing::info!(
            candidates = report.candidates,
            kept = report.kept,
            shared = report.shared,
            "hot list computed"
        );
        Ok(())
    }
}

#[async_trait]
impl Job for RankingJob {
    fn name(&self) -> &str {
        RANKING_JOB
    }

    async fn run(&self, ctx: JobContext) -> anyhow::Result<()> {
        self.compute(&ctx).await
    }
}

#[async_trait]
impl Executor for RankingJob {
    fn name(&self) -> &str {
        RANKING_JOB
    }

    fn check_cfg(&self, cfg: &serde_json::Value) -> Result<(), String> {
        match cfg.as_object() {
            Some(fields) if fields.is_empty() => Ok(()),
            _ => Err("the ranking executor takes no cfg; use {}".to_owned()),
        }
    }

    async fn execute(&self, _job: &JobRow, ctx: JobContext) -> anyhow::Result<()> {
        self.compute(&ctx).await
    }
}
