//! Follows and the feed on embedded SQLite (a database file in a temp dir, with the app's pool:
//! 16 read connections and the single writer), through the feed's own code:
//!
//! - `feed_page/*`: [`FeedService::page`] (limit 20) for reader `10_big`, who follows 1 000
//!   authors: 10 "big" ones (2 001 followers each, above the default `feed_push_threshold` of
//!   1 000, so their 200 articles each are pulled and merged at read time) and 990 small ones
//!   (22 followers each; their 1 000 articles were pushed, so the reader's inbox holds 1 000
//!   items, the default `feed_inbox_cap`). The baseline, reader `0_big`, follows the same 990
//!   small authors and 10 users who never publish: the same inbox, no pull authors, so the
//!   ratio of the two is the cost of the pull merge. Each at the first page and at page 11
//!   (the `next` cursor followed ten times: items 201–220).
//! - `fanout/fanout_1000/*`: [`FeedService::apply_published`] of one `article_published` event
//!   of an author with exactly 1 000 followers (pushed: at most the threshold), from its start
//!   until all 1 000 inbox rows are committed (it returns after the last fan-out batch). The
//!   article's rows are written before the clock starts; its inbox rows are deleted after it
//!   stops (as the prune job keeps inboxes at their cap), so the table does not grow with the
//!   iterations. Twice (`seeded_inboxes`, `full_inboxes`): with the followers' inboxes as
//!   seeded (~70 items each, 73 000 inbox rows in all), then filled to the default cap of 1 000
//!   items each (~1.1 M rows), since each row goes to a different place of the inbox's indexes.
//!   Also printed: the WAL one fan-out writes, and its time split into the item's transaction
//!   and the batches.
//! - `follow_unfollow/*`: [`FollowService::set_follow`] follow + cancel pairs (each a write
//!   transaction: state, both counts, the outbox event, the inbox back-fill or clean-up; the
//!   relay does not run, so outbox rows stay), one task, and 16 concurrent tasks on distinct
//!   pairs; followees are small authors (1–2 pushed articles to back-fill), and, as a variant,
//!   an author with 60 pushed articles (a full back-fill of 50 rows, deleted again by the
//!   cancel).
//!
//! The data is built through the real code paths where it matters: users, the crowd's follows
//! (follows rows and their follow_counts, bulk SQL) and articles (`articles`,
//! `published_articles` with status 2, `interactives` counters) are inserted directly; the two
//! readers' 2 000 follows go through [`FollowStore::set_follow`]; then every article is handed to
//! [`FeedService::apply_published`] as the consumer would (batches of 100 events, oldest first),
//! so the feed decides push or pull and fans out itself. Big authors are big with real follows
//! rows (2 001 followers against the default threshold of 1 000), not a lowered threshold.
//!
//! Besides criterion's estimates the bench prints to stderr (criterion reports means and
//! medians, the targets are p99): the query plans of the page's and the fan-out's statements,
//! the composition of the first page, latency percentiles of 2 000 timed calls of each page
//! (one caller, and 8 concurrent callers sharing the pool as an HTTP server's handlers would),
//! the time of each page along a walk through the whole feed (does a page cost more the deeper
//! it is?), and, after the page benches, the first page against the number of pull authors
//! site-wide (10, 1 000 and 10 000, of which the reader follows 10), with
//! `FeedStore::followed_pull_authors` timed both ways it can probe.
//!
//! Run: `cargo bench -p webook --bench feed` (about 3 minutes, ~6 s of it seeding; figures in
//! docs/PERFORMANCE.md → Follows and the feed). Criterion arguments filter as usual
//! (`cargo bench -p webook --bench feed -- feed_page`); the stderr report runs whatever the
//! filter.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::{
    collections::BTreeMap,
    hint::black_box,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{latencies, ms, summary};
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use platform::{
    db::{now_millis, Db},
    events::{Event, EventStream},
};
use sqlx::Row;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use webook::{
    article::{ArticleEvent, TOPIC_PUBLISHED},
    feed::{
        follow_store::FollowStore, store::FeedStore, FeedService, FeedSettings, FollowService,
        TOPIC_FOLLOW_CHANGED,
    },
    schema::MIGRATIONS,
};

const DAY_MS: i64 = 24 * 3600 * 1000;
/// The app's default pool size (`database_max_connections`).
const POOL: u32 = 16;
const PAGE: usize = 20;
/// The deep page: the `next` cursor followed this many times.
const DEEP: usize = 10;

