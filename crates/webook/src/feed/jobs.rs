//! Periodic upkeep of the feed, run on `purge_schedule` by one instance per fire time.

use async_trait::async_trait;
use scheduler::{Job, JobContext};

use crate::feed::store::FeedStore;
use platform::db::now_millis;

/// Users whose inboxes one prune statement covers.
const USERS_PER_STATEMENT: i64 = 2_000;
/// Notices older than this with no inbox row left are deleted.
const ORPHAN_AGE_MS: i64 = 24 * 3600 * 1000;
/// Orphaned notices deleted per statement.
const ORPHANS_PER_STATEMENT: i64 = 10_000;

/// Keeps every inbox to its newest `feed_inbox_cap` items, range of users by range (short
/// write transactions), then deletes the like, follow and comment items no inbox holds any more.
#[derive(Debug, Clone)]
pub struct PruneFeedInboxes {
    store: FeedStore,
    cap: i64,
}

impl PruneFeedInboxes {
    /// The job's name in logs, metrics and lock keys.
    pub const NAME: &'static str = "prune_feed_inboxes";

    /// The job over `store`, keeping `cap` items per inbox.
    pub fn new(store: FeedStore, cap: i64) -> Self {
        Self { store, cap }
    }

    /// One whole pass; returns (inbox rows, orphaned items) deleted.
    pub async fn prune(&self) -> anyhow::Result<(u64, u64)> {
        let last = self.store.max_inbox_uid().await?;
        let mut rows = 0;
        let mut from = 0;
        while from <= last {
            let to = from.saturating_add(USERS_PER_STATEMENT);
            rows += self.store.prune_inboxes(from, to, self.cap).await?;
            from = to;
        }
        let before = now_millis() - ORPHAN_AGE_MS;
        let mut orphans = 0;
        loop {
            let deleted = self
                .store
                .purge_orphan_notices(before, ORPHANS_PER_STATEMENT)
                .await?;
            orphans += deleted;
            if deleted < ORPHANS_PER_STATEMENT as u64 {
                break;
            }
        }
        Ok((rows, orphans))
    }
}

#[async_trait]
impl Job for PruneFeedInboxes {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn run(&self, _ctx: JobContext) -> anyhow::Result<()> {
        let (rows, orphans) = self.prune().await?;
        tracing::info!(rows, orphans, "pruned feed inboxes");
        Ok(())
    }
}
