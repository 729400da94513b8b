//! The settings of scheduled backups: where they go (unset: none are taken), when, and how many
//! are kept. Loaded by the configuration core ([`platform::config`]) with the rest; documented in
//! `docs/CONFIG.md`. `webook backup` takes `backup_dir` as its default destination too.

use std::path::PathBuf;

use anyhow::bail;
use platform::config::{Config, DatabaseKind, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`BackupSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<BackupSettings>();

/// Most backups `backup_keep` may keep (a typo's guard, not a real limit).
pub const MAX_KEEP: usize = 10_000;

/// Scheduled backup settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct BackupSettings {
    /// Directory the scheduled backups are written under, one sub-directory each; empty: no
    /// scheduled backups.
    pub backup_dir: PathBuf,
    /// When a backup is taken: cron with seconds or `@every`, UTC.
    pub backup_schedule: String,
    /// How many backups `backup_dir` keeps: after each scheduled one, the oldest beyond it are
    /// deleted.
    pub backup_keep: usize,
}

impl Default for BackupSettings {
    fn default() -> Self {
        Self {
            backup_dir: PathBuf::new(),
            backup_schedule: "@every 6h".to_owned(),
            backup_keep: 7,
        }
    }
}

impl BackupSettings {
    /// `backup_dir`, when scheduled backups are on.
    pub fn dir(&self) -> Option<&std::path::Path> {
        (!self.backup_dir.as_os_str().is_empty()).then_some(self.backup_dir.as_path())
    }

    /// `backup_schedule` parsed.
    pub fn schedule(&self) -> anyhow::Result<scheduler::Schedule> {
        scheduler::Schedule::parse(&self.backup_schedule).map_err(|err| {
            anyhow::anyhow!("invalid backup_schedule (WEBOOK_BACKUP_SCHEDULE): {err}")
        })
    }
}

impl Settings for BackupSettings {
    const KEYS: &'static [&'static str] = &["backup_dir", "backup_schedule", "backup_keep"];

    fn validate(&self, config: &Config) -> anyhow::Result<()> {
        self.schedule()?;
        if !(1..=MAX_KEEP).contains(&self.backup_keep) {
            bail!("invalid backup_keep (WEBOOK_BACKUP_KEEP): 1 to {MAX_KEEP}");
        }
        if self.dir().is_some() && matches!(config.database_kind(), Ok(DatabaseKind::Postgres)) {
            bail!(
                "invalid backup_dir (WEBOOK_BACKUP_DIR): scheduled backups copy the embedded SQLite \
                 database and database_url is PostgreSQL; back it up with pg_dump, or \
                 pg_basebackup and WAL archiving (docs/OPERATIONS.md → Backup and restore), and \
                 leave backup_dir unset"
            );
        }
        Ok(())
    }

    fn mode_note(&self, _config: &Config) -> Option<String> {
        self.dir().map(|dir| {
            format!(
                "backups to {} ({}, keeping {})",
                dir.display(),
                self.backup_schedule,
                self.backup_keep
            )
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config(database_url: &str) -> Config {
        Config {
            database_url: Some(database_url.to_owned()),
            ..Config::default()
        }
    }

    #[test]
    fn scheduled_backups_are_refused_on_postgres_in_one_line() {
        let settings = BackupSettings {
            backup_dir: PathBuf::from("/var/backups/webook"),
            ..BackupSettings::default()
        };
        let err = settings
            .validate(&config("postgres://webook@localhost/webook"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid backup_dir (WEBOOK_BACKUP_DIR): ")
                && err.contains("pg_dump")
                && !err.contains('\n'),
            "{err}"
        );
        settings
            .validate(&config("sqlite:///tmp/webook.db"))
            .unwrap();
        // Unset, PostgreSQL is fine: there is nothing to schedule.
        BackupSettings::default()
            .validate(&config("postgres://webook@localhost/webook"))
            .unwrap();
    }

    #[test]
    fn a_bad_schedule_or_keep_names_its_key() {
        let bad = BackupSettings {
            backup_schedule: "every day".to_owned(),
            ..BackupSettings::default()
        };
        let err = bad.validate(&Config::default()).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid backup_schedule (WEBOOK_BACKUP_SCHEDULE)"),
            "{err}"
        );
        let none = BackupSettings {
            backup_keep: 0,
            ..BackupSettings::default()
        };
        let err = none.validate(&Config::default()).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid backup_keep (WEBOOK_BACKUP_KEEP)"),
            "{err}"
        );
    }
}
