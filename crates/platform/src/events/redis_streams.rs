//! The Redis Streams backend (cluster mode): publishing with `XADD`, consumer groups read with
//! `XREADGROUP` on a connection of their own, acknowledging, reclaiming what dead consumers left
//! and reporting lag (see the parent module for the delivery rules).

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicI64, Ordering},
        Arc,
    },
};

use axum::body::Bytes;
use redis::{
    aio::MultiplexedConnection,
    streams::{StreamAutoClaimReply, StreamId, StreamInfoGroupsReply, StreamReadReply},
    AsyncConnectionConfig, RedisResult,
};
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::{delivery::Source, in_process::InProcess, *};

/// The cluster-mode backend; the in-process queues are its fallback while Redis is down.
pub(super) struct RedisBackend {
    pub(super) redis: Redis,
    pub(super) client: redis::Client,
    pub(super) prefix: String,
    pub(super) options: RedisStreamOptions,
    pub(super) local: InProcess,
    /// The buffer and task behind [`RedisBackend::publish`].
    pub(super) publisher: Publisher,
}

impl RedisBackend {
    /// `XADD`s `events` (from the outbox, each with its own id in field `i`) in one pipeline:
    /// all taken, or an error (some may have been added; the outbox adds them again, same id).
    /// Never falls back to the in-process queues: the outbox keeps what Redis refused.
    pub(super) async fn publish_all(&self, events: Vec<Event>) -> anyhow::Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let mut pipeline = redis::pipe();
        for event in &events {
            let entry = Entry {
                id: Some(&event.id),
                topic: &event.topic,
                key: &event.key,
                time: event.time,
                payload: &event.payload,
                traceparent: event.traceparent.as_deref(),
            };
            entry.add_to(&mut pipeline, &self.prefix, self.options.max_len);
        }
        let mut connection = self.redis.connection();
        pipeline
            .query_async::<()>(&mut connection)
            .await
            .context("adding outbox events to redis")?;
        for event in events {
            super::count_published(&event.topic);
        }
        Ok(())
    }

    /// Hands the event to the publisher task, which `XADD`s it with whatever else is waiting
    /// (one pipeline per batch), or queues it in-process when Redis cannot take it, and returns
    /// once that is done: concurrent publishers share one round trip (a group commit).
    pub(super) async fn publish(
        &self,
        topic: &str,
        key: &str,
        payload: Bytes,
        time: i64,
        traceparent: Option<String>,
    ) {
        let (added, is_added) = oneshot::channel();
        let unsent = Unsent {
            topic: topic.to_owned(),
            key: key.to_owned(),
            payload,
            time,
            traceparent,
            added,
        };
        let sender = self.publisher.start(self);
        self.publisher.unsettled.add();
        match sender.send(unsent).await {
            // Sent or fallen back; an error means the task ended mid-batch (it panicked), and
            // nothing more can be done for the event.
            Ok(()) => is_added.await.unwrap_or(()),
            Err(refused) => {
                // The task is gone (only if it panicked): the event is handled here instead.
                let unsent = refused.0;
                fall_back(&self.local, &[unsent], "the publisher task has stopped").await;
                self.publisher.unsettled.settle(1);
            }
        }
    }

    /// Waits until every event handed to [`RedisBackend::publish`] so far is in Redis or in the
    /// in-process queues (graceful shutdown).
    pub(super) async fn flush(&self) {
        self.publisher.unsettled.wait().await;
    }
}

/// A stream entry as it is added: `XADD key MAXLEN ~ max_len * [i <id>] k <key> t <time> p
/// <payload> [tp <traceparent>]` (the id field only for outbox events, whose id outlives a
/// retried add; the trace context only when the publish was traced).
struct Entry<'a> {
    id: Option<&'a str>,
    topic: &'a str,
    key: &'a str,
    time: i64,
    payload: &'a Bytes,
    traceparent: Option<&'a str>,
}

