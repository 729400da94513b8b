//! Alibaba Cloud SMS (placeholder until the client lands).

use async_trait::async_trait;

use super::provider::{AliyunConfig, SendError, SmsMessage, SmsProvider};

/// Alibaba Cloud SMS.
#[derive(Debug)]
pub struct AliyunSms;

impl AliyunSms {
    /// A client.
    pub fn new(_config: AliyunConfig, _http: reqwest::Client) -> Self {
        Self
    }
}

#[async_trait]
impl SmsProvider for AliyunSms {
    fn name(&self) -> &str {
        "aliyun"
    }
    async fn send(&self, _message: &SmsMessage) -> Result<(), SendError> {
        Err(SendError::Failed("not written".into()))
    }
}
