//! The writing side of `webook seed` ([`super`]): each [`Batch`] the generator sends goes to
//! the feature that owns its table — `crate::user`, `crate::article`, `crate::interactive`,
//! `crate::feed`, `crate::comment`, each with the bulk `INSERT`s of its `seed` module — inside
//! the transaction its phase calls for, and is counted in the [`Report`].
//!
//! Transactions: users and articles, one per batch; the interactions phase, the follows-and-feed
//! phase and the comments phase, one each for all their batches ([`Spans`]), begun at the
//! phase's first batch and committed when the next phase's first batch arrives or the
//! generator is done. The feed's transaction first suspends the non-unique indexes of the
//! tables the feed names ([`crate::feed::seeded_bulk_tables`]) and builds them again just
//! before it commits ([`indexes`](super::indexes)). Whatever the writer has not committed when
//! it fails rolls back: every state it leaves is consistent.

use std::time::Instant;

use anyhow::Context;
use indicatif::ProgressBar;
use sqlx::{Any, Transaction};

use super::{
    generator::Batch,
    indexes::{restore_indexes, suspend_indexes},
    Plan, Report,
};
use crate::{
    article::{self, SeededArticle},
    comment::{self, SeededComment},
    feed::{
        self, Delivery, SeededFeedItem, SeededFollow, SeededFollowCount, SeededInboxRow,
        SeededPullAuthor,
    },
    interactive::{self, LikeOrCollect, SeededCommentCount, SeededCounters, SeededInteraction},
    user::{self, SeededUser},
};
use platform::{config::DatabaseKind, db::Db};

/// Writes the generator's batches and counts what it wrote.
pub(super) struct Writer<'a> {
    db: &'a Db,
    kind: DatabaseKind,
    progress: &'a ProgressBar,
    /// The hash of every seeded user's password.
    password_hash: String,
    /// `--until`: when the articles' comment counts changed.
    until: i64,
    report: Report,
    spans: Spans<'a>,
    phase_started: Instant,
}

impl<'a> Writer<'a> {
    /// A writer of `plan`'s rows into `db`, adding to `report` (which holds the first ids).
    pub(super) fn new(
        db: &'a Db,
        plan: &Plan,
        progress: &'a ProgressBar,
        password_hash: String,
        report: Report,
    ) -> Self {
        Self {
            db,
            kind: db.kind(),
            progress,
            password_hash,
            until: plan.until,
            report,
            spans: Spans {
                db,
                progress,
                feed_tables: feed::seeded_bulk_tables(plan.follows > 0),
                open: None,
            },
            phase_started: Instant::now(),
        }
    }

    /// Writes one batch (module docs).
    pub(super) async fn write(&mut self, batch: Batch) -> anyhow::Result<()> {
        match batch {
            Batch::Phase { name, rows } => {
                self.start_phase(name, rows);
                Ok(())
            }
            Batch::Users(rows) => self.users(&rows).await,
            Batch::Articles(rows) => self.articles(&rows).await,
            Batch::Counters(rows) => self.counters(&rows).await,
            Batch::Interactions(kind, rows) => self.interactions(kind, &rows).await,
            Batch::Follows(rows) => self.follows(&rows).await,
            Batch::FollowCounts(rows) => self.follow_counts(&rows).await,
            Batch::FeedItems(rows) => self.feed_items(&rows).await,
            Batch::PullAuthors(rows) => self.pull_authors(&rows).await,
            Batch::Inbox(rows) => self.inbox(&rows).await,
            Batch::Comments(rows) => self.comments(&rows).await,
            Batch::CommentCounts(rows) => self.comment_counts(&rows).await,
        }
    }

    /// Commits the open transaction, if any, and returns what was written.
    pub(super) async fn finish(self) -> anyhow::Result<Report> {
        self.spans.commit().await?;
        Ok(self.report)
    }

