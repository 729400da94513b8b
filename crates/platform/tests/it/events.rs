//! The event stream in cluster mode (Redis Streams, consumer groups): complete ordered delivery in
//! bounded batches, one copy per group, take-over of a crashed consumer's entries with their ids,
//! retries of failing batches, prompt and lossless stop, and the in-process fallback while Redis
//! is down. Each test works under a prefix of its own, so they share the test Redis.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use platform::testing::{redis_url, wait_until, RedisServer, WAIT_LIMIT};
use platform::{
    events::{stream_key, Event, EventStream, RedisStreamOptions},
    redis::Redis,
};
use redis::{
    aio::MultiplexedConnection,
    streams::{StreamInfoConsumersReply, StreamInfoGroupsReply, StreamPendingReply},
};
use tokio::{
    sync::{mpsc, Semaphore},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "article_read";

/// Short take-over delays, so a crashed consumer's entries move within a test's patience.
fn options() -> RedisStreamOptions {
    RedisStreamOptions {
        min_idle: Duration::from_millis(400),
        reclaim_interval: Duration::from_millis(100),
        ..RedisStreamOptions::default()
    }
}

fn fresh_prefix() -> String {
    format!("test-{}", uuid::Uuid::new_v4().simple())
}

/// A cluster-mode stream on `url` under `prefix` — one per simulated process.
async fn cluster_stream(url: &str, prefix: &str) -> EventStream {
    let redis = Redis::connect(url).await.unwrap();
    EventStream::redis(redis, url, prefix, options()).unwrap()
}

/// A connection of the test's own, for looking at the streams.
async fn inspect(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// What most tests start from: a key space of their own on the Redis at `url` (its stream key), a
/// connection to look at the stream with, one process's stream and its stop token.
struct Fixture {
    key: String,
    look: MultiplexedConnection,
    stream: EventStream,
    stop: CancellationToken,
}

impl Fixture {
    async fn on(url: String) -> Self {
        let prefix = fresh_prefix();
        Self {
            key: stream_key(&prefix, TOPIC),
            look: inspect(&url).await,
            stream: cluster_stream(&url, &prefix).await,
            stop: CancellationToken::new(),
        }
    }
}

/// Batches a handler received.
type Batches = mpsc::UnboundedReceiver<Vec<Event>>;
/// What a successful handler returns.
type Done = std::future::Ready<anyhow::Result<()>>;

/// A handler that sends every batch it gets to the returned channel and succeeds.
fn recorder() -> (impl FnMut(Vec<Event>) -> Done + Send + 'static, Batches) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = move |events: Vec<Event>| {
        tx.send(events).unwrap();
        std::future::ready(Ok(()))
    };
    (handler, rx)
}

async fn next_batch(batches: &mut Batches) -> Vec<Event> {
    tokio::time::timeout(WAIT_LIMIT, batches.recv())
        .await
        .expect("timed out waiting for a batch")
        .expect("consumer gone")
}

/// Waits until `group` exists on `key`: publishing before that would be missed by the group
/// (groups start at the stream's end).
async fn wait_for_group(connection: &MultiplexedConnection, key: &str, group: &str) {
    wait_until(&format!("group {group} on {key}"), || {
        let mut connection = connection.clone();
        async move {
            redis::cmd("XINFO")
                .arg("GROUPS")
                .arg(key)
                .query_async::<StreamInfoGroupsReply>(&mut connection)
                .await
                .is_ok_and(|reply| reply.groups.iter().any(|info| info.name == group))
        }
    })
    .await;
}

async fn consumers(connection: &MultiplexedConnection, key: &str, group: &str) -> usize {
    redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(key)
        .arg(group)
        .query_async::<StreamInfoConsumersReply>(&mut connection.clone())
        .await
        .unwrap()
        .consumers
        .len()
}

async fn pending(connection: &MultiplexedConnection, key: &str, group: &str) -> usize {
    redis::cmd("XPENDING")
        .arg(key)
        .arg(group)
        .query_async::<StreamPendingReply>(&mut connection.clone())
        .await
        .unwrap()
        .count()
}

/// Ids of the entries pending in `group`, oldest first.
async fn pending_ids(connection: &MultiplexedConnection, key: &str, group: &str) -> Vec<String> {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(key)
        .arg(group)
        .arg("-")
        .arg("+")
        .arg(10_000)
        .query_async(&mut connection.clone())
        .await
        .unwrap();
    rows.into_iter().map(|(id, ..)| id).collect()
}

/// Ids of every entry in the stream, oldest first: what was published.
async fn stream_ids(connection: &MultiplexedConnection, key: &str) -> Vec<String> {
    let rows: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query_async(&mut connection.clone())
        .await
        .unwrap();
    rows.into_iter().map(|(id, _)| id).collect()
}

/// Stops a consumer and waits (bounded) for it to return.
async fn stop_consumer(stop: &CancellationToken, consumer: JoinHandle<()>) {
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), consumer)
        .await
        .expect("consumer did not stop")
        .unwrap();
}

