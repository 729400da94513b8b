//! Direct reads of an embedded (SQLite) database for bulk scans, without sqlx.
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
//! Only for reads: the connection is `query_only`, outside the pools, their circuit and the
//! routing's pause (a read cannot leave a write behind on a database being moved away from).
//! Data flows: [`super::Db::sqlite_file`] names the file (none on PostgreSQL or an in-memory
//! database, where callers use the pools) → [`read`] opens it (WAL, so it reads a snapshot
//! while the writer goes on) → the caller's closure → its result back on the async side.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
pub use rusqlite;

/// How long a direct read waits for a lock (as the pools' `busy_timeout`).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `read` on a new read-only connection to the SQLite database `file`, on a blocking
/// thread, and returns what it returned.
pub async fn read<R, F>(file: PathBuf, read: F) -> anyhow::Result<R>
where
    R: Send + 'static,
    F: FnOnce(&rusqlite::Connection) -> rusqlite::Result<R> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        // Opened read-write without create (a read-only open of a WAL database fails when its
        // shared-memory file is missing) and then restricted to queries.
        let connection = rusqlite::Connection::open_with_flags(
            &file,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("opening {} for a direct read", file.display()))?;
        connection.busy_timeout(BUSY_TIMEOUT)?;
        connection.pragma_update(None, "query_only", true)?;
        read(&connection).with_context(|| format!("direct read of {}", file.display()))
    })
    .await
    .context("the direct read's thread failed")?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    #[tokio::test]
    async fn reads_what_the_pools_wrote_and_refuses_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("direct.db").display());
        let db = Db::connect_url(&url, 2).await.unwrap();
        sqlx::raw_sql("CREATE TABLE numbers (n INTEGER); INSERT INTO numbers VALUES (1), (2), (3)")
            .execute(db.writer())
            .await
            .unwrap();
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
}
