//! The feed's vocabulary: item kinds and how they are delivered, the events the feed consumes
//! (follows here; articles, likes and comments from their features), the opaque cursors of
//! every list, and the shapes the routes answer with.

use serde::{Deserialize, Serialize};

use platform::error::AppError;
pub use platform::page::{page_limit, Page};

use crate::user::Person;

/// Topic of follow transitions (recorded in the follow's transaction).
pub const TOPIC_FOLLOW_CHANGED: &str = "follow_changed";
/// A follow (`on`) or cancel that changed state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowEvent {
    /// Who follows.
    pub follower: i64,
    /// Whom.
    pub followee: i64,
    /// Followed (`true`) or cancelled.
    pub on: bool,
    /// When (ms).
    pub time: i64,
}

/// What a feed item reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FeedKind {
    /// Someone the reader follows published an article.
    Article,
    /// Someone liked the reader's article.
    Like,
    /// Someone followed the reader.
    Follow,
    /// Someone commented on the reader's article or replied to the reader.
    Comment,
}

impl FeedKind {
    /// The spelling in the database and in API answers.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Article => "article",
            Self::Like => "like",
            Self::Follow => "follow",
            Self::Comment => "comment",
        }
    }

    /// The kind spelled `value`, if any.
    pub fn parse(value: &str) -> Option<Self> {
        [Self::Article, Self::Like, Self::Follow, Self::Comment]
            .into_iter()
            .find(|kind| kind.as_str() == value)
    }
}

/// How an item reaches its readers (`feed_events.delivery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Being written to the followers' inboxes.
    FanningOut = 0,
    /// In every recipient's inbox.
    Pushed = 1,
    /// In the author's outbox only, merged into followers' feeds when they read.
    Pulled = 2,
}

/// A position in a list ordered by (time, id), newest first: the last item of a page. Lists
/// continue strictly after it, so a page is never repeated or skipped, whatever is inserted
/// meanwhile. Sent to clients as an opaque string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// The item's time (ms).
    pub time: i64,
    /// Its unique id, breaking ties.
    pub id: i64,
}

impl Cursor {
    /// The opaque spelling.
    pub fn encode(self) -> String {
        platform::page::encode_cursor(&[self.time, self.id])
    }

    /// Parses what [`Cursor::encode`] wrote; anything else is invalid input naming `cursor`.
    pub fn decode(value: &str) -> Result<Self, AppError> {
        let [time, id] = platform::page::decode_cursor(value)?;
        Ok(Self { time, id })
    }
}

/// A user as lists show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FollowUser {
    /// User id.
    pub id: i64,
    /// Nickname (may be empty).
    pub nickname: String,
    /// About me.
    pub about_me: String,
    /// Whether the caller follows this user.
    pub followed: bool,
}

/// Follower and followee counts (exact).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema, sqlx::FromRow,
)]
pub struct FollowCounts {
    /// How many follow the user.
    pub followers: i64,
    /// How many the user follows.
    pub followees: i64,
}

/// The article a feed item is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ItemArticle {
    /// Article id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Abstract (HTML-escaped text).
    #[serde(rename = "abstract")]
    pub abstract_text: String,
    /// Its author.
    pub author: Person,
    /// Likes.
    pub like_cnt: i64,
    /// Comments (not deleted).
    pub comment_cnt: i64,
    /// First publication (ms).
    pub ctime: i64,
}

/// The comment a feed item is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ItemComment {
    /// Comment id.
    pub id: i64,
    /// Its text.
    pub content: String,
}

/// One feed item (API.md → Follows and the feed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FeedItem {
    /// Unique per item.
    pub id: i64,
    /// `article`, `like`, `follow` or `comment`.
    #[serde(rename = "type")]
    #[schema(value_type = String, example = "article")]
    pub kind: &'static str,
    /// When it happened (ms).
    pub ctime: i64,
    /// Who did it.
    pub actor: Person,
    /// The article, for `article`, `like` and article comments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub article: Option<ItemArticle>,
    /// The comment, for `comment`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<ItemComment>,
}

impl FeedItem {
    /// Its place in the feed's order.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            time: self.ctime,
            id: self.id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let cursor = Cursor {
            time: 1_732_900_000_123,
            id: 42,
        };
        assert_eq!(Cursor::decode(&cursor.encode()).unwrap(), cursor);
        for bad in ["", "abc", "MTIz", "!!"] {
            assert!(
                matches!(Cursor::decode(bad), Err(AppError::InvalidInput(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn kinds_round_trip() {
        for kind in [
            FeedKind::Article,
            FeedKind::Like,
            FeedKind::Follow,
            FeedKind::Comment,
        ] {
            assert_eq!(FeedKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(FeedKind::parse("nope"), None);
    }
}
