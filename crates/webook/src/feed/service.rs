//! The feed: what happened around a reader, newest first — articles of the authors they follow,
//! likes of their articles, new followers, comments for them.
//!
//! **Writing (consumers).** Items come from outbox events, never from the request that caused
//! them: `article_published` / `article_withdrawn` (articles), `like_changed` (interactive),
//! `follow_changed` (follows) and `comment_changed` (comments).
//! Each consumer group (`feed`) makes the feed agree with the source tables as they are
//! ([`FeedStore`]), so redelivery and reordering are harmless. A published article is
//! - **pushed** when its author has at most `feed_push_threshold` followers: the consumer writes
//!   one inbox row per follower in batches of [`FANOUT_BATCH`] rows per transaction, resumably;
//! - **pulled** above it: one row in the author's outbox, merged into followers' feeds on read.
//!
//! The choice is made once per article, when its event is handled, and recorded on the item, so
//! an author crossing the threshold either way leaves every earlier item where it was: no item is
//! in two places (duplicate) or none (gap). Likes, follows and comments have one recipient each
//! and are always pushed. **Topics** a reader follows (`/topics/follow`) are pulled too: a page
//! reads, per followed topic, the newest article items carrying a tag of it — the very items of
//! those articles, pushed or pulled, so an article the reader also gets from its author is the
//! same item and the merge drops the second copy. Those items are found through the feed's
//! index of topics (`feed_topic_items`), which the consumers of `article_published` and
//! `tags_changed` keep: each writes the article's rows again from the tags it carries then, so
//! a page reads a few rows per topic however large the topic. A withdrawal takes the article's item out of every inbox and outbox
//! and the `like` and `comment` items about it out of their recipients' inboxes (the items stay,
//! so that a republication puts back those whose like or comment still stands).
//!
//! **Reading ([`FeedService::page`]).** One total order, (time, item id) descending; the cursor
//! is the last item served. The feed shows only what the source tables show now
//! ([`store::VISIBLE`](crate::feed::store::VISIBLE): published articles of authors the reader
//! follows, likes that are on, follows that hold, comments not deleted and not under a withdrawn
//! article), whether or not the consumers caught up. A page takes the reader's inbox heads and
//! the outbox heads of the pull authors they follow (found by probing from the smaller side: the
//! reader's followees or the pull authors site-wide) — at most the page size (+1) from each,
//! visible ones only: the database skips hidden rows inside the same index range scan, however
//! many there are (a withdrawn article's 40 likes cost no extra round trip) — merges them by that
//! order (k-way, duplicates dropped) and loads the winners in one query, checking visibility
//! again. Only what changed between those two statements can come up short; the page then looks
//! further, and after `MAX_ROUNDS` (4) rounds it stops only if it holds an item: **a page is
//! empty only at the end**. The statements one page took are counted ([`PageCost`], histogram
//! `feed_page_statements`): one round is two, plus one per 50 pull authors and one per 50 topics
//! followed, after two to four that find the pull authors and the topics followed.
//!
//! **Read-your-writes.** A follow back-fills the followee's newest pushed articles into the
//! follower's inbox in the follow's transaction, and their pulled articles are merged from the
//! moment the follow commits; a cancel deletes the followee's articles from the inbox in its
//! transaction (and the read filter covers a fan-out racing with it).

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::Instant,
};

use tokio_util::sync::CancellationToken;

use crate::{
    article::{ArticleEvent, TOPIC_PUBLISHED, TOPIC_WITHDRAWN},
    biz::Biz,
    comment::{CommentEvent, TOPIC_COMMENT_CHANGED},
    feed::{
        model::{Cursor, FeedItem, FollowEvent, Page},
        store::{FeedStore, LikeNotice, TopicFollow, AUTHORS_PER_QUERY},
        TOPIC_FOLLOW_CHANGED,
    },
    interactive::{InteractionEvent, TOPIC_LIKE_CHANGED},
    tag::{TagsEvent, TOPIC_TAGS_CHANGED},
};
use platform::{
    events::{Event, EventStream, Subscription},
    telemetry::{MetricsSpec, JOB_DURATION_BUCKETS},
};

