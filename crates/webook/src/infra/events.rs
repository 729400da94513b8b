//! The event stream: `publish(topic, key, payload)` on one side, consumer groups that receive
//! events in batches on the other (DESIGN.md §4).
//!
//! This is the in-process implementation (embedded mode): each (topic, group) pair is a bounded
//! queue, so a slow consumer pushes back on publishers instead of growing memory. A consumer
//! takes up to `batch_size` events or whatever arrived within `max_wait` of the first one, and
//! hands them to its handler as one batch; a failed batch is retried (at-least-once) with a
//! growing pause. On shutdown a consumer drains what is queued and flushes it before it exits, so
//! buffered events are not dropped. Events published to a topic nobody consumes are discarded —
//! in-process events are a notification mechanism, not storage.
//!
//! The Redis Streams implementation (cluster mode) joins this type in the interactive issue.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use axum::body::Bytes;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::infra::db::now_millis;

/// Counter: events published, by `topic`.
pub const EVENTS_PUBLISHED_TOTAL: &str = "events_published_total";
/// Counter: events handled, by `topic` and `group`.
pub const EVENTS_CONSUMED_TOTAL: &str = "events_consumed_total";
/// Histogram: events per handled batch, by `topic` and `group`.
pub const EVENT_BATCH_SIZE: &str = "event_batch_size";

/// Events a (topic, group) queue holds before publishers wait.
const QUEUE_CAPACITY: usize = 10_000;
/// Longest pause between retries of a failing batch.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(5);

/// One event.
#[derive(Debug, Clone)]
pub struct Event {
    /// What happened, e.g. `article_published`.
    pub topic: String,
    /// The object it happened to (ordering and partitioning key), e.g. the article id.
    pub key: String,
    /// JSON payload.
    pub payload: Bytes,
    /// When it was published (ms).
    pub time: i64,
}

/// For each topic, the queue of each consumer group: (group name, its queue).
type GroupQueues = HashMap<String, Vec<(String, mpsc::Sender<Event>)>>;

/// Publisher and consumer registry; cheap to clone.
#[derive(Clone, Default)]
pub struct EventStream {
    groups: Arc<Mutex<GroupQueues>>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventStream(in-process)")
    }
}

impl EventStream {
    /// An in-process stream.
    pub fn in_process() -> Self {
        Self::default()
    }

    fn senders(&self, topic: &str) -> Vec<mpsc::Sender<Event>> {
        let groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        groups
            .get(topic)
            .map(|groups| groups.iter().map(|(_, sender)| sender.clone()).collect())
            .unwrap_or_default()
    }

    /// Publishes `payload` (serialised as JSON) on `topic` under `key` to every consumer group.
    pub async fn publish(
        &self,
        topic: &str,
        key: &str,
        payload: &impl Serialize,
    ) -> anyhow::Result<()> {
        let event = Event {
            topic: topic.to_owned(),
            key: key.to_owned(),
            payload: Bytes::from(serde_json::to_vec(payload).context("serialising an event")?),
            time: now_millis(),
        };
        for sender in self.senders(topic) {
            // Waits when the group's queue is full (backpressure); fails only if it stopped.
            if sender.send(event.clone()).await.is_err() {
                tracing::warn!(topic, "event consumer stopped; event not delivered to it");
            }
        }
        metrics::counter!(EVENTS_PUBLISHED_TOTAL, "topic" => topic.to_owned()).increment(1);
        Ok(())
    }

