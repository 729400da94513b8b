//! Signing in by SMS code (API.md → Users → Other ways to sign in): `POST
//! /users/login_sms/code/send` sends a 6-digit code, `POST /users/login_sms` signs in with it,
//! creating the phone's account (without a password) on first login.
//!
//! Data flow: [`http`] parses requests and calls [`PhoneLoginService`] ([`service`]), which
//! checks phones and codes ([`code`]), keeps codes as keyed digests in the mode's store
//! ([`store`]: `sms_codes` when embedded, Redis in cluster mode, each operation atomic), sends
//! through the SMS feature's [`crate::sms::SmsDelivery`], queues what no provider took
//! ([`retry`]: a table worked by the durable `sms_code_retries` job), and finds or creates the
//! account through the users feature's store and opens its session through [`AuthService`].

pub mod code;
pub mod http;
pub mod jobs;
pub mod retry;
pub mod service;
pub mod settings;
pub mod store;

pub use service::{Delivery, PhoneLoginService};

use std::time::Duration;

use async_trait::async_trait;

use platform::{
    config::{Config, SettingsSpec},
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
    rate_limit::RateLimiter,
    telemetry::MetricsSpec,
};

use crate::{auth::AuthService, sms::SmsDelivery, user::UserStore};
use jobs::PurgeExpiredCodes;
use service::{CodePolicy, SendLimits};
use settings::PhoneLoginSettings;
use store::CodeStore;

/// The SMS sign-in feature. Installed after auth, users and sms, whose services it uses.
pub struct PhoneLogin;

const DAY: Duration = Duration::from_secs(24 * 3600);

const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_counter!(
        service::SMS_LOGIN_EVENTS_TOTAL,
        "SMS login events, by event (sent, queued, too_soon, over_limit, over_budget, accepted, \
         refused, retry_sent, retry_postponed, dropped_expired, dropped_superseded, signup)"
    );
}

#[async_trait]
impl Feature for PhoneLogin {
    fn name(&self) -> &'static str {
        "phone_login"
    }

    fn needs(&self) -> &'static [Service] {
        const { &[Service::of::<AuthService>(), Service::of::<SmsDelivery>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[METRICS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            16,
            "sms codes",
            include_str!("../../migrations/0016_sms_codes.sql"),
        )];
        MIGRATIONS
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        platform::openapi::course_routes(<http::PhoneLoginApi as utoipa::OpenApi>::openapi())
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let config = &platform.config;
        let settings = config.settings::<PhoneLoginSettings>()?;
        let auth = registry.get::<AuthService>()?;
        let service = build(
            config,
            platform,
            auth.clone(),
            registry.get::<SmsDelivery>()?,
        )?;
        registry.executor(jobs::RetryJob::new(service.clone()));
        if config.role.runs_work() {
            jobs::ensure_job(
                &crate::jobs::store(&platform.db),
                &settings.sms_retry_schedule,
            )
            .await?;
        }
        registry.maintenance(config, PurgeExpiredCodes(service.clone()))?;
        registry.routes(http::router(http::PhoneLoginRoutes {
            service: service.clone(),
            auth,
            trusted_proxies: platform.trusted_proxies.clone(),
        }));
        registry.provide(service);
        Ok(())
    }
}

/// The service of the mode: codes in Redis and limits shared through it in cluster mode, in
/// `sms_codes` and in-process limits when embedded.
fn build(
    config: &Config,
    platform: &Platform,
    auth: AuthService,
    delivery: SmsDelivery,
) -> anyhow::Result<PhoneLoginService> {
    let settings = config.settings::<PhoneLoginSettings>()?;
    let codes = match platform.redis.as_ref() {
        Some(redis) => CodeStore::redis(redis.clone(), &config.redis_prefix),
        None => CodeStore::sql(platform.db.clone()),
    };
    let shared = platform.redis_with_prefix();
    let daily = |name, limit| RateLimiter::of_mode(name, shared, limit, DAY);
    let limits = SendLimits {
        per_ip_phone: daily(
            "sms_code_ip_phone",
            settings.sms_code_daily_limit_per_ip_phone,
        )?,
        per_ip: daily("sms_code_ip", settings.sms_code_daily_limit_per_ip)?,
        per_phone: daily("sms_code_phone", settings.sms_code_daily_limit_per_phone)?,
        budget: RateLimiter::unless_off(
            service::BUDGET_LIMITER,
            shared,
            settings.sms_code_budget,
            settings.sms_code_budget_window,
        )?,
    };
    Ok(PhoneLoginService::new(
        codes,
        retry::RetryQueue::new(platform.db.clone()),
        delivery,
        auth,
        UserStore::new(platform.db.clone()),
        limits,
        CodePolicy {
            ttl: settings.sms_code_ttl,
            resend_interval: settings.sms_code_resend_interval,
            max_attempts: settings.sms_code_max_attempts,
        },
    ))
}
