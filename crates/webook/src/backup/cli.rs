//! `webook backup` (take one now, beside a running server), `webook backup verify|list`, and
//! `webook restore` (with the server stopped), with progress bars for the long work, as the
//! other long commands show them (`webook db-move`, `webook seed`).

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use platform::{
    config::{Config, DatabaseKind},
    db::Migration,
    instance_lock::InstanceLock,
};

use super::{
    manifest::{self, Manifest, DATABASE},
    restore::{self, Journal, Target},
    settings::BackupSettings,
    snapshot,
    take::take,
};

/// The backup feature's subcommands of `webook`.
#[derive(Debug, clap::Subcommand)]
pub enum BackupCli {
    /// Back up the embedded database and the data dir's secrets now, while the server runs: one
    /// consistent snapshot into a new directory under --to (or backup_dir), with a manifest of
    /// checksums. `webook backup verify DIR` checks one; `webook backup list` lists them.
    #[command(args_conflicts_with_subcommands = true)]
    Backup(BackupCommand),
    /// Restore a backup into this data dir (stop the server first): verifies its checksums,
    /// replaces the database and secrets (the replaced ones are kept beside them) and rebuilds
    /// the search index.
    Restore(RestoreArgs),
}

/// `webook backup …`.
#[derive(Debug, clap::Args)]
pub struct BackupCommand {
    /// Check or list backups instead of taking one.
    #[command(subcommand)]
    pub action: Option<BackupAction>,
    /// Where to take one.
    #[command(flatten)]
    pub take: TakeArgs,
}

/// Flags of `webook backup`.
#[derive(Debug, clap::Args)]
pub struct TakeArgs {
    /// The directory to write the backup under (one sub-directory per backup). Default:
    /// backup_dir.
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// Afterwards delete all but the newest N backups there.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
}

