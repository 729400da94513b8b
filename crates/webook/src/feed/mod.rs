//! Follows and the feed: who follows whom, with exact counts and keyset-paged lists, and each
//! reader's feed of what the authors and topics they follow published, who liked their
//! articles, who followed them and who commented — pushed to small audiences, pulled from big
//! authors and from topics.
//!
//! Data flow: `/follow/*` and `/feed` ([`http`]) call [`FollowService`] ([`follows`], over
//! [`follow_store`]: one transaction per follow, with its event in the outbox and the
//! follower's inbox adjusted) and [`FeedService`] ([`service`], over [`store`]). The feed's
//! consumers turn outbox events — articles published and withdrawn, likes, follows, comments —
//! into items and fan articles out to inboxes in batches; readers merge their inbox with the
//! outboxes of the big authors they follow and the articles of the topics they follow
//! (`/topics/follow`, the same article item whichever way it comes, so never twice). [`jobs`] caps the inboxes. See [`service`] for the
//! rules.

pub mod follow_store;
pub mod follows;
mod http;
pub mod jobs;
pub mod model;
mod seed;
pub mod service;
pub mod settings;
pub mod store;

pub use follows::FollowService;
pub use model::{Delivery, FeedKind, FollowEvent, TOPIC_FOLLOW_CHANGED};
pub use seed::{
    index_seeded_topics, insert_seeded_feed_items, insert_seeded_follow_counts,
    insert_seeded_follows, insert_seeded_inbox_rows, insert_seeded_pull_authors, next_feed_item_id,
    seeded_bulk_tables, SeededFeedItem, SeededFollow, SeededFollowCount, SeededInboxRow,
    SeededPullAuthor,
};
pub use service::FeedService;
pub use settings::FeedSettings;

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry},
    telemetry::MetricsSpec,
};

/// The feed feature: follow relations and feeds. It consumes the article, like and follow
/// events, provides [`FollowService`] and [`FeedService`], and prunes inboxes on
/// `purge_schedule`.
pub struct Feed;

#[async_trait]
impl Feature for Feed {
    fn name(&self) -> &'static str {
        "feed"
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(
                11,
                "follows and feed",
                include_str!("../../migrations/0011_feed.sql"),
            ),
            Migration::new(
                25,
                "feed items by article",
                include_str!("../../migrations/0025_feed_by_article.sql"),
            ),
            Migration::new(
                33,
                "topic follows",
                include_str!("../../migrations/0033_topic_follows.sql"),
            ),
            Migration::new(
                34,
                "feed items by topic",
                include_str!("../../migrations/0034_feed_topic_items.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[service::METRICS]
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::FeedApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let settings = platform.config.settings::<FeedSettings>()?;
        let follows = FollowService::new(
            follow_store::FollowStore::new(platform.db.clone()),
            platform.outbox.clone(),
        );
        let store = store::FeedStore::new(platform.db.clone());
        let feed = FeedService::new(store.clone(), settings.feed_push_threshold);
        registry.maintenance(
            &platform.config,
            jobs::PruneFeedInboxes::new(store, settings.feed_inbox_cap),
        )?;
        let (consumer, events) = (feed.clone(), platform.events.clone());
        registry.background("feed consumers", move |background| {
            consumer.consumers(&events, background.subscription, background.stop)
        });
        registry.routes(http::router(
            http::FeedRoutes {
                follows: follows.clone(),
                feed: feed.clone(),
            },
            platform.idempotency.clone(),
        ));
        registry.provide(follows);
        registry.provide(feed);
        Ok(())
    }
}
