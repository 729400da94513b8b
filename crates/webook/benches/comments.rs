//! Comments on embedded SQLite (a database file in a temp dir, with the app's pool: 16 read
//! connections and the single writer), through the comments' own code:
//!
//! - `comment_page/*`: [`CommentService::thread_page`] (limit 20: the object's visibility and
//!   total, the top-level comments, their first 3 replies) of the **hot** thread, an article
//!   with more than 100 000 comments, against the baseline of a **small** thread (about 20
//!   comments) measured in the same run: the ratio is what the size of a thread costs a page.
//!   The hot thread's first page shows its newest top-level comments, which have no replies
//!   yet; its **oldest** page (the 20 oldest top-level comments, the busiest conversations,
//!   every one with replies to preview) is the page with the most work. Also the first page of
//!   the replies of its busiest top-level comment (thousands of replies).
//! - `comment_create/*`: [`CommentService::create`] of top-level comments and of replies into
//!   the hot thread (each a write transaction: the row, the parent's and root's counters, the
//!   article's `comment_cnt`, a `comment_changed` event per recipient in the outbox), one task
//!   and 16 concurrent tasks; the baseline is the smallest durable write of the same row: an
//!   `INSERT` of a comment row alone in its own transaction.
//!
//! The dataset comes from the seeder ([`webook::seed::seed`]): 5 000 users, 300 articles,
//! 20 000 comments spread by Zipf's law and one hot thread of 100 000 more, threads shaped as
//! `webook seed` shapes them (nested replies, busy conversations first).
//!
//! Besides criterion's estimates the bench prints to stderr: the query plans of the page's
//! statements, latency percentiles of 2 000 timed first pages (one caller, and 8 concurrent
//! callers sharing the pool as an HTTP server's handlers would) of both threads, and comment
//! creation rates.
//!
//! Run: `cargo bench -p webook --bench comments` (about 2 minutes, a few seconds of it seeding;
//! figures in docs/PERFORMANCE.md → Comments). With `WEBOOK_BENCH_DATABASE_URL` set to an empty
//! PostgreSQL database the same runs there, e.g. `scripts/with-services.sh bash -c
//! 'WEBOOK_BENCH_DATABASE_URL=$WEBOOK_TEST_DATABASE_URL cargo bench -p webook --bench comments'`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::{
    hint::black_box,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::latencies;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use indicatif::ProgressBar;
use platform::{
    db::{now_millis, Db},
    events::EventStream,
};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use webook::{
    biz::Biz,
    comment::{CommentService, NewComment, TOPIC_COMMENT_CHANGED},
    seed::{seed, Plan},
};

/// The app's default pool size (`database_max_connections`).
const POOL: u32 = 16;
const PAGE: usize = 20;
const HOT_THREAD_COMMENTS: u64 = 100_000;
const CALLS: usize = 2000;
const CONCURRENT_READERS: usize = 8;
const CONCURRENT_WRITERS: usize = 16;

struct World {
    _dir: tempfile::TempDir,
    db: Db,
    comments: CommentService,
    /// Keeps a `comment_changed` consumer group registered, so comments record their events
    /// in the outbox as in the app (the relay does not run: the rows stay).
    _group: CancellationToken,
    hot: i64,
    small: i64,
    /// The hot thread's top-level comment with the most replies.
    busiest_root: i64,
    users: (i64, i64),
}

