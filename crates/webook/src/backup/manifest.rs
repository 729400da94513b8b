//! A backup on disk: one directory `webook-<UTC time>` per backup under the backup directory,
//! holding the database copy, the data dir's secrets files and `manifest.json` — when the
//! snapshot was taken, the schema and webook versions, and each file's size and SHA-256.
//!
//! A backup is written in a hidden `.partial` directory beside and renamed into its name only
//! once complete (files and manifest synced): a directory named `webook-…` is always a whole
//! backup. [`verify_file`] and [`Manifest::verify`] check files against the manifest; [`list`]
//! finds the backups of a directory, oldest first, and [`prune`] deletes all but the newest —
//! and partial directories a crash left behind, once a day old.

use std::{
    fs::File,
    io::{Read, Write},
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's file name in a backup directory.
pub const MANIFEST: &str = "manifest.json";
/// The database copy's file name in a backup directory.
pub const DATABASE: &str = "webook.db";
/// Version of the manifest's format; a backup of a later format is refused.
pub const FORMAT: u32 = 1;
/// Prefix of every backup directory's name.
const PREFIX: &str = "webook-";
/// Suffix of a backup directory being written.
const PARTIAL: &str = ".partial";
/// A partial directory this much older than now is a crash's leftover.
const STALE_PARTIAL: Duration = Duration::from_secs(24 * 3600);

/// What a backup holds, written last into its directory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The webook version that took it.
    pub webook_version: String,
    /// The newest migration applied in the copied database.
    pub schema_version: i64,
    /// When the snapshot was taken, ms since the epoch: the backup holds every transaction
    /// committed before and none after.
    pub snapshot_at: i64,
    /// When the backup was complete, ms since the epoch.
    pub finished_at: i64,
    /// The database it copied (a `sqlite://` URL).
    pub source: String,
    /// The files, the database first.
    pub files: Vec<FileEntry>,
}

/// One file of a backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    /// Its name in the backup directory (and in the data dir it came from).
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// SHA-256 of its contents, lower-case hex.
    pub sha256: String,
}

impl Manifest {
    /// Reads `<backup>/manifest.json`; an error names the directory.
    pub fn read(backup: &Path) -> anyhow::Result<Self> {
        let path = backup.join(MANIFEST);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "{} is not a webook backup (no readable {MANIFEST})",
                backup.display()
            )
        })?;
        let manifest: Self = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a webook backup manifest", path.display()))?;
        if manifest.format != FORMAT {
            bail!(
                "{} has manifest format {}, this webook reads {FORMAT}",
                path.display(),
                manifest.format
            );
        }
        for file in &manifest.files {
            let plain = Path::new(&file.name).file_name() == Some(file.name.as_ref());
            if !plain || file.name == MANIFEST {
                bail!(
                    "{} names an unexpected file {:?}",
                    path.display(),
                    file.name
                );
            }
        }
        if manifest.files.first().map(|file| file.name.as_str()) != Some(DATABASE) {
            bail!("{} lists no {DATABASE}", path.display());
        }
        Ok(manifest)
    }

    /// Writes it as `<dir>/manifest.json`, synced.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let path = dir.join(MANIFEST);
        let mut file = create_private(&path)?;
        file.write_all(serde_json::to_string_pretty(self)?.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        Ok(())
    }

    /// Checks every file of the backup in `dir` against its size and checksum, calling
    /// `progress(bytes)` as it reads; the first mismatch is the error.
    pub fn verify(&self, dir: &Path, progress: &dyn Fn(u64)) -> anyhow::Result<()> {
        for file in &self.files {
            verify_file(&dir.join(&file.name), file, progress)?;
        }
        Ok(())
    }

    /// The bytes of all its files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|file| file.bytes).sum()
    }
}

