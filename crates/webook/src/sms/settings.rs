//! The settings of text messages: which providers, in which order, how delivery treats a
//! failing one, and each provider's endpoint and credentials. Loaded by the configuration core
//! ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{
    list_or_comma_separated, text_or_number, Config, Secret, Settings, SettingsSpec,
};
use serde::{Deserialize, Serialize};

use super::provider::{AliyunConfig, TencentConfig};

/// How [`SmsSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<SmsSettings>();

/// Provider names `sms_providers` may list.
pub const PROVIDER_NAMES: &[&str] = &["tencent", "aliyun", "log"];

/// How delivery picks the first provider to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Always the first healthy one in `sms_providers` order; the next on failure.
    #[default]
    Failover,
    /// Each message starts one further along the list (spreads the load); the next on failure.
    RoundRobin,
}

/// Text-message settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct SmsSettings {
    /// Providers in order (env: comma-separated): `tencent`, `aliyun`, `log`. Unset: `log` when
    /// embedded (development), none in cluster mode.
    #[serde(deserialize_with = "list_or_comma_separated")]
    pub sms_providers: Vec<String>,
    /// `failover` or `round_robin`.
    pub sms_strategy: Strategy,
    /// Allows the `log` provider in cluster mode (it writes codes into the log).
    pub sms_allow_log_provider: bool,
    /// How long one provider request may take.
    #[serde(with = "humantime_serde")]
    pub sms_timeout: Duration,
    /// Consecutive failures (errors or timeouts) of a provider that open its circuit.
    pub sms_circuit_failures: u32,
    /// How long an open circuit skips its provider before one trial message.
    #[serde(with = "humantime_serde")]
    pub sms_circuit_open: Duration,
    /// Messages each provider may be sent per `sms_provider_rate_window` (shared by every
    /// instance in cluster mode); beyond it the next provider is tried. 0: no limit.
    pub sms_provider_rate_limit: u32,
    /// The window of `sms_provider_rate_limit`.
    #[serde(with = "humantime_serde")]
    pub sms_provider_rate_window: Duration,
    /// Tencent Cloud SMS API endpoint.
    pub sms_tencent_endpoint: String,
    /// Tencent Cloud region (`X-TC-Region`).
    pub sms_tencent_region: String,
    /// Tencent Cloud API key id.
    #[serde(deserialize_with = "text_or_number")]
    pub sms_tencent_secret_id: String,
    /// Tencent Cloud API key secret (empty: unset).
    pub sms_tencent_secret_key: Secret,
    /// Tencent SMS application id (`SmsSdkAppId`).
    #[serde(deserialize_with = "text_or_number")]
    pub sms_tencent_sdk_app_id: String,
    /// Tencent approved signature.
    #[serde(deserialize_with = "text_or_number")]
    pub sms_tencent_sign_name: String,
    /// Tencent template of the login code (parameters: the code, then its minutes of validity).
    #[serde(deserialize_with = "text_or_number")]
    pub sms_tencent_template_id: String,
    /// Alibaba Cloud SMS API endpoint.
    pub sms_aliyun_endpoint: String,
    /// Alibaba Cloud AccessKey id.
    #[serde(deserialize_with = "text_or_number")]
    pub sms_aliyun_access_key_id: String,
    /// Alibaba Cloud AccessKey secret (empty: unset).
    pub sms_aliyun_access_key_secret: Secret,
    /// Alibaba approved signature.
    #[serde(deserialize_with = "text_or_number")]
    pub sms_aliyun_sign_name: String,
    /// Alibaba template of the login code (`${code}`, `${minutes}`).
    #[serde(deserialize_with = "text_or_number")]
    pub sms_aliyun_template_code: String,
}

impl Default for SmsSettings {
    fn default() -> Self {
        Self {
            sms_providers: Vec::new(),
            sms_strategy: Strategy::Failover,
            sms_allow_log_provider: false,
            sms_timeout: Duration::from_secs(5),
            sms_circuit_failures: 3,
            sms_circuit_open: Duration::from_secs(30),
            sms_provider_rate_limit: 0,
            sms_provider_rate_window: Duration::from_secs(1),
            sms_tencent_endpoint: "https://sms.tencentcloudapi.com".to_owned(),
            sms_tencent_region: "ap-guangzhou".to_owned(),
            sms_tencent_secret_id: String::new(),
            sms_tencent_secret_key: Secret::default(),
            sms_tencent_sdk_app_id: String::new(),
            sms_tencent_sign_name: String::new(),
            sms_tencent_template_id: String::new(),
            sms_aliyun_endpoint: "https://dysmsapi.aliyuncs.com".to_owned(),
            sms_aliyun_access_key_id: String::new(),
            sms_aliyun_access_key_secret: Secret::default(),
            sms_aliyun_sign_name: String::new(),
            sms_aliyun_template_code: String::new(),
        }
    }
}

impl SmsSettings {
    /// The providers in use: `sms_providers`, or its mode's default when unset.
    pub fn providers(&self, config: &Config) -> Vec<String> {
        if !self.sms_providers.is_empty() {
            return self.sms_providers.clone();
        }
        if config.is_cluster() {
            Vec::new()
        } else {
            vec!["log".to_owned()]
        }
    }

