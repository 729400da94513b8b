//! Restoring a backup into a data dir, never half: the files are written beside their places,
//! checked, and only then renamed into them, under a journal that a crash leaves behind to be
//! finished.
//!
//! Data flow ([`stage`]): the manifest is read and the backup's schema checked against this
//! binary's; each file is copied from the backup to a hidden staging file beside its
//! destination (same directory, so the rename is atomic), its SHA-256 computed in the same pass
//! and compared with the manifest's — a mismatch removes what was staged and refuses, the data
//! dir as it was — and the staged database is checked (`PRAGMA quick_check`, its schema
//! version). Then the journal (`restore-journal.json` in the data dir) is written and synced,
//! naming every staged file, its destination and where the file it replaces is kept.
//! [`Journal::roll_forward`] does the renames: for each file still staged, the current one is
//! hard-linked aside (`<name>.replaced-<time>`; the database's `-wal` and `-shm` renamed with
//! it, so the old database stays whole and a stale WAL is never applied to the restored one),
//! then the staged file renamed over it — at every instant the destination is either the old
//! file or the restored one. Every step can be repeated, so a restore interrupted anywhere after
//! the journal is finished by running it again ([`Journal::pending`]); before the journal,
//! nothing outside the staging files has changed. [`Journal::complete`] removes it once what is
//! derived from the data has been marked for rebuilding (the caller's part: the search index).
//!
//! The caller holds the embedded instance lock throughout: no server is using the data dir.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::{
    manifest::{self, Manifest, DATABASE},
    snapshot,
};

/// The journal's file name in the data dir.
pub const JOURNAL: &str = "restore-journal.json";

/// Where a restore puts the files of a backup.
#[derive(Debug, Clone)]
pub struct Target {
    /// The SQLite database file the configuration names.
    pub database: PathBuf,
    /// The data dir (the secrets files, the journal).
    pub data_dir: PathBuf,
    /// The names of the secrets files a backup may hold.
    pub secrets: Vec<String>,
}

impl Target {
    /// Where the backup's file `name` goes; an error for a name webook does not restore.
    fn destination(&self, name: &str) -> anyhow::Result<PathBuf> {
        if name == DATABASE {
            Ok(self.database.clone())
        } else if self.secrets.iter().any(|secrets| secrets == name) {
            Ok(self.data_dir.join(name))
        } else {
            bail!("the backup holds {name}, which webook does not restore")
        }
    }
}

/// A restore whose files are staged: what remains to be renamed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    /// The backup restored.
    pub backup: PathBuf,
    /// One step per file.
    pub steps: Vec<Step>,
    /// Where the journal itself is.
    #[serde(skip)]
    path: PathBuf,
}

/// One file of a restore.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    /// The checked copy beside the destination (gone once renamed).
    pub staged: PathBuf,
    /// The file's place.
    pub destination: PathBuf,
    /// Where the file it replaces is kept.
    pub replaced: PathBuf,
    /// Whether it is the database (its `-wal` and `-shm` go aside with it).
    pub database: bool,
}

