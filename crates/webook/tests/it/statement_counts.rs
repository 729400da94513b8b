//! Lists that read many objects cost a bounded number of SQL statements, not one per object:
//! `batch_counts` reads the counters of 100 objects with one statement, and a page of 100
//! top-level comments with their first replies takes a handful, whatever the page size.
//!
//! Each test runs in a process of its own (this test binary again, running that test alone):
//! it counts sqlx's statement log through a process-wide subscriber, which must see no other
//! test's queries (and which the first app another test starts would otherwise install first,
//! for its logs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use platform::{config::DatabaseKind, db::Db, events::EventStream, testing::TestDb};
use tracing_subscriber::layer::SubscriberExt as _;
use webook::{comment::CommentStore, interactive::store::InteractiveStore, schema::MIGRATIONS};

const BIZ: webook::biz::Biz = webook::biz::Biz::Article;

/// Counts the statements sqlx logs (target `sqlx::query`) that name one of `tables`, on any
/// thread: SQLite connections run their statements on worker threads of their own, and the pool
/// runs set-up statements (PRAGMAs) of its own on new connections, which must not count.
struct CountStatements {
    count: Arc<AtomicUsize>,
    tables: &'static [&'static str],
}

/// Collects every field of an event as text.
struct AllFields(String);

impl tracing::field::Visit for AllFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountStatements {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if !event.metadata().target().starts_with("sqlx::query") {
            return;
        }
        let mut fields = AllFields(String::new());
        event.record(&mut fields);
        if self.tables.iter().any(|table| fields.0.contains(table)) {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Installs the counter of statements naming `tables` for this whole process.
fn count_statements(tables: &'static [&'static str]) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::TRACE)
            .with(CountStatements {
                count: count.clone(),
                tables,
            }),
    )
    .unwrap();
    count
}

/// Set in the process that runs a test alone.
const ALONE: &str = "WEBOOK_TEST_ALONE";

/// In the process running test `name` alone, runs `body`; otherwise starts that process and
/// asserts it passed.
fn alone<F: std::future::Future<Output = ()>>(name: &str, body: impl FnOnce() -> F) {
    if std::env::var_os(ALONE).is_some() {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(body());
    }
    // Its name for the test harness: the path without the binary's crate name.
    let path = format!("{}::{name}", module_path!());
    let (_, name) = path.split_once("::").unwrap();
    let run = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    // Its output indented, so that its `test result:` line is not taken for this process's.
    let indented = |text: &[u8]| {
        String::from_utf8_lossy(text)
            .lines()
            .map(|line| format!("    {line}\n"))
            .collect::<String>()
    };
    assert!(
        run.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} alone: {}\n{}{}",
        run.status,
        indented(&run.stdout),
        indented(&run.stderr)
    );
}

#[test]
fn batch_counts_of_a_hundred_objects_is_one_statement() {
    alone(
        "batch_counts_of_a_hundred_objects_is_one_statement",
        one_statement_for_a_hundred_ids,
    );
}

async fn one_statement_for_a_hundred_ids() {
    let statements = count_statements(&["interactives"]);
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        let db = TestDb::new(kind, &MIGRATIONS).await;
        let store = InteractiveStore::new(db.db.clone());
        for id in (1..=100).step_by(3) {
            store.set_like(7, BIZ, id, true, 1).await.unwrap();
        }
        let ids: Vec<i64> = (1..=100).collect();

        let before = statements.load(Ordering::SeqCst);
        let found = store.batch_counts(BIZ, &ids).await.unwrap();
        assert_eq!(
            statements.load(Ordering::SeqCst) - before,
            1,
            "{kind:?}: one statement for 100 ids"
        );
        assert_eq!(found.len(), 34, "{kind:?}");
        assert!(
            found.values().all(|counts| counts.like_cnt == 1),
            "{kind:?}"
        );

        // The counter does see every statement: two single-id batches are two. (A single
        // object's `counts` is read inline on SQLite, past sqlx and its log.)
        let before = statements.load(Ordering::SeqCst);
        store.batch_counts(BIZ, &[1]).await.unwrap();
        store.batch_counts(BIZ, &[2]).await.unwrap();
        assert_eq!(statements.load(Ordering::SeqCst) - before, 2, "{kind:?}");
    }
}

#[test]
fn a_page_of_a_hundred_comments_with_their_replies_is_a_few_statements() {
    alone(
        "a_page_of_a_hundred_comments_with_their_replies_is_a_few_statements",
        few_statements_per_comment_page,
    );
}

/// Statements of a page, at most: the object's visibility, its total, the top-level comments,
/// and the first replies of up to 50 roots per statement.
const PAGE_STATEMENTS: usize = 5;

