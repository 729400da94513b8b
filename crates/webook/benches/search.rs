//! Search queries through the search feature's own code, exactly as `GET /search` runs them:
//! [`SearchIndex::open`] (which registers the analyses), then per query
//! `query::ranked(&searcher, fields, ARTICLE, q, 21, now)` (prepare and search, as the service
//! does) — no hydration, no highlights: the index's part of a request.
//!
//! - `search/tantivy/*`: 1-, 2- and 3-term Chinese and English queries, each as typed (the last
//!   term still being typed, so it also matches as a prefix: what the service does for a `q`
//!   that does not end in a space) and complete (`q` ending in a space: no prefix expansion),
//!   and the queries only the search since issue 49 answers (a single character, a homophone
//!   slip, pinyin, an English typo); p50/p99 of 1 000 calls by one caller, then of every call
//!   of [`CALLERS`] concurrent callers but each one's first (a new thread's, printed apart).
//! - With `WEBOOK_BENCH_SEARCH_PG_URL` set, the baseline: PostgreSQL full-text search over the
//!   same published articles, Discourse's way — `to_tsvector('simple', …)` of the title and text
//!   segmented by the same jieba words ([`tokens::words`], joined by spaces) in a `tsvector`
//!   column with a GIN index, queried with `plainto_tsquery('simple', <segmented query>)`
//!   ranked by `ts_rank`, `LIMIT 21`. The table (`search_bench_docs`) is loaded on first use
//!   from the database the index was built from (load and index build times printed), and
//!   reused by later runs; drop it to reload.
//!
//! Every query must find something (a query without hits measures nothing); the number of
//! matching documents of each side is printed next to its latencies (they differ by design:
//! tantivy's character pairs find substrings jieba did not cut out, and it also searches
//! authors and tags, which the PostgreSQL table leaves out).
//!
//! The index: `WEBOOK_BENCH_SEARCH_DIR` names a built one (e.g. `<data dir>/search` after
//! `webook --data-dir <data dir> search reindex`), and `WEBOOK_BENCH_SEARCH_DB` the database it
//! was built from (needed only to load PostgreSQL; default `sqlite://<dir>/../webook.db`).
//! Unset, the bench seeds a small corpus itself (20 000 articles on SQLite in a temp dir) and
//! builds its index with [`Feeder::rebuild`], printing the rebuild rate.
//!
//! Besides criterion's estimates the bench prints to stderr the latency percentiles of timed
//! runs of every query (1 000 for tantivy, up to 200 or 20 s for PostgreSQL) and hit counts.
//!
//! Run: `cargo bench -p webook --bench search` (a fresh machine: about 3 minutes). Against the
//! large seed and PostgreSQL: see docs/PERFORMANCE.md → Search. `WEBOOK_BENCH_SEARCH_ONLY=<text>`
//! keeps the queries whose label contains it (e.g. `zh 3 terms, complete`, to profile one).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::{
    hint::black_box,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use common::{ms, summary};
use criterion::{criterion_group, criterion_main, Criterion};
use indicatif::ProgressBar;
use platform::db::{now_millis, Db};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use webook::{
    article::text_of,
    schema::MIGRATIONS,
    search::{
        feeder::{Feeder, Readiness},
        index::{self, SearchIndex},
        query::{self, ParsedQuery},
        store::SearchStore,
        tokens,
    },
    seed::{seed, Plan},
};

/// The queries: (label, q as typed). Their words are drawn from the seed's vocabularies
/// (`seed/text.rs`), so every one occurs in the corpus.
const QUERIES: &[(&str, &str)] = &[
    ("zh 1 term", "数据库"),
    ("zh 2 terms", "数据库 索引"),
    ("zh 3 terms", "分布式 一致性 缓存"),
    ("en 1 term", "database"),
    ("en 2 terms", "database index"),
    ("en 3 terms", "cache latency replica"),
];

/// Queries that only the search since issue 49 answers (tantivy only: PostgreSQL's baseline
/// finds nothing for most): a single character, a homophone slip, pinyin, an English typo.
const RECALL_QUERIES: &[(&str, &str)] = &[
    ("zh 1 character", "库"),
    ("zh homophone slip", "数据酷"),
    ("pinyin", "shujuku"),
    ("en typo", "databse"),
];

/// Concurrent callers of the second measurement, and the calls each makes.
const CALLERS: usize = 8;
const CALLS_PER_CALLER: usize = 60;

const LIMIT: usize = 21;
const WRITER_HEAP: usize = 50_000_000;
const TANTIVY_CALLS: usize = 1000;
const TANTIVY_BUDGET: Duration = Duration::from_secs(20);
const PG_CALLS: usize = 200;
const PG_BUDGET: Duration = Duration::from_secs(20);
const PG_MIN_CALLS: usize = 10;
const PG_PAGE: i64 = 1000;
const PG_INSERT_ROWS: usize = 500;

