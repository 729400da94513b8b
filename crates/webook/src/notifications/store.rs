//! SQL for notifications (`notifications`, `notification_sources`, `notification_muted`), one
//! implementation for SQLite and PostgreSQL.
//!
//! **Writing.** [`NotificationStore::apply`] applies a batch of [`Change`]s in one transaction
//! that first records the batch's event ids as applied by the group
//! ([`dedup::first_deliveries`]): a redelivered event is skipped, so nothing is written twice.
//! Every change moves one *source* (`notification_sources`: one actor's like, collect, follow,
//! comment or reward towards one recipient), whose row keeps whether it stands, the time of the
//! newest event applied to it and the notification it counts in:
//! - its row is created if missing and then touched (`UPDATE … RETURNING`), which locks it
//!   (PostgreSQL; SQLite has one writer), so two transactions moving one source queue;
//! - an event older than the source's time changes nothing (a like delivered after its unlike
//!   leaves the unlike in force);
//! - a source turning on adds its actor to the notification (`INSERT … ON CONFLICT DO UPDATE`
//!   on the row's unique key (recipient, kind, group key): `actor_cnt + 1`, unread again, on top)
//!   and a source turning off takes it away (`actor_cnt - 1`; the row goes at 0). Only real
//!   transitions of a source move a count, and each moves it by one in the transaction that
//!   flips the source, so a row's `actor_cnt` is exactly the number of its sources that stand,
//!   however likes and unlikes interleave.
//!
//! Nothing is written for the actor themself, nor for a kind the recipient turned off (the
//! source is still recorded, without a notification, so its later undoing stays exact). A
//! withdrawal deletes the article's rows and leaves their sources pointing at ids that are never
//! handed out again, so undoing one later takes nothing from anyone; the retention deletes rows
//! by age, and sources by age once they count in no row.
//!
//! **Reading.** A page is one keyset range of `notifications_page` (recipient, utime, id), with
//! the article's current title, then one statement for the latest actors of all its rows (the
//! sources that stand, newest first). The unread count is an index-only count of
//! `notifications_unread` (recipient, is_read): no counter row to keep in step.

use std::collections::HashMap;

use sqlx::AnyConnection;

use crate::{
    biz::Biz,
    moderation::ModerationEvent,
    notifications::model::{
        excerpt, period_key, AboutArticle, AboutComment, AboutModeration, Change, Kind,
        NotificationView, Source, SHOWN_ACTORS,
    },
    user::Person,
};
use platform::{
    db::{kind_of, placeholders, Db},
    events::dedup,
};

/// What applying a batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Events applied (not seen before).
    pub events: usize,
    /// Notifications written or given a new actor.
    pub written: u64,
    /// Notifications removed or given one actor less.
    pub removed: u64,
    /// Recipients whose inbox changed.
    pub recipients: Vec<i64>,
}

/// A source's key: (recipient, source, subject, actor).
#[derive(Debug, Clone, Copy)]
struct SourceKey {
    recipient: i64,
    source: Source,
    subject: i64,
    actor: i64,
}

/// A source's state before a change.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
struct SourceState {
    on_flag: i64,
    time: i64,
    notification_id: i64,
}

/// A notification to add an actor to.
struct Target<'a> {
    recipient: i64,
    kind: Kind,
    group_key: String,
    article_id: i64,
    comment_id: i64,
    excerpt: &'a str,
    amt: i64,
    time: i64,
}

/// Reads and writes notifications.
#[derive(Debug, Clone)]
pub struct NotificationStore {
    db: Db,
}

