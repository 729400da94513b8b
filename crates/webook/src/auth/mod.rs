//! Signing in: sign-up, login, token refresh with rotation, logout, sessions, the sign-in and
//! write rate limits, admin rights (and, to come, SMS and WeChat login).
//!
//! Data flow: [`http`] parses requests (rate-limiting sign-up and login per client IP) and calls
//! [`AuthService`], which validates credentials (the account rules of
//! [`crate::user::model`]), hashes passwords off the async runtime ([`password`]), reads and
//! writes accounts through the users feature's store, signs tokens ([`token`]) and keeps
//! session state — revocation and refresh generations — in the [`session`] store (in-process +
//! SQL when embedded, Redis in cluster mode).
//!
//! Other features authenticate requests by taking an [`AuthUser`] (or a [`Writer`], within the
//! write rate limit) argument in their handlers, whose state implements
//! [`http::Authenticates`]; admin-only routes take an [`admin::Admin`] (rights by user id:
//! config `admins` or `webook admin grant`).

pub mod admin;
pub mod http;
pub mod jobs;
pub mod password;
pub mod service;
pub mod session;
pub mod settings;
pub mod token;

pub use admin::{Admin, AdminArea, Admins, ChecksAdmins};
pub use http::{user_agent, with_tokens, Authenticates, Writer};
pub use jobs::PurgeExpiredSessions;
pub use password::PasswordHasher;
pub use service::{AuthService, AuthUser, TokenPair, AUTH_EVENTS_TOTAL};

use async_trait::async_trait;
use clap::FromArgMatches;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{CliCommands, Feature, Platform, Registry},
    rate_limit::RateLimiter,
};

use crate::idempotency::{Idempotency, PurgeIdempotencyKeys};
use crate::user::UserStore;
use service::Limits;
use session::SessionStore;
use settings::{AuthSettings, JwtSecrets};
use token::Tokens;

/// The auth feature: sign-in, sessions, admin rights and `Idempotency-Key`. It provides
/// [`AuthService`] (authentication for every other feature's handlers), [`Admins`] and
/// [`Idempotency`] to the features installed after it.
pub struct Auth;

#[async_trait]
impl Feature for Auth {
    fn name(&self) -> &'static str {
        "auth"
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(
                7,
                "admins",
                include_str!("../../migrations/0007_admins.sql"),
            ),
            Migration::new(
                8,
                "idempotency",
                include_str!("../../migrations/0008_idempotency.sql"),
            ),
        ];
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
        registry.maintenance(config, PurgeIdempotencyKeys::new(platform.db.clone()))?;
        registry.routes(http::router(http::SignInRoutes {
            auth: auth.clone(),
            trusted_proxies: platform.trusted_proxies.clone(),
        }));
        registry.provide(Admins::new(&settings.admins, platform.db.clone()));
        registry.provide(Idempotency::new(
            auth.clone(),
            platform.db.clone(),
            config.body_limit_bytes,
        ));
        registry.provide(auth);
        Ok(())
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
        ),
        None => SessionStore::local(db.clone(), settings.refresh_token_ttl).await?,
    };
    let shared = platform.redis_with_prefix();
    let auth_limiter = RateLimiter::of_mode(
        "auth",
        shared,
        settings.auth_rate_limit,
        settings.auth_rate_window,
    )?;
    let write_limiter = RateLimiter::unless_off(
        "write",
        shared,
        settings.write_rate_limit,
        settings.write_rate_window,
    )?;
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
