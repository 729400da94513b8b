//! Comments on any object (`biz` + `biz_id`): threads where every comment stays reachable
//! however large they grow, safe deletion (tombstones keep replies reachable), exact counts.
//!
//! Data flow: `/comments` ([`http`]) calls [`CommentService`] ([`service`]: rate limit,
//! rules, cache fixes) over [`store`] (one transaction per write: the comment, its thread's
//! counters, the object's `comment_cnt` in `interactives`, and one `comment_changed` event per
//! recipient in the outbox). The feed consumes those events into `comment` items; the article
//! reader view and feed items show the count through the interactive feature's counts.
//! Screening ([`crate::screening`]) refuses a comment with a refused word; one with a held word
//! is written hidden (`held`), out of the counts and without events, until a moderator's
//! restore publishes it as a new comment would be.

mod http;
pub mod model;
mod seed;
pub mod service;
pub mod settings;
pub mod store;

pub use model::{
    CommentEvent, CommentView, Deleted, NewComment, Posted, ThreadPage, TOPIC_COMMENT_CHANGED,
};
pub use seed::{insert_seeded_comments, next_comment_id, SeededComment};
pub use service::CommentService;
pub use settings::CommentSettings;
pub use store::{CommentModerated, CommentModeration, CommentStore};

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
    live::LiveRateLimiter,
    telemetry::MetricsSpec,
};

use crate::{interactive::InteractiveService, screening::Screening};

/// The comments feature: it provides [`CommentService`] and the `/comments` routes, and
/// records `comment_changed` events for the feed.
pub struct Comments;

#[async_trait]
impl Feature for Comments {
    fn name(&self) -> &'static str {
        "comments"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<CommentService>()] }
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
                13,
                "comments",
                include_str!("../../migrations/0013_comments.sql"),
            ),
            Migration::new(
                40,
                "comment_held",
                include_str!("../../migrations/0040_comment_held.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[service::METRICS]
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::CommentsApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let limiter = LiveRateLimiter::new(
            "comment",
            &platform.live,
            platform.redis_with_prefix(),
            settings::comment_limit,
        )?;
        let comments = CommentService::new(
            CommentStore::new(platform.db.clone()),
            registry.get::<InteractiveService>()?,
            platform.outbox.clone(),
            limiter,
        )?
        .screened_by(registry.get::<Screening>()?);
        registry.routes(http::router(
            http::CommentRoutes {
                comments: comments.clone(),
            },
            platform.idempotency.clone(),
        ));
        registry.provide(comments);
        Ok(())
    }
}