impl Entry<'_> {
    fn add_to(&self, pipeline: &mut redis::Pipeline, prefix: &str, max_len: usize) {
        let command = pipeline
            .cmd("XADD")
            .arg(stream_key(prefix, self.topic))
            .arg("MAXLEN")
            .arg("~")
            .arg(max_len)
            .arg("*");
        if let Some(id) = self.id {
            command.arg("i").arg(id);
        }
        command
            .arg("k")
            .arg(self.key)
            .arg("t")
            .arg(self.time)
            .arg("p")
            .arg(self.payload.as_ref());
        if let Some(traceparent) = self.traceparent {
            command.arg("tp").arg(traceparent);
        }
        command.ignore();
    }
}

/// Events waiting for their `XADD` before publishers wait.
pub(super) const PUBLISH_BUFFER: usize = 10_000;
/// Most events one `XADD` pipeline carries.
const PUBLISH_BATCH: usize = 512;

/// An event handed to [`RedisBackend::publish`], not yet in Redis.
struct Unsent {
    topic: String,
    key: String,
    payload: Bytes,
    time: i64,
    traceparent: Option<String>,
    /// Told once the event is in Redis or the in-process queues.
    added: oneshot::Sender<()>,
}

/// The publishing side of the backend: a bounded buffer drained by one task, started by the
/// first publish (which runs on the runtime the task then belongs to). Events go out in the
/// order they were published, as many per pipeline as are waiting, and each publisher is told
/// when its event is in: under load an event costs its publisher a share of one round trip, and
/// a publish that returned is in Redis (or, Redis refusing, in this process's queues), as with
/// one `XADD` per event. Events whose publisher went away before that (a request dropped) are
/// still sent; a graceful stop waits for them ([`RedisBackend::flush`]).
#[derive(Default)]
pub(super) struct Publisher {
    sender: std::sync::OnceLock<mpsc::Sender<Unsent>>,
    unsettled: Arc<Unsettled>,
}

impl Publisher {
    fn start(&self, backend: &RedisBackend) -> mpsc::Sender<Unsent> {
        self.sender
            .get_or_init(|| {
                let (sender, receiver) = mpsc::channel(PUBLISH_BUFFER);
                tokio::spawn(add_buffered(
                    receiver,
                    backend.redis.clone(),
                    backend.prefix.clone(),
                    backend.options.max_len,
                    backend.local.clone(),
                    self.unsettled.clone(),
                ));
                sender
            })
            .clone()
    }
}

/// How many published events are not yet in Redis or the in-process queues.
#[derive(Default)]
struct Unsettled {
    count: std::sync::atomic::AtomicUsize,
    settled: tokio::sync::Notify,
}

impl Unsettled {
    fn add(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    fn settle(&self, events: usize) {
        if self.count.fetch_sub(events, Ordering::AcqRel) == events {
            self.settled.notify_waiters();
        }
    }

    async fn wait(&self) {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            settled.await;
        }
    }
}

/// The publisher task: `XADD`s what is waiting, a pipeline per batch, until every sender is gone.
async fn add_buffered(
    mut receiver: mpsc::Receiver<Unsent>,
    redis: Redis,
    prefix: String,
    max_len: usize,
    local: InProcess,
    unsettled: Arc<Unsettled>,
) {
    let mut batch = Vec::with_capacity(PUBLISH_BATCH);
    while receiver.recv_many(&mut batch, PUBLISH_BATCH).await > 0 {
        let mut pipeline = redis::pipe();
        for unsent in &batch {
            let entry = Entry {
                id: None,
                topic: &unsent.topic,
                key: &unsent.key,
                time: unsent.time,
                payload: &unsent.payload,
                traceparent: unsent.traceparent.as_deref(),
            };
            entry.add_to(&mut pipeline, &prefix, max_len);
        }
        let added: RedisResult<()> = pipeline.query_async(&mut redis.connection()).await;
        if let Err(err) = added {
            // Some may have been added before the error: those are counted twice (the same
            // ambiguity as a single `XADD` that timed out after Redis applied it).
            fall_back(&local, &batch, &format!("{err:#}")).await;
        }
        let events = batch.len();
        for unsent in batch.drain(..) {
            // A publisher that went away has nobody to tell.
            let _ = unsent.added.send(());
        }
        unsettled.settle(events);
    }
}

