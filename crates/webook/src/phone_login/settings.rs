//! The settings of signing in by SMS code: how long a code lives, how often one may be sent, how
//! many wrong tries kill it, the daily limits (per phone, per client, per client and phone), the
//! site's budget of codes, and how often undelivered codes are retried.
//! Loaded by the configuration core ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`PhoneLoginSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<PhoneLoginSettings>();

/// SMS-code sign-in settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct PhoneLoginSettings {
    /// How long a code is valid.
    #[serde(with = "humantime_serde")]
    pub sms_code_ttl: Duration,
    /// Least time between two codes to one phone.
    #[serde(with = "humantime_serde")]
    pub sms_code_resend_interval: Duration,
    /// Wrong tries that kill a code.
    pub sms_code_max_attempts: u32,
    /// Codes one phone may be sent per day (sliding 24 h).
    pub sms_code_daily_limit_per_phone: u32,
    /// Codes sent at the request of one client (IPv4 address or IPv6 network) per day (sliding
    /// 24 h).
    pub sms_code_daily_limit_per_ip: u32,
    /// Codes sent to one phone at the request of one client per day (sliding 24 h): well below
    /// the per-phone limit, so that a stranger cannot use up a phone's codes.
    pub sms_code_daily_limit_per_ip_phone: u32,
    /// Codes the whole site may send per `sms_code_budget_window` (shared by every instance in
    /// cluster mode); 0 turns the budget off.
    pub sms_code_budget: u32,
    /// The window of `sms_code_budget`.
    #[serde(with = "humantime_serde")]
    pub sms_code_budget_window: Duration,
    /// When the durable `sms_code_retries` job retries codes no provider took (created with
    /// this schedule; operators may change the job afterwards).
    pub sms_retry_schedule: String,
}

impl Default for PhoneLoginSettings {
    fn default() -> Self {
        Self {
            sms_code_ttl: Duration::from_secs(10 * 60),
            sms_code_resend_interval: Duration::from_secs(60),
            sms_code_max_attempts: 3,
            sms_code_daily_limit_per_phone: 10,
            sms_code_daily_limit_per_ip: 100,
            sms_code_daily_limit_per_ip_phone: 3,
            sms_code_budget: 200,
            sms_code_budget_window: Duration::from_secs(60),
            sms_retry_schedule: "@every 5s".to_owned(),
        }
    }
}

impl Settings for PhoneLoginSettings {
    const KEYS: &'static [&'static str] = &[
        "sms_code_ttl",
        "sms_code_resend_interval",
        "sms_code_max_attempts",
        "sms_code_daily_limit_per_phone",
        "sms_code_daily_limit_per_ip",
        "sms_code_daily_limit_per_ip_phone",
        "sms_code_budget",
        "sms_code_budget_window",
        "sms_retry_schedule",
    ];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if self.sms_code_ttl < Duration::from_secs(1)
            || self.sms_code_ttl > Duration::from_secs(3600)
        {
            bail!("invalid sms_code_ttl (WEBOOK_SMS_CODE_TTL): between 1s and 1h");
        }
        if self.sms_code_resend_interval >= self.sms_code_ttl {
            bail!(
                "invalid sms_code_resend_interval (WEBOOK_SMS_CODE_RESEND_INTERVAL): shorter \
                 than sms_code_ttl"
            );
        }
        if !(1..=10).contains(&self.sms_code_max_attempts) {
            bail!("invalid sms_code_max_attempts (WEBOOK_SMS_CODE_MAX_ATTEMPTS): 1 to 10");
        }
        if self.sms_code_daily_limit_per_phone == 0 || self.sms_code_daily_limit_per_ip == 0 {
            bail!(
                "invalid sms_code_daily_limit_per_phone / _per_ip \
                 (WEBOOK_SMS_CODE_DAILY_LIMIT_PER_PHONE, …_PER_IP): above 0"
            );
        }
        if self.sms_code_daily_limit_per_ip_phone == 0
            || self.sms_code_daily_limit_per_ip_phone > self.sms_code_daily_limit_per_phone
        {
            bail!(
                "invalid sms_code_daily_limit_per_ip_phone \
                 (WEBOOK_SMS_CODE_DAILY_LIMIT_PER_IP_PHONE): above 0 and at most \
                 sms_code_daily_limit_per_phone ({})",
                self.sms_code_daily_limit_per_phone
            );
        }
        if self.sms_code_budget > 0 && self.sms_code_budget_window < Duration::from_millis(1) {
            bail!("invalid sms_code_budget_window (WEBOOK_SMS_CODE_BUDGET_WINDOW): at least 1ms");
        }
        if let Err(err) = scheduler::Schedule::parse(&self.sms_retry_schedule) {
            bail!(
                "invalid sms_retry_schedule (WEBOOK_SMS_RETRY_SCHEDULE) {:?}: {err}",
                self.sms_retry_schedule
            );
        }
        Ok(())
    }
}