async fn build() -> World {
    let started = Instant::now();
    let (dir, db, url) = common::bench_db(POOL).await;
    let plan = Plan {
        users: 5_000,
        articles: 300,
        likes: 3_000,
        collects: 300,
        reads: 30_000,
        comments: 20_000,
        hot_threads: 1,
        hot_thread_comments: HOT_THREAD_COMMENTS,
        ..Plan::default()
    };
    let report = seed(&db, &plan, &ProgressBar::hidden()).await.unwrap();
    let threads: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT biz_id, COUNT(*) FROM comments GROUP BY biz_id ORDER BY COUNT(*) DESC",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    let (hot, hot_size) = threads[0];
    // The baseline: the thread whose size is nearest 20.
    let (small, small_size) = *threads
        .iter()
        .min_by_key(|(_, size)| (size - 20).abs())
        .unwrap();
    let (busiest_root, busiest_replies): (i64, i64) = sqlx::query_as(
        "SELECT id, reply_cnt FROM comments WHERE biz_id = $1 AND root_id = 0 \
         ORDER BY reply_cnt DESC LIMIT 1",
    )
    .bind(hot)
    .fetch_one(db.pool())
    .await
    .unwrap();
    eprintln!(
        "{}: seeded {} comments in {:.1} s: hot thread (article {hot}) {hot_size} comments, busiest \
         top-level comment {busiest_root} with {busiest_replies} replies; small thread (article \
         {small}) {small_size} comments",
        platform::redact_url(&url),
        report.comments,
        started.elapsed().as_secs_f64()
    );

    let events = EventStream::in_process();
    let stop = CancellationToken::new();
    tokio::spawn(events.consume(
        TOPIC_COMMENT_CHANGED,
        "bench",
        100,
        Duration::from_millis(20),
        stop.clone(),
        |_batch| async { Ok(()) },
    ));
    let comments = webook::testing::comment_service(&db, events);
    World {
        _dir: dir,
        db,
        comments,
        _group: stop,
        hot,
        small,
        busiest_root,
        users: (report.first_user_id, report.first_user_id + 4_999),
    }
}

async fn page_latencies(world: &World, label: &str, article: i64, cursor: Option<&str>) {
    let comments = world.comments.clone();
    let cursor = cursor.map(str::to_owned);
    latencies(label, CALLS, CONCURRENT_READERS, move || {
        let (comments, cursor) = (comments.clone(), cursor.clone());
        async move {
            black_box(
                comments
                    .thread_page(Biz::Article, article, cursor.as_deref(), PAGE)
                    .await
                    .unwrap(),
            );
        }
    })
    .await;
}

/// The plans SQLite chose for the page's statements (SQLite only).
async fn query_plans(world: &World) {
    if world.db.kind() != platform::config::DatabaseKind::Sqlite {
        return;
    }
    let statements = [
        format!(
            "SELECT c.id FROM comments c LEFT JOIN users u ON u.id = c.uid WHERE c.biz = 'article' \
             AND c.biz_id = {} AND c.root_id = 0 AND c.id < 9223372036854775807 ORDER BY c.id DESC LIMIT 21",
            world.hot
        ),
        format!(
            "SELECT * FROM (SELECT c.id FROM comments c LEFT JOIN users u ON u.id = c.uid \
             WHERE c.root_id = {} ORDER BY c.id LIMIT 3) r1",
            world.busiest_root
        ),
        format!(
            "SELECT c.id FROM comments c WHERE c.root_id = {} AND c.id > 0 ORDER BY c.id LIMIT 21",
            world.busiest_root
        ),
    ];
    for sql in statements {
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
                .fetch_all(world.db.pool())
                .await
                .unwrap();
        let steps: Vec<String> = plan.into_iter().map(|row| row.3).collect();
        eprintln!("  plan: {}", steps.join(" | "));
    }
}

fn reply_into_hot_thread(world: &World, n: usize) -> NewComment {
    let (first, last) = world.users;
    let uid = first + (n as i64 % (last - first + 1));
    NewComment::new(
        uid,
        Biz::Article,
        world.hot,
        Some(world.busiest_root),
        format!("bench reply {n}"),
    )
    .unwrap()
}

fn top_level_in_hot_thread(world: &World, n: usize) -> NewComment {
    NewComment {
        parent_id: None,
        content: format!("bench comment {n}"),
        ..reply_into_hot_thread(world, n)
    }
}

