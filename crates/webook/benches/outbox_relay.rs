//! Criterion bench of the embedded outbox's delivery: 2 000 events recorded in 100 committed
//! transactions of 20, from the first record until every consumer group of their topic has
//! handled all of them, on SQLite and PostgreSQL, with one and with three groups. It uses only
//! the outbox's public API (`record_many`, `committed`, `run`, `consume`), so the same file
//! measures the relay before consumer groups had positions of their own (every row handed to
//! every group and deleted when all were done) and after (each group reads the outbox from its
//! own position; the relay announces and trims).
//!
//! Run: `scripts/with-services.sh cargo bench -p webook --bench outbox_relay` (PostgreSQL from
//! `WEBOOK_TEST_DATABASE_URL`; figures in docs/PERFORMANCE.md → Events).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use platform::{
    config::DatabaseKind,
    db::now_millis,
    events::{outbox, outbox::Outbox, EventStream},
    testing::TestDb,
};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use webook::schema::MIGRATIONS;

const TOPIC: &str = "bench_relay";
const EVENTS: usize = 2_000;
const PER_TRANSACTION: usize = 20;

fn relay(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let mut group = c.benchmark_group("outbox_relay");
    group
        .throughput(Throughput::Elements(EVENTS as u64))
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        for groups in [1_usize, 3] {
            let name = format!("{kind:?}").to_lowercase();
            group.bench_function(BenchmarkId::new(name, format!("{groups}_groups")), |b| {
                b.to_async(&runtime).iter_custom(|iterations| async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        total += deliver(kind, groups).await;
                    }
                    total
                });
            });
        }
    }
    group.finish();
}

/// A fresh database, `groups` groups and the relay; returns the time from the first record to
/// the last event handled by every group.
async fn deliver(kind: DatabaseKind, groups: usize) -> Duration {
    let test_db = TestDb::new(kind, &MIGRATIONS).await;
    let db = test_db.db.clone();
    let events = EventStream::in_process();
    let stop = CancellationToken::new();
    let handled = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(tokio::sync::Notify::new());
    for group in 0..groups {
        let (handled, done) = (handled.clone(), done.clone());
        tokio::spawn(events.consume(
            TOPIC,
            &format!("group{group}"),
            100,
            Duration::from_millis(5),
            stop.clone(),
            move |batch| {
                let total = handled.fetch_add(batch.len(), Ordering::AcqRel) + batch.len();
                if total >= EVENTS * groups {
                    done.notify_one();
                }
                async { Ok(()) }
            },
        ));
    }
    let outbox = Outbox::new(db.clone(), events.clone());
    tokio::spawn(outbox.clone().run(stop.clone()));
    let finished = done.notified();
    tokio::pin!(finished);
    finished.as_mut().enable();
    let started = Instant::now();
    for chunk in 0..EVENTS / PER_TRANSACTION {
        let rows: Vec<(String, serde_json::Value)> = (0..PER_TRANSACTION)
            .map(|n| {
                let key = (chunk * PER_TRANSACTION + n).to_string();
                (key.clone(), serde_json::json!({ "id": key }))
            })
            .collect();
        let mut tx = db.writer().begin().await.unwrap();
        outbox::record_many(&mut tx, TOPIC, &rows, now_millis())
            .await
            .unwrap();
        tx.commit().await.unwrap();
        outbox.committed();
    }
    tokio::time::timeout(Duration::from_secs(60), finished)
        .await
        .expect("every group handles every event");
    let elapsed = started.elapsed();
    stop.cancel();
    elapsed
}

criterion_group!(benches, relay);
criterion_main!(benches);