/// Most topics one reader follows (each costs a page a part of a statement).
pub const MAX_FOLLOWED_TOPICS: i64 = 200;
/// Consumer group of every topic the feed consumes.
pub const FEED_GROUP: &str = "feed";
/// Inbox rows written per fan-out transaction.
pub const FANOUT_BATCH: i64 = 1000;
/// Events handled per consumer batch.
const EVENT_BATCH: usize = 100;
/// Longest an event waits for its batch.
const EVENT_MAX_WAIT: std::time::Duration = std::time::Duration::from_millis(20);
/// Rounds after which a page that has items stops looking further (one without goes on: a
/// page is empty only at the end). Rounds after the first happen only when items read as
/// visible were hidden by the time they were loaded.
const MAX_ROUNDS: usize = 4;

/// What reading one page cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCost {
    /// Rounds of reading the sources' heads and loading them.
    pub rounds: usize,
    /// SQL statements run.
    pub statements: usize,
}

/// Inbox rows written by fan-outs.
pub const FEED_FANOUT_ROWS_TOTAL: &str = "feed_fanout_rows_total";
/// From an article's publication to the last of its inbox rows (seconds).
pub const FEED_FANOUT_LAG_SECONDS: &str = "feed_fanout_lag_seconds";
/// Articles by delivery: `push` or `pull`.
pub const FEED_ARTICLES_TOTAL: &str = "feed_articles_total";
/// SQL statements run to read one feed page.
pub const FEED_PAGE_STATEMENTS: &str = "feed_page_statements";

/// Buckets of [`FEED_PAGE_STATEMENTS`].
const STATEMENT_BUCKETS: &[f64] = &[2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0, 20.0, 50.0];

/// The feed's metrics.
pub const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[
        (FEED_FANOUT_LAG_SECONDS, JOB_DURATION_BUCKETS),
        (FEED_PAGE_STATEMENTS, STATEMENT_BUCKETS),
    ],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_counter!(FEED_FANOUT_ROWS_TOTAL, "Inbox rows written by fan-outs");
    metrics::describe_histogram!(
        FEED_FANOUT_LAG_SECONDS,
        metrics::Unit::Seconds,
        "From an article's publication to its last follower's inbox row"
    );
    metrics::describe_counter!(
        FEED_ARTICLES_TOTAL,
        "Published articles by delivery: push (inboxes) or pull (author's outbox)"
    );
    metrics::describe_histogram!(
        FEED_PAGE_STATEMENTS,
        "SQL statements run to read one feed page"
    );
}

/// The feed; cheap to clone.
#[derive(Debug, Clone)]
pub struct FeedService {
    store: FeedStore,
    push_threshold: i64,
    fanout_batch: i64,
    pull_authors: Arc<PullAuthorCount>,
}

/// The number of pull authors site-wide, as last counted.
#[derive(Debug, Default)]
struct PullAuthorCount {
    count: AtomicI64,
    /// When (ms); 0 before the first count.
    counted_at: AtomicI64,
}

/// How long the site-wide count of pull authors is reused.
const PULL_AUTHORS_RECOUNT: std::time::Duration = std::time::Duration::from_secs(10);

impl FeedService {
    /// The feed over `store`: authors with at most `push_threshold` followers push.
    pub fn new(store: FeedStore, push_threshold: i64) -> Self {
        Self {
            store,
            push_threshold,
            fanout_batch: FANOUT_BATCH,
            pull_authors: Arc::default(),
        }
    }

    /// The same feed writing `batch` inbox rows per fan-out transaction (tests of resumption).
    pub fn with_fanout_batch(mut self, batch: i64) -> Self {
        self.fanout_batch = batch.max(1);
        self
    }

    /// The store.
    pub fn store(&self) -> &FeedStore {
        &self.store
    }

