//! Signing in with WeChat: the website QR-connect OAuth2 flow (API.md → Users → Other ways to
//! sign in).
//!
//! Data flow: the frontend asks `GET /oauth2/wechat/authurl` ([`http`]); [`WechatLoginService`]
//! ([`service`]) makes a random `state`, signs it short-lived for a cookie, and answers WeChat's
//! QR-connect URL carrying it. The person scans the code; WeChat sends the browser back to
//! `GET /oauth2/wechat/callback?code&state`, where the service checks the state against the
//! cookie, marks it used ([`store`]: a state signs in once, on any instance), trades the code for the WeChat identity ([`client`]: one call to WeChat's API),
//! finds or creates the account of that identity (the users feature's store, one transaction)
//! and opens a session (the auth feature); the handler redirects to the frontend with the token
//! headers. [`settings`] holds the application's id, secret and URLs; without an id and secret
//! the feature is off and its routes say so.

pub mod client;
mod http;
pub mod service;
pub mod settings;
pub mod store;

pub use http::STATE_COOKIE;
pub use service::{WechatLoginError, WechatLoginService};
pub use settings::{WechatApp, WechatSettings};

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
};

use crate::{auth::AuthService, user::UserStore};

/// The WeChat login feature: the `/oauth2/wechat/*` routes; it provides
/// [`WechatLoginService`].
pub struct WechatLogin;

#[async_trait]
impl Feature for WechatLogin {
    fn name(&self) -> &'static str {
        "wechat_login"
    }

    fn needs(&self) -> &'static [Service] {
        const { &[Service::of::<AuthService>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            26,
            "wechat used states",
            include_str!("../../migrations/0026_wechat_used_states.sql"),
        )];
        MIGRATIONS
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        platform::openapi::course_routes(<http::WechatLoginApi as utoipa::OpenApi>::openapi())
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let app = platform.config.settings::<WechatSettings>()?.app()?;
        if app.is_none() {
            tracing::info!(
                "WeChat login is off (wechat_app_id, wechat_app_secret unset): \
                 /oauth2/wechat/* answer 503, code 5"
            );
        }
        let login = WechatLoginService::new(
            app,
            UserStore::new(platform.db.clone()),
            store::UsedStates::new(platform.db.clone()),
            registry.get::<AuthService>()?,
        )?;
        registry.routes(http::router(http::WechatRoutes {
            login: login.clone(),
            trusted_proxies: platform.trusted_proxies.clone(),
        }));
        registry.provide(login);
        Ok(())
    }
}