fn keys(events: &[Event]) -> Vec<String> {
    events.iter().map(|event| event.key.clone()).collect()
}

#[tokio::test]
async fn every_event_arrives_once_in_order_in_bounded_batches() {
    let Fixture {
        key,
        look,
        stream,
        stop,
    } = Fixture::on(redis_url()).await;
    let (handler, mut batches) = recorder();
    let consumer = tokio::spawn(stream.consume(
        TOPIC,
        "counter",
        100,
        Duration::from_millis(50),
        stop.clone(),
        handler,
    ));
    wait_for_group(&look, &key, "counter").await;

    for i in 0..1000 {
        stream.publish(TOPIC, &i.to_string(), &i).await.unwrap();
    }
    let mut received = Vec::new();
    while received.len() < 1000 {
        let batch = next_batch(&mut batches).await;
        assert!(
            !batch.is_empty() && batch.len() <= 100,
            "batch of {}",
            batch.len()
        );
        received.extend(batch);
    }
    stop_consumer(&stop, consumer).await;

    assert!(batches.try_recv().is_err(), "events delivered twice");
    let expected: Vec<String> = (0..1000).map(|i: i32| i.to_string()).collect();
    assert_eq!(keys(&received), expected, "in publication order");
    for event in &received {
        assert_eq!(event.topic, TOPIC);
        assert_eq!(
            serde_json::from_slice::<i32>(&event.payload)
                .unwrap()
                .to_string(),
            event.key
        );
    }
    let ids: Vec<String> = received.iter().map(|event| event.id.clone()).collect();
    assert_eq!(ids, stream_ids(&look, &key).await, "ids are the entry ids");
    assert_eq!(pending(&look, &key, "counter").await, 0, "all acknowledged");
}

#[tokio::test]
async fn every_group_receives_every_event() {
    let Fixture {
        key,
        look,
        stream,
        stop,
    } = Fixture::on(redis_url()).await;
    let mut groups = Vec::new();
    for group in ["feed", "search"] {
        let (handler, batches) = recorder();
        let consumer = tokio::spawn(stream.consume(
            TOPIC,
            group,
            10,
            Duration::from_millis(20),
            stop.clone(),
            handler,
        ));
        wait_for_group(&look, &key, group).await;
        groups.push((group, consumer, batches));
    }

    for i in 0..50 {
        stream.publish(TOPIC, &i.to_string(), &i).await.unwrap();
    }
    let expected: Vec<String> = (0..50).map(|i: i32| i.to_string()).collect();
    for (group, _, batches) in &mut groups {
        let mut received = Vec::new();
        while received.len() < expected.len() {
            received.extend(next_batch(batches).await);
        }
        assert_eq!(keys(&received), expected, "{group}");
    }
    for (_, consumer, _) in groups {
        stop_consumer(&stop, consumer).await;
    }
}

#[tokio::test]
async fn a_crashed_consumers_entries_are_taken_over_with_their_ids() {
    let url = redis_url();
    let prefix = fresh_prefix();
    let key = stream_key(&prefix, TOPIC);
    let look = inspect(&url).await;

    // Consumer A (one process) receives a batch and never finishes handling it.
    let process_a = cluster_stream(&url, &prefix).await;
    let (tx, mut a_batches) = mpsc::unbounded_channel();
    let consumer_a = tokio::spawn(process_a.consume(
        TOPIC,
        "counter",
        10,
        Duration::from_secs(1),
        CancellationToken::new(),
        move |events: Vec<Event>| {
            tx.send(events).unwrap();
            async {
                std::future::pending::<()>().await;
                Ok(())
            }
        },
    ));
    wait_for_group(&look, &key, "counter").await;
    for i in 0..25 {
        process_a.publish(TOPIC, &i.to_string(), &i).await.unwrap();
    }
    let a_batch = next_batch(&mut a_batches).await;
    // It crashes mid-batch: its entries stay pending, unacknowledged.
    consumer_a.abort();
    assert!(consumer_a.await.unwrap_err().is_cancelled());
    let a_ids: Vec<String> = a_batch.iter().map(|event| event.id.clone()).collect();
    assert_eq!(pending_ids(&look, &key, "counter").await, a_ids);

    // Consumer B (another process, same group) reads the rest and takes over A's batch.
    let process_b = cluster_stream(&url, &prefix).await;
    let stop = CancellationToken::new();
    let (handler, mut b_batches) = recorder();
    let consumer_b = tokio::spawn(process_b.consume(
        TOPIC,
        "counter",
        10,
        Duration::from_millis(20),
        stop.clone(),
        handler,
    ));
    let published: HashSet<String> = stream_ids(&look, &key).await.into_iter().collect();
    assert_eq!(published.len(), 25);
    let mut b_events: HashMap<String, Event> = HashMap::new();
    while b_events.len() < published.len() {
        for event in next_batch(&mut b_batches).await {
            let id = event.id.clone();
            assert!(b_events.insert(id.clone(), event).is_none(), "{id} twice");
        }
    }
    let b_ids: HashSet<String> = b_events.keys().cloned().collect();
    assert_eq!(b_ids, published);
    for event in &a_batch {
        assert_eq!(b_events[&event.id].key, event.key, "same entry, same id");
    }
    wait_until("B's acknowledgements", || async {
        pending(&look, &key, "counter").await == 0
    })
    .await;
    stop_consumer(&stop, consumer_b).await;
}