    /// A page of `reader`'s feed after `cursor` (module docs: reading).
    pub async fn page(
        &self,
        reader: i64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<FeedItem>, platform::error::AppError> {
        let (page, cost) = self.page_with_cost(reader, cursor, limit).await?;
        metrics::histogram!(FEED_PAGE_STATEMENTS).record(cost.statements as f64);
        Ok(page)
    }

    /// [`FeedService::page`], and what reading it cost.
    pub async fn page_with_cost(
        &self,
        reader: i64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Page<FeedItem>, PageCost), platform::error::AppError> {
        let mut before = match cursor {
            Some(cursor) => Cursor::decode(cursor)?,
            None => Cursor {
                time: i64::MAX,
                id: i64::MAX,
            },
        };
        let mut cost = PageCost::default();
        let pull_authors = self.followed_pull_authors(reader, &mut cost).await?;
        let topics = self.store.followed_topics(reader).await?;
        cost.statements += 1;
        // One more than the page, to know whether another page follows.
        let wanted = limit + 1;
        let mut items: Vec<FeedItem> = Vec::with_capacity(wanted);
        let mut exhausted;
        loop {
            cost.rounds += 1;
            let fetch = wanted - items.len();
            // Both sources skip hidden items in the database, so what they answer is visible
            // unless it changed since; the rounds after the first only make up for that.
            let inbox = self.store.inbox_heads(reader, before, fetch).await?;
            cost.statements += 1;
            let mut sources = vec![inbox];
            if !pull_authors.is_empty() {
                sources.extend(
                    self.store
                        .outbox_heads(reader, &pull_authors, before, fetch)
                        .await?,
                );
                cost.statements += pull_authors.len().div_ceil(AUTHORS_PER_QUERY);
            }
            if !topics.is_empty() {
                sources.extend(
                    self.store
                        .topic_heads(reader, &topics, before, fetch)
                        .await?,
                );
                cost.statements += topics.len().div_ceil(AUTHORS_PER_QUERY);
            }
            let candidates = merge_newest(sources, fetch);
            exhausted = candidates.len() < fetch;
            let Some(last) = candidates.last().copied() else {
                break;
            };
            let ids: Vec<i64> = candidates.iter().map(|c| c.id).collect();
            let mut visible = self.store.visible_items(reader, &ids).await?;
            cost.statements += 1;
            items.extend(ids.iter().filter_map(|id| visible.remove(id)));
            before = last;
            // Never an empty page before the end: past `MAX_ROUNDS`, stop only with items.
            if items.len() >= wanted
                || exhausted
                || (cost.rounds >= MAX_ROUNDS && !items.is_empty())
            {
                break;
            }
        }
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(FeedItem::cursor)
        } else if exhausted {
            None
        } else {
            // Out of rounds: everything after the last item up to `before` was hidden.
            Some(before)
        };
        Ok((
            Page {
                items,
                next: next.map(Cursor::encode),
            },
            cost,
        ))
    }

    /// Makes `reader` follow topic `name` (any spelling of a tag's name) or stop following it;
    /// idempotent. Code 4 for a name no tag could have or beyond [`MAX_FOLLOWED_TOPICS`];
    /// 404001 when no tag has that name (following only).
    pub async fn follow_topic(
        &self,
        reader: i64,
        name: &str,
        follow: bool,
    ) -> Result<(), platform::error::AppError> {
        use platform::error::{AppError, Msg};
        let key = crate::tag::TagName::parse(name)?.key;
        let done = self
            .store
            .set_topic_follow(
                reader,
                &key,
                follow,
                MAX_FOLLOWED_TOPICS,
                platform::db::now_millis(),
            )
            .await?;
        match done {
            TopicFollow::Done => Ok(()),
            TopicFollow::NoSuchTopic => {
                Err(AppError::NotFound(Msg::new("no such topic", "话题不存在")))
            }
            TopicFollow::TooMany => Err(AppError::InvalidInput(Msg::field(
                "name",
                format!("at most {MAX_FOLLOWED_TOPICS} topics may be followed"),
                format!("最多关注 {MAX_FOLLOWED_TOPICS} 个话题"),
            ))),
        }
    }

    /// The topics `reader` follows (their normalised names), by name.
    pub async fn followed_topics(
        &self,
        reader: i64,
    ) -> Result<Vec<String>, platform::error::AppError> {
        Ok(self.store.followed_topics(reader).await?)
    }

    /// The pull authors `reader` follows, probed from the smaller side: the reader's followees
    /// or the pull authors site-wide (their count is cached for [`PULL_AUTHORS_RECOUNT`]; a stale
    /// count only picks the slower probe, never other authors).
    async fn followed_pull_authors(
        &self,
        reader: i64,
        cost: &mut PageCost,
    ) -> anyhow::Result<Vec<i64>> {
        let site_wide = self.pull_author_count(cost).await?;
        // With at most one pull author, probing them is at most one lookup: nothing to count.
        let from_followees = site_wide > 1 && {
            cost.statements += 1;
            self.store.followee_count(reader).await? < site_wide
        };
        cost.statements += 1;
        Ok(self
            .store
            .followed_pull_authors(reader, from_followees)
            .await?)
    }

