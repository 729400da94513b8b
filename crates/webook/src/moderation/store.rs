//! SQL of moderation (`moderation_reports`, `moderation_suspensions`, `moderation_log`), one
//! implementation for SQLite and PostgreSQL. What happens to the targets themselves is their
//! features' (articles, comments): this store only reads them for a report's snapshot.

use std::collections::HashMap;

use sqlx::{Any, Transaction};

use crate::moderation::model::{
    HeldArticle, HeldComment, Kind, LogEntry, ModerationEvent, Notice, QueueItem, ReportView,
    TOPIC_MODERATION_ACTED,
};
use platform::{
    db::{id_set, id_set_value, kind_of, Db},
    events::outbox,
};

/// Most reports one queue item carries (the newest).
pub const REPORTS_PER_ITEM: i64 = 20;
/// Longest snapshot kept of a target, in characters.
const SNAPSHOT_CHARS: usize = 2000;

/// Why a report was not filed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotFiled {
    /// No such target, or readers cannot see it.
    NoTarget,
    /// The reporter's own content or account.
    Own,
    /// The reporter already has an open report of it.
    Duplicate,
}

/// What a moderator's action tells about a comment ([`ModerationStore::comment_brief`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentBrief {
    /// Its author.
    pub author: i64,
    /// The article it is on (0: another kind of object).
    pub article: i64,
    /// Its text.
    pub content: String,
    /// Whether it is held for review.
    pub held: bool,
}

/// A suspension row: until (ms) and why.
pub type SuspensionRow = (i64, String);

/// What the write gate asks of an account: when it was created (`None`: no such account) and,
/// if suspended, until when and why.
pub type WriterState = (Option<i64>, Option<SuspensionRow>);

/// Reads and writes moderation's tables.
#[derive(Debug, Clone)]
pub struct ModerationStore {
    db: Db,
}

