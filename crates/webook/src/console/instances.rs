//! Which instances are running, and how each sees its dependencies: every process (any role)
//! writes its row of `instances` — id (the same id its job worker records as `owner`), role,
//! mode, version, start time, and the readiness it just probed ([`platform::ops::readiness`]) —
//! every [`HEARTBEAT`], and deletes it when it stops. `GET /admin/instances` lists the rows seen
//! within [`SEEN_WITHIN`]; a row not refreshed for a day (a process killed) is purged when an
//! instance starts.

use std::{collections::BTreeMap, time::Duration};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use platform::{
    db::{now_millis, Db},
    feature::Platform,
    ops,
};

/// How often an instance reports.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// An instance not heard from for this long is not listed.
pub const SEEN_WITHIN: Duration = Duration::from_secs(60);
/// A row this old belongs to a process that did not stop cleanly: purged.
const FORGET_AFTER_MS: i64 = 24 * 3600 * 1000;

/// One instance as listed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    /// `<host>-<pid>-<random>`, as in the jobs' `owner`.
    pub id: String,
    /// `all`, `api` or `worker`.
    pub role: String,
    /// `embedded` or `cluster`.
    pub mode: String,
    /// The binary's version.
    pub version: String,
    /// Start time (ms).
    pub started_at: i64,
    /// Last report (ms).
    pub seen_at: i64,
    /// The database as it saw it: `up`, `down` or `not writable`.
    pub database: String,
    /// Redis as it saw it: `up`, `down` or `not configured`.
    pub redis: String,
    /// What its features reported (e.g. `{"search": "ready"}`).
    pub details: BTreeMap<String, String>,
}

/// A row of `instances`; its `details` are JSON text.
#[derive(sqlx::FromRow)]
struct InstanceRow {
    id: String,
    role: String,
    mode: String,
    version: String,
    started_at: i64,
    seen_at: i64,
    database_state: String,
    redis_state: String,
    details: String,
}

impl From<InstanceRow> for InstanceView {
    /// Details that are not a JSON object of strings show as none.
    fn from(row: InstanceRow) -> Self {
        Self {
            id: row.id,
            role: row.role,
            mode: row.mode,
            version: row.version,
            started_at: row.started_at,
            seen_at: row.seen_at,
            database: row.database_state,
            redis: row.redis_state,
            details: serde_json::from_str(&row.details).unwrap_or_default(),
        }
    }
}

/// This instance's reporting, and the list of all.
#[derive(Debug, Clone)]
pub struct InstanceRegistry {
    db: Db,
    id: String,
    role: &'static str,
    started_at: i64,
}

impl InstanceRegistry {
    /// The registry of this process, `id` as its job worker names it.
    pub fn new(db: Db, id: String, role: &'static str) -> Self {
        Self {
            db,
            id,
            role,
            started_at: now_millis(),
        }
    }

    /// This instance's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Writes this instance's row with `readiness` as just probed.
    pub async fn report(&self, readiness: &ops::Readiness) -> sqlx::Result<()> {
        let now = now_millis();
        let details = serde_json::to_string(&readiness.details).unwrap_or_else(|_| "{}".into());
        sqlx::query(
            "INSERT INTO instances (id, role, mode, version, started_at, seen_at, database_state, \
             redis_state, details) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, \
             database_state = excluded.database_state, redis_state = excluded.redis_state, \
             details = excluded.details",
        )
        .bind(&self.id)
        .bind(self.role)
        .bind(readiness.mode)
        .bind(env!("CARGO_PKG_VERSION"))
        .bind(self.started_at)
        .bind(now)
        .bind(readiness.database)
        .bind(readiness.redis)
        .bind(details)
        .execute(self.db.writer())
        .await?;
        Ok(())
    }

    /// Deletes the rows of processes not heard from for a day (killed, never left).
    async fn forget_the_departed(&self) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM instances WHERE seen_at < $1")
            .bind(now_millis() - FORGET_AFTER_MS)
            .execute(self.db.writer())
            .await?;
        Ok(())
    }

    /// Removes this instance's row (it is stopping).
    pub async fn leave(&self) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM instances WHERE id = $1")
            .bind(&self.id)
            .execute(self.db.writer())
            .await?;
        Ok(())
    }

    /// The instances seen within [`SEEN_WITHIN`], oldest start first.
    pub async fn recent(&self) -> sqlx::Result<Vec<InstanceView>> {
        let since = now_millis() - i64::try_from(SEEN_WITHIN.as_millis()).unwrap_or(i64::MAX);
        let rows: Vec<InstanceRow> = sqlx::query_as(
            "SELECT id, role, mode, version, started_at, seen_at, database_state, redis_state, \
             details FROM instances WHERE seen_at >= $1 ORDER BY started_at, id",
        )
        .bind(since)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows.into_iter().map(InstanceView::from).collect())
    }

    /// Forgets departed instances, then reports every [`HEARTBEAT`] until `stop`, then leaves.
    /// A failed report is logged and retried at the next beat (the database being down is what
    /// the overview would show).
    pub async fn run(self, platform: Platform, stop: CancellationToken) {
        if let Err(err) = self.forget_the_departed().await {
            tracing::warn!(error = %err, "could not purge departed instances");
        }
        let mut beat = tokio::time::interval(HEARTBEAT);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = beat.tick() => {}
            }
            let readiness = ops::readiness(&platform).await;
            if let Err(err) = self.report(&readiness).await {
                tracing::warn!(error = %err, "could not report this instance");
            }
        }
        if let Err(err) = self.leave().await {
            tracing::warn!(error = %err, "could not remove this instance's report");
        }
    }
}
