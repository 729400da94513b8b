//! Computation time of the hot list against the number of candidate articles, on SQLite and
//! PostgreSQL, next to a bare read of the same rows (not a criterion bench: one run of the
//! largest size takes seconds, and the figures of interest are ratios).
//!
//! For each backend and each size N (default 100 000 and 1 000 000; a fresh database per size),
//! it seeds N published articles first published within the last 6 days (ids in publication
//! order, as a real site fills up) by a few authors, with `interactives` counters for 9 in 10 of
//! them, then measures, four times each, interleaved (compute and the bare read take turns going
//! first, the one SELECT last; a computation over 30 s is not repeated):
//!
//! - **compute**: [`RankingService::compute`] of the service `webook::ranking::build` makes from
//!   the test config (Hacker News score, top 100, 7-day window, shared copy in
//!   `ranking_snapshots`): scan, score, heap, details of the winners, serialise, publish (the
//!   "tail": everything after the last `progress` call, reported on its own);
//! - **bare stream**: the same scan ([`RankingStore::fold_candidates`]: one statement, on a
//!   direct connection on SQLite) with nothing done to the rows but counting them;
//! - **one aggregate**: the floor — the engine computing the scan's join and filter as one
//!   `count`/`sum` over the same columns, one row out;
//! - **keyset batches (before)**: the scan as it was until 2026-12-03, 1 000-row keyset batches
//!   through sqlx's `Any` pool;
//! - **one SELECT**: the scan's columns, join and filter as one sqlx query (`fetch_all`: rows
//!   buffered), what sqlx's decoding costs without paging.
//!
//! Printed: a markdown table of medians (best in parentheses), compute against the one
//! aggregate and the growth of the compute time from the smallest to the largest size; then,
//! for the keyset scan of before, the query plans of one batch from the middle and from nine
//! tenths into the scan at the largest size (`EXPLAIN QUERY PLAN` on SQLite, `EXPLAIN
//! (ANALYZE, BUFFERS)` on PostgreSQL), the time of one batch at the start, middle and end of
//! the scan, and the same for two other spellings of the keyset condition.
//! PostgreSQL tables are `VACUUM ANALYZE`d after seeding, as autovacuum would leave them: a
//! freshly bulk-loaded table is otherwise vacuumed (and its hint bits set) while the
//! measurements run on the same two cores. SQLite gets no `ANALYZE`, as in production.
//!
//! Run with the test services (PostgreSQL needs them): `scripts/with-services.sh cargo bench -p
//! webook --bench ranking`. Arguments filter: backend names (`sqlite`, `postgres`) and sizes
//! (`cargo bench -p webook --bench ranking -- sqlite 100000`). Seeding progress goes to stderr.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    fmt::Write as _,
    time::{Duration, Instant},
};
use webook::schema::MIGRATIONS;

use platform::testing::TestDb;
use platform::{
    config::DatabaseKind,
    db::{now_millis, Db},
};
use sqlx::Row;
use webook::{
    ranking::{self, store::RankingStore},
    testing::test_config,
};

const DAY_MS: i64 = 24 * 3600 * 1000;
const AUTHORS: i64 = 20;
const ROWS_PER_INSERT: i64 = 1000;
const ROWS_PER_TRANSACTION: i64 = 50_000;
const RUNS: usize = 4;
/// After a computation this slow (a quadratic scan at the largest size), the other runs are
/// skipped: one sample of each is the figure then, and the with-services slot is not held for
/// many minutes.
const SLOW_RUN: Duration = Duration::from_secs(30);
/// The batch of the keyset scan the hot list used until 2026-12-03.
const BATCH: i64 = 1000;
/// The candidate query of `RankingStore::fold_candidates` with its parameters spelled out, for
/// the query plans, the keyset batches and the one-SELECT read (keep in step with
/// `ranking/store.rs`).
const SCAN_COLUMNS: &str = "SELECT p.id, p.author_id, p.ctime, p.utime, \
     COALESCE(i.like_cnt, 0) AS like_cnt, COALESCE(i.collect_cnt, 0) AS collect_cnt, \
     COALESCE(i.read_cnt, 0) AS read_cnt \
     FROM published_articles p \
     LEFT JOIN interactives i ON i.biz = 'article' AND i.biz_id = p.id";