    /// [`FeedStore::pull_author_count`], counted again when older than
    /// [`PULL_AUTHORS_RECOUNT`].
    async fn pull_author_count(&self, cost: &mut PageCost) -> anyhow::Result<i64> {
        let now = platform::db::now_millis();
        let counted_at = self.pull_authors.counted_at.load(Ordering::Relaxed);
        if now - counted_at < PULL_AUTHORS_RECOUNT.as_millis() as i64 {
            return Ok(self.pull_authors.count.load(Ordering::Relaxed));
        }
        cost.statements += 1;
        let count = self.store.pull_author_count().await?;
        self.pull_authors.count.store(count, Ordering::Relaxed);
        self.pull_authors.counted_at.store(now, Ordering::Relaxed);
        Ok(count)
    }

    /// Handles a batch of `article_published` events: each article becomes an item, pushed
    /// (fanned out here, batch by batch) or pulled.
    pub async fn apply_published(&self, events: &[Event]) -> anyhow::Result<()> {
        for published in parse::<ArticleEvent>(events)? {
            let pending = self
                .store
                .add_article(
                    published.id,
                    published.author,
                    published.time,
                    self.push_threshold,
                )
                .await?;
            // A republication: the notices about it that still stand return to the inboxes.
            self.store.restore_notices(published.id).await?;
            // Its topics' readers find it by the tags it carries now.
            self.store.index_topics(published.id).await?;
            match pending {
                Some(item) => {
                    metrics::counter!(FEED_ARTICLES_TOTAL, "delivery" => "push").increment(1);
                    self.fan_out(item, published.time).await?;
                }
                None => {
                    metrics::counter!(FEED_ARTICLES_TOTAL, "delivery" => "pull").increment(1);
                }
            }
        }
        Ok(())
    }

    /// Applies `tags_changed` events: an article's topic rows follow its tags (articles not
    /// published yet have no item, and get their rows when they are).
    pub async fn apply_tags(&self, events: &[Event]) -> anyhow::Result<()> {
        for changed in parse::<TagsEvent>(events)? {
            if changed.biz == Biz::Article {
                self.store.index_topics(changed.biz_id).await?;
            }
        }
        Ok(())
    }

    /// Writes item `item`'s remaining inbox rows, [`FeedService::with_fanout_batch`] rows per
    /// transaction.
    pub async fn fan_out(&self, item: i64, published_at: i64) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut followers = 0;
        loop {
            let step = self.store.fan_out_batch(item, self.fanout_batch).await?;
            followers += step.followers;
            metrics::counter!(FEED_FANOUT_ROWS_TOTAL).increment(step.followers);
            if step.done {
                break;
            }
        }
        let lag_ms = platform::db::now_millis().saturating_sub(published_at);
        metrics::histogram!(FEED_FANOUT_LAG_SECONDS).record(lag_ms as f64 / 1000.0);
        tracing::debug!(item, followers, elapsed = ?started.elapsed(), "fan-out done");
        Ok(())
    }

    /// Handles `article_withdrawn` events: the items leave every feed (unless republished).
    pub async fn apply_withdrawn(&self, events: &[Event]) -> anyhow::Result<()> {
        for withdrawn in parse::<ArticleEvent>(events)? {
            self.store.remove_article(withdrawn.id).await?;
        }
        Ok(())
    }

    /// Handles `like_changed` events of articles: the batch in one transaction
    /// ([`FeedStore::sync_likes`]).
    pub async fn apply_likes(&self, events: &[Event]) -> anyhow::Result<()> {
        let likes: Vec<LikeNotice> = parse::<InteractionEvent>(events)?
            .into_iter()
            .filter(|like| like.biz == Biz::Article)
            .map(|like| LikeNotice {
                liker: like.uid,
                article: like.biz_id,
                time: like.time,
            })
            .collect();
        self.store.sync_likes(&likes).await?;
        Ok(())
    }

    /// Handles `follow_changed` events.
    pub async fn apply_follows(&self, events: &[Event]) -> anyhow::Result<()> {
        for follow in parse::<FollowEvent>(events)? {
            self.store
                .sync_follow(follow.follower, follow.followee, follow.time)
                .await?;
        }
        Ok(())
    }

    /// Handles `comment_changed` events.
    pub async fn apply_comments(&self, events: &[Event]) -> anyhow::Result<()> {
        for comment in parse::<CommentEvent>(events)? {
            self.store.sync_comment(&comment).await?;
        }
        Ok(())
    }

    /// Applies a batch of `topic`'s events.
    pub async fn apply(&self, topic: &str, events: &[Event]) -> anyhow::Result<()> {
        match topic {
            TOPIC_PUBLISHED => self.apply_published(events).await,
            TOPIC_WITHDRAWN => self.apply_withdrawn(events).await,
            TOPIC_LIKE_CHANGED => self.apply_likes(events).await,
            TOPIC_FOLLOW_CHANGED => self.apply_follows(events).await,
            TOPIC_COMMENT_CHANGED => self.apply_comments(events).await,
            TOPIC_TAGS_CHANGED => self.apply_tags(events).await,
            other => anyhow::bail!("the feed does not consume {other}"),
        }
    }

    /// The feed's consumers, one per topic of [`CONSUMED_TOPICS`] (group [`FEED_GROUP`]), run
    /// until `stop`.
    pub fn consumers(
        &self,
        events: &EventStream,
        subscription: Subscription,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let consumers: Vec<_> = CONSUMED_TOPICS
            .iter()
            .map(|&topic| {
                let service = self.clone();
                tokio::spawn(events.subscribe(
                    subscription,
                    topic,
                    FEED_GROUP,
                    EVENT_BATCH,
                    EVENT_MAX_WAIT,
                    stop.clone(),
                    move |batch| {
                        let service = service.clone();
                        async move { service.apply(topic, &batch).await }
                    },
                ))
            })
            .collect();
        async move {
            for consumer in consumers {
                match consumer.await {
                    Err(err) if err.is_panic() => {
                        tracing::error!(%err, "a feed consumer panicked");
                    }
                    // Cancelled with the runtime at shutdown: no failure to report.
                    _ => {}
                }
            }
        }
    }
}

