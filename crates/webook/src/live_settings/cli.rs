//! `webook settings …`: the live settings from the command line, straight on the database the
//! layered config names (migrations applied first; no server needed: every instance applies a
//! change at its next poll). Values are checked against this command's own start-up
//! configuration, with the same one-line errors. Output is for people: aligned tables, times in
//! RFC 3339 (UTC); failures are one `error: …` line and exit code 1.

use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use platform::{
    config::Config,
    db::{Db, Migration},
    error::{AppError, Lang},
    live::LiveConfig,
    status::StatusBoard,
};

use crate::{
    live_settings::{
        service::{LiveSettings, SettingView},
        settings::LiveSettingsSettings,
        store::{json_of, LiveSettingsStore},
    },
    terminal::{operator, table, time_text},
};

/// The subcommand of `webook`.
#[derive(Debug, Subcommand)]
pub enum LiveSettingsCli {
    /// Settings that change while the site runs: list, set, unset, audit log.
    Settings {
        /// What to do.
        #[command(subcommand)]
        command: SettingsCommand,
    },
}

/// `webook settings …`.
#[derive(Debug, Subcommand)]
pub enum SettingsCommand {
    /// The live settings with their values (every setting with --all).
    List {
        /// Also the settings that need a restart.
        #[arg(long)]
        all: bool,
    },
    /// Set a live setting for every instance.
    Set {
        /// The key, e.g. write_rate_limit.
        key: String,
        /// The value as in webook.toml: 10, 30s, "25%, 1, 42", true, info,webook=debug …
        value: String,
    },
    /// Set a live setting back to its start-up value on every instance.
    Unset {
        /// The key.
        key: String,
    },
    /// Changes of live settings, newest first.
    Log {
        /// Only this key's.
        #[arg(long)]
        key: Option<String>,
        /// How many (1-200).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=200))]
        limit: i64,
    },
}

/// Connects to the configured database, applies `schema` and runs `command`, printing its
/// output.
pub async fn run(
    config: Config,
    schema: &[Migration],
    command: SettingsCommand,
) -> anyhow::Result<()> {
    let db = Db::connect(&config).await?;
    let poll = config
        .settings::<LiveSettingsSettings>()?
        .live_settings_poll;
    let result = async {
        db.migrate(schema).await.context("applying migrations")?;
        let service = LiveSettings::new(
            LiveSettingsStore::new(db.clone()),
            LiveConfig::new(Arc::new(config)),
            StatusBoard::default(),
        );
        execute(&service, command, poll).await
    }
    .await;
    db.close().await;
    print!("{}", result?);
    Ok(())
}

fn shown(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn line(view: &SettingView, poll: std::time::Duration) -> String {
    let poll = humantime_serde::re::humantime::format_duration(poll);
    if view.overridden {
        format!(
            "{} = {} (start-up value {}); every instance applies it within {poll}\n",
            view.key,
            shown(&view.value),
            shown(&view.start_value)
        )
    } else {
        format!(
            "{} = {} (its start-up value); every instance applies it within {poll}\n",
            view.key,
            shown(&view.value)
        )
    }
}

/// An error as one line: the message a client would get, or the cause of an internal one.
fn cli_error(err: AppError) -> anyhow::Error {
    match err {
        AppError::Internal(cause) => cause,
        other => anyhow::anyhow!("{}", other.msg(Lang::En)),
    }
}

/// Runs `command` on `service`; returns what to print.
pub async fn execute(
    service: &LiveSettings,
    command: SettingsCommand,
    poll: std::time::Duration,
) -> anyhow::Result<String> {
    match command {
        SettingsCommand::List { all } => {
            let rows = service
                .list()
                .await
                .map_err(cli_error)?
                .into_iter()
                .filter(|view| all || view.live)
                .map(|view| {
                    vec![
                        view.key,
                        shown(&view.value),
                        shown(&view.start_value),
                        if view.live { "live" } else { "restart" }.to_owned(),
                        match (view.admin, view.via, view.utime) {
                            (Some(0), Some(via), Some(utime)) => {
                                format!("{via} {}", time_text(utime))
                            }
                            (Some(admin), Some(_), Some(utime)) => {
                                format!("admin {admin} {}", time_text(utime))
                            }
                            _ => String::new(),
                        },
                    ]
                })
                .collect();
            Ok(table(
                &["KEY", "VALUE", "START-UP", "CHANGES", "SET BY"],
                rows,
            ))
        }
        SettingsCommand::Set { key, value } => {
            let view = service
                .set(&key, Some(json_of(&value)), (0, &operator()))
                .await
                .map_err(cli_error)?;
            Ok(line(&view, poll))
        }
        SettingsCommand::Unset { key } => {
            let view = service
                .set(&key, None, (0, &operator()))
                .await
                .map_err(cli_error)?;
            Ok(line(&view, poll))
        }
        SettingsCommand::Log { key, limit } => {
            let entries = service
                .log(key.as_deref(), None, limit)
                .await
                .map_err(cli_error)?;
            if entries.is_empty() {
                return Ok("no live setting was ever changed\n".to_owned());
            }
            let rows = entries
                .into_iter()
                .map(|entry| {
                    vec![
                        time_text(entry.ctime),
                        entry.key,
                        entry
                            .old_value
                            .as_ref()
                            .map_or_else(|| "(start-up)".to_owned(), shown),
                        entry
                            .new_value
                            .as_ref()
                            .map_or_else(|| "(start-up)".to_owned(), shown),
                        if entry.admin == 0 {
                            entry.via
                        } else {
                            format!("admin {}", entry.admin)
                        },
                    ]
                })
                .collect();
            Ok(table(&["WHEN", "KEY", "FROM", "TO", "BY"], rows))
        }
    }
}