/// Reader with 10 big (pull) authors among the 1 000 they follow.
const READER_BIG: i64 = 1;
/// Baseline reader: the same 990 small authors and 10 silent users.
const READER_NONE: i64 = 2;
const BIG_FIRST: i64 = 11;
const BIG_AUTHORS: i64 = 10;
const BIG_ARTICLES: i64 = 200;
const BIG_FOLLOWERS_FROM_CROWD: i64 = 2000;
const SMALL_FIRST: i64 = 101;
const SMALL_AUTHORS: i64 = 990;
const SMALL_ARTICLES: i64 = 1000;
const SMALL_FOLLOWERS_FROM_CROWD: i64 = 20;
/// The fan-out author: exactly 1 000 followers (crowd 1..=1000).
const FANOUT_AUTHOR: i64 = 2001;
const FANOUT_FOLLOWERS: i64 = 1000;
const FANOUT_HISTORY: i64 = 50;
/// An author with 60 pushed articles and 20 followers: a follow back-fills 50 rows.
const BACKFILL_AUTHOR: i64 = 2002;
const BACKFILL_ARTICLES: i64 = 60;
/// Crowd users are CROWD_BASE + 1 ..= CROWD_BASE + CROWD.
const CROWD_BASE: i64 = 10_000;
const CROWD: i64 = 3000;
/// Crowd users 2001..=3000 follow nobody: the follow bench's followers.
const FREE_CROWD_FIRST: i64 = 2001;
const CONCURRENT_TASKS: usize = 16;

