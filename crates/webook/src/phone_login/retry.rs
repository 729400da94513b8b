//! The durable retry queue of login codes no provider took (the job that works it is
//! [`super::jobs`]).
//!
//! A row (`sms_code_retries`) names a send — phone, purpose, the code's generation — and holds
//! no code. Each run of the durable `sms_code_retries` job (the SQL scheduler: one run at a
//! time in the whole deployment) walks the due rows in keyset batches; for each it draws a new
//! code, puts its digest in place of the queued generation's ([`super::store::CodeStore::reissue`]),
//! and sends it. Sent → the row goes. Still undeliverable → tried again after a growing pause
//! (2 s doubling to 60 s). A code that expired, or that a newer send, a login or wrong tries
//! replaced or killed, is dropped: nobody is waiting for it any more.

use std::time::Duration;

use platform::db::{duration_millis, Db};

/// Rows read per query.
const BATCH: i64 = 100;
/// First pause before a retry; doubled per attempt up to [`MAX_PAUSE`].
pub const FIRST_PAUSE: Duration = Duration::from_secs(2);
/// Longest pause between retries.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// A queued send.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct QueuedSend {
    /// Row id.
    pub id: i64,
    /// Normalised phone.
    pub phone: String,
    /// What the code is for.
    pub purpose: String,
    /// The generation of the code this send was for.
    pub generation: String,
    /// When that code expires (ms).
    pub expires_at: i64,
    /// Retries so far.
    pub attempts: i64,
}

const QUEUED_COLUMNS: &str = "id, phone, purpose, generation, expires_at, attempts";

/// `sms_code_retries`.
#[derive(Debug, Clone)]
pub struct RetryQueue {
    db: Db,
}

/// The pause before retry number `attempts + 1`.
pub fn pause_after(attempts: i64) -> Duration {
    let doublings = u32::try_from(attempts.clamp(0, 16)).unwrap_or(16);
    FIRST_PAUSE
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(MAX_PAUSE)
}

impl RetryQueue {
    /// The queue in `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Queues a send of `generation`'s code, first retried after [`FIRST_PAUSE`].
    pub async fn enqueue(
        &self,
        phone: &str,
        purpose: &str,
        generation: &str,
        expires_at: i64,
        error: &str,
        now: i64,
    ) -> sqlx::Result<i64> {
        let ids: Vec<i64> = sqlx::query_scalar(
            "INSERT INTO sms_code_retries \
             (phone, purpose, generation, expires_at, next_attempt_at, attempts, last_error, ctime) \
             VALUES ($1, $2, $3, $4, $5, 0, $6, $7) RETURNING id",
        )
        .bind(phone)
        .bind(purpose)
        .bind(generation)
        .bind(expires_at)
        .bind(now + duration_millis(FIRST_PAUSE))
        .bind(error)
        .bind(now)
        // To completion: an autocommit's failed commit is reported only then (platform::db).
        .fetch_all(self.db.writer())
        .await?;
        ids.first().copied().ok_or(sqlx::Error::RowNotFound)
    }

    /// Up to [`BATCH`] sends due at `now` with ids above `after`, by id.
    pub async fn due(&self, now: i64, after: i64) -> sqlx::Result<Vec<QueuedSend>> {
        sqlx::query_as(&format!(
            "SELECT {QUEUED_COLUMNS} FROM sms_code_retries \
             WHERE next_attempt_at <= $1 AND id > $2 ORDER BY id LIMIT $3"
        ))
        .bind(now)
        .bind(after)
        .bind(BATCH)
        .fetch_all(self.db.pool())
        .await
    }

    /// Removes a send (delivered or dropped).
    pub async fn remove(&self, id: i64) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM sms_code_retries WHERE id = $1")
            .bind(id)
            .execute(self.db.writer())
            .await?;
        Ok(())
    }

    /// Records a failed retry: tried again after [`pause_after`].
    pub async fn postpone(&self, send: &QueuedSend, error: &str, now: i64) -> sqlx::Result<()> {
        sqlx::query(
            "UPDATE sms_code_retries SET attempts = attempts + 1, last_error = $1, \
             next_attempt_at = $2 WHERE id = $3",
        )
        .bind(error)
        .bind(now + duration_millis(pause_after(send.attempts + 1)))
        .bind(send.id)
        .execute(self.db.writer())
        .await?;
        Ok(())
    }

    /// Every queued send (tests, operators).
    pub async fn all(&self) -> sqlx::Result<Vec<QueuedSend>> {
        sqlx::query_as(&format!(
            "SELECT {QUEUED_COLUMNS} FROM sms_code_retries ORDER BY id"
        ))
        .fetch_all(self.db.pool())
        .await
    }
}

/// What one pass over the queue did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryReport {
    /// Sent this time.
    pub sent: u64,
    /// Still undeliverable, tried again later.
    pub postponed: u64,
    /// Expired before they could be sent.
    pub expired: u64,
    /// Replaced, used or killed meanwhile.
    pub superseded: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_two_seconds_up_to_a_minute() {
        let pauses: Vec<u64> = (0..8).map(|n| pause_after(n).as_secs()).collect();
        assert_eq!(pauses, [2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(pause_after(i64::MAX), MAX_PAUSE);
    }
}