/// Delivers events Redis refused to this process's consumers (module docs of `events`), or
/// reports them lost when no consumer of this process takes their topic.
async fn fall_back(local: &InProcess, events: &[Unsent], error: &str) {
    for event in events {
        let (topic, key) = (event.topic.as_str(), event.key.as_str());
        if local.senders(topic).is_empty() {
            // Nothing in this process would receive it (every topic this build consumes has a
            // consumer in every process, `Subscription`): say so, never silently.
            tracing::warn!(
                topic,
                key,
                error,
                "cannot publish to redis and no consumer of this process takes the topic; \
                 event lost"
            );
            metrics::counter!(EVENTS_LOST_TOTAL, "topic" => topic.to_owned()).increment(1);
            continue;
        }
        tracing::warn!(
            topic,
            key,
            error,
            "cannot publish to redis; delivering the event to this process's consumers"
        );
        metrics::counter!(EVENTS_FALLBACK_TOTAL, "topic" => topic.to_owned()).increment(1);
        local
            .publish(
                topic,
                key,
                event.payload.clone(),
                event.time,
                event.traceparent.clone(),
            )
            .await;
    }
}

/// The non-blocking side of one Redis consumer (acknowledging, reclaiming, reporting), on the
/// shared connection.
pub(super) struct RedisConsumer {
    pub(super) connection: crate::redis::RedisConnection,
    pub(super) key: String,
    /// This consumer's name in its group.
    pub(super) name: String,
    pub(super) options: RedisStreamOptions,
}

/// `host-pid-random`: unique per process and `consume` call, and says where it runs.
pub(super) fn consumer_name() -> String {
    let host = crate::host_name();
    let mut random = uuid::Uuid::new_v4().simple().to_string();
    random.truncate(8);
    format!("{host}-{}-{random}", std::process::id())
}

