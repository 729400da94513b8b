//! The rules of comments on any `biz` + `biz_id`.
//!
//! - **Writing**: a user may write [`CommentSettings::comment_rate_limit`] comments per window
//!   (429001 beyond). The comment, its parent's and root's counters, the object's
//!   `comment_cnt` and one `comment_changed` event per recipient (the object's author, the
//!   author replied to — not the writer) are one transaction ([`CommentStore::create`]);
//!   code 0 means all of it is durable. A reply always joins its parent's thread: replying to a
//!   reply attaches to the same root. Then the object's cached counts are dropped. Write and
//!   cache fix run to completion even if the caller goes away ([`to_completion`]).
//! - **Deleting**: by the comment's author or the object's author (403002 otherwise). A
//!   comment with replies becomes a tombstone so its replies stay reachable; a leaf is removed,
//!   and so is any tombstone it was the last reply of. Counts stay exact; the recipients'
//!   feed items are withdrawn through `comment_changed` events with `on: false`.
//! - **Reading**: a page of top-level comments (newest first, keyset by id) with each one's
//!   first [`PREVIEW_REPLIES`](crate::comment::model::PREVIEW_REPLIES) replies and reply count, and the object's exact total, in a
//!   bounded number of statements whatever the page size ([`CommentStore::first_replies`]);
//!   every reply of a thread by paging its root's replies (oldest first). Objects readers
//!   cannot see (a withdrawn article) have no readable comments: 404001.

use crate::{
    biz::Biz,
    comment::{
        model::{CommentView, Deleted, NewComment, Posted, ThreadPage, TOPIC_COMMENT_CHANGED},
        store::{CommentModerated, CommentModeration, CommentStore, NotDeleted, Refused},
    },
    interactive::InteractiveService,
    screening::{Outcome, Screening},
};
use platform::{
    db::now_millis,
    detached::to_completion,
    error::{AppError, Msg},
    events::outbox::Outbox,
    live::LiveRateLimiter,
    page::{decode_cursor, encode_cursor, Page},
    telemetry::MetricsSpec,
};

/// Counter: comments written (`action` = `create`) and deleted (`action` = `tombstone` or
/// `remove`).
pub const COMMENTS_TOTAL: &str = "comments_total";

/// The comments' metrics.
pub const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_counter!(
        COMMENTS_TOTAL,
        "Comments written (action=create) and deleted (action=tombstone, remove)"
    );
}

const NO_SUCH_OBJECT: AppError =
    AppError::NotFound(Msg::new("no such object to comment on", "没有可评论的对象"));
const NO_SUCH_PARENT: AppError = AppError::NotFound(Msg::new(
    "no such comment to reply to",
    "要回复的评论不存在",
));
const NO_SUCH_COMMENT: AppError = AppError::NotFound(Msg::new("no such comment", "评论不存在"));
const NOT_ALLOWED: AppError = AppError::Forbidden(Msg::new(
    "only the comment's author or the author of what it is on may delete it",
    "只有评论的作者或被评论内容的作者可以删除",
));

/// Comments; cheap to clone.
#[derive(Debug, Clone)]
pub struct CommentService {
    store: CommentStore,
    interactive: InteractiveService,
    outbox: Outbox,
    limiter: LiveRateLimiter,
    screening: Screening,
}