/// A well-mixed hash of `n` (splitmix64), for repeatable "random" data.
fn mix(n: i64) -> u64 {
    let mut z = (n as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn crowd(n: i64) -> i64 {
    CROWD_BASE + n
}

/// Multi-row INSERTs of `rows` (rendered tuples) into `table (columns)`, 500 per statement.
async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    table: &str,
    columns: &str,
    rows: &[String],
) {
    for chunk in rows.chunks(500) {
        let sql = format!("INSERT INTO {table} ({columns}) VALUES {}", chunk.join(","));
        sqlx::raw_sql(&sql).execute(&mut **tx).await.unwrap();
    }
}

fn published(id: i64, author: i64, time: i64) -> Event {
    Event {
        id: format!("bench-{id}"),
        topic: TOPIC_PUBLISHED.into(),
        key: id.to_string(),
        payload: serde_json::to_vec(&ArticleEvent { id, author, time })
            .unwrap()
            .into(),
        time,
        traceparent: None,
    }
}

/// Article rows (`articles`, `published_articles` with status 2, `interactives`) for
/// `(id, author, ctime)`.
async fn insert_articles(db: &Db, articles: &[(i64, i64, i64)]) {
    let mut tx = db.writer().begin().await.unwrap();
    let mut rows = Vec::with_capacity(articles.len());
    let mut counters = Vec::with_capacity(articles.len());
    for &(id, author, ctime) in articles {
        rows.push(format!(
            "({id}, {author}, 'Article {id} by {author}', '<p>Body of article {id}.</p>', \
             'Body of article {id}.', 2, {ctime}, {ctime})"
        ));
        let likes = i64::try_from(mix(id) % 200).unwrap();
        counters.push(format!(
            "('article', {id}, {}, {likes}, {}, {ctime}, {ctime})",
            likes * 10,
            likes / 4
        ));
    }
    let columns = "id, author_id, title, content, abstract, status, ctime, utime";
    insert(&mut tx, "articles", columns, &rows).await;
    insert(&mut tx, "published_articles", columns, &rows).await;
    insert(
        &mut tx,
        "interactives",
        "biz, biz_id, read_cnt, like_cnt, collect_cnt, ctime, utime",
        &counters,
    )
    .await;
    tx.commit().await.unwrap();
}

struct World {
    _dir: tempfile::TempDir,
    db: Db,
    feed: FeedService,
    follows: FollowService,
    /// Keeps a `follow_changed` consumer group registered, so follows record their event in
    /// the outbox as in the app (the relay does not run: the rows stay).
    _group: CancellationToken,
    next_article: Arc<AtomicI64>,
    now: i64,
}

async fn build() -> World {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("webook.db").display());
    let db = Db::connect_url(&url, POOL).await.unwrap();
    db.migrate(&MIGRATIONS).await.unwrap();
    let threshold = FeedSettings::default().feed_push_threshold;
    let feed = FeedService::new(FeedStore::new(db.clone()), threshold);
    let events = EventStream::in_process();
    let stop = CancellationToken::new();
    tokio::spawn(events.consume(
        TOPIC_FOLLOW_CHANGED,
        "bench",
        100,
        Duration::from_millis(20),
        stop.clone(),
        |_batch| async { Ok(()) },
    ));
    let follows = FollowService::new(
        FollowStore::new(db.clone()),
        platform::events::outbox::Outbox::new(db.clone(), events),
    );

    let now = now_millis();
    let first = now - 7 * DAY_MS;
    let followed_at = first - 30 * DAY_MS;

    // Users.
    let mut ids: Vec<i64> = vec![READER_BIG, READER_NONE, FANOUT_AUTHOR, BACKFILL_AUTHOR];
    ids.extend(BIG_FIRST..BIG_FIRST + BIG_AUTHORS);
    ids.extend(SMALL_FIRST..SMALL_FIRST + SMALL_AUTHORS);
    ids.extend((1..=CROWD).map(crowd));
    let users: Vec<String> = ids
        .iter()
        .map(|id| {
            let nickname = if id % 7 == 0 {
                String::new()
            } else {
                format!("Writer {id}")
            };
            format!(
                "({id}, 'u{id}@example.com', 'x', '{nickname}', '', {followed_at}, {followed_at})"
            )
        })
        .collect();
    let mut tx = db.writer().begin().await.unwrap();
    insert(
        &mut tx,
        "users",
        "id, email, password, nickname, about_me, ctime, utime",
        &users,
    )
    .await;

    // The crowd's follows, with their counts.
    let mut pairs: Vec<(i64, i64)> = Vec::new();
    for big in BIG_FIRST..BIG_FIRST + BIG_AUTHORS {
        pairs.extend((1..=BIG_FOLLOWERS_FROM_CROWD).map(|n| (crowd(n), big)));
    }
    for (index, small) in (SMALL_FIRST..SMALL_FIRST + SMALL_AUTHORS).enumerate() {
        let index = i64::try_from(index).unwrap();
        pairs.extend(
            (0..SMALL_FOLLOWERS_FROM_CROWD)
                .map(|k| (crowd((index * 7 + k * 50) % 1000 + 1), small)),
        );
    }
    pairs.extend((1..=FANOUT_FOLLOWERS).map(|n| (crowd(n), FANOUT_AUTHOR)));
    pairs.extend((1..=20).map(|n| (crowd(n), BACKFILL_AUTHOR)));
    pairs.sort_unstable();
    pairs.dedup();
    let mut counts: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let rows: Vec<String> = pairs
        .iter()
        .enumerate()
        .map(|(n, &(follower, followee))| {
            counts.entry(followee).or_default().0 += 1;
            counts.entry(follower).or_default().1 += 1;
            let time = followed_at
                + i64::try_from(mix(follower * 100_000 + followee) % 1_000_000).unwrap()
                + i64::try_from(n).unwrap() % 3;
            format!("({follower}, {followee}, 1, {time}, {time})")
        })
        .collect();
    insert(
        &mut tx,
        "follows",
        "follower, followee, status, ctime, utime",
        &rows,
    )
    .await;
    let rows: Vec<String> = counts
        .iter()
        .map(|(uid, (followers, followees))| {
            format!("({uid}, {followers}, {followees}, {followed_at})")
        })
        .collect();
    insert(
        &mut tx,
        "follow_counts",
        "uid, followers, followees, utime",
        &rows,
    )
    .await;
    tx.commit().await.unwrap();

    // The readers' follows, through the store (announced, as in the app).
    let store = FollowStore::new(db.clone());
    let mut reader_follows: Vec<(i64, i64)> = Vec::new();
    for small in SMALL_FIRST..SMALL_FIRST + SMALL_AUTHORS {
        reader_follows.push((READER_BIG, small));
        reader_follows.push((READER_NONE, small));
    }
    for n in 0..BIG_AUTHORS {
        reader_follows.push((READER_BIG, BIG_FIRST + n));
        // Silent users: they publish nothing.
        reader_follows.push((READER_NONE, crowd(CROWD - n)));
    }
    for (n, (follower, followee)) in reader_follows.into_iter().enumerate() {
        let at = followed_at + DAY_MS + i64::try_from(n).unwrap();
        assert!(store
            .set_follow(follower, followee, true, at, true)
            .await
            .unwrap());
    }
    eprintln!(
        "feed bench: users and {} follows in {:.1} s",
        pairs.len() + 2000,
        started.elapsed().as_secs_f64()
    );

    // Articles, oldest first, spread over the last 7 days.
    let span = 7 * DAY_MS;
    let mut timeline: Vec<(i64, i64)> = Vec::new();
    let at = |seed: i64, author: i64, timeline: &mut Vec<(i64, i64)>| {
        let offset = i64::try_from(mix(seed * 31 + author) % u64::try_from(span).unwrap()).unwrap();
        timeline.push((first + offset, author));
    };
    for n in 0..BIG_ARTICLES * BIG_AUTHORS {
        at(n, BIG_FIRST + n % BIG_AUTHORS, &mut timeline);
    }
    for n in 0..SMALL_ARTICLES {
        at(100_000 + n, SMALL_FIRST + n % SMALL_AUTHORS, &mut timeline);
    }
    for n in 0..FANOUT_HISTORY {
        at(200_000 + n, FANOUT_AUTHOR, &mut timeline);
    }
    for n in 0..BACKFILL_ARTICLES {
        at(300_000 + n, BACKFILL_AUTHOR, &mut timeline);
    }
    timeline.sort_unstable();
    let articles: Vec<(i64, i64, i64)> = timeline
        .iter()
        .enumerate()
        .map(|(n, &(ctime, author))| (i64::try_from(n).unwrap() + 1, author, ctime))
        .collect();
    insert_articles(&db, &articles).await;
    let seeding = Instant::now();
    for batch in articles.chunks(100) {
        let events: Vec<Event> = batch
            .iter()
            .map(|&(id, author, ctime)| published(id, author, ctime))
            .collect();
        feed.apply_published(&events).await.unwrap();
    }
    eprintln!(
        "feed bench: {} articles published through apply_published in {:.1} s ({:.1} s in all)",
        articles.len(),
        seeding.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    let world = World {
        _dir: dir,
        db,
        feed,
        follows,
        _group: stop,
        next_article: Arc::new(AtomicI64::new(i64::try_from(articles.len()).unwrap() + 1)),
        now,
    };
    world.check().await;
    world
}

impl World {
    async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(self.db.pool())
            .await
            .unwrap()
    }

    /// What the feed decided, checked against the design.
    async fn check(&self) {
        let pulled = self
            .scalar("SELECT COUNT(*) FROM feed_events WHERE kind = 'article' AND delivery = 2")
            .await;
        assert_eq!(pulled, BIG_AUTHORS * BIG_ARTICLES);
        assert_eq!(
            self.scalar("SELECT COUNT(*) FROM feed_pull_authors").await,
            BIG_AUTHORS
        );
        for reader in [READER_BIG, READER_NONE] {
            assert_eq!(
                self.scalar(&format!(
                    "SELECT COUNT(*) FROM feed_inbox WHERE uid = {reader}"
                ))
                .await,
                SMALL_ARTICLES
            );
        }
        let inbox = self.scalar("SELECT COUNT(*) FROM feed_inbox").await;
        let follows = self.scalar("SELECT COUNT(*) FROM follows").await;
        eprintln!(
            "feed bench: {pulled} pulled articles, {inbox} inbox rows in all, {follows} follows \
             rows; each reader's inbox: {SMALL_ARTICLES}"
        );
    }

    /// The cursor of page `pages + 1` of `reader`'s feed.
    async fn cursor_after(&self, reader: i64, pages: usize) -> Option<String> {
        let mut cursor = None;
        for _ in 0..pages {
            let page = self
                .feed
                .page(reader, cursor.as_deref(), PAGE)
                .await
                .unwrap();
            assert_eq!(page.items.len(), PAGE);
            cursor = Some(page.next.unwrap());
        }
        cursor
    }

    /// A new published article of `author` (rows only), returned as its event.
    async fn new_article(&self, author: i64) -> Event {
        let id = self.next_article.fetch_add(1, Ordering::Relaxed);
        let time = self.now + id;
        insert_articles(&self.db, &[(id, author, time)]).await;
        published(id, author, time)
    }
}

