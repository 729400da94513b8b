//! (to be written)

use async_trait::async_trait;
use platform::feature::{Feature, Platform, Registry};

/// (to be written)
pub struct PhoneLogin;

#[async_trait]
impl Feature for PhoneLogin {
    fn name(&self) -> &'static str {
        "phone_login"
    }

    async fn install(&self, _platform: &Platform, _registry: &mut Registry) -> anyhow::Result<()> {
        Ok(())
    }
}
