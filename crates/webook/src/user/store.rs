//! SQL for accounts (`users`). One implementation for SQLite and PostgreSQL.

use sqlx::{any::AnyRow, Row};

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
        .fetch_one(self.db.writer())
        .await;
        match inserted {
            Ok(id) => Ok(id),
            Err(sqlx::Error::Database(err)) if err.is_unique_violation() => {
                Err(InsertError::Duplicate)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// The account with `email` (normalised) and its password hash.
    pub async fn find_credentials(&self, email: &str) -> sqlx::Result<Option<(i64, String)>> {
        let row = sqlx::query("SELECT id, password FROM users WHERE email = $1")
            .bind(email)
            .fetch_optional(self.db.pool())
            .await?;
        row.map(|row| Ok((row.try_get("id")?, row.try_get("password")?)))
            .transpose()
    }

    /// The account `id`.
    pub async fn find_by_id(&self, id: i64) -> sqlx::Result<Option<User>> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.db.pool())
            .await?;
        row.as_ref().map(user_from_row).transpose()
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

fn user_from_row(row: &AnyRow) -> sqlx::Result<User> {
    Ok(User {
        id: row.try_get("id")?,
        email: row.try_get("email")?,
        phone: row.try_get("phone")?,
        nickname: row.try_get("nickname")?,
        birthday: row.try_get("birthday")?,
        about_me: row.try_get("about_me")?,
        ctime: row.try_get("ctime")?,
        utime: row.try_get("utime")?,
    })
}
