//! One embedded server per database.
//!
//! Embedded mode keeps state in the process (the session map, caches, locks, event queues), so
//! two embedded processes on one database would each believe the other's logout never happened.
//! [`InstanceLock::acquire`] makes the second one refuse to start with one clear line:
//! - SQLite: an exclusive advisory lock (`flock`) on `<database file>.lock`, which also records
//!   the holder's pid for the message; the kernel releases it when the process ends, however it
//!   ends, so a crash never leaves a stale lock;
//! - PostgreSQL without Redis: a session advisory lock held on a connection of its own for the
//!   life of the process.
//!
//! Cluster mode (Redis) takes no lock: sharing a database is what it is for. Commands that are
//! safe beside a running server (`jobs`, `rank`, `migrate`, `backup`) take none either; `serve`,
//! `seed` (which assumes no concurrent writer) and `restore` (which replaces the database) do.

use std::{
    fs::File,
    io::{Read, Seek, Write},
    path::PathBuf,
};

use anyhow::Context;
use sqlx::{AnyConnection, Connection};

use crate::{
    config::{Config, DatabaseKind},
    redact_url,
};

/// The PostgreSQL advisory lock key of an embedded server.
const POSTGRES_LOCK_KEY: i64 = crate::db::locks::INSTANCE;

/// Held for the life of the process; dropping it releases the database to another process.
#[derive(Debug)]
pub enum InstanceLock {
    /// The locked `<database file>.lock`.
    Sqlite(File),
    /// The connection holding the advisory lock.
    Postgres(AnyConnection),
}

impl InstanceLock {
    /// Takes the lock of `config`'s database for `what` (e.g. "webook serve"), or fails naming
    /// the process that holds it. `None` in cluster mode.
    pub async fn acquire(config: &Config, what: &str) -> anyhow::Result<Option<Self>> {
        if config.is_cluster() {
            return Ok(None);
        }
        let url = config.database_url();
        // Only a second server has the choice of cluster mode; a command needs the server gone.
        let alternative = if what.starts_with("webook serve") {
            ", or run several instances in cluster mode (redis_url)"
        } else {
            ""
        };
        let busy = |holder: &str| {
            anyhow::anyhow!(
                "another webook process{holder} is already using the database {} in embedded \
                 mode; stop it before starting {what}{alternative}",
                redact_url(&url)
            )
        };
        match config.database_kind()? {
            DatabaseKind::Sqlite => {
                let path = lock_path(&url);
                if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
                    crate::db::create_private_dir(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                let mut file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .with_context(|| format!("opening the lock file {}", path.display()))?;
                match file.try_lock() {
                    Ok(()) => {}
                    Err(std::fs::TryLockError::WouldBlock) => {
                        let mut holder = String::new();
                        file.read_to_string(&mut holder).ok();
                        let holder = holder.trim();
                        return Err(busy(&if holder.is_empty() {
                            String::new()
                        } else {
                            format!(" (pid {holder})")
                        }));
                    }
                    Err(std::fs::TryLockError::Error(err)) => {
                        return Err(err).with_context(|| format!("locking {}", path.display()));
                    }
                }
                file.set_len(0)?;
                file.rewind()?;
                write!(file, "{}", std::process::id())?;
                file.flush()?;
                Ok(Some(Self::Sqlite(file)))
            }
            DatabaseKind::Postgres => {
                sqlx::any::install_default_drivers();
                let mut connection = AnyConnection::connect(&url).await.with_context(|| {
                    format!(
                        "cannot connect to database_url (WEBOOK_DATABASE_URL) {}",
                        redact_url(&url)
                    )
                })?;
                let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(POSTGRES_LOCK_KEY)
                    .fetch_one(&mut connection)
                    .await
                    .context("taking the embedded-mode advisory lock")?;
                if !locked {
                    connection.close().await.ok();
                    return Err(busy(""));
                }
                Ok(Some(Self::Postgres(connection)))
            }
        }
    }
}

/// `<database file>.lock` of a `sqlite://` URL.
fn lock_path(url: &str) -> PathBuf {
    let file = crate::db::sqlite_file(url).unwrap_or_else(|| PathBuf::from("memory"));
    let mut name = file.into_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::Config;

    #[tokio::test]
    async fn a_second_embedded_process_on_one_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let first = InstanceLock::acquire(&config, "webook serve")
            .await
            .unwrap()
            .expect("a lock in embedded mode");
        // flock locks belong to the open file description: a second open in this process
        // conflicts just as another process's would.
        let err = InstanceLock::acquire(&config, "webook serve")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("(pid {})", std::process::id())) && err.contains("cluster mode"),
            "{err}"
        );
        drop(first);
        InstanceLock::acquire(&config, "webook serve")
            .await
            .unwrap()
            .expect("free again once the holder is gone");
    }

    #[test]
    fn the_lock_file_sits_beside_the_database() {
        assert_eq!(
            lock_path("sqlite://./data/webook.db?mode=rwc"),
            PathBuf::from("./data/webook.db.lock")
        );
        assert_eq!(lock_path("sqlite:/x/y.db"), PathBuf::from("/x/y.db.lock"));
    }
}