    /// Tencent's client configuration.
    pub fn tencent(&self) -> anyhow::Result<TencentConfig> {
        let required = [
            ("sms_tencent_secret_id", &self.sms_tencent_secret_id),
            ("sms_tencent_sdk_app_id", &self.sms_tencent_sdk_app_id),
            ("sms_tencent_sign_name", &self.sms_tencent_sign_name),
            ("sms_tencent_template_id", &self.sms_tencent_template_id),
        ];
        check_required("tencent", &required)?;
        let secret_key = self.sms_tencent_secret_key.clone();
        if secret_key.expose().is_empty() {
            bail!("sms_providers lists tencent: set sms_tencent_secret_key (WEBOOK_SMS_TENCENT_SECRET_KEY)");
        }
        Ok(TencentConfig {
            endpoint: self.sms_tencent_endpoint.clone(),
            region: self.sms_tencent_region.clone(),
            secret_id: self.sms_tencent_secret_id.clone(),
            secret_key,
            sdk_app_id: self.sms_tencent_sdk_app_id.clone(),
            sign_name: self.sms_tencent_sign_name.clone(),
            template_id: self.sms_tencent_template_id.clone(),
            timeout: self.sms_timeout,
        })
    }

    /// Alibaba's client configuration.
    pub fn aliyun(&self) -> anyhow::Result<AliyunConfig> {
        let required = [
            ("sms_aliyun_access_key_id", &self.sms_aliyun_access_key_id),
            ("sms_aliyun_sign_name", &self.sms_aliyun_sign_name),
            ("sms_aliyun_template_code", &self.sms_aliyun_template_code),
        ];
        check_required("aliyun", &required)?;
        let access_key_secret = self.sms_aliyun_access_key_secret.clone();
        if access_key_secret.expose().is_empty() {
            bail!("sms_providers lists aliyun: set sms_aliyun_access_key_secret (WEBOOK_SMS_ALIYUN_ACCESS_KEY_SECRET)");
        }
        Ok(AliyunConfig {
            endpoint: self.sms_aliyun_endpoint.clone(),
            access_key_id: self.sms_aliyun_access_key_id.clone(),
            access_key_secret,
            sign_name: self.sms_aliyun_sign_name.clone(),
            template_code: self.sms_aliyun_template_code.clone(),
            timeout: self.sms_timeout,
        })
    }
}

fn check_required(provider: &str, values: &[(&str, &String)]) -> anyhow::Result<()> {
    for (key, value) in values {
        if value.trim().is_empty() {
            bail!(
                "sms_providers lists {provider}: set {key} (WEBOOK_{})",
                key.to_uppercase()
            );
        }
    }
    Ok(())
}

impl Settings for SmsSettings {
    const KEYS: &'static [&'static str] = &[
        "sms_providers",
        "sms_strategy",
        "sms_allow_log_provider",
        "sms_timeout",
        "sms_circuit_failures",
        "sms_circuit_open",
        "sms_provider_rate_limit",
        "sms_provider_rate_window",
        "sms_tencent_endpoint",
        "sms_tencent_region",
        "sms_tencent_secret_id",
        "sms_tencent_secret_key",
        "sms_tencent_sdk_app_id",
        "sms_tencent_sign_name",
        "sms_tencent_template_id",
        "sms_aliyun_endpoint",
        "sms_aliyun_access_key_id",
        "sms_aliyun_access_key_secret",
        "sms_aliyun_sign_name",
        "sms_aliyun_template_code",
    ];

    fn validate(&self, config: &Config) -> anyhow::Result<()> {
        let providers = self.providers(config);
        for (index, name) in providers.iter().enumerate() {
            if !PROVIDER_NAMES.contains(&name.as_str()) {
                bail!(
                    "invalid sms_providers (WEBOOK_SMS_PROVIDERS): unknown provider {name:?}; \
                     use {}",
                    PROVIDER_NAMES.join(", ")
                );
            }
            if providers[..index].contains(name) {
                bail!("invalid sms_providers (WEBOOK_SMS_PROVIDERS): {name:?} listed twice");
            }
        }
        if providers.iter().any(|name| name == "log")
            && config.is_cluster()
            && !self.sms_allow_log_provider
        {
            bail!(
                "sms_providers lists log in cluster mode: it writes login codes into the log; \
                 configure a real provider, or set sms_allow_log_provider \
                 (WEBOOK_SMS_ALLOW_LOG_PROVIDER) for a test deployment"
            );
        }
        if self.sms_timeout.is_zero() || self.sms_timeout > Duration::from_secs(30) {
            bail!("invalid sms_timeout (WEBOOK_SMS_TIMEOUT): above 0 and at most 30s");
        }
        if self.sms_circuit_failures == 0 || self.sms_circuit_open.is_zero() {
            bail!(
                "invalid sms_circuit_failures / sms_circuit_open (WEBOOK_SMS_CIRCUIT_FAILURES, \
                 WEBOOK_SMS_CIRCUIT_OPEN): both must be above 0"
            );
        }
        if self.sms_provider_rate_limit > 0 && self.sms_provider_rate_window.is_zero() {
            bail!("invalid sms_provider_rate_window (WEBOOK_SMS_PROVIDER_RATE_WINDOW): above 0");
        }
        for name in &providers {
            match name.as_str() {
                "tencent" => drop(self.tencent()?),
                "aliyun" => drop(self.aliyun()?),
                _ => {}
            }
        }
        Ok(())
    }
}