struct World {
    _temp: Option<tempfile::TempDir>,
    index: SearchIndex,
    /// The database the index was built from.
    source: String,
    pg: Option<Db>,
}

/// Seeds a small corpus in a temp dir and builds its index, as `webook search reindex` does.
async fn small_corpus() -> (tempfile::TempDir, PathBuf, String) {
    let temp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", temp.path().join("webook.db").display());
    let db = Db::connect_url(&url, 16).await.unwrap();
    db.migrate(&MIGRATIONS).await.unwrap();
    let plan = Plan {
        users: 2_000,
        articles: 20_000,
        likes: 0,
        collects: 0,
        reads: 0,
        comments: 0,
        follows: 0,
        ..Plan::default()
    };
    let started = Instant::now();
    seed(&db, &plan, &ProgressBar::hidden()).await.unwrap();
    eprintln!(
        "seeded {} articles in {:.1} s",
        plan.articles,
        started.elapsed().as_secs_f64()
    );
    let dir = temp.path().join("search");
    let index = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || SearchIndex::open(&dir, WRITER_HEAP))
            .await
            .unwrap()
            .unwrap()
            .0
    };
    let feeder = Feeder::new(
        Arc::new(index),
        SearchStore::new(db.clone()),
        Arc::new(Readiness::default()),
        Default::default(),
    );
    let started = Instant::now();
    let rows = feeder
        .rebuild(Default::default(), &CancellationToken::new(), |_, _| {})
        .await
        .unwrap()
        .unwrap();
    let seconds = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let rate = rows as f64 / seconds;
    eprintln!("rebuilt the index: {rows} rows in {seconds:.1} s ({rate:.0} rows/s)");
    drop(feeder); // releases the index's writer lock before the bench opens it again
    db.close().await;
    (temp, dir, url)
}

async fn build() -> World {
    let (temp, dir, source) = match std::env::var("WEBOOK_BENCH_SEARCH_DIR") {
        Ok(dir) => {
            let dir = PathBuf::from(dir);
            let source = std::env::var("WEBOOK_BENCH_SEARCH_DB").unwrap_or_else(|_| {
                let data_dir = dir.parent().unwrap_or(Path::new("."));
                format!("sqlite://{}", data_dir.join("webook.db").display())
            });
            (None, dir, source)
        }
        Err(_) => {
            let (temp, dir, source) = small_corpus().await;
            (Some(temp), dir, source)
        }
    };
    let started = Instant::now();
    let (index, state) = tokio::task::spawn_blocking(move || {
        tokens::warm_up();
        SearchIndex::open(&dir, WRITER_HEAP)
    })
    .await
    .unwrap()
    .unwrap();
    assert!(
        state.is_some(),
        "the index is not a complete build (run `webook search reindex` first)"
    );
    let articles = index.count(index::ARTICLE).unwrap();
    let users = index.count(index::USER).unwrap();
    let segments = index.reader().searcher().segment_readers().len();
    eprintln!(
        "index opened in {:.0} ms: {articles} articles, {users} users, {segments} segments",
        ms(started.elapsed())
    );
    assert!(articles > 0);
    let pg = match std::env::var("WEBOOK_BENCH_SEARCH_PG_URL") {
        Ok(url) => {
            let pg = Db::connect_url(&url, 4).await.unwrap();
            load_pg(&pg, &source).await;
            Some(pg)
        }
        Err(_) => None,
    };
    World {
        _temp: temp,
        index,
        source,
        pg,
    }
}

/// `text`'s jieba words joined by spaces: what `to_tsvector('simple', …)` splits back.
fn segmented(text: &str) -> String {
    let words: Vec<String> = tokens::words(text).into_iter().map(|t| t.text).collect();
    words.join(" ")
}

