//! Administrators: who may use the admin areas — durable jobs (`/jobs…`), the database move,
//! the instances, payment discrepancies, event consumer groups.
//!
//! A user is an admin when config `admins` lists their id or an operator granted them the right
//! in the database (`webook admin grant EMAIL_OR_ID`, stored in `admins`). Rights follow the user
//! id, never an email address: an admin email that nobody had registered yet could be claimed by
//! whoever signed up with it first.
//!
//! [`Admins`] answers whether a user has the right; handlers ask through `platform::caller::Admin`
//! (auth's [`super::SessionCallers`] resolves it), never through this module.

use anyhow::Context;
use serde::Serialize;

use std::sync::Arc;

use platform::{
    config::Config,
    db::{now_millis, Db, Migration},
    error::AppError,
};

/// Who has admin rights: the ids of config `admins`, and the grants in the database; cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct Admins {
    configured: Arc<[i64]>,
    store: AdminStore,
}

impl Admins {
    /// The ids `configured` (config `admins`) and the grants in `db`.
    pub fn new(configured: &[i64], db: Db) -> Self {
        Self {
            configured: configured.into(),
            store: AdminStore::new(db),
        }
    }

    /// Whether user `uid` has admin rights.
    pub async fn contains(&self, uid: i64) -> Result<bool, AppError> {
        Ok(self.configured.contains(&uid) || self.store.is_admin(uid).await?)
    }
}

/// The auth feature's subcommand of `webook`.
#[derive(Debug, clap::Subcommand)]
pub enum AdminCli {
    /// Grant, revoke and list admin rights (who may use the admin API), in the database.
    Admin {
        /// What to do.
        #[command(subcommand)]
        command: AdminCommand,
    },
}

/// `webook admin …`: admin rights by user, named by id or by registered email. Rights follow the
/// user id; config `admins` lists further ids.
#[derive(Debug, clap::Subcommand)]
pub enum AdminCommand {
    /// Give a user admin rights.
    Grant {
        /// User id or registered email.
        user: String,
    },
    /// Take back rights granted with `grant` (ids in config `admins` stay admins).
    Revoke {
        /// User id or registered email.
        user: String,
    },
    /// List the users granted admin rights in the database.
    List,
}

/// Runs `webook admin …` on the configured database; prints the outcome on stdout.
pub async fn run_cli(
    config: &Config,
    schema: &[Migration],
    command: AdminCommand,
) -> anyhow::Result<()> {
    let db = Db::connect(config).await?;
    let result = async {
        db.migrate(schema).await.context("applying migrations")?;
        let store = AdminStore::new(db.clone());
        anyhow::Ok(match command {
            AdminCommand::Grant { user } => {
                let uid = store.grant(&user).await?;
                format!("user {uid} ({user}) is an admin\n")
            }
            AdminCommand::Revoke { user } => match store.revoke(&user).await? {
                (uid, true) => format!("user {uid} ({user}) is no longer an admin\n"),
                (uid, false) => format!("user {uid} ({user}) had no admin rights granted\n"),
            },
            AdminCommand::List => {
                let mut out = format!("{:>8}  {:<32}  GRANTED\n", "ID", "EMAIL");
                for grant in store.list().await? {
                    let granted = grant
                        .granted_at
                        .and_then(chrono::DateTime::<chrono::Utc>::from_timestamp_millis)
                        .map(|at| at.to_rfc3339())
                        .unwrap_or_default();
                    out.push_str(&format!(
                        "{:>8}  {:<32}  {granted}\n",
                        grant.uid,
                        grant.email.as_deref().unwrap_or("-")
                    ));
                }
                for uid in &config.settings::<super::settings::AuthSettings>()?.admins {
                    out.push_str(&format!("{uid:>8}  {:<32}  (config admins)\n", "-"));
                }
                out
            }
        })
    }
    .await;
    db.close().await;
    print!("{}", result?);
    Ok(())
}

/// One row of `webook admin list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    /// User id.
    pub uid: i64,
    /// The user's email, when the account has one.
    pub email: Option<String>,
    /// When the right was granted (ms); `None` for ids listed in config `admins`.
    pub granted_at: Option<i64>,
}

/// Why a grant or revoke did nothing.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// No user has this id or email.
    #[error("no user {0}")]
    NoSuchUser(String),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Reads and writes `admins`.
#[derive(Debug, Clone)]
pub struct AdminStore {
    db: Db,
}

impl AdminStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Whether `uid` was granted admin rights in the database.
    pub async fn is_admin(&self, uid: i64) -> sqlx::Result<bool> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT user_id FROM admins WHERE user_id = $1")
                .bind(uid)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(found.is_some())
    }

    /// The user named by `who`: an id, or an email (normalised as sign-up stores it).
    pub async fn resolve(&self, who: &str) -> Result<i64, GrantError> {
        let who = who.trim();
        let found: Option<i64> = match who.parse::<i64>() {
            Ok(id) => {
                sqlx::query_scalar("SELECT id FROM users WHERE id = $1")
                    .bind(id)
                    .fetch_optional(self.db.pool())
                    .await?
            }
            Err(_) => {
                sqlx::query_scalar("SELECT id FROM users WHERE email = $1")
                    .bind(who.to_lowercase())
                    .fetch_optional(self.db.pool())
                    .await?
            }
        };
        found.ok_or_else(|| GrantError::NoSuchUser(who.to_owned()))
    }

    /// Grants admin rights to the user named by `who` (id or email); returns the id. Granting
    /// twice changes nothing.
    pub async fn grant(&self, who: &str) -> Result<i64, GrantError> {
        let uid = self.resolve(who).await?;
        sqlx::query(
            "INSERT INTO admins (user_id, granted_at) VALUES ($1, $2) \
             ON CONFLICT (user_id) DO NOTHING",
        )
        .bind(uid)
        .bind(now_millis())
        .execute(self.db.writer())
        .await?;
        Ok(uid)
    }

    /// Takes back rights granted in the database; returns the id and whether it had them.
    pub async fn revoke(&self, who: &str) -> Result<(i64, bool), GrantError> {
        let uid = self.resolve(who).await?;
        let deleted = sqlx::query("DELETE FROM admins WHERE user_id = $1")
            .bind(uid)
            .execute(self.db.writer())
            .await?
            .rows_affected();
        Ok((uid, deleted > 0))
    }

    /// Everyone with rights granted in the database, by user id.
    pub async fn list(&self) -> sqlx::Result<Vec<Grant>> {
        let rows: Vec<(i64, Option<String>, i64)> = sqlx::query_as(
            "SELECT a.user_id, u.email, a.granted_at FROM admins a \
             JOIN users u ON u.id = a.user_id ORDER BY a.user_id",
        )
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(uid, email, granted_at)| Grant {
                uid,
                email,
                granted_at: Some(granted_at),
            })
            .collect())
    }
}