/// Checks `path` against `entry`: an error saying the backup is corrupt when its size or
/// SHA-256 differ.
pub fn verify_file(path: &Path, entry: &FileEntry, progress: &dyn Fn(u64)) -> anyhow::Result<()> {
    let (bytes, sha256) = digest(path, progress, None)?;
    check_digest(path, entry, bytes, &sha256)
}

/// The error of a file whose `bytes` and `sha256` are not `entry`'s.
pub fn check_digest(
    path: &Path,
    entry: &FileEntry,
    bytes: u64,
    sha256: &str,
) -> anyhow::Result<()> {
    if bytes != entry.bytes || sha256 != entry.sha256 {
        bail!(
            "checksum mismatch: {} is {bytes} bytes with SHA-256 {sha256}, the manifest says {} \
             bytes with {}; the backup is corrupt",
            path.display(),
            entry.bytes,
            entry.sha256
        );
    }
    Ok(())
}

/// The size and SHA-256 of the file `path`, calling `progress(bytes)` per buffer read, and
/// writing what it reads to `copy` when given (one pass for a checked copy).
pub fn digest(
    path: &Path,
    progress: &dyn Fn(u64),
    mut copy: Option<&mut File>,
) -> anyhow::Result<(u64, String)> {
    let mut file = File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let read = file
            .read(&mut buffer)
            .with_context(|| format!("reading {}", path.display()))?;
        if read == 0 {
            break;
        }
        let chunk = &buffer[..read];
        hasher.update(chunk);
        if let Some(copy) = copy.as_deref_mut() {
            copy.write_all(chunk)?;
        }
        bytes += read as u64;
        progress(read as u64);
    }
    Ok((bytes, hex::encode(hasher.finalize())))
}

/// Creates `path` (which must not exist) with mode 0600: backups hold emails, password hashes
/// and the token secrets.
pub fn create_private(path: &Path) -> anyhow::Result<File> {
    platform::db::create_private_new(path).with_context(|| format!("creating {}", path.display()))
}

/// Flushes `dir`'s entries (new names, renames) to disk.
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    platform::db::sync_path(dir).with_context(|| format!("syncing {}", dir.display()))
}

/// The name of a backup whose snapshot was taken at `ms` since the epoch: its UTC time, which
/// sorts as the times do (`webook-20260301T120000.123Z`).
pub fn name_at(ms: i64) -> String {
    let time = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms).unwrap_or_default();
    format!("{PREFIX}{}", time.format("%Y%m%dT%H%M%S%.3fZ"))
}

/// The directory a backup named `name` is written in before it is complete.
pub fn partial_dir(parent: &Path, name: &str) -> PathBuf {
    parent.join(format!(".{name}{PARTIAL}"))
}

/// The complete backups in `dir`, oldest first (by name, which is by time); none when `dir` does
/// not exist.
pub fn list(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err).with_context(|| format!("reading {}", dir.display())),
    };
    let mut backups = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let is_backup = name.to_str().is_some_and(|name| name.starts_with(PREFIX))
            && entry.file_type()?.is_dir()
            && entry.path().join(MANIFEST).is_file();
        if is_backup {
            backups.push(entry.path());
        }
    }
    backups.sort();
    Ok(backups)
}

/// Deletes all but the newest `keep` backups in `dir`, and partial directories left by a
/// crash more than a day ago; the backups deleted.
pub fn prune(dir: &Path, keep: usize) -> anyhow::Result<Vec<PathBuf>> {
    let backups = list(dir)?;
    let excess = backups.len().saturating_sub(keep);
    let mut deleted = Vec::new();
    for old in backups.into_iter().take(excess) {
        std::fs::remove_dir_all(&old).with_context(|| format!("deleting {}", old.display()))?;
        deleted.push(old);
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let partial = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(&format!(".{PREFIX}")) && name.ends_with(PARTIAL));
        if partial && entry.file_type()?.is_dir() && last_written(&entry.path())? < stale_before() {
            std::fs::remove_dir_all(entry.path())
                .with_context(|| format!("deleting {}", entry.path().display()))?;
        }
    }
    Ok(deleted)
}