impl NotificationStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Applies `changes` (each with its event id) in one transaction, skipping the events
    /// `group` applied before.
    pub async fn apply(
        &self,
        group: &str,
        changes: Vec<(String, Change)>,
        now: i64,
    ) -> sqlx::Result<Applied> {
        let mut tx = self.db.writer().begin().await?;
        let kind = kind_of(&tx);
        let fresh =
            dedup::first_deliveries(&mut tx, kind, group, changes, |(id, _)| id.as_str(), now)
                .await?;
        let mut applied = Applied {
            events: fresh.len(),
            ..Applied::default()
        };
        // An article's author never changes: read once per batch, not once per like of it.
        let mut authors = HashMap::new();
        for (_, change) in &fresh {
            apply_one(&mut tx, change, &mut authors, &mut applied).await?;
        }
        tx.commit().await?;
        applied.recipients.sort_unstable();
        applied.recipients.dedup();
        Ok(applied)
    }

    /// A page of `uid`'s notifications, newest first, strictly after `after` (utime, id); at
    /// most `limit` rows.
    pub async fn page(
        &self,
        uid: i64,
        after: Option<[i64; 2]>,
        limit: i64,
    ) -> sqlx::Result<Vec<NotificationView>> {
        let [utime, id] = after.unwrap_or([i64::MAX, i64::MAX]);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT n.id, n.kind, n.article_id, n.comment_id, n.excerpt, n.amt, n.actor_cnt, \
             n.is_read, n.utime, n.group_key, n.action, n.reason, n.until_ms, \
             p.title AS title, p.status AS status \
             FROM notifications n LEFT JOIN published_articles p ON p.id = n.article_id \
             WHERE n.recipient = $1 AND (n.utime < $2 OR (n.utime = $2 AND n.id < $3)) \
             ORDER BY n.utime DESC, n.id DESC LIMIT $4",
        )
        .bind(uid)
        .bind(utime)
        .bind(id)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        let mut actors = self
            .actors(&rows.iter().map(|row| row.id).collect::<Vec<_>>())
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let actors = actors.remove(&row.id).unwrap_or_default();
                row.view(actors)
            })
            .collect())
    }

    /// The latest [`SHOWN_ACTORS`] actors of each notification of `ids`, newest first.
    async fn actors(&self, ids: &[i64]) -> sqlx::Result<HashMap<i64, Vec<Person>>> {
        let mut by_row: HashMap<i64, Vec<Person>> = HashMap::with_capacity(ids.len());
        if ids.is_empty() {
            return Ok(by_row);
        }
        let sql = format!(
            "SELECT s.notification_id, s.actor_id, u.nickname FROM (\
             SELECT notification_id, actor_id, time, ROW_NUMBER() OVER (\
             PARTITION BY notification_id ORDER BY time DESC, actor_id DESC) AS rn \
             FROM notification_sources WHERE on_flag = 1 AND notification_id IN ({})) s \
             LEFT JOIN users u ON u.id = s.actor_id WHERE s.rn <= {SHOWN_ACTORS} \
             ORDER BY s.notification_id, s.rn",
            placeholders(1, ids.len())
        );
        let mut query = sqlx::query_as::<_, (i64, i64, Option<String>)>(&sql);
        for id in ids {
            query = query.bind(*id);
        }
        for (row, actor, nickname) in query.fetch_all(self.db.pool()).await? {
            by_row
                .entry(row)
                .or_default()
                .push(Person::new(actor, nickname.as_deref()));
        }
        Ok(by_row)
    }

    /// How many of `uid`'s notifications are unread (an index-only count).
    pub async fn unread(&self, uid: i64) -> sqlx::Result<i64> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM notifications WHERE recipient = $1 AND is_read = 0",
        )
        .bind(uid)
        .fetch_one(self.db.pool())
        .await
    }

    /// Marks `uid`'s notification `id` read; `false` if `uid` has no such notification.
    pub async fn mark_read(&self, uid: i64, id: i64) -> sqlx::Result<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "UPDATE notifications SET is_read = 1 WHERE id = $1 AND recipient = $2 RETURNING id",
        )
        .bind(id)
        .bind(uid)
        .fetch_optional(self.db.writer())
        .await?;
        Ok(found.is_some())
    }

    /// Marks every notification of `uid` read; returns how many were unread.
    pub async fn mark_all_read(&self, uid: i64) -> sqlx::Result<u64> {
        Ok(
            sqlx::query(
                "UPDATE notifications SET is_read = 1 WHERE recipient = $1 AND is_read = 0",
            )
            .bind(uid)
            .execute(self.db.writer())
            .await?
            .rows_affected(),
        )
    }

    /// The kinds `uid` turned off, in [`Kind::ALL`] order.
    pub async fn muted(&self, uid: i64) -> sqlx::Result<Vec<Kind>> {
        let names: Vec<String> =
            sqlx::query_scalar("SELECT kind FROM notification_muted WHERE uid = $1")
                .bind(uid)
                .fetch_all(self.db.pool())
                .await?;
        let mut kinds: Vec<Kind> = names.iter().filter_map(|n| Kind::from_name(n)).collect();
        kinds.sort_unstable();
        Ok(kinds)
    }

    /// Replaces the kinds `uid` turned off with `kinds`, in one transaction.
    pub async fn set_muted(&self, uid: i64, kinds: &[Kind]) -> sqlx::Result<()> {
        let mut tx = self.db.writer().begin().await?;
        sqlx::query("DELETE FROM notification_muted WHERE uid = $1")
            .bind(uid)
            .execute(&mut *tx)
            .await?;
        for kind in kinds {
            sqlx::query(
                "INSERT INTO notification_muted (uid, kind) VALUES ($1, $2) \
                 ON CONFLICT (uid, kind) DO NOTHING",
            )
            .bind(uid)
            .bind(kind.as_str())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }

    /// Deletes up to `limit` notifications last changed before `before` (ms), and the sources
    /// last moved before it that count in no notification any more; returns the notifications
    /// deleted.
    pub async fn purge_before(&self, before: i64, limit: i64) -> sqlx::Result<u64> {
        let mut tx = self.db.writer().begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM notifications WHERE utime < $1 ORDER BY utime LIMIT $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        if !ids.is_empty() {
            let sql = format!(
                "DELETE FROM notifications WHERE id IN ({})",
                placeholders(1, ids.len())
            );
            let mut query = sqlx::query(&sql);
            for id in &ids {
                query = query.bind(*id);
            }
            query.execute(&mut *tx).await?;
        }
        // A source that still counts in a row stays with it (its undoing must find it).
        sqlx::query(
            "DELETE FROM notification_sources WHERE time < $1 AND NOT EXISTS \
             (SELECT 1 FROM notifications n WHERE n.id = notification_sources.notification_id)",
        )
        .bind(before)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(ids.len() as u64)
    }
}