impl ModerationStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The owner and content of a target readers can see: a published article's author, title
    /// and text; a shown comment's author and text; a user and their nickname and about.
    async fn visible(&self, kind: Kind, id: i64) -> sqlx::Result<Option<(i64, String)>> {
        let pool = self.db.pool();
        Ok(match kind {
            Kind::Article => {
                let row: Option<(i64, String, String)> = sqlx::query_as(
                    "SELECT author_id, title, content FROM published_articles \
                     WHERE id = $1 AND status = 2",
                )
                .bind(id)
                .fetch_optional(pool)
                .await?;
                row.map(|(author, title, content)| {
                    (
                        author,
                        format!("{title}\n{}", crate::article::text_of(&content)),
                    )
                })
            }
            Kind::Comment => {
                sqlx::query_as("SELECT uid, content FROM comments WHERE id = $1 AND deleted = 0")
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
            }
            Kind::User => {
                let row: Option<(i64, String, String)> =
                    sqlx::query_as("SELECT id, nickname, about_me FROM users WHERE id = $1")
                        .bind(id)
                        .fetch_optional(pool)
                        .await?;
                row.map(|(uid, nickname, about)| (uid, format!("{nickname}\n{about}")))
            }
        })
    }

    /// Whether a comment (in any state) or a user `id` exists.
    pub async fn exists(&self, kind: Kind, id: i64) -> sqlx::Result<bool> {
        let sql = match kind {
            Kind::Article => "SELECT id FROM articles WHERE id = $1",
            Kind::Comment => "SELECT id FROM comments WHERE id = $1",
            Kind::User => "SELECT id FROM users WHERE id = $1",
        };
        let found: Option<i64> = sqlx::query_scalar(sql)
            .bind(id)
            .fetch_optional(self.db.pool())
            .await?;
        Ok(found.is_some())
    }

    /// Files `reporter`'s report of a target with its snapshot; returns its id.
    pub async fn file(
        &self,
        reporter: i64,
        kind: Kind,
        id: i64,
        reason: &str,
        note: &str,
        now: i64,
    ) -> sqlx::Result<Result<i64, NotFiled>> {
        let Some((owner, content)) = self.visible(kind, id).await? else {
            return Ok(Err(NotFiled::NoTarget));
        };
        if owner == reporter {
            return Ok(Err(NotFiled::Own));
        }
        let snapshot: String = content.chars().take(SNAPSHOT_CHARS).collect();
        let filed = sqlx::query_scalar(
            "INSERT INTO moderation_reports (target_kind, target_id, reporter, reason, note, \
             snapshot, state, ctime, closed_by, closed_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'open', $7, 0, 0) RETURNING id",
        )
        .bind(kind.as_str())
        .bind(id)
        .bind(reporter)
        .bind(reason)
        .bind(note)
        .bind(&snapshot)
        .bind(now)
        .fetch_one(self.db.writer())
        .await;
        match filed {
            Ok(id) => Ok(Ok(id)),
            Err(sqlx::Error::Database(err)) if err.is_unique_violation() => {
                Ok(Err(NotFiled::Duplicate))
            }
            Err(err) => Err(err),
        }
    }

    /// Targets with open reports: most reported first (`by_count`) or newest report first,
    /// then by target; `offset` and `limit` page them. Each with its newest open reports.
    pub async fn queue(
        &self,
        by_count: bool,
        offset: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<QueueItem>> {
        let order = if by_count {
            "open DESC, latest DESC"
        } else {
            "latest DESC, open DESC"
        };
        let groups: Vec<(String, i64, i64, i64)> = sqlx::query_as(&format!(
            "SELECT target_kind, target_id, COUNT(*) AS open, MAX(ctime) AS latest \
             FROM moderation_reports WHERE state = 'open' GROUP BY target_kind, target_id \
             ORDER BY {order}, target_kind, target_id LIMIT $1 OFFSET $2"
        ))
        .bind(limit)
        .bind(offset)
        .fetch_all(self.db.pool())
        .await?;
        let mut items = Vec::with_capacity(groups.len());
        for (kind, id, open, latest) in groups {
            let Some(kind) = Kind::parse(&kind) else {
                continue;
            };
            items.push(QueueItem {
                kind,
                id,
                open,
                latest,
                reports: self.reports(kind, id, true, REPORTS_PER_ITEM).await?,
            });
        }
        Ok(items)
    }

    /// Articles screening holds for review, oldest submission first (the one waiting longest).
    pub async fn held(&self, offset: i64, limit: i64) -> sqlx::Result<Vec<HeldArticle>> {
        sqlx::query_as(
            "SELECT id, author_id, title, abstract, hidden_reason AS reason, utime \
             FROM published_articles WHERE status = 4 AND held = 1 \
             ORDER BY utime, id LIMIT $1 OFFSET $2",
        )
        .bind(limit)
        .bind(offset)
        .fetch_all(self.db.pool())
        .await
    }

    /// Comments screening holds for review, the one waiting longest first.
    pub async fn held_comments(&self, offset: i64, limit: i64) -> sqlx::Result<Vec<HeldComment>> {
        sqlx::query_as(
            "SELECT id, uid AS author_id, biz, biz_id, parent_id, content, held_reason AS reason, \
             ctime FROM comments WHERE held = 1 ORDER BY id LIMIT $1 OFFSET $2",
        )
        .bind(limit)
        .bind(offset)
        .fetch_all(self.db.pool())
        .await
    }

    /// Comment `id`'s author, the article it is on (0: another kind of object), its text and
    /// whether it is held for review (a restore of it is an approval).
    pub async fn comment_brief(&self, id: i64) -> sqlx::Result<Option<CommentBrief>> {
        let row: Option<(i64, String, i64, String, i64)> =
            sqlx::query_as("SELECT uid, biz, biz_id, content, held FROM comments WHERE id = $1")
                .bind(id)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(
            row.map(|(author, biz, biz_id, content, held)| CommentBrief {
                author,
                article: if biz == "article" { biz_id } else { 0 },
                content,
                held: held == 1,
            }),
        )
    }

    /// A target's reports, newest first (only the open ones when `open`).
    pub async fn reports(
        &self,
        kind: Kind,
        id: i64,
        open: bool,
        limit: i64,
    ) -> sqlx::Result<Vec<ReportView>> {
        sqlx::query_as(
            "SELECT id, reporter, reason, note, snapshot, state, ctime FROM moderation_reports \
             WHERE target_kind = $1 AND target_id = $2 AND ($3 = 0 OR state = 'open') \
             ORDER BY id DESC LIMIT $4",
        )
        .bind(kind.as_str())
        .bind(id)
        .bind(i64::from(open))
        .bind(limit)
        .fetch_all(self.db.pool())
        .await
    }

    /// Closes a target's open reports as `state` (dismissed or actioned; none when empty),
    /// logs the action and, with a `notice`, records the [`ModerationEvent`] telling whom it
    /// concerns — in one transaction; returns (reports closed, log id).
    #[allow(clippy::too_many_arguments)]
    pub async fn close_and_log(
        &self,
        admin: i64,
        action: &str,
        kind: Kind,
        id: i64,
        state: &str,
        reason: &str,
        outcome: &str,
        now: i64,
        notice: Option<Notice>,
    ) -> sqlx::Result<(u64, i64)> {
        let mut tx = self.db.writer().begin().await?;
        let closed = close(&mut tx, admin, kind, id, state, now).await?;
        let log = log(&mut tx, admin, action, kind, id, reason, outcome, now).await?;
        if let Some(notice) = notice {
            announce(&mut tx, log, admin, kind, id, notice, reason, now).await?;
        }
        tx.commit().await?;
        Ok((closed, log))
    }

    /// Suspends `uid` until `until` (ms) for `reason`, replacing an earlier suspension; closes
    /// the user's open reports and logs it, in one transaction. Returns (changed, closed, log).
    ///
    /// With `announce`, the [`ModerationEvent`] telling the account goes with it.
    pub async fn suspend(
        &self,
        admin: i64,
        uid: i64,
        until: i64,
        reason: &str,
        now: i64,
        announce_it: bool,
    ) -> sqlx::Result<Option<(bool, u64, i64)>> {
        let mut tx = self.db.writer().begin().await?;
        let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM users WHERE id = $1")
            .bind(uid)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let before: Option<SuspensionRow> = sqlx::query_as(
            "SELECT suspended_until, reason FROM moderation_suspensions WHERE uid = $1",
        )
        .bind(uid)
        .fetch_optional(&mut *tx)
        .await?;
        let changed = before.as_ref().map(|(was, _)| *was) != Some(until);
        sqlx::query(
            "INSERT INTO moderation_suspensions (uid, suspended_until, reason, admin, ctime) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (uid) DO UPDATE SET \
             suspended_until = excluded.suspended_until, reason = excluded.reason, \
             admin = excluded.admin, ctime = excluded.ctime",
        )
        .bind(uid)
        .bind(until)
        .bind(reason)
        .bind(admin)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let closed = close(&mut tx, admin, Kind::User, uid, "actioned", now).await?;
        let outcome = if until == i64::MAX {
            "suspended for good".to_owned()
        } else {
            format!("suspended until {until}")
        };
        let outcome = if changed {
            outcome
        } else {
            format!("unchanged ({outcome})")
        };
        let log = log(
            &mut tx,
            admin,
            "suspend",
            Kind::User,
            uid,
            reason,
            &outcome,
            now,
        )
        .await?;
        if announce_it {
            let notice = Notice {
                recipient: uid,
                action: "suspend",
                article: 0,
                comment: 0,
                excerpt: String::new(),
                until: (until != i64::MAX).then_some(until),
            };
            announce(&mut tx, log, admin, Kind::User, uid, notice, reason, now).await?;
        }
        tx.commit().await?;
        Ok(Some((changed, closed, log)))
    }

    /// Lifts `uid`'s suspension and logs it; returns (changed, log).
    /// With `announce_it`, the [`ModerationEvent`] telling the account goes with it.
    pub async fn lift(
        &self,
        admin: i64,
        uid: i64,
        reason: &str,
        now: i64,
        announce_it: bool,
    ) -> sqlx::Result<(bool, i64)> {
        let mut tx = self.db.writer().begin().await?;
        let changed = sqlx::query("DELETE FROM moderation_suspensions WHERE uid = $1")
            .bind(uid)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        let outcome = if changed {
            "lifted"
        } else {
            "unchanged (not suspended)"
        };
        let log = log(
            &mut tx,
            admin,
            "lift",
            Kind::User,
            uid,
            reason,
            outcome,
            now,
        )
        .await?;
        if announce_it {
            let notice = Notice {
                recipient: uid,
                action: "lift",
                article: 0,
                comment: 0,
                excerpt: String::new(),
                until: None,
            };
            announce(&mut tx, log, admin, Kind::User, uid, notice, reason, now).await?;
        }
        tx.commit().await?;
        Ok((changed, log))
    }

    /// When user `uid`'s account was created and, if suspended, until when and why:
    /// [`Self::writer_states`] of one account.
    pub async fn writer_state(&self, uid: i64) -> sqlx::Result<WriterState> {
        Ok(self
            .writer_states(&[uid])
            .await?
            .remove(&uid)
            .unwrap_or((None, None)))
    }

    /// When each of `uids`' accounts was created and, if suspended, until when and why, in one
    /// query (the write gate's batches); accounts that do not exist are absent.
    pub async fn writer_states(&self, uids: &[i64]) -> sqlx::Result<HashMap<i64, WriterState>> {
        if uids.is_empty() {
            return Ok(HashMap::new());
        }
        // The engine of the connection it runs on: a move may re-route before one is taken.
        let mut connection = self.db.pool().acquire().await?;
        let kind = kind_of(&connection);
        // One statement text for any number of accounts (prepared once per connection).
        let sql = format!(
            "SELECT u.id, u.ctime, s.suspended_until, s.reason FROM users u \
             LEFT JOIN moderation_suspensions s ON s.uid = u.id WHERE u.id IN ({})",
            id_set(kind, 1)
        );
        let rows: Vec<(i64, i64, Option<i64>, Option<String>)> = sqlx::query_as(&sql)
            .bind(id_set_value(kind, uids))
            .fetch_all(&mut *connection)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(uid, ctime, until, reason)| {
                let suspension = until.map(|until| (until, reason.unwrap_or_default()));
                (uid, (Some(ctime), suspension))
            })
            .collect())
    }

    /// The published articles of `uid` (when their content is hidden with a suspension).
    pub async fn published_by(&self, uid: i64) -> sqlx::Result<Vec<i64>> {
        sqlx::query_scalar(
            "SELECT id FROM published_articles WHERE author_id = $1 AND status = 2 ORDER BY id",
        )
        .bind(uid)
        .fetch_all(self.db.pool())
        .await
    }

    /// The shown comments of `uid`.
    pub async fn comments_by(&self, uid: i64) -> sqlx::Result<Vec<i64>> {
        sqlx::query_scalar("SELECT id FROM comments WHERE uid = $1 AND deleted = 0 ORDER BY id")
            .bind(uid)
            .fetch_all(self.db.pool())
            .await
    }

    /// The audit log, newest first, before entry `before` (all when `None`), at most `limit`;
    /// only one target's when given.
    pub async fn log(
        &self,
        target: Option<(Kind, i64)>,
        before: Option<i64>,
        limit: i64,
    ) -> sqlx::Result<Vec<LogEntry>> {
        let (kind, id) = target.map_or(("", 0), |(kind, id)| (kind.as_str(), id));
        sqlx::query_as(
            "SELECT id, admin, action, target_kind, target_id, reason, outcome, ctime \
             FROM moderation_log WHERE id < $1 AND ($2 = '' OR (target_kind = $2 AND target_id = $3)) \
             ORDER BY id DESC LIMIT $4",
        )
        .bind(before.unwrap_or(i64::MAX))
        .bind(kind)
        .bind(id)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await
    }
}

