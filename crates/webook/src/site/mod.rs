//! The public site: what a visitor, a crawler and a link preview read without the console's
//! script — server-rendered pages at clean addresses (`/a/{id}` an article, `/u/{id}` an author,
//! `/t/{name}` a topic), Atom feeds (the latest articles, the hot list, each author, each
//! topic), `robots.txt` and sitemaps paged for millions of articles.
//!
//! Data flow: [`http`] reads through the same services as the API — the reader-copy cache of
//! [`ArticleService`] (the authority on what is published), the lists of published articles,
//! [`UserService`] profiles, [`TagService`] topics, the hot list's snapshot — and, for the
//! sitemaps only, [`store`] (ids by range, one index scan a page). [`render`] turns that into
//! text: pages into the console's own document ([`ConsoleShell`]), so the console's script
//! takes a page over where it runs (its router reads `/a/7` as `#/article/7`) and a crawler
//! keeps the rendered content. An article page is rendered once per reader copy and kept
//! compressed ([`http::ArticlePages`]); links are absolute under `site_url` ([`settings`]).

mod http;
mod render;
mod settings;
mod store;

pub use settings::SiteSettings;
pub use store::SITEMAP_PAGE;

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
};

use crate::{
    article::ArticleService, console::ConsoleShell, ranking::RankingService, tag::TagService,
    user::UserService,
};

/// The public site feature.
pub struct Site;

#[async_trait]
impl Feature for Site {
    fn name(&self) -> &'static str {
        "site"
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            42,
            "published_by_utime",
            include_str!("../../migrations/0042_published_by_utime.sql"),
        )];
        MIGRATIONS
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn needs(&self) -> &'static [Service] {
        const {
            &[
                Service::of::<ArticleService>(),
                Service::of::<UserService>(),
                Service::of::<TagService>(),
                Service::of::<RankingService>(),
                Service::of::<ConsoleShell>(),
            ]
        }
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::SiteApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let settings = platform.config.settings::<SiteSettings>()?;
        registry.routes(http::router(http::SiteRoutes {
            articles: registry.get::<ArticleService>()?,
            users: registry.get::<UserService>()?,
            tags: registry.get::<TagService>()?,
            ranking: registry.get::<RankingService>()?,
            shell: registry.get::<ConsoleShell>()?,
            store: store::SiteStore::new(platform.db.clone()),
            origin: settings.origin(),
            live: platform.live.clone(),
            // An eighth of the cache budget (the reader view's pages have a quarter).
            pages: http::ArticlePages::new(platform.config.cache_memory_bytes / 8),
            sitemaps: http::SitemapCache::default(),
        }));
        Ok(())
    }
}