impl CommentService {
    /// The service, limiting each user's comments with `limiter` (`comment_rate_limit`).
    pub fn new(
        store: CommentStore,
        interactive: InteractiveService,
        outbox: Outbox,
        limiter: LiveRateLimiter,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            screening: Screening::none(),
            store,
            interactive,
            outbox,
            limiter,
        })
    }

    /// The same service, screening comments against the word lists.
    #[must_use]
    pub fn screened_by(mut self, screening: Screening) -> Self {
        self.screening = screening;
        self
    }

    /// Writes `comment`; returns its id once it, its counts and its events are committed
    /// ([`CommentService::post`] says whether it was held).
    pub async fn create(&self, comment: NewComment) -> Result<i64, AppError> {
        Ok(self.post(comment).await?.id)
    }

    /// Writes `comment`. A comment with a word of a refusing list is refused (code 4); one with
    /// a word of a holding list is written hidden, for review ([`Posted::held`] says why), and
    /// counts and announces nothing until a moderator approves it (`restore`).
    pub async fn post(&self, comment: NewComment) -> Result<Posted, AppError> {
        {
            self.limiter.check(&comment.uid.to_string()).await?;
        }
        let held = match self.screening.verdict("", &comment.content, false).await? {
            Outcome::Clean => None,
            Outcome::Held(reason) => Some(reason),
        };
        let service = self.clone();
        to_completion(async move {
            let announce = service.outbox.wants(TOPIC_COMMENT_CHANGED);
            let written = match service
                .store
                .create(&comment, now_millis(), announce, held.as_deref())
                .await?
            {
                Ok(written) => written,
                Err(Refused::NoObject) => return Err(NO_SUCH_OBJECT),
                Err(Refused::NoParent) => return Err(NO_SUCH_PARENT),
            };
            service
                .committed(comment.biz, comment.biz_id, written.events)
                .await;
            let action = if held.is_some() { "hold" } else { "create" };
            metrics::counter!(COMMENTS_TOTAL, "action" => action).increment(1);
            Ok(Posted {
                id: written.id,
                held,
            })
        })
        .await
    }

    /// Deletes comment `id` for `caller` (its author or the object's author).
    pub async fn delete(&self, caller: i64, id: i64) -> Result<Deleted, AppError> {
        let service = self.clone();
        to_completion(async move {
            let announce = service.outbox.wants(TOPIC_COMMENT_CHANGED);
            let deletion = match service
                .store
                .delete(Some(caller), id, now_millis(), announce)
                .await?
            {
                Ok(deletion) => deletion,
                Err(NotDeleted::NoComment) => return Err(NO_SUCH_COMMENT),
                Err(NotDeleted::NotAllowed) => return Err(NOT_ALLOWED),
            };
            service
                .committed(deletion.biz, deletion.biz_id, deletion.events)
                .await;
            let action = match deletion.outcome {
                Deleted::Tombstoned => "tombstone",
                Deleted::Removed => "remove",
            };
            metrics::counter!(COMMENTS_TOTAL, "action" => action).increment(1);
            Ok(deletion.outcome)
        })
        .await
    }

    /// A moderator's hide or restore of comment `id` ([`CommentStore::moderate`]); `None`: no
    /// such comment. The object's cached counts follow, as after a deletion.
    pub async fn moderate(
        &self,
        id: i64,
        action: CommentModeration,
    ) -> Result<Option<CommentModerated>, AppError> {
        let service = self.clone();
        to_completion(async move {
            let announce = service.outbox.wants(TOPIC_COMMENT_CHANGED);
            let moderated = service
                .store
                .moderate(id, action, now_millis(), announce)
                .await?;
            if let Some(moderated) = moderated.filter(|moderated| moderated.changed) {
                service
                    .committed(moderated.biz, moderated.biz_id, moderated.events)
                    .await;
            }
            Ok(moderated)
        })
        .await
    }

    /// A moderator's deletion of comment `id` (shown or hidden), as its author's would be;
    /// `None`: no such comment (or already deleted).
    pub async fn delete_as_moderator(&self, id: i64) -> Result<Option<Deleted>, AppError> {
        let service = self.clone();
        to_completion(async move {
            let announce = service.outbox.wants(TOPIC_COMMENT_CHANGED);
            let Ok(deletion) = service
                .store
                .delete(None, id, now_millis(), announce)
                .await?
            else {
                return Ok(None);
            };
            service
                .committed(deletion.biz, deletion.biz_id, deletion.events)
                .await;
            Ok(Some(deletion.outcome))
        })
        .await
    }

    /// After a committed write of `events` events on an object: the outbox relay is woken if
    /// there are any, and the object's cached counts are dropped.
    async fn committed(&self, biz: Biz, biz_id: i64, events: usize) {
        if events > 0 {
            self.outbox.committed();
        }
        self.interactive.comments_changed(biz, biz_id).await;
    }

    /// A page of the object's top-level comments, newest first, after `cursor`, each with its
    /// first replies and reply count, and the object's total.
    pub async fn thread_page(
        &self,
        biz: Biz,
        biz_id: i64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ThreadPage, AppError> {
        let before = cursor.map(decode_cursor::<1>).transpose()?.map(|[id]| id);
        let (owner, total, mut items) = tokio::try_join!(
            self.store.visible_owner(biz, biz_id),
            self.store.total(biz, biz_id),
            self.store.top_level(biz, biz_id, before, limit + 1),
        )?;
        if owner.is_none() {
            return Err(NO_SUCH_OBJECT);
        }
        let next = next_cursor(&mut items, limit);
        let with_replies: Vec<i64> = items
            .iter()
            .filter(|item| item.reply_cnt.unwrap_or(0) > 0)
            .map(|item| item.id)
            .collect();
        let mut replies = self.store.first_replies(&with_replies).await?;
        for item in &mut items {
            item.replies = Some(replies.remove(&item.id).unwrap_or_default());
        }
        Ok(ThreadPage { items, next, total })
    }

    /// A page of the replies under top-level comment `root`, oldest first, after `cursor`.
    pub async fn replies(
        &self,
        root: i64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<CommentView>, AppError> {
        let after = cursor.map(decode_cursor::<1>).transpose()?.map(|[id]| id);
        let (thread, mut items) = tokio::try_join!(
            self.store.thread(root),
            self.store.replies(root, after, limit + 1),
        )?;
        let Some(thread) = thread else {
            return Err(NO_SUCH_COMMENT);
        };
        if self
            .store
            .visible_owner(thread.biz, thread.biz_id)
            .await?
            .is_none()
        {
            return Err(NO_SUCH_OBJECT);
        }
        let next = next_cursor(&mut items, limit);
        Ok(Page { items, next })
    }
}

/// Cuts `items` (fetched one beyond `limit`) to the page and returns the cursor of the next
/// page, if there is one.
fn next_cursor(items: &mut Vec<CommentView>, limit: usize) -> Option<String> {
    if items.len() <= limit {
        return None;
    }
    items.truncate(limit);
    items.last().map(|last| encode_cursor(&[last.id]))
}
