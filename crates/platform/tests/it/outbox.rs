//! The transactional outbox (`platform::events::outbox`) on {SQLite, PostgreSQL} × {in-process,
//! Redis Streams}: an event recorded in a committed transaction is delivered, with an id that
//! stays the same however often it is relayed, and one recorded in a rolled-back transaction
//! never is; a deduplicating consumer applies a relayed-twice event once; events wait in the
//! outbox while Redis refuses them, and in-process while their group never handled them (the
//! group of the next process reads them from its position). A killed server process is in
//! `tests/it/process.rs`; groups failing on their own in `tests/it/event_groups.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use platform::schema::MIGRATIONS;
use std::time::Duration;

use platform::testing::{redis_url, wait_until, RedisServer, TestDb, WAIT_LIMIT};
use platform::{
    config::DatabaseKind,
    db::{now_millis, Db},
    events::{dedup, outbox, outbox::Outbox, Event, EventStream, RedisStreamOptions},
    redis::Redis,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "outbox_test";
const GROUP: &str = "test";

/// One test body, four runs: {SQLite, PostgreSQL} × {in-process, Redis Streams}.
macro_rules! outbox_tests {
    ($($name:ident),+ $(,)?) => {
        outbox_tests!(@mode sqlite_in_process, Sqlite, false, $($name),+);
        outbox_tests!(@mode postgres_in_process, Postgres, false, $($name),+);
        outbox_tests!(@mode sqlite_redis, Sqlite, true, $($name),+);
        outbox_tests!(@mode postgres_redis, Postgres, true, $($name),+);
    };
    (@mode $module:ident, $db:ident, $redis:expr, $($name:ident),+) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(platform::config::DatabaseKind::$db, $redis).await
                }
            )+
        }
    };
}

outbox_tests!(
    committed_events_arrive_once_with_stable_ids_and_rolled_back_ones_never,
    an_event_relayed_twice_is_applied_once,
);

/// A stream of the kind under test: in-process, or Redis Streams on `url` under a fresh prefix.
async fn stream(redis_at: Option<&str>) -> EventStream {
    match redis_at {
        None => EventStream::in_process(),
        Some(url) => {
            let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
            let redis = Redis::connect(url).await.unwrap();
            EventStream::redis(redis, url, &prefix, RedisStreamOptions::default()).unwrap()
        }
    }
}

/// Records one event per key in one transaction, committed or rolled back.
async fn record(db: &Db, keys: &[&str], commit: bool) {
    let mut tx = db.writer().begin().await.unwrap();
    for key in keys {
        outbox::record(
            &mut tx,
            TOPIC,
            key,
            &serde_json::json!({ "key": key }),
            now_millis(),
        )
        .await
        .unwrap();
    }
    if commit {
        tx.commit().await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
}

async fn outbox_rows(db: &Db) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM event_outbox")
        .fetch_one(db.pool())
        .await
        .unwrap()
}

/// A consumer of [`TOPIC`] in group [`GROUP`] that passes every event on.
fn recording_consumer(
    events: &EventStream,
    stop: &CancellationToken,
) -> mpsc::UnboundedReceiver<Event> {
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(events.consume(
        TOPIC,
        GROUP,
        100,
        Duration::from_millis(5),
        stop.clone(),
        move |batch| {
            let sender = sender.clone();
            async move {
                for event in batch {
                    sender.send(event)?;
                }
                Ok(())
            }
        },
    ));
    receiver
}

async fn next_events(receiver: &mut mpsc::UnboundedReceiver<Event>, count: usize) -> Vec<Event> {
    let mut events = Vec::new();
    while events.len() < count {
        let event = tokio::time::timeout(WAIT_LIMIT, receiver.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out after {} of {count} events", events.len()))
            .unwrap();
        events.push(event);
    }
    events
}

fn keys(events: &[Event]) -> Vec<String> {
    events.iter().map(|event| event.key.clone()).collect()
}

async fn committed_events_arrive_once_with_stable_ids_and_rolled_back_ones_never(
    kind: DatabaseKind,
    redis: bool,
) {
    let test_db = TestDb::new(kind, &MIGRATIONS).await;
    let db = &test_db.db;
    let events = stream(redis.then(redis_url).as_deref()).await;
    let stop = CancellationToken::new();
    let mut received = recording_consumer(&events, &stop);
    record(db, &["a", "b"], true).await;
    record(db, &["rolled back"], false).await;
    record(db, &["c"], true).await;
    assert_eq!(outbox_rows(db).await, 3);

    let outbox = Outbox::new(db.clone(), events.clone());
    // With Redis the relay publishes the rows; in-process the group reads them itself.
    assert_eq!(
        outbox.relay_pending(&stop).await.unwrap(),
        if redis { 3 } else { 0 }
    );
    let delivered = next_events(&mut received, 3).await;
    assert_eq!(keys(&delivered), ["a", "b", "c"]);
    let mut ids: Vec<&str> = delivered.iter().map(|event| event.id.as_str()).collect();
    assert!(ids.iter().all(|id| id.starts_with("outbox-")), "{ids:?}");
    ids.dedup();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&delivered[2].payload).unwrap(),
        serde_json::json!({ "key": "c" })
    );
    // Relayed (in-process: passed by every group) rows are gone; relaying again finds nothing.
    wait_until("the handled rows to be trimmed", || async {
        outbox.relay_pending(&stop).await.unwrap();
        outbox_rows(db).await == 0
    })
    .await;
    assert_eq!(outbox.relay_pending(&stop).await.unwrap(), 0);
    stop.cancel();
}