#[tokio::test]
async fn a_failing_batch_is_retried_with_the_same_ids_then_acknowledged() {
    let Fixture {
        key,
        look,
        stream,
        stop,
    } = Fixture::on(redis_url()).await;
    let attempts = Arc::new(AtomicUsize::new(0));
    let (tx, mut calls) = mpsc::unbounded_channel();
    let counter = attempts.clone();
    let consumer = tokio::spawn(stream.consume(
        TOPIC,
        "counter",
        10,
        Duration::from_millis(200),
        stop.clone(),
        move |events: Vec<Event>| {
            let ids: Vec<String> = events.iter().map(|event| event.id.clone()).collect();
            let ok = counter.fetch_add(1, Ordering::SeqCst) >= 2;
            tx.send((ids, ok)).unwrap();
            async move {
                if !ok {
                    // Transient: the whole batch is retried (a permanent one would be split).
                    return Err(platform::events::failure::transient(anyhow::anyhow!(
                        "database down"
                    )));
                }
                Ok(())
            }
        },
    ));
    wait_for_group(&look, &key, "counter").await;
    for i in 0..5 {
        stream.publish(TOPIC, &i.to_string(), &i).await.unwrap();
    }

    let mut history = Vec::new();
    let published: HashSet<String> = stream_ids(&look, &key).await.into_iter().collect();
    let mut handled = HashSet::new();
    while handled.len() < published.len() {
        let call = tokio::time::timeout(WAIT_LIMIT, calls.recv())
            .await
            .expect("timed out waiting for the handler")
            .unwrap();
        if call.1 {
            handled.extend(call.0.iter().cloned());
        }
        history.push(call);
    }
    assert!(
        !history[0].1 && !history[1].1 && history[2].1,
        "{history:?}"
    );
    assert_eq!(history[0].0, history[1].0, "a retry keeps the ids");
    assert_eq!(history[1].0, history[2].0, "a retry keeps the ids");
    assert_eq!(handled, published);
    wait_until("the retried batch to be acknowledged", || async {
        pending(&look, &key, "counter").await == 0
    })
    .await;
    stop_consumer(&stop, consumer).await;
    assert!(calls.try_recv().is_err(), "nothing delivered after success");
    assert_eq!(attempts.load(Ordering::SeqCst), history.len());
}

#[tokio::test]
async fn stop_ends_a_blocked_read_promptly() {
    // A private server, so the only blocked XREADGROUP on it is this consumer's.
    let server = RedisServer::start().await;
    let url = server.url();
    let prefix = fresh_prefix();
    let look = inspect(&url).await;
    let stream = cluster_stream(&url, &prefix).await;
    let stop = CancellationToken::new();
    let (handler, _batches) = recorder();
    let consumer = tokio::spawn(stream.consume(
        TOPIC,
        "counter",
        10,
        Duration::from_millis(20),
        stop.clone(),
        handler,
    ));
    wait_until("the consumer blocked in XREADGROUP", || async {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut look.clone())
            .await
            .unwrap();
        clients
            .lines()
            .any(|client| client.contains("flags=b") && client.contains("cmd=xreadgroup"))
    })
    .await;

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(3), consumer)
        .await
        .expect("consumer did not stop promptly")
        .unwrap();
}

