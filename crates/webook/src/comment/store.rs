//! SQL for comments (`comments`), one implementation for SQLite and PostgreSQL.
//!
//! A thread is two levels to list however deep the conversation goes: a top-level comment has
//! `root_id = parent_id = 0`; every reply carries its thread's top-level comment as `root_id`
//! and the comment it answers as `parent_id`. So a page of top-level comments is one indexed
//! range, the first replies of all of them one more statement (a `UNION ALL` of one short
//! indexed range per root, not one query per root), and every reply of a thread is reachable by
//! paging its root's replies by id — nothing is capped or dropped.
//!
//! Writes keep two counters on the rows themselves, in the comment's transaction:
//! `child_cnt` (rows answering this one: decides tombstone or removal on delete) and
//! `reply_cnt` (top-level rows: replies in the thread that are not deleted). A reply first
//! moves its parent's `child_cnt` with a guarded `UPDATE … WHERE deleted = 0 RETURNING`, which
//! both checks the parent and locks its row; a deletion first touches its own row
//! (`UPDATE … SET utime = utime … RETURNING`) for the same lock. Locks are always taken from
//! the comment towards its root, then the object's counter row, so concurrent replies and
//! deletions of one thread serialise without deadlocking, and a reply can never attach to a
//! parent that is being removed. The object's `comment_cnt` (in `interactives`) moves in the
//! same transaction ([`add_comments`]); the `comment_changed` events go to the outbox there too.
//!
//! `deleted` is 0 (shown), 1 (a tombstone: content cleared) or 2 (hidden by a moderator:
//! content kept for a restore). A hidden comment counts as deleted everywhere — it is shown as a
//! tombstone while replies point at it and left out of listings otherwise, counts leave it, it
//! takes no replies — until a moderator restores it ([`CommentStore::moderate`]).

use std::collections::HashMap;

use sqlx::AnyConnection;

use crate::{
    biz::Biz,
    comment::model::{
        CommentEvent, CommentView, Deleted, NewComment, PREVIEW_REPLIES, TOPIC_COMMENT_CHANGED,
    },
    interactive::add_comments,
    user::Person,
};
use platform::{db::Db, events::outbox};

/// Most roots whose first replies one statement reads (a branch of the `UNION ALL` each).
const ROOTS_PER_STATEMENT: usize = 50;

/// The columns every listing reads (comment `c`, author `u`).
const COLUMNS: &str = "c.id, c.biz_id, c.uid, c.root_id, c.parent_id, c.content, c.deleted, \
                       c.reply_cnt, c.ctime, u.nickname";

/// Why a comment could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No such object, or readers cannot see it.
    NoObject,
    /// No such parent on that object (or it is deleted).
    NoParent,
}

/// The `deleted` value of a comment a moderator hid.
const HIDDEN: i64 = 2;

/// Listings leave out hidden comments nothing answers (one with replies shows as a tombstone).
const LISTED: &str = "NOT (c.deleted = 2 AND c.child_cnt = 0)";

/// What a moderator does to a comment ([`CommentStore::moderate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentModeration {
    /// Readers lose it as if it were deleted; the content is kept.
    Hide,
    /// A hidden comment comes back.
    Restore,
}

/// What [`CommentStore::moderate`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommentModerated {
    /// The comment's author.
    pub author: i64,
    /// The object it is on.
    pub biz: Biz,
    /// Its id.
    pub biz_id: i64,
    /// Whether anything changed (false: it already was so).
    pub changed: bool,
    /// Events recorded in the outbox.
    pub events: usize,
}

/// Why a comment could not be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotDeleted {
    /// No such comment (or it is already deleted).
    NoComment,
    /// The caller wrote neither the comment nor the object.
    NotAllowed,
}

/// A written comment: its id and the events it recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The new comment's id.
    pub id: i64,
    /// Events recorded in the outbox (one per recipient).
    pub events: usize,
}

/// A deletion: what happened, the object it was on, and the events it recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    /// Tombstoned or removed.
    pub outcome: Deleted,
    /// The object the comment was on.
    pub biz: Biz,
    /// Its id.
    pub biz_id: i64,
    /// Events recorded in the outbox.
    pub events: usize,
}

/// Where a reply thread lives: its root's object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thread {
    /// The kind of object.
    pub biz: Biz,
    /// The object.
    pub biz_id: i64,
}

/// The comment a deletion touched (and locked): what deciding and counting need.
#[derive(sqlx::FromRow)]
struct Touched {
    deleted: i64,
    uid: i64,
    biz: String,
    biz_id: i64,
    root_id: i64,
    parent_id: i64,
    child_cnt: i64,
}

