//! `batch_counts` reads the counters of many objects with one SQL statement, not one per id.
//! In a process of its own (this test binary again, running this test alone): it counts sqlx's
//! statement log through a process-wide subscriber, which must see no other test's queries (and
//! which the first app another test starts would otherwise install first, for its logs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};
use webook::schema::MIGRATIONS;

use platform::config::DatabaseKind;
use platform::testing::TestDb;
use tracing_subscriber::layer::SubscriberExt as _;
use webook::interactive::store::InteractiveStore;

const BIZ: webook::biz::Biz = webook::biz::Biz::Article;

/// Counts the statements sqlx logs (target `sqlx::query`) that read `interactives`, on any
/// thread: SQLite connections run their statements on worker threads of their own, and the pool
/// runs set-up statements (PRAGMAs) of its own on new connections, which must not count.
struct CountStatements(Arc<AtomicUsize>);

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
        if fields.0.contains("interactives") {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Set in the process that runs the test alone.
const ALONE: &str = "WEBOOK_TEST_ALONE";

#[test]
fn batch_counts_of_a_hundred_objects_is_one_statement() {
    if std::env::var_os(ALONE).is_some() {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(one_statement_for_a_hundred_ids());
    }
    // Its name for the test harness: the path without the binary's crate name.
    let path = concat!(
        module_path!(),
        "::batch_counts_of_a_hundred_objects_is_one_statement"
    );
    let (_, name) = path.split_once("::").unwrap();
    let alone = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&alone.stdout);
    // Its output indented, so that its `test result:` line is not taken for this process's.
    let indented = |text: &[u8]| {
        String::from_utf8_lossy(text)
            .lines()
            .map(|line| format!("    {line}\n"))
            .collect::<String>()
    };
    assert!(
        alone.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} alone: {}\n{}{}",
        alone.status,
        indented(&alone.stdout),
        indented(&alone.stderr)
    );
}

async fn one_statement_for_a_hundred_ids() {
    let statements = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::TRACE)
            .with(CountStatements(statements.clone())),
    )
    .unwrap();
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

        // The counter does see every statement: two single reads are two.
        let before = statements.load(Ordering::SeqCst);
        store.counts(BIZ, 1).await.unwrap();
        store.counts(BIZ, 2).await.unwrap();
        assert_eq!(statements.load(Ordering::SeqCst) - before, 2, "{kind:?}");
    }
}
