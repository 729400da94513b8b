//! Tencent Cloud SMS (placeholder until the client lands).

use async_trait::async_trait;

use super::provider::{SendError, SmsMessage, SmsProvider, TencentConfig};

/// Tencent Cloud SMS.
#[derive(Debug)]
pub struct TencentSms;

impl TencentSms {
    /// A client.
    pub fn new(_config: TencentConfig, _http: reqwest::Client) -> Self {
        Self
    }
}

#[async_trait]
impl SmsProvider for TencentSms {
    fn name(&self) -> &str {
        "tencent"
    }
    async fn send(&self, _message: &SmsMessage) -> Result<(), SendError> {
        Err(SendError::Failed("not written".into()))
    }
}
