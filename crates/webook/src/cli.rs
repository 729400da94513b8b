//! Command-line interface: the application's own subcommands (`webook serve | migrate | version
//! | openapi | seed`) and those the features bring ([`platform::feature::Feature::cli`]: `jobs …`,
//! `admin …`, `rank`).
//!
//! The global flags (`--config`, `--listen`, `--data-dir`, `--database-url`, `--redis-url`) are the
//! top layer of the configuration ([`platform::config`]); they work before or after the
//! subcommand. Each subcommand loads the layered config, then hands over to [`crate::app`], the
//! feature that owns it, or the infrastructure it needs. [`parse`] builds the command line from
//! the application's subcommands and every feature's.

use std::ffi::OsString;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use platform::feature::{CliCommands, CliContext};

use crate::app;
use platform::config::ConfigArgs;
use platform::config::{Config, Role};

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

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply migrations, then serve HTTP until SIGINT/SIGTERM (drains in-flight requests).
    Serve(ServeArgs),
    /// Apply pending database migrations and exit.
    Migrate,
    /// Print the version and exit.
    Version,
    /// Print the OpenAPI document of the HTTP API (JSON; `docs/openapi.json`) and exit.
    Openapi,
    /// Fill the database with a realistic, reproducible dataset (users, articles, Zipf-distributed
    /// reads, likes, collects, follows and comment threads, the feed built from them, and
    /// authors' tags), for
    /// benchmarks and demos. Adds to what is there.
    Seed(crate::seed::SeedArgs),
}

/// Flags of `webook serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    pub print_config: bool,
    /// all: API, jobs and consumers; api: HTTP API only (cluster mode); worker: jobs and
    /// consumers, HTTP only for /healthz, /readyz, /metrics. Env: WEBOOK_ROLE. Default: all.
    #[arg(long, value_enum)]
    pub role: Option<Role>,
}

impl ServeArgs {
    /// The layered config with `--role` on top.
    fn load(&self, flags: &ConfigArgs) -> anyhow::Result<Config> {
        let mut config = app::load_config(flags)?;
        if let Some(role) = self.role {
            config.role = role;
            config.validate()?;
        }
        Ok(config)
    }
}

/// A parsed command line: the application's own subcommand, or a feature's.
pub enum Invocation {
    /// `serve`, `migrate`, `version`, `seed`.
    Own(Cli),
    /// A feature's subcommand, with the flags and the whole command line's matches.
    Feature {
        /// The configuration flags.
        flags: ConfigArgs,
        /// The feature's subcommands.
        commands: CliCommands,
        /// The whole command line, for the feature to parse its subcommand from.
        matches: clap::ArgMatches,
    },
}

/// The whole command line: the application's subcommands and every feature's.
pub fn command() -> clap::Command {
    let own = Cli::command();
    // A feature's `Subcommand` enum brings its doc comment as the command's about: keep ours.
    let (about, long_about) = (own.get_about().cloned(), own.get_long_about().cloned());
    let command = crate::features::FEATURES
        .iter()
        .filter_map(|feature| feature.cli())
        .fold(own, |command, feature| (feature.augment)(command))
        .about(about.unwrap_or_default());
    match long_about {
        Some(long_about) => command.long_about(long_about),
        None => command.long_about(None::<&str>),
    }
}

/// Parses the process's arguments; prints help or an error and exits on a bad command line.
pub fn parse() -> Invocation {
    try_parse_from(std::env::args_os()).unwrap_or_else(|err| err.exit())
}

/// Parses `args` (the first is the program name).
pub fn try_parse_from<I, T>(args: I) -> Result<Invocation, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = command().try_get_matches_from(args)?;
    let feature = matches.subcommand_name().and_then(|name| {
        crate::features::FEATURES
            .iter()
            .filter_map(|feature| feature.cli())
            .find(|commands| (commands.handles)(name))
    });
    Ok(match feature {
        Some(commands) => Invocation::Feature {
            flags: ConfigArgs::from_arg_matches(&matches)?,
            commands,
            matches,
        },
        None => Invocation::Own(Cli::from_arg_matches(&matches)?),
    })
}

impl Invocation {
    /// Runs the chosen subcommand to completion.
    pub async fn run(self) -> anyhow::Result<()> {
        match self {
            Self::Own(cli) => cli.run().await,
            Self::Feature {
                flags,
                commands,
                matches,
            } => {
                let config = app::load_config(&flags)?;
                platform::telemetry::init_logging(&config)?;
                app::before_open(&config, matches.subcommand_name())?;
                let context = CliContext {
                    config,
                    schema: &crate::schema::MIGRATIONS,
                    executors: app::offline_executors,
                };
                (commands.run)(matches, context).await
            }
        }
    }
}

impl Cli {
    /// Runs the chosen subcommand to completion.
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Version => {
                println!("webook {}", env!("CARGO_PKG_VERSION"));
                Ok(())
            }
            Command::Openapi => {
                print!("{}", crate::openapi::render(&app::openapi()?)?);
                Ok(())
            }
            Command::Serve(serve) => {
                let config = serve.load(&self.config)?;
                if serve.print_config {
                    print!("{}", config.to_redacted_toml()?);
                    return Ok(());
                }
                platform::telemetry::init_logging(&config)?;
                app::serve(config).await
            }
            Command::Seed(args) => {
                let config = app::load_config(&self.config)?;
                platform::telemetry::init_logging(&config)?;
                app::before_open(&config, Some("seed"))?;
                // The seed assumes no concurrent writer: not beside an embedded server.
                let _lock =
                    platform::instance_lock::InstanceLock::acquire(&config, "webook seed").await?;
                crate::seed::run(&config, &args).await
            }
            Command::Migrate => {
                let config = app::load_config(&self.config)?;
                platform::telemetry::init_logging(&config)?;
                app::before_open(&config, Some("migrate"))?;
                let db = platform::db::Db::connect(&config).await?;
                let applied = db
                    .migrate(&crate::schema::MIGRATIONS)
                    .await
                    .context("applying migrations")?;
                println!(
                    "migrations: {applied} applied, database {} is up to date",
                    platform::redact_url(&config.database_url())
                );
                db.close().await;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_bring_their_subcommands_and_the_global_flags_reach_them() {
        let parsed = try_parse_from(["webook", "jobs", "list", "--data-dir", "/tmp/x"]).unwrap();
        let Invocation::Feature { flags, matches, .. } = parsed else {
            panic!("jobs is the jobs feature's subcommand");
        };
        assert_eq!(flags.data_dir, Some(std::path::PathBuf::from("/tmp/x")));
        assert_eq!(matches.subcommand_name(), Some("jobs"));
        for feature_command in [
            &["webook", "rank", "--once"][..],
            &["webook", "admin", "list"],
        ] {
            assert!(matches!(
                try_parse_from(feature_command).unwrap(),
                Invocation::Feature { .. }
            ));
        }
        assert!(matches!(
            try_parse_from(["webook", "--listen", "127.0.0.1:1", "serve"]).unwrap(),
            Invocation::Own(Cli {
                command: Command::Serve(_),
                ..
            })
        ));
        let unknown = try_parse_from(["webook", "nosuch"]).err().unwrap();
        assert_eq!(unknown.kind(), clap::error::ErrorKind::InvalidSubcommand);
        let help = command().render_help().to_string();
        assert!(help.starts_with("webook: the backend"), "{help}");
        for name in [
            "serve", "migrate", "version", "openapi", "seed", "jobs", "admin", "rank",
        ] {
            assert!(
                help.contains(&format!("  {name} ")),
                "{name} missing:\n{help}"
            );
        }
    }
}
