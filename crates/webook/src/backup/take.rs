//! Taking one backup: the database's snapshot ([`super::snapshot`]) and the data dir's secrets
//! files into a new directory under the backup directory, with their manifest
//! ([`super::manifest`]).
//!
//! Data flow: a hidden partial directory is created beside the backups; the database is copied
//! into it page by page from one snapshot, the secrets files byte for byte (they are written
//! once, at the first start, and never change), each file's SHA-256 is computed from what was
//! written, the manifest is written last and everything synced; then the directory is renamed to
//! its `webook-<time>` name. A failure (or cancellation) removes the partial directory. Blocking
//! (disk): callers run it on a blocking thread.

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::Context;

use super::{
    manifest::{self, FileEntry, Manifest, DATABASE},
    snapshot,
};

/// What a backup copies.
#[derive(Debug, Clone)]
pub struct Source {
    /// The SQLite database file.
    pub database: PathBuf,
    /// Its URL as printed (password-free: a `sqlite://` path).
    pub url: String,
    /// The secrets files webook generated in the data dir, copied when they exist.
    pub secrets: Vec<PathBuf>,
}

/// A backup just taken.
#[derive(Debug)]
pub struct Taken {
    /// Its directory.
    pub dir: PathBuf,
    /// What it holds.
    pub manifest: Manifest,
    /// How long it took, in seconds.
    pub seconds: f64,
}

/// How a long step is going: the stage (`database` in pages, `checksums` in bytes), done and
/// total.
pub type Progress<'a> = &'a dyn Fn(&str, u64, u64);

/// Takes a backup of `source` into a new directory under `parent` (created if missing),
/// reporting `progress`, stopping when `cancelled()` says so.
pub fn take(
    source: &Source,
    parent: &Path,
    progress: Progress<'_>,
    cancelled: &dyn Fn() -> bool,
) -> anyhow::Result<Taken> {
    let started = Instant::now();
    platform::db::create_private_dir(parent)
        .with_context(|| format!("creating the backup directory {}", parent.display()))?;
    let name = manifest::name_at(platform::db::now_millis());
    let partial = manifest::partial_dir(parent, &name);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&partial)
            .with_context(|| format!("creating {}", partial.display()))?;
    }
    let written = write_into(source, &partial, progress, cancelled);
    let manifest = match written {
        Ok(manifest) => manifest,
        Err(err) => {
            std::fs::remove_dir_all(&partial).ok();
            return Err(err);
        }
    };
    let dir = parent.join(&name);
    let renamed = std::fs::rename(&partial, &dir)
        .with_context(|| format!("renaming {} to {}", partial.display(), dir.display()))
        .and_then(|()| manifest::sync_dir(parent));
    if let Err(err) = renamed {
        std::fs::remove_dir_all(&partial).ok();
        return Err(err);
    }
    Ok(Taken {
        dir,
        manifest,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Writes the backup's files and manifest into `dir`; the manifest.
fn write_into(
    source: &Source,
    dir: &Path,
    progress: Progress<'_>,
    cancelled: &dyn Fn() -> bool,
) -> anyhow::Result<Manifest> {
    let copy = dir.join(DATABASE);
    let copied = snapshot::copy_database(
        &source.database,
        &copy,
        &|done, total| progress("database", done, total),
        cancelled,
    )?;
    platform::db::sync_path(&copy).with_context(|| format!("syncing {}", copy.display()))?;
    let mut files = vec![checksum(&copy, DATABASE, progress)?];
    for secrets in &source.secrets {
        let Some(name) = secrets.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        if !secrets.exists() {
            continue;
        }
        let target = dir.join(name);
        let mut file = manifest::create_private(&target)?;
        let (bytes, sha256) = manifest::digest(secrets, &|_| {}, Some(&mut file))?;
        file.sync_all()?;
        files.push(FileEntry {
            name: name.to_owned(),
            bytes,
            sha256,
        });
    }
    let manifest = Manifest {
        format: manifest::FORMAT,
        webook_version: env!("CARGO_PKG_VERSION").to_owned(),
        schema_version: copied.schema_version,
        snapshot_at: copied.snapshot_at,
        finished_at: platform::db::now_millis(),
        source: source.url.clone(),
        files,
    };
    manifest.write(dir)?;
    manifest::sync_dir(dir)?;
    Ok(manifest)
}

/// The entry of the file `path` named `name`, its reading reported as `checksums`.
fn checksum(path: &Path, name: &str, progress: Progress<'_>) -> anyhow::Result<FileEntry> {
    let total = std::fs::metadata(path)?.len();
    let done = std::cell::Cell::new(0u64);
    let (bytes, sha256) = manifest::digest(
        path,
        &|read| {
            done.set(done.get() + read);
            progress("checksums", done.get(), total);
        },
        None,
    )?;
    Ok(FileEntry {
        name: name.to_owned(),
        bytes,
        sha256,
    })
}