/// Closes a target's open reports as `state` (none when `state` is empty); how many.
async fn close(
    tx: &mut Transaction<'static, Any>,
    admin: i64,
    kind: Kind,
    id: i64,
    state: &str,
    now: i64,
) -> sqlx::Result<u64> {
    if state.is_empty() {
        return Ok(0);
    }
    Ok(sqlx::query(
        "UPDATE moderation_reports SET state = $1, closed_by = $2, closed_at = $3 \
         WHERE target_kind = $4 AND target_id = $5 AND state = 'open'",
    )
    .bind(state)
    .bind(admin)
    .bind(now)
    .bind(kind.as_str())
    .bind(id)
    .execute(&mut **tx)
    .await?
    .rows_affected())
}

/// Appends an audit log entry; its id.
#[allow(clippy::too_many_arguments)]
async fn log(
    tx: &mut Transaction<'static, Any>,
    admin: i64,
    action: &str,
    kind: Kind,
    id: i64,
    reason: &str,
    outcome: &str,
    now: i64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO moderation_log (admin, action, target_kind, target_id, reason, outcome, ctime) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(admin)
    .bind(action)
    .bind(kind.as_str())
    .bind(id)
    .bind(reason)
    .bind(outcome)
    .bind(now)
    .fetch_one(&mut **tx)
    .await
}

/// Records the [`ModerationEvent`] of audit entry `log` for whom `notice` names — never to the
/// acting admin themself. Last in its transaction (the outbox's rule).
#[allow(clippy::too_many_arguments)]
async fn announce(
    tx: &mut Transaction<'static, Any>,
    log: i64,
    admin: i64,
    kind: Kind,
    id: i64,
    notice: Notice,
    reason: &str,
    now: i64,
) -> sqlx::Result<()> {
    if notice.recipient == admin || notice.recipient <= 0 {
        return Ok(());
    }
    let event = ModerationEvent {
        log,
        recipient: notice.recipient,
        action: notice.action.to_owned(),
        target: kind.as_str().to_owned(),
        id,
        article: notice.article,
        comment: notice.comment,
        excerpt: notice.excerpt,
        reason: reason.to_owned(),
        until: notice.until,
        time: now,
    };
    outbox::record(
        tx,
        TOPIC_MODERATION_ACTED,
        &notice.recipient.to_string(),
        &event,
        now,
    )
    .await
}
