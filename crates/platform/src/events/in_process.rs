//! The in-process backend: one bounded queue per (topic, consumer group), fed by `publish` and
//! drained by the group's consumer in batches. The whole backend in embedded mode; in cluster mode
//! the fallback for events Redis refused (see the parent module).

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, OnceLock,
    },
};

use axum::body::Bytes;
use tokio::{sync::mpsc, time::Instant};

use super::*;

/// For each topic, the queue of each consumer group: (group name, its queue).
pub(super) type GroupQueues = HashMap<String, Vec<(String, mpsc::Sender<Queued>)>>;

/// An event in a group's queue, with the receipt of the outbox row it came from, if any.
pub(super) struct Queued {
    pub(super) event: Event,
    pub(super) receipt: Option<Arc<Receipt>>,
}

/// Counts down the groups that have yet to handle an outbox row; the last one reports the row's
/// id to the relay, which may then delete it. A group that never handles it (its consumer
/// stopped first) keeps it from being reported: the row stays in the outbox.
pub(super) struct Receipt {
    id: i64,
    remaining: AtomicUsize,
    handled: mpsc::UnboundedSender<i64>,
}

impl Receipt {
    fn handled(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The relay gave up waiting (stopped): the row stays, which is safe.
            let _ = self.handled.send(self.id);
        }
    }
}

/// The in-process queues: the whole backend in embedded mode, the fallback in cluster mode.
#[derive(Clone, Default)]
pub(super) struct InProcess {
    pub(super) groups: Arc<Mutex<GroupQueues>>,
}

impl InProcess {
    /// Whether some group consumes `topic`.
    pub(super) fn has_groups(&self, topic: &str) -> bool {
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(topic)
            .is_some_and(|queues| !queues.is_empty())
    }

    /// Creates (or replaces) the queue of (`topic`, `group`) and returns its receiving end.
    pub(super) fn register(&self, topic: &str, group: &str) -> mpsc::Receiver<Queued> {
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let mut groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let topic_groups = groups.entry(topic.to_owned()).or_default();
        topic_groups.retain(|(existing, _)| existing != group);
        topic_groups.push((group.to_owned(), sender));
        receiver
    }

    pub(super) fn senders(&self, topic: &str) -> Vec<mpsc::Sender<Queued>> {
        let groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        groups
            .get(topic)
            .map(|groups| groups.iter().map(|(_, sender)| sender.clone()).collect())
            .unwrap_or_default()
    }

    /// Queues the event for every group of `topic`, waiting while a queue is full.
    pub(super) async fn publish(&self, topic: &str, key: &str, payload: Bytes, time: i64) {
        let event = Event {
            id: next_local_id(),
            topic: topic.to_owned(),
            key: key.to_owned(),
            payload,
            time,
        };
        for sender in self.senders(topic) {
            let queued = Queued {
                event: event.clone(),
                receipt: None,
            };
            // Waits when the group's queue is full (backpressure); fails only if it stopped.
            if sender.send(queued).await.is_err() {
                tracing::warn!(topic, "event consumer stopped; event not delivered to it");
            }
        }
    }

    /// Queues outbox row `id`'s event for every group of its topic; `handled` gets the id once
    /// every group has handled it (at once if the topic has no group: nothing here needs it).
    /// Returns false if some group could not be given it (its consumer stopped): the id will
    /// never be reported.
    pub(super) async fn hand_over(
        &self,
        event: Event,
        id: i64,
        handled: &mpsc::UnboundedSender<i64>,
    ) -> bool {
        let senders = self.senders(&event.topic);
        let receipt = Arc::new(Receipt {
            id,
            remaining: AtomicUsize::new(senders.len()),
            handled: handled.clone(),
        });
        if senders.is_empty() {
            let _ = handled.send(id);
            return true;
        }
        super::count_published(&event.topic);
        for sender in senders {
            let queued = Queued {
                event: event.clone(),
                receipt: Some(receipt.clone()),
            };
            if sender.send(queued).await.is_err() {
                return false;
            }
        }
        true
    }
}

/// `local-{process}-{n}`: `n` counts events in this process; `process` is random per process, so
/// ids recorded by consumers are not reused after a restart.
pub(super) fn next_local_id() -> String {
    static PROCESS: OnceLock<String> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let process = PROCESS.get_or_init(|| {
        let mut random = uuid::Uuid::new_v4().simple().to_string();
        random.truncate(12);
        random
    });
    format!(
        "local-{process}-{}",
        COUNTER.fetch_add(1, Ordering::Relaxed) + 1
    )
}