#[tokio::test]
async fn stop_finishes_the_batch_in_hand_and_leaves_the_rest_in_the_stream() {
    let Fixture {
        key,
        look,
        stream,
        stop,
    } = Fixture::on(redis_url()).await;
    let gate = Arc::new(Semaphore::new(0));
    let (tx, mut batches) = mpsc::unbounded_channel();
    let held = gate.clone();
    let consumer = tokio::spawn(stream.consume(
        TOPIC,
        "counter",
        10,
        Duration::from_millis(100),
        stop.clone(),
        move |events: Vec<Event>| {
            tx.send(keys(&events)).unwrap();
            let held = held.clone();
            async move {
                held.acquire().await.unwrap().forget();
                Ok(())
            }
        },
    ));
    wait_for_group(&look, &key, "counter").await;
    for i in 0..3 {
        stream.publish(TOPIC, &i.to_string(), &i).await.unwrap();
    }
    let mut in_hand = Vec::new();
    while in_hand.len() < 3 {
        in_hand.extend(
            tokio::time::timeout(WAIT_LIMIT, batches.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    // Published while the handler is busy, and not read by this consumer before it stops.
    stream.publish(TOPIC, "later-1", &1).await.unwrap();
    stream.publish(TOPIC, "later-2", &2).await.unwrap();

    stop.cancel();
    gate.add_permits(1);
    tokio::time::timeout(Duration::from_secs(5), consumer)
        .await
        .expect("consumer did not stop")
        .unwrap();
    assert_eq!(in_hand, vec!["0", "1", "2"]);
    assert!(batches.try_recv().is_err(), "nothing read after stop");
    assert_eq!(
        pending(&look, &key, "counter").await,
        0,
        "batch in hand acked"
    );
    assert_eq!(
        consumers(&look, &key, "counter").await,
        0,
        "a cleanly stopped consumer leaves its group"
    );

    // The next consumer of the group picks up where the stopped one left off.
    let stop = CancellationToken::new();
    let (handler, mut batches) = recorder();
    let consumer = tokio::spawn(stream.consume(
        TOPIC,
        "counter",
        10,
        Duration::from_millis(100),
        stop.clone(),
        handler,
    ));
    let mut rest = Vec::new();
    while rest.len() < 2 {
        rest.extend(next_batch(&mut batches).await);
    }
    assert_eq!(keys(&rest), vec!["later-1", "later-2"]);
    stop_consumer(&stop, consumer).await;
}

#[tokio::test]
async fn while_redis_is_down_events_reach_this_process_in_process() {
    let mut server = RedisServer::start().await;
    let Fixture {
        key,
        look,
        stream,
        stop,
    } = Fixture::on(server.url()).await;
    let received = Arc::new(Mutex::new(Vec::<Event>::new()));
    let sink = received.clone();
    let consumer = tokio::spawn(stream.consume(
        TOPIC,
        "counter",
        10,
        Duration::from_millis(20),
        stop.clone(),
        move |events: Vec<Event>| {
            sink.lock().unwrap().extend(events);
            std::future::ready(Ok(()))
        },
    ));
    wait_for_group(&look, &key, "counter").await;

    server.stop();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.publish(TOPIC, "while-down", &1),
    )
    .await
    .expect("publish hung while redis is down")
    .unwrap();
    wait_until("the event through the in-process fallback", || async {
        received
            .lock()
            .unwrap()
            .iter()
            .any(|event| event.key == "while-down" && event.id.starts_with("local-"))
    })
    .await;

    // Redis back (empty): the consumer reconnects, recreates its group and reads from Redis
    // again. Until it has, publishes land in the fallback or before the group exists.
    server.restart().await;
    wait_until("an event delivered through redis again", || async {
        stream.publish(TOPIC, "after", &2).await.unwrap();
        received
            .lock()
            .unwrap()
            .iter()
            .any(|event| event.key == "after" && !event.id.starts_with("local-"))
    })
    .await;
    stop_consumer(&stop, consumer).await;
}

#[tokio::test]
async fn a_publish_that_returned_is_in_the_stream_in_order() {
    let url = redis_url();
    let prefix = fresh_prefix();
    let stream = cluster_stream(&url, &prefix).await;
    let look = inspect(&url).await;
    // Nothing published: nothing to wait for.
    tokio::time::timeout(WAIT_LIMIT, stream.flush())
        .await
        .expect("flush of nothing hung");
    // Many publishers at once, then one after another.
    let concurrent = futures_util::future::join_all((0..500).map(|i| {
        let stream = &stream;
        async move { stream.publish(TOPIC, &format!("c{i}"), &i).await }
    }))
    .await;
    assert!(concurrent.iter().all(Result::is_ok));
    for i in 0..100 {
        stream.publish(TOPIC, &format!("s{i}"), &i).await.unwrap();
    }
    // Returned means added (concurrent publishers share pipelines): no waiting for the stream.
    let entries: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(stream_key(&prefix, TOPIC))
        .arg("-")
        .arg("+")
        .query_async(&mut look.clone())
        .await
        .unwrap();
    let keys: Vec<String> = entries
        .ids
        .iter()
        .map(|entry| entry.get::<String>("k").unwrap())
        .collect();
    assert_eq!(keys.len(), 600);
    let concurrent: HashSet<&String> = keys[..500].iter().collect();
    assert_eq!(concurrent.len(), 500, "each concurrent event once");
    assert!(concurrent.iter().all(|key| key.starts_with('c')));
    let sequential: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
    assert_eq!(keys[500..], sequential[..], "in publish order");
}
