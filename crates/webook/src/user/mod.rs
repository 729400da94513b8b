//! Users and sessions: sign-up, login, token refresh with rotation, logout, profile.
//!
//! Data flow: [`http`] parses requests (rate-limiting sign-up and login per client IP) and calls
//! [`UserService`], which validates input ([`model`]), hashes passwords off the async runtime
//! ([`password`]), reads and writes `users` ([`store`]), signs tokens ([`token`]) and keeps
//! session state — revocation and refresh generations — in the [`session`] store (in-process +
//! SQL when embedded, Redis in cluster mode).
//!
//! Other features authenticate requests by taking an [`AuthUser`] argument in their handlers, and
//! admin-only routes an [`admin::Admin`] (rights by user id: config `admins` or
//! `webook admin grant`).

pub mod admin;
pub mod http;
pub mod jobs;
pub mod model;
pub mod password;
pub mod service;
pub mod session;
pub mod settings;
pub mod store;
pub mod token;

pub use http::Writer;
pub use jobs::PurgeExpiredSessions;
pub use service::{AuthUser, UserService};

use async_trait::async_trait;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{Feature, Platform, Registry},
    rate_limit::RateLimiter,
};

use crate::idempotency::{Idempotency, PurgeIdempotencyKeys};
use admin::Admins;
use password::PasswordHasher;
use service::Limits;
use session::SessionStore;
use settings::{AuthSettings, JwtSecrets};
use store::UserStore;
use token::Tokens;

/// The users feature: accounts, sessions, profiles, admin rights and `Idempotency-Key`. It
/// provides [`UserService`] (authentication for every other feature's handlers), [`Admins`] and
/// [`Idempotency`] to the features installed after it.
pub struct Users;

#[async_trait]
impl Feature for Users {
    fn name(&self) -> &'static str {
        "users"
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        &[
            Migration {
                version: 2,
                description: "users",
                sql: include_str!("../../migrations/0002_users.sql"),
            },
            Migration {
                version: 7,
                description: "admins",
                sql: include_str!("../../migrations/0007_admins.sql"),
            },
            Migration {
                version: 8,
                description: "idempotency",
                sql: include_str!("../../migrations/0008_idempotency.sql"),
            },
        ]
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let config = &platform.config;
        let settings = config.settings::<AuthSettings>()?;
        let jwt = JwtSecrets::resolve(settings, config)?;
        let users = build_service(platform, settings, &jwt).await?;
        registry.maintenance(config, PurgeExpiredSessions::new(users.clone()))?;
        registry.maintenance(config, PurgeIdempotencyKeys::new(platform.db.clone()))?;
        registry.routes(http::router(http::UserRoutes {
            users: users.clone(),
            trusted_proxies: platform.trusted_proxies.clone(),
        }));
        registry.provide(Admins::new(&settings.admins, platform.db.clone()));
        registry.provide(Idempotency::new(
            users.clone(),
            platform.db.clone(),
            config.body_limit_bytes,
        ));
        registry.provide(users);
        Ok(())
    }
}

/// Accounts and sessions, with the session store and rate limiters of the mode.
async fn build_service(
    platform: &Platform,
    settings: &AuthSettings,
    jwt: &JwtSecrets,
) -> anyhow::Result<UserService> {
    let (config, db, redis) = (&platform.config, &platform.db, platform.redis.as_ref());
    let tokens = Tokens::new(jwt, settings.access_token_ttl, settings.refresh_token_ttl)?;
    let (sessions, auth_limiter, write_limiter) = match redis {
        Some(redis) => (
            SessionStore::cluster(
                db.clone(),
                redis.clone(),
                &config.redis_prefix,
                settings.refresh_token_ttl,
            ),
            RateLimiter::redis(
                "auth",
                redis.clone(),
                &config.redis_prefix,
                settings.auth_rate_limit,
                settings.auth_rate_window,
            ),
            (settings.write_rate_limit > 0).then(|| {
                RateLimiter::redis(
                    "write",
                    redis.clone(),
                    &config.redis_prefix,
                    settings.write_rate_limit,
                    settings.write_rate_window,
                )
            }),
        ),
        None => (
            SessionStore::local(db.clone(), settings.refresh_token_ttl).await?,
            RateLimiter::local("auth", settings.auth_rate_limit, settings.auth_rate_window)?,
            (settings.write_rate_limit > 0)
                .then(|| {
                    RateLimiter::local(
                        "write",
                        settings.write_rate_limit,
                        settings.write_rate_window,
                    )
                })
                .transpose()?,
        ),
    };
    Ok(UserService::new(
        UserStore::new(db.clone()),
        PasswordHasher::new()?,
        tokens,
        sessions,
        Limits {
            auth: auth_limiter,
            writes: write_limiter,
        },
        platform.outbox.clone(),
    ))
}
