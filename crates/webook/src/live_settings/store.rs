//! SQL of the live settings (`live_settings`, `live_settings_log`, `live_settings_version`), one
//! implementation for SQLite and PostgreSQL. A change bumps the version first in its
//! transaction — which serialises changes — then checks the whole new set, writes the value and
//! its audit entry, and commits; a refused or unchanged value rolls back and changes nothing.

use std::collections::BTreeMap;

use platform::db::Db;
use serde::Serialize;
use utoipa::ToSchema;

/// A stored value: who set it and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The value (JSON).
    pub value: serde_json::Value,
    /// The admin who set it (0: the command line).
    pub admin: i64,
    /// `api`, or `cli:<user>@<host>`.
    pub via: String,
    /// When (ms).
    pub utime: i64,
}

/// Every stored value at one version.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The version they were read at.
    pub version: i64,
    /// The values, by key.
    pub values: BTreeMap<String, Stored>,
}

impl Snapshot {
    /// The values alone, as [`platform::live::LiveConfig::apply`] takes them.
    pub fn plain(&self) -> BTreeMap<String, serde_json::Value> {
        self.values
            .iter()
            .map(|(key, stored)| (key.clone(), stored.value.clone()))
            .collect()
    }
}

/// An audit entry: one change of one key.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = LiveSettingLogEntry)]
pub struct LogEntry {
    /// The entry's id (newest first; the `before` of the next page).
    pub id: i64,
    /// The setting.
    pub key: String,
    /// Its live value before; absent: it was at its start-up value.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub old_value: Option<serde_json::Value>,
    /// Its live value after; absent: set back to its start-up value.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub new_value: Option<serde_json::Value>,
    /// The admin (0: the command line).
    pub admin: i64,
    /// `api`, or `cli:<user>@<host>`.
    pub via: String,
    /// When (ms).
    pub ctime: i64,
}

/// The outcome of a change.
#[derive(Debug)]
pub enum Change<E> {
    /// Written, at this version.
    Done(i64),
    /// The key already had that value (or none to remove): nothing written.
    Unchanged,
    /// The check refused the new set: nothing written.
    Refused(E),
}

/// Reads and writes the live settings.
#[derive(Debug, Clone)]
pub struct LiveSettingsStore {
    db: Db,
}

impl LiveSettingsStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The version: it moves with every change.
    pub async fn version(&self) -> sqlx::Result<i64> {
        sqlx::query_scalar("SELECT version FROM live_settings_version WHERE id = 1")
            .fetch_one(self.db.pool())
            .await
    }

    /// Every stored value and the version they are at, read in one transaction.
    pub async fn snapshot(&self) -> sqlx::Result<Snapshot> {
        let mut tx = self.db.pool().begin().await?;
        let version: i64 =
            sqlx::query_scalar("SELECT version FROM live_settings_version WHERE id = 1")
                .fetch_one(&mut *tx)
                .await?;
        let values = read_values(&mut tx).await?;
        tx.commit().await?;
        Ok(Snapshot { version, values })
    }

    /// Sets `key` to `value` (`None`: back to its start-up value) as `admin` via `via`, if
    /// `check` accepts the whole new set of values.
    pub async fn change<E>(
        &self,
        key: &str,
        value: Option<&serde_json::Value>,
        (admin, via): (i64, &str),
        now: i64,
        check: impl FnOnce(&BTreeMap<String, serde_json::Value>) -> Result<(), E>,
    ) -> sqlx::Result<Change<E>> {
        let mut tx = self.db.writer().begin().await?;
        let version: i64 = sqlx::query_scalar(
            "UPDATE live_settings_version SET version = version + 1 WHERE id = 1 RETURNING version",
        )
        .fetch_one(&mut *tx)
        .await?;
        let stored = read_values(&mut tx).await?;
        let old = stored.get(key).map(|stored| stored.value.clone());
        if old.as_ref() == value {
            tx.rollback().await?;
            return Ok(Change::Unchanged);
        }
        let mut values: BTreeMap<String, serde_json::Value> = stored
            .into_iter()
            .map(|(key, stored)| (key, stored.value))
            .collect();
        match value {
            Some(value) => values.insert(key.to_owned(), value.clone()),
            None => values.remove(key),
        };
        if let Err(err) = check(&values) {
            tx.rollback().await?;
            return Ok(Change::Refused(err));
        }
        match value {
            Some(value) => {
                sqlx::query(
                    "INSERT INTO live_settings (key, value, admin, via, utime) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) DO UPDATE SET \
                     value = excluded.value, admin = excluded.admin, via = excluded.via, \
                     utime = excluded.utime",
                )
                .bind(key)
                .bind(value.to_string())
                .bind(admin)
                .bind(via)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            None => {
                sqlx::query("DELETE FROM live_settings WHERE key = $1")
                    .bind(key)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        sqlx::query(
            "INSERT INTO live_settings_log (key, old_value, new_value, admin, via, ctime) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(key)
        .bind(old.map(|old| old.to_string()))
        .bind(value.map(serde_json::Value::to_string))
        .bind(admin)
        .bind(via)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Change::Done(version))
    }

    /// The audit log, newest first, before entry `before` (all when `None`), at most `limit`;
    /// one key's only when given.
    pub async fn log(
        &self,
        key: Option<&str>,
        before: Option<i64>,
        limit: i64,
    ) -> sqlx::Result<Vec<LogEntry>> {
        type Row = (
            i64,
            String,
            Option<String>,
            Option<String>,
            i64,
            String,
            i64,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, key, old_value, new_value, admin, via, ctime FROM live_settings_log \
             WHERE id < $1 AND ($2 = '' OR key = $2) ORDER BY id DESC LIMIT $3",
        )
        .bind(before.unwrap_or(i64::MAX))
        .bind(key.unwrap_or(""))
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(id, key, old_value, new_value, admin, via, ctime)| LogEntry {
                    id,
                    key,
                    old_value: old_value.as_deref().map(json_of),
                    new_value: new_value.as_deref().map(json_of),
                    admin,
                    via,
                    ctime,
                },
            )
            .collect())
    }
}

/// A value as text: JSON when it reads as JSON (`10`, `true`, `[…]`, as this feature stores
/// values), else the text itself (the command line's `30s`; anything else stored is then refused
/// by the configuration with a message naming the key).
pub fn json_of(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
}

async fn read_values(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
) -> sqlx::Result<BTreeMap<String, Stored>> {
    let rows: Vec<(String, String, i64, String, i64)> =
        sqlx::query_as("SELECT key, value, admin, via, utime FROM live_settings ORDER BY key")
            .fetch_all(&mut **tx)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(key, value, admin, via, utime)| {
            (
                key,
                Stored {
                    value: json_of(&value),
                    admin,
                    via,
                    utime,
                },
            )
        })
        .collect())
}
