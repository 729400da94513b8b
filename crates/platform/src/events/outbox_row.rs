//! One row of `event_outbox` read back as the event it records: what the relay
//! ([`super::outbox`]) publishes and the in-process stream ([`super::in_process`]) delivers
//! straight from the table — and how many rows a consumer group has not handled yet
//! ([`backlog`], which delivery checks against its policy). A leaf, so the modules that read
//! the table need not reach each other for it.

use axum::body::Bytes;

use super::Event;
use crate::db::Db;

/// The event id of outbox row `id`.
pub fn event_id(id: i64) -> String {
    format!("outbox-{id}")
}

/// One row of `event_outbox` (selected as `id, topic, event_key, payload, created_at,
/// traceparent`).
#[derive(sqlx::FromRow)]
pub(super) struct OutboxRow {
    pub(super) id: i64,
    pub(super) topic: String,
    #[sqlx(rename = "event_key")]
    key: String,
    payload: String,
    created_at: i64,
    traceparent: Option<String>,
}

impl OutboxRow {
    pub(super) fn into_event(self) -> Event {
        Event {
            id: event_id(self.id),
            topic: self.topic,
            key: self.key,
            payload: Bytes::from(self.payload.into_bytes()),
            time: self.created_at,
            traceparent: self.traceparent,
        }
    }
}

/// Rows of `topic` after `position`, counted up to `max + 1` (enough to tell "over `max`").
pub(super) async fn backlog(db: &Db, topic: &str, position: i64, max: u64) -> sqlx::Result<u64> {
    let limit = i64::try_from(max).unwrap_or(i64::MAX).saturating_add(1);
    let count: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT 1 FROM event_outbox WHERE topic = $1 AND id > $2 LIMIT $3) behind",
    )
    .bind(topic)
    .bind(position)
    .bind(limit)
    .fetch_one(db.pool())
    .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}
