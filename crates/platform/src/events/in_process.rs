//! The in-process backend: one bounded queue per (topic, consumer group), fed by `publish` and
//! drained by the group's consumer in batches. The whole backend in embedded mode; in cluster mode
//! the fallback for events Redis refused (see the parent module).
//!
//! In embedded mode the outbox is the durable queue, and each group reads it on its own: from
//! its position in `event_progress` (every row of its topic up to there handled or parked), in
//! id order, woken when the relay announces newer rows of the topic. So a failing group delays
//! only itself, and the relay trims a topic's rows below its slowest group's position
//! ([`super::outbox`]). Ids become visible in id order: SQLite has one writer, and on PostgreSQL
//! the transactions that record events queue on an advisory lock from their record to their
//! commit ([`super::outbox::record_many`]) — so a row never appears behind a position already
//! passed.

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, OnceLock,
    },
};

use axum::body::Bytes;
use tokio::{
    sync::{mpsc, watch},
    time::Instant,
};

use super::{delivery::Source, parked, *};
use crate::db::Db;

/// For each topic, the queue of each consumer group: (group name, its queue).
pub(super) type GroupQueues = HashMap<String, Vec<(String, mpsc::Sender<Event>)>>;

/// The in-process queues: the whole backend in embedded mode, the fallback in cluster mode. In
/// embedded mode with an outbox, also each topic's newest outbox row id as the relay last saw
/// it ([`InProcess::announce`]), which wakes the topic's groups.
#[derive(Clone, Default)]
pub(super) struct InProcess {
    pub(super) groups: Arc<Mutex<GroupQueues>>,
    heads: Arc<Mutex<HashMap<String, watch::Sender<i64>>>>,
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

