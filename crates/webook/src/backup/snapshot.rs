//! The consistent online copy of an embedded (SQLite) database, and the checks of a copy.
//!
//! [`copy_database`] opens a connection of its own to the live file (the server keeps serving
//! and writing through its pools meanwhile), begins a read transaction and reads the schema
//! version in it: from then on that connection sees one snapshot of the database, whatever
//! commits after (WAL: readers never block the writer, and the writer never changes what an
//! open reader sees). SQLite's online backup API then copies the pages of that snapshot to the
//! destination a step at a time, reporting progress between steps. Because the copy runs inside
//! the read transaction, a write committed by another connection during the copy cannot make
//! the backup start over (it would if each step began its own read) nor tear it: every page is
//! of the same instant. The destination is then turned into a self-contained rollback-journal
//! file (no `-wal` beside it) and checked with `PRAGMA quick_check`.
//!
//! While the copy runs the WAL cannot be checkpointed past the snapshot, so it grows by what is
//! written meanwhile and shrinks again at the next checkpoint after the copy. Everything here
//! blocks (disk): callers run it on a blocking thread.

use std::{path::Path, time::Duration};

use anyhow::{bail, Context};
use platform::db::direct::rusqlite::{
    self,
    backup::{Backup, StepResult},
    Connection, OpenFlags,
};

/// Pages copied per step (4 MiB at SQLite's default page size): progress and cancellation are
/// looked at between steps.
const PAGES_PER_STEP: i32 = 1024;
/// How long a connection here waits for a lock (as the pools' `busy_timeout`).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before a step is tried again after the destination reported busy or locked.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// What a finished copy knows of itself.
#[derive(Debug, Clone, Copy)]
pub struct Copied {
    /// The newest migration applied in the copied snapshot.
    pub schema_version: i64,
    /// When the snapshot was taken (ms since the epoch): the copy holds every transaction
    /// committed before and none after.
    pub snapshot_at: i64,
}

