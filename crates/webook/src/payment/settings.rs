//! The settings of payments: which provider, how long an order may be paid, the WeChat Pay
//! merchant's identity and keys, and when the reconciliation jobs run. Loaded by the
//! configuration core ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::{bail, Context};
use platform::config::{text_or_number, Config, Secret, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

use super::crypto::{ApiV3Key, PlatformKeys, SigningKey};

/// How [`PaymentSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<PaymentSettings>();

/// Which provider takes the money.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ProviderName {
    /// webook's own stand-in, with a payment page where a person confirms or fails the payment
    /// (development, demos; no money moves).
    #[default]
    Fake,
    /// WeChat Pay API v3, Native payments.
    Wechat,
}

/// Payment settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct PaymentSettings {
    /// `fake` or `wechat`. Unset: `fake` when embedded (development); none in cluster mode
    /// (rewards answer code 5 until a provider is configured).
    pub pay_provider: Option<ProviderName>,
    /// Allows the `fake` provider in cluster mode (anyone can "pay" on its page).
    pub pay_allow_fake: bool,
    /// How long an order may be paid (`time_expire`); afterwards it is closed.
    #[serde(with = "humantime_serde")]
    pub pay_expiry: Duration,
    /// Prefix of the fake provider's `codeURL` (e.g. `http://192.168.1.5:8080`); empty: the
    /// path alone (`/pay/fake/…`), relative to wherever webook is served.
    pub pay_fake_base_url: String,
    /// When the durable `payment_sweep` job settles expired pending payments.
    pub pay_sweep_schedule: String,
    /// When the durable `payment_reconcile` job reconciles the days not yet reconciled (China
    /// Standard Time; WeChat publishes a day's bill after 10:00 the next day).
    pub pay_reconcile_schedule: String,
    /// How many days back `payment_reconcile` looks for days not yet reconciled
    /// ([`super::catch_up`]): whole days, 1 to 90.
    #[serde(with = "humantime_serde")]
    pub pay_reconcile_lookback: Duration,
    /// When the durable `payment_watch` job queries young pending payments ([`super::watch`]).
    pub pay_watch_schedule: String,
    /// The ages (after the order was recorded) at which a pending payment is queried at the
    /// provider: ascending, each below `pay_expiry`; empty: no active queries.
    #[serde(with = "super::watch::durations")]
    pub pay_query_after: Vec<Duration>,
    /// WeChat Pay API endpoint.
    pub wechatpay_endpoint: String,
    /// Merchant id (`mchid`).
    #[serde(deserialize_with = "text_or_number")]
    pub wechatpay_mchid: String,
    /// App id the orders are for (`appid`).
    #[serde(deserialize_with = "text_or_number")]
    pub wechatpay_appid: String,
    /// Serial number of the merchant API certificate (`serial_no` of signed requests).
    #[serde(deserialize_with = "text_or_number")]
    pub wechatpay_merchant_serial: String,
    /// The merchant API private key, PKCS#8 PEM (`apiclient_key.pem`'s contents).
    pub wechatpay_merchant_key: Secret,
    /// The APIv3 key (32 characters) that notifications are encrypted with.
    pub wechatpay_api_v3_key: Secret,
    /// Serial of the platform key: the WeChat Pay public key id (`PUB_KEY_ID_…`) or the
    /// platform certificate's serial.
    #[serde(deserialize_with = "text_or_number")]
    pub wechatpay_platform_serial: String,
    /// The platform's public key, PEM (`-----BEGIN PUBLIC KEY-----`).
    pub wechatpay_platform_public_key: String,
    /// Where WeChat sends notifications: the public URL of `/pay/wechat/notify`.
    pub wechatpay_notify_url: String,
    /// How long one WeChat Pay request may take.
    #[serde(with = "humantime_serde")]
    pub wechatpay_timeout: Duration,
}

impl Default for PaymentSettings {
    fn default() -> Self {
        Self {
            pay_provider: None,
            pay_allow_fake: false,
            pay_expiry: Duration::from_secs(30 * 60),
            pay_fake_base_url: String::new(),
            pay_sweep_schedule: "@every 1m".to_owned(),
            pay_reconcile_schedule: "0 30 * * * *".to_owned(),
            pay_reconcile_lookback: super::catch_up::DEFAULT_LOOKBACK,
            pay_watch_schedule: "@every 15s".to_owned(),
            pay_query_after: super::watch::DEFAULT_QUERY_AFTER.to_vec(),
            wechatpay_endpoint: "https://api.mch.weixin.qq.com".to_owned(),
            wechatpay_mchid: String::new(),
            wechatpay_appid: String::new(),
            wechatpay_merchant_serial: String::new(),
            wechatpay_merchant_key: Secret::default(),
            wechatpay_api_v3_key: Secret::default(),
            wechatpay_platform_serial: String::new(),
            wechatpay_platform_public_key: String::new(),
            wechatpay_notify_url: String::new(),
            wechatpay_timeout: Duration::from_secs(5),
        }
    }
}

/// The WeChat Pay merchant, read and checked from the settings.
#[derive(Debug)]
pub struct WechatPayConfig {
    /// API endpoint, without a trailing `/`.
    pub endpoint: String,
    /// Merchant id.
    pub mchid: String,
    /// App id.
    pub appid: String,
    /// Signs our requests (its serial is the merchant certificate's).
    pub merchant_key: SigningKey,
    /// Decrypts notifications.
    pub api_v3_key: ApiV3Key,
    /// Verifies answers and notifications.
    pub platform_keys: PlatformKeys,
    /// `notify_url` of every order.
    pub notify_url: String,
    /// Per-request timeout.
    pub timeout: Duration,
}