async fn few_statements_per_comment_page() {
    let statements = count_statements(&["comments", "interactives", "published_articles"]);
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        let db = TestDb::new(kind, &MIGRATIONS).await;
        let service = webook::testing::comment_service(&db.db, EventStream::in_process());
        let article = thread_of_roots_with_replies(&db.db, 150, 5).await;

        for limit in [10, 100] {
            let before = statements.load(Ordering::SeqCst);
            let page = service
                .thread_page(BIZ, article, None, limit)
                .await
                .unwrap();
            let used = statements.load(Ordering::SeqCst) - before;
            assert!(
                (3..=PAGE_STATEMENTS).contains(&used),
                "{kind:?}: a page of {limit} took {used} statements"
            );
            assert_eq!(page.items.len(), limit, "{kind:?}");
            assert_eq!(page.total, 150 * 6, "{kind:?}");
            for item in &page.items {
                assert_eq!(item.reply_cnt, Some(5), "{kind:?}");
                let replies = item.replies.as_ref().unwrap();
                let ids: Vec<i64> = replies.iter().map(|reply| reply.id).collect();
                assert_eq!(ids.len(), 3, "{kind:?}: first 3 replies of {}", item.id);
                assert!(
                    ids.windows(2).all(|w| w[0] < w[1]),
                    "{kind:?}: oldest first"
                );
                assert!(replies.iter().all(|reply| reply.root_id == Some(item.id)));
            }
        }
    }
}

#[test]
fn a_hundred_writes_at_the_gate_at_once_are_one_read() {
    alone(
        "a_hundred_writes_at_the_gate_at_once_are_one_read",
        one_gate_read_for_a_hundred_writes,
    );
}

/// The write gate reads the accounts of the writes waiting together with one statement (this
/// test's runtime runs on one thread, so all hundred ask before the reader's task runs); each
/// write gets its own account's answer — the suspended one, the others, one that does not
/// exist — and a write alone is a read of its own. A read that fails is each write's own
/// error, not a hang.
async fn one_gate_read_for_a_hundred_writes() {
    use webook::moderation::{service::GateReader, store::ModerationStore};
    let statements = count_statements(&["moderation_suspensions"]);
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        let db = TestDb::new(kind, &MIGRATIONS).await;
        let values: Vec<String> = (1..=100)
            .map(|id| format!("({id}, 'u{id}@x', 'x', {}, 0)", id * 10))
            .collect();
        sqlx::query(&format!(
            "INSERT INTO users (id, email, password, ctime, utime) VALUES {}",
            values.join(", ")
        ))
        .execute(db.db.writer())
        .await
        .unwrap();
        let store = ModerationStore::new(db.db.clone());
        let until = i64::MAX;
        store
            .suspend(1, 7, until, "spam", 1, false)
            .await
            .unwrap()
            .unwrap();
        let reader = GateReader::new(store);

        let before = statements.load(Ordering::SeqCst);
        let asks = (1..=101).map(|uid| {
            let reader = reader.clone();
            async move { (uid, reader.writer_state(uid).await.unwrap()) }
        });
        let answers = futures_util::future::join_all(asks).await;
        assert_eq!(
            statements.load(Ordering::SeqCst) - before,
            1,
            "{kind:?}: one read for a hundred writes"
        );
        for (uid, (created, suspension)) in answers {
            match uid {
                7 => assert_eq!(
                    (created, suspension),
                    (Some(70), Some((until, "spam".to_owned()))),
                    "{kind:?}"
                ),
                101 => assert_eq!((created, suspension), (None, None), "{kind:?}"),
                _ => assert_eq!((created, suspension), (Some(uid * 10), None), "{kind:?}"),
            }
        }

        // Alone, a write is a read of its own, and it sees a suspension lifted just before.
        let before = statements.load(Ordering::SeqCst);
        ModerationStore::new(db.db.clone())
            .lift(1, 7, "appeal", 2, false)
            .await
            .unwrap();
        let after_lift = statements.load(Ordering::SeqCst);
        assert_eq!(
            reader.writer_state(7).await.unwrap(),
            (Some(70), None),
            "{kind:?}"
        );
        assert_eq!(
            reader.writer_state(8).await.unwrap(),
            (Some(80), None),
            "{kind:?}"
        );
        assert!(after_lift > before, "{kind:?}: the lift itself is counted");
        assert_eq!(
            statements.load(Ordering::SeqCst) - after_lift,
            2,
            "{kind:?}"
        );

        // With the database gone, each write gets an error, at once.
        db.db.pool().close().await;
        let failed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            futures_util::future::join_all((1..=3).map(|uid| reader.writer_state(uid))).await
        })
        .await
        .expect("the gate answers when its reads fail");
        assert!(failed.iter().all(Result::is_err), "{kind:?}: {failed:?}");
    }
}