/// The topics the feed consumes.
pub const CONSUMED_TOPICS: [&str; 6] = [
    TOPIC_PUBLISHED,
    TOPIC_WITHDRAWN,
    TOPIC_LIKE_CHANGED,
    TOPIC_FOLLOW_CHANGED,
    TOPIC_COMMENT_CHANGED,
    TOPIC_TAGS_CHANGED,
];

/// The payloads of `events` as `T`; an event that does not decode fails the batch permanently
/// ([`Event::decode`]), so that event is parked and the rest applied.
fn parse<T: serde::de::DeserializeOwned>(events: &[Event]) -> anyhow::Result<Vec<T>> {
    events.iter().map(Event::decode).collect()
}

/// The newest `limit` positions of `sources` (each newest first), merged, without duplicates.
fn merge_newest(sources: Vec<Vec<Cursor>>, limit: usize) -> Vec<Cursor> {
    let mut heap: std::collections::BinaryHeap<(Cursor, usize, usize)> = sources
        .iter()
        .enumerate()
        .filter_map(|(source, items)| items.first().map(|first| (*first, source, 0)))
        .collect();
    let mut merged = Vec::with_capacity(limit);
    let mut seen = HashSet::with_capacity(limit);
    while let Some((cursor, source, index)) = heap.pop() {
        if seen.insert(cursor.id) {
            merged.push(cursor);
            if merged.len() == limit {
                break;
            }
        }
        if let Some(next) = sources[source].get(index + 1) {
            heap.push((*next, source, index + 1));
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(time: i64, id: i64) -> Cursor {
        Cursor { time, id }
    }

    #[test]
    fn merge_takes_the_newest_across_sources_once_each() {
        let inbox = vec![at(9, 1), at(7, 5), at(3, 2)];
        let big_a = vec![at(8, 3), at(7, 4), at(1, 9)];
        let big_b = vec![at(9, 1), at(7, 6)];
        let merged = merge_newest(vec![inbox, big_a, big_b], 5);
        assert_eq!(
            merged,
            vec![at(9, 1), at(8, 3), at(7, 6), at(7, 5), at(7, 4)]
        );
        assert_eq!(
            merge_newest(vec![vec![], vec![at(1, 1)]], 5),
            vec![at(1, 1)]
        );
        assert!(merge_newest(vec![], 5).is_empty());
    }
}
