//! Command-line interface: `webook serve | migrate | version | jobs … | admin … | rank | seed`.
//!
//! The global flags (`--config`, `--listen`, `--data-dir`, `--database-url`, `--redis-url`) are the
//! top layer of the configuration (see [`crate::config`]); they work before or after the
//! subcommand. Each subcommand loads the layered config, then hands over to [`crate::app`] or the
//! infrastructure it needs.

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::{app, jobs};
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
    /// Manage durable jobs directly in the database (the admin API's operations, offline).
    Jobs {
        /// What to do.
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Grant, revoke and list admin rights (who may manage jobs over the API), in the database.
    Admin {
        /// What to do.
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// The hot list: print the shared list, or compute and store it now (`--once`).
    Rank(RankArgs),
    /// Fill the database with a realistic, reproducible dataset (users, articles, Zipf-distributed
    /// reads, likes and collects), for benchmarks and demos. Adds to what is there.
    Seed(SeedArgs),
}

/// Flags of `webook seed` (see `docs/PERFORMANCE.md` → Datasets).
#[derive(Debug, Args)]
pub struct SeedArgs {
    /// Users to create (they sign in as seed<ID>@example.com with --password).
    #[arg(long, default_value_t = 1_000)]
    pub users: u64,
    /// Articles to create: 90 % published, 6 % drafts, 4 % withdrawn.
    #[arg(long, default_value_t = 10_000)]
    pub articles: u64,
    /// Likes across the published articles, Zipf-distributed (one per user and article).
    #[arg(long, default_value_t = 50_000)]
    pub likes: u64,
    /// Collects across the published articles, Zipf-distributed like the likes.
    #[arg(long, default_value_t = 5_000)]
    pub collects: u64,
    /// Reads across the published articles, Zipf-distributed (counters only).
    #[arg(long, default_value_t = 1_000_000)]
    pub reads: u64,
    /// Articles were created over the last D days (before --until).
    #[arg(long, default_value_t = 30)]
    pub days: u64,
    /// Seed of every random choice: the same seed, sizes and --until give the same data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// End of the time window, RFC 3339 (e.g. 2026-11-30T00:00:00Z). Default: now.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Zipf exponent of popularity: rank r gets a share proportional to r^-s.
    #[arg(long = "zipf", value_name = "S", default_value_t = 1.0)]
    pub zipf_exponent: f64,
    /// Password of every seeded user.
    #[arg(long, default_value = "seed-Password-1!", env = "WEBOOK_SEED_PASSWORD")]
    pub password: String,
}

impl SeedArgs {
    /// The plan these flags describe.
    pub fn plan(&self) -> anyhow::Result<crate::seed::Plan> {
        let until = match &self.until {
            Some(text) => chrono::DateTime::parse_from_rfc3339(text)
                .with_context(|| format!("--until {text}: not an RFC 3339 time"))?
                .timestamp_millis(),
            None => platform::db::now_millis(),
        };
        Ok(crate::seed::Plan {
            users: self.users,
            articles: self.articles,
            likes: self.likes,
            collects: self.collects,
            reads: self.reads,
            days: self.days,
            seed: self.seed,
            until,
            zipf_exponent: self.zipf_exponent,
            password: self.password.clone(),
            likes_per_pass: crate::seed::LIKES_PER_PASS,
        })
    }
}

/// Flags of `webook rank`.
#[derive(Debug, Args)]
pub struct RankArgs {
    /// Compute the list now and store it where every instance picks it up at its next refresh.
    #[arg(long)]
    pub once: bool,
}

/// `webook jobs …`: the operations of the admin API (API.md → Jobs (admin)) on the database the
/// layered config names. Jobs are named by id or by name.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List every job: status, schedule, next fire time.
    List,
    /// Create a job; prints its id.
    Add(AddJobArgs),
    /// Stop a job: no further runs; a running run is told at its next heartbeat.
    Stop {
        /// Job id or name.
        job: String,
    },
    /// Resume a stopped job from its next fire time after now.
    Resume {
        /// Job id or name.
        job: String,
    },
    /// Ask for one run now; a running instance picks it up at its next poll.
    Trigger {
        /// Job id or name.
        job: String,
    },
    /// Show a job's runs, newest first.
    Runs {
        /// Job id or name.
        job: String,
        /// How many runs to show (1-500).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=500))]
        limit: i64,
    },
}

/// `webook admin …`: admin rights by user, named by id or by registered email. Rights follow the
/// user id; config `admins` lists further ids.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Give a user admin rights.
    Grant {
        /// User id or registered email.
        user: String,
    },
    /// Take back rights granted with `grant` (ids in config `admins` stay admins).
    Revoke {
        /// User id or registered email.
        user: String,
    },
    /// List the users granted admin rights in the database.
    List,
}

/// Flags of `webook jobs add`.
#[derive(Debug, Args)]
pub struct AddJobArgs {
    /// Unique name: 1-64 letters, digits, '.', '_' or '-'.
    #[arg(long)]
    pub name: String,
    /// Schedule: cron with optional seconds and year, `@every 10m`, `@daily`, …
    #[arg(long)]
    pub cron: String,
    /// Executor that runs it, e.g. `http`.
    #[arg(long)]
    pub executor: String,
    /// Executor configuration, a JSON object (e.g. '{"url": "http://host/hook"}'). Default: {}.
    #[arg(long, value_name = "JSON")]
    pub cfg: Option<String>,
    /// IANA time zone the schedule is read in. Default: UTC.
    #[arg(long, value_name = "TZ")]
    pub timezone: Option<String>,
    /// Misfire policy: skip, fire_once or catch_up. Default: fire_once.
    #[arg(long, value_name = "POLICY")]
    pub misfire: Option<String>,
    /// Overlap policy: forbid. Default: forbid.
    #[arg(long, value_name = "POLICY")]
    pub overlap: Option<String>,
    /// Run timeout in milliseconds (at least 1000). Default: 600000.
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<i64>,
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

impl Cli {
    /// Runs the chosen subcommand to completion.
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Version => {
                println!("webook {}", env!("CARGO_PKG_VERSION"));
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
            Command::Rank(args) => {
                let config = app::load_config(&self.config)?;
                platform::telemetry::init_logging(&config)?;
                crate::ranking::cli::run(&config, args.once).await
            }
            Command::Seed(args) => {
                let config = app::load_config(&self.config)?;
                platform::telemetry::init_logging(&config)?;
                // The seed assumes no concurrent writer: not beside an embedded server.
                let _lock =
                    platform::instance_lock::InstanceLock::acquire(&config, "webook seed").await?;
                crate::seed::cli::run(&config, &args).await
            }
            Command::Jobs { command } => {
                let config = app::load_config(&self.config)?;
                platform::telemetry::init_logging(&config)?;
                jobs::cli::run(
                    &config,
                    &crate::schema::MIGRATIONS,
                    |db| app::offline_executors(&config, db),
                    command,
                )
                .await
            }
            Command::Admin { command } => {
                let config = app::load_config(&self.config)?;
                platform::telemetry::init_logging(&config)?;
                crate::auth::admin::run_cli(&config, command).await
            }
            Command::Migrate => {
                let config = app::load_config(&self.config)?;
                platform::telemetry::init_logging(&config)?;
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
