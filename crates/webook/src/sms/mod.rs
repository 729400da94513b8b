//! Text messages: the providers webook sends through and the delivery that chooses among them.
//! Today's only message is the login code of [`crate::phone_login`], which owns what is sent
//! and what happens when nothing could be sent (its durable retry queue).
//!
//! Data flow: [`settings`] names the providers in order; [`Sms::install`] builds a client per
//! provider ([`tencent`], [`aliyun`], [`log`]) on one shared HTTP client, wraps them in
//! [`SmsDelivery`] (failover or round robin, per-provider circuits and rate limit:
//! [`delivery`]) and provides it to the features installed after it.

pub mod aliyun;
pub mod delivery;
pub mod log;
pub mod provider;
pub mod settings;
pub mod tencent;

pub use delivery::{HealthPolicy, Skipped, SmsDelivery, Undelivered};
pub use provider::{mask_phone, AliyunConfig, SendError, SmsMessage, SmsProvider, TencentConfig};

use std::sync::Arc;

use async_trait::async_trait;
use platform::{
    config::{Config, SettingsSpec},
    feature::{Feature, Platform, Registry, Service},
    rate_limit::RateLimiter,
    redis::Redis,
    telemetry::MetricsSpec,
};

use settings::{SmsSettings, Strategy};

/// The SMS feature: provides [`SmsDelivery`].
pub struct Sms;

const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[(
        delivery::SMS_SEND_SECONDS,
        &[0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0],
    )],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_counter!(
        delivery::SMS_SEND_TOTAL,
        "SMS provider attempts, by provider and outcome (ok, failed, timeout, rate_limited, \
         throttled, circuit_open)"
    );
    metrics::describe_histogram!(
        delivery::SMS_SEND_SECONDS,
        "Seconds per SMS provider request, by provider"
    );
    metrics::describe_gauge!(
        delivery::SMS_CIRCUIT_OPEN,
        "1 while an SMS provider's circuit is open on this instance, by provider"
    );
}

#[async_trait]
impl Feature for Sms {
    fn name(&self) -> &'static str {
        "sms"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<SmsDelivery>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[METRICS]
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        registry.provide(build(&platform.config, platform.redis.as_ref())?);
        Ok(())
    }
}

/// The delivery `config` describes (a per-provider rate limit in Redis when given).
pub fn build(config: &Config, redis: Option<&Redis>) -> anyhow::Result<SmsDelivery> {
    let settings = config.settings::<SmsSettings>()?;
    let http = reqwest::Client::builder()
        .timeout(settings.sms_timeout)
        .build()?;
    let mut providers: Vec<Arc<dyn SmsProvider>> = Vec::new();
    for name in settings.providers(config) {
        let provider: Arc<dyn SmsProvider> = match name.as_str() {
            "tencent" => Arc::new(tencent::TencentSms::new(settings.tencent()?, http.clone())),
            "aliyun" => Arc::new(aliyun::AliyunSms::new(settings.aliyun()?, http.clone())),
            "log" => {
                tracing::warn!(
                    "SMS provider `log` in use: login codes are written to the log, not sent \
                     (development only; configure sms_providers for real messages)"
                );
                Arc::new(log::LogSms)
            }
            other => anyhow::bail!("unknown SMS provider {other:?}"),
        };
        providers.push(provider);
    }
    let rate_limit = RateLimiter::unless_off(
        "sms_provider",
        redis.map(|redis| (redis, config.redis_prefix.as_str())),
        settings.sms_provider_rate_limit,
        settings.sms_provider_rate_window,
    )?;
    Ok(SmsDelivery::new(
        providers,
        settings.sms_strategy == Strategy::RoundRobin,
        HealthPolicy {
            failures_to_open: settings.sms_circuit_failures,
            open_for: settings.sms_circuit_open,
        },
        settings.sms_timeout,
        rate_limit,
    ))
}
