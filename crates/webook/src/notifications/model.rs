//! The notifications' vocabulary: the kinds a user is told about ([`Kind`]), the changes the
//! consumers turn events into ([`Change`]), and the shapes the routes answer with
//! ([`NotificationView`], [`Unread`], [`Preferences`]).
//!
//! Data flow: [`super::service`] decodes each outbox event into a [`Change`]; [`super::store`]
//! applies the changes of a batch in one transaction; the routes ([`super::http`]) read views.

use serde::{Deserialize, Serialize};

use crate::{comment::CommentEvent, moderation::ModerationEvent, user::Person};
use platform::error::{AppError, Msg};

/// Characters of a comment kept as the notification's excerpt.
pub const EXCERPT_CHARS: usize = 80;
/// Actors a notification shows (the latest ones); `actorCnt` counts them all.
pub const SHOWN_ACTORS: i64 = 3;
/// Length of the period likes and collects of one article are grouped by (one UTC day, ms).
pub const GROUP_PERIOD_MS: i64 = 24 * 3600 * 1000;

/// What a notification reports; also what a user may turn off ([`Preferences`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Someone answered the user's comment (also under the user's own article).
    Reply,
    /// Someone commented on the user's article (not in answer to the user).
    Comment,
    /// People liked the user's article (grouped per article and day).
    Like,
    /// People collected the user's article (grouped per article and day).
    Collect,
    /// Someone followed the user.
    Follow,
    /// Someone rewarded the user's article (a payment that succeeded).
    Reward,
    /// A moderator's action on the user's content or account (one notification per target, at
    /// its latest action).
    Moderation,
}

impl Kind {
    /// Every kind, in the order preferences list them.
    pub const ALL: [Kind; 7] = [
        Kind::Reply,
        Kind::Comment,
        Kind::Like,
        Kind::Collect,
        Kind::Follow,
        Kind::Reward,
        Kind::Moderation,
    ];

    /// The stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Reply => "reply",
            Kind::Comment => "comment",
            Kind::Like => "like",
            Kind::Collect => "collect",
            Kind::Follow => "follow",
            Kind::Reward => "reward",
            Kind::Moderation => "moderation",
        }
    }

    /// The kind spelled `text`, if any.
    pub fn from_name(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// `text` as a kind, or code 4 naming `field`.
    pub fn parse(field: &str, text: &str) -> Result<Self, AppError> {
        Self::from_name(text).ok_or_else(|| {
            AppError::InvalidInput(Msg::field(
                field,
                format!(
                    "unknown kind {text:?} (one of {})",
                    Self::ALL.map(Kind::as_str).join(", ")
                ),
                format!("未知的通知类型 {text:?}"),
            ))
        })
    }
}

/// The source of a notification a [`Change`] moves: one actor's like, collect, follow, comment or
/// reward towards one recipient (`notification_sources.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A like of an article.
    Like,
    /// A collect of an article.
    Collect,
    /// A follow.
    Follow,
    /// A comment (a reply or a comment on an article).
    Comment,
    /// A reward's payment.
    Reward,
}

impl Source {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Like => "like",
            Source::Collect => "collect",
            Source::Follow => "follow",
            Source::Comment => "comment",
            Source::Reward => "reward",
        }
    }
}

/// One event, as what it changes in the inboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A like or collect of article `article` by `actor` turned on or off (the recipient is the
    /// article's author, found when applied).
    Interaction {
        /// Like or collect.
        source: Source,
        /// Who.
        actor: i64,
        /// The article.
        article: i64,
        /// On or off.
        on: bool,
        /// When (ms).
        time: i64,
    },
    /// `follower` followed (`on`) or stopped following `followee`.
    Follow {
        /// Who follows.
        follower: i64,
        /// The recipient.
        followee: i64,
        /// On or off.
        on: bool,
        /// When (ms).
        time: i64,
    },
    /// A comment written or deleted, for one recipient.
    Comment(CommentEvent),
    /// A reward paid (`on`) or refunded.
    Reward {
        /// The reward.
        rid: i64,
        /// Who paid.
        payer: i64,
        /// The article's author, who received it.
        author: i64,
        /// The article.
        article: i64,
        /// Fen.
        amt: i64,
        /// Paid or refunded.
        on: bool,
        /// When (ms).
        time: i64,
    },
    /// An article was withdrawn: what its likes, collects and comments produced goes.
    Withdrawn {
        /// The article.
        article: i64,
    },
    /// A moderator acted on the recipient's content or account.
    Moderation(ModerationEvent),
}

