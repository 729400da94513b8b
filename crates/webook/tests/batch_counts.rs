//! `batch_counts` reads the counters of many objects with one SQL statement, not one per id.
//! Its own test binary: it counts sqlx's statement log through a process-wide subscriber, which
//! must see no other test's queries.

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

#[tokio::test]
async fn batch_counts_of_a_hundred_objects_is_one_statement() {
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
