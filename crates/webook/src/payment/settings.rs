//! The settings of payments: which provider, how long an order may be paid, the WeChat Pay
//! merchant's identity and keys, and when the reconciliation jobs run. Loaded by the
//! configuration core ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use anyhow::{bail, Context};
use platform::config::{text_or_number, Config, Secret, Settings, SettingsSpec};
use serde::{Deserialize, Deserializer, Serialize};

use super::crypto::{ApiV3Key, PlatformKeys, SigningKey};
use super::issuing_ca::IssuingCa;

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

/// Where WeChat Pay's platform keys come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PlatformMode {
    /// WeChat Pay public keys (`PUB_KEY_ID_…`), configured; nothing is downloaded. A rotation
    /// is the merchant configuring the new key beside the old.
    #[default]
    PublicKey,
    /// Platform certificates, downloaded from `GET /v3/certificates` on start, periodically and
    /// when a signature names an unknown serial; configured keys are trusted too.
    Certificate,
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
    /// More platform keys, serial → PEM public key (both sides of a rotation). In the
    /// environment: `SERIAL=PEM` entries separated by commas.
    #[serde(deserialize_with = "serial_pem_pairs")]
    pub wechatpay_platform_keys: BTreeMap<String, String>,
    /// `public_key` (configured keys only) or `certificate` (platform certificates downloaded).
    pub wechatpay_platform_mode: PlatformMode,
    /// PEM certificate(s) of the CA that must have issued downloaded platform certificates
    /// (WeChat's is the Tenpay.com Root CA); empty: the issuer is not checked.
    pub wechatpay_platform_ca: String,
    /// How often platform certificates are downloaded again (certificate mode).
    #[serde(with = "humantime_serde")]
    pub wechatpay_certificate_refresh: Duration,
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
            wechatpay_platform_keys: BTreeMap::new(),
            wechatpay_platform_mode: PlatformMode::PublicKey,
            wechatpay_platform_ca: String::new(),
            wechatpay_certificate_refresh: Duration::from_secs(12 * 3600),
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
    pub merchant_key: Arc<SigningKey>,
    /// Decrypts notifications (and downloaded platform certificates).
    pub api_v3_key: ApiV3Key,
    /// Verifies answers and notifications: the configured keys, and in certificate mode the
    /// downloaded ones (a shared keyring).
    pub platform_keys: PlatformKeys,
    /// Where platform keys come from.
    pub platform_mode: PlatformMode,
    /// The CA(s) downloaded platform certificates must be issued by; empty: not checked.
    pub platform_ca: Vec<IssuingCa>,
    /// How often platform certificates are downloaded again (certificate mode).
    pub certificate_refresh: Duration,
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
        let platform_keys = self.platform_keys()?;
        let platform_ca = if self.wechatpay_platform_ca.trim().is_empty() {
            Vec::new()
        } else {
            IssuingCa::from_pem(&self.wechatpay_platform_ca).map_err(|err| {
                anyhow::anyhow!(
                    "invalid wechatpay_platform_ca (WEBOOK_WECHATPAY_PLATFORM_CA): {err}"
                )
            })?
        };
        let refresh = self.wechatpay_certificate_refresh;
        if refresh < Duration::from_secs(60) || refresh > Duration::from_secs(24 * 3600) {
            bail!(
                "invalid wechatpay_certificate_refresh (WEBOOK_WECHATPAY_CERTIFICATE_REFRESH): \
                 between 1m and 24h"
            );
        }
        let notify_url = url::Url::parse(&self.wechatpay_notify_url)
            .ok()
            .filter(|url| url.scheme() == "https" || url.scheme() == "http")
            .context("invalid wechatpay_notify_url: an absolute http(s) URL")?;
        Ok(WechatPayConfig {
            endpoint: self.wechatpay_endpoint.trim_end_matches('/').to_owned(),
            mchid: self.wechatpay_mchid.clone(),
            appid: self.wechatpay_appid.clone(),
            merchant_key: Arc::new(merchant_key),
            api_v3_key,
            platform_keys,
            platform_mode: self.wechatpay_platform_mode,
            platform_ca,
            certificate_refresh: refresh,
            notify_url: notify_url.to_string(),
            timeout: self.wechatpay_timeout,
        })
    }
}

