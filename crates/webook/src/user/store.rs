//! SQL for accounts (`users`). One implementation for SQLite and PostgreSQL.

use crate::user::model::{ProfileEdit, ProfileEvent, User, TOPIC_PROFILE_CHANGED};
use platform::{db::Db, events::outbox};

/// Why an insert failed.
#[derive(Debug, thiserror::Error)]
pub enum InsertError {
    /// The email (or phone) is already registered: the unique constraint said so.
    #[error("already registered")]
    Duplicate,
    /// Anything else.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// A WeChat account as WeChat's OAuth answer names it: the open id (per application) and, when
/// the application belongs to an open-platform account, the union id (per person).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WechatIdentity {
    /// `openid`: never empty.
    pub open_id: String,
    /// `unionid`, when WeChat gave one (never `Some("")`).
    pub union_id: Option<String>,
}

/// Reads and writes `users`.
#[derive(Debug, Clone)]
pub struct UserStore {
    db: Db,
}

const USER_COLUMNS: &str = "id, email, phone, nickname, birthday, about_me, ctime, utime";

impl UserStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Inserts an account; the unique constraint decides duplicates, race-free.
    pub async fn insert(
        &self,
        email: &str,
        password_hash: &str,
        now: i64,
    ) -> Result<i64, InsertError> {
        let inserted = sqlx::query_scalar(
            "INSERT INTO users (email, password, ctime, utime) VALUES ($1, $2, $3, $3) RETURNING id",
        )
        .bind(email)
        .bind(password_hash)
        .bind(now)
        // To completion: an autocommit's failed commit is reported only then (platform::db).
        .fetch_all(self.db.writer())
        .await;
        match inserted.map(|ids: Vec<i64>| ids.first().copied()) {
            Ok(Some(id)) => Ok(id),
            Ok(None) => Err(sqlx::Error::RowNotFound.into()),
            Err(sqlx::Error::Database(err)) if err.is_unique_violation() => {
                Err(InsertError::Duplicate)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// The account with `email` (normalised) and its password hash (`None`: an account made by
    /// SMS or WeChat that never set a password).
    pub async fn find_credentials(
        &self,
        email: &str,
    ) -> sqlx::Result<Option<(i64, Option<String>)>> {
        sqlx::query_as("SELECT id, password FROM users WHERE email = $1")
            .bind(email)
            .fetch_optional(self.db.pool())
            .await
    }

    /// The account of `phone` (normalised), created — without a password — when there is none;
    /// `(id, created)`. The unique constraint decides between concurrent first logins, so one
    /// phone always ends with one account.
    pub async fn find_or_create_by_phone(
        &self,
        phone: &str,
        now: i64,
    ) -> sqlx::Result<(i64, bool)> {
        if let Some(id) = Self::id_where(self.db.pool(), "phone", phone).await? {
            return Ok((id, false));
        }
        let inserted: Vec<i64> = sqlx::query_scalar(
            "INSERT INTO users (phone, ctime, utime) VALUES ($1, $2, $2) \
             ON CONFLICT DO NOTHING RETURNING id",
        )
        .bind(phone)
        .bind(now)
        // To completion: an autocommit's failed commit is reported only then (platform::db).
        .fetch_all(self.db.writer())
        .await?;
        match inserted.first().copied() {
            Some(id) => Ok((id, true)),
            None => {
                let id = Self::id_where(self.db.writer(), "phone", phone).await?;
                id.map(|id| (id, false)).ok_or(sqlx::Error::RowNotFound)
            }
        }
    }

    /// The account of a WeChat identity — found by `union_id` when WeChat gave one, else by
    /// `open_id` — created without a password when there is none, in one transaction; an
    /// account found by its open id learns its union id. `(id, created)`; concurrent first
    /// logins of one identity end with one account (the unique constraints decide).
    pub async fn find_or_create_by_wechat(
        &self,
        identity: &WechatIdentity,
        now: i64,
    ) -> sqlx::Result<(i64, bool)> {
        let mut tx = self.db.writer().begin().await?;
        let by_union = match identity.union_id.as_deref() {
            Some(union_id) => {
                sqlx::query_scalar("SELECT id FROM users WHERE wechat_union_id = $1")
                    .bind(union_id)
                    .fetch_optional(&mut *tx)
                    .await?
            }
            None => None,
        };
        let found: Option<i64> = match by_union {
            Some(id) => Some(id),
            None => {
                sqlx::query_scalar("SELECT id FROM users WHERE wechat_open_id = $1")
                    .bind(&identity.open_id)
                    .fetch_optional(&mut *tx)
                    .await?
            }
        };
        let (id, created) = match found {
            Some(id) => {
                if let Some(union_id) = identity.union_id.as_deref() {
                    sqlx::query(
                        "UPDATE users SET wechat_union_id = $1, utime = $2 \
                         WHERE id = $3 AND wechat_union_id IS NULL",
                    )
                    .bind(union_id)
                    .bind(now)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                }
                (id, false)
            }
            None => {
                let inserted: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO users (wechat_open_id, wechat_union_id, ctime, utime) \
                     VALUES ($1, $2, $3, $3) ON CONFLICT DO NOTHING RETURNING id",
                )
                .bind(&identity.open_id)
                .bind(identity.union_id.as_deref())
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
                match inserted {
                    Some(id) => (id, true),
                    // Another login of this identity committed first.
                    None => {
                        let id: i64 = sqlx::query_scalar(
                            "SELECT id FROM users WHERE wechat_union_id = $1 OR wechat_open_id = $2 \
                             ORDER BY id LIMIT 1",
                        )
                        .bind(identity.union_id.as_deref())
                        .bind(&identity.open_id)
                        .fetch_one(&mut *tx)
                        .await?;
                        (id, false)
                    }
                }
            }
        };
        tx.commit().await?;
        Ok((id, created))
    }

    /// The id of the account whose `column` is `value`, read through `pool` (the writer when
    /// a commit the writer just made must be seen: on SQLite the read pool may lag).
    async fn id_where(
        pool: &platform::db::DbPool,
        column: &'static str,
        value: &str,
    ) -> sqlx::Result<Option<i64>> {
        sqlx::query_scalar(&format!("SELECT id FROM users WHERE {column} = $1"))
            .bind(value)
            .fetch_optional(pool)
            .await
    }

    /// The account `id`.
    pub async fn find_by_id(&self, id: i64) -> sqlx::Result<Option<User>> {
        sqlx::query_as(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.db.pool())
            .await
    }

    /// Applies `edit` (absent fields unchanged) and, when `announce`, records a
    /// [`TOPIC_PROFILE_CHANGED`] event, in one transaction; false when no such user.
    pub async fn update_profile(
        &self,
        id: i64,
        edit: &ProfileEdit,
        now: i64,
        announce: bool,
    ) -> sqlx::Result<bool> {
        let mut tx = self.db.writer().begin().await?;
        let result = sqlx::query(
            "UPDATE users SET nickname = COALESCE($1, nickname), birthday = COALESCE($2, birthday), \
             about_me = COALESCE($3, about_me), utime = $4 WHERE id = $5",
        )
        .bind(edit.nickname.as_deref())
        .bind(edit.birthday.as_deref())
        .bind(edit.about_me.as_deref())
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let changed = result.rows_affected() == 1;
        if changed && announce {
            let event = ProfileEvent { uid: id, time: now };
            outbox::record(&mut tx, TOPIC_PROFILE_CHANGED, &id.to_string(), &event, now).await?;
        }
        tx.commit().await?;
        Ok(changed)
    }
}
