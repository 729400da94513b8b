//! Direct reads of an embedded (SQLite) database without sqlx: bulk scans ([`read`]) and the
//! point reads of hot request paths ([`read_inline`]).
//!
//! sqlx runs each SQLite connection on a worker thread of its own and hands every row to the
//! async side through a channel, decoded into an owned row (for the `Any` driver, one more
//! conversion with an allocation per value). For a query that returns a few rows that is
//! noise; for a scan of hundreds of thousands of rows it is most of the cost (docs/
//! PERFORMANCE.md → Hot list). [`read`] instead opens a connection of its own to the database
//! file with `rusqlite` on a blocking thread and gives it to the caller, who steps through the
//! rows and folds them into whatever it needs, reading columns in place: no hand-off, no
//! per-row allocation, and the async workers stay free.
//!
//! A point read (a row or two by key, a cache miss of the reader view) has the opposite shape:
//! through sqlx its cost is the hand-off itself — the query crosses to the connection's thread
//! and the row comes back, two thread wake-ups per statement, more than SQLite's own few
//! microseconds. [`read_inline`] runs it on the calling thread, on a connection that thread
//! keeps open (one per database file, at most [`INLINE_CONNECTIONS_PER_THREAD`]), with its
//! statements prepared once (`prepare_cached`). An async worker may run it because it cannot
//! wait: the connection has no busy timeout, so a lock (WAL readers meet one only while the
//! wal-index is rebuilt) is an error at once, and callers then take the pooled path, which waits
//! as usual. The pages come from SQLite's cache or the OS's; a database that does not fit in
//! memory would make these reads wait for the disk, and should then be read through the pools.
//!
//! Only for reads: the connection is `query_only`, outside the pools, their circuit and the
//! routing's pause (a read cannot leave a write behind on a database being moved away from).
//! Data flows: [`super::Db::sqlite_file`] names the file (none on PostgreSQL or an in-memory
//! database, where callers use the pools) → [`read`] opens it (WAL, so it reads a snapshot
//! while the writer goes on) → the caller's closure → its result back on the async side.

use std::{
    cell::RefCell,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
pub use rusqlite;

/// How long a direct read waits for a lock (as the pools' `busy_timeout`).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Most databases a thread keeps an inline connection to (tests open many; a server one).
pub const INLINE_CONNECTIONS_PER_THREAD: usize = 4;

thread_local! {
    /// This thread's inline connections, most recently opened last.
    static INLINE: RefCell<Vec<(PathBuf, rusqlite::Connection)>> = const { RefCell::new(Vec::new()) };
}

/// Opens `file` for reads only: read-write without create (a read-only open of a WAL database
/// fails when its shared-memory file is missing), then restricted to queries.
fn open_for_reads(file: &Path, busy_timeout: Duration) -> anyhow::Result<rusqlite::Connection> {
    let connection = rusqlite::Connection::open_with_flags(
        file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {} for a direct read", file.display()))?;
    connection.busy_timeout(busy_timeout)?;
    connection.pragma_update(None, "query_only", true)?;
    Ok(connection)
}

/// Runs the short read `read` on the calling thread, on this thread's connection to `file`
/// (opened on first use), and returns what it returned; never waits for a lock (module docs).
/// On an error the connection is closed (the next call opens a fresh one) and the caller should
/// take the pooled path. Not re-entrant: a `read` that calls `read_inline` gets an error.
pub fn read_inline<R>(
    file: &Path,
    read: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<R>,
) -> anyhow::Result<R> {
    INLINE.with(|connections| {
        let mut connections = connections
            .try_borrow_mut()
            .map_err(|_| anyhow::anyhow!("read_inline called from within read_inline"))?;
        let index = match connections.iter().position(|(path, _)| path == file) {
            Some(index) => index,
            None => {
                let connection = open_for_reads(file, Duration::ZERO)?;
                if connections.len() >= INLINE_CONNECTIONS_PER_THREAD {
                    connections.remove(0);
                }
                connections.push((file.to_owned(), connection));
                connections.len() - 1
            }
        };
        let result = read(&connections[index].1);
        if result.is_err() {
            connections.remove(index);
        }
        result.with_context(|| format!("inline read of {}", file.display()))
    })
}

/// Runs `read` on a new read-only connection to the SQLite database `file`, on a blocking
/// thread, and returns what it returned.
pub async fn read<R, F>(file: PathBuf, read: F) -> anyhow::Result<R>
where
    R: Send + 'static,
    F: FnOnce(&rusqlite::Connection) -> rusqlite::Result<R> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let connection = open_for_reads(&file, BUSY_TIMEOUT)?;
        read(&connection).with_context(|| format!("direct read of {}", file.display()))
    })
    .await
    .context("the direct read's thread failed")?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    /// A SQLite database in `dir` whose table `numbers` holds `values` (e.g. `"(1), (2)"`).
    async fn numbers(dir: &tempfile::TempDir, values: &str) -> Db {
        let url = format!("sqlite://{}", dir.path().join("numbers.db").display());
        let db = Db::connect_url(&url, 2).await.unwrap();
        sqlx::raw_sql(&format!(
            "CREATE TABLE numbers (n INTEGER); INSERT INTO numbers VALUES {values}"
        ))
        .execute(db.writer())
        .await
        .unwrap();
        db
    }

    #[tokio::test]
    async fn reads_what_the_pools_wrote_and_refuses_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let db = numbers(&dir, "(1), (2), (3)").await;
        let file = db.sqlite_file().unwrap();
        let sum: i64 = read(file.clone(), |connection| {
            connection.query_row("SELECT sum(n) FROM numbers", [], |row| row.get(0))
        })
        .await
        .unwrap();
        assert_eq!(sum, 6);
        let write = read(file, |connection| {
            connection.execute("INSERT INTO numbers VALUES (4)", [])
        })
        .await;
        assert!(write.is_err(), "a direct read wrote: {write:?}");
        db.close().await;
    }

    #[tokio::test]
    async fn inline_reads_see_each_commit_refuse_writes_and_recover() {
        let dir = tempfile::tempdir().unwrap();
        let db = numbers(&dir, "(1)").await;
        let file = db.sqlite_file().unwrap();
        let sum = |file: &Path| {
            read_inline(file, |connection| {
                connection
                    .prepare_cached("SELECT sum(n) FROM numbers")?
                    .query_row([], |row| row.get::<_, i64>(0))
            })
        };
        assert_eq!(sum(&file).unwrap(), 1);
        // The kept connection sees later commits (no snapshot outlives a read).
        sqlx::query("INSERT INTO numbers VALUES (2)")
            .execute(db.writer())
            .await
            .unwrap();
        assert_eq!(sum(&file).unwrap(), 3);
        let write = read_inline(&file, |connection| {
            connection.execute("INSERT INTO numbers VALUES (4)", [])
        });
        assert!(write.is_err(), "an inline read wrote: {write:?}");
        // The failed read closed its connection; the next one opens afresh.
        assert_eq!(sum(&file).unwrap(), 3);
        let nested = read_inline(&file, |_| Ok(sum(&file).is_err()));
        assert!(nested.unwrap(), "a nested inline read ran");
        db.close().await;
    }
}