impl PaymentSettings {
    /// The configured platform keys: `wechatpay_platform_serial` + `_public_key` and every
    /// entry of `wechatpay_platform_keys`; an error is one line naming the setting (and entry).
    fn platform_keys(&self) -> anyhow::Result<PlatformKeys> {
        let keys = PlatformKeys::new();
        let serial = self.wechatpay_platform_serial.trim();
        let public_key = self.wechatpay_platform_public_key.trim();
        match (serial.is_empty(), public_key.is_empty()) {
            (true, true) => {}
            (false, true) => bail!(
                "wechatpay_platform_serial is set without wechatpay_platform_public_key \
                 (WEBOOK_WECHATPAY_PLATFORM_PUBLIC_KEY)"
            ),
            (true, false) => bail!(
                "wechatpay_platform_public_key is set without wechatpay_platform_serial \
                 (WEBOOK_WECHATPAY_PLATFORM_SERIAL)"
            ),
            (false, false) => keys.add_pem(serial, public_key).map_err(|err| {
                anyhow::anyhow!(
                    "invalid wechatpay_platform_public_key \
                     (WEBOOK_WECHATPAY_PLATFORM_PUBLIC_KEY): {}",
                    one_line(&err.to_string())
                )
            })?,
        }
        for (serial, pem) in &self.wechatpay_platform_keys {
            let serial = serial.trim();
            if serial.is_empty() || pem.trim().is_empty() {
                bail!(
                    "invalid wechatpay_platform_keys (WEBOOK_WECHATPAY_PLATFORM_KEYS): an entry \
                     without a serial or a key"
                );
            }
            keys.add_pem(serial, pem.trim()).map_err(|err| {
                anyhow::anyhow!(
                    "invalid wechatpay_platform_keys (WEBOOK_WECHATPAY_PLATFORM_KEYS) entry \
                     {serial:?}: {}",
                    one_line(&err.to_string())
                )
            })?;
        }
        if self.wechatpay_platform_mode == PlatformMode::PublicKey && keys.serials().is_empty() {
            bail!(
                "pay_provider = \"wechat\" needs a platform key: wechatpay_platform_keys \
                 (WEBOOK_WECHATPAY_PLATFORM_KEYS) or wechatpay_platform_serial + \
                 wechatpay_platform_public_key, or wechatpay_platform_mode = \"certificate\" \
                 to download platform certificates"
            );
        }
        Ok(keys)
    }
}

/// `text` on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads `wechatpay_platform_keys`: a table of serial → PEM (TOML), or `SERIAL=PEM` entries
/// separated by commas (an environment variable; a PEM holds no comma, and a serial no `=`).
fn serial_pem_pairs<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct Pairs;
    impl<'de> serde::de::Visitor<'de> for Pairs {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a table of serial = PEM, or SERIAL=PEM entries separated by commas")
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            parse_serial_pem_pairs(text).map_err(E::custom)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut pairs = BTreeMap::new();
            while let Some((serial, pem)) = map.next_entry::<String, String>()? {
                pairs.insert(serial, pem);
            }
            Ok(pairs)
        }
    }
    de.deserialize_any(Pairs)
}

/// `SERIAL=PEM, SERIAL=PEM` as a map; an entry without `=` is refused, naming its position.
fn parse_serial_pem_pairs(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut pairs = BTreeMap::new();
    for (index, entry) in text.split(',').map(str::trim).enumerate() {
        if entry.is_empty() {
            continue;
        }
        let Some((serial, pem)) = entry.split_once('=') else {
            return Err(format!(
                "entry {} is not SERIAL=PEM (entries are separated by commas)",
                index + 1
            ));
        };
        if pairs
            .insert(serial.trim().to_owned(), pem.trim().to_owned())
            .is_some()
        {
            return Err(format!("serial {:?} is given twice", serial.trim()));
        }
    }
    Ok(pairs)
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
        "wechatpay_platform_keys",
        "wechatpay_platform_mode",
        "wechatpay_platform_ca",
        "wechatpay_certificate_refresh",
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