impl World {
    /// One fan-out to the 1 000 followers of [`FANOUT_AUTHOR`], timed from the start of
    /// `apply_published` to its return (every inbox row committed). Then, untimed, the item's
    /// inbox rows are deleted again, as the prune job keeps inboxes at their cap: the table stays
    /// the same size however many iterations run.
    async fn fan_out_timed(&self) -> Duration {
        let event = self.new_article(FANOUT_AUTHOR).await;
        let started = Instant::now();
        self.feed
            .apply_published(std::slice::from_ref(&event))
            .await
            .unwrap();
        let elapsed = started.elapsed();
        let mut tx = self.db.writer().begin().await.unwrap();
        let deleted = sqlx::query(
            "DELETE FROM feed_inbox WHERE event_id = (SELECT id FROM feed_events WHERE dedup_key = $1)",
        )
        .bind(format!("article:{}", event.key))
        .execute(&mut *tx)
        .await
        .unwrap()
        .rows_affected();
        tx.commit().await.unwrap();
        assert_eq!(deleted, u64::try_from(FANOUT_FOLLOWERS).unwrap());
        elapsed
    }

    /// Fills the inboxes of [`FANOUT_AUTHOR`]'s 1 000 followers to the default cap (1 000 items
    /// each: the small authors' article items; ballast the read filter would hide, since these
    /// users follow only some of those authors), as on a site where every inbox is full.
    async fn fill_follower_inboxes(&self) {
        let started = Instant::now();
        let mut tx = self.db.writer().begin().await.unwrap();
        sqlx::query(
            "INSERT INTO feed_inbox (uid, event_id, actor, kind, ctime) \
             SELECT f.follower, e.id, e.actor, e.kind, e.ctime FROM follows f \
             JOIN feed_events e ON e.kind = 'article' AND e.actor >= $2 AND e.actor < $3 \
             WHERE f.followee = $1 AND f.status = 1 ORDER BY f.follower, e.id \
             ON CONFLICT (uid, event_id) DO NOTHING",
        )
        .bind(FANOUT_AUTHOR)
        .bind(SMALL_FIRST)
        .bind(SMALL_FIRST + SMALL_AUTHORS)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let rows = self.scalar("SELECT COUNT(*) FROM feed_inbox").await;
        eprintln!(
            "feed bench: follower inboxes filled to ~1 000 items each in {:.1} s: {rows} inbox rows in all",
            started.elapsed().as_secs_f64()
        );
    }

