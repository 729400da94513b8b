//! What moderation talks about: the kinds of target a report names, the reasons, the actions
//! and the views the review queue and the audit log answer with.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Topic of [`ModerationEvent`]: an admin's action on a user's content or account, recorded
/// with its audit entry (one transaction).
pub const TOPIC_MODERATION_ACTED: &str = "moderation_acted";

/// What a moderation action did to someone's content or account, for the person it concerns
/// (the notifications feature tells them). Recorded for every action but dismissals, whether
/// it changed anything or not: a repeat after a crash between the change and its audit entry
/// still tells them, and the consumer keeps one notification per target at its latest action,
/// so a repeat tells them nothing twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModerationEvent {
    /// The audit entry.
    pub log: i64,
    /// Whom it concerns: the content's author, or the account.
    pub recipient: i64,
    /// `hide`, `restore`, `approve` (a restore of content held for review), `delete`,
    /// `suspend` or `lift`.
    pub action: String,
    /// `article`, `comment` or `user`.
    pub target: String,
    /// The target's id.
    pub id: i64,
    /// The article concerned (the article, or the one a comment is on; 0: none).
    pub article: i64,
    /// The comment concerned (0: none).
    pub comment: i64,
    /// A comment's text as it was (empty otherwise).
    pub excerpt: String,
    /// The moderator's reason.
    pub reason: String,
    /// A suspension's end (ms; `None`: for good, or not a suspension).
    pub until: Option<i64>,
    /// When (ms).
    pub time: i64,
}

/// Whom an action concerns and what to tell them: a [`ModerationEvent`] without its audit
/// entry, its reason and its time (the store adds those).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// Whom it concerns.
    pub recipient: i64,
    /// The action as they are told it (`approve` for a restore of held content).
    pub action: &'static str,
    /// The article concerned (0: none).
    pub article: i64,
    /// The comment concerned (0: none).
    pub comment: i64,
    /// A comment's text as it was.
    pub excerpt: String,
    /// A suspension's end (ms).
    pub until: Option<i64>,
}

/// What a report or an action is about.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A published article.
    Article,
    /// A comment.
    Comment,
    /// A user (their profile, or their behaviour).
    User,
}

impl Kind {
    /// Its name in the database and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Article => "article",
            Self::Comment => "comment",
            Self::User => "user",
        }
    }

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "article" => Some(Self::Article),
            "comment" => Some(Self::Comment),
            "user" => Some(Self::User),
            _ => None,
        }
    }
}

/// Why a reader reports something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// Advertising, link farms, repeated posts.
    Spam,
    /// Harassment, hate, personal attacks.
    Abuse,
    /// Against the law.
    Illegal,
    /// Anything else (the note says what).
    Other,
}

impl Reason {
    /// Its name in the database and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spam => "spam",
            Self::Abuse => "abuse",
            Self::Illegal => "illegal",
            Self::Other => "other",
        }
    }
}

/// What an admin does about a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Closes the target's open reports, changing nothing else.
    Dismiss,
    /// An article or comment leaves every reader's view (its author keeps it and sees why).
    Hide,
    /// A hidden article or comment comes back.
    Restore,
    /// An article is removed for good; a comment is deleted as its author would delete it.
    Delete,
    /// A user may sign in and read but not write, until a time or for good.
    Suspend,
    /// Ends a user's suspension.
    Lift,
}

impl Action {
    /// Its name in the log and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dismiss => "dismiss",
            Self::Hide => "hide",
            Self::Restore => "restore",
            Self::Delete => "delete",
            Self::Suspend => "suspend",
            Self::Lift => "lift",
        }
    }

    /// Whether the action applies to targets of `kind`.
    pub fn applies_to(self, kind: Kind) -> bool {
        match self {
            Self::Dismiss => true,
            Self::Hide | Self::Restore | Self::Delete => kind != Kind::User,
            Self::Suspend | Self::Lift => kind == Kind::User,
        }
    }
}

/// An admin's order: what to do to which target, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// What to do.
    pub action: Action,
    /// The kind of target.
    pub kind: Kind,
    /// The target's id.
    pub id: i64,
    /// Why (kept in the log; a hidden article's author sees it).
    pub reason: String,
    /// Suspend only: until when (ms); `None`: for good.
    pub until: Option<i64>,
    /// Suspend only: also hide the user's published articles and comments.
    pub hide_content: bool,
}

/// One report in the review queue.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct ReportView {
    /// Report id.
    pub id: i64,
    /// Who reported.
    pub reporter: i64,
    /// spam, abuse, illegal or other.
    pub reason: String,
    /// The reporter's note.
    pub note: String,
    /// The target's content when it was reported (title and text, a comment's text, a
    /// profile's nickname and about).
    pub snapshot: String,
    /// open, dismissed or actioned.
    pub state: String,
    /// Filed (ms).
    pub ctime: i64,
}

/// A target with open reports: what the queue lists.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueItem {
    /// article, comment or user.
    pub kind: Kind,
    /// The target's id.
    pub id: i64,
    /// Its open reports.
    pub open: i64,
    /// The newest open report (ms).
    pub latest: i64,
    /// The open reports, newest first (at most [`crate::moderation::store::REPORTS_PER_ITEM`]).
    pub reports: Vec<ReportView>,
}

/// One line of the audit log.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct LogEntry {
    /// Entry id.
    pub id: i64,
    /// The admin who acted.
    pub admin: i64,
    /// dismiss, hide, restore, delete, suspend or lift.
    pub action: String,
    /// article, comment or user.
    #[sqlx(rename = "target_kind")]
    pub kind: String,
    /// The target's id.
    #[sqlx(rename = "target_id")]
    pub target: i64,
    /// Why (the admin's words).
    pub reason: String,
    /// What it changed, e.g. `hidden`, `unchanged`, `suspended until 1767225600000`.
    pub outcome: String,
    /// When (ms).
    pub ctime: i64,
}

/// The outcome of an action: what changed and how many reports it closed.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Acted {
    /// What it changed (as in the log).
    pub outcome: String,
    /// Whether anything changed (false: it already was so; the action is idempotent).
    pub changed: bool,
    /// Open reports of the target it closed.
    pub closed: u64,
    /// The audit log entry.
    pub log: i64,
}

/// A user's suspension, as `GET /moderation/me` shows it to them.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Suspension {
    /// Until when (ms; absent: for good).
    pub until: Option<i64>,
    /// Why.
    pub reason: String,
}

/// An article screening held for review: approve it with `restore`, reject it with `delete`.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct HeldArticle {
    /// The article.
    pub id: i64,
    /// Its author.
    pub author_id: i64,
    /// Its title as submitted.
    pub title: String,
    /// Its abstract as submitted.
    #[serde(rename = "abstract")]
    #[sqlx(rename = "abstract")]
    pub abstract_text: String,
    /// Why it is held (the list and the word).
    pub reason: String,
    /// Submitted (ms).
    pub utime: i64,
}

/// A comment screening held for review: approve it with `restore`, reject it with `delete`.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct HeldComment {
    /// The comment.
    pub id: i64,
    /// Its author.
    pub author_id: i64,
    /// The kind of object it is on (`article`).
    pub biz: String,
    /// The object.
    pub biz_id: i64,
    /// The comment it answers (0: none).
    pub parent_id: i64,
    /// Its text as submitted.
    pub content: String,
    /// Why it is held (the list and the word).
    pub reason: String,
    /// Submitted (ms).
    pub ctime: i64,
}