/// Creates `group` on the stream at `key` (and the stream) unless it exists.
pub(super) async fn ensure_group(
    connection: &mut (impl redis::aio::ConnectionLike + Send),
    key: &str,
    group: &str,
) -> RedisResult<()> {
    let created: RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(key)
        .arg(group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(connection)
        .await;
    match created {
        Err(err) if err.code() == Some("BUSYGROUP") => Ok(()),
        other => other,
    }
}

/// Whether `err` only says Redis is unreachable (already reported by the reader).
use crate::redis::is_connection_error;

/// The event in a stream entry written by [`RedisBackend::publish`]; `None` if it is malformed.
pub(super) fn entry_event(topic: &str, mut entry: StreamId) -> Option<Event> {
    // Outbox events carry their own id (the same however often they are added); others are
    // known by their entry id.
    let id = match entry.map.remove("i") {
        Some(id) => redis::from_redis_value(id).ok()?,
        None => entry.id,
    };
    let key: String = redis::from_redis_value(entry.map.remove("k")?).ok()?;
    let time: i64 = redis::from_redis_value(entry.map.remove("t")?).ok()?;
    let payload: Vec<u8> = redis::from_redis_value(entry.map.remove("p")?).ok()?;
    let traceparent = entry
        .map
        .remove("tp")
        .and_then(|value| redis::from_redis_value(value).ok());
    Some(Event {
        id,
        topic: topic.to_owned(),
        key,
        payload: Bytes::from(payload),
        time,
        traceparent,
    })
}

impl RedisConsumer {
    /// `XACK`s `ids`. A failure leaves them pending: they are delivered again after `min_idle`.
    pub(super) async fn ack(&self, group: &str, ids: &[String]) {
        let mut connection = self.connection.clone();
        let acked: RedisResult<i64> = redis::cmd("XACK")
            .arg(&self.key)
            .arg(group)
            .arg(ids)
            .query_async(&mut connection)
            .await;
        if let Err(err) = acked {
            tracing::warn!(
                key = self.key,
                group,
                count = ids.len(),
                error = format!("{err:#}"),
                "cannot acknowledge handled events; they will be delivered again"
            );
        }
    }

    /// Sets [`EVENT_CONSUMER_LAG`] from `XINFO GROUPS`: entries the group has not read (`lag`,
    /// when Redis can tell) plus those read but not acknowledged (`pending`).
    pub(super) async fn report_lag(&self, topic: &str, group: &str) {
        let mut connection = self.connection.clone();
        let reply: RedisResult<StreamInfoGroupsReply> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&self.key)
            .query_async(&mut connection)
            .await;
        match reply {
            Ok(reply) => {
                if let Some(info) = reply.groups.iter().find(|info| info.name == group) {
                    let lag = info.lag.unwrap_or(0) + info.pending;
                    metrics::gauge!(EVENT_CONSUMER_LAG, "topic" => topic.to_owned(), "group" => group.to_owned())
                        .set(lag as f64);
                }
            }
            Err(err) => tracing::debug!(
                key = self.key,
                group,
                error = format!("{err:#}"),
                "cannot read the consumer group's lag"
            ),
        }
    }

    /// Removes the consumers of `group` that died without leaving (killed instances): no pending
    /// entries (what they held was taken over) and no read for [`DEAD_CONSUMER_IDLE`].
    pub(super) async fn remove_dead_consumers(&self, group: &str) {
        let mut connection = self.connection.clone();
        let consumers: RedisResult<redis::streams::StreamInfoConsumersReply> = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(&self.key)
            .arg(group)
            .query_async(&mut connection)
            .await;
        let Ok(consumers) = consumers else { return };
        let dead_after = usize::try_from(DEAD_CONSUMER_IDLE.as_millis()).unwrap_or(usize::MAX);
        for consumer in consumers.consumers {
            if consumer.name == self.name || consumer.pending > 0 || consumer.idle < dead_after {
                continue;
            }
            let removed: RedisResult<i64> = redis::cmd("XGROUP")
                .arg("DELCONSUMER")
                .arg(&self.key)
                .arg(group)
                .arg(&consumer.name)
                .query_async(&mut connection)
                .await;
            if removed.is_ok() {
                tracing::info!(
                    key = self.key,
                    group,
                    consumer = consumer.name,
                    "removed a dead consumer from its group"
                );
            }
        }
    }

    /// After a clean stop: removes this consumer from its group if it holds no pending entries,
    /// so restarts do not pile up dead consumer names (`XGROUP DELCONSUMER` would drop pending
    /// entries, hence the check).
    pub(super) async fn leave(&self, group: &str) {
        let mut connection = self.connection.clone();
        let pending: RedisResult<redis::Value> = redis::cmd("XPENDING")
            .arg(&self.key)
            .arg(group)
            .arg("-")
            .arg("+")
            .arg(1)
            .arg(&self.name)
            .query_async(&mut connection)
            .await;
        if !matches!(&pending, Ok(redis::Value::Array(entries)) if entries.is_empty()) {
            return;
        }
        let removed: RedisResult<i64> = redis::cmd("XGROUP")
            .arg("DELCONSUMER")
            .arg(&self.key)
            .arg(group)
            .arg(&self.name)
            .query_async(&mut connection)
            .await;
        if let Err(err) = removed {
            tracing::debug!(
                key = self.key,
                group,
                error = format!("{err:#}"),
                "cannot remove the stopped consumer from its group"
            );
        }
    }
}

/// The blocking side of one Redis consumer: `XREADGROUP` on a connection of its own. Each
/// [`Reader::next`] takes the reader and gives it back with a batch, so the consumer loop can
/// keep one read in flight while it does other work.
pub(super) struct Reader {
    pub(super) client: redis::Client,
    pub(super) connection: Option<MultiplexedConnection>,
    /// `CLIENT ID` of `connection` (0: none), for `CLIENT UNBLOCK` when stopping.
    pub(super) client_id: Arc<AtomicI64>,
    /// Whether a read has entries in hand and is still filling its batch (up to `max_wait`):
    /// they are pending on this consumer, and the consumer must not reclaim them meanwhile.
    pub(super) holding: Arc<AtomicBool>,
    pub(super) key: String,
    pub(super) group: String,
    pub(super) name: String,
    pub(super) batch_size: usize,
    pub(super) max_wait: Duration,
    pub(super) stop: CancellationToken,
    /// Pause after the next failed read.
    pub(super) pause: Duration,
}

