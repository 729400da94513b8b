//! One row of `event_outbox` read back as the event it records: what the relay
//! ([`super::outbox`]) publishes and the in-process stream ([`super::in_process`]) delivers
//! straight from the table. A leaf, so the two need not reach each other for it.

use axum::body::Bytes;

use super::Event;

/// The event id of outbox row `id`.
pub fn event_id(id: i64) -> String {
    format!("outbox-{id}")
}

/// One row of `event_outbox` (selected as `id, topic, event_key, payload, created_at`).
#[derive(sqlx::FromRow)]
pub(super) struct OutboxRow {
    pub(super) id: i64,
    pub(super) topic: String,
    #[sqlx(rename = "event_key")]
    key: String,
    payload: String,
    created_at: i64,
}

impl OutboxRow {
    pub(super) fn into_event(self) -> Event {
        Event {
            id: event_id(self.id),
            topic: self.topic,
            key: self.key,
            payload: Bytes::from(self.payload.into_bytes()),
            time: self.created_at,
        }
    }
}
