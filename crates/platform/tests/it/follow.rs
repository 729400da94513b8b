//! Following topics from positions of one's own (`EventStream::follow`, what each instance's
//! search index uses), on Redis Streams and in-process: every follower sees every event of its
//! topics, batches carry the positions they reach, a restart from stored positions gets exactly
//! what came after them, a failing batch is read again from the same positions, and a stream
//! trimmed past a stored position is reported as not resumable.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use platform::{
    events::{follow::Positions, stream_key, Event, EventStream, RedisStreamOptions},
    redis::Redis,
    testing::{redis_url, WAIT_LIMIT},
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const TOPICS: &[&str] = &["follow_a", "follow_b"];

async fn redis_stream(prefix: &str) -> EventStream {
    let url = redis_url();
    let redis = Redis::connect(&url).await.unwrap();
    EventStream::redis(redis, &url, prefix, RedisStreamOptions::default()).unwrap()
}

fn fresh_prefix() -> String {
    format!("test-{}", uuid::Uuid::new_v4().simple())
}

type Delivered = mpsc::UnboundedReceiver<(Vec<Event>, Positions)>;

/// Follows [`TOPICS`] from `from`; every batch goes to the returned channel. The handler fails
/// the first `failures` batches.
fn follow(
    stream: &EventStream,
    from: Positions,
    stop: &CancellationToken,
    mut failures: usize,
) -> Delivered {
    let (tx, rx) = mpsc::unbounded_channel();
    let follower = stream.follow(
        TOPICS,
        "follow-test",
        from,
        100,
        Duration::from_millis(50),
        stop.clone(),
        move |events, reached| {
            let outcome = if failures > 0 {
                failures -= 1;
                Err(anyhow::anyhow!("refused on purpose"))
            } else {
                Ok(())
            };
            tx.send((events, reached)).unwrap();
            std::future::ready(outcome)
        },
    );
    tokio::spawn(follower);
    rx
}

/// Receives batches until `count` events came; returns their keys and the last positions.
async fn receive(delivered: &mut Delivered, count: usize) -> (Vec<String>, Positions) {
    let mut keys = Vec::new();
    let mut reached = Positions::default();
    while keys.len() < count {
        let (events, positions) = tokio::time::timeout(WAIT_LIMIT, delivered.recv())
            .await
            .expect("timed out waiting for a batch")
            .unwrap();
        keys.extend(events.into_iter().map(|event| event.key));
        reached = positions;
    }
    keys.sort();
    (keys, reached)
}

async fn publish(stream: &EventStream, topic: &str, keys: &[&str]) {
    for key in keys {
        stream
            .publish(topic, key, &serde_json::json!({}))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_redis_follower_sees_every_event_and_resumes_after_its_positions() {
    let prefix = fresh_prefix();
    let stream = redis_stream(&prefix).await;
    assert!(stream.keeps_positions());
    let start = stream.heads(TOPICS).await.unwrap();
    assert_eq!(start.of("follow_a"), "0-0");
    let stop = CancellationToken::new();
    let mut first = follow(&stream, start.clone(), &stop, 0);
    let mut second = follow(&redis_stream(&prefix).await, start.clone(), &stop, 0);
    publish(&stream, "follow_a", &["a1", "a2"]).await;
    publish(&stream, "follow_b", &["b1"]).await;
    let (keys, reached) = receive(&mut first, 3).await;
    assert_eq!(keys, ["a1", "a2", "b1"]);
    // Not a consumer group: the other follower gets them all too.
    assert_eq!(receive(&mut second, 3).await.0, ["a1", "a2", "b1"]);
    // The positions reached are the streams' heads.
    assert_eq!(reached, stream.heads(TOPICS).await.unwrap());
    assert!(stream.can_resume(TOPICS, &reached).await.unwrap());

    // A follower started again from those positions gets exactly what came after them.
    publish(&stream, "follow_b", &["b2", "b3"]).await;
    let mut restarted = follow(&stream, reached, &stop, 0);
    assert_eq!(receive(&mut restarted, 2).await.0, ["b2", "b3"]);
    // Nothing comes twice: the next thing it gets is the next event.
    publish(&stream, "follow_a", &["a3"]).await;
    assert_eq!(receive(&mut restarted, 1).await.0, ["a3"]);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_redis_batch_is_read_again_from_the_same_positions() {
    let stream = redis_stream(&fresh_prefix()).await;
    let stop = CancellationToken::new();
    let start = stream.heads(TOPICS).await.unwrap();
    let mut delivered = follow(&stream, start, &stop, 2);
    publish(&stream, "follow_a", &["x", "y"]).await;
    // Two refusals, then the same events again, then nothing more.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (events, _) = tokio::time::timeout(WAIT_LIMIT, delivered.recv())
            .await
            .unwrap()
            .unwrap();
        let mut keys: Vec<String> = events.into_iter().map(|event| event.key).collect();
        // The first read may have come before the second publish.
        while keys.len() < 2 {
            let more = tokio::time::timeout(WAIT_LIMIT, delivered.recv())
                .await
                .unwrap()
                .unwrap();
            keys.extend(more.0.into_iter().map(|event| event.key));
        }
        seen.push(keys);
    }
    assert!(seen.iter().all(|keys| keys == &["x", "y"]), "{seen:?}");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_trimmed_past_a_position_cannot_be_resumed() {
    let prefix = fresh_prefix();
    let stream = redis_stream(&prefix).await;
    publish(&stream, "follow_a", &["old"]).await;
    let position = stream.heads(TOPICS).await.unwrap();
    assert_ne!(position.of("follow_a"), "0-0");
    assert!(stream.can_resume(TOPICS, &position).await.unwrap());
    // A position for each topic is needed.
    let mut partial = position.clone();
    partial.0.remove("follow_b");
    assert!(!stream.can_resume(TOPICS, &partial).await.unwrap());

    publish(&stream, "follow_a", &["new1", "new2"]).await;
    let mut look = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: i64 = redis::cmd("XTRIM")
        .arg(stream_key(&prefix, "follow_a"))
        .arg("MAXLEN")
        .arg(1)
        .query_async(&mut look)
        .await
        .unwrap();
    // "new1", after the position, is gone: following from there would miss it.
    assert!(!stream.can_resume(TOPICS, &position).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_following_funnels_every_topic_into_one_handler() {
    let stream = EventStream::in_process();
    assert!(!stream.keeps_positions());
    assert_eq!(stream.heads(TOPICS).await.unwrap(), Positions::default());
    assert!(stream
        .can_resume(TOPICS, &Positions::default())
        .await
        .unwrap());
    let stop = CancellationToken::new();
    // Registered by the call: events published right after it are not missed. The first call
    // is refused: what it held comes again.
    let mut delivered = follow(&stream, Positions::default(), &stop, 1);
    publish(&stream, "follow_a", &["a"]).await;
    publish(&stream, "follow_b", &["b"]).await;
    let mut calls = Vec::new();
    let mut accepted: Vec<String> = Vec::new();
    while accepted.len() < 2 {
        let (events, reached) = tokio::time::timeout(WAIT_LIMIT, delivered.recv())
            .await
            .expect("timed out waiting for a batch")
            .unwrap();
        assert_eq!(reached, Positions::default());
        let keys: Vec<String> = events.into_iter().map(|event| event.key).collect();
        if !calls.is_empty() {
            accepted.extend(keys.iter().cloned());
        }
        calls.push(keys);
    }
    accepted.sort();
    assert_eq!(accepted, ["a", "b"], "calls: {calls:?}");
    assert!(!calls[0].is_empty());
    stop.cancel();
}