/// The first [`EXCERPT_CHARS`] characters of `content`.
pub fn excerpt(content: &str) -> String {
    content.chars().take(EXCERPT_CHARS).collect()
}

/// The group key of a like or collect of `article` at `time`: one row per article and period.
pub fn period_key(article: i64, time: i64) -> String {
    format!("{article}:{}", time.div_euclid(GROUP_PERIOD_MS))
}

/// The article a notification is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AboutArticle {
    /// Id.
    pub id: i64,
    /// Its title now (empty once it is no longer published).
    pub title: String,
}

/// The comment a notification is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AboutComment {
    /// Id.
    pub id: i64,
    /// Its first characters, HTML-escaped.
    pub excerpt: String,
}

/// What a moderator did, in a `moderation` notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AboutModeration {
    /// `hide`, `restore`, `approve` (held content published), `delete`, `suspend` or `lift`.
    pub action: String,
    /// `article`, `comment` or `user` (the recipient's account).
    pub target: String,
    /// The moderator's reason.
    pub reason: String,
    /// A suspension's end (ms); absent for good, or for other actions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
}

/// A notification as the API shows it (API.md → Notifications).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationView {
    /// Id (what `POST /notifications/read` takes).
    pub id: i64,
    /// `reply`, `comment`, `like`, `collect`, `follow`, `reward` or `moderation`.
    pub kind: String,
    /// The latest actors (at most 3), newest first.
    pub actors: Vec<Person>,
    /// How many distinct actors it counts (likes and collects of one article in one day).
    pub actor_cnt: i64,
    /// The article it is about, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub article: Option<AboutArticle>,
    /// The comment it is about (replies and comments).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<AboutComment>,
    /// A reward's amount, fen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amt: Option<i64>,
    /// What a moderator did (`moderation` notifications).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moderation: Option<AboutModeration>,
    /// Whether the user has read it (a new actor makes it unread again).
    pub read: bool,
    /// When it last changed (ms): the list's order.
    pub time: i64,
}

/// `GET /notifications/unread`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Unread {
    /// Unread notifications.
    pub count: i64,
}

/// The kinds a user turned off (`GET/PUT /notifications/preferences`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Preferences {
    /// Kinds not produced for the user: any of `reply`, `comment`, `like`, `collect`, `follow`,
    /// `reward`, `moderation`.
    pub muted: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_unknown_ones_are_code_4() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse("muted", kind.as_str()).unwrap(), kind);
        }
        let err = Kind::parse("muted", "likes").unwrap_err();
        assert_eq!(err.code(), 4);
        assert!(err.to_string().contains("muted"), "{err}");
    }

    #[test]
    fn likes_group_by_article_and_day() {
        let day = GROUP_PERIOD_MS;
        assert_eq!(period_key(7, 5 * day), period_key(7, 6 * day - 1));
        assert_ne!(period_key(7, 5 * day), period_key(7, 6 * day));
        assert_ne!(period_key(7, 5 * day), period_key(8, 5 * day));
    }

    #[test]
    fn excerpts_keep_the_first_characters() {
        let long = "好".repeat(200);
        assert_eq!(excerpt(&long).chars().count(), EXCERPT_CHARS);
        assert_eq!(excerpt("hi"), "hi");
    }
}