impl Reader {
    /// The next batch of new entries: up to `batch_size`, read for at most `max_wait` after the
    /// first; empty when none came within [`READ_BLOCK`], after `stop`, or after a failure
    /// (logged, then a growing pause that `stop` cuts short, then a fresh connection).
    pub(super) async fn next(mut self) -> (Self, Vec<StreamId>) {
        if self.stop.is_cancelled() {
            return (self, Vec::new());
        }
        match self.read().await {
            Ok(entries) => {
                self.pause = FIRST_RETRY_PAUSE;
                (self, entries)
            }
            Err(err) => {
                tracing::warn!(
                    key = self.key,
                    group = self.group,
                    error = format!("{err:#}"),
                    retry_in = ?self.pause,
                    "cannot read events from redis"
                );
                self.disconnect();
                tokio::select! {
                    () = tokio::time::sleep(self.pause) => {},
                    () = self.stop.cancelled() => {},
                }
                self.pause = (self.pause * 2).min(MAX_RETRY_PAUSE);
                (self, Vec::new())
            }
        }
    }

    pub(super) async fn read(&mut self) -> RedisResult<Vec<StreamId>> {
        let mut connection = self.connect().await?;
        if self.stop.is_cancelled() {
            return Ok(Vec::new());
        }
        let mut batch = self
            .read_group(&mut connection, self.batch_size, READ_BLOCK)
            .await?;
        if batch.is_empty() {
            return Ok(batch);
        }
        self.holding.store(true, Ordering::Release);
        // Like the in-process consumer: fill the batch for at most max_wait after the first.
        let deadline = Instant::now() + self.max_wait;
        while batch.len() < self.batch_size && !self.stop.is_cancelled() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left < Duration::from_millis(1) {
                break;
            }
            match self
                .read_group(&mut connection, self.batch_size - batch.len(), left)
                .await
            {
                Ok(more) if more.is_empty() => break,
                Ok(more) => batch.extend(more),
                Err(err) => {
                    // What was read is pending on this consumer: hand it over rather than wait
                    // for it to be reclaimed.
                    tracing::warn!(
                        key = self.key,
                        group = self.group,
                        error = format!("{err:#}"),
                        "cannot read events from redis; handling those already read"
                    );
                    self.disconnect();
                    break;
                }
            }
        }
        self.holding.store(false, Ordering::Release);
        Ok(batch)
    }

    /// One `XREADGROUP … COUNT count BLOCK block … >`; empty on timeout (or `CLIENT UNBLOCK`).
    pub(super) async fn read_group(
        &self,
        connection: &mut MultiplexedConnection,
        count: usize,
        block: Duration,
    ) -> RedisResult<Vec<StreamId>> {
        // BLOCK 0 would mean forever.
        let block_ms = u64::try_from(block.as_millis()).unwrap_or(u64::MAX).max(1);
        let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&self.group)
            .arg(&self.name)
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(">")
            .query_async(connection)
            .await?;
        Ok(reply
            .map(|reply| reply.keys.into_iter().flat_map(|key| key.ids).collect())
            .unwrap_or_default())
    }

    /// The reading connection, opened (with the group created) if there is none.
    pub(super) async fn connect(&mut self) -> RedisResult<MultiplexedConnection> {
        if let Some(connection) = &self.connection {
            return Ok(connection.clone());
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(IO_TIMEOUT))
            .set_response_timeout(Some(READ_BLOCK.max(self.max_wait) + IO_TIMEOUT));
        let mut connection = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        ensure_group(&mut connection, &self.key, &self.group).await?;
        match redis::cmd("CLIENT")
            .arg("ID")
            .query_async::<i64>(&mut connection)
            .await
        {
            Ok(id) => self.client_id.store(id, Ordering::SeqCst),
            Err(err) => tracing::debug!(
                error = format!("{err:#}"),
                "CLIENT ID refused; a stopping consumer waits for its read to time out"
            ),
        }
        self.connection = Some(connection.clone());
        Ok(connection)
    }

    pub(super) fn disconnect(&mut self) {
        self.connection = None;
        self.client_id.store(0, Ordering::SeqCst);
    }
}

