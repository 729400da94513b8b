//! Signing in with WeChat: the website QR-connect OAuth2 flow (API.md → Users → Other ways to
//! sign in). So far its [`settings`]: the application's id, secret and URLs; without an id and
//! secret the feature is off.

pub mod settings;

pub use settings::{WechatApp, WechatSettings};

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    feature::{Feature, Platform, Registry},
};

/// The WeChat login feature (routes to come).
pub struct WechatLogin;

#[async_trait]
impl Feature for WechatLogin {
    fn name(&self) -> &'static str {
        "wechat_login"
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    async fn install(&self, _platform: &Platform, _registry: &mut Registry) -> anyhow::Result<()> {
        Ok(())
    }
}
