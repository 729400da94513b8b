//! Exactly-once application on top of at-least-once delivery: a consumer group records the ids
//! of the events it applied (`consumed_events`) in the same transaction as their effect, and
//! skips ids it already recorded. Redelivery happens when a consumer died after committing and
//! before acknowledging (Redis Streams), or when the outbox relay published a row and died
//! before deleting it; either way the event keeps its [`super::Event::id`].
//!
//! The table is the platform's ([`CONSUMED_EVENTS_MIGRATION`]). Ids are kept for [`RETENTION`] (far longer than any redelivery takes) and then deleted by the
//! maintenance job [`PurgeConsumedEvents`].

use std::{collections::HashSet, time::Duration};

use async_trait::async_trait;
use scheduler::{Job, JobContext};
use sqlx::AnyConnection;

use crate::config::DatabaseKind;
use crate::db::{bulk_row_placeholders, now_millis, Db, Migration};

/// The `consumed_events` table.
pub const CONSUMED_EVENTS_MIGRATION: Migration = Migration::new(
    27,
    "consumed events",
    include_str!("../../migrations/0027_consumed_events.sql"),
);

/// How long applied-event ids are kept.
pub const RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Ids per statement.
const CHUNK: usize = 1000;

/// Records the ids of `items` as applied by `group` in the caller's transaction and returns the
/// items to apply: those whose id was not recorded before, each id once (its first item; a batch
/// can hold an event twice, e.g. an outbox row added to a stream twice). Ids are inserted in
/// sorted order, so two instances recording overlapping batches on PostgreSQL queue instead of
/// deadlocking.
pub async fn first_deliveries<T>(
    tx: &mut AnyConnection,
    kind: DatabaseKind,
    group: &str,
    items: Vec<T>,
    id_of: impl Fn(&T) -> &str,
    now: i64,
) -> sqlx::Result<Vec<T>> {
    let mut sorted: Vec<&str> = items.iter().map(&id_of).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut fresh = HashSet::with_capacity(sorted.len());
    for chunk in sorted.chunks(CHUNK) {
        let placeholders = bulk_row_placeholders(kind, chunk.len(), 3);
        let sql = format!(
            "INSERT INTO consumed_events (group_name, event_id, ctime) VALUES {placeholders} \
             ON CONFLICT (group_name, event_id) DO NOTHING RETURNING event_id"
        );
        let mut query = sqlx::query_scalar::<_, String>(&sql);
        for id in chunk {
            query = query.bind(group).bind(*id).bind(now);
        }
        fresh.extend(query.fetch_all(&mut *tx).await?);
    }
    // `remove`: the first item of an id takes it, later ones find it gone.
    Ok(items
        .into_iter()
        .filter(|item| fresh.remove(id_of(item)))
        .collect())
}

/// Deletes applied-event ids recorded before `before` (ms); returns how many.
pub async fn purge_before(db: &Db, before: i64) -> sqlx::Result<u64> {
    Ok(sqlx::query("DELETE FROM consumed_events WHERE ctime < $1")
        .bind(before)
        .execute(db.writer())
        .await?
        .rows_affected())
}

/// Maintenance job: deletes applied-event ids older than [`RETENTION`], and parked events
/// resolved longer ago than [`super::parked::RESOLVED_RETENTION`].
#[derive(Debug, Clone)]
pub struct PurgeConsumedEvents {
    db: Db,
}

impl PurgeConsumedEvents {
    /// The job's name in logs, metrics and lock keys.
    pub const NAME: &'static str = "purge_consumed_events";

    /// The job over `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

#[async_trait]
impl Job for PurgeConsumedEvents {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn run(&self, _ctx: JobContext) -> anyhow::Result<()> {
        let retention = i64::try_from(RETENTION.as_millis()).unwrap_or(i64::MAX);
        let deleted = purge_before(&self.db, now_millis().saturating_sub(retention)).await?;
        tracing::info!(deleted, "purged applied event ids");
        // The parked events' audit trail, once resolved and old.
        let retention =
            i64::try_from(super::parked::RESOLVED_RETENTION.as_millis()).unwrap_or(i64::MAX);
        let resolved =
            super::parked::purge_resolved_before(&self.db, now_millis().saturating_sub(retention))
                .await?;
        if resolved > 0 {
            tracing::info!(resolved, "purged resolved parked events");
        }
        Ok(())
    }
}
