//! Command-line interface: `webook serve | migrate | version`.
//!
//! The global flags (`--config`, `--listen`, `--data-dir`, `--database-url`, `--redis-url`) are the
//! top layer of the configuration (see [`crate::config`]); they work before or after the
//! subcommand. Each subcommand loads the layered config, then hands over to [`crate::app`] or the
//! infrastructure it needs.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::{app, config::Config, infra};

/// webook: the backend of a content community. Embedded (SQLite, no servers) by default;
/// PostgreSQL + Redis when `--database-url postgres://…` and `--redis-url redis://…` are set.
#[derive(Debug, Parser)]
#[command(name = "webook", version, propagate_version = true)]
pub struct Cli {
    /// Settings that override the config file and the environment.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Configuration flags, the highest-precedence layer. Every flag also has a `WEBOOK_*`
/// environment variable and a `webook.toml` key of the same name (see `docs/CONFIG.md`).
#[derive(Debug, Clone, Default, Args, Serialize)]
pub struct ConfigArgs {
    /// Config file (TOML). Default: `./webook.toml` when it exists. Env: WEBOOK_CONFIG.
    #[arg(long, global = true, env = "WEBOOK_CONFIG", value_name = "PATH")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to listen on, e.g. 0.0.0.0:8080. Env: WEBOOK_LISTEN. Default: 127.0.0.1:8080.
    #[arg(long, global = true, value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Directory for the SQLite database and generated secrets. Env: WEBOOK_DATA_DIR.
    /// Default: ./data.
    #[arg(long, global = true, value_name = "DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// sqlite://PATH or postgres://USER@HOST/DB. Env: WEBOOK_DATABASE_URL.
    /// Default: SQLite file `webook.db` in the data dir.
    #[arg(long, global = true, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// redis://HOST:PORT/DB; setting it switches to cluster mode. Env: WEBOOK_REDIS_URL.
    #[arg(long, global = true, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply migrations, then serve HTTP until SIGINT/SIGTERM (drains in-flight requests).
    Serve(ServeArgs),
    /// Apply pending database migrations and exit.
    Migrate,
    /// Print the version and exit.
    Version,
}

/// Flags of `webook serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    pub print_config: bool,
}

impl Cli {
    /// Runs the chosen subcommand to completion.
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Version => {
                println!("webook {}", env!("CARGO_PKG_VERSION"));
                Ok(())
            }
            Command::Serve(ServeArgs { print_config: true }) => {
                let config = Config::load(&self.config)?;
                print!("{}", config.to_redacted_toml()?);
                Ok(())
            }
            Command::Serve(ServeArgs {
                print_config: false,
            }) => {
                let config = Config::load(&self.config)?;
                infra::telemetry::init_logging(&config)?;
                app::serve(config).await
            }
            Command::Migrate => {
                let config = Config::load(&self.config)?;
                infra::telemetry::init_logging(&config)?;
                let db = infra::db::Db::connect(&config).await?;
                let applied = db.migrate().await.context("applying migrations")?;
                println!(
                    "migrations: {applied} applied, database {} is up to date",
                    infra::redact_url(&config.database_url())
                );
                db.close().await;
                Ok(())
            }
        }
    }
}