/// Reads the manifest of `backup`, refuses a backup of a schema newer than `latest_schema`, and
/// stages its files for `target`, checked, reporting `progress(stage, done, total)` in bytes;
/// the journal of the restore, written and synced.
pub fn stage(
    backup: &Path,
    target: &Target,
    latest_schema: i64,
    progress: &dyn Fn(&str, u64, u64),
) -> anyhow::Result<Journal> {
    let manifest = Manifest::read(backup)?;
    if manifest.schema_version > latest_schema {
        bail!(
            "the backup is at schema version {}, newer than this webook's {latest_schema}: \
             restore it with webook {} or later",
            manifest.schema_version,
            manifest.webook_version
        );
    }
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let replaced_suffix = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
    let mut steps = Vec::new();
    let staged = (|| {
        for file in &manifest.files {
            let destination = target.destination(&file.name)?;
            let dir = destination
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf();
            platform::db::create_private_dir(&dir)
                .with_context(|| format!("creating {}", dir.display()))?;
            remove_stale_staging(&dir, &file.name)?;
            let staged = dir.join(format!(".{}.restore-{suffix}", file.name));
            let mut replaced = destination.clone().into_os_string();
            replaced.push(format!(".replaced-{replaced_suffix}"));
            steps.push(Step {
                staged: staged.clone(),
                destination,
                replaced: PathBuf::from(replaced),
                database: file.name == DATABASE,
            });
            let mut copy = manifest::create_private(&staged)?;
            let done = std::cell::Cell::new(0u64);
            let source = backup.join(&file.name);
            let (bytes, sha256) = manifest::digest(
                &source,
                &|read| {
                    done.set(done.get() + read);
                    progress(&file.name, done.get(), file.bytes);
                },
                Some(&mut copy),
            )?;
            manifest::check_digest(&source, file, bytes, &sha256)?;
            copy.sync_all()?;
            if file.name == DATABASE {
                snapshot::check_database(&staged, manifest.schema_version)?;
            }
        }
        anyhow::Ok(())
    })();
    // The staged files' names are durable before the journal names them: a journal never
    // points at a staged file a power loss could take back.
    let staged = staged.and_then(|()| {
        let mut dirs: Vec<&Path> = steps
            .iter()
            .filter_map(|step| step.staged.parent())
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs.into_iter().try_for_each(manifest::sync_dir)
    });
    if let Err(err) = staged {
        for step in &steps {
            std::fs::remove_file(&step.staged).ok();
        }
        return Err(err);
    }
    let journal = Journal {
        backup: backup.to_path_buf(),
        steps,
        path: target.data_dir.join(JOURNAL),
    };
    if let Err(err) = journal.write() {
        for step in &journal.steps {
            std::fs::remove_file(&step.staged).ok();
        }
        std::fs::remove_file(&journal.path).ok();
        return Err(err);
    }
    Ok(journal)
}

impl Journal {
    /// The journal of a restore into `data_dir` that did not finish, if any.
    pub fn pending(data_dir: &Path) -> anyhow::Result<Option<Self>> {
        let path = data_dir.join(JOURNAL);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
        };
        let mut journal: Self = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a restore journal", path.display()))?;
        journal.path = path;
        Ok(Some(journal))
    }

    /// Where the journal is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the journal whole or not at all: into a temporary file, synced, then renamed to
    /// its name (a crash never leaves a partial journal that would block the data dir).
    fn write(&self) -> anyhow::Result<()> {
        use std::io::Write;
        let temporary = with_suffix(&self.path, ".tmp");
        std::fs::remove_file(&temporary).ok();
        let mut file = manifest::create_private(&temporary)?;
        file.write_all(serde_json::to_string_pretty(self)?.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, &self.path).with_context(|| {
            format!(
                "renaming {} to {}",
                temporary.display(),
                self.path.display()
            )
        })?;
        if let Some(dir) = self.path.parent() {
            manifest::sync_dir(dir)?;
        }
        Ok(())
    }

    /// Puts every staged file in its place, keeping the one it replaces; repeatable. The
    /// files replaced (kept aside).
    pub fn roll_forward(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut kept = Vec::new();
        for step in &self.steps {
            if step.staged.exists() {
                if step.destination.exists() && !step.replaced.exists() {
                    keep_aside(&step.destination, &step.replaced)?;
                }
                if step.database {
                    for suffix in ["-wal", "-shm"] {
                        let from = with_suffix(&step.destination, suffix);
                        if from.exists() {
                            let to = with_suffix(&step.replaced, suffix);
                            if to.exists() {
                                // Moved aside by the interrupted run, and a new one since:
                                // something opened the database in between. Overwriting
                                // either would lose the kept database's last transactions.
                                bail!(
                                    "{} and {} both exist: something opened the database after \
                                     the restore was interrupted; move {} away (it holds \
                                     transactions of neither copy you want), then run the \
                                     restore again",
                                    from.display(),
                                    to.display(),
                                    from.display()
                                );
                            }
                            std::fs::rename(&from, &to).with_context(|| {
                                format!("moving {} to {}", from.display(), to.display())
                            })?;
                        }
                    }
                }
                std::fs::rename(&step.staged, &step.destination).with_context(|| {
                    format!(
                        "renaming {} to {}",
                        step.staged.display(),
                        step.destination.display()
                    )
                })?;
                if let Some(dir) = step.destination.parent() {
                    manifest::sync_dir(dir)?;
                }
            }
            if step.replaced.exists() {
                kept.push(step.replaced.clone());
            }
        }
        Ok(kept)
    }

    /// Ends the restore: removes the journal (after [`Journal::roll_forward`] and the marking
    /// of what is derived).
    pub fn complete(&self) -> anyhow::Result<()> {
        std::fs::remove_file(&self.path)
            .with_context(|| format!("removing {}", self.path.display()))?;
        if let Some(dir) = self.path.parent() {
            manifest::sync_dir(dir)?;
        }
        Ok(())
    }
}