impl Consumer {
    /// The cluster-mode loop: one select over stop, the reclaim tick, the in-process fallback
    /// queue and the in-flight Redis read, so the handler only ever runs for one batch at a time.
    pub(super) async fn run_redis<H, Fut>(
        self,
        redis: RedisConsumer,
        reader: Reader,
        mut queue: mpsc::Receiver<Event>,
        mut handler: H,
    ) where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let client_id = reader.client_id.clone();
        let holding = reader.holding.clone();
        let mut read = std::pin::pin!(reader.next());
        let mut reclaim = tokio::time::interval(
            redis
                .options
                .reclaim_interval
                .max(Duration::from_millis(10)),
        );
        reclaim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut replays = tokio::time::interval(super::parked::REPLAY_POLL);
        replays.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut queue_open = true;
        // A tick that found the read filling a batch: reclaim as soon as that batch is handled.
        let mut reclaim_due = false;
        loop {
            // Biased: stop first; the fallback queue before Redis, as it only fills while Redis
            // is failing.
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                _ = reclaim.tick() => {
                    // The entries a filling read holds are pending on this consumer, and those
                    // of its first read can be idle past `min_idle` before it returns (when
                    // `max_wait` is not well below it): `XAUTOCLAIM` would hand them to this
                    // consumer a second time, as a batch of their own. (Seen in the takeover
                    // test: the doomed consumer handled part of its own read via reclaim.)
                    if holding.load(Ordering::Acquire) {
                        reclaim_due = true;
                    } else {
                        self.reclaim(&redis, &mut handler).await;
                    }
                }
                _ = replays.tick() => self.replay_marked(&mut handler).await,
                event = queue.recv(), if queue_open => match event {
                    Some(first) => self.handle_local(first, &mut queue, &mut handler).await,
                    None => queue_open = false,
                },
                (reader, entries) = &mut read => {
                    read.set(reader.next());
                    self.handle_entries(&redis, entries, &mut handler).await;
                    // No read is in flight here (the next one has not been polled yet).
                    if std::mem::take(&mut reclaim_due) {
                        self.reclaim(&redis, &mut handler).await;
                    }
                }
            }
        }
        // Stop: finish the batch in hand, then what the fallback queue holds.
        let finished = match self.finish_read(read.as_mut(), &redis, &client_id).await {
            Some(entries) => {
                self.handle_entries(&redis, entries, &mut handler).await;
                true
            }
            None => false,
        };
        self.flush_local(queue, &mut handler).await;
        if finished {
            redis.leave(&self.group).await;
        }
        tracing::debug!(
            topic = self.topic,
            group = self.group,
            consumer = redis.name,
            "event consumer stopped"
        );
    }

    /// After stop: unblocks the in-flight read (repeatedly, as the unblock may reach Redis before
    /// the read does) and returns what it read, or `None` if it did not end within
    /// [`STOP_GRACE`] (it is dropped; entries it took stay pending and are reclaimed elsewhere).
    pub(super) async fn finish_read<F>(
        &self,
        mut read: Pin<&mut F>,
        redis: &RedisConsumer,
        client_id: &AtomicI64,
    ) -> Option<Vec<StreamId>>
    where
        F: Future<Output = (Reader, Vec<StreamId>)>,
    {
        let deadline = Instant::now() + STOP_GRACE;
        let mut wait = Duration::ZERO;
        loop {
            if let Ok((_, entries)) = tokio::time::timeout(wait, read.as_mut()).await {
                return Some(entries);
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    topic = self.topic,
                    group = self.group,
                    "event read did not end on stop; what it took is reclaimed by another consumer"
                );
                return None;
            }
            let id = client_id.load(Ordering::SeqCst);
            if id != 0 {
                let mut connection = redis.connection.clone();
                let mut unblock = redis::cmd("CLIENT");
                unblock.arg("UNBLOCK").arg(id).arg("TIMEOUT");
                let _unblocked =
                    tokio::time::timeout_at(deadline, unblock.query_async::<i64>(&mut connection))
                        .await;
            }
            wait = Duration::from_millis(20);
        }
    }

    /// Delivers stream entries and acknowledges them once the handler succeeded; if it never
    /// did (stopped while failing) they stay pending for another consumer. Malformed entries are
    /// acknowledged without handling.
    pub(super) async fn handle_entries<H, Fut>(
        &self,
        redis: &RedisConsumer,
        entries: Vec<StreamId>,
        handler: &mut H,
    ) where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        if entries.is_empty() {
            return;
        }
        let ids: Vec<String> = entries.iter().map(|entry| entry.id.clone()).collect();
        // (entry id, event id): outbox events carry an id of their own.
        let mut entry_ids = Vec::with_capacity(entries.len());
        let mut events = Vec::with_capacity(entries.len());
        for entry in entries {
            let id = entry.id.clone();
            match entry_event(&self.topic, entry) {
                Some(event) => {
                    entry_ids.push((id, event.id.clone()));
                    events.push(event);
                }
                None => tracing::warn!(
                    key = redis.key,
                    id,
                    "malformed stream entry; acknowledged without handling"
                ),
            }
        }
        // Every event settled (handled or parked) is acknowledged; the rest stay pending for
        // another consumer. Malformed entries have no event and are acknowledged with the first.
        let settled = self.settle(handler, &events, Source::Transient).await;
        if settled < events.len() {
            tracing::warn!(
                topic = self.topic,
                group = self.group,
                left = events.len() - settled,
                "event batch not handled before stop; left pending for another consumer"
            );
            let pending: std::collections::HashSet<&str> = events[settled..]
                .iter()
                .map(|event| event.id.as_str())
                .collect();
            let ids: Vec<String> = entry_ids
                .into_iter()
                .filter(|(_, event_id)| !pending.contains(event_id.as_str()))
                .map(|(entry, _)| entry)
                .collect();
            if !ids.is_empty() {
                redis.ack(&self.group, &ids).await;
            }
            return;
        }
        redis.ack(&self.group, &ids).await;
    }

    /// Takes over entries pending longer than `min_idle` (`XAUTOCLAIM`, from any consumer of
    /// the group, this one included), handles them, then reports the group's lag.
    pub(super) async fn reclaim<H, Fut>(&self, redis: &RedisConsumer, handler: &mut H)
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let mut connection = redis.connection.clone();
        let min_idle_ms = u64::try_from(redis.options.min_idle.as_millis()).unwrap_or(u64::MAX);
        let mut cursor = "0-0".to_owned();
        loop {
            let reply: RedisResult<StreamAutoClaimReply> = redis::cmd("XAUTOCLAIM")
                .arg(&redis.key)
                .arg(&self.group)
                .arg(&redis.name)
                .arg(min_idle_ms)
                .arg(&cursor)
                .arg("COUNT")
                .arg(self.batch_size)
                .query_async(&mut connection)
                .await;
            let reply = match reply {
                Ok(reply) => reply,
                Err(err) => {
                    // NOGROUP: the reader creates the group when it connects.
                    if err.code() != Some("NOGROUP") && !is_connection_error(&err) {
                        tracing::warn!(
                            key = redis.key,
                            group = self.group,
                            error = format!("{err:#}"),
                            "cannot reclaim pending events"
                        );
                    }
                    break;
                }
            };
            if !reply.deleted_ids.is_empty() {
                tracing::warn!(
                    key = redis.key,
                    group = self.group,
                    count = reply.deleted_ids.len(),
                    "pending events were trimmed from the stream before being handled"
                );
            }
            if !reply.claimed.is_empty() {
                tracing::info!(
                    key = redis.key,
                    group = self.group,
                    count = reply.claimed.len(),
                    "taking over events left pending"
                );
                self.handle_entries(redis, reply.claimed, handler).await;
            }
            cursor = reply.next_stream_id;
            if cursor == "0-0" || self.stop.is_cancelled() {
                break;
            }
        }
        redis.report_lag(&self.topic, &self.group).await;
        redis.remove_dead_consumers(&self.group).await;
    }
}