/// A relay that published and died before deleting its rows publishes them again: the same ids,
/// which a consumer recording them with `dedup` applies once.
async fn an_event_relayed_twice_is_applied_once(kind: DatabaseKind, redis: bool) {
    let test_db = TestDb::new(kind, &MIGRATIONS).await;
    let db = test_db.db.clone();
    let events = stream(redis.then(redis_url).as_deref()).await;
    let stop = CancellationToken::new();
    let (applied_sender, mut applied) = mpsc::unbounded_channel::<(String, bool)>();
    let consumer_db = db.clone();
    let first_sender = applied_sender.clone();
    let first_stop = CancellationToken::new();
    tokio::spawn(events.consume(
        TOPIC,
        GROUP,
        100,
        Duration::from_millis(5),
        if redis {
            stop.clone()
        } else {
            first_stop.clone()
        },
        move |batch| dedup_consumer(consumer_db.clone(), first_sender.clone(), batch),
    ));
    record(&db, &["a", "b"], true).await;
    let rows: Vec<(i64, String, String, String, i64)> = sqlx::query_as(
        "SELECT id, topic, event_key, payload, created_at FROM event_outbox ORDER BY id",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    let outbox = Outbox::new(db.clone(), events.clone());
    if redis {
        assert_eq!(outbox.relay_pending(&stop).await.unwrap(), 2);
    } else {
        // In-process the group reads the rows itself; wait until it passed and they went, then
        // stop it (its process dies).
        wait_until(
            "the group to pass its rows and the relay to trim them",
            || async {
                outbox.relay_pending(&stop).await.unwrap();
                outbox_rows(&db).await == 0
            },
        )
        .await;
        first_stop.cancel();
        // As if the group had applied them and died before recording its position.
        sqlx::query("UPDATE event_progress SET last_id = 0")
            .execute(db.writer())
            .await
            .unwrap();
    }
    // The rows come back as if their deletion had never happened.
    for (id, topic, key, payload, created_at) in &rows {
        sqlx::query(
            "INSERT INTO event_outbox (id, topic, event_key, payload, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(topic)
        .bind(key)
        .bind(payload)
        .bind(created_at)
        .execute(db.writer())
        .await
        .unwrap();
    }
    let events = if redis {
        assert_eq!(outbox.relay_pending(&stop).await.unwrap(), 2);
        events
    } else {
        // The next process: its group starts from the position recorded.
        let next = EventStream::in_process();
        Outbox::new(db.clone(), next.clone());
        let consumer_db = db.clone();
        let applied_sender = applied_sender.clone();
        tokio::spawn(next.consume(
            TOPIC,
            GROUP,
            100,
            Duration::from_millis(5),
            stop.clone(),
            move |batch| dedup_consumer(consumer_db.clone(), applied_sender.clone(), batch),
        ));
        next
    };
    drop(events);

    let mut deliveries = Vec::new();
    while deliveries.len() < 4 {
        let delivery = tokio::time::timeout(WAIT_LIMIT, applied.recv())
            .await
            .expect("timed out waiting for deliveries")
            .unwrap();
        deliveries.push(delivery);
    }
    let expected_ids: Vec<String> = rows.iter().map(|row| outbox::event_id(row.0)).collect();
    let applied_ids: Vec<&String> = deliveries
        .iter()
        .filter(|(_, fresh)| *fresh)
        .map(|(id, _)| id)
        .collect();
    assert_eq!(applied_ids, expected_ids.iter().collect::<Vec<_>>());
    let repeated: Vec<&String> = deliveries
        .iter()
        .filter(|(_, fresh)| !*fresh)
        .map(|(id, _)| id)
        .collect();
    assert_eq!(repeated, expected_ids.iter().collect::<Vec<_>>());
    stop.cancel();
}

/// Applies `batch` through `dedup` and reports each event's id and whether it was fresh.
async fn dedup_consumer(
    db: Db,
    applied: mpsc::UnboundedSender<(String, bool)>,
    batch: Vec<Event>,
) -> anyhow::Result<()> {
    let mut tx = db.writer().begin().await?;
    let fresh = dedup::first_deliveries(
        &mut tx,
        db.kind(),
        GROUP,
        batch.iter().collect(),
        |event| event.id.as_str(),
        now_millis(),
    )
    .await?;
    tx.commit().await?;
    for event in &batch {
        let is_fresh = fresh.iter().any(|fresh| std::ptr::eq(*fresh, event));
        applied.send((event.id.clone(), is_fresh))?;
    }
    Ok(())
}

/// Redis refusing the events: they stay in the outbox (the relay reports the failure) and go
/// out once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_refuses_them_events_wait_in_the_outbox() {
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        let test_db = TestDb::new(kind, &MIGRATIONS).await;
        let db = &test_db.db;
        let mut server = RedisServer::start().await;
        let events = stream(Some(&server.url())).await;
        let outbox = Outbox::new(db.clone(), events.clone());
        let stop = CancellationToken::new();
        record(db, &["a", "b", "c"], true).await;
        server.stop();
        assert!(outbox.relay_pending(&stop).await.is_err(), "{kind:?}");
        assert_eq!(outbox_rows(db).await, 3, "{kind:?}");

        server.restart().await;
        let mut received = recording_consumer(&events, &stop);
        wait_until("the relay to reach redis again", || async {
            outbox
                .relay_pending(&stop)
                .await
                .is_ok_and(|relayed| relayed == 3)
        })
        .await;
        assert_eq!(keys(&next_events(&mut received, 3).await), ["a", "b", "c"]);
        assert_eq!(outbox_rows(db).await, 0, "{kind:?}");
        stop.cancel();
    }
}