/// Removes what a restore killed while staging left in `dir` for `name` (`.<name>.restore-…`:
/// copies as large as the backup that no journal names). Called under the instance lock with
/// no journal pending, so none of them belongs to a restore in progress.
fn remove_stale_staging(dir: &Path, name: &str) -> anyhow::Result<()> {
    let prefix = format!(".{name}.restore-");
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_file(entry.path())
                .with_context(|| format!("removing {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Gives every file under `paths` (recursively) the owner and group of `dir` where they differ:
/// a restore run as root into the data dir of a service user (systemd's `DynamicUser=`) must
/// leave files that user can open. How many were changed; an error names the first file that
/// could not be (a restore not run as root into someone else's data dir).
pub fn own_like(dir: &Path, paths: &[PathBuf]) -> anyhow::Result<usize> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
    let (uid, gid) = (owner.uid(), owner.gid());
    let mut changed = 0;
    let mut pending: Vec<PathBuf> = paths.to_vec();
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            for entry in
                std::fs::read_dir(&path).with_context(|| format!("reading {}", path.display()))?
            {
                pending.push(entry?.path());
            }
        }
        if (meta.uid(), meta.gid()) != (uid, gid) {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid)).with_context(|| {
                format!(
                    "giving {} the owner of {} (uid {uid}, gid {gid})",
                    path.display(),
                    dir.display()
                )
            })?;
            changed += 1;
        }
    }
    Ok(changed)
}

/// `file` also under the name `aside` (a hard link: no copy, and the file stays where it is
/// until the restored one replaces it); a copy where links are not possible.
fn keep_aside(file: &Path, aside: &Path) -> anyhow::Result<()> {
    if std::fs::hard_link(file, aside).is_err() {
        std::fs::copy(file, aside)
            .with_context(|| format!("keeping {} as {}", file.display(), aside.display()))?;
    }
    Ok(())
}

