//! The database access layer on the reader view's cache miss, side by side: the three point
//! reads of `GET /articles/pub/:id` (the reader copy joined with its author, the counters, the
//! reader's liked/collected flags — the stores' own SQL, `READER_COPY`, `COUNTS`, `USER_FLAGS`)
//! for one article, through each way webook could reach the database:
//!
//! - `sqlx_any`: sqlx's `Any` pool (what every store uses), 16 connections;
//! - `sqlx_native`: sqlx's own driver of the engine (`SqlitePool` / `PgPool`), 16 connections —
//!   what a store generic over the database type would get;
//! - `rusqlite_inline` (SQLite): [`Db::read_inline`], on the calling async worker with the
//!   thread's own connection (what the reader view uses since 2026-12-03);
//! - `rusqlite_blocking` (SQLite): the same read on tokio's blocking pool (one thread hand-off
//!   instead of sqlx's two per statement).
//!
//! Each in two shapes: `sequential/*` (one task, so the time is a miss's latency) and
//! `concurrent64/*` (64 tasks sharing the iterations on the default multi-thread runtime, so
//! the time per iteration is the inverse of throughput, as under the HTTP benchmark's 64
//! connections). Ids cycle through the published articles in a shuffled order, the reader
//! through the users.
//!
//! Data: `webook seed` with 1 000 users, 10 000 articles, 50 000 likes, 5 000 collects, in a
//! SQLite file in a temp dir, or with `WEBOOK_BENCH_DATABASE_URL=postgres://…` in PostgreSQL
//! (then the SQLite-only variants are left out), e.g.
//! `scripts/with-services.sh bash -c 'WEBOOK_BENCH_DATABASE_URL=$WEBOOK_TEST_DATABASE_URL cargo
//! bench -p webook --bench point_reads'` (use a database of its own: the seed adds to it).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use indicatif::ProgressBar;
use platform::{config::DatabaseKind, db::Db};
use sqlx::Row;
use tokio::runtime::Runtime;
use webook::{
    article::store::READER_COPY,
    interactive::store::{COUNTS, USER_FLAGS},
    seed::{seed, Plan},
};

const POOL: u32 = 16;
const USERS: u64 = 1_000;
const TASKS: usize = 64;
const BIZ: &str = "article";

/// What a miss reads, summed so nothing is optimised away.
fn digest(title: &str, content: &str, counts: [i64; 4], flags: [Option<i64>; 2]) -> i64 {
    i64::try_from(title.len() + content.len()).unwrap()
        + counts.iter().sum::<i64>()
        + flags.iter().flatten().sum::<i64>()
}

/// The three statements through any sqlx pool (the `Any` one or a native one).
macro_rules! sqlx_miss {
    ($pool:expr, $id:expr, $uid:expr) => {{
        let article = sqlx::query(READER_COPY)
            .bind($id)
            .fetch_one($pool)
            .await
            .unwrap();
        let counts = sqlx::query(COUNTS)
            .bind(BIZ)
            .bind($id)
            .fetch_optional($pool)
            .await
            .unwrap()
            .map_or([0; 4], |row| {
                [0, 1, 2, 3].map(|column| row.try_get::<i64, _>(column).unwrap())
            });
        let flags = sqlx::query(USER_FLAGS)
            .bind($uid)
            .bind(BIZ)
            .bind($id)
            .fetch_one($pool)
            .await
            .unwrap();
        digest(
            &article.try_get::<String, _>(3).unwrap(),
            &article.try_get::<String, _>(4).unwrap(),
            counts,
            [
                flags.try_get::<Option<i64>, _>(0).unwrap(),
                flags.try_get::<Option<i64>, _>(1).unwrap(),
            ],
        )
    }};
}

fn rusqlite_miss(db: &Db, id: i64, uid: i64) -> i64 {
    use platform::db::direct::rusqlite::OptionalExtension;
    db.read_inline(|connection| {
        let (title, content): (String, String) = connection
            .prepare_cached(READER_COPY)?
            .query_row([id], |row| Ok((row.get(3)?, row.get(4)?)))?;
        let counts = connection
            .prepare_cached(COUNTS)?
            .query_row((BIZ, id), |row| {
                Ok([row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?])
            })
            .optional()?
            .unwrap_or([0; 4]);
        let flags = connection
            .prepare_cached(USER_FLAGS)?
            .query_row((uid, BIZ, id), |row| Ok([row.get(0)?, row.get(1)?]))?;
        Ok(digest(&title, &content, counts, flags))
    })
    .expect("an inline read failed")
}

struct World {
    _dir: tempfile::TempDir,
    db: Db,
    native_sqlite: Option<sqlx::SqlitePool>,
    native_postgres: Option<sqlx::PgPool>,
    ids: Vec<i64>,
}

