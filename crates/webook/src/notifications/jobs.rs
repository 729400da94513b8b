//! Periodic upkeep of notifications: the `purge_notifications` maintenance job, run on
//! `purge_schedule` by one instance per fire time, deletes what is older than
//! `notifications_retention`.

use std::time::Duration;

use async_trait::async_trait;
use scheduler::{Job, JobContext};

use crate::notifications::store::NotificationStore;
use platform::db::now_millis;

/// Notifications deleted per transaction (short write transactions).
const PER_TRANSACTION: i64 = 5_000;

/// Deletes notifications (and the sources behind them) last changed before the retention.
#[derive(Debug, Clone)]
pub struct PurgeNotifications {
    store: NotificationStore,
    retention: Duration,
}

impl PurgeNotifications {
    /// The job's name in logs, metrics and lock keys.
    pub const NAME: &'static str = "purge_notifications";

    /// The job over `store`, keeping `retention`.
    pub fn new(store: NotificationStore, retention: Duration) -> Self {
        Self { store, retention }
    }

    /// One whole pass; returns the notifications deleted.
    pub async fn purge(&self) -> anyhow::Result<u64> {
        let retention = i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX);
        let before = now_millis().saturating_sub(retention);
        let mut deleted = 0;
        loop {
            let step = self.store.purge_before(before, PER_TRANSACTION).await?;
            deleted += step;
            if step < PER_TRANSACTION as u64 {
                return Ok(deleted);
            }
        }
    }
}

#[async_trait]
impl Job for PurgeNotifications {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn run(&self, _ctx: JobContext) -> anyhow::Result<()> {
        let deleted = self.purge().await?;
        tracing::info!(deleted, "purged old notifications");
        Ok(())
    }
}