/// What both consumer loops share: who consumes, how it batches, when it stops.
pub(super) struct Consumer {
    pub(super) topic: String,
    pub(super) group: String,
    pub(super) batch_size: usize,
    pub(super) max_wait: Duration,
    pub(super) stop: CancellationToken,
}

impl Consumer {
    /// The embedded-mode loop: batches from the in-process queue until stopped, then flushes.
    pub(super) async fn run_in_process<H, Fut>(
        self,
        mut queue: mpsc::Receiver<Queued>,
        mut handler: H,
    ) where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        loop {
            let first = tokio::select! {
                event = queue.recv() => event,
                () = self.stop.cancelled() => None,
            };
            let Some(first) = first else { break };
            self.handle_local(first, &mut queue, &mut handler).await;
        }
        self.flush_local(queue, &mut handler).await;
        tracing::debug!(
            topic = self.topic,
            group = self.group,
            "event consumer stopped"
        );
    }

    /// Collects a batch starting with `first` (up to `batch_size`, at most `max_wait` after
    /// `first`) from the in-process queue and delivers it.
    pub(super) async fn handle_local<H, Fut>(
        &self,
        first: Queued,
        queue: &mut mpsc::Receiver<Queued>,
        handler: &mut H,
    ) where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let mut batch = vec![first];
        // One timer for the batch, and every event already queued taken at each wake-up: under
        // load the queue holds many, and a timer or a wake-up per event was a cost per read.
        let deadline = tokio::time::sleep_until(Instant::now() + self.max_wait);
        tokio::pin!(deadline);
        while batch.len() < self.batch_size {
            let room = self.batch_size - batch.len();
            tokio::select! {
                received = queue.recv_many(&mut batch, room) => if received == 0 { break },
                () = &mut deadline => break,
                () = self.stop.cancelled() => break,
            }
        }
        self.deliver_local(handler, batch).await;
        metrics::gauge!(EVENT_CONSUMER_LAG, "topic" => self.topic.clone(), "group" => self.group.clone())
            .set(queue.len() as f64);
    }

    /// Shutdown: stops accepting, then delivers everything still queued.
    pub(super) async fn flush_local<H, Fut>(
        &self,
        mut queue: mpsc::Receiver<Queued>,
        handler: &mut H,
    ) where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        queue.close();
        let mut rest = Vec::new();
        while let Some(event) = queue.recv().await {
            rest.push(event);
        }
        let mut rest = rest.into_iter().peekable();
        while rest.peek().is_some() {
            let batch: Vec<Queued> = rest.by_ref().take(self.batch_size).collect();
            self.deliver_local(handler, batch).await;
        }
    }

    /// Delivers a batch from the in-process queue; on success, reports its outbox rows handled.
    pub(super) async fn deliver_local<H, Fut>(&self, handler: &mut H, batch: Vec<Queued>)
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let events = batch.iter().map(|queued| queued.event.clone()).collect();
        if self.deliver(handler, events).await {
            for receipt in batch.iter().filter_map(|queued| queued.receipt.as_ref()) {
                receipt.handled();
            }
            return;
        }
        // Events from the outbox stay there and come back at the next start.
        let lost = batch
            .iter()
            .filter(|queued| queued.receipt.is_none())
            .count();
        tracing::error!(
            topic = self.topic,
            group = self.group,
            lost,
            kept_in_outbox = batch.len() - lost,
            "event batch failed during shutdown"
        );
    }

    /// Hands `batch` to `handler`, retrying with a growing pause while it fails. After `stop`,
    /// one last attempt is made; returns whether the handler succeeded.
    pub(super) async fn deliver<H, Fut>(&self, handler: &mut H, batch: Vec<Event>) -> bool
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let (topic, group) = (self.topic.as_str(), self.group.as_str());
        let size = batch.len();
        let mut pause = FIRST_RETRY_PAUSE;
        loop {
            match handler(batch.clone()).await {
                Ok(()) => {
                    metrics::counter!(EVENTS_CONSUMED_TOTAL, "topic" => topic.to_owned(), "group" => group.to_owned())
                        .increment(size as u64);
                    metrics::histogram!(EVENT_BATCH_SIZE, "topic" => topic.to_owned(), "group" => group.to_owned())
                        .record(size as f64);
                    return true;
                }
                Err(err) if self.stop.is_cancelled() => {
                    tracing::warn!(
                        topic,
                        group,
                        size,
                        error = format!("{err:#}"),
                        "event batch failed during shutdown"
                    );
                    return false;
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
                        () = self.stop.cancelled() => {},
                    }
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
            }
        }
    }
}
