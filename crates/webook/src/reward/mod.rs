//! Rewards: a reader pays an article's author through a payment (API.md → Rewards, payments
//! and accounts). The author receives the amount less the platform's share, posted to the
//! ledger when the payment succeeds.
//!
//! Data flow: `POST /articles/pub/reward` ([`http`]) → [`RewardService::create`]: the reward and
//! its pending payment in one transaction ([`store`], [`crate::payment`]), then the provider's
//! order and its code URL. The payment's `payment_succeeded` / `payment_failed` event (outbox)
//! reaches the consumers here, which mark the reward paid and post its split in one transaction, or
//! mark it failed, and wake the long polls of `POST /reward/detail`. See [`service`] for the rules.

pub mod http;
pub mod model;
pub mod service;
pub mod settings;
pub mod store;

pub use model::{Reward, RewardStatus, Role};
pub use service::{RewardCreated, RewardService, RewardView, MAX_AMT, MIN_AMT, REWARD_BIZ};
pub use settings::RewardSettings;
pub use store::RewardStore;

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
    rate_limit::RateLimiter,
};

use crate::{article::ArticleService, payment::PaymentService};

/// The rewards feature: provides [`RewardService`].
pub struct Rewards;

#[async_trait]
impl Feature for Rewards {
    fn name(&self) -> &'static str {
        "rewards"
    }

    fn needs(&self) -> &'static [Service] {
        const {
            &[
                Service::of::<PaymentService>(),
                Service::of::<ArticleService>(),
            ]
        }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(
                19,
                "rewards",
                include_str!("../../migrations/0019_rewards.sql"),
            ),
            Migration::new(
                30,
                "reward share",
                include_str!("../../migrations/0030_reward_share.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        platform::openapi::course_routes(<http::RewardsApi as utoipa::OpenApi>::openapi())
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let settings = platform.config.settings::<RewardSettings>()?;
        let payments = registry.get::<PaymentService>()?;
        let rewards = RewardService::new(
            RewardStore::new(platform.db.clone()),
            payments.clone(),
            registry.get::<ArticleService>()?,
            settings.reward_share_bps,
            settings.long_poll(&platform.config),
        );
        payments.register_seller(REWARD_BIZ, std::sync::Arc::new(rewards.clone()));
        let (consumer, events) = (rewards.clone(), platform.events.clone());
        registry.background("reward consumers", move |background| {
            consumer.consumers(&events, background.subscription, background.stop)
        });
        registry.routes(http::router(
            http::RewardRoutes {
                rewards: rewards.clone(),
                limiter: RateLimiter::unless_off(
                    "reward",
                    platform.redis_with_prefix(),
                    settings.reward_rate_limit,
                    settings.reward_rate_window,
                )?,
            },
            platform.idempotency.clone(),
        ));
        registry.provide(rewards);
        Ok(())
    }
}
