//! What every SMS provider is to the rest of webook: something that takes one message — a
//! template of the provider's and its parameters, to one phone — and says whether it accepted
//! it. The providers themselves: [`super::tencent`] (Tencent Cloud SMS, API v3), [`super::aliyun`]
//! (Alibaba Cloud SMS) and [`super::log`] (development); [`super::delivery`] chooses among them.

use std::{fmt, time::Duration};

use async_trait::async_trait;
use platform::config::Secret;

/// One text message: the provider's template for `purpose`, filled with `params`, to `phone`.
#[derive(Clone, PartialEq, Eq)]
pub struct SmsMessage {
    /// Mainland mobile number, 11 digits (`1[3-9]…`), without `+86`; providers that want E.164
    /// add the prefix.
    pub phone: String,
    /// The template's parameters, in the template's order, each with the name that templates
    /// with named parameters (Alibaba's `${code}`) use.
    pub params: Vec<(&'static str, String)>,
}

/// A message's parameters may hold a login code: never print them.
impl fmt::Debug for SmsMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmsMessage")
            .field("phone", &mask_phone(&self.phone))
            .field("params", &self.params.len())
            .finish()
    }
}

/// `138****5678`: enough of a phone number for logs.
pub fn mask_phone(phone: &str) -> String {
    let digits: Vec<char> = phone.chars().collect();
    if digits.len() < 7 {
        return "*".repeat(digits.len());
    }
    let (head, tail) = (&digits[..3], &digits[digits.len() - 4..]);
    format!(
        "{}{}{}",
        head.iter().collect::<String>(),
        "*".repeat(digits.len() - 7),
        tail.iter().collect::<String>()
    )
}

/// Why a provider did not take a message. Every kind makes delivery try the next provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The provider said we send too much (its frequency control or our quota): try another
    /// one, and this one again after a while — it is healthy.
    #[error("rate limited by the provider: {0}")]
    RateLimited(String),
    /// No answer within the provider's timeout.
    #[error("timed out")]
    Timeout,
    /// Unreachable, a 5xx, an unparseable answer, or an error code of the provider's.
    #[error("{0}")]
    Failed(String),
}

/// The [`SendError`] of a request to `provider` that got no answer: a timeout, or a failure
/// saying why (connecting, a cut-short answer) with its causes — but never the URL, whose
/// query may hold the login code (Alibaba's does).
pub fn transport_error(provider: &str, error: reqwest::Error) -> SendError {
    if error.is_timeout() {
        return SendError::Timeout;
    }
    SendError::Failed(format!(
        "{provider}: {}",
        crate::outside_http::describe_failure(error)
    ))
}

/// Sends a signed `request` to `provider`, reads its answer whole and lets `interpret` judge it
/// (from the HTTP status and body); logs the outcome at DEBUG with the phone masked.
pub async fn exchange(
    provider: &str,
    request: reqwest::RequestBuilder,
    phone: &str,
    interpret: impl FnOnce(u16, &[u8]) -> Result<(), SendError>,
) -> Result<(), SendError> {
    let outcome = async {
        let answer = crate::outside_http::send(request)
            .await
            .map_err(|err| transport_error(provider, err))?;
        let status = answer.status().as_u16();
        let bytes = answer
            .bytes()
            .await
            .map_err(|err| transport_error(provider, err))?;
        interpret(status, &bytes)
    }
    .await;
    match &outcome {
        Ok(()) => tracing::debug!(provider, phone = %mask_phone(phone), "SMS accepted"),
        Err(error) => {
            tracing::debug!(provider, phone = %mask_phone(phone), %error, "SMS not accepted")
        }
    }
    outcome
}

/// An SMS provider.
#[async_trait]
pub trait SmsProvider: Send + Sync + fmt::Debug {
    /// Its name in config, logs and metrics (`tencent`, `aliyun`, `log`).
    fn name(&self) -> &str;

    /// Sends `message`; `Ok` only when the provider accepted it.
    async fn send(&self, message: &SmsMessage) -> Result<(), SendError>;
}

/// Tencent Cloud SMS (API v3, `SendSms`, TC3-HMAC-SHA256).
#[derive(Debug, Clone)]
pub struct TencentConfig {
    /// Base URL, default `https://sms.tencentcloudapi.com` (tests: a loopback fake).
    pub endpoint: String,
    /// `X-TC-Region`, e.g. `ap-guangzhou`.
    pub region: String,
    /// API key id (`AKID…`).
    pub secret_id: String,
    /// API key secret.
    pub secret_key: Secret,
    /// The SMS application's `SmsSdkAppId`.
    pub sdk_app_id: String,
    /// Approved signature (`SignName`).
    pub sign_name: String,
    /// Approved template (`TemplateId`), whose parameters are the message's, in order.
    pub template_id: String,
    /// How long one request may take.
    pub timeout: Duration,
}

/// Alibaba Cloud SMS (`dysmsapi` `SendSms`).
#[derive(Debug, Clone)]
pub struct AliyunConfig {
    /// Base URL, default `https://dysmsapi.aliyuncs.com` (tests: a loopback fake).
    pub endpoint: String,
    /// AccessKey id.
    pub access_key_id: String,
    /// AccessKey secret.
    pub access_key_secret: Secret,
    /// Approved signature (`SignName`).
    pub sign_name: String,
    /// Approved template (`TemplateCode`), whose named parameters are the message's.
    pub template_code: String,
    /// How long one request may take.
    pub timeout: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phones_are_masked_and_messages_never_print_their_parameters() {
        assert_eq!(mask_phone("13812345678"), "138****5678");
        let message = SmsMessage {
            phone: "13812345678".to_owned(),
            params: vec![("code", "493817".to_owned())],
        };
        let printed = format!("{message:?}");
        assert!(
            !printed.contains("493817") && !printed.contains("12345678"),
            "{printed}"
        );
    }
}