    fn start_phase(&mut self, name: &'static str, rows: u64) {
        let progress = self.progress;
        progress.set_message(name);
        progress.set_length(rows);
        progress.set_position(0);
        progress.reset_eta();
        tracing::debug!(
            phase = name,
            rows,
            previous_secs = self.phase_started.elapsed().as_secs_f64(),
            "seed phase"
        );
        self.phase_started = Instant::now();
    }

    async fn users(&mut self, rows: &[SeededUser]) -> anyhow::Result<()> {
        let mut tx = self.db.writer().begin().await?;
        user::insert_seeded_users(&mut tx, self.kind, rows, &self.password_hash)
            .await
            .with_context(|| describe("users", rows.first().map(|r| r.id), rows.len()))?;
        tx.commit().await?;
        self.report.users += rows.len() as u64;
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn articles(&mut self, rows: &[SeededArticle]) -> anyhow::Result<()> {
        let mut tx = self.db.writer().begin().await?;
        article::insert_seeded_articles(&mut tx, self.kind, rows)
            .await
            .with_context(|| describe("articles", rows.first().map(|r| r.id), rows.len()))?;
        tx.commit().await?;
        for row in rows {
            match row.status {
                1 => self.report.drafts += 1,
                3 => self.report.withdrawn += 1,
                _ => self.report.published += 1,
            }
        }
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn counters(&mut self, rows: &[SeededCounters]) -> anyhow::Result<()> {
        let tx = self.spans.tx(Spanning::Interactions).await?;
        interactive::insert_seeded_counters(tx, self.kind, rows)
            .await
            .context("writing article counters")?;
        self.report.counters += rows.len() as u64;
        self.report.reads += rows.iter().map(|r| r.reads as u64).sum::<u64>();
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn interactions(
        &mut self,
        kind: LikeOrCollect,
        rows: &[SeededInteraction],
    ) -> anyhow::Result<()> {
        let tx = self.spans.tx(Spanning::Interactions).await?;
        interactive::insert_seeded_interactions(tx, self.kind, kind, rows)
            .await
            .with_context(|| format!("writing {kind:?}s"))?;
        match kind {
            LikeOrCollect::Like => self.report.likes += rows.len() as u64,
            LikeOrCollect::Collect => self.report.collects += rows.len() as u64,
        }
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn follows(&mut self, rows: &[SeededFollow]) -> anyhow::Result<()> {
        let tx = self.spans.tx(Spanning::Feed).await?;
        feed::insert_seeded_follows(tx, self.kind, rows)
            .await
            .context("writing follows")?;
        self.report.follows += rows.len() as u64;
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn follow_counts(&mut self, rows: &[SeededFollowCount]) -> anyhow::Result<()> {
        let tx = self.spans.tx(Spanning::Feed).await?;
        feed::insert_seeded_follow_counts(tx, self.kind, rows)
            .await
            .context("writing follow counts")?;
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn feed_items(&mut self, rows: &[SeededFeedItem]) -> anyhow::Result<()> {
        let tx = self.spans.tx(Spanning::Feed).await?;
        feed::insert_seeded_feed_items(tx, self.kind, rows)
            .await
            .with_context(|| describe("feed items", rows.first().map(|r| r.id), rows.len()))?;
        self.report.feed_items += rows.len() as u64;
        self.report.pulled += rows
            .iter()
            .filter(|r| r.delivery == Delivery::Pulled)
            .count() as u64;
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn pull_authors(&mut self, rows: &[SeededPullAuthor]) -> anyhow::Result<()> {
        let tx = self.spans.tx(Spanning::Feed).await?;
        feed::insert_seeded_pull_authors(tx, self.kind, rows)
            .await
            .context("writing pull authors")?;
        self.report.pull_authors += rows.len() as u64;
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn inbox(&mut self, rows: &[SeededInboxRow]) -> anyhow::Result<()> {
        let tx = self.spans.tx(Spanning::Feed).await?;
        feed::insert_seeded_inbox_rows(tx, self.kind, rows)
            .await
            .context("writing inboxes")?;
        self.report.inbox_rows += rows.len() as u64;
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn comments(&mut self, rows: &[SeededComment]) -> anyhow::Result<()> {
        let tx = self.spans.tx(Spanning::Comments).await?;
        comment::insert_seeded_comments(tx, self.kind, rows)
            .await
            .with_context(|| describe("comments", rows.first().map(|r| r.id), rows.len()))?;
        self.report.comments += rows.len() as u64;
        self.progress.inc(rows.len() as u64);
        Ok(())
    }

    async fn comment_counts(&mut self, rows: &[SeededCommentCount]) -> anyhow::Result<()> {
        let tx = self.spans.tx(Spanning::Comments).await?;
        interactive::add_seeded_comment_counts(tx, self.kind, rows, self.until)
            .await
            .context("writing comment counts")?;
        self.report.commented_articles += rows.len() as u64;
        Ok(())
    }
}

/// The phases whose batches share one transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spanning {
    /// Counters, likes and collects.
    Interactions,
    /// Follows, their counts and the feed.
    Feed,
    /// Comments and the articles' comment counts.
    Comments,
}

impl Spanning {
    fn committing(self) -> &'static str {
        match self {
            Self::Interactions => "committing counters, likes and collects",
            Self::Feed => "committing follows and the feed",
            Self::Comments => "committing comments",
        }
    }
}

/// The open transaction of a phase whose batches share one, with the statements that create the
/// indexes it suspended (run before it commits).
struct OpenTransaction {
    phase: Spanning,
    tx: Transaction<'static, Any>,
    suspended: Vec<String>,
}

impl OpenTransaction {
    /// Builds the suspended indexes and commits.
    async fn commit(mut self, progress: &ProgressBar) -> anyhow::Result<()> {
        if !self.suspended.is_empty() {
            progress.set_message("indexing");
            restore_indexes(&mut self.tx, &self.suspended)
                .await
                .context("building the feed tables' indexes")?;
        }
        progress.set_message("committing");
        self.tx.commit().await.context(self.phase.committing())
    }
}

/// The transactions of the phases whose batches share one, begun at their first batch.
struct Spans<'a> {
    db: &'a Db,
    progress: &'a ProgressBar,
    /// The tables whose indexes the feed's transaction suspends.
    feed_tables: &'static [&'static str],
    open: Option<OpenTransaction>,
}

impl Spans<'_> {
    /// The transaction of `phase`: the open one, or a new one once the previous phase's is
    /// committed (the writer has one connection on SQLite). The feed's suspends the indexes of
    /// `feed_tables` first.
    async fn tx(&mut self, phase: Spanning) -> anyhow::Result<&mut Transaction<'static, Any>> {
        if let Some(previous) = self.open.take_if(|open| open.phase != phase) {
            let shown = self.progress.message();
            previous.commit(self.progress).await?;
            self.progress.set_message(shown);
        }
        let open = match self.open.take() {
            Some(open) => open,
            None => {
                let mut tx = self.db.writer().begin().await?;
                let suspended = match phase {
                    Spanning::Interactions | Spanning::Comments => Vec::new(),
                    Spanning::Feed => suspend_indexes(&mut tx, self.db.kind(), self.feed_tables)
                        .await
                        .context("suspending the feed tables' indexes")?,
                };
                OpenTransaction {
                    phase,
                    tx,
                    suspended,
                }
            }
        };
        Ok(&mut self.open.insert(open).tx)
    }

    /// Commits the open transaction, if any.
    async fn commit(self) -> anyhow::Result<()> {
        match self.open {
            Some(open) => open.commit(self.progress).await,
            None => Ok(()),
        }
    }
}

fn describe(what: &str, first_id: Option<i64>, rows: usize) -> String {
    match first_id {
        Some(first) => format!("writing {what} {first}–{}", first + rows as i64 - 1),
        None => format!("writing {what}"),
    }
}