/// Loads the published articles of `source` into `search_bench_docs` unless it has rows.
async fn load_pg(pg: &Db, source: &str) {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS search_bench_docs (id BIGINT PRIMARY KEY, tsv TSVECTOR NOT NULL)",
    )
    .execute(pg.pool())
    .await
    .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM search_bench_docs")
        .fetch_one(pg.pool())
        .await
        .unwrap();
    if rows > 0 {
        eprintln!("PostgreSQL: search_bench_docs already holds {rows} rows; reusing it");
        return;
    }
    let db = Db::connect_url(source, 4).await.unwrap();
    let store = SearchStore::new(db.clone());
    let started = Instant::now();
    let mut segmenting = Duration::ZERO;
    let mut after = 0;
    let mut loaded = 0usize;
    let mut insert: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        let page = store.article_page(after, PG_PAGE).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.id;
        let segment_started = Instant::now();
        let docs: Vec<(i64, String)> = tokio::task::spawn_blocking(move || {
            page.into_iter()
                .map(|row| {
                    let text = format!("{}\n{}", row.title, text_of(&row.content));
                    (row.id, segmented(&text))
                })
                .collect()
        })
        .await
        .unwrap();
        segmenting += segment_started.elapsed();
        loaded += docs.len();
        // One page inserting while the next is read and segmented.
        if let Some(previous) = insert.take() {
            previous.await.unwrap();
        }
        let pg = pg.clone();
        insert = Some(tokio::spawn(async move {
            for chunk in docs.chunks(PG_INSERT_ROWS) {
                let values: Vec<String> = (0..chunk.len())
                    .map(|i| format!("(${}, to_tsvector('simple', ${}))", 2 * i + 1, 2 * i + 2))
                    .collect();
                let sql = format!(
                    "INSERT INTO search_bench_docs (id, tsv) VALUES {}",
                    values.join(", ")
                );
                let mut query = sqlx::query(&sql);
                for (id, words) in chunk {
                    query = query.bind(*id).bind(words.as_str());
                }
                query.execute(pg.pool()).await.unwrap();
            }
        }));
    }
    if let Some(previous) = insert.take() {
        previous.await.unwrap();
    }
    let load = started.elapsed();
    let started = Instant::now();
    sqlx::query("CREATE INDEX search_bench_docs_tsv ON search_bench_docs USING GIN (tsv)")
        .execute(pg.pool())
        .await
        .unwrap();
    let gin = started.elapsed();
    let started = Instant::now();
    sqlx::query("VACUUM ANALYZE search_bench_docs")
        .execute(pg.pool())
        .await
        .unwrap();
    let analyze = started.elapsed();
    let size: String =
        sqlx::query_scalar("SELECT pg_size_pretty(pg_total_relation_size('search_bench_docs'))")
            .fetch_one(pg.pool())
            .await
            .unwrap();
    let gin_size: String =
        sqlx::query_scalar("SELECT pg_size_pretty(pg_relation_size('search_bench_docs_tsv'))")
            .fetch_one(pg.pool())
            .await
            .unwrap();
    #[allow(clippy::cast_precision_loss)]
    let rate = loaded as f64 / load.as_secs_f64();
    eprintln!(
        "PostgreSQL: loaded {loaded} articles in {:.1} s ({rate:.0} rows/s; {:.1} s of it \
         segmenting in this process), GIN index built in {:.1} s, VACUUM ANALYZE {:.1} s; \
         table with indexes {size}, GIN {gin_size}",
        load.as_secs_f64(),
        segmenting.as_secs_f64(),
        gin.as_secs_f64(),
        analyze.as_secs_f64()
    );
    db.close().await;
}

/// Tantivy's hits for `q`, as the service asks for them.
fn tantivy_search(index: &SearchIndex, q: &str, now: i64) -> Vec<query::Hit> {
    let searcher = index.reader().searcher();
    query::ranked(&searcher, index.fields(), index::ARTICLE, q, LIMIT, now).unwrap()
}

/// How many articles `q` matches in tantivy.
fn tantivy_count(index: &SearchIndex, q: &str) -> usize {
    let searcher = index.reader().searcher();
    let parsed = ParsedQuery::parse(q);
    let synonyms = Default::default();
    query::prepare(
        &searcher,
        index.fields(),
        index::ARTICLE,
        &parsed,
        &synonyms,
    )
    .and_then(|prepared| prepared.count(&searcher))
    .unwrap()
}

const PG_SEARCH: &str = "SELECT d.id, ts_rank(d.tsv, q) AS rank \
     FROM search_bench_docs d, plainto_tsquery('simple', $1) q \
     WHERE d.tsv @@ q ORDER BY rank DESC, d.id DESC LIMIT 21";

async fn pg_search(pg: &Db, words: &str) -> Vec<(i64, f32)> {
    sqlx::query_as(PG_SEARCH)
        .bind(words)
        .fetch_all(pg.pool())
        .await
        .unwrap()
}

async fn pg_count(pg: &Db, words: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM search_bench_docs WHERE tsv @@ plainto_tsquery('simple', $1)",
    )
    .bind(words)
    .fetch_one(pg.pool())
    .await
    .unwrap()
}

