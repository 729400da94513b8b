//! SQL of the word lists (`screening_word_lists`, `screening_version`), one implementation for
//! SQLite and PostgreSQL. Every edit bumps the version in its transaction.

use platform::db::Db;

use crate::screening::matcher::{Action, WordList};

/// A stored list with who edited it last and when.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoredList {
    /// The list's name.
    pub name: String,
    /// `refuse` or `hold`.
    pub action: String,
    /// Its words, as written.
    pub words: Vec<String>,
    /// The admin who edited it last.
    pub admin: i64,
    /// When (ms).
    pub utime: i64,
}

/// Reads and writes the word lists.
#[derive(Debug, Clone)]
pub struct ScreeningStore {
    db: Db,
}

impl ScreeningStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The lists' version: it changes with every edit.
    pub async fn version(&self) -> sqlx::Result<i64> {
        sqlx::query_scalar("SELECT version FROM screening_version WHERE id = 1")
            .fetch_one(self.db.pool())
            .await
    }

    /// Every list, by name.
    pub async fn lists(&self) -> sqlx::Result<Vec<StoredList>> {
        let rows: Vec<(String, String, String, i64, i64)> = sqlx::query_as(
            "SELECT name, action, words, admin, utime FROM screening_word_lists ORDER BY name",
        )
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(name, action, words, admin, utime)| StoredList {
                name,
                action,
                words: words.lines().map(str::to_owned).collect(),
                admin,
                utime,
            })
            .collect())
    }

    /// The lists as the matcher takes them (a list with an unknown action is skipped).
    pub async fn word_lists(&self) -> sqlx::Result<Vec<WordList>> {
        Ok(self
            .lists()
            .await?
            .into_iter()
            .filter_map(|list| {
                Some(WordList {
                    action: Action::parse(&list.action)?,
                    name: list.name,
                    words: list.words,
                })
            })
            .collect())
    }

    /// Creates or replaces list `name`, bumping the version.
    pub async fn put(
        &self,
        name: &str,
        action: Action,
        words: &[String],
        admin: i64,
        now: i64,
    ) -> sqlx::Result<()> {
        let mut tx = self.db.writer().begin().await?;
        sqlx::query(
            "INSERT INTO screening_word_lists (name, action, words, admin, utime) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET \
             action = excluded.action, words = excluded.words, admin = excluded.admin, \
             utime = excluded.utime",
        )
        .bind(name)
        .bind(action.as_str())
        .bind(words.join("\n"))
        .bind(admin)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE screening_version SET version = version + 1 WHERE id = 1")
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    /// Deletes list `name`, bumping the version; whether it existed.
    pub async fn delete(&self, name: &str) -> sqlx::Result<bool> {
        let mut tx = self.db.writer().begin().await?;
        let deleted = sqlx::query("DELETE FROM screening_word_lists WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if deleted {
            sqlx::query("UPDATE screening_version SET version = version + 1 WHERE id = 1")
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(deleted)
    }
}