    /// The topics some group consumes.
    pub(super) fn topics(&self) -> Vec<String> {
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, queues)| !queues.is_empty())
            .map(|(topic, _)| topic.clone())
            .collect()
    }

    /// Creates (or replaces) the queue of (`topic`, `group`), consumed `batch_size` events at a
    /// time, and returns its receiving end.
    pub(super) fn register(
        &self,
        topic: &str,
        group: &str,
        batch_size: usize,
    ) -> mpsc::Receiver<Event> {
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY.max(batch_size));
        let mut groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let topic_groups = groups.entry(topic.to_owned()).or_default();
        topic_groups.retain(|(existing, _)| existing != group);
        topic_groups.push((group.to_owned(), sender));
        receiver
    }

    /// A receiver of `topic`'s outbox head: changes when the relay sees newer rows.
    pub(super) fn watch_head(&self, topic: &str) -> watch::Receiver<i64> {
        self.heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(topic.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// The relay saw outbox rows of `topic` up to `head`: wakes its groups if that is news.
    pub(super) fn announce(&self, topic: &str, head: i64) {
        let heads = self
            .heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sender) = heads.get(topic) {
            sender.send_if_modified(|seen| {
                let newer = head > *seen;
                if newer {
                    *seen = head;
                }
                newer
            });
        }
    }

    pub(super) fn senders(&self, topic: &str) -> Vec<mpsc::Sender<Event>> {
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
    pub(super) async fn publish(
        &self,
        topic: &str,
        key: &str,
        payload: Bytes,
        time: i64,
        traceparent: Option<String>,
    ) {
        let event = Event {
            id: next_local_id(),
            topic: topic.to_owned(),
            key: key.to_owned(),
            payload,
            time,
            traceparent,
        };
        for sender in self.senders(topic) {
            // Waits when the group's queue is full (backpressure, counted); fails only if it
            // stopped.
            let delivered = match sender.try_send(event.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(event)) => {
                    metrics::counter!(EVENTS_PUBLISH_WAITS_TOTAL, "topic" => topic.to_owned())
                        .increment(1);
                    sender.send(event).await.is_ok()
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            };
            if !delivered {
                tracing::warn!(topic, "event consumer stopped; event not delivered to it");
            }
        }
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

/// Longest time a group's durable outbox position lags behind what it handled.
const POSITION_INTERVAL: Duration = Duration::from_millis(250);

/// How often an embedded group looks at the outbox without being woken (rows the relay has
/// not announced yet, e.g. recorded by `webook` commands of another process).
const OUTBOX_POLL: Duration = Duration::from_secs(2);

impl Consumer {
    /// The embedded-mode loop: batches from the in-process queue (events published directly)
    /// and, with an outbox, from the topic's outbox rows after the group's position; events
    /// marked for replay every [`parked::REPLAY_POLL`]. On stop it flushes the queue and takes
    /// what the outbox holds for it once more.
    pub(super) async fn run_in_process<H, Fut>(
        self,
        mut queue: mpsc::Receiver<Event>,
        mut head: Option<watch::Receiver<i64>>,
        mut handler: H,
    ) where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        // Only an in-process stream's groups read the outbox (with Redis the relay moves it to
        // the streams, and these are the fallback queues).
        let mut position = match head {
            Some(_) => self.load_position().await,
            None => None,
        };
        let mut outbox_due = position.is_some();
        // The position is recorded at most every POSITION_INTERVAL (a write on SQLite's single
        // writer per batch cost likes a third of their rate); what a crash loses of it is
        // handed over again.
        let mut recorded = position.unwrap_or(0);
        let mut recorded_at = Instant::now();
        let mut flush = tokio::time::interval(POSITION_INTERVAL);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut poll = tokio::time::interval(OUTBOX_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut replays = tokio::time::interval(parked::REPLAY_POLL);
        replays.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if outbox_due && !self.stop.is_cancelled() {
                if let Some(at) = position {
                    let (reached, more) = self.handle_outbox(at, &mut handler).await;
                    position = Some(reached);
                    outbox_due = more;
                    if reached > recorded && recorded_at.elapsed() >= POSITION_INTERVAL {
                        self.record_position_retrying(reached).await;
                        (recorded, recorded_at) = (reached, Instant::now());
                    }
                    continue;
                }
            }
            let has_head = head.is_some();
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                event = queue.recv() => match event {
                    Some(first) => self.handle_local(first, &mut queue, &mut handler).await,
                    None => break,
                },
                changed = async {
                    match head.as_mut() {
                        Some(head) => head.changed().await,
                        None => std::future::pending().await,
                    }
                }, if has_head => {
                    if changed.is_err() {
                        head = None;
                    } else {
                        // Let more rows come within max_wait: one batch for a burst of writes.
                        tokio::select! {
                            () = tokio::time::sleep(self.max_wait) => {},
                            () = self.stop.cancelled() => {},
                        }
                        outbox_due = true;
                    }
                }
                _ = poll.tick() => {
                    if position.is_none() && head.is_some() {
                        position = self.load_position().await;
                    }
                    outbox_due = position.is_some();
                }
                _ = replays.tick() => self.replay_marked(&mut handler).await,
                _ = flush.tick(), if position.is_some_and(|at| at > recorded) => {
                    if let Some(at) = position {
                        self.record_position_retrying(at).await;
                        (recorded, recorded_at) = (at, Instant::now());
                    }
                }
            }
        }
        self.flush_local(queue, &mut handler).await;
        if let Some(mut at) = position {
            // What the last writes recorded: one attempt per batch (stopped), the rest waits
            // for the next start.
            loop {
                let (reached, more) = self.handle_outbox(at, &mut handler).await;
                let done = !more || reached == at;
                at = reached;
                if done {
                    break;
                }
            }
            if at > recorded {
                self.record_position_retrying(at).await;
            }
        }
        tracing::debug!(
            topic = self.topic,
            group = self.group,
            "event consumer stopped"
        );
    }

    /// The group's durable outbox position, created at 0 (every row still there) the first
    /// time; `None` without an outbox (none made yet, or Redis Streams) or while the database
    /// cannot say (tried again at the next poll).
    async fn load_position(&self) -> Option<i64> {
        let db = self.store()?;
        let loaded: sqlx::Result<i64> = async {
            sqlx::query(
                "INSERT INTO event_progress (topic, group_name, last_id, updated_at) \
                 VALUES ($1, $2, 0, $3) ON CONFLICT (topic, group_name) DO NOTHING",
            )
            .bind(&self.topic)
            .bind(&self.group)
            .bind(now_millis())
            .execute(db.writer())
            .await?;
            sqlx::query_scalar(
                "SELECT last_id FROM event_progress WHERE topic = $1 AND group_name = $2",
            )
            .bind(&self.topic)
            .bind(&self.group)
            .fetch_one(db.writer())
            .await
        }
        .await;
        match loaded {
            Ok(position) => {
                self.health
                    .outbox_position
                    .store(position, Ordering::Release);
                Some(position)
            }
            Err(err) => {
                tracing::warn!(
                    topic = self.topic,
                    group = self.group,
                    error = format!("{err:#}"),
                    "cannot read the group's outbox position; trying again"
                );
                None
            }
        }
    }

    /// Reads and settles one batch of outbox rows after `position`; returns the position
    /// reached and whether more rows may be waiting.
    async fn handle_outbox<H, Fut>(&self, position: i64, handler: &mut H) -> (i64, bool)
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let Some(db) = self.store() else {
            return (position, false);
        };
        let limit = i64::try_from(self.batch_size).unwrap_or(i64::MAX);
        // On the readers (SQLite's writer is the writes' queue); when every reader is taken,
        // on the writer, so events never wait behind exhausted reads.
        let rows = match self.read_rows(db.pool(), position, limit).await {
            Err(sqlx::Error::PoolTimedOut) => self.read_rows(db.writer(), position, limit).await,
            other => other,
        };
        let rows = match rows {
            Ok(rows) => rows,
            Err(err) => {
                tracing::warn!(
                    topic = self.topic,
                    group = self.group,
                    error = format!("{err:#}"),
                    "cannot read the outbox; trying again at the next poll"
                );
                return (position, false);
            }
        };
        if rows.is_empty() {
            return (position, false);
        }
        let full = rows.len() == self.batch_size;
        let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
        let events: Vec<Event> = rows
            .into_iter()
            .map(super::outbox_row::OutboxRow::into_event)
            .collect();
        let settled = self.settle(handler, &events, Source::Outbox(&ids)).await;
        let Some(&reached) = settled.checked_sub(1).and_then(|last| ids.get(last)) else {
            return (position, false);
        };
        (reached, full && settled == ids.len())
    }

    /// Records `position` as the group's durable position (after the effects: at-least-once, a
    /// crash in between hands those rows over again, with the same ids), retrying while the
    /// database fails, until `stop`. A failure to record it is only that: the rows come again.
    async fn record_position_retrying(&self, position: i64) {
        let Some(db) = self.store() else { return };
        let mut pause = FIRST_RETRY_PAUSE;
        loop {
            match self.record_position(db, position).await {
                Ok(()) => break,
                Err(err) => {
                    tracing::warn!(
                        topic = self.topic,
                        group = self.group,
                        error = format!("{err:#}"),
                        "cannot record the group's outbox position; retrying"
                    );
                    if !self.pause(&mut pause).await {
                        break;
                    }
                }
            }
        }
    }

    /// Up to `limit` outbox rows of the topic after `position`, on `pool`.
    async fn read_rows(
        &self,
        pool: &crate::db::DbPool,
        position: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<super::outbox_row::OutboxRow>> {
        sqlx::query_as(
            "SELECT id, topic, event_key, payload, created_at, traceparent FROM event_outbox \
             WHERE topic = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(&self.topic)
        .bind(position)
        .bind(limit)
        .fetch_all(pool)
        .await
    }

    async fn record_position(&self, db: &Db, position: i64) -> sqlx::Result<()> {
        let mut connection = db.writer().acquire().await?;
        parked::advance(
            &mut connection,
            &self.topic,
            &self.group,
            position,
            now_millis(),
        )
        .await?;
        self.health
            .outbox_position
            .fetch_max(position, Ordering::AcqRel);
        Ok(())
    }

    /// Collects a batch starting with `first` (up to `batch_size`, at most `max_wait` after
    /// `first`) from the in-process queue and settles it.
    pub(super) async fn handle_local<H, Fut>(
        &self,
        first: Event,
        queue: &mut mpsc::Receiver<Event>,
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
        mut queue: mpsc::Receiver<Event>,
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
            let batch: Vec<Event> = rest.by_ref().take(self.batch_size).collect();
            self.deliver_local(handler, batch).await;
        }
    }

    /// Settles a batch from the in-process queue; what is left unsettled at stop is lost (the
    /// queue is memory), and said so.
    pub(super) async fn deliver_local<H, Fut>(&self, handler: &mut H, batch: Vec<Event>)
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let settled = self.settle(handler, &batch, Source::Transient).await;
        if settled < batch.len() {
            tracing::error!(
                topic = self.topic,
                group = self.group,
                lost = batch.len() - settled,
                "event batch failed during shutdown; its in-process events are lost"
            );
        }
    }
}