/// A well-mixed hash of `n` (splitmix64), for repeatable "random" counters.
fn mix(n: i64) -> u64 {
    let mut z = (n as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A multi-row INSERT of `rows` (already rendered tuples) into `table (columns)`.
async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    table: &str,
    columns: &str,
    rows: &[String],
) {
    if rows.is_empty() {
        return;
    }
    let sql = format!("INSERT INTO {table} ({columns}) VALUES {}", rows.join(","));
    sqlx::raw_sql(&sql).execute(&mut **tx).await.unwrap();
}

/// Seeds `count` published articles first published in the 6 days before `now`, ids in
/// publication order (a little jitter, so some share a millisecond and many are out of id order
/// by a few), with counters (likes skewed: most have few, some many) for 9 in 10.
async fn seed(db: &Db, count: i64, now: i64) {
    let started = Instant::now();
    let span = 6 * DAY_MS;
    let first = now - span;
    let mut tx = db.writer().begin().await.unwrap();
    let users: Vec<String> = (1..=AUTHORS)
        .map(|id| {
            let nickname = if id % 5 == 0 {
                String::new()
            } else {
                format!("Author {id}")
            };
            format!("({id}, 'author{id}@example.com', 'x', '{nickname}', {first}, {first})")
        })
        .collect();
    insert(
        &mut tx,
        "users",
        "id, email, password, nickname, ctime, utime",
        &users,
    )
    .await;
    tx.commit().await.unwrap();

    let mut next = 1;
    while next <= count {
        let mut tx = db.writer().begin().await.unwrap();
        let end = (next + ROWS_PER_TRANSACTION).min(count + 1);
        while next < end {
            let stop = (next + ROWS_PER_INSERT).min(end);
            let (mut articles, mut published, mut counters) = (Vec::new(), Vec::new(), Vec::new());
            for id in next..stop {
                let hash = mix(id);
                let jitter = i64::try_from(hash % 120_000).unwrap();
                let ctime = (first + (id - 1) * span / count + jitter).min(now - 1);
                let utime = ctime + i64::try_from((hash >> 20) % 3_600_000).unwrap();
                let author = 1 + id % AUTHORS;
                let row = format!(
                    "({id}, {author}, 'Article {id}', '<p>Body of article {id}.</p>', \
                     'Body of article {id}.', 2, {ctime}, {utime})"
                );
                articles.push(row.clone());
                published.push(row);
                if id % 10 != 0 {
                    let roll = i64::try_from((hash >> 8) % 1000).unwrap();
                    let likes = roll * roll * roll / 1_000_000;
                    let collects = likes / 4 + i64::try_from((hash >> 40) % 5).unwrap();
                    let reads = likes * 10 + i64::try_from((hash >> 32) % 500).unwrap();
                    counters.push(format!(
                        "({id}, 'article', {id}, {reads}, {likes}, {collects}, {ctime}, {utime})"
                    ));
                }
            }
            let columns = "id, author_id, title, content, abstract, status, ctime, utime";
            insert(&mut tx, "articles", columns, &articles).await;
            insert(&mut tx, "published_articles", columns, &published).await;
            insert(
                &mut tx,
                "interactives",
                "id, biz, biz_id, read_cnt, like_cnt, collect_cnt, ctime, utime",
                &counters,
            )
            .await;
            next = stop;
        }
        tx.commit().await.unwrap();
        eprintln!(
            "  seeded {}/{count} articles ({:.1} s)",
            next - 1,
            started.elapsed().as_secs_f64()
        );
    }
    if db.kind() == DatabaseKind::Postgres {
        sqlx::raw_sql("VACUUM ANALYZE")
            .execute(db.writer())
            .await
            .unwrap();
    }
}

/// The candidates in keyset batches of [`BATCH`] through sqlx, as `compute` read them until
/// 2026-12-03, and nothing else. Returns how many.
async fn bare_keyset(db: &Db, since: i64) -> u64 {
    let mut after = (since - 1, i64::MAX);
    let mut rows = 0u64;
    let mut checksum = 0i64;
    loop {
        let batch = sqlx::query(&batch_query(since, after))
            .fetch_all(db.pool())
            .await
            .unwrap();
        rows += batch.len() as u64;
        for row in &batch {
            checksum = checksum.wrapping_add(row.try_get::<i64, _>("like_cnt").unwrap());
        }
        match batch.last() {
            Some(last) if batch.len() == usize::try_from(BATCH).unwrap() => {
                after = (last.try_get("ctime").unwrap(), last.try_get("id").unwrap());
            }
            _ => break,
        }
    }
    std::hint::black_box(checksum);
    rows
}

/// The candidates as `compute` reads them ([`RankingStore::fold_candidates`]), counted and
/// nothing else. Returns how many.
async fn bare_stream(store: &RankingStore, since: i64) -> u64 {
    let (rows, checksum) = store
        .fold_candidates(since, (0u64, 0i64), |(rows, checksum), candidate| {
            *rows += 1;
            *checksum = checksum.wrapping_add(candidate.signals.likes);
        })
        .await
        .unwrap();
    std::hint::black_box(checksum);
    rows
}

/// The floor: the engine computing the scan's join and filter as one aggregate over the same
/// columns, one row out. Returns how many rows it aggregated.
async fn one_aggregate(db: &Db, since: i64) -> u64 {
    let sql = format!(
        "SELECT count(*) AS n, CAST(sum(p.id + p.author_id + p.ctime + p.utime \
                + COALESCE(i.like_cnt, 0) + COALESCE(i.collect_cnt, 0) + COALESCE(i.read_cnt, 0)) \
                AS BIGINT) AS total \
         FROM published_articles p \
         LEFT JOIN interactives i ON i.biz = 'article' AND i.biz_id = p.id \
         WHERE p.status = 2 AND p.ctime >= {since}"
    );
    let row = sqlx::query(&sql).fetch_one(db.pool()).await.unwrap();
    u64::try_from(row.try_get::<i64, _>("n").unwrap()).unwrap()
}

/// The scan's columns in one query (no paging), decoded like `candidates` decodes them.
async fn one_select(db: &Db, since: i64) -> u64 {
    let sql =
        format!("{SCAN_COLUMNS} WHERE p.status = 2 AND p.ctime >= {since} ORDER BY p.ctime, p.id");
    let rows = sqlx::query(&sql).fetch_all(db.pool()).await.unwrap();
    let mut checksum = 0i64;
    for row in &rows {
        for column in [
            "id",
            "author_id",
            "ctime",
            "utime",
            "collect_cnt",
            "read_cnt",
        ] {
            checksum = checksum.wrapping_add(row.try_get::<i64, _>(column).unwrap());
        }
        checksum = checksum.wrapping_add(row.try_get::<i64, _>("like_cnt").unwrap());
    }
    std::hint::black_box(checksum);
    rows.len() as u64
}

/// The keyset batch query after `(ctime, id)` as `RankingStore::scan` runs it, parameters
/// spelled out.
fn batch_query(since: i64, (ctime, id): (i64, i64)) -> String {
    format!(
        "{SCAN_COLUMNS} WHERE p.status = 2 AND p.ctime >= {since} AND p.ctime >= {ctime} \
         AND (p.ctime > {ctime} OR (p.ctime = {ctime} AND p.id > {id})) \
         ORDER BY p.ctime, p.id LIMIT {BATCH}"
    )
}

/// The (ctime, id) of the candidate at `offset` in scan order.
async fn position(db: &Db, since: i64, offset: u64) -> (i64, i64) {
    sqlx::query_as(&format!(
        "SELECT ctime, id FROM published_articles WHERE status = 2 AND ctime >= {since} \
         ORDER BY ctime, id LIMIT 1 OFFSET {offset}"
    ))
    .fetch_one(db.pool())
    .await
    .unwrap()
}

/// The plans of one keyset batch from half-way and nine tenths through the candidates, and the
/// time of one batch (best of 3) at the start, the middle and the end of the scan: equal if a
/// batch costs the same wherever it starts (linear scan), growing if each batch re-reads what
/// came before.
async fn plan(db: &Db, since: i64, total: u64) -> String {
    let mut out = String::new();
    for (label, offset) in [("middle", total / 2), ("nine tenths", total * 9 / 10)] {
        let after = position(db, since, offset).await;
        let query = batch_query(since, after);
        writeln!(
            out,
            "-- one batch after (ctime, id) = ({}, {}), row {offset} (the {label})",
            after.0, after.1
        )
        .unwrap();
        match db.kind() {
            DatabaseKind::Sqlite => {
                let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {query}"))
                    .fetch_all(db.pool())
                    .await
                    .unwrap();
                for row in rows {
                    writeln!(out, "{}", row.try_get::<String, _>("detail").unwrap()).unwrap();
                }
            }
            DatabaseKind::Postgres => {
                // As the keyset scan ran it: parallel query off.
                let mut transaction = db.pool().begin().await.unwrap();
                sqlx::query("SET LOCAL max_parallel_workers_per_gather = 0")
                    .execute(&mut *transaction)
                    .await
                    .unwrap();
                let rows = sqlx::query(&format!("EXPLAIN (ANALYZE, BUFFERS) {query}"))
                    .fetch_all(&mut *transaction)
                    .await
                    .unwrap();
                for row in rows {
                    writeln!(out, "{}", row.try_get::<String, _>(0).unwrap()).unwrap();
                }
            }
        }
    }
    for (label, offset) in [
        ("start", 0),
        ("middle", total / 2),
        ("end", total - BATCH as u64),
    ] {
        let after = if offset == 0 {
            (since - 1, i64::MAX)
        } else {
            position(db, since, offset - 1).await
        };
        let sql = batch_query(since, after);
        let mut best = f64::MAX;
        for _ in 0..3 {
            let started = Instant::now();
            let rows = sqlx::query(&sql).fetch_all(db.pool()).await.unwrap();
            best = best.min(ms(started.elapsed()));
            assert_eq!(rows.len(), usize::try_from(BATCH).unwrap());
        }
        writeln!(
            out,
            "-- one batch of {BATCH} at the {label} (row {offset}): {best:.1} ms"
        )
        .unwrap();
    }
    // Two other spellings of the keyset condition, for comparison: the service's condition
    // without the redundant lower bound on ctime (what it ran before), and a row-value
    // comparison.
    let variants: [(&str, KeysetQuery); 2] = [
        ("without `p.ctime >= c`", |since, (ctime, id)| {
            format!(
                "{SCAN_COLUMNS} WHERE p.status = 2 AND p.ctime >= {since} \
                 AND (p.ctime > {ctime} OR (p.ctime = {ctime} AND p.id > {id})) \
                 ORDER BY p.ctime, p.id LIMIT {BATCH}"
            )
        }),
        (
            "row value `(p.ctime, p.id) > (c, i)`",
            |since, (ctime, id)| {
                format!(
                    "{SCAN_COLUMNS} WHERE p.status = 2 AND p.ctime >= {since} \
                 AND (p.ctime, p.id) > ({ctime}, {id}) ORDER BY p.ctime, p.id LIMIT {BATCH}"
                )
            },
        ),
    ];
    let end = position(db, since, total - BATCH as u64 - 1).await;
    let explain = match db.kind() {
        DatabaseKind::Sqlite => "EXPLAIN QUERY PLAN",
        DatabaseKind::Postgres => "EXPLAIN",
    };
    for (name, query) in variants {
        writeln!(out, "-- variant {name}, batch at the end:").unwrap();
        let rows = sqlx::query(&format!("{explain} {}", query(since, end)))
            .fetch_all(db.pool())
            .await
            .unwrap();
        for row in rows {
            let line: String = match db.kind() {
                DatabaseKind::Sqlite => row.try_get("detail").unwrap(),
                DatabaseKind::Postgres => row.try_get(0).unwrap(),
            };
            writeln!(out, "{line}").unwrap();
        }
        for (label, offset) in [
            ("start", 0),
            ("middle", total / 2),
            ("end", total - BATCH as u64),
        ] {
            let after = if offset == 0 {
                (since - 1, i64::MAX)
            } else {
                position(db, since, offset - 1).await
            };
            let sql = query(since, after);
            let mut best = f64::MAX;
            for _ in 0..3 {
                let started = Instant::now();
                let rows = sqlx::query(&sql).fetch_all(db.pool()).await.unwrap();
                best = best.min(ms(started.elapsed()));
                assert_eq!(rows.len(), usize::try_from(BATCH).unwrap());
            }
            writeln!(
                out,
                "-- variant {name}, one batch at the {label} (row {offset}): {best:.1} ms"
            )
            .unwrap();
        }
    }
    out
}

/// A keyset batch query from `since` and the last `(ctime, id)` read.
type KeysetQuery = fn(i64, (i64, i64)) -> String;

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// (median, best) of `samples` in ms.
fn stats(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let middle = samples.len() / 2;
    let median = if samples.len().is_multiple_of(2) {
        (samples[middle - 1] + samples[middle]) / 2.0
    } else {
        samples[middle]
    };
    (median, samples[0])
}

/// `read`, timed (ms); checks it read every candidate.
async fn timed(read: impl std::future::Future<Output = u64>, size: i64) -> f64 {
    let started = Instant::now();
    let rows = read.await;
    let elapsed = ms(started.elapsed());
    assert_eq!(rows, u64::try_from(size).unwrap());
    elapsed
}

struct Figures {
    backend: &'static str,
    size: i64,
    compute: (f64, f64),
    tail: (f64, f64),
    stream: (f64, f64),
    aggregate: (f64, f64),
    keyset: (f64, f64),
    select: (f64, f64),
    candidates: u64,
}

async fn measure(backend: &'static str, kind: DatabaseKind, size: i64) -> (Figures, String) {
    eprintln!("{backend}: seeding {size} articles");
    let test_db = TestDb::new(kind, &MIGRATIONS).await;
    let db = &test_db.db;
    let now = now_millis();
    seed(db, size, now).await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(dir.path(), &test_db.url);
    let service = ranking::build(&config, db, None).unwrap();
    let store = RankingStore::new(db.clone());
    let window = i64::try_from(
        config
            .settings::<ranking::RankingSettings>()
            .unwrap()
            .ranking_window
            .as_millis(),
    )
    .unwrap();

    // One untimed read of every candidate row so measured passes start from a warm cache.
    let since = now_millis() - window;
    assert_eq!(one_select(db, since).await, u64::try_from(size).unwrap());

    let (mut compute, mut tail) = (Vec::new(), Vec::new());
    let (mut keyset, mut select) = (Vec::new(), Vec::new());
    let (mut stream, mut aggregate) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        // Whichever pass follows the one-SELECT pass (which buffers and frees every row) was
        // measured up to ~25 % slower on SQLite, so compute and the bare read take turns going
        // first.
        let bare_first = run % 2 == 1;
        let since = now_millis() - window;
        if bare_first {
            stream.push(timed(bare_stream(&store, since), size).await);
        }
        let at = now_millis();
        let started = Instant::now();
        // When the last batch was scored: the rest is the tail (winners' details, serialise,
        // publish).
        let scanned = std::sync::Arc::new(std::sync::Mutex::new(started));
        let last_progress = scanned.clone();
        let report = service
            .compute(
                (at, i64::try_from(run).unwrap()),
                at,
                move |_| *last_progress.lock().unwrap() = Instant::now(),
                || true,
            )
            .await
            .unwrap();
        compute.push(ms(started.elapsed()));
        tail.push(ms(scanned.lock().unwrap().elapsed()));
        assert_eq!(
            report.kept,
            config
                .settings::<ranking::RankingSettings>()
                .unwrap()
                .ranking_size
        );
        assert!(report.shared);
        assert_eq!(report.candidates, u64::try_from(size).unwrap());
        if !bare_first {
            stream.push(timed(bare_stream(&store, since), size).await);
        }
        aggregate.push(timed(one_aggregate(db, since), size).await);
        keyset.push(timed(bare_keyset(db, since), size).await);

        let started = Instant::now();
        let rows = one_select(db, since).await;
        select.push(ms(started.elapsed()));
        assert_eq!(rows, u64::try_from(size).unwrap());
        eprintln!(
            "  run {}: compute {:.0} ms (tail {:.1} ms), bare stream {:.0} ms, one aggregate {:.0} \
             ms, bare keyset {:.0} ms, one SELECT {:.0} ms",
            run + 1,
            compute[run],
            tail[run],
            stream[run],
            aggregate[run],
            keyset[run],
            select[run]
        );
        if compute[run] > ms(SLOW_RUN) && run + 1 < RUNS {
            eprintln!("  (slow: one run only)");
            break;
        }
    }
    let candidates = u64::try_from(size).unwrap();
    let plan = plan(db, now_millis() - window, candidates).await;
    (
        Figures {
            backend,
            size,
            compute: stats(&mut compute),
            tail: stats(&mut tail),
            stream: stats(&mut stream),
            aggregate: stats(&mut aggregate),
            keyset: stats(&mut keyset),
            select: stats(&mut select),
            candidates,
        },
        plan,
    )
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; numbers choose sizes, other arguments filter backends.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    let mut sizes: Vec<i64> = args.iter().filter_map(|arg| arg.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![100_000, 1_000_000];
    }
    let filter: Vec<&String> = args
        .iter()
        .filter(|arg| arg.parse::<i64>().is_err())
        .collect();

    let mut figures = Vec::new();
    let mut plans = Vec::new();
    for (name, kind) in [
        ("sqlite", DatabaseKind::Sqlite),
        ("postgres", DatabaseKind::Postgres),
    ] {
        if !filter.is_empty() && !filter.iter().any(|wanted| name.contains(wanted.as_str())) {
            continue;
        }
        for &size in &sizes {
            let (figure, plan) = measure(name, kind, size).await;
            figures.push(figure);
            if size == *sizes.iter().max().unwrap() {
                plans.push((name, size, plan));
            }
        }
    }

    let cell = |(median, best): (f64, f64)| format!("{median:.0} ({best:.0})");
    println!(
        "\nmedian of {RUNS} runs in ms (best in parentheses; one run where a computation took over \
         {} s)\n",
        SLOW_RUN.as_secs()
    );
    println!(
        "| backend | candidates | compute | of which tail | bare stream | one aggregate | \
         compute / one aggregate | keyset batches (before) | one SELECT (sqlx, buffered) | \
         compute growth |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for figure in &figures {
        let smallest = figures
            .iter()
            .filter(|other| other.backend == figure.backend)
            .min_by_key(|other| other.size)
            .unwrap();
        let growth = if smallest.size == figure.size {
            "—".to_owned()
        } else {
            #[allow(clippy::cast_precision_loss)]
            let factor = figure.size as f64 / smallest.size as f64;
            format!(
                "{:.1}× for {factor:.0}× the articles",
                figure.compute.0 / smallest.compute.0
            )
        };
        println!(
            "| {} | {} | {} | {:.1} | {} | {} | {:.2} | {} | {} | {growth} |",
            figure.backend,
            figure.candidates,
            cell(figure.compute),
            figure.tail.0,
            cell(figure.stream),
            cell(figure.aggregate),
            figure.compute.0 / figure.aggregate.0,
            cell(figure.keyset),
            cell(figure.select),
        );
    }
    for (name, size, plan) in plans {
        println!("\n{name}, {size} candidates, plan of the candidate query:\n{plan}");
    }
}
