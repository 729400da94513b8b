//! Tags: each user's own labels (a tag belongs to its creator, unique per creator whatever the
//! case and surrounding spaces), put by an object's owner on their objects (articles today, any
//! [`Biz`](crate::biz::Biz) tomorrow), and the published articles carrying a tag.
//!
//! Data flow: `/tags*` ([`http`]) call [`TagService`] ([`service`]: the rules, the cached tag
//! list of each owner) over [`store`] (SQL: one upsert per create, one transaction per replace
//! of an object's tags, with its `tags_changed` event in the outbox, one statement per page of
//! a tag's articles). The search feature is to consume [`TOPIC_TAGS_CHANGED`] ([`TagsEvent`]:
//! the object's tag names after each replace). [`model`] holds the names' rules and shapes.

mod http;
pub mod model;
pub mod service;
pub mod store;

pub use model::{tag_key, Tag, TagName, TagsEvent, TOPIC_TAGS_CHANGED};
pub use service::TagService;

use std::sync::Arc;

use async_trait::async_trait;
use platform::{
    db::Migration,
    feature::{Feature, Platform, Registry},
};

use crate::{auth::AuthService, idempotency::Idempotency};

/// The tags feature: provides [`TagService`] and serves `/tags*`.
pub struct Tags;

#[async_trait]
impl Feature for Tags {
    fn name(&self) -> &'static str {
        "tags"
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            14,
            "tags",
            include_str!("../../migrations/0014_tags.sql"),
        )];
        MIGRATIONS
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let tags = TagService::new(
            store::TagStore::new(platform.db.clone()),
            platform.outbox.clone(),
            platform.redis_with_prefix(),
            platform.config.cache_memory_bytes,
        );
        registry.routes(http::router(
            http::TagRoutes {
                tags: tags.clone(),
                auth: registry.get::<AuthService>()?,
            },
            registry.get::<Arc<Idempotency>>()?,
        ));
        registry.provide(tags);
        Ok(())
    }
}
