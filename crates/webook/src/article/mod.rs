//! Articles: drafts, publishing, withdrawal, the author's views and the reader view.
//!
//! Data flow: [`http`] parses requests (reads of visitors without an account too, when
//! `anonymous_reading` is on: their reads count once per window, [`visitors`]) and calls
//! [`ArticleService`], which validates and sanitises input ([`model`]), writes both copies
//! through [`store`] (one transaction when both change), then keeps [`cache`] in step and
//! emits `article_published` / `article_withdrawn` events on the event stream for feed and
//! search. The reader view is answered from a page rendered once per published copy
//! ([`reader_page`]), with the counters and the reader's flags appended per request.

pub mod cache;
mod http;
pub mod model;
pub mod reader_page;
mod seed;
pub mod service;
pub mod settings;
pub mod store;
pub mod visitors;

/// The reader copy of a published article (what the reader view and the public pages show).
pub use model::PublishedArticle as ReaderCopy;
pub use model::{
    abstract_of_text, text_of, text_prefix_of, ArticleEvent, ArticleStatus, PublishedItem,
    TOPIC_PUBLISHED, TOPIC_WITHDRAWN,
};
pub use seed::{
    insert_seeded_articles, next_article_id, published_after, published_authors, PublishedArticle,
    SeededArticle,
};
pub use service::ArticleService;
pub use store::{Moderated, Moderation};

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
};

use crate::{interactive::InteractiveService, screening::Screening};
use cache::ArticleCache;
use store::ArticleStore;

/// The articles feature: drafts, publishing, withdrawal and the reader view (with its counts
/// and the caller's likes, from the interactive feature installed before it).
pub struct Articles;

#[async_trait]
impl Feature for Articles {
    fn name(&self) -> &'static str {
        "articles"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<ArticleService>()] }
    }

    fn needs(&self) -> &'static [Service] {
        const {
            &[
                Service::of::<InteractiveService>(),
                Service::of::<Screening>(),
            ]
        }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(
                3,
                "articles",
                include_str!("../../migrations/0003_articles.sql"),
            ),
            Migration::new(
                20,
                "published_by_author",
                include_str!("../../migrations/0020_published_by_author.sql"),
            ),
            Migration::new(
                36,
                "article_moderation",
                include_str!("../../migrations/0036_article_moderation.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        platform::openapi::course_routes(<http::ArticlesApi as utoipa::OpenApi>::openapi())
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let articles = ArticleService::new(
            ArticleStore::new(platform.db.clone()),
            ArticleCache::new(
                platform.redis_with_prefix(),
                platform.config.cache_memory_bytes,
            ),
            platform.outbox.clone(),
        )
        .screened_by(registry.get::<Screening>()?);
        let settings = platform.config.settings::<settings::ArticleSettings>()?;
        registry.routes(http::router(
            http::ArticleRoutes {
                articles: articles.clone(),
                interactive: registry.get::<InteractiveService>()?,
                visitors: visitors::Visitors::new(
                    platform.redis_with_prefix(),
                    settings.anonymous_read_window,
                )?,
                trusted_proxies: platform.trusted_proxies.clone(),
            },
            platform.idempotency.clone(),
        ));
        registry.provide(articles);
        Ok(())
    }
}
