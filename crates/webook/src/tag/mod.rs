//! Tags: each user's own labels (a tag belongs to its creator, unique per creator by its
//! normalised name: [`model`]; at most `tag_max_per_user` of them: [`settings`]), put by an object's owner on their objects (articles today, any
//! [`Biz`](crate::biz::Biz) tomorrow), and the published articles carrying a tag. Every owner's
//! tags of one key are one **topic** (`/topics/{name}`, [`Topic`]): readers browse its articles
//! whoever wrote them.
//!
//! Data flow: `/tags*` ([`http`]) call [`TagService`] ([`service`]: the rules, the cached tag
//! list of each owner, served in pages) over [`store`] (SQL: one insert-or-nothing under the
//! cap per create, the start-up re-key of keys made by older rules, one transaction per replace
//! of an object's tags, with its `tags_changed` event in the outbox, one statement per page of
//! a tag's articles). The search feature is to consume [`TOPIC_TAGS_CHANGED`] ([`TagsEvent`]:
//! the object's tag names after each replace). [`model`] holds the names' rules and shapes.

mod http;
pub mod model;
mod seed;
pub mod service;
pub mod settings;
pub mod store;

pub use model::{tag_key, Tag, TagName, TaggedArticle, TagsEvent, TopicOrder, TOPIC_TAGS_CHANGED};
pub use seed::{
    insert_seeded_tag_rows, insert_seeded_tags, next_tag_id, SeededTag, SeededTagRow,
    SEEDED_BULK_TABLES,
};
pub use service::{TagService, Topic};
pub use settings::TagSettings;

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
};

/// The tags feature: provides [`TagService`] and serves `/tags*`.
pub struct Tags;

#[async_trait]
impl Feature for Tags {
    fn name(&self) -> &'static str {
        "tags"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<TagService>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(14, "tags", include_str!("../../migrations/0014_tags.sql")),
            Migration::new(
                32,
                "topics",
                include_str!("../../migrations/0032_topics.sql"),
            ),
            Migration::new(
                35,
                "tag rows by topic",
                include_str!("../../migrations/0035_tag_rows_by_topic.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::TagsApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let tags = TagService::new(
            store::TagStore::new(platform.db.clone()),
            platform.outbox.clone(),
            platform.redis_with_prefix(),
            platform.config.cache_memory_bytes,
            platform.config.settings::<TagSettings>()?,
        );
        // Before the routes serve: keys made by older rules (the service's docs).
        tags.rekey().await?;
        registry.routes(http::router(
            http::TagRoutes { tags: tags.clone() },
            platform.idempotency.clone(),
        ));
        registry.provide(tags);
        Ok(())
    }
}