/// A published article (id 1 by user 1) with `roots` top-level comments, each with `replies`
/// replies, written through the store; returns the article's id.
async fn thread_of_roots_with_replies(db: &Db, roots: usize, replies: usize) -> i64 {
    sqlx::query(
        "INSERT INTO users (id, email, password, ctime, utime) VALUES (1, 'a@x', 'x', 0, 0)",
    )
    .execute(db.writer())
    .await
    .unwrap();
    for table in ["articles", "published_articles"] {
        sqlx::query(&format!(
            "INSERT INTO {table} (id, author_id, title, content, abstract, status, ctime, utime) \
             VALUES (1, 1, 't', 'c', 'a', 2, 0, 0)"
        ))
        .execute(db.writer())
        .await
        .unwrap();
    }
    let store = CommentStore::new(db.clone());
    for _ in 0..roots {
        let root = store
            .create(&new_comment(None), 1, false, None)
            .await
            .unwrap()
            .unwrap()
            .id;
        for _ in 0..replies {
            store
                .create(&new_comment(Some(root)), 1, false, None)
                .await
                .unwrap()
                .unwrap();
        }
    }
    1
}

fn new_comment(parent: Option<i64>) -> webook::comment::NewComment {
    webook::comment::NewComment::new(1, BIZ, 1, parent, "hello".to_owned()).unwrap()
}

#[test]
fn a_scheduler_poll_and_its_claims_are_a_few_statements() {
    alone(
        "a_scheduler_poll_and_its_claims_are_a_few_statements",
        few_statements_per_scheduler_poll,
    );
}

/// A fire time's lag is the round trips between the poller's wake-up and the claim's start: a
/// poll that finds jobs due reads them with the database time and claims all of them in a few
/// statements, whatever their number; a poll that finds nothing is one or two.
async fn few_statements_per_scheduler_poll() {
    use scheduler::sql::plan_claim;
    const LEASE: i64 = 4_000;
    const JOBS: i64 = 40;
    // The job tables, and the clock's SQL on each engine (a clock read names no table).
    let statements = count_statements(&["jobs", "job_runs", "clock_timestamp", "julianday"]);
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        let db = TestDb::new(kind, &MIGRATIONS).await;
        let store = webook::jobs::store(&db.db);
        let now = store.now().await.unwrap();
        for index in 0..JOBS {
            sqlx::query(
                "INSERT INTO jobs (name, cron, timezone, executor, cfg, status, next_time, \
                 utime, ctime) VALUES ($1, '@every 1h', 'UTC', 'noop', '{}', 'waiting', $2, $2, $2)",
            )
            .bind(format!("job-{index}"))
            .bind(now - 100)
            .execute(db.db.writer())
            .await
            .unwrap();
        }

        let before = statements.load(Ordering::SeqCst);
        let due = store.due(100, LEASE).await.unwrap();
        assert_eq!(
            statements.load(Ordering::SeqCst) - before,
            1,
            "{kind:?}: jobs due and the time in one statement"
        );
        assert_eq!(due.jobs.len(), usize::try_from(JOBS).unwrap(), "{kind:?}");
        assert!(due.now >= now, "{kind:?}: the database time");

        let before = statements.load(Ordering::SeqCst);
        let polled = store
            .poll(100, LEASE, "counted", |job, now| {
                let schedule = job.schedule().unwrap();
                plan_claim(job, &schedule, now, LEASE, 60_000).map(|plan| (plan, ()))
            })
            .await
            .unwrap();
        // The jobs due with the time (on SQLite after a look on the read pool, then under the
        // write lock; on PostgreSQL locked as read), the compare-and-swaps (reading the start)
        // and the run rows.
        let expected = if kind == DatabaseKind::Postgres { 3 } else { 4 };
        assert_eq!(
            statements.load(Ordering::SeqCst) - before,
            expected,
            "{kind:?}: a poll claiming {JOBS} jobs"
        );
        assert_eq!(polled.found, usize::try_from(JOBS).unwrap(), "{kind:?}");
        assert!(
            polled.claims.iter().all(|(.., claim)| claim.is_some()),
            "{kind:?}: all won"
        );
        let after = store.now().await.unwrap();
        for (.., claim) in &polled.claims {
            let claim = claim.as_ref().unwrap();
            let run = &store.runs(claim.job_id, 1).await.unwrap()[0];
            let started = run.started_at.unwrap();
            assert!(
                run.scheduled_at <= started && polled.now <= started && started <= after,
                "{kind:?}: a start read by the claim, from the database's clock"
            );
        }

        // Nothing is due now. SQLite: one look. PostgreSQL: the locking read finds nothing, and
        // a look says when the first lease runs out.
        let before = statements.load(Ordering::SeqCst);
        let idle = store
            .poll(100, LEASE, "counted", |_, _| -> Option<(_, ())> {
                panic!("nothing to plan")
            })
            .await
            .unwrap();
        let expected = if kind == DatabaseKind::Postgres { 2 } else { 1 };
        assert_eq!(
            statements.load(Ordering::SeqCst) - before,
            expected,
            "{kind:?}: an idle poll"
        );
        assert_eq!(idle.found, 0, "{kind:?}");
        assert_eq!(
            idle.earliest_next,
            Some(polled.now + LEASE + 1),
            "{kind:?}: the claims' lease end"
        );
    }
}
