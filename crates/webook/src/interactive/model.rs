//! Interaction counters and the caller's own flags.

use serde::{Deserialize, Serialize};

/// The counters of one object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Reads.
    pub read_cnt: i64,
    /// Likes.
    pub like_cnt: i64,
    /// Collects.
    pub collect_cnt: i64,
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
