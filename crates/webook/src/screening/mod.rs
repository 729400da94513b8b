//! Screening at write time: the moderators' word lists (Chinese and English), each refusing or
//! holding for review the articles and comments whose text contains one of its words, matched
//! through disguises (NFKC, case, width, punctuation and spaces between the characters) in one
//! linear pass whatever the number of words ([`matcher`]).
//!
//! Data flow: admins edit lists ([`http`], under `/admin/moderation/word-lists`) into the
//! database ([`store`]); every instance follows the lists' version and swaps in a new compiled
//! matcher within a poll ([`Screening::follow`]); the articles and comments features, installed
//! after this one, ask [`Screening::verdict`] before they write: a refusal is code 4 naming the
//! list and the word; a hold publishes nothing until a moderator approves it (an article's
//! reader copy is kept hidden, with the reason, for the review queue).

pub mod http;
pub mod matcher;
pub mod service;
pub mod settings;
pub mod store;

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
    telemetry::MetricsSpec,
};

pub use service::{Outcome, Screening};
use settings::ScreeningSettings;
use store::ScreeningStore;

/// The screening feature: it provides [`Screening`] to the features that write text.
pub struct ScreeningFeature;

#[async_trait]
impl Feature for ScreeningFeature {
    fn name(&self) -> &'static str {
        "screening"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<Screening>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            39,
            "screening",
            include_str!("../../migrations/0039_screening.sql"),
        )];
        MIGRATIONS
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[service::METRICS]
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::ScreeningApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let settings = platform.config.settings::<ScreeningSettings>()?;
        let screening = Screening::load(ScreeningStore::new(platform.db.clone())).await?;
        let (follower, poll) = (screening.clone(), settings.screening_poll);
        registry.background("word lists", move |background| {
            follower.follow(poll, background.stop)
        });
        registry.routes(http::router(screening.clone()));
        registry.provide(screening);
        Ok(())
    }
}