/// When anything in the directory `dir` (or the directory itself) was last written.
fn last_written(dir: &Path) -> anyhow::Result<SystemTime> {
    let mut newest = std::fs::metadata(dir)?.modified()?;
    for entry in std::fs::read_dir(dir)? {
        newest = newest.max(entry?.metadata()?.modified()?);
    }
    Ok(newest)
}

fn stale_before() -> SystemTime {
    SystemTime::now()
        .checked_sub(STALE_PARTIAL)
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn entry_of(path: &Path, name: &str) -> FileEntry {
        let (bytes, sha256) = digest(path, &|_| {}, None).unwrap();
        FileEntry {
            name: name.to_owned(),
            bytes,
            sha256,
        }
    }

    fn manifest(files: Vec<FileEntry>) -> Manifest {
        Manifest {
            format: FORMAT,
            webook_version: "0.1.0".to_owned(),
            schema_version: 42,
            snapshot_at: 1,
            finished_at: 2,
            source: "sqlite:///data/webook.db".to_owned(),
            files,
        }
    }

    #[test]
    fn names_sort_as_times_do() {
        let (earlier, later) = (name_at(1_767_225_600_000), name_at(1_767_225_600_123));
        assert_eq!(earlier, "webook-20260101T000000.000Z");
        assert!(earlier < later && later < name_at(1_767_225_601_000));
    }

    #[test]
    fn a_changed_byte_is_a_checksum_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DATABASE), b"the database").unwrap();
        let written = manifest(vec![entry_of(&dir.path().join(DATABASE), DATABASE)]);
        written.write(dir.path()).unwrap();
        let read = Manifest::read(dir.path()).unwrap();
        assert_eq!(read, written);
        read.verify(dir.path(), &|_| {}).unwrap();
        std::fs::write(dir.path().join(DATABASE), b"the databasE").unwrap();
        let err = read.verify(dir.path(), &|_| {}).unwrap_err().to_string();
        assert!(err.starts_with("checksum mismatch: ") && err.ends_with("the backup is corrupt"));
    }

    #[test]
    fn a_manifest_naming_a_path_outside_its_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut evil = manifest(vec![FileEntry {
            name: DATABASE.to_owned(),
            bytes: 0,
            sha256: String::new(),
        }]);
        evil.files.push(FileEntry {
            name: "../jwt-secrets.toml".to_owned(),
            bytes: 0,
            sha256: String::new(),
        });
        evil.write(dir.path()).unwrap();
        let err = Manifest::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("unexpected file"), "{err}");
    }

    #[test]
    fn pruning_keeps_the_newest_and_nothing_else_of_ours() {
        let dir = tempfile::tempdir().unwrap();
        for ms in [3_000, 1_000, 2_000, 4_000] {
            let backup = dir.path().join(name_at(ms));
            std::fs::create_dir(&backup).unwrap();
            manifest(Vec::new()).write(&backup).unwrap();
        }
        // Not backups: an operator's file, a directory without manifest, a fresh partial one.
        std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
        std::fs::create_dir(dir.path().join(name_at(5_000))).unwrap();
        std::fs::create_dir(partial_dir(dir.path(), &name_at(6_000))).unwrap();
        let deleted = prune(dir.path(), 2).unwrap();
        assert_eq!(
            deleted,
            vec![
                dir.path().join(name_at(1_000)),
                dir.path().join(name_at(2_000))
            ]
        );
        assert_eq!(
            list(dir.path()).unwrap(),
            vec![
                dir.path().join(name_at(3_000)),
                dir.path().join(name_at(4_000))
            ]
        );
        assert!(dir.path().join("notes.txt").exists());
        assert!(dir.path().join(name_at(5_000)).exists());
        assert!(partial_dir(dir.path(), &name_at(6_000)).exists(), "in use");
    }
}