/// Reads and writes comments.
#[derive(Debug, Clone)]
pub struct CommentStore {
    db: Db,
}

impl CommentStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Writes `comment` (a top-level comment, or a reply attached to its parent's root), moves
    /// the counters and, with `announce`, records its events — all in one transaction.
    ///
    /// `held` (why the word lists hold it): the comment is written hidden for review instead —
    /// out of the counts, without events — until a moderator's restore publishes it.
    pub async fn create(
        &self,
        comment: &NewComment,
        now: i64,
        announce: bool,
        held: Option<&str>,
    ) -> sqlx::Result<Result<Written, Refused>> {
        let mut tx = self.db.writer().begin().await?;
        let Some(owner) = comment.biz.visible_owner(&mut *tx, comment.biz_id).await? else {
            return Ok(Err(Refused::NoObject));
        };
        let (root_id, parent_author) = match comment.parent_id {
            None => (0, None),
            Some(parent_id) => {
                match attach_to_parent(&mut tx, comment, parent_id, held.is_none()).await? {
                    Some((root_id, parent_author)) => (root_id, Some(parent_author)),
                    None => return Ok(Err(Refused::NoParent)),
                }
            }
        };
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO comments (biz, biz_id, uid, root_id, parent_id, content, deleted, \
             child_cnt, reply_cnt, ctime, utime, held, held_reason) \
             VALUES ($1, $2, $3, $4, $5, $6, $8, 0, 0, $7, $7, $9, $10) RETURNING id",
        )
        .bind(comment.biz.as_str())
        .bind(comment.biz_id)
        .bind(comment.uid)
        .bind(root_id)
        .bind(comment.parent_id.unwrap_or(0))
        .bind(&comment.content)
        .bind(now)
        .bind(if held.is_some() { HIDDEN } else { 0 })
        .bind(i64::from(held.is_some()))
        .bind(held.unwrap_or(""))
        .fetch_one(&mut *tx)
        .await?;
        if held.is_some() {
            // Hidden until approved: the restore counts it and records its events.
            tx.commit().await?;
            return Ok(Ok(Written { id, events: 0 }));
        }
        add_comments(&mut tx, comment.biz, comment.biz_id, 1, now).await?;
        let events = if announce {
            let event = CommentEvent {
                id,
                uid: comment.uid,
                recipient: 0,
                article_id: article_of(comment.biz, comment.biz_id),
                content: comment.content.clone(),
                on: true,
                time: now,
            };
            record(
                &mut tx,
                comment.biz,
                comment.biz_id,
                event,
                owner,
                parent_author,
            )
            .await?
        } else {
            0
        };
        tx.commit().await?;
        Ok(Ok(Written { id, events }))
    }

    /// Deletes comment `id` for `caller`, who must be its author or the object's (`None`: a
    /// moderator, who may also delete a hidden comment): a comment with replies becomes a
    /// tombstone (content cleared), a leaf is removed together with the tombstoned ancestors
    /// it was the last reply of. Counters move (unless it was hidden: they already did) and,
    /// with `announce`, the deletion's events are recorded — all in one transaction.
    pub async fn delete(
        &self,
        caller: Option<i64>,
        id: i64,
        now: i64,
        announce: bool,
    ) -> sqlx::Result<Result<Deletion, NotDeleted>> {
        let mut tx = self.db.writer().begin().await?;
        // Touching the row takes its lock (PostgreSQL; SQLite has one writer anyway).
        let row: Option<Touched> = sqlx::query_as(
            "UPDATE comments SET utime = utime WHERE id = $1 AND (deleted = 0 OR (deleted = 2 AND $2 = 1)) \
             RETURNING deleted, uid, biz, biz_id, root_id, parent_id, child_cnt",
        )
        .bind(id)
        .bind(i64::from(caller.is_none()))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(Touched {
            deleted: was,
            uid: author,
            biz,
            biz_id,
            root_id,
            parent_id,
            child_cnt,
        }) = row
        else {
            return Ok(Err(NotDeleted::NoComment));
        };
        let Ok(biz) = biz.parse::<Biz>() else {
            return Ok(Err(NotDeleted::NoComment));
        };
        let owner = biz.owner(&mut *tx, biz_id).await?;
        if let Some(caller) = caller {
            if caller != author && owner != Some(caller) {
                return Ok(Err(NotDeleted::NotAllowed));
            }
        }
        let was_hidden = was == HIDDEN;
        let parent_author: Option<i64> = if parent_id == 0 {
            None
        } else {
            sqlx::query_scalar("SELECT uid FROM comments WHERE id = $1")
                .bind(parent_id)
                .fetch_optional(&mut *tx)
                .await?
        };
        let outcome = if child_cnt > 0 {
            sqlx::query("UPDATE comments SET deleted = 1, content = '', utime = $2 WHERE id = $1")
                .bind(id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            Deleted::Tombstoned
        } else {
            remove_with_empty_ancestors(&mut tx, id, parent_id).await?;
            Deleted::Removed
        };
        if was_hidden {
            // Hiding already took it out of the counts and withdrew its events.
            tx.commit().await?;
            return Ok(Ok(Deletion {
                outcome,
                biz,
                biz_id,
                events: 0,
            }));
        }
        if root_id != 0 {
            sqlx::query(
                "UPDATE comments SET reply_cnt = reply_cnt - 1 WHERE id = $1 AND reply_cnt > 0",
            )
            .bind(root_id)
            .execute(&mut *tx)
            .await?;
        }
        add_comments(&mut tx, biz, biz_id, -1, now).await?;
        let events = match (announce, owner) {
            (true, Some(owner)) => {
                let event = CommentEvent {
                    id,
                    uid: author,
                    recipient: 0,
                    article_id: article_of(biz, biz_id),
                    content: String::new(),
                    on: false,
                    time: now,
                };
                record(&mut tx, biz, biz_id, event, owner, parent_author).await?
            }
            _ => 0,
        };
        tx.commit().await?;
        Ok(Ok(Deletion {
            outcome,
            biz,
            biz_id,
            events,
        }))
    }

    /// A moderator's `action` on comment `id`, in one transaction: hiding takes it out of the
    /// counts (the object's, its root's) and, with `announce`, withdraws its events
    /// (`comment_changed` with `on: false`, as a deletion); restoring puts both back. Repeating
    /// an action changes nothing. `None`: no such comment (or deleted).
    pub async fn moderate(
        &self,
        id: i64,
        action: CommentModeration,
        now: i64,
        announce: bool,
    ) -> sqlx::Result<Option<CommentModerated>> {
        let (from, to, step) = match action {
            CommentModeration::Hide => (0, HIDDEN, -1),
            CommentModeration::Restore => (HIDDEN, 0, 1),
        };
        let mut tx = self.db.writer().begin().await?;
        let row: Option<(i64, String, i64, i64, i64, String, i64)> = sqlx::query_as(
            "UPDATE comments SET deleted = $1, utime = $2, held = 0, held_reason = '' \
             WHERE id = $3 AND deleted = $4 \
             RETURNING uid, biz, biz_id, root_id, parent_id, content, ctime",
        )
        .bind(to)
        .bind(now)
        .bind(id)
        .bind(from)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((author, biz, biz_id, root_id, parent_id, content, ctime)) = row else {
            let state: Option<(i64, i64, String, i64)> =
                sqlx::query_as("SELECT deleted, uid, biz, biz_id FROM comments WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
            return Ok(match state {
                Some((deleted, author, biz, biz_id)) if deleted == to => {
                    biz.parse().ok().map(|biz| CommentModerated {
                        author,
                        biz,
                        biz_id,
                        changed: false,
                        events: 0,
                    })
                }
                _ => None,
            });
        };
        let Ok(biz) = biz.parse::<Biz>() else {
            return Ok(None);
        };
        if root_id != 0 {
            sqlx::query(
                "UPDATE comments SET reply_cnt = reply_cnt + $1 WHERE id = $2 AND reply_cnt + $1 >= 0",
            )
            .bind(step)
            .bind(root_id)
            .execute(&mut *tx)
            .await?;
        }
        add_comments(&mut tx, biz, biz_id, step, now).await?;
        let owner = biz.owner(&mut *tx, biz_id).await?;
        let parent_author: Option<i64> = if parent_id == 0 {
            None
        } else {
            sqlx::query_scalar("SELECT uid FROM comments WHERE id = $1")
                .bind(parent_id)
                .fetch_optional(&mut *tx)
                .await?
        };
        let events = match (announce, owner) {
            (true, Some(owner)) => {
                let restored = action == CommentModeration::Restore;
                let event = CommentEvent {
                    id,
                    uid: author,
                    recipient: 0,
                    article_id: article_of(biz, biz_id),
                    content: if restored { content } else { String::new() },
                    on: restored,
                    time: if restored { ctime } else { now },
                };
                record(&mut tx, biz, biz_id, event, owner, parent_author).await?
            }
            _ => 0,
        };
        tx.commit().await?;
        Ok(Some(CommentModerated {
            author,
            biz,
            biz_id,
            changed: true,
            events,
        }))
    }

    /// Top-level comments of the object, newest first, strictly before comment id `before`
    /// (all when `None`), at most `limit`; each with its reply count but not yet its replies.
    pub async fn top_level(
        &self,
        biz: Biz,
        biz_id: i64,
        before: Option<i64>,
        limit: usize,
    ) -> sqlx::Result<Vec<CommentView>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM comments c LEFT JOIN users u ON u.id = c.uid \
             WHERE c.biz = $1 AND c.biz_id = $2 AND c.root_id = 0 AND c.id < $3 AND {LISTED} \
             ORDER BY c.id DESC LIMIT $4"
        );
        let rows: Vec<CommentRow> = sqlx::query_as(&sql)
            .bind(biz.as_str())
            .bind(biz_id)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit as i64)
            .fetch_all(self.db.pool())
            .await?;
        Ok(rows.into_iter().map(|row| view(row, true)).collect())
    }

    /// The first [`PREVIEW_REPLIES`] replies of each root, oldest first, in one statement per
    /// [`ROOTS_PER_STATEMENT`] roots.
    pub async fn first_replies(
        &self,
        roots: &[i64],
    ) -> sqlx::Result<HashMap<i64, Vec<CommentView>>> {
        let mut replies: HashMap<i64, Vec<CommentView>> = HashMap::with_capacity(roots.len());
        for chunk in roots.chunks(ROOTS_PER_STATEMENT) {
            let branches: Vec<String> = (1..=chunk.len())
                .map(|n| {
                    format!(
                        "SELECT * FROM (SELECT {COLUMNS} FROM comments c \
                         LEFT JOIN users u ON u.id = c.uid \
                         WHERE c.root_id = ${n} AND {LISTED} ORDER BY c.id LIMIT {PREVIEW_REPLIES}) r{n}"
                    )
                })
                .collect();
            let sql = branches.join(" UNION ALL ");
            let mut query = sqlx::query_as::<_, CommentRow>(&sql);
            for root in chunk {
                query = query.bind(*root);
            }
            for row in query.fetch_all(self.db.pool()).await? {
                let reply = view(row, false);
                if let Some(root) = reply.root_id {
                    replies.entry(root).or_default().push(reply);
                }
            }
        }
        for thread in replies.values_mut() {
            thread.sort_by_key(|reply| reply.id);
        }
        Ok(replies)
    }

    /// Where the thread of top-level comment `root` lives; `None` if there is no such
    /// top-level comment.
    pub async fn thread(&self, root: i64) -> sqlx::Result<Option<Thread>> {
        let row: Option<(String, i64)> =
            sqlx::query_as("SELECT biz, biz_id FROM comments WHERE id = $1 AND root_id = 0")
                .bind(root)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(row.and_then(|(biz, biz_id)| {
            Some(Thread {
                biz: biz.parse().ok()?,
                biz_id,
            })
        }))
    }

    /// Replies under `root`, oldest first, strictly after reply id `after`, at most `limit`.
    pub async fn replies(
        &self,
        root: i64,
        after: Option<i64>,
        limit: usize,
    ) -> sqlx::Result<Vec<CommentView>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM comments c LEFT JOIN users u ON u.id = c.uid \
             WHERE c.root_id = $1 AND c.id > $2 AND {LISTED} ORDER BY c.id LIMIT $3"
        );
        let rows: Vec<CommentRow> = sqlx::query_as(&sql)
            .bind(root)
            .bind(after.unwrap_or(0))
            .bind(limit as i64)
            .fetch_all(self.db.pool())
            .await?;
        Ok(rows.into_iter().map(|row| view(row, false)).collect())
    }

    /// Comments on the object that are not deleted (its `comment_cnt`).
    pub async fn total(&self, biz: Biz, biz_id: i64) -> sqlx::Result<i64> {
        let total: Option<i64> = sqlx::query_scalar(
            "SELECT comment_cnt FROM interactives WHERE biz = $1 AND biz_id = $2",
        )
        .bind(biz.as_str())
        .bind(biz_id)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(total.unwrap_or(0))
    }

    /// The author of the object if readers can see it.
    pub async fn visible_owner(&self, biz: Biz, biz_id: i64) -> sqlx::Result<Option<i64>> {
        biz.visible_owner(self.db.pool(), biz_id).await
    }
}

