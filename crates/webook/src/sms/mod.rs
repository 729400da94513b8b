//! Text messages: the providers webook can send through and the delivery that chooses among
//! them.

pub mod aliyun;
pub mod provider;
pub mod tencent;

pub use provider::{mask_phone, AliyunConfig, SendError, SmsMessage, SmsProvider, TencentConfig};

use async_trait::async_trait;
use platform::feature::{Feature, Platform, Registry};

/// The SMS feature.
pub struct Sms;

#[async_trait]
impl Feature for Sms {
    fn name(&self) -> &'static str {
        "sms"
    }

    async fn install(&self, _platform: &Platform, _registry: &mut Registry) -> anyhow::Result<()> {
        Ok(())
    }
}
