//! SQL for the used WeChat login states (`wechat_used_states`), one implementation for SQLite
//! and PostgreSQL: [`UsedStates::consume`] is one insert-or-nothing on the state's primary key,
//! so of any number of callbacks with one state — on any instance, at the same time or later —
//! exactly one inserts the row; the rest find it taken. Expired rows go in the same call.

use platform::db::Db;

/// The used states; cheap to clone.
#[derive(Debug, Clone)]
pub struct UsedStates {
    db: Db,
}

impl UsedStates {
    /// The used states in `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Marks `state` used until `expires_at` (ms); `true` when this call was its first use.
    /// Deletes the rows that expired by `now` first (a state is refused by its signed cookie's
    /// expiry after that, so its row is no longer needed).
    pub async fn consume(&self, state: &str, expires_at: i64, now: i64) -> sqlx::Result<bool> {
        sqlx::query("DELETE FROM wechat_used_states WHERE expires_at < $1")
            .bind(now)
            .execute(self.db.writer())
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO wechat_used_states (state, expires_at) VALUES ($1, $2) \
             ON CONFLICT (state) DO NOTHING",
        )
        .bind(state)
        .bind(expires_at)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }
}