/// Copies the database `source` (which must exist) to the new file `dest` as one snapshot,
/// calling `progress(done, total)` with pages between steps and stopping with an error when
/// `cancelled()` says so. `dest` is left complete and checked, or the error says why not (the
/// caller removes it).
pub fn copy_database(
    source: &Path,
    dest: &Path,
    progress: &dyn Fn(u64, u64),
    cancelled: &dyn Fn() -> bool,
) -> anyhow::Result<Copied> {
    if !source.is_file() {
        bail!("there is no database at {}", source.display());
    }
    // Read-write without create: a read-only open of a WAL database fails while its
    // shared-memory file is missing. Restricted to queries all the same.
    let from = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {}", source.display()))?;
    from.busy_timeout(BUSY_TIMEOUT)?;
    from.pragma_update(None, "query_only", true)?;
    from.execute_batch("BEGIN")?;
    // The first read of the transaction fixes its snapshot.
    let schema_version = schema_version(&from).with_context(|| {
        format!(
            "reading the schema version of {} (not a webook database?)",
            source.display()
        )
    })?;
    let snapshot_at = platform::db::now_millis();
    {
        // Created 0600 first (it holds password hashes, whatever the umask): SQLite keeps an
        // existing file's mode, and gives its journal the same.
        drop(super::manifest::create_private(dest)?);
        let mut to =
            Connection::open(dest).with_context(|| format!("creating {}", dest.display()))?;
        run_backup(&from, &mut to, progress, cancelled)?;
        to.close().map_err(|(_, err)| err)?;
    }
    from.execute_batch("COMMIT")?;
    drop(from);
    // The copied header says WAL, as the source's does; one file is what a backup should be.
    let copy = Connection::open_with_flags(dest, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .with_context(|| format!("opening the copy {}", dest.display()))?;
    let mode: String = copy.query_row("PRAGMA journal_mode = DELETE", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("delete") {
        bail!("the copy {} stayed in journal mode {mode}", dest.display());
    }
    quick_check(&copy).with_context(|| format!("checking the copy {}", dest.display()))?;
    copy.close().map_err(|(_, err)| err)?;
    Ok(Copied {
        schema_version,
        snapshot_at,
    })
}

/// Steps `from`'s open snapshot into `to`.
fn run_backup(
    from: &Connection,
    to: &mut Connection,
    progress: &dyn Fn(u64, u64),
    cancelled: &dyn Fn() -> bool,
) -> anyhow::Result<()> {
    let backup = Backup::new(from, to)?;
    loop {
        if cancelled() {
            bail!("the backup was cancelled");
        }
        let step = backup.step(PAGES_PER_STEP)?;
        let state = backup.progress();
        let total = u64::try_from(state.pagecount).unwrap_or(0);
        let remaining = u64::try_from(state.remaining).unwrap_or(0);
        progress(total.saturating_sub(remaining), total);
        match step {
            StepResult::Done => return Ok(()),
            StepResult::More => {}
            // Only the destination can be busy: nobody else knows the new file. Wait and retry.
            StepResult::Busy | StepResult::Locked => std::thread::sleep(RETRY_PAUSE),
            other => bail!("unexpected backup step result {other:?}"),
        }
    }
}

/// The newest migration applied in `connection`'s database.
pub fn schema_version(connection: &Connection) -> rusqlite::Result<i64> {
    connection.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success",
        [],
        |row| row.get(0),
    )
}

/// `PRAGMA quick_check`: the b-trees and their pages are well formed (every check but the
/// indexes' agreement with their tables, in linear time).
fn quick_check(connection: &Connection) -> anyhow::Result<()> {
    let mut statement = connection.prepare("PRAGMA quick_check")?;
    let problems: Vec<String> = statement
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    if problems != ["ok"] {
        bail!("the database is damaged: {}", problems.join("; "));
    }
    Ok(())
}

/// Checks the database file `file` (a backup's, or a copy about to be restored): it opens, is
/// well formed, and is at migration `expected`. Opened read-only: nothing is written.
pub fn check_database(file: &Path, expected: i64) -> anyhow::Result<()> {
    let connection = Connection::open_with_flags(file, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening {}", file.display()))?;
    quick_check(&connection).with_context(|| format!("checking {}", file.display()))?;
    let found = schema_version(&connection)
        .with_context(|| format!("reading the schema version of {}", file.display()))?;
    if found != expected {
        bail!(
            "{} is at schema version {found}, its manifest says {expected}",
            file.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A WAL database with a migrations table at version 3 and `rows` rows in `t`.
    fn database(path: &Path, rows: i64) -> Connection {
        let connection = Connection::open(path).unwrap();
        connection
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, success BOOLEAN);
                 INSERT INTO _sqlx_migrations VALUES (1, 1), (3, 1), (4, 0);
                 CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT);",
            )
            .unwrap();
        connection
            .execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
                 INSERT INTO t (body) SELECT 'row ' || i || ' ' || printf('%.500c', 'x') FROM n",
                [rows],
            )
            .unwrap();
        connection
    }

    #[test]
    fn a_write_committed_during_the_copy_is_not_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let (source, dest) = (dir.path().join("live.db"), dir.path().join("copy.db"));
        let live = database(&source, 20_000);
        let writes = std::cell::Cell::new(0);
        let copied = copy_database(
            &source,
            &dest,
            &|done, total| {
                // Between steps another connection commits a row: the copy must not see it,
                // nor start over.
                if done < total {
                    live.execute("INSERT INTO t (body) VALUES ('later')", [])
                        .unwrap();
                    writes.set(writes.get() + 1);
                }
            },
            &|| false,
        )
        .unwrap();
        assert!(writes.get() > 1, "the copy took several steps");
        assert_eq!(copied.schema_version, 3);
        let copy = Connection::open(&dest).unwrap();
        let rows: i64 = copy
            .query_row("SELECT COUNT(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, 20_000, "exactly the snapshot's rows");
        let mode: String = copy
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "delete");
        check_database(&dest, 3).unwrap();
        let err = check_database(&dest, 4).unwrap_err().to_string();
        assert!(err.contains("schema version 3"), "{err}");
    }

    #[test]
    fn a_cancelled_copy_fails() {
        let dir = tempfile::tempdir().unwrap();
        let (source, dest) = (dir.path().join("live.db"), dir.path().join("copy.db"));
        let _live = database(&source, 10);
        let err = copy_database(&source, &dest, &|_, _| {}, &|| true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cancelled"), "{err}");
        let missing = copy_database(&dir.path().join("none.db"), &dest, &|_, _| {}, &|| false)
            .unwrap_err()
            .to_string();
        assert!(missing.starts_with("there is no database at"), "{missing}");
    }
}