    /// The write-ahead log one fan-out writes: the log is checkpointed and truncated, one
    /// fan-out runs, and the log's size is read (median of 5).
    async fn wal_per_fan_out(&self, label: &str) {
        let wal = self._dir.path().join("webook.db-wal");
        let mut sizes = Vec::new();
        let mut times = Vec::new();
        for _ in 0..5 {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(self.db.writer())
                .await
                .unwrap();
            let event = self.new_article(FANOUT_AUTHOR).await;
            let before = std::fs::metadata(&wal).unwrap().len();
            let started = Instant::now();
            self.feed.apply_published(&[event]).await.unwrap();
            times.push(ms(started.elapsed()));
            sizes.push(std::fs::metadata(&wal).unwrap().len() - before);
        }
        sizes.sort_unstable();
        let bytes = sizes[2];
        // A WAL frame is a 24-byte header and one 4 kB page.
        eprintln!(
            "feed bench: one fan-out ({label}) writes {:.1} MB of WAL ({} pages) for 1 000 rows; \
             {:.1} ms right after a checkpoint (median of 5)",
            bytes as f64 / 1e6,
            bytes / (4096 + 24),
            {
                times.sort_by(f64::total_cmp);
                times[2]
            }
        );
    }
}

const CALLS: usize = 2000;
const CONCURRENT_READERS: usize = 8;

/// Latency percentiles of `CALLS` page calls, one caller, then `CONCURRENT_READERS` callers.
async fn page_latencies(feed: &FeedService, label: &str, reader: i64, cursor: Option<String>) {
    let feed = feed.clone();
    latencies(label, CALLS, CONCURRENT_READERS, move || {
        let (feed, cursor) = (feed.clone(), cursor.clone());
        async move {
            black_box(feed.page(reader, cursor.as_deref(), PAGE).await.unwrap());
        }
    })
    .await;
}

