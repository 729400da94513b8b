//! The read counter's database work per batch, as browse drives it: batches of read events
//! drawn Zipf (s = 1) over 90 000 articles (the shape of `scripts/bench.sh browse`: most of a
//! batch's articles are read once in it), added up per article and applied with
//! [`InteractiveStore::apply_reads`], then the refill query ([`InteractiveStore::batch_counts`])
//! for the articles of the batch. Each of [`SIZES`] reads per batch (the counter takes up to
//! [`READ_BATCH`] at once when it fell behind), throughput in reads:
//!
//! - `read_batch/{engine}/{size}/apply_reads`: the store's upsert of the batch, in one
//!   transaction;
//! - `read_batch/{engine}/{size}/batch_counts`: the store's refill query for the batch's
//!   articles, their ids bound as one parameter ([`platform::db::id_set`]);
//! - `read_batch/{engine}/{size}/counter`: both, one after the other: the counter's rate when
//!   it refills every article it touched (embedded, it refills only the cached ones);
//! - `read_batch/{engine}/2000/batch_counts_numbered_baseline`: the refill query before
//!   2026-12-04, inline here — one numbered placeholder per id, so its text (and its prepared
//!   statement) differs with every batch's number of articles.
//!
//! Every article has its counter row before the first sample (a seeded site), so the upserts
//! update, as in browse. Batches are drawn once, from a fixed seed, and cycled.
//!
//! SQLite in a temp dir, or PostgreSQL with `WEBOOK_BENCH_DATABASE_URL=postgres://…` (a
//! database of its own), e.g. `scripts/with-services.sh bash -c
//! 'WEBOOK_BENCH_DATABASE_URL=$WEBOOK_TEST_DATABASE_URL cargo bench -p webook --bench
//! read_batches'`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use platform::{
    config::DatabaseKind,
    db::{now_millis, placeholders},
};
use tokio::runtime::Runtime;
use webook::{
    biz::Biz,
    interactive::{service::READ_BATCH, store::InteractiveStore},
    seed::random::{Rng, Stream, WeightedPicker},
};

const ARTICLES: i64 = 90_000;
const BATCHES: usize = 32;
/// Reads per batch: the counter's most before 2026-12-06, one between, and its most now.
const SIZES: [usize; 3] = [2_000, 10_000, READ_BATCH];

/// `BATCHES` batches of `READ_BATCH` reads each, Zipf (s = 1) over one shuffled order of the
/// articles, from the seed's own fixed generator (so every variant applies the same batches).
fn zipf_batches(size: usize) -> Vec<Vec<(Biz, i64, String)>> {
    let mut random = Rng::new(1, Stream::Shuffle, 0);
    let mut order: Vec<i64> = (1..=ARTICLES).collect();
    random.shuffle(&mut order);
    #[allow(clippy::cast_precision_loss)]
    let weights: Vec<f64> = (1..=order.len()).map(|rank| 1.0 / rank as f64).collect();
    let popularity = WeightedPicker::new(&weights);
    (0..BATCHES)
        .map(|batch| {
            (0..size)
                .map(|read| {
                    let id = order[popularity.pick(&mut random)];
                    (Biz::Article, id, format!("{batch}-{read}"))
                })
                .collect()
        })
        .collect()
}

/// The refill query before 2026-12-04: `IN ($2, $3, …)`, one placeholder per id.
async fn batch_counts_numbered(db: &platform::db::Db, ids: &[i64]) -> usize {
    let sql = format!(
        "SELECT biz_id, read_cnt, like_cnt, collect_cnt, comment_cnt FROM interactives \
         WHERE biz = $1 AND biz_id IN ({})",
        placeholders(2, ids.len())
    );
    let mut query = sqlx::query(&sql).bind(Biz::Article.as_str());
    for id in ids {
        query = query.bind(*id);
    }
    query.fetch_all(db.pool()).await.unwrap().len()
}

/// The distinct article ids of each batch, sorted.
fn distinct_ids(batches: &[Vec<(Biz, i64, String)>]) -> Vec<Vec<i64>> {
    batches
        .iter()
        .map(|batch| {
            let mut ids: Vec<i64> = batch.iter().map(|(_, id, _)| *id).collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        })
        .collect()
}

fn read_batches(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let (_dir, db, url) = runtime.block_on(common::bench_db(4));
    let store = InteractiveStore::new(db.clone());
    runtime.block_on(async {
        let every: Vec<(Biz, i64, String)> = (1..=ARTICLES)
            .map(|id| (Biz::Article, id, String::new()))
            .collect();
        for chunk in every.chunks(2000) {
            store.apply_reads(chunk, None, now_millis()).await.unwrap();
        }
    });
    let engine = match db.kind() {
        DatabaseKind::Sqlite => "sqlite",
        DatabaseKind::Postgres => "postgres",
    };
    let mut turn = 0;
    for size in SIZES {
        let batches = zipf_batches(size);
        let distinct = distinct_ids(&batches);
        let mean_distinct = distinct.iter().map(Vec::len).sum::<usize>() / distinct.len();
        eprintln!(
            "{}: {ARTICLES} counter rows; batches of {size} reads, {mean_distinct} distinct articles on average",
            platform::redact_url(&url)
        );
        let mut group = c.benchmark_group(format!("read_batch/{engine}/{size}"));
        group.throughput(Throughput::Elements(size as u64));
        group.bench_function("apply_reads", |b| {
            b.to_async(&runtime).iter(|| {
                turn += 1;
                let batch = &batches[turn % BATCHES];
                let store = &store;
                async move { store.apply_reads(batch, None, now_millis()).await.unwrap() }
            })
        });
        group.bench_function("batch_counts", |b| {
            b.to_async(&runtime).iter(|| {
                turn += 1;
                let ids = &distinct[turn % BATCHES];
                let store = &store;
                async move {
                    let counts = store.batch_counts(Biz::Article, ids).await.unwrap();
                    assert_eq!(counts.len(), ids.len());
                    counts
                }
            })
        });
        // The read counter's whole database work for a batch: the apply, then the refill of
        // every object it touched (the most it refills; embedded it refills only cached ones).
        group.bench_function("counter", |b| {
            b.to_async(&runtime).iter(|| {
                turn += 1;
                let batch = &batches[turn % BATCHES];
                let store = &store;
                async move {
                    let applied = store.apply_reads(batch, None, now_millis()).await.unwrap();
                    let ids: Vec<i64> = applied.iter().map(|((_, id), _)| *id).collect();
                    store.batch_counts(Biz::Article, &ids).await.unwrap()
                }
            })
        });
        if size == SIZES[0] {
            group.bench_function("batch_counts_numbered_baseline", |b| {
                b.to_async(&runtime).iter(|| {
                    turn += 1;
                    let ids = &distinct[turn % BATCHES];
                    let db = &db;
                    async move {
                        let found = batch_counts_numbered(db, ids).await;
                        assert_eq!(found, ids.len());
                        found
                    }
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, read_batches);
criterion_main!(benches);
