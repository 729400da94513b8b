//! Reads, likes and collects of any object (`biz` + `biz_id`): exact counters under concurrency,
//! idempotent actions, and reads counted in batches from an event stream. The same row holds
//! the object's comment count, which the comments feature moves in its own transactions
//! ([`add_comments`]).
//!
//! Data flow: feature handlers (articles today) call [`InteractiveService`]; likes and collects
//! go straight to [`store`] in one transaction each; reads become events on the event stream,
//! which the read counter applies batch by batch. Counts are served through a versioned cache.
//! See [`service`] for the rules.

pub mod model;
mod seed;
pub mod service;
pub mod store;

pub use model::{Counts, InteractionEvent, UserFlags, TOPIC_COLLECT_CHANGED, TOPIC_LIKE_CHANGED};
pub use seed::{
    add_seeded_comment_counts, insert_seeded_counters, insert_seeded_interactions, LikeOrCollect,
    SeededCommentCount, SeededCounters, SeededInteraction,
};
pub use service::InteractiveService;
pub use store::add_comments;

use async_trait::async_trait;
use platform::{
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
};

use store::InteractiveStore;

/// The interactive feature: counts, likes, collects and reads. It provides
/// [`InteractiveService`] to the features installed after it and counts reads in the background.
pub struct Interactive;

#[async_trait]
impl Feature for Interactive {
    fn name(&self) -> &'static str {
        "interactive"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<InteractiveService>()] }
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(
                4,
                "interactive",
                include_str!("../../migrations/0004_interactive.sql"),
            ),
            Migration::new(
                12,
                "comment counts",
                include_str!("../../migrations/0012_comment_counts.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn metrics(&self) -> &'static [platform::telemetry::MetricsSpec] {
        &[service::METRICS]
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let interactive = InteractiveService::new(
            InteractiveStore::new(platform.db.clone()),
            platform.events.clone(),
            platform.outbox.clone(),
            platform.redis_with_prefix(),
            platform.config.cache_memory_bytes,
        );
        let counter = interactive.clone();
        registry.background("read counter", move |background| {
            counter.read_counter(background.subscription, background.stop)
        });
        registry.provide(interactive);
        Ok(())
    }
}
