//! Signing in with an email and password: sign-up, login, token refresh with rotation, logout,
//! sessions, the sign-in and write rate limits, admin rights. (SMS and WeChat sign-in are the
//! `phone_login` and `wechat_login` features; they open sessions through [`AuthService`].)
//!
//! Data flow: [`http`] parses requests (rate-limiting sign-up and login per client IP) and calls
//! [`AuthService`], which validates credentials (the account rules of
//! [`crate::user::model`]), hashes passwords off the async runtime ([`password`]), reads and
//! writes accounts through the users feature's store, signs tokens ([`token`]) and keeps
//! session state — revocation and refresh generations — in the [`session`] store (in-process +
//! SQL when embedded, Redis in cluster mode).
//!
//! Other features never name this one to know their caller: they take `platform::caller`'s
//! extractors (`Caller`, `AuthUser`, `Writer`, `Admin`), which this feature backs by installing
//! [`SessionCallers`] as the platform's caller resolver — tokens checked by [`AuthService`],
//! admin rights (by user id: config `admins` or `webook admin grant`) by [`Admins`].

pub mod admin;
pub mod http;
pub mod jobs;
pub mod password;
pub mod service;
pub mod session;
pub mod settings;
pub mod token;

pub use admin::Admins;
pub use http::with_tokens;
pub use jobs::PurgeExpiredSessions;
pub use password::PasswordHasher;
pub use service::{AuthService, TokenPair, AUTH_EVENTS_TOTAL};
pub use settings::{AuthSettings, SECRETS_FILE};

use async_trait::async_trait;
use clap::FromArgMatches;
use platform::{
    caller::{AuthUser, ResolvesCallers},
    config::SettingsSpec,
    db::Migration,
    error::AppError,
    feature::{CliCommands, Feature, Platform, Registry, Service},
    live::{LiveConfig, LiveRateLimiter},
};

use crate::user::UserStore;
use service::Limits;
use session::SessionStore;
use settings::JwtSecrets;
use token::Tokens;

/// The auth feature: sign-in, sessions and admin rights. It installs the platform's caller
/// resolver ([`SessionCallers`]) and provides [`AuthService`] (sessions for the other sign-in
/// features) and [`Admins`] to the features installed after it.
pub struct Auth;

#[async_trait]
impl Feature for Auth {
    fn name(&self) -> &'static str {
        "auth"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<AuthService>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            7,
            "admins",
            include_str!("../../migrations/0007_admins.sql"),
        )];
        MIGRATIONS
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<admin::AdminCli>(|matches, context| {
            Box::pin(async move {
                let admin::AdminCli::Admin { command } =
                    admin::AdminCli::from_arg_matches(&matches)?;
                admin::run_cli(&context.config, context.schema, command).await
            })
        }))
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        platform::openapi::course_routes(<http::SignInApi as utoipa::OpenApi>::openapi())
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let config = &platform.config;
        let settings = config.settings::<AuthSettings>()?;
        let jwt = JwtSecrets::resolve(settings, config)?;
        let auth = build_service(platform, settings, &jwt).await?;
        registry.maintenance(config, PurgeExpiredSessions::new(auth.clone()))?;
        registry.routes(http::router(http::SignInRoutes {
            auth: auth.clone(),
            trusted_proxies: platform.trusted_proxies.clone(),
        }));
        let admins = Admins::new(&settings.admins, platform.db.clone());
        registry.resolve_callers(std::sync::Arc::new(SessionCallers {
            auth: auth.clone(),
            admins: admins.clone(),
            live: platform.live.clone(),
        }));
        registry.provide(admins);
        registry.provide(auth);
        Ok(())
    }
}

/// How the platform learns who is calling: access tokens checked against sessions, the write
/// limit, admin rights, whether visitors may read.
pub struct SessionCallers {
    auth: AuthService,
    admins: Admins,
    /// Where `anonymous_reading` (live) is read.
    live: LiveConfig,
}

#[async_trait]
impl ResolvesCallers for SessionCallers {
    async fn authenticate(
        &self,
        access_token: &str,
        user_agent: &str,
    ) -> Result<AuthUser, AppError> {
        self.auth.authenticate(access_token, user_agent).await
    }

    async fn check_write_rate(&self, uid: i64) -> Result<(), AppError> {
        self.auth.check_write_rate(uid).await
    }

    async fn is_admin(&self, uid: i64) -> Result<bool, AppError> {
        self.admins.contains(uid).await
    }

    fn anonymous_reading(&self) -> bool {
        self.live
            .current()
            .settings::<AuthSettings>()
            .is_ok_and(|settings| settings.anonymous_reading)
    }
}

/// Sign-in and sessions, with the session store and rate limiters of the mode.
async fn build_service(
    platform: &Platform,
    settings: &AuthSettings,
    jwt: &JwtSecrets,
) -> anyhow::Result<AuthService> {
    let (config, db, redis) = (&platform.config, &platform.db, platform.redis.as_ref());
    let tokens = Tokens::new(jwt, settings.access_token_ttl, settings.refresh_token_ttl)?;
    let sessions = match redis {
        Some(redis) => SessionStore::cluster(
            db.clone(),
            redis.clone(),
            &config.redis_prefix,
            settings.refresh_token_ttl,
            settings.refresh_retry_window,
        ),
        None => {
            SessionStore::local(
                db.clone(),
                settings.refresh_token_ttl,
                settings.refresh_retry_window,
            )
            .await?
        }
    };
    let shared = platform.redis_with_prefix();
    let auth_limiter = LiveRateLimiter::new("auth", &platform.live, shared, |config| {
        let settings = config.settings::<AuthSettings>()?;
        Ok((settings.auth_rate_limit, settings.auth_rate_window))
    })?;
    let write_limiter = LiveRateLimiter::new("write", &platform.live, shared, |config| {
        let settings = config.settings::<AuthSettings>()?;
        Ok((settings.write_rate_limit, settings.write_rate_window))
    })?;
    Ok(AuthService::new(
        UserStore::new(db.clone()),
        PasswordHasher::new()?,
        tokens,
        sessions,
        Limits {
            auth: auth_limiter,
            writes: write_limiter,
        },
    ))
}