/// `path` with `suffix` appended to its name (`webook.db` → `webook.db-wal`).
pub(super) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::backup::take::{take, Source};

    fn database(path: &Path, body: &str) {
        let connection = platform::db::direct::rusqlite::Connection::open(path).unwrap();
        connection
            .execute_batch(&format!(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, success BOOLEAN);
                 INSERT INTO _sqlx_migrations VALUES (7, 1);
                 CREATE TABLE t (body TEXT); INSERT INTO t VALUES ('{body}');"
            ))
            .unwrap();
    }

    fn body(path: &Path) -> String {
        let connection = platform::db::direct::rusqlite::Connection::open(path).unwrap();
        connection
            .query_row("SELECT body FROM t", [], |row| row.get(0))
            .unwrap()
    }

    /// A backup of a data dir whose database says `old`, and a target data dir whose database
    /// says `new`.
    fn backup_and_target(root: &Path) -> (PathBuf, Target) {
        let source = root.join("source");
        std::fs::create_dir(&source).unwrap();
        database(&source.join("webook.db"), "old");
        std::fs::write(source.join("jwt-secrets.toml"), "access = \"a\"\n").unwrap();
        let taken = take(
            &Source {
                database: source.join("webook.db"),
                url: "sqlite://source/webook.db".to_owned(),
                secrets: vec![source.join("jwt-secrets.toml")],
            },
            &root.join("backups"),
            &|_, _, _| {},
            &|| false,
        )
        .unwrap();
        let data_dir = root.join("target");
        std::fs::create_dir(&data_dir).unwrap();
        database(&data_dir.join("webook.db"), "new");
        std::fs::write(data_dir.join("jwt-secrets.toml"), "access = \"b\"\n").unwrap();
        (
            taken.dir,
            Target {
                database: data_dir.join("webook.db"),
                data_dir,
                secrets: vec!["jwt-secrets.toml".to_owned()],
            },
        )
    }

    #[test]
    fn restored_files_get_the_owner_of_the_data_dir() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let data_dir = root.path().join("data");
        std::fs::create_dir_all(data_dir.join("search/segments")).unwrap();
        std::fs::write(data_dir.join("webook.db"), "db").unwrap();
        std::fs::write(data_dir.join("search/segments/a"), "segment").unwrap();
        let paths = [data_dir.join("webook.db"), data_dir.join("search")];
        let ours = std::fs::metadata(&data_dir).unwrap().uid();
        if ours == 0 {
            // Root: the data dir belongs to a service user; the files root wrote follow it.
            std::os::unix::fs::chown(&data_dir, Some(64_123), Some(64_124)).unwrap();
            assert_eq!(own_like(&data_dir, &paths).unwrap(), 4);
            for path in [
                data_dir.join("webook.db"),
                data_dir.join("search"),
                data_dir.join("search/segments"),
                data_dir.join("search/segments/a"),
            ] {
                let meta = std::fs::metadata(&path).unwrap();
                assert_eq!((meta.uid(), meta.gid()), (64_123, 64_124), "{path:?}");
            }
        }
        // Owned alike already: nothing to change.
        assert_eq!(own_like(&data_dir, &paths).unwrap(), 0);
    }

    #[test]
    fn a_wal_kept_aside_is_never_overwritten_by_a_new_one() {
        let root = tempfile::tempdir().unwrap();
        let (backup, target) = backup_and_target(root.path());
        let journal = stage(&backup, &target, 7, &|_, _, _| {}).unwrap();
        assert!(
            !target.data_dir.join(format!("{JOURNAL}.tmp")).exists(),
            "the journal is renamed into place"
        );
        let step = journal.steps.iter().find(|step| step.database).unwrap();
        // The interrupted run had moved the WAL aside; something opened the database since
        // and made a new one.
        keep_aside(&step.destination, &step.replaced).unwrap();
        let kept_wal = with_suffix(&step.replaced, "-wal");
        let new_wal = with_suffix(&step.destination, "-wal");
        std::fs::write(&kept_wal, "kept").unwrap();
        std::fs::write(&new_wal, "new").unwrap();
        let refused = journal.roll_forward().unwrap_err().to_string();
        assert!(refused.contains("both exist"), "{refused}");
        assert_eq!(std::fs::read_to_string(&kept_wal).unwrap(), "kept");
        assert_eq!(std::fs::read_to_string(&new_wal).unwrap(), "new");
        assert!(step.staged.exists(), "nothing renamed");
    }

    #[test]
    fn an_interrupted_restore_is_finished_by_its_journal() {
        let root = tempfile::tempdir().unwrap();
        let (backup, target) = backup_and_target(root.path());
        // What a restore killed while copying left behind: removed by the next one.
        let leftover = target.data_dir.join(".webook.db.restore-0123abcd");
        std::fs::write(&leftover, "a partial copy").unwrap();
        let journal = stage(&backup, &target, 7, &|_, _, _| {}).unwrap();
        assert!(!leftover.exists());
        // Staged and journalled, nothing replaced yet: the "crash".
        assert_eq!(body(&target.database), "new");
        let pending = Journal::pending(&target.data_dir).unwrap().unwrap();
        assert_eq!(pending.backup, journal.backup);
        let kept = pending.roll_forward().unwrap();
        // Again, as after a crash half-way through the renames: nothing changes.
        assert_eq!(pending.roll_forward().unwrap(), kept);
        pending.complete().unwrap();
        assert!(Journal::pending(&target.data_dir).unwrap().is_none());
        assert_eq!(body(&target.database), "old");
        assert_eq!(
            std::fs::read_to_string(target.data_dir.join("jwt-secrets.toml")).unwrap(),
            "access = \"a\"\n"
        );
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert_eq!(body(&kept[0]), "new", "the replaced database is kept whole");
        let leftovers: Vec<_> = std::fs::read_dir(&target.data_dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.contains(".restore-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn a_corrupt_or_newer_backup_changes_nothing() {
        let root = tempfile::tempdir().unwrap();
        let (backup, target) = backup_and_target(root.path());
        let names = || {
            let mut names: Vec<_> = std::fs::read_dir(&target.data_dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        let before = names();
        let err = stage(&backup, &target, 6, &|_, _, _| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("newer than this webook's 6"), "{err}");
        let secrets = backup.join("jwt-secrets.toml");
        std::fs::write(&secrets, "access = \"x\"\n").unwrap();
        let err = stage(&backup, &target, 7, &|_, _, _| {})
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("checksum mismatch"), "{err}");
        assert_eq!(before, names(), "nothing staged is left, no journal");
        assert_eq!(body(&target.database), "new");
    }
}