impl World {
    fn target(&self, turn: usize) -> (i64, i64) {
        let id = self.ids[turn % self.ids.len()];
        let uid = i64::try_from(turn as u64 % USERS).unwrap() + 1;
        (id, uid)
    }
}

async fn build() -> World {
    let (dir, db, url) = common::bench_db(POOL).await;
    let plan = Plan {
        users: USERS,
        articles: 10_000,
        likes: 50_000,
        collects: 5_000,
        reads: 100_000,
        comments: 0,
        tags_per_author: 0,
        ..Plan::default()
    };
    seed(&db, &plan, &ProgressBar::hidden()).await.unwrap();
    let mut ids: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM published_articles WHERE status = 2")
            .fetch_all(db.pool())
            .await
            .unwrap();
    // A fixed shuffle (multiplicative hashing), so every variant reads the same sequence.
    ids.sort_by_key(|id| (*id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (native_sqlite, native_postgres) = match db.kind() {
        DatabaseKind::Sqlite => {
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(db.sqlite_file().unwrap())
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(POOL)
                .connect_with(options)
                .await
                .unwrap();
            (Some(pool), None)
        }
        DatabaseKind::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(POOL)
                .connect(&url)
                .await
                .unwrap();
            (None, Some(pool))
        }
    };
    eprintln!(
        "{}: {} published articles",
        platform::redact_url(&url),
        ids.len()
    );
    World {
        _dir: dir,
        db,
        native_sqlite,
        native_postgres,
        ids,
    }
}

#[derive(Clone, Copy)]
enum Access {
    SqlxAny,
    SqlxNative,
    RusqliteInline,
    RusqliteBlocking,
}

impl Access {
    fn name(self) -> &'static str {
        match self {
            Self::SqlxAny => "sqlx_any",
            Self::SqlxNative => "sqlx_native",
            Self::RusqliteInline => "rusqlite_inline",
            Self::RusqliteBlocking => "rusqlite_blocking",
        }
    }
}

async fn miss(world: &Arc<World>, access: Access, turn: usize) -> i64 {
    let (id, uid) = world.target(turn);
    match access {
        Access::SqlxAny => sqlx_miss!(world.db.pool(), id, uid),
        Access::SqlxNative => match (&world.native_sqlite, &world.native_postgres) {
            (Some(pool), _) => sqlx_miss!(pool, id, uid),
            (_, Some(pool)) => sqlx_miss!(pool, id, uid),
            _ => unreachable!("a native pool exists for every engine"),
        },
        Access::RusqliteInline => rusqlite_miss(&world.db, id, uid),
        Access::RusqliteBlocking => {
            let world = world.clone();
            tokio::task::spawn_blocking(move || rusqlite_miss(&world.db, id, uid))
                .await
                .unwrap()
        }
    }
}

fn point_reads(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let world = Arc::new(runtime.block_on(build()));
    let mut accesses = vec![Access::SqlxAny, Access::SqlxNative];
    if world.db.kind() == DatabaseKind::Sqlite {
        accesses.extend([Access::RusqliteInline, Access::RusqliteBlocking]);
    }
    let engine = match world.db.kind() {
        DatabaseKind::Sqlite => "sqlite",
        DatabaseKind::Postgres => "postgres",
    };
    let mut group = c.benchmark_group(format!("point_reads/{engine}"));
    for &access in &accesses {
        let turn = AtomicUsize::new(0);
        group.bench_function(format!("sequential/{}", access.name()), |b| {
            b.to_async(&runtime).iter(|| {
                let world = world.clone();
                let turn = turn.fetch_add(1, Ordering::Relaxed);
                async move { miss(&world, access, turn).await }
            })
        });
        group.bench_function(format!("concurrent{TASKS}/{}", access.name()), |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let world = world.clone();
                async move {
                    let next = Arc::new(AtomicUsize::new(0));
                    let total = usize::try_from(iters).unwrap();
                    let started = std::time::Instant::now();
                    let tasks: Vec<_> = (0..TASKS)
                        .map(|_| {
                            let (world, next) = (world.clone(), next.clone());
                            tokio::spawn(async move {
                                let mut sum = 0;
                                loop {
                                    let turn = next.fetch_add(1, Ordering::Relaxed);
                                    if turn >= total {
                                        return sum;
                                    }
                                    sum += miss(&world, access, turn).await;
                                }
                            })
                        })
                        .collect();
                    for task in tasks {
                        std::hint::black_box(task.await.unwrap());
                    }
                    started.elapsed()
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, point_reads);
criterion_main!(benches);