/// Counts a reply on its parent (which must be a comment on the same object, not deleted) and,
/// when the parent is itself a reply, on the thread's root. Returns the root and the parent's
/// author; `None` when there is no such parent. An uncounted reply (held for review) is only
/// the parent's child: no reply count moves until it is approved.
async fn attach_to_parent(
    tx: &mut AnyConnection,
    comment: &NewComment,
    parent_id: i64,
    counted: bool,
) -> sqlx::Result<Option<(i64, i64)>> {
    let parent: Option<(i64, i64)> = sqlx::query_as(
        "UPDATE comments SET child_cnt = child_cnt + 1, \
           reply_cnt = reply_cnt + CASE WHEN root_id = 0 THEN $4 ELSE 0 END \
         WHERE id = $1 AND biz = $2 AND biz_id = $3 AND deleted = 0 \
         RETURNING root_id, uid",
    )
    .bind(parent_id)
    .bind(comment.biz.as_str())
    .bind(comment.biz_id)
    .bind(i64::from(counted))
    .fetch_optional(&mut *tx)
    .await?;
    let Some((parent_root, parent_author)) = parent else {
        return Ok(None);
    };
    // The parent is the root, or the root's reply count does not move (a held reply).
    let root = if parent_root == 0 {
        parent_id
    } else {
        parent_root
    };
    if parent_root == 0 || !counted {
        return Ok(Some((root, parent_author)));
    }
    sqlx::query("UPDATE comments SET reply_cnt = reply_cnt + 1 WHERE id = $1")
        .bind(parent_root)
        .execute(&mut *tx)
        .await?;
    Ok(Some((parent_root, parent_author)))
}