/// The variants of each query: as typed, and complete (ending in a space); with
/// `WEBOOK_BENCH_SEARCH_ONLY` set, only those whose label contains it (e.g. `zh 3 terms`, for a
/// profile of one query).
fn variants() -> Vec<(String, String)> {
    let only = std::env::var("WEBOOK_BENCH_SEARCH_ONLY").unwrap_or_default();
    QUERIES
        .iter()
        .chain(RECALL_QUERIES)
        .flat_map(|(label, q)| {
            [
                (format!("{label}, as typed (prefix)"), (*q).to_owned()),
                (format!("{label}, complete"), format!("{q} ")),
            ]
        })
        .filter(|(label, _)| label.contains(&only))
        .collect()
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let world = runtime.block_on(build());
    let now = now_millis();
    eprintln!("source database: {}", platform::redact_url(&world.source));

    eprintln!("tantivy, 1 caller (query::ranked, limit {LIMIT}):");
    for (label, q) in variants() {
        let hits = tantivy_search(&world.index, &q, now);
        let count = tantivy_count(&world.index, &q);
        // `count`: the documents matching as typed (none for a slip, pinyin or a typo).
        assert!(!hits.is_empty(), "{q:?} finds nothing");
        let mut samples = Vec::with_capacity(TANTIVY_CALLS);
        let started = Instant::now();
        while samples.len() < TANTIVY_CALLS && started.elapsed() < TANTIVY_BUDGET {
            let call = Instant::now();
            black_box(tantivy_search(&world.index, &q, now));
            samples.push(ms(call.elapsed()));
        }
        summary(&format!("{label} [{q}] ({count} exact hits)"), samples);
    }

    eprintln!(
        "tantivy, {CALLERS} concurrent callers ({CALLS_PER_CALLER} calls each, latency of each call):"
    );
    for (label, q) in variants()
        .into_iter()
        .filter(|(label, _)| label.ends_with("complete"))
    {
        let calls: Vec<Vec<f64>> = std::thread::scope(|scope| {
            let callers: Vec<_> = (0..CALLERS)
                .map(|_| {
                    scope.spawn(|| {
                        (0..=CALLS_PER_CALLER)
                            .map(|_| {
                                let call = Instant::now();
                                black_box(tantivy_search(&world.index, &q, now));
                                ms(call.elapsed())
                            })
                            .collect::<Vec<f64>>()
                    })
                })
                .collect();
            callers
                .into_iter()
                .map(|caller| caller.join().unwrap())
                .collect()
        });
        // Each caller's first call is a new thread's (its working memory not yet there), as a
        // server's blocking threads are only when they start: reported apart.
        let first = calls.iter().map(|calls| calls[0]).fold(0.0, f64::max);
        let samples: Vec<f64> = calls
            .into_iter()
            .flat_map(|calls| calls.into_iter().skip(1))
            .collect();
        summary(&format!("{label} [{q}]"), samples);
        eprintln!("    (first call of each caller: at most {first:.2} ms)");
    }

    if let Some(pg) = &world.pg {
        eprintln!("PostgreSQL, 1 caller (plainto_tsquery + ts_rank, limit {LIMIT}):");
        for (label, q) in QUERIES {
            let words = segmented(q);
            let (hits, count) = runtime.block_on(async {
                let hits = pg_search(pg, &words).await;
                (hits, pg_count(pg, &words).await)
            });
            assert!(
                !hits.is_empty() && count > 0,
                "{q:?} finds nothing in PostgreSQL"
            );
            let samples = runtime.block_on(async {
                let mut samples = Vec::with_capacity(PG_CALLS);
                let started = Instant::now();
                while samples.len() < PG_CALLS
                    && (samples.len() < PG_MIN_CALLS || started.elapsed() < PG_BUDGET)
                {
                    let call = Instant::now();
                    black_box(pg_search(pg, &words).await);
                    samples.push(ms(call.elapsed()));
                }
                samples
            });
            summary(&format!("{label} [{words}] ({count} hits)"), samples);
        }
        let plan: Vec<String> = runtime.block_on(async {
            sqlx::query_scalar(&format!(
                "EXPLAIN (ANALYZE, BUFFERS) {}",
                PG_SEARCH.replace("$1", &format!("'{}'", segmented(QUERIES[1].1)))
            ))
            .fetch_all(pg.pool())
            .await
            .unwrap()
        });
        eprintln!("  plan of {:?}:\n    {}", QUERIES[1].1, plan.join("\n    "));
    }

    let mut group = c.benchmark_group("search/tantivy");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(30);
    for (label, q) in variants() {
        group.bench_function(label.as_str(), |b| {
            b.iter(|| black_box(tantivy_search(&world.index, &q, now)));
        });
    }
    group.finish();
    if let Some(pg) = world.pg {
        runtime.block_on(pg.close());
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