    /// Registers consumer group `group` on `topic` and returns the future that runs it until
    /// `stop` is cancelled (then drains and flushes what is queued). `handler` gets batches of at
    /// most `batch_size` events, collected for at most `max_wait` after the first.
    pub fn consume<H, Fut>(
        &self,
        topic: &str,
        group: &str,
        batch_size: usize,
        max_wait: Duration,
        stop: CancellationToken,
        mut handler: H,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        H: FnMut(Vec<Event>) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send,
    {
        let (sender, mut receiver) = mpsc::channel(QUEUE_CAPACITY);
        {
            let mut groups = self
                .groups
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let topic_groups = groups.entry(topic.to_owned()).or_default();
            topic_groups.retain(|(existing, _)| existing != group);
            topic_groups.push((group.to_owned(), sender));
        }
        let (topic, group) = (topic.to_owned(), group.to_owned());
        let batch_size = batch_size.max(1);
        async move {
            loop {
                let first = tokio::select! {
                    event = receiver.recv() => event,
                    () = stop.cancelled() => None,
                };
                let Some(first) = first else { break };
                let mut batch = vec![first];
                let deadline = tokio::time::Instant::now() + max_wait;
                while batch.len() < batch_size {
                    tokio::select! {
                        event = receiver.recv() => match event {
                            Some(event) => batch.push(event),
                            None => break,
                        },
                        () = tokio::time::sleep_until(deadline) => break,
                        () = stop.cancelled() => break,
                    }
                }
                deliver(&topic, &group, &mut handler, batch, &stop).await;
            }
            // Shutdown: stop accepting, then flush everything still queued.
            receiver.close();
            let mut rest = Vec::new();
            while let Some(event) = receiver.recv().await {
                rest.push(event);
            }
            for batch in rest.chunks(batch_size) {
                deliver(&topic, &group, &mut handler, batch.to_vec(), &stop).await;
            }
            tracing::debug!(topic, group, "event consumer stopped");
        }
    }
}

/// Hands `batch` to `handler`, retrying with a growing pause while it fails. After `stop`, one
/// last attempt is made and a failure is logged with the lost count.
async fn deliver<H, Fut>(
    topic: &str,
    group: &str,
    handler: &mut H,
    batch: Vec<Event>,
    stop: &CancellationToken,
) where
    H: FnMut(Vec<Event>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let size = batch.len();
    let mut pause = Duration::from_millis(50);
    loop {
        match handler(batch.clone()).await {
            Ok(()) => {
                metrics::counter!(EVENTS_CONSUMED_TOTAL, "topic" => topic.to_owned(), "group" => group.to_owned())
                    .increment(size as u64);
                metrics::histogram!(EVENT_BATCH_SIZE, "topic" => topic.to_owned(), "group" => group.to_owned())
                    .record(size as f64);
                return;
            }
            Err(err) if stop.is_cancelled() => {
                tracing::error!(
                    topic,
                    group,
                    lost = size,
                    error = format!("{err:#}"),
                    "event batch failed during shutdown"
                );
                return;
            }
            Err(err) => {
                tracing::warn!(
                    topic,
                    group,
                    size,
                    error = format!("{err:#}"),
                    "event batch failed; retrying"
                );
                tokio::select! {
                    () = tokio::time::sleep(pause) => {},
                    () = stop.cancelled() => {},
                }
                pause = (pause * 2).min(MAX_RETRY_PAUSE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn batches_by_size_and_flushes_on_stop() {
        let stream = EventStream::in_process();
        let stop = CancellationToken::new();
        let batches = Arc::new(Mutex::new(Vec::<usize>::new()));
        let seen = batches.clone();
        let consumer = tokio::spawn(stream.consume(
            "t",
            "g",
            3,
            Duration::from_secs(60),
            stop.clone(),
            move |events| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(events.len());
                    Ok(())
                }
            },
        ));
        for i in 0..7 {
            stream.publish("t", &i.to_string(), &i).await.unwrap();
        }
        // Two full batches go out by size; the seventh waits for max_wait, until stop flushes it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while batches.lock().unwrap().len() < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no size-triggered batches"
            );
            tokio::task::yield_now().await;
        }
        stop.cancel();
        consumer.await.unwrap();
        assert_eq!(*batches.lock().unwrap(), vec![3, 3, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn batches_by_time_when_traffic_is_light() {
        let stream = EventStream::in_process();
        let stop = CancellationToken::new();
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(stream.consume(
            "t",
            "g",
            100,
            Duration::from_millis(200),
            stop.clone(),
            move |events| {
                let tx = tx.clone();
                async move {
                    tx.send(events.len()).unwrap();
                    Ok(())
                }
            },
        ));
        stream.publish("t", "a", &1).await.unwrap();
        stream.publish("t", "b", &2).await.unwrap();
        // With time paused, the batch can only go out because the 200 ms window elapsed.
        assert_eq!(rx.recv().await, Some(2));
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn failing_batches_are_retried_until_they_succeed() {
        let stream = EventStream::in_process();
        let stop = CancellationToken::new();
        let attempts = Arc::new(AtomicUsize::new(0));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let counter = attempts.clone();
        tokio::spawn(stream.consume(
            "t",
            "g",
            10,
            Duration::from_millis(10),
            stop.clone(),
            move |events| {
                let (counter, tx) = (counter.clone(), tx.clone());
                async move {
                    if counter.fetch_add(1, Ordering::SeqCst) < 2 {
                        anyhow::bail!("database down");
                    }
                    tx.send(events.len()).unwrap();
                    Ok(())
                }
            },
        ));
        stream.publish("t", "a", &1).await.unwrap();
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
        stop.cancel();
    }

    #[tokio::test]
    async fn every_group_gets_every_event() {
        let stream = EventStream::in_process();
        let stop = CancellationToken::new();
        let (tx, mut rx) = mpsc::unbounded_channel();
        for group in ["feed", "search"] {
            let tx = tx.clone();
            tokio::spawn(stream.consume(
                "t",
                group,
                1,
                Duration::ZERO,
                stop.clone(),
                move |events| {
                    let tx = tx.clone();
                    async move {
                        tx.send((group, events[0].key.clone())).unwrap();
                        Ok(())
                    }
                },
            ));
        }
        stream.publish("t", "42", &"x").await.unwrap();
        let mut got = vec![rx.recv().await.unwrap(), rx.recv().await.unwrap()];
        got.sort();
        assert_eq!(
            got,
            vec![("feed", "42".to_owned()), ("search", "42".to_owned())]
        );
        stop.cancel();
    }
}