/// Removes leaf `id`, then walks up from `parent_id`: each ancestor loses a child, and a
/// tombstone left without children goes too (nothing points at it any more).
async fn remove_with_empty_ancestors(
    tx: &mut AnyConnection,
    id: i64,
    mut parent_id: i64,
) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM comments WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    while parent_id != 0 {
        let parent: Option<(i64, i64, i64)> = sqlx::query_as(
            "UPDATE comments SET child_cnt = child_cnt - 1 WHERE id = $1 \
             RETURNING deleted, child_cnt, parent_id",
        )
        .bind(parent_id)
        .fetch_optional(&mut *tx)
        .await?;
        match parent {
            Some((1, 0, grandparent)) => {
                sqlx::query("DELETE FROM comments WHERE id = $1")
                    .bind(parent_id)
                    .execute(&mut *tx)
                    .await?;
                parent_id = grandparent;
            }
            _ => break,
        }
    }
    Ok(())
}

/// The article id to put in events: the object's id when it is an article.
fn article_of(biz: Biz, biz_id: i64) -> i64 {
    match biz {
        Biz::Article => biz_id,
    }
}

/// Records `event` once for the object's author and once for the author of the comment
/// replied to — never for the comment's own author, never twice for one person. Returns how
/// many it recorded.
async fn record(
    tx: &mut AnyConnection,
    biz: Biz,
    biz_id: i64,
    event: CommentEvent,
    owner: i64,
    parent_author: Option<i64>,
) -> sqlx::Result<usize> {
    let mut recipients = vec![owner];
    if let Some(parent_author) = parent_author {
        if parent_author != owner {
            recipients.push(parent_author);
        }
    }
    let key = format!("{biz}:{biz_id}");
    let events: Vec<(String, CommentEvent)> = recipients
        .into_iter()
        .filter(|recipient| *recipient != event.uid)
        .map(|recipient| {
            (
                key.clone(),
                CommentEvent {
                    recipient,
                    ..event.clone()
                },
            )
        })
        .collect();
    outbox::record_many(tx, TOPIC_COMMENT_CHANGED, &events, event.time).await?;
    Ok(events.len())
}

/// A row of a listing ([`COLUMNS`]).
#[derive(sqlx::FromRow)]
struct CommentRow {
    id: i64,
    biz_id: i64,
    uid: i64,
    root_id: i64,
    parent_id: i64,
    content: String,
    /// 0 or 1 (an integer column on both databases).
    deleted: i64,
    reply_cnt: i64,
    ctime: i64,
    nickname: Option<String>,
}

/// A row of a listing as the API shows it: tombstones name no author and show no text; text
/// goes out HTML-escaped. `top_level` rows carry their reply count.
fn view(row: CommentRow, top_level: bool) -> CommentView {
    let deleted = row.deleted != 0;
    CommentView {
        id: row.id,
        biz_id: row.biz_id,
        author: (!deleted).then(|| Person::new(row.uid, row.nickname.as_deref())),
        content: if deleted {
            String::new()
        } else {
            platform::text::escape_html(&row.content)
        },
        parent_id: (row.parent_id != 0).then_some(row.parent_id),
        root_id: (row.root_id != 0).then_some(row.root_id),
        deleted,
        ctime: row.ctime,
        replies: None,
        reply_cnt: top_level.then_some(row.reply_cnt),
    }
}
