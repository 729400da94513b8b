//! Backups that restore: a consistent online copy of the embedded (SQLite) database with the
//! secrets webook generated in the data dir, taken on demand (`webook backup`) or on a schedule
//! (`backup_dir`, `backup_schedule`, `backup_keep`), checked (`webook backup verify`) and restored
//! (`webook restore`) into a data dir no server is using. PostgreSQL is backed up with its own
//! tools (`pg_dump`, `pg_basebackup`): docs/OPERATIONS.md → Backup and restore.
//!
//! Data flow of a backup ([`take`]): a connection of its own opens one read snapshot of the live
//! database and SQLite's backup API copies its pages ([`snapshot`]) — the server keeps writing
//! meanwhile, and the copy holds exactly the transactions committed before the snapshot — into
//! a partial directory beside the backups, with the secrets files; each file's SHA-256 goes into
//! the manifest ([`manifest`]: snapshot time, schema and webook versions), written last; the
//! directory is then renamed to `webook-<UTC time>`. The scheduled job ([`jobs`]) does the same
//! on one instance per fire time and deletes all but the newest `backup_keep`, reporting the last
//! success's time, duration and size and the failures as metrics.
//!
//! Data flow of a restore ([`restore`], [`cli`]): under the embedded instance lock (a serving
//! process holds it: the restore refuses in one line and touches nothing), the files are copied
//! beside their places and checked against the manifest in the same pass, the database checked
//! again, and a journal written; then each file is renamed over its place, the replaced one kept
//! aside; what is derived from the data — the search index — is marked stale and rebuilt
//! (`webook search reindex`, or by the server at its next start). A crash anywhere after the
//! journal leaves it in the data dir: the next `webook restore` finishes it first, and a server
//! refuses to start until then ([`Feature::install`]).

mod cli;
mod jobs;
pub mod manifest;
mod restore;
pub mod settings;
mod snapshot;
mod take;

pub use settings::BackupSettings;

use std::time::Duration;

use anyhow::{bail, Context};
use async_trait::async_trait;
use clap::FromArgMatches;
use platform::{
    config::{Config, DatabaseKind, SettingsSpec},
    feature::{CliCommands, Feature, Platform, Registry},
    telemetry::MetricsSpec,
};
use scheduler::{Guard, JobOptions};

/// Gauge: when the last scheduled backup of this process was complete, seconds since the epoch
/// (at start, the newest backup already in `backup_dir`).
pub const LAST_SUCCESS_SECONDS: &str = "backup_last_success_timestamp_seconds";
/// Gauge: when the last scheduled backup of this process failed (or its pruning did), seconds
/// since the epoch; 0 until one fails. Later than [`LAST_SUCCESS_SECONDS`] (or with no success
/// at all): the newest attempt failed.
pub const LAST_FAILURE_SECONDS: &str = "backup_last_failure_timestamp_seconds";
/// Gauge: how long the last scheduled backup of this process took.
pub const LAST_DURATION_SECONDS: &str = "backup_last_duration_seconds";
/// Gauge: the bytes of the last backup (database and secrets).
pub const LAST_SIZE_BYTES: &str = "backup_last_size_bytes";
/// Counter: scheduled backups that failed (or whose pruning did).
pub const FAILURES_TOTAL: &str = "backup_failures_total";
/// Counter: scheduled backups taken and pruned.
pub const SUCCESSES_TOTAL: &str = "backup_successes_total";

/// The files webook generates into the data dir that a backup must carry: the token secrets
/// (embedded mode, unless configured). Without them a restored instance would sign everybody
/// out.
pub const SECRETS_FILES: &[&str] = &[crate::auth::SECRETS_FILE];

/// Longest a scheduled backup may run before it is cancelled (also its lock's time-to-live).
const BACKUP_TIMEOUT: Duration = Duration::from_secs(3600);

const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_gauge!(
        LAST_SUCCESS_SECONDS,
        metrics::Unit::Seconds,
        "When the last scheduled backup was complete (seconds since the epoch; at start, the \
         newest in backup_dir): alert when time() minus it exceeds the schedule by a margin"
    );
    metrics::describe_gauge!(
        LAST_FAILURE_SECONDS,
        metrics::Unit::Seconds,
        "When the last scheduled backup (or its deletion of old backups) failed (seconds since \
         the epoch): later than the last success means the newest attempt failed"
    );
    metrics::describe_gauge!(
        LAST_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "How long the last scheduled backup took"
    );
    metrics::describe_gauge!(
        LAST_SIZE_BYTES,
        metrics::Unit::Bytes,
        "Bytes of the last backup (database and secrets)"
    );
    metrics::describe_counter!(
        FAILURES_TOTAL,
        "Scheduled backups that failed (or whose deletion of old backups did)"
    );
    metrics::describe_counter!(SUCCESSES_TOTAL, "Scheduled backups taken");
}

/// What a backup of `config`'s database copies; PostgreSQL and an in-memory database are
/// refused in one line saying what to do instead.
fn source(config: &Config) -> anyhow::Result<take::Source> {
    let url = config.database_url();
    if config.database_kind()? == DatabaseKind::Postgres {
        bail!(
            "webook backup copies the embedded SQLite database and database_url is PostgreSQL: \
             use pg_dump, or pg_basebackup with WAL archiving (docs/OPERATIONS.md → Backup and \
             restore)"
        );
    }
    let database = platform::db::sqlite_file(&url)
        .context("database_url is an in-memory database: there is nothing to back up")?;
    Ok(take::Source {
        database,
        url: platform::redact_url(&url),
        secrets: SECRETS_FILES
            .iter()
            .map(|name| config.data_dir.join(name))
            .collect(),
    })
}

/// The backup feature.
pub struct Backup;

#[async_trait]
impl Feature for Backup {
    fn name(&self) -> &'static str {
        "backup"
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[METRICS]
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<cli::BackupCli>(|matches, context| {
            Box::pin(async move {
                match cli::BackupCli::from_arg_matches(&matches)? {
                    cli::BackupCli::Backup(command) => cli::backup(&context.config, command).await,
                    cli::BackupCli::Restore(args) => {
                        cli::restore(&context.config, context.schema, args).await
                    }
                }
            })
        }))
    }

    fn before_open(&self, config: &Config, command: Option<&str>) -> anyhow::Result<()> {
        // Nothing may open the database of a data dir a restore left half-done (it would read
        // the old file without its moved WAL, and write into the copy kept aside): only the
        // restore that finishes it.
        if command == Some("restore") {
            return Ok(());
        }
        if let Some(pending) = restore::Journal::pending(&config.data_dir)? {
            bail!(
                "a restore into {} was interrupted: run `webook restore {}` again to finish it \
                 (its journal: {})",
                config.data_dir.display(),
                pending.backup.display(),
                pending.path().display()
            );
        }
        Ok(())
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let config = &platform.config;
        let settings = config.settings::<BackupSettings>()?;
        let Some(dir) = settings.dir() else {
            return Ok(());
        };
        // The job runs where work runs; an API-only process would report the newest backup of
        // its start for ever (the alerts read the deployment's newest).
        if !config.role.runs_work() {
            return Ok(());
        }
        // Validation refused PostgreSQL with backup_dir set.
        let job = jobs::BackupJob {
            source: source(config)?,
            dir: dir.to_path_buf(),
            keep: settings.backup_keep,
        };
        job.report_newest();
        registry.periodic(
            job,
            JobOptions::new(settings.schedule()?)
                .guard(Guard::ShortLock)
                .timeout(BACKUP_TIMEOUT),
        )
    }
}