/// `webook backup verify|list`.
#[derive(Debug, clap::Subcommand)]
pub enum BackupAction {
    /// Check a backup: every file against the manifest's size and SHA-256, and the database's
    /// integrity and schema version.
    Verify {
        /// The backup's directory (…/webook-20260301T120000.000Z).
        backup: PathBuf,
    },
    /// List the backups in a directory, oldest first.
    List {
        /// The directory. Default: backup_dir.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Flags of `webook restore`.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// The backup's directory (…/webook-20260301T120000.000Z).
    pub backup: PathBuf,
    /// Leave the search index to the server, which rebuilds it at its next start (it answers
    /// /search with 503 until then), instead of rebuilding it now.
    #[arg(long)]
    pub no_reindex: bool,
}

/// Runs `webook backup …`.
pub async fn backup(config: &Config, command: BackupCommand) -> anyhow::Result<()> {
    let settings = config.settings::<BackupSettings>()?;
    match command.action {
        Some(BackupAction::Verify { backup }) => verify(&backup).await,
        Some(BackupAction::List { dir }) => {
            let dir = dir
                .or_else(|| settings.dir().map(Path::to_path_buf))
                .context("name the directory: --dir DIR, or set backup_dir (WEBOOK_BACKUP_DIR)")?;
            list(&dir)
        }
        None => {
            if command.take.keep == Some(0) {
                bail!("--keep must be at least 1: the backup just taken is kept");
            }
            let source = super::source(config)?;
            let dir = command
                .take
                .to
                .or_else(|| settings.dir().map(Path::to_path_buf))
                .context(
                    "name where to write the backup: --to DIR, or set backup_dir \
                     (WEBOOK_BACKUP_DIR)",
                )?;
            let bar = progress_bar("{msg:>10} [{bar:40}] {percent:>3}% ({eta} left)");
            let report = {
                let bar = bar.clone();
                move |stage: &str, done: u64, total: u64| {
                    bar.set_message(stage.to_owned());
                    bar.set_length(total);
                    bar.set_position(done);
                }
            };
            let taken =
                tokio::task::spawn_blocking(move || take(&source, &dir, &report, &|| false))
                    .await?;
            bar.finish_and_clear();
            let taken = taken?;
            println!("{}", taken.dir.display());
            print_manifest(&taken.manifest);
            println!("  took {:.1} s", taken.seconds);
            if let Some(keep) = command.take.keep {
                let parent = taken.dir.parent().unwrap_or(Path::new("."));
                for old in manifest::prune(parent, keep)? {
                    println!("  deleted {} (--keep {keep})", old.display());
                }
            }
            Ok(())
        }
    }
}

/// `webook backup verify`.
async fn verify(backup: &Path) -> anyhow::Result<()> {
    let manifest = Manifest::read(backup)?;
    let bar = progress_bar("verifying [{bar:40}] {bytes}/{total_bytes} ({eta} left)");
    bar.set_length(manifest.bytes());
    let (dir, checked, read) = (backup.to_path_buf(), manifest.clone(), bar.clone());
    let verified = tokio::task::spawn_blocking(move || {
        checked.verify(&dir, &|bytes| read.inc(bytes))?;
        snapshot::check_database(&dir.join(DATABASE), checked.schema_version)
    })
    .await?;
    bar.finish_and_clear();
    verified?;
    println!("{}: ok", backup.display());
    print_manifest(&manifest);
    Ok(())
}

/// `webook backup list`.
fn list(dir: &Path) -> anyhow::Result<()> {
    let rows = manifest::list(dir)?
        .into_iter()
        .map(|backup| {
            let name = backup
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            match Manifest::read(&backup) {
                Ok(manifest) => vec![
                    name,
                    crate::terminal::time_text(manifest.snapshot_at),
                    manifest.schema_version.to_string(),
                    manifest.bytes().to_string(),
                    manifest.webook_version,
                ],
                Err(err) => vec![name, format!("unreadable: {err:#}")],
            }
        })
        .collect();
    print!(
        "{}",
        crate::terminal::table(&["backup", "snapshot", "schema", "bytes", "webook"], rows)
    );
    Ok(())
}

/// Runs `webook restore`.
pub async fn restore(
    config: &Config,
    schema: &'static [Migration],
    args: RestoreArgs,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let target = target(config)?;
    // Held to the end: no server starts on the data dir meanwhile, and none runs now.
    let _lock = InstanceLock::acquire(config, "webook restore")
        .await?
        .context("no instance lock in embedded mode")?;
    if let Some(pending) = Journal::pending(&target.data_dir)? {
        finish(config, &pending)?;
        println!(
            "finished the interrupted restore of {}",
            pending.backup.display()
        );
    }
    let latest = schema.iter().map(|m| m.version).max().unwrap_or(0);
    let manifest = Manifest::read(&args.backup)?;
    let bar = progress_bar("{msg:>16} [{bar:40}] {bytes}/{total_bytes} ({eta} left)");
    let report = {
        let bar = bar.clone();
        move |file: &str, done: u64, total: u64| {
            bar.set_message(file.to_owned());
            bar.set_length(total);
            bar.set_position(done);
        }
    };
    let (backup, staging) = (args.backup.clone(), target.clone());
    let journal =
        tokio::task::spawn_blocking(move || restore::stage(&backup, &staging, latest, &report))
            .await?;
    bar.finish_and_clear();
    let journal = journal?;
    println!(
        "verified {} ({} files, {} bytes, snapshot {}, schema {})",
        args.backup.display(),
        manifest.files.len(),
        manifest.bytes(),
        crate::terminal::time_text(manifest.snapshot_at),
        manifest.schema_version
    );
    let kept = finish(config, &journal)?;
    let restored: Vec<&str> = manifest.files.iter().map(|f| f.name.as_str()).collect();
    println!(
        "restored {} into {}",
        restored.join(", "),
        target.data_dir.display()
    );
    for file in kept {
        println!(
            "  kept the replaced {} (delete it when satisfied)",
            file.display()
        );
    }
    if args.no_reindex {
        println!("search index marked stale: the server rebuilds it at its next start");
    } else {
        crate::search::reindex(config, schema).await?;
    }
    // Run as root into a service user's data dir, what it wrote must be that user's.
    let mut written: Vec<PathBuf> = Vec::new();
    for step in &journal.steps {
        written.push(step.destination.clone());
        // The reindex opened the database: its WAL and shared memory are new files too.
        for suffix in ["-wal", "-shm"] {
            written.push(restore::with_suffix(&step.destination, suffix));
        }
    }
    written.push(crate::search::index_dir(config)?);
    let changed = restore::own_like(&target.data_dir, &written)?;
    if changed > 0 {
        println!(
            "gave {changed} files the owner of {}",
            target.data_dir.display()
        );
    }
    println!("restored in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Puts the journal's files in place, marks the search index for a rebuild and ends the
/// journal; the replaced files kept aside.
fn finish(config: &Config, journal: &Journal) -> anyhow::Result<Vec<PathBuf>> {
    let kept = journal.roll_forward()?;
    // The index describes the database it was built from, not the restored one.
    crate::search::mark_index_stale(config)?;
    journal.complete()?;
    Ok(kept)
}

/// Where `webook restore` writes for `config`: its SQLite database and data dir. PostgreSQL, an
/// in-memory database and cluster mode are refused, each in one line saying what to do.
fn target(config: &Config) -> anyhow::Result<Target> {
    if config.database_kind()? == DatabaseKind::Postgres {
        bail!(
            "webook restore restores the embedded SQLite database and database_url is PostgreSQL: \
             restore a pg_dump with pg_restore (docs/OPERATIONS.md → Backup and restore)"
        );
    }
    if config.is_cluster() {
        bail!(
            "webook restore runs in embedded mode only (redis_url is set: instances there take no \
             lock it could check, and cache in Redis): stop every instance, run it without \
             redis_url, and delete this deployment's Redis keys ({}:*) before starting them again",
            config.redis_prefix
        );
    }
    let database = platform::db::sqlite_file(&config.database_url())
        .context("database_url is an in-memory database: there is nothing to restore into")?;
    Ok(Target {
        database,
        data_dir: config.data_dir.clone(),
        secrets: super::SECRETS_FILES
            .iter()
            .map(|&name| name.to_owned())
            .collect(),
    })
}

fn print_manifest(manifest: &Manifest) {
    for file in &manifest.files {
        println!(
            "  {:<18} {:>12} bytes  sha256 {}",
            file.name, file.bytes, file.sha256
        );
    }
    println!(
        "  snapshot {}, schema {}, webook {}",
        crate::terminal::time_text(manifest.snapshot_at),
        manifest.schema_version,
        manifest.webook_version
    );
}

fn progress_bar(template: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
