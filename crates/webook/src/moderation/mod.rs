//! Moderation: readers report articles, comments and users; admins work through a review
//! queue and hide, restore or delete content and suspend accounts; every action is audited.
//!
//! Data flow: [`http`] takes reports (a [`platform::caller::Writer`]: rate-limited, refused to
//! suspended accounts) and admins' actions, and calls [`ModerationService`], which files
//! reports with a snapshot of their target and keeps the audit log through [`store`], and acts
//! on targets through their own features — [`crate::article::ArticleService::moderate`] and
//! [`crate::comment::CommentService::moderate`] — so hidden content leaves every surface
//! (reader view, lists, hot list, feed, search, topics, comment threads) by the same outbox
//! events and cache steps as a withdrawal or a deletion, on every instance. A suspension is a
//! row the [`service::WriteGate`] reads on each write (the platform's write gates; the writes
//! waiting together are read in one query by its [`service::GateReader`]), with the stricter
//! limit of new accounts. Every action but a dismissal records a
//! [`ModerationEvent`] (topic `moderation_acted`) with its audit entry, in one transaction: the
//! notifications feature tells the author or the account what happened and why. Content the
//! word lists hold (articles, comments) waits hidden until an admin approves it with `restore`.

pub mod cli;
pub mod http;
pub mod model;
pub mod service;
pub mod settings;
pub mod store;

use std::sync::Arc;

use async_trait::async_trait;
use clap::FromArgMatches;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{CliCommands, Feature, Platform, Registry, Service},
    telemetry::MetricsSpec,
};

use crate::{article::ArticleService, auth::AuthSettings, comment::CommentService};
pub use model::{ModerationEvent, TOPIC_MODERATION_ACTED};
pub use service::ModerationService;
pub use settings::ModerationSettings;
use store::ModerationStore;

/// The moderation feature.
pub struct Moderation;

#[async_trait]
impl Feature for Moderation {
    fn name(&self) -> &'static str {
        "moderation"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<Arc<ModerationService>>()] }
    }

    fn needs(&self) -> &'static [Service] {
        const {
            &[
                Service::of::<ArticleService>(),
                Service::of::<CommentService>(),
            ]
        }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            38,
            "moderation",
            include_str!("../../migrations/0038_moderation.sql"),
        )];
        MIGRATIONS
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<cli::ModerationCli>(|matches, context| {
            Box::pin(async move {
                let cli::ModerationCli::Moderation { command } =
                    cli::ModerationCli::from_arg_matches(&matches)?;
                cli::run(&context.config, context.schema, command).await
            })
        }))
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[service::METRICS]
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::ModerationApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let settings = platform.config.settings::<ModerationSettings>()?;
        let moderation = Arc::new(ModerationService::new(
            ModerationStore::new(platform.db.clone()),
            registry.get::<ArticleService>()?,
            registry.get::<CommentService>()?,
            platform.outbox.clone(),
            settings,
            platform.config.settings::<AuthSettings>()?.write_rate_limit > 0,
            (&platform.live, platform.redis_with_prefix()),
        )?);
        registry.gate_writes(Arc::new(service::WriteGate::new(moderation.clone())));
        registry.routes(http::router(
            moderation.clone(),
            platform.idempotency.clone(),
        ));
        registry.provide(moderation);
        Ok(())
    }
}