/// Applies one change in the batch's transaction; `authors` holds the authors of articles
/// already read in it (`None`: no such article).
async fn apply_one(
    tx: &mut AnyConnection,
    change: &Change,
    authors: &mut HashMap<i64, Option<i64>>,
    applied: &mut Applied,
) -> sqlx::Result<()> {
    match change {
        Change::Interaction {
            source,
            actor,
            article,
            on,
            time,
        } => {
            let author = match authors.get(article) {
                Some(author) => *author,
                None => {
                    let author = Biz::Article.owner(&mut *tx, *article).await?;
                    authors.insert(*article, author);
                    author
                }
            };
            let Some(author) = author else {
                return Ok(());
            };
            let kind = match source {
                Source::Collect => Kind::Collect,
                _ => Kind::Like,
            };
            let key = SourceKey {
                recipient: author,
                source: *source,
                subject: *article,
                actor: *actor,
            };
            let target = Target {
                recipient: author,
                kind,
                group_key: period_key(*article, *time),
                article_id: *article,
                comment_id: 0,
                excerpt: "",
                amt: 0,
                time: *time,
            };
            move_source(tx, key, *on, *time, target, applied).await
        }
        Change::Follow {
            follower,
            followee,
            on,
            time,
        } => {
            let key = SourceKey {
                recipient: *followee,
                source: Source::Follow,
                subject: 0,
                actor: *follower,
            };
            let target = Target {
                recipient: *followee,
                kind: Kind::Follow,
                group_key: follower.to_string(),
                article_id: 0,
                comment_id: 0,
                excerpt: "",
                amt: 0,
                time: *time,
            };
            move_source(tx, key, *on, *time, target, applied).await
        }
        Change::Comment(comment) => {
            // A reply to the recipient's comment is a reply, even under their own article.
            let replied_to: Option<i64> = sqlx::query_scalar(
                "SELECT p.uid FROM comments c JOIN comments p ON p.id = c.parent_id \
                 WHERE c.id = $1",
            )
            .bind(comment.id)
            .fetch_optional(&mut *tx)
            .await?;
            let kind = if replied_to == Some(comment.recipient) {
                Kind::Reply
            } else {
                Kind::Comment
            };
            let key = SourceKey {
                recipient: comment.recipient,
                source: Source::Comment,
                subject: comment.id,
                actor: comment.uid,
            };
            let text = excerpt(&comment.content);
            let target = Target {
                recipient: comment.recipient,
                kind,
                group_key: comment.id.to_string(),
                article_id: comment.article_id,
                comment_id: comment.id,
                excerpt: &text,
                amt: 0,
                time: comment.time,
            };
            move_source(tx, key, comment.on, comment.time, target, applied).await
        }
        Change::Reward {
            rid,
            payer,
            author,
            article,
            amt,
            on,
            time,
        } => {
            let key = SourceKey {
                recipient: *author,
                source: Source::Reward,
                subject: *rid,
                actor: *payer,
            };
            let target = Target {
                recipient: *author,
                kind: Kind::Reward,
                group_key: rid.to_string(),
                article_id: *article,
                comment_id: 0,
                excerpt: "",
                amt: *amt,
                time: *time,
            };
            move_source(tx, key, *on, *time, target, applied).await
        }
        Change::Withdrawn { article } => {
            // Its likes', collects' and comments' notifications go. Their sources stay as they
            // are: an unlike after the withdrawal finds its like, and the row it pointed to is
            // gone (ids are never handed out again), so it takes nothing from anyone.
            let gone: Vec<i64> = sqlx::query_scalar(
                "DELETE FROM notifications WHERE article_id = $1 \
                 AND kind IN ('like', 'collect', 'comment', 'reply') RETURNING recipient",
            )
            .bind(*article)
            .fetch_all(&mut *tx)
            .await?;
            applied.removed += gone.len() as u64;
            applied.recipients.extend(gone);
            Ok(())
        }
        Change::Moderation(event) => moderated(tx, event, applied).await,
    }
}

