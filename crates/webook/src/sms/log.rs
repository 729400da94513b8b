//! The `log` provider, for development: it "sends" a message by writing it — login code
//! included — to the log at WARN, so a developer can sign in without an SMS account. The
//! embedded default; start-up warns that it is in use, and cluster mode refuses it unless
//! `sms_allow_log_provider` is set (`super::settings`).

use async_trait::async_trait;

use super::provider::{mask_phone, SendError, SmsMessage, SmsProvider};

/// Writes messages to the log instead of sending them.
#[derive(Debug, Clone, Default)]
pub struct LogSms;

#[async_trait]
impl SmsProvider for LogSms {
    fn name(&self) -> &str {
        "log"
    }

    async fn send(&self, message: &SmsMessage) -> Result<(), SendError> {
        let params = message
            .params
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(" ");
        // The point of this provider: the phone's owner is the developer reading the log.
        tracing::warn!(
            phone = %mask_phone(&message.phone),
            to = %message.phone,
            "sms (log provider, not sent): {params}"
        );
        Ok(())
    }
}