impl PaymentSettings {
    /// The provider in use: `pay_provider`, or when unset `fake` embedded and none in cluster
    /// mode.
    pub fn provider(&self, config: &Config) -> Option<ProviderName> {
        match self.pay_provider {
            Some(name) => Some(name),
            None if config.is_cluster() => None,
            None => Some(ProviderName::Fake),
        }
    }

    /// The WeChat Pay merchant these settings describe; an error names the first bad key.
    pub fn wechat(&self) -> anyhow::Result<WechatPayConfig> {
        let required = [
            ("wechatpay_mchid", self.wechatpay_mchid.as_str()),
            ("wechatpay_appid", &self.wechatpay_appid),
            ("wechatpay_merchant_serial", &self.wechatpay_merchant_serial),
            (
                "wechatpay_merchant_key",
                self.wechatpay_merchant_key.expose(),
            ),
            ("wechatpay_api_v3_key", self.wechatpay_api_v3_key.expose()),
            ("wechatpay_platform_serial", &self.wechatpay_platform_serial),
            (
                "wechatpay_platform_public_key",
                &self.wechatpay_platform_public_key,
            ),
            ("wechatpay_notify_url", &self.wechatpay_notify_url),
        ];
        if let Some((key, _)) = required.iter().find(|(_, value)| value.trim().is_empty()) {
            bail!(
                "pay_provider = \"wechat\" needs {key} (WEBOOK_{})",
                key.to_uppercase()
            );
        }
        let merchant_key = SigningKey::from_pem(
            &self.wechatpay_merchant_serial,
            self.wechatpay_merchant_key.expose(),
        )
        .context("invalid wechatpay_merchant_key")?;
        let api_v3_key = ApiV3Key::new(self.wechatpay_api_v3_key.expose())
            .context("invalid wechatpay_api_v3_key")?;
        let mut platform_keys = PlatformKeys::new();
        platform_keys
            .add_pem(
                &self.wechatpay_platform_serial,
                &self.wechatpay_platform_public_key,
            )
            .context("invalid wechatpay_platform_public_key")?;
        let notify_url = url::Url::parse(&self.wechatpay_notify_url)
            .ok()
            .filter(|url| url.scheme() == "https" || url.scheme() == "http")
            .context("invalid wechatpay_notify_url: an absolute http(s) URL")?;
        Ok(WechatPayConfig {
            endpoint: self.wechatpay_endpoint.trim_end_matches('/').to_owned(),
            mchid: self.wechatpay_mchid.clone(),
            appid: self.wechatpay_appid.clone(),
            merchant_key,
            api_v3_key,
            platform_keys,
            notify_url: notify_url.to_string(),
            timeout: self.wechatpay_timeout,
        })
    }
}

impl Settings for PaymentSettings {
    const KEYS: &'static [&'static str] = &[
        "pay_provider",
        "pay_allow_fake",
        "pay_expiry",
        "pay_fake_base_url",
        "pay_sweep_schedule",
        "pay_reconcile_schedule",
        "pay_reconcile_lookback",
        "pay_watch_schedule",
        "pay_query_after",
        "wechatpay_endpoint",
        "wechatpay_mchid",
        "wechatpay_appid",
        "wechatpay_merchant_serial",
        "wechatpay_merchant_key",
        "wechatpay_api_v3_key",
        "wechatpay_platform_serial",
        "wechatpay_platform_public_key",
        "wechatpay_notify_url",
        "wechatpay_timeout",
    ];

    fn validate(&self, config: &Config) -> anyhow::Result<()> {
        if self.pay_expiry < Duration::from_secs(60)
            || self.pay_expiry > Duration::from_secs(2 * 3600)
        {
            bail!("invalid pay_expiry (WEBOOK_PAY_EXPIRY): between 1m and 2h");
        }
        for (key, schedule) in [
            ("pay_sweep_schedule", &self.pay_sweep_schedule),
            ("pay_reconcile_schedule", &self.pay_reconcile_schedule),
            ("pay_watch_schedule", &self.pay_watch_schedule),
        ] {
            if let Err(err) = scheduler::Schedule::parse(schedule) {
                bail!("invalid {key} (WEBOOK_{}): {err}", key.to_uppercase());
            }
        }
        super::watch::check_query_after(&self.pay_query_after, self.pay_expiry)?;
        super::catch_up::check_lookback(self.pay_reconcile_lookback)?;
        match self.provider(config) {
            None => Ok(()),
            Some(ProviderName::Fake) if config.is_cluster() && !self.pay_allow_fake => bail!(
                "pay_provider = \"fake\" lets anyone mark a payment paid: in cluster mode set \
                 pay_provider = \"wechat\", or pay_allow_fake = true for a test deployment"
            ),
            Some(ProviderName::Fake) => Ok(()),
            Some(ProviderName::Wechat) => {
                if self.wechatpay_timeout.is_zero()
                    || self.wechatpay_timeout >= config.request_timeout
                {
                    bail!(
                        "invalid wechatpay_timeout (WEBOOK_WECHATPAY_TIMEOUT): above 0 and \
                         shorter than request_timeout"
                    );
                }
                self.wechat().map(drop)
            }
        }
    }
}