/// Sets the recipient's notification of a moderated target to `event`'s action: one row per
/// target, unread and on top when the action differs from the one it shows; a repeat of that
/// action (an admin's retry), an event older than the row, and a muted kind change nothing.
async fn moderated(
    tx: &mut AnyConnection,
    event: &ModerationEvent,
    applied: &mut Applied,
) -> sqlx::Result<()> {
    if event.recipient <= 0 || is_muted(tx, event.recipient, Kind::Moderation).await? {
        return Ok(());
    }
    let group_key = format!("{}:{}", event.target, event.id);
    let until = event.until.unwrap_or(0);
    let shown: Option<(String, i64, i64)> = sqlx::query_as(
        "SELECT action, until_ms, utime FROM notifications \
         WHERE recipient = $1 AND kind = $2 AND group_key = $3",
    )
    .bind(event.recipient)
    .bind(Kind::Moderation.as_str())
    .bind(&group_key)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some((action, shown_until, utime)) = shown {
        if (action == event.action && shown_until == until) || utime > event.time {
            return Ok(());
        }
    }
    sqlx::query(
        "INSERT INTO notifications (recipient, kind, group_key, article_id, comment_id, excerpt, \
         amt, actor_cnt, is_read, ctime, utime, action, reason, until_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, 0, 0, 0, $7, $7, $8, $9, $10) \
         ON CONFLICT (recipient, kind, group_key) DO UPDATE SET is_read = 0, \
         utime = excluded.utime, action = excluded.action, reason = excluded.reason, \
         until_ms = excluded.until_ms",
    )
    .bind(event.recipient)
    .bind(Kind::Moderation.as_str())
    .bind(&group_key)
    .bind(event.article)
    .bind(event.comment)
    .bind(excerpt(&event.excerpt))
    .bind(event.time)
    .bind(&event.action)
    .bind(&event.reason)
    .bind(until)
    .execute(&mut *tx)
    .await?;
    applied.written += 1;
    applied.recipients.push(event.recipient);
    Ok(())
}

