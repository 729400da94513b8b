//! The feed's vocabulary: item kinds and how they are delivered, the events the feed consumes
//! (follows here; articles, likes and comments from their features), the opaque cursors of
//! every list, and the shapes the routes answer with.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use serde::{Deserialize, Serialize};

use platform::error::{AppError, Msg};

/// Topic of follow transitions (recorded in the follow's transaction).
pub const TOPIC_FOLLOW_CHANGED: &str = "follow_changed";
/// Topic of comment transitions: the comments feature records one per recipient (the article's
/// author, the user replied to) in the comment's transaction; the feed turns it into a
/// `comment` item. Nothing records it yet: this is the comments feature's extension point.
pub const TOPIC_COMMENT_CHANGED: &str = "comment_changed";

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

/// A comment written (`on`) or deleted, for one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommentEvent {
    /// Comment id.
    pub id: i64,
    /// Who wrote it.
    pub uid: i64,
    /// Whom it is for: the article's author, or the user replied to.
    pub recipient: i64,
    /// The article it is under (0 when it is not under an article).
    pub article_id: i64,
    /// Its text (plain).
    pub content: String,
    /// Written (`true`) or deleted.
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
        URL_SAFE_NO_PAD.encode(format!("{}.{}", self.time, self.id))
    }

    /// Parses what [`Cursor::encode`] wrote; anything else is invalid input naming `cursor`.
    pub fn decode(value: &str) -> Result<Self, AppError> {
        let invalid = || {
            AppError::InvalidInput(Msg::field(
                "cursor",
                "is not a cursor this list gave",
                "不是本列表给出的游标",
            ))
        };
        let bytes = URL_SAFE_NO_PAD.decode(value).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (time, id) = text.split_once('.').ok_or_else(invalid)?;
        Ok(Self {
            time: time.parse().map_err(|_| invalid())?,
            id: id.parse().map_err(|_| invalid())?,
        })
    }
}

/// Default page size of the feed and the follow lists.
pub const DEFAULT_LIMIT: usize = 20;
/// Largest page size (API.md: `limit` ≤ 100).
pub const MAX_LIMIT: usize = 100;

/// `limit` checked against 1..=[`MAX_LIMIT`], [`DEFAULT_LIMIT`] when absent.
pub fn page_limit(limit: Option<i64>) -> Result<usize, AppError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(limit) if (1..=MAX_LIMIT as i64).contains(&limit) => Ok(limit as usize),
        Some(_) => Err(AppError::InvalidInput(Msg::field(
            "limit",
            format!("must be 1-{MAX_LIMIT}"),
            format!("须在 1 到 {MAX_LIMIT} 之间"),
        ))),
    }
}

/// A user as lists show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

/// A page of a list, and where the next one starts (absent at the end).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// The cursor of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Follower and followee counts (exact).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FollowCounts {
    /// How many follow the user.
    pub followers: i64,
    /// How many the user follows.
    pub followees: i64,
}

/// Someone, as feed items name them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Person {
    /// User id.
    pub id: i64,
    /// Display name (the nickname, or `user<id>`).
    pub name: String,
}

/// The article a feed item is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemComment {
    /// Comment id.
    pub id: i64,
    /// Its text.
    pub content: String,
}

/// One feed item (API.md → Follows and the feed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FeedItem {
    /// Unique per item.
    pub id: i64,
    /// `article`, `like`, `follow` or `comment`.
    #[serde(rename = "type")]
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
        for bad in ["", "abc", "MTIz", "!!", &URL_SAFE_NO_PAD.encode("1.x")] {
            assert!(
                matches!(Cursor::decode(bad), Err(AppError::InvalidInput(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn limits_default_and_stay_within_bounds() {
        assert_eq!(page_limit(None).unwrap(), DEFAULT_LIMIT);
        assert_eq!(page_limit(Some(100)).unwrap(), 100);
        assert!(page_limit(Some(0)).is_err());
        assert!(page_limit(Some(101)).is_err());
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
