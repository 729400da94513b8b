//! Live settings: the settings an operator tunes while the site runs — rate and write limits,
//! feature switches (grey release), the log filter — stored in the database, changed by admins
//! (API, console, `webook settings`), audited, and applied on every instance within seconds
//! without a restart. webook.toml, the environment and flags stay the start-up values; a key
//! that needs a restart is refused naming where to set it.
//!
//! Data flow: `PUT /admin/settings/{key}` → [`service::LiveSettings::set`] checks the new set of
//! values against the start-up configuration ([`platform::config::Config::with_live`], the
//! start-up validation) → [`store`] writes it with its audit entry and bumps the version in one
//! transaction → this instance applies it at once; every instance's follower (a background task)
//! reads the version every `live_settings_poll` and applies what changed to
//! [`platform::live::LiveConfig`], which readers consult at the time of use. Which keys are live
//! is each settings section's [`platform::config::Settings::LIVE`].

pub mod cli;
pub mod http;
pub mod service;
pub mod settings;
pub mod store;

use async_trait::async_trait;
use clap::FromArgMatches;
use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{CliCommands, Feature, Platform, Registry},
};

pub use service::{LiveSettings, SettingView};
use settings::LiveSettingsSettings;
use store::LiveSettingsStore;

/// The live settings feature. Installed first: the stored values apply before any other feature
/// builds on the configuration.
pub struct LiveSettingsFeature;

#[async_trait]
impl Feature for LiveSettingsFeature {
    fn name(&self) -> &'static str {
        "live_settings"
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            43,
            "live_settings",
            include_str!("../../migrations/0043_live_settings.sql"),
        )];
        MIGRATIONS
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<cli::LiveSettingsCli>(
            |matches, context| {
                Box::pin(async move {
                    let cli::LiveSettingsCli::Settings { command } =
                        cli::LiveSettingsCli::from_arg_matches(&matches)?;
                    cli::run(context.config, context.schema, command).await
                })
            },
        ))
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::LiveSettingsApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let poll = platform
            .config
            .settings::<LiveSettingsSettings>()?
            .live_settings_poll;
        let service = LiveSettings::new(
            LiveSettingsStore::new(platform.db.clone()),
            platform.live.clone(),
            platform.status.clone(),
        );
        // Before serving: an instance starts with the values every other instance applies.
        service.reload().await?;
        let follower = service.clone();
        registry.background("live settings", move |background| {
            follower.follow(poll, background.stop)
        });
        registry.routes(http::router(service));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use platform::config::{Config, Secret};

    use crate::{app, auth::AuthSettings};

    /// Every setting of every installed feature, with secrets set.
    fn config() -> Config {
        let mut config = Config::with_defaults(&app::settings());
        config.metrics_token = Secret::new("m".repeat(24));
        let auth = config.settings_mut::<AuthSettings>();
        auth.jwt_access_secret = Some(Secret::new("a".repeat(40)));
        auth.jwt_refresh_secret = Some(Secret::new("r".repeat(40)));
        config
    }

    #[test]
    fn every_live_key_reads_back_unchanged_and_keeps_the_secrets_beside_it() {
        let config = config();
        let entries = config.entries().unwrap();
        let live: Vec<_> = entries.iter().filter(|(_, _, live)| *live).collect();
        assert!(live.len() >= 13, "{live:?}");
        for (key, value, _) in live {
            let values = BTreeMap::from([((*key).to_owned(), value.clone())]);
            let relayered = config.with_live(&values).unwrap();
            assert_eq!(
                relayered.to_redacted_toml().unwrap(),
                config.to_redacted_toml().unwrap(),
                "{key}"
            );
            assert_eq!(relayered.metrics_token, config.metrics_token, "{key}");
            let auth = relayered.settings::<AuthSettings>().unwrap();
            assert_eq!(
                auth.jwt_access_secret.as_ref().map(Secret::expose),
                Some("a".repeat(40).as_str()),
                "{key}"
            );
        }
    }

    #[test]
    fn a_live_value_changes_its_key_only_and_unknown_or_restart_keys_are_named() {
        let config = config();
        let values = BTreeMap::from([
            ("write_rate_limit".to_owned(), serde_json::json!(3)),
            ("log".to_owned(), serde_json::json!("warn")),
        ]);
        let relayered = config.with_live(&values).unwrap();
        assert_eq!(
            relayered
                .settings::<AuthSettings>()
                .unwrap()
                .write_rate_limit,
            3
        );
        assert_eq!(relayered.log, "warn");
        assert_eq!(
            relayered
                .settings::<AuthSettings>()
                .unwrap()
                .auth_rate_limit,
            config.settings::<AuthSettings>().unwrap().auth_rate_limit
        );
        let restart = BTreeMap::from([("database_url".to_owned(), serde_json::json!("x"))]);
        assert_eq!(
            config.with_live(&restart).unwrap_err().to_string(),
            "database_url needs a restart: set it in webook.toml, WEBOOK_DATABASE_URL or \
             --database-url, then restart the instances"
        );
        let typo = BTreeMap::from([("write_rate_limt".to_owned(), serde_json::json!(1))]);
        assert!(config
            .with_live(&typo)
            .unwrap_err()
            .to_string()
            .starts_with("unknown setting \"write_rate_limt\""));
    }

    #[test]
    fn the_listed_values_show_no_secret_and_no_url_password() {
        let mut config = config();
        config.database_url = Some("postgres://webook:sekrit-pw@db.internal/webook".to_owned());
        config.redis_url = Some("redis://:sekrit-redis@cache.internal:6379/".to_owned());
        let listed = serde_json::to_string(&config.entries().unwrap()).unwrap();
        for secret in [
            "sekrit-pw",
            "sekrit-redis",
            &"a".repeat(40),
            &"m".repeat(24),
        ] {
            assert!(!listed.contains(secret), "{secret} shown in {listed}");
        }
        assert!(listed.contains("db.internal"), "{listed}");
    }
}
