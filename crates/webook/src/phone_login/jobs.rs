//! The feature's jobs. The durable `sms_code_retries` job: each run (the SQL scheduler: one at a
//! time in the whole deployment) asks [`PhoneLoginService::retry_due`] to work the retry queue
//! ([`super::retry`]). The maintenance job `PurgeExpiredCodes` deletes expired codes.

use std::time::Duration;

use async_trait::async_trait;
use scheduler::{
    sql::{Executor, JobRow, Misfire, NewJob, OverlapPolicy, SqlJobStore},
    Job, JobContext,
};

use platform::db::{duration_millis, now_millis};

use super::{retry::RetryReport, service::PhoneLoginService};

/// Name of the durable job and of its executor.
pub const RETRY_JOB: &str = "sms_code_retries";
/// Longest a run may take.
const RETRY_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Creates the durable retry job on `schedule` unless a job of that name exists (operators'
/// changes are kept). Safe when several instances start at once.
pub async fn ensure_job(jobs: &SqlJobStore, schedule: &str) -> anyhow::Result<()> {
    crate::jobs::ensure_job(
        jobs,
        &NewJob {
            name: RETRY_JOB.to_owned(),
            cron: schedule.to_owned(),
            timezone: "UTC".to_owned(),
            executor: RETRY_JOB.to_owned(),
            cfg: "{}".to_owned(),
            misfire: Misfire::Skip,
            overlap: OverlapPolicy::Forbid,
            timeout_ms: duration_millis(RETRY_TIMEOUT),
        },
    )
    .await
}

/// The `sms_code_retries` executor.
#[derive(Debug, Clone)]
pub struct RetryJob {
    service: PhoneLoginService,
}

impl RetryJob {
    /// The executor over `service`.
    pub fn new(service: PhoneLoginService) -> Self {
        Self { service }
    }
}

#[async_trait]
impl Executor for RetryJob {
    fn name(&self) -> &str {
        RETRY_JOB
    }

    fn check_cfg(&self, cfg: &serde_json::Value) -> Result<(), String> {
        match cfg.as_object() {
            Some(fields) if fields.is_empty() => Ok(()),
            _ => Err("the sms_code_retries executor takes no cfg; use {}".to_owned()),
        }
    }

    async fn execute(&self, _job: &JobRow, ctx: JobContext) -> anyhow::Result<()> {
        let report = self
            .service
            .retry_due(now_millis(), || ctx.still_owner())
            .await?;
        if report != RetryReport::default() {
            tracing::info!(?report, "retried queued sms codes");
        }
        Ok(())
    }
}

/// Maintenance: deletes expired codes from `sms_codes`.
#[derive(Debug, Clone)]
pub(super) struct PurgeExpiredCodes(pub(super) PhoneLoginService);

#[async_trait]
impl Job for PurgeExpiredCodes {
    fn name(&self) -> &str {
        "purge_expired_sms_codes"
    }

    async fn run(&self, _ctx: JobContext) -> anyhow::Result<()> {
        let deleted = self.0.purge_expired_codes().await?;
        tracing::info!(deleted, "purged expired sms codes");
        Ok(())
    }
}