/// One bare comment row in its own transaction: the floor of a durable comment.
async fn bare_insert(db: &Db, article: i64, n: usize) {
    let mut tx = db.writer().begin().await.unwrap();
    sqlx::query(
        "INSERT INTO comments (biz, biz_id, uid, root_id, parent_id, content, deleted, child_cnt, \
         reply_cnt, ctime, utime) VALUES ('article', $1, 1, 0, 0, $2, 0, 0, 0, $3, $3)",
    )
    .bind(article)
    .bind(format!("bare {n}"))
    .bind(now_millis())
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

/// Comments per second written by `tasks` concurrent writers, `per_task` each.
async fn creation_rate(world: &Arc<World>, tasks: usize, per_task: usize) -> f64 {
    let counter = Arc::new(AtomicUsize::new(1_000_000));
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (world, counter) = (world.clone(), counter.clone());
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    world
                        .comments
                        .create(reply_into_hot_thread(&world, n))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    #[allow(clippy::cast_precision_loss)]
    let rate = (tasks * per_task) as f64 / started.elapsed().as_secs_f64();
    rate
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let world = Arc::new(runtime.block_on(build()));

    // The page of the 20 oldest top-level comments: strictly before the 21st oldest.
    let oldest_page = runtime.block_on(async {
        let after_oldest: i64 = sqlx::query_scalar(
            "SELECT id FROM comments WHERE biz_id = $1 AND root_id = 0 ORDER BY id LIMIT 1 OFFSET 20",
        )
        .bind(world.hot)
        .fetch_one(world.db.pool())
        .await
        .unwrap();
        platform::page::encode_cursor(&[after_oldest])
    });
    eprintln!("\ncomment pages (limit {PAGE}):");
    runtime.block_on(async {
        query_plans(&world).await;
        let oldest = world
            .comments
            .thread_page(Biz::Article, world.hot, Some(&oldest_page), PAGE)
            .await
            .unwrap();
        let first = world
            .comments
            .thread_page(Biz::Article, world.hot, None, PAGE)
            .await
            .unwrap();
        let with_replies = |page: &webook::comment::ThreadPage| {
            page.items
                .iter()
                .filter(|item| item.reply_cnt.unwrap_or(0) > 0)
                .count()
        };
        eprintln!(
            "  hot thread: {} of the first page's top-level comments have replies, {} of the oldest page's",
            with_replies(&first),
            with_replies(&oldest)
        );
        page_latencies(&world, "first page, hot thread", world.hot, None).await;
        page_latencies(&world, "oldest page, hot thread", world.hot, Some(&oldest_page)).await;
        page_latencies(&world, "first page, small thread (baseline)", world.small, None).await;
    });

    let mut pages = c.benchmark_group("comment_page");
    for (label, article) in [("hot_100k", world.hot), ("small", world.small)] {
        pages.bench_function(BenchmarkId::new("first_page", label), |b| {
            b.to_async(&runtime).iter(|| async {
                black_box(
                    world
                        .comments
                        .thread_page(Biz::Article, article, None, PAGE)
                        .await
                        .unwrap(),
                )
            });
        });
    }
    pages.bench_function(BenchmarkId::new("oldest_page", "hot_100k"), |b| {
        b.to_async(&runtime).iter(|| async {
            black_box(
                world
                    .comments
                    .thread_page(Biz::Article, world.hot, Some(&oldest_page), PAGE)
                    .await
                    .unwrap(),
            )
        });
    });
    pages.bench_function(
        BenchmarkId::new("replies_first_page", "busiest_root"),
        |b| {
            b.to_async(&runtime).iter(|| async {
                black_box(
                    world
                        .comments
                        .replies(world.busiest_root, None, PAGE)
                        .await
                        .unwrap(),
                )
            });
        },
    );
    pages.finish();

    let mut create = c.benchmark_group("comment_create");
    create.throughput(Throughput::Elements(1));
    let counter = AtomicUsize::new(0);
    create.bench_function("bare_insert_baseline", |b| {
        b.to_async(&runtime).iter(|| {
            let n = counter.fetch_add(1, Ordering::Relaxed);
            bare_insert(&world.db, world.small, n)
        });
    });
    create.bench_function("top_level", |b| {
        b.to_async(&runtime).iter(|| {
            let n = counter.fetch_add(1, Ordering::Relaxed);
            let comment = top_level_in_hot_thread(&world, n);
            let world = world.clone();
            async move { world.comments.create(comment).await.unwrap() }
        });
    });
    create.bench_function("reply", |b| {
        b.to_async(&runtime).iter(|| {
            let n = counter.fetch_add(1, Ordering::Relaxed);
            let comment = reply_into_hot_thread(&world, n);
            let world = world.clone();
            async move { world.comments.create(comment).await.unwrap() }
        });
    });
    create.finish();

    eprintln!("\ncomment creation (replies into the hot thread's busiest conversation):");
    runtime.block_on(async {
        for tasks in [1, CONCURRENT_WRITERS] {
            let rate = creation_rate(&world, tasks, 2_000 / tasks).await;
            eprintln!("  {tasks:>2} writer task(s): {rate:>7.0} comments/s");
        }
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