/// In-process, the outbox row is the event's only durable copy: a consumer that took it and
/// never finished (its process was killed) leaves it in the outbox, and the next process's relay
/// delivers it, with the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_an_event_its_consumer_never_handled_goes_to_the_next_process() {
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        let test_db = TestDb::new(kind, &MIGRATIONS).await;
        let db = &test_db.db;
        record(db, &["a", "b"], true).await;

        // The first process: its consumer takes the batch and hangs.
        let first_events = EventStream::in_process();
        let first_stop = CancellationToken::new();
        let (took_sender, mut took) = mpsc::unbounded_channel::<Vec<String>>();
        let hung = tokio::spawn(first_events.consume(
            TOPIC,
            GROUP,
            100,
            Duration::from_millis(5),
            first_stop.clone(),
            move |batch| {
                let took_sender = took_sender.clone();
                async move {
                    took_sender.send(batch.iter().map(|event| event.id.clone()).collect())?;
                    std::future::pending::<anyhow::Result<()>>().await
                }
            },
        ));
        let first_outbox = Outbox::new(db.clone(), first_events.clone());
        let relay_stop = CancellationToken::new();
        let relay = {
            let (outbox, relay_stop) = (first_outbox.clone(), relay_stop.clone());
            tokio::spawn(async move { outbox.relay_pending(&relay_stop).await })
        };
        let mut taken = Vec::new();
        while taken.len() < 2 {
            taken.extend(
                tokio::time::timeout(WAIT_LIMIT, took.recv())
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        // The process dies: the relay stops waiting, the consumer is gone.
        relay_stop.cancel();
        assert_eq!(relay.await.unwrap().unwrap(), 0, "{kind:?}");
        hung.abort();
        assert_eq!(outbox_rows(db).await, 2, "{kind:?}");

        // The next process.
        let events = EventStream::in_process();
        let stop = CancellationToken::new();
        let mut received = recording_consumer(&events, &stop);
        let outbox = Outbox::new(db.clone(), events.clone());
        let delivered = next_events(&mut received, 2).await;
        let ids: Vec<String> = delivered.iter().map(|event| event.id.clone()).collect();
        assert_eq!(ids, taken, "{kind:?}");
        wait_until("the handled rows to be trimmed", || async {
            outbox.relay_pending(&stop).await.unwrap();
            outbox_rows(db).await == 0
        })
        .await;
        stop.cancel();
    }
}
