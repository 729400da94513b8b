//! The live settings service: what admins see and change ([`LiveSettings::list`],
//! [`LiveSettings::set`]), and the follower that applies stored changes on this instance.
//!
//! A change is checked against the start-up configuration with every stored value on top (the
//! same validation, and the same one-line error, as a start-up with it), stored with its audit
//! entry, and applied here at once; every other instance applies it at its next poll
//! (`live_settings_poll`). The follower's state is on `/readyz` (`details.live_settings`): the
//! version applied, the stored values this instance refused, or why it cannot read them.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::Duration,
};

use platform::{
    config::Config,
    db::now_millis,
    error::{AppError, Msg},
    live::{Applied, LiveConfig},
    status::StatusBoard,
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::live_settings::store::{Change, LiveSettingsStore, LogEntry, Snapshot};

/// The `/readyz` detail of the follower.
const STATUS: &str = "live_settings";

/// A setting as admins see it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingView {
    /// The key (as in webook.toml; the environment variable is `WEBOOK_` and the key in upper
    /// case).
    pub key: String,
    /// The value in effect on this instance (secrets as `"<redacted>"`, or `""` when unset).
    #[schema(value_type = Object)]
    pub value: serde_json::Value,
    /// Its value at start-up (defaults, webook.toml, environment, flags).
    #[schema(value_type = Object)]
    pub start_value: serde_json::Value,
    /// Whether it changes without a restart.
    pub live: bool,
    /// Whether a live value is stored (else the start-up value is in effect).
    pub overridden: bool,
    /// Who stored the live value (0: the command line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin: Option<i64>,
    /// `api`, or `cli:<user>@<host>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// When it was stored (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utime: Option<i64>,
    /// Why this instance does not apply the stored value (a key or value its version does not
    /// accept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The live settings of this instance and the store they come from. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LiveSettings {
    store: LiveSettingsStore,
    live: LiveConfig,
    status: StatusBoard,
    /// The store version last read (-1: none yet).
    read: Arc<AtomicI64>,
}

impl LiveSettings {
    /// The service over `store`, applying to `live` and reporting on `status`.
    pub fn new(store: LiveSettingsStore, live: LiveConfig, status: StatusBoard) -> Self {
        Self {
            store,
            live,
            status,
            read: Arc::new(AtomicI64::new(-1)),
        }
    }

    /// Reads the stored values and applies them when their version moved.
    pub async fn reload(&self) -> anyhow::Result<Applied> {
        if self.store.version().await? == self.read.load(Ordering::Acquire) {
            return Ok(self.live.applied());
        }
        let snapshot = self.store.snapshot().await?;
        Ok(self.apply(&snapshot))
    }

    fn apply(&self, snapshot: &Snapshot) -> Applied {
        self.read.store(snapshot.version, Ordering::Release);
        let applied = self.live.apply(snapshot.version, snapshot.plain());
        let status = if applied.refused.is_empty() {
            format!("version {}", applied.version)
        } else {
            let refused: Vec<String> = applied
                .refused
                .iter()
                .map(|(key, why)| format!("{key}: {why}"))
                .collect();
            format!(
                "version {}; not applied here: {}",
                applied.version,
                refused.join("; ")
            )
        };
        self.status.set(STATUS, status);
        applied
    }

    /// Applies stored changes every `poll` until `stop`.
    pub async fn follow(self, poll: Duration, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(poll) => {}
            }
            if let Err(err) = self.reload().await {
                let applied = self.live.applied().version;
                tracing::warn!(error = format!("{err:#}"), "cannot read the live settings");
                self.status.set(
                    STATUS,
                    format!("version {applied}; cannot read the stored settings: {err:#}"),
                );
            }
        }
    }

    /// Every setting: its value in effect here, its start-up value, whether it is live.
    pub async fn list(&self) -> Result<Vec<SettingView>, AppError> {
        let snapshot = self.store.snapshot().await?;
        let applied = self.apply(&snapshot);
        views(&self.live.current(), self.live.start(), &snapshot, &applied)
    }

    /// One setting.
    pub async fn get(&self, key: &str) -> Result<SettingView, AppError> {
        self.list()
            .await?
            .into_iter()
            .find(|view| view.key == key)
            .ok_or_else(|| invalid(format!("unknown setting {key:?}")))
    }

    /// Sets `key` to `value` (`None`: back to its start-up value) for every instance, as
    /// `admin` via `via`: refused (code 4, the start-up error) when the key needs a restart or
    /// the value is invalid. Applied here before it returns.
    pub async fn set(
        &self,
        key: &str,
        value: Option<serde_json::Value>,
        (admin, via): (i64, &str),
    ) -> Result<SettingView, AppError> {
        self.live
            .start()
            .check_live_key(key)
            .map_err(|err| invalid(err.to_string()))?;
        let live = self.live.clone();
        let change = self
            .store
            .change(key, value.as_ref(), (admin, via), now_millis(), |values| {
                live.check(values).map(drop)
            })
            .await?;
        match change {
            Change::Refused(err) => return Err(invalid(err.to_string())),
            Change::Done(version) => {
                tracing::info!(key, ?value, admin, via, version, "live setting changed");
            }
            Change::Unchanged => {}
        }
        self.get(key).await
    }

    /// The audit log, newest first.
    pub async fn log(
        &self,
        key: Option<&str>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<LogEntry>, AppError> {
        Ok(self.store.log(key, before, limit).await?)
    }
}

fn invalid(message: String) -> AppError {
    let zh = format!("设置无效：{message}");
    AppError::InvalidInput(Msg::owned(message, zh))
}

/// The views of every setting of `current`, beside `start`'s values and what is stored.
fn views(
    current: &Config,
    start: &Config,
    snapshot: &Snapshot,
    applied: &Applied,
) -> Result<Vec<SettingView>, AppError> {
    let starting: BTreeMap<&str, serde_json::Value> = start
        .entries()?
        .into_iter()
        .map(|(key, value, _)| (key, value))
        .collect();
    Ok(current
        .entries()?
        .into_iter()
        .map(|(key, value, live)| {
            let stored = snapshot.values.get(key);
            SettingView {
                key: key.to_owned(),
                value,
                start_value: starting
                    .get(key)
                    .cloned()
                    .unwrap_or(serde_json::Value::Null),
                live,
                overridden: stored.is_some(),
                admin: stored.map(|stored| stored.admin),
                via: stored.map(|stored| stored.via.clone()),
                utime: stored.map(|stored| stored.utime),
                refused: applied.refused.get(key).cloned(),
            }
        })
        .collect())
}
