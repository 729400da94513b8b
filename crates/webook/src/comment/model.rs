//! The comments' vocabulary: what a new comment must be, how comments are shown, and the event
//! each comment records for the people it concerns.

use serde::{Deserialize, Serialize};

use crate::{biz::Biz, user::Person};
use platform::{
    error::{AppError, Msg},
    text::{self, Lines},
};

/// Topic of comment transitions: one event per recipient (the object's author, the author of
/// the comment replied to), recorded in the comment's transaction. The feed turns them into
/// `comment` items.
pub const TOPIC_COMMENT_CHANGED: &str = "comment_changed";

/// Longest comment, in characters (API.md).
pub const MAX_CONTENT_CHARS: usize = 2000;

/// Replies shown under each top-level comment of a page (API.md: its first 3).
pub const PREVIEW_REPLIES: usize = 3;

/// A comment written (`on`) or deleted, for one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommentEvent {
    /// Comment id.
    pub id: i64,
    /// Who wrote it.
    pub uid: i64,
    /// Whom it is for: the object's author, or the user replied to.
    pub recipient: i64,
    /// The article it is under (0 when it is not under an article).
    pub article_id: i64,
    /// Its text as written (plain; empty for a deletion).
    pub content: String,
    /// Written (`true`) or deleted.
    pub on: bool,
    /// When (ms).
    pub time: i64,
}

/// What [`crate::comment::CommentService::post`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// The new comment's id.
    pub id: i64,
    /// Why the word lists hold it for review (it shows once a moderator approves it); `None`:
    /// it shows now.
    pub held: Option<String>,
}

/// A comment to write, checked ([`NewComment::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewComment {
    /// Its author.
    pub uid: i64,
    /// The kind of object it is on.
    pub biz: Biz,
    /// The object.
    pub biz_id: i64,
    /// The comment it answers, if it is a reply.
    pub parent_id: Option<i64>,
    /// Plain text, stored as written.
    pub content: String,
}

impl NewComment {
    /// Checks the request at the edge: positive ids (a `parent_id` of 0 means none), content of
    /// 1–[`MAX_CONTENT_CHARS`] characters with something visible, no control characters but
    /// line breaks and tabs, no bidi overrides. Code 4 naming the field otherwise.
    pub fn new(
        uid: i64,
        biz: Biz,
        biz_id: i64,
        parent_id: Option<i64>,
        content: String,
    ) -> Result<Self, AppError> {
        let biz_id = platform::error::positive_id("bizId", biz_id)?;
        let parent_id = match parent_id {
            None | Some(0) => None,
            Some(id) => Some(platform::error::positive_id("parentId", id)?),
        };
        if content.trim().is_empty() {
            return Err(AppError::InvalidInput(Msg::field(
                "content",
                "must not be empty",
                "不能为空",
            )));
        }
        if content.chars().count() > MAX_CONTENT_CHARS {
            return Err(AppError::InvalidInput(Msg::field(
                "content",
                format!("must be at most {MAX_CONTENT_CHARS} characters"),
                format!("不能超过 {MAX_CONTENT_CHARS} 个字符"),
            )));
        }
        text::check("content", &content, Lines::Multi)?;
        text::require_visible("content", &content)?;
        Ok(Self {
            uid,
            biz,
            biz_id,
            parent_id,
            content,
        })
    }
}

/// A comment as the API shows it (API.md → Comments).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommentView {
    /// Comment id.
    pub id: i64,
    /// The object it is on.
    pub biz_id: i64,
    /// Its author; `null` once deleted (a tombstone names no one).
    pub author: Option<Person>,
    /// Its text, HTML-escaped; empty once deleted.
    pub content: String,
    /// The comment it answers (`null` for a top-level comment).
    pub parent_id: Option<i64>,
    /// The top-level comment of its thread (`null` for a top-level comment).
    pub root_id: Option<i64>,
    /// Deleted, but kept as a tombstone because replies point at it.
    pub deleted: bool,
    /// When it was written (ms).
    pub ctime: i64,
    /// Top-level only: its first [`PREVIEW_REPLIES`] replies, oldest first.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(no_recursion)]
    pub replies: Option<Vec<CommentView>>,
    /// Top-level only: how many replies it has (not deleted).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reply_cnt: Option<i64>,
}

/// A page of top-level comments with the thread's total (API.md: `{items, next, total}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ThreadPage {
    /// Top-level comments, newest first, each with its first replies.
    pub items: Vec<CommentView>,
    /// The cursor of the next page (absent at the end).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub next: Option<String>,
    /// Comments on the object, at every level, not deleted (the reader view's `commentCnt`).
    pub total: i64,
}

/// What a deletion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// It had replies: now a tombstone.
    Tombstoned,
    /// It had none: gone, with any tombstoned ancestors it was the last reply of.
    Removed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_comments_are_checked_at_the_edge() {
        let ok = NewComment::new(1, Biz::Article, 2, Some(0), "hi\nthere".into()).unwrap();
        assert_eq!(ok.parent_id, None);
        let long = "好".repeat(MAX_CONTENT_CHARS);
        assert!(NewComment::new(1, Biz::Article, 2, Some(3), long.clone()).is_ok());
        for (biz_id, parent, content, field) in [
            (0, None, "x".to_owned(), "bizId"),
            (2, Some(-1), "x".to_owned(), "parentId"),
            (2, None, "  \n ".to_owned(), "content"),
            (2, None, format!("{long}好"), "content"),
            (2, None, "a\u{0}b".to_owned(), "content"),
            (2, None, "a\u{202E}b".to_owned(), "content"),
            (2, None, "\u{200B}".to_owned(), "content"),
        ] {
            let err = NewComment::new(1, Biz::Article, biz_id, parent, content).unwrap_err();
            assert_eq!(err.code(), 4);
            assert!(err.to_string().contains(field), "{field}: {err}");
        }
    }
}
