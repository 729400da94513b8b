//! Notifications: each user's inbox of what happened to them — replies to their comments,
//! comments on their articles, likes and collects of their articles (grouped per article and
//! day: "12 people liked …"), new followers, rewards received, moderators' actions on their
//! content or account — with an unread count, read
//! marks, per-kind preferences and a retention.
//!
//! Data flow: the features that change things record outbox events (`comment_changed`,
//! `like_changed`, `collect_changed`, `follow_changed`, `payment_succeeded`,
//! `payment_refunded`, `article_withdrawn`, `moderation_acted`); this feature's consumers (group `notifications`,
//! [`service`]) turn them into rows of `notifications` ([`store`]: one transaction per batch,
//! deduplicated by event id, each source's state kept so counts stay exact and late events
//! change nothing). `/notifications*` ([`http`]) reads and marks the caller's rows; the
//! `purge_notifications` maintenance job ([`jobs`]) deletes rows older than
//! `notifications_retention` ([`settings`]). `GET /notifications/stream` sends the caller's
//! unread count as it changes ([`live`]: in-process broadcast, Redis pub/sub across instances).

mod http;
pub mod jobs;
pub mod live;
pub mod model;
pub mod service;
pub mod settings;
pub mod store;

pub use http::STREAM_LIFETIME;
pub use model::{Kind, NotificationView, Preferences, Unread};
pub use service::{NotificationService, GROUP, NOTIFICATIONS_WRITTEN_TOTAL};
pub use settings::NotificationSettings;
pub use store::NotificationStore;

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
    telemetry::MetricsSpec,
};

use crate::reward::RewardStore;

/// The notifications feature: the consumers writing the inboxes, the `/notifications` routes,
/// the retention job; provides [`NotificationService`].
pub struct Notifications;

#[async_trait]
impl Feature for Notifications {
    fn name(&self) -> &'static str {
        "notifications"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<NotificationService>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(
                37,
                "notifications",
                include_str!("../../migrations/0037_notifications.sql"),
            ),
            Migration::new(
                41,
                "moderation_notifications",
                include_str!("../../migrations/0041_moderation_notifications.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[service::METRICS]
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::NotificationsApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let settings = platform.config.settings::<NotificationSettings>()?;
        let store = NotificationStore::new(platform.db.clone());
        let live = live::Live::new(platform.redis_with_prefix());
        let notifications = NotificationService::new(
            store.clone(),
            RewardStore::new(platform.db.clone()),
            live.clone(),
        );
        registry.maintenance(
            &platform.config,
            jobs::PurgeNotifications::new(store, settings.notifications_retention),
        )?;
        let (consumer, events) = (notifications.clone(), platform.events.clone());
        registry.background("notifications consumers", move |background| {
            consumer.consumers(&events, background.subscription, background.stop)
        });
        let redis_url = platform.config.redis_url.clone();
        registry.background("notifications live relay", move |background| {
            live.relay(redis_url, background.stop)
        });
        registry.routes(http::router(http::NotificationRoutes {
            notifications: notifications.clone(),
            draining: platform.draining.clone(),
            stream_switch: platform::live::Switch::new(
                platform.live.clone(),
                "notifications_stream",
                |config| {
                    config
                        .settings::<NotificationSettings>()
                        .ok()
                        .map(|settings| &settings.notifications_stream)
                },
            ),
        }));
        registry.provide(notifications);
        Ok(())
    }
}
