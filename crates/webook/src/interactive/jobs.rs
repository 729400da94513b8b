//! Periodic upkeep of the read counter, run by the process's scheduler (see
//! `crate::infra::jobs`).

use async_trait::async_trait;
use scheduler::{Job, JobContext};

use crate::interactive::InteractiveService;

/// Deletes applied-event ids older than their retention: they only exist to recognise a Redis
/// Streams redelivery, which happens within minutes, never a day later.
#[derive(Debug, Clone)]
pub struct PurgeConsumedEvents {
    interactive: InteractiveService,
}

impl PurgeConsumedEvents {
    /// The job's name in logs, metrics and lock keys.
    pub const NAME: &'static str = "purge_consumed_events";

    /// The job over `interactive`'s store.
    pub fn new(interactive: InteractiveService) -> Self {
        Self { interactive }
    }
}

#[async_trait]
impl Job for PurgeConsumedEvents {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn run(&self, _ctx: JobContext) -> anyhow::Result<()> {
        let deleted = self.interactive.purge_consumed_events().await?;
        tracing::info!(deleted, "purged applied event ids");
        Ok(())
    }
}