/// The time of every page along a walk through `reader`'s whole feed (median of 3 walks).
async fn walk(world: &World, label: &str, reader: i64) {
    let mut walks: Vec<Vec<f64>> = Vec::new();
    let mut total = 0;
    for _ in 0..3 {
        let mut times = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = std::collections::HashSet::new();
        total = 0;
        loop {
            let started = Instant::now();
            let page = world
                .feed
                .page(reader, cursor.as_deref(), PAGE)
                .await
                .unwrap();
            times.push(ms(started.elapsed()));
            total += page.items.len();
            seen.extend(page.items.iter().map(|item| item.id));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        walks.push(times);
        // Every item once: no page repeated or skipped an item.
        assert_eq!(seen.len(), total);
    }
    let pages = walks[0].len();
    let median = |page: usize| {
        let mut values: Vec<f64> = walks.iter().map(|walk| walk[page]).collect();
        values.sort_by(f64::total_cmp);
        values[1]
    };
    let marks: Vec<String> = [1, 2, 11, 26, 51, 101, pages]
        .into_iter()
        .filter(|&page| page <= pages)
        .map(|page| format!("page {page}: {:.2} ms", median(page - 1)))
        .collect();
    let sum: f64 = (0..pages).map(median).sum();
    eprintln!(
        "  walk {label}: {total} items in {pages} pages, {sum:.0} ms in all; {}",
        marks.join(", ")
    );
}

/// `EXPLAIN QUERY PLAN` of `sql` (parameters spelled out).
async fn plan(db: &Db, label: &str, sql: &str) {
    let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
        .fetch_all(db.pool())
        .await
        .unwrap();
    eprintln!("  -- {label}");
    for row in rows {
        eprintln!("     {}", row.try_get::<String, _>("detail").unwrap());
    }
}

/// The plans of the page's and the fan-out's statements (spelled as in `feed/store.rs`, with
/// the parameters of page 11 of the reader with big authors).
async fn plans(world: &World) {
    let cursor = world.cursor_after(READER_BIG, DEEP).await.unwrap();
    let cursor = webook::feed::model::Cursor::decode(&cursor).unwrap();
    let (time, id) = (cursor.time, cursor.id);
    eprintln!("feed bench: query plans (SQLite, no ANALYZE, as in production)");
    plan(
        &world.db,
        "followed_pull_authors, probing each pull author",
        &format!(
            "SELECT p.uid FROM feed_pull_authors p WHERE EXISTS \
             (SELECT 1 FROM follows f WHERE f.follower = {READER_BIG} AND f.followee = p.uid AND f.status = 1)"
        ),
    )
    .await;
    plan(
        &world.db,
        "followed_pull_authors, probing each followee",
        &format!(
            "SELECT f.followee FROM follows f WHERE f.follower = {READER_BIG} AND f.status = 1 \
             AND EXISTS (SELECT 1 FROM feed_pull_authors p WHERE p.uid = f.followee)"
        ),
    )
    .await;
    // What the reader may see, with the reader spelled out.
    let visible = webook::feed::store::VISIBLE.replace("$1", &READER_BIG.to_string());
    plan(
        &world.db,
        "inbox_heads (page 11)",
        &format!(
            "SELECT b.ctime, b.event_id FROM feed_inbox b JOIN feed_events e ON e.id = b.event_id \
             WHERE b.uid = {READER_BIG} AND (b.ctime < {time} OR (b.ctime = {time} AND b.event_id < {id})) \
             AND {visible} ORDER BY b.ctime DESC, b.event_id DESC LIMIT 21"
        ),
    )
    .await;
    let parts: Vec<String> = (0..2)
        .map(|n| {
            format!(
                "SELECT * FROM (SELECT {n} AS part, e.ctime, e.id FROM feed_events e \
                 WHERE e.actor = {} AND e.kind = 'article' AND e.delivery = 2 \
                 AND (e.ctime < {time} OR (e.ctime = {time} AND e.id < {id})) AND {visible} \
                 ORDER BY e.ctime DESC, e.id DESC LIMIT 21) AS h{n}",
                BIG_FIRST + n
            )
        })
        .collect();
    plan(
        &world.db,
        "outbox_heads (page 11, 2 of the 10 parts)",
        &parts.join(" UNION ALL "),
    )
    .await;
    plan(
        &world.db,
        "visible_items (3 ids)",
        &format!(
            "SELECT e.id, e.kind, cm.content, a.nickname, p.title, w.nickname, COALESCE(i.like_cnt, 0) \
             FROM feed_events e \
             LEFT JOIN users a ON a.id = e.actor \
             LEFT JOIN published_articles p ON p.id = e.article_id \
             LEFT JOIN users w ON w.id = p.author_id \
             LEFT JOIN interactives i ON i.biz = 'article' AND i.biz_id = e.article_id \
             LEFT JOIN comments cm ON cm.id = e.comment_id AND e.kind = 'comment' \
             WHERE e.id IN (1, 2, 3) AND {visible}"
        ),
    )
    .await;
    plan(
        &world.db,
        "fan_out_batch: follower keys",
        &format!(
            "SELECT utime, id FROM follows WHERE followee = {FANOUT_AUTHOR} AND status = 1 \
             AND (utime > -1 OR (utime = -1 AND id > 0)) ORDER BY utime, id LIMIT 1000"
        ),
    )
    .await;
    plan(
        &world.db,
        "fan_out_batch: inbox rows",
        &format!(
            "INSERT INTO feed_inbox (uid, event_id, actor, kind, ctime) \
             SELECT follower, 1, {FANOUT_AUTHOR}, 'article', 1 FROM follows WHERE followee = {FANOUT_AUTHOR} AND status = 1 \
             AND (utime > -1 OR (utime = -1 AND id > 0)) AND (utime < {time} OR (utime = {time} AND id <= 9)) \
             ON CONFLICT (uid, event_id) DO NOTHING"
        ),
    )
    .await;
}

/// The page against the number of pull authors site-wide (the reader follows 1 000 users, 10 of
/// them pull authors). Rows are added to `feed_pull_authors` directly (authors the reader does
/// not follow: their articles never reach this reader's page, so only the table's size matters).
/// `followed_pull_authors` is timed both ways it can probe (each pull author against the reader's
/// follows, or each of the reader's followees against the pull authors); the page picks the
/// smaller side from a site-wide count it caches for 10 s, so each size gets a fresh service.
async fn pull_author_scaling(world: &World) {
    eprintln!(
        "feed bench: first page against pull authors site-wide (the reader follows 1 000 users, \
         10 of them pull authors)"
    );
    let threshold = FeedSettings::default().feed_push_threshold;
    let mut present = BIG_AUTHORS;
    for total in [BIG_AUTHORS, 1_000, 10_000] {
        let rows: Vec<String> = (present..total)
            .map(|n| format!("({}, {})", 1_000_000 + n, world.now))
            .collect();
        let mut tx = world.db.writer().begin().await.unwrap();
        insert(&mut tx, "feed_pull_authors", "uid, ctime", &rows).await;
        tx.commit().await.unwrap();
        present = total;
        for (probe, from_followees) in [("each pull author", false), ("each followee", true)] {
            let mut lookups = Vec::with_capacity(CALLS);
            for _ in 0..CALLS {
                let started = Instant::now();
                let authors = world
                    .feed
                    .store()
                    .followed_pull_authors(READER_BIG, from_followees)
                    .await
                    .unwrap();
                lookups.push(ms(started.elapsed()));
                assert_eq!(authors.len(), usize::try_from(BIG_AUTHORS).unwrap());
            }
            summary(
                &format!("followed_pull_authors, {total} pull authors, probing {probe}"),
                lookups,
            );
        }
        let feed = FeedService::new(FeedStore::new(world.db.clone()), threshold);
        page_latencies(
            &feed,
            &format!("first page, 10 big, {total} pull authors"),
            READER_BIG,
            None,
        )
        .await;
    }
    let mut tx = world.db.writer().begin().await.unwrap();
    sqlx::query("DELETE FROM feed_pull_authors WHERE uid >= 1000000")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn feed(c: &mut Criterion) {
    let runtime = runtime();
    let world = Arc::new(runtime.block_on(build()));

    runtime.block_on(async {
        plans(&world).await;
        // What the first page of the reader with big authors is made of.
        let page = world.feed.page(READER_BIG, None, PAGE).await.unwrap();
        let pulled = page
            .items
            .iter()
            .filter(|item| (BIG_FIRST..BIG_FIRST + BIG_AUTHORS).contains(&item.actor.id))
            .count();
        eprintln!(
            "feed bench: first page of the reader with big authors: {} items, {pulled} of them pulled",
            page.items.len()
        );
        eprintln!("feed bench: page latencies (limit {PAGE}), {CALLS} calls each");
        for (label, reader) in [("10 big", READER_BIG), ("0 big", READER_NONE)] {
            page_latencies(&world.feed, &format!("first page, {label}"), reader, None).await;
            let deep = world.cursor_after(reader, DEEP).await;
            page_latencies(&world.feed, &format!("page {}, {label}", DEEP + 1), reader, deep).await;
        }
        eprintln!("feed bench: page time by depth");
        walk(&world, "10 big", READER_BIG).await;
        walk(&world, "0 big", READER_NONE).await;
    });

    let mut group = c.benchmark_group("feed_page");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    for (label, reader) in [("10_big", READER_BIG), ("0_big", READER_NONE)] {
        let deep = runtime.block_on(world.cursor_after(reader, DEEP));
        for (page, cursor) in [("first", None), ("page_11", deep)] {
            group.bench_function(BenchmarkId::new(page, label), |b| {
                b.to_async(&runtime).iter(|| async {
                    world
                        .feed
                        .page(reader, black_box(cursor.as_deref()), PAGE)
                        .await
                        .unwrap()
                });
            });
        }
    }
    group.finish();
    runtime.block_on(pull_author_scaling(&world));

    // The fan-out: checked once, then timed.
    runtime.block_on(async {
        let event = world.new_article(FANOUT_AUTHOR).await;
        let started = Instant::now();
        world
            .feed
            .apply_published(std::slice::from_ref(&event))
            .await
            .unwrap();
        let elapsed = started.elapsed();
        let id: ArticleEvent = serde_json::from_slice(&event.payload).unwrap();
        let rows = world
            .scalar(&format!(
                "SELECT COUNT(*) FROM feed_inbox b JOIN feed_events e ON e.id = b.event_id \
                 WHERE e.dedup_key = 'article:{}' AND e.delivery = 1",
                id.id
            ))
            .await;
        assert_eq!(rows, FANOUT_FOLLOWERS);
        eprintln!(
            "feed bench: fan-out of one article to {rows} followers (checked): {:.1} ms",
            ms(elapsed)
        );
        // Where the time goes: the item's transaction, then the fan-out batch (one, for 1 000
        // followers), each through the store as `apply_published` calls them.
        let threshold = FeedSettings::default().feed_push_threshold;
        let (mut items, mut batches) = (Vec::new(), Vec::new());
        for _ in 0..15 {
            let event = world.new_article(FANOUT_AUTHOR).await;
            let article: ArticleEvent = serde_json::from_slice(&event.payload).unwrap();
            let started = Instant::now();
            let item = world
                .feed
                .store()
                .add_article(article.id, article.author, article.time, threshold)
                .await
                .unwrap()
                .unwrap();
            items.push(ms(started.elapsed()));
            let started = Instant::now();
            let step = world
                .feed
                .store()
                .fan_out_batch(item, webook::feed::service::FANOUT_BATCH)
                .await
                .unwrap();
            batches.push(ms(started.elapsed()));
            assert_eq!(step.followers, u64::try_from(FANOUT_FOLLOWERS).unwrap());
            // Exactly a batch of followers: the batch looks one ahead and marks the item pushed.
            assert!(step.done);
        }
        summary("fan-out split: add_article (item)", items);
        summary("fan-out split: fan_out_batch (1 000 rows, done)", batches);
    });
    // Flat sampling: criterion's default (linear) would run at least 465 iterations of each.
    let mut group = c.benchmark_group("fanout");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(
            u64::try_from(FANOUT_FOLLOWERS).unwrap(),
        ));
    for inboxes in ["seeded_inboxes", "full_inboxes"] {
        if inboxes == "full_inboxes" {
            runtime.block_on(world.fill_follower_inboxes());
        }
        runtime.block_on(world.wal_per_fan_out(inboxes));
        group.bench_function(BenchmarkId::new("fanout_1000", inboxes), |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let world = world.clone();
                async move {
                    let mut elapsed = Duration::ZERO;
                    for _ in 0..iters {
                        elapsed += world.fan_out_timed().await;
                    }
                    elapsed
                }
            });
        });
    }
    group.finish();

    // Follow + cancel pairs. Task `t`'s n-th pair: follower FREE_CROWD_FIRST + t + 16 * (n % 60),
    // followee a small author (or the back-fill author), so concurrent pairs never share a row.
    let mut group = c.benchmark_group("follow_unfollow");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    let round = Arc::new(AtomicI64::new(0));
    for (label, backfill) in [("small_author", false), ("backfill_50", true)] {
        for tasks in [1usize, CONCURRENT_TASKS] {
            group.throughput(Throughput::Elements(u64::try_from(tasks).unwrap()));
            let name = if tasks == 1 {
                "1_task".to_owned()
            } else {
                format!("{tasks}_tasks")
            };
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let world = world.clone();
                    let round = round.clone();
                    async move {
                        let started = Instant::now();
                        let handles: Vec<_> = (0..tasks)
                            .map(|task| {
                                let follows = world.follows.clone();
                                let round = round.clone();
                                tokio::spawn(async move {
                                    for _ in 0..iters {
                                        let n = round.fetch_add(1, Ordering::Relaxed);
                                        let follower = crowd(
                                            FREE_CROWD_FIRST
                                                + i64::try_from(task).unwrap()
                                                + 16 * (n % 60),
                                        );
                                        let followee = if backfill {
                                            BACKFILL_AUTHOR
                                        } else {
                                            SMALL_FIRST + n % SMALL_AUTHORS
                                        };
                                        follows.set_follow(follower, followee, true).await.unwrap();
                                        follows
                                            .set_follow(follower, followee, false)
                                            .await
                                            .unwrap();
                                    }
                                })
                            })
                            .collect();
                        for handle in handles {
                            handle.await.unwrap();
                        }
                        started.elapsed()
                    }
                });
            });
        }
    }
    group.finish();

    // Follows left as they were: every pair ended cancelled.
    runtime.block_on(async {
        assert_eq!(
            world
                .scalar(&format!(
                    "SELECT COUNT(*) FROM follows WHERE status = 1 AND follower >= {}",
                    crowd(FREE_CROWD_FIRST)
                ))
                .await,
            0
        );
        let backfill: i64 = world
            .scalar(&format!(
                "SELECT followers FROM follow_counts WHERE uid = {BACKFILL_AUTHOR}"
            ))
            .await;
        assert_eq!(backfill, 20);
    });
}

criterion_group!(benches, feed);
criterion_main!(benches);
