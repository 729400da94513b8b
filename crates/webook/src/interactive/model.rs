//! Interaction counters and the caller's own flags.

use serde::{Deserialize, Serialize};

/// Topic of the event recorded when a user's like of an object turns on or off.
pub const TOPIC_LIKE_CHANGED: &str = "like_changed";
/// Topic of the event recorded when a user's collect of an object turns on or off.
pub const TOPIC_COLLECT_CHANGED: &str = "collect_changed";

/// Payload of [`TOPIC_LIKE_CHANGED`] and [`TOPIC_COLLECT_CHANGED`] events: a real transition
/// (a repeated like or an unlike of what was never liked records nothing), recorded through the
/// outbox in the transaction that changed the counter. The event key is `biz:biz_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InteractionEvent {
    /// Who liked or collected.
    pub uid: i64,
    /// Kind of object.
    pub biz: crate::biz::Biz,
    /// Its id.
    pub biz_id: i64,
    /// Turned on (`true`) or off.
    pub on: bool,
    /// When (Unix ms).
    pub time: i64,
}

/// The counters of one object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Counts {
    /// Reads.
    pub read_cnt: i64,
    /// Likes.
    pub like_cnt: i64,
    /// Collects.
    pub collect_cnt: i64,
    /// Comments that are not deleted (moved by the comments feature).
    #[serde(default)]
    pub comment_cnt: i64,
}

/// What the caller did to one object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserFlags {
    /// The caller likes it.
    pub liked: bool,
    /// The caller has it in a collection.
    pub collected: bool,
}

/// Payload of a read event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadEvent {
    /// Kind of object.
    pub biz: crate::biz::Biz,
    /// Its id.
    pub biz_id: i64,
    /// The reader.
    pub uid: i64,
}