/// Turns source `key` on or off as of `time`, and its notification with it.
async fn move_source(
    tx: &mut AnyConnection,
    key: SourceKey,
    on: bool,
    time: i64,
    target: Target<'_>,
    applied: &mut Applied,
) -> sqlx::Result<()> {
    if key.recipient == key.actor || key.recipient <= 0 {
        // Never a notification to oneself.
        return Ok(());
    }
    let state = lock_source(tx, key).await?;
    if time < state.time {
        // Older than what the source already reflects: delivered late, changes nothing.
        return Ok(());
    }
    let notification_id = match (state.on_flag != 0, on) {
        // No transition (a repeated event): only the time moves.
        (true, true) => state.notification_id,
        (false, false) => 0,
        (false, true) => {
            if is_muted(tx, key.recipient, target.kind).await? {
                0
            } else {
                let id = add_actor(tx, &target).await?;
                applied.written += 1;
                applied.recipients.push(key.recipient);
                id
            }
        }
        (true, false) => {
            if state.notification_id != 0 {
                remove_actor(tx, key.source, state.notification_id).await?;
                applied.removed += 1;
                applied.recipients.push(key.recipient);
            }
            0
        }
    };
    sqlx::query(
        "UPDATE notification_sources SET on_flag = $5, time = $6, notification_id = $7 \
         WHERE recipient = $1 AND source = $2 AND subject_id = $3 AND actor_id = $4",
    )
    .bind(key.recipient)
    .bind(key.source.as_str())
    .bind(key.subject)
    .bind(key.actor)
    .bind(i64::from(on))
    .bind(time)
    .bind(notification_id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The state of source `key`, its row created if missing and locked until the transaction ends.
async fn lock_source(tx: &mut AnyConnection, key: SourceKey) -> sqlx::Result<SourceState> {
    sqlx::query(
        "INSERT INTO notification_sources \
         (recipient, source, subject_id, actor_id, on_flag, time, notification_id) \
         VALUES ($1, $2, $3, $4, 0, $5, 0) \
         ON CONFLICT (recipient, source, subject_id, actor_id) DO NOTHING",
    )
    .bind(key.recipient)
    .bind(key.source.as_str())
    .bind(key.subject)
    .bind(key.actor)
    .bind(i64::MIN)
    .execute(&mut *tx)
    .await?;
    sqlx::query_as(
        "UPDATE notification_sources SET time = time \
         WHERE recipient = $1 AND source = $2 AND subject_id = $3 AND actor_id = $4 \
         RETURNING on_flag, time, notification_id",
    )
    .bind(key.recipient)
    .bind(key.source.as_str())
    .bind(key.subject)
    .bind(key.actor)
    .fetch_one(&mut *tx)
    .await
}

/// Whether `uid` turned `kind` off.
async fn is_muted(tx: &mut AnyConnection, uid: i64, kind: Kind) -> sqlx::Result<bool> {
    let found: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM notification_muted WHERE uid = $1 AND kind = $2")
            .bind(uid)
            .bind(kind.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    Ok(found.is_some())
}

/// Adds an actor to the notification of `target` (created with one), unread and on top; its id.
async fn add_actor(tx: &mut AnyConnection, target: &Target<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO notifications (recipient, kind, group_key, article_id, comment_id, excerpt, \
         amt, actor_cnt, is_read, ctime, utime) VALUES ($1, $2, $3, $4, $5, $6, $7, 1, 0, $8, $8) \
         ON CONFLICT (recipient, kind, group_key) DO UPDATE SET \
         actor_cnt = notifications.actor_cnt + 1, is_read = 0, utime = excluded.utime \
         RETURNING id",
    )
    .bind(target.recipient)
    .bind(target.kind.as_str())
    .bind(&target.group_key)
    .bind(target.article_id)
    .bind(target.comment_id)
    .bind(target.excerpt)
    .bind(target.amt)
    .bind(target.time)
    .fetch_one(&mut *tx)
    .await
}

/// Takes one actor away from notification `id`: grouped rows lose one and go at 0; the others
/// (one actor each) go.
async fn remove_actor(tx: &mut AnyConnection, source: Source, id: i64) -> sqlx::Result<()> {
    match source {
        Source::Like | Source::Collect => {
            let left: Option<i64> = sqlx::query_scalar(
                "UPDATE notifications SET actor_cnt = actor_cnt - 1 WHERE id = $1 \
                 RETURNING actor_cnt",
            )
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
            if left.is_some_and(|left| left <= 0) {
                sqlx::query("DELETE FROM notifications WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        Source::Follow | Source::Comment | Source::Reward => {
            sqlx::query("DELETE FROM notifications WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
    }
    Ok(())
}

/// A row of a page.
#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    kind: String,
    article_id: i64,
    comment_id: i64,
    excerpt: String,
    amt: i64,
    actor_cnt: i64,
    is_read: i64,
    utime: i64,
    group_key: String,
    action: String,
    reason: String,
    until_ms: i64,
    title: Option<String>,
    status: Option<i64>,
}

impl Row {
    fn view(self, actors: Vec<Person>) -> NotificationView {
        let moderation = self.kind == Kind::Moderation.as_str();
        // The published title; none once withdrawn (status 2 is published) — but a moderation
        // notice names its recipient's own article, whatever became of it.
        let title = match (self.title, self.status) {
            (Some(title), Some(2)) => title,
            (Some(title), Some(_)) if moderation => title,
            _ => String::new(),
        };
        let about = moderation.then(|| AboutModeration {
            action: self.action,
            target: self
                .group_key
                .split_once(':')
                .map_or("", |(target, _)| target)
                .to_owned(),
            reason: self.reason,
            until: (self.until_ms != 0).then_some(self.until_ms),
        });
        NotificationView {
            id: self.id,
            actors,
            actor_cnt: self.actor_cnt,
            article: (self.article_id != 0).then_some(AboutArticle {
                id: self.article_id,
                title,
            }),
            comment: (self.comment_id != 0).then(|| AboutComment {
                id: self.comment_id,
                excerpt: platform::text::escape_html(&self.excerpt),
            }),
            amt: (self.kind == Kind::Reward.as_str()).then_some(self.amt),
            moderation: about,
            kind: self.kind,
            read: self.is_read != 0,
            time: self.utime,
        }
    }
}
