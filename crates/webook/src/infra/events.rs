//! The event stream: `publish(topic, key, payload)` on one side, consumer groups that receive
//! events in batches on the other (DESIGN.md §4). One type, [`EventStream`], with two backends
//! behind the same API; every event carries an [`Event::id`] that stays the same when the event
//! is delivered again, so consumers that must not count twice can deduplicate.
//!
//! **In-process (embedded mode, [`EventStream::in_process`]).** Each (topic, group) pair is a
//! bounded queue, so a slow consumer pushes back on publishers instead of growing memory. A
//! consumer takes up to `batch_size` events or whatever arrived within `max_wait` of the first
//! one, and hands them to its handler as one batch; a failed batch is retried (at-least-once)
//! with a growing pause. On shutdown a consumer drains what is queued and flushes it before it
//! exits, so buffered events are not dropped. Events published to a topic nobody consumes are
//! discarded — in-process events are a notification mechanism, not storage. Ids are
//! `local-{process}-{n}`: unique within the process and, thanks to a random per-process part,
//! not repeated by the next process (consumers may keep ids in a database).
//!
//! **Redis Streams (cluster mode, [`EventStream::redis`]).** Each topic is one stream,
//! `{prefix}:stream:{topic}` ([`stream_key`]); `publish` is `XADD key MAXLEN ~ max_len * k <key>
//! t <time> p <payload>`. Each group is a Redis consumer group on that stream, created from the
//! stream's start (`XGROUP CREATE … 0 MKSTREAM`) by its first consumer, so events published
//! before it — by requests served while the consumer was starting, or by other instances —
//! are not missed (unlike in-process, where a group sees only what follows its registration). Each `consume` call is one Redis consumer, named
//! `host-pid-random`, whose loop:
//! - reads new entries with `XREADGROUP GROUP g c COUNT batch_size BLOCK … STREAMS key >` on a
//!   connection of its own (a blocked read on the shared multiplexed connection would hold up
//!   every command queued behind it), and, like the in-process consumer, keeps reading until it
//!   has `batch_size` entries or `max_wait` has passed since the first;
//! - hands the batch to the handler and `XACK`s it only after the handler returned `Ok`; a
//!   failing batch is not acknowledged and is retried with the same growing pause as in-process;
//! - at start and every [`RedisStreamOptions::reclaim_interval`] (1 s) takes over entries that
//!   have been pending longer than [`RedisStreamOptions::min_idle`] (3 s; `XAUTOCLAIM`) — left
//!   by a consumer that crashed or was killed mid-batch — and handles them the same way, then
//!   removes consumers that died without leaving (no pending entries, no read for
//!   [`DEAD_CONSUMER_IDLE`]). A tick that comes while the consumer's own read is filling a
//!   batch is put off until that batch is handled, so a consumer never takes over the entries
//!   it is reading itself. Entries keep
//!   their stream id (the [`Event::id`], e.g. `1732900000000-0`) however often they are
//!   delivered;
//! - on the same tick publishes the group's backlog (`XINFO GROUPS`: `lag`, entries not yet
//!   read by the group, plus `pending`, read but not acknowledged) as `event_consumer_lag`.
//!
//! Delivery is at-least-once per group: an entry whose consumer died after its handler committed
//! but before `XACK` is delivered again (with the same id) to another consumer. On stop the
//! consumer unblocks its read (`CLIENT UNBLOCK`), handles and acknowledges the batch in hand,
//! leaves its group if it holds no pending entries (so restarts do not pile up consumer names),
//! and returns; entries not yet read stay in the stream for the next consumer — that is the
//! durability Redis gives. Redis being down or restarted empty is survived: the consumer
//! reconnects with a growing pause and recreates its group (from the stream's start, so entries
//! added to an emptied Redis meanwhile are still seen). A group more than `max_len` entries behind loses the oldest ones to
//! trimming. Keep `max_wait` and handler run times well below `min_idle`, or other consumers
//! take over entries still being worked on (harmless with deduplication, but wasted work).
//!
//! **Redis down.** A publish whose `XADD` fails goes to this process's in-process queues instead
//! (logged, counted in `events_fallback_total`), so this process's consumer groups still receive
//! the event rather than it being lost while Redis is unreachable. For that, in cluster mode each
//! consumer also drains the in-process queue of its (topic, group), feeding the same handler from
//! one select loop (never concurrently). Redis down: reads are still counted via the in-process
//! fallback; bounded by the in-process queue capacity, publishers wait when it is full. Such
//! events are no more durable than in embedded mode (a crash loses them) and reach only the
//! consumers of the publishing process — once per group, as long as the process has a consumer
//! of the group: processes that do not consume the stream (`role = api`) register fallback-only
//! consumers ([`EventStream::consume_fallback`]) for the topics they publish; an event that no
//! consumer of the process takes is logged as lost and counted in `events_lost_total`, never
//! dropped silently.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::Duration,
};

use anyhow::Context;
use axum::body::Bytes;
use redis::{
    aio::MultiplexedConnection,
    streams::{StreamAutoClaimReply, StreamId, StreamInfoGroupsReply, StreamReadReply},
    AsyncConnectionConfig, RedisResult,
};
use serde::Serialize;
use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::infra::{db::now_millis, redis::Redis};

/// Counter: events published, by `topic`.
pub const EVENTS_PUBLISHED_TOTAL: &str = "events_published_total";
/// Counter: events handled, by `topic` and `group`.
pub const EVENTS_CONSUMED_TOTAL: &str = "events_consumed_total";
/// Histogram: events per handled batch, by `topic` and `group`.
pub const EVENT_BATCH_SIZE: &str = "event_batch_size";
/// Gauge: events of a group not yet handled, by `topic` and `group`. Redis: the group's unread
/// entries (`lag`) plus its pending ones, refreshed every reclaim tick; in-process: the queue
/// length after each batch.
pub const EVENT_CONSUMER_LAG: &str = "event_consumer_lag";
/// Counter: events published to the in-process queues because Redis was unavailable, by `topic`.
pub const EVENTS_FALLBACK_TOTAL: &str = "events_fallback_total";
/// Counter: events Redis refused that no consumer of the process could take either, by `topic`.
pub const EVENTS_LOST_TOTAL: &str = "events_lost_total";

/// What a consumer of a (topic, group) takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subscription {
    /// Everything published to the topic: the stream, and the events this process published
    /// to its in-process queue while Redis refused them.
    Stream,
    /// Only the events this process published to its in-process queue while Redis refused
    /// them: for processes that do not consume the stream (`role = api`).
    FallbackOnly,
}

/// Events a (topic, group) queue holds before publishers wait.
const QUEUE_CAPACITY: usize = 10_000;
/// Longest pause between retries of a failing batch (and between failed Redis reads).
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(5_000);
/// First pause after a failed batch or Redis read.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Default [`RedisStreamOptions::max_len`]: entries kept per topic stream (approximately).
pub const DEFAULT_STREAM_MAX_LEN: usize = 1_000_000;
/// Default [`RedisStreamOptions::min_idle`]: how long an entry stays pending with its consumer
/// before another consumer may take it over. Short, so the reads a killed instance held are
/// counted within seconds; a batch handled for longer than this is taken over while still being
/// worked on, which costs only duplicate work (handlers deduplicate by event id).
pub const DEFAULT_MIN_IDLE: Duration = Duration::from_secs(3);
/// Default [`RedisStreamOptions::reclaim_interval`].
pub const DEFAULT_RECLAIM_INTERVAL: Duration = Duration::from_secs(1);
/// A consumer of a group that holds no pending entries and has not read for this long is
/// removed from the group by the others (it died without leaving; a live one reads every
/// [`READ_BLOCK`] at most).
pub const DEAD_CONSUMER_IDLE: Duration = Duration::from_secs(60);

/// How long an idle `XREADGROUP` blocks waiting for the first entry of a batch. Only a
/// round-trip budget: stopping unblocks it at once (`CLIENT UNBLOCK`).
const READ_BLOCK: Duration = Duration::from_secs(5);
/// Connect timeout of a consumer's reading connection, and the margin its response timeout
/// allows beyond the `BLOCK` time.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a stopping consumer waits for its in-flight read to end after unblocking it; after
/// that the read is dropped (whatever it took stays pending and is reclaimed by another consumer).
const STOP_GRACE: Duration = Duration::from_secs(1);

/// One event.
#[derive(Debug, Clone)]
pub struct Event {
    /// Unique id of this delivery unit, the same every time it is delivered again: the stream
    /// entry id in Redis (e.g. `1732900000000-0`), `local-{process}-{n}` in-process (and for
    /// events that fell back to the in-process queues while Redis was down). Unique per topic.
    pub id: String,
    /// What happened, e.g. `article_published`.
    pub topic: String,
    /// The object it happened to (ordering and partitioning key), e.g. the article id.
    pub key: String,
    /// JSON payload.
    pub payload: Bytes,
    /// When it was published (ms).
    pub time: i64,
}

/// Settings of the Redis Streams backend; [`Default`] gives the production values.
#[derive(Debug, Clone)]
pub struct RedisStreamOptions {
    /// Entries kept per topic stream, approximately (`XADD … MAXLEN ~`); a group further behind
    /// than this loses the oldest entries.
    pub max_len: usize,
    /// How long an entry must have been pending with its consumer (read, not acknowledged)
    /// before another consumer takes it over. Longer than any batch takes to handle.
    pub min_idle: Duration,
    /// How often each consumer looks for such entries and reports its group's lag.
    pub reclaim_interval: Duration,
}

impl Default for RedisStreamOptions {
    fn default() -> Self {
        Self {
            max_len: DEFAULT_STREAM_MAX_LEN,
            min_idle: DEFAULT_MIN_IDLE,
            reclaim_interval: DEFAULT_RECLAIM_INTERVAL,
        }
    }
}

/// The Redis key of `topic`'s stream under `redis_prefix`.
pub fn stream_key(redis_prefix: &str, topic: &str) -> String {
    format!("{redis_prefix}:stream:{topic}")
}

/// Publisher and consumer registry; cheap to clone.
#[derive(Clone)]
pub struct EventStream {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    InProcess(InProcess),
    Redis(Arc<RedisBackend>),
}

impl Default for EventStream {
    fn default() -> Self {
        Self::in_process()
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.backend {
            Backend::InProcess(_) => f.write_str("EventStream(in-process)"),
            Backend::Redis(_) => f.write_str("EventStream(redis)"),
        }
    }
}

impl EventStream {
    /// An in-process stream.
    pub fn in_process() -> Self {
        Self {
            backend: Backend::InProcess(InProcess::default()),
        }
    }

    /// A Redis Streams stream (cluster mode): publishes and acknowledges through `redis`, reads
    /// on connections of its own opened from `redis_url` (the URL `redis` was connected to), and
    /// keeps its streams under `redis_prefix`. Fails only if `redis_url` is not a valid URL.
    pub fn redis(
        redis: Redis,
        redis_url: &str,
        redis_prefix: &str,
        options: RedisStreamOptions,
    ) -> anyhow::Result<Self> {
        let client = redis::Client::open(redis_url).with_context(|| {
            format!(
                "invalid redis_url (WEBOOK_REDIS_URL) {}",
                crate::infra::redact_url(redis_url)
            )
        })?;
        Ok(Self {
            backend: Backend::Redis(Arc::new(RedisBackend {
                redis,
                client,
                prefix: redis_prefix.to_owned(),
                options,
                local: InProcess::default(),
            })),
        })
    }

    /// Publishes `payload` (serialised as JSON) on `topic` under `key` to every consumer group.
    /// In-process it waits while a group's queue is full; with Redis it is one `XADD`, or, when
    /// that fails, the in-process queues of this process (see the module docs).
    pub async fn publish(
        &self,
        topic: &str,
        key: &str,
        payload: &impl Serialize,
    ) -> anyhow::Result<()> {
        let payload = Bytes::from(serde_json::to_vec(payload).context("serialising an event")?);
        let time = now_millis();
        match &self.backend {
            Backend::InProcess(local) => local.publish(topic, key, payload, time).await,
            Backend::Redis(backend) => backend.publish(topic, key, payload, time).await,
        }
        metrics::counter!(EVENTS_PUBLISHED_TOTAL, "topic" => topic.to_owned()).increment(1);
        Ok(())
    }

    /// [`EventStream::consume`] for [`Subscription::Stream`], else
    /// [`EventStream::consume_fallback`].
    #[allow(clippy::too_many_arguments)]
    pub fn subscribe<H, Fut>(
        &self,
        subscription: Subscription,
        topic: &str,
        group: &str,
        batch_size: usize,
        max_wait: Duration,
        stop: CancellationToken,
        handler: H,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>
    where
        H: FnMut(Vec<Event>) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        match subscription {
            Subscription::Stream => {
                Box::pin(self.consume(topic, group, batch_size, max_wait, stop, handler))
            }
            Subscription::FallbackOnly => {
                Box::pin(self.consume_fallback(topic, group, batch_size, max_wait, stop, handler))
            }
        }
    }

    /// Like [`EventStream::consume`], but with Redis only the events that fell back to this
    /// process's in-process queue (a Redis publish failed), not the stream: for processes that
    /// do not consume the stream (`role = api`) but must not drop the events they publish while
    /// Redis refuses them. In-process streams consume normally.
    pub fn consume_fallback<H, Fut>(
        &self,
        topic: &str,
        group: &str,
        batch_size: usize,
        max_wait: Duration,
        stop: CancellationToken,
        handler: H,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        H: FnMut(Vec<Event>) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send,
    {
        let local = match &self.backend {
            Backend::InProcess(local) => local.register(topic, group),
            Backend::Redis(backend) => backend.local.register(topic, group),
        };
        let consumer = Consumer {
            topic: topic.to_owned(),
            group: group.to_owned(),
            batch_size: batch_size.max(1),
            max_wait,
            stop,
        };
        async move { consumer.run_in_process(local, handler).await }
    }

    /// Registers consumer group `group` on `topic` and returns the future that runs it until
    /// `stop` is cancelled (then finishes what it holds — see the module docs). `handler` gets
    /// batches of at most `batch_size` events, collected for at most `max_wait` after the first,
    /// one batch at a time.
    pub fn consume<H, Fut>(
        &self,
        topic: &str,
        group: &str,
        batch_size: usize,
        max_wait: Duration,
        stop: CancellationToken,
        handler: H,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        H: FnMut(Vec<Event>) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send,
    {
        let batch_size = batch_size.max(1);
        let (local, redis) = match &self.backend {
            Backend::InProcess(local) => (local.register(topic, group), None),
            Backend::Redis(backend) => (backend.local.register(topic, group), Some(backend)),
        };
        let redis = redis.map(|backend| {
            let consumer = RedisConsumer {
                connection: backend.redis.connection(),
                key: stream_key(&backend.prefix, topic),
                name: consumer_name(),
                options: backend.options.clone(),
            };
            let reader = Reader {
                client: backend.client.clone(),
                connection: None,
                client_id: Arc::new(AtomicI64::new(0)),
                holding: Arc::default(),
                key: consumer.key.clone(),
                group: group.to_owned(),
                name: consumer.name.clone(),
                batch_size,
                max_wait,
                stop: stop.clone(),
                pause: FIRST_RETRY_PAUSE,
            };
            (consumer, reader)
        });
        let consumer = Consumer {
            topic: topic.to_owned(),
            group: group.to_owned(),
            batch_size,
            max_wait,
            stop,
        };
        async move {
            match redis {
                None => consumer.run_in_process(local, handler).await,
                Some((redis, reader)) => consumer.run_redis(redis, reader, local, handler).await,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// In-process queues
// ---------------------------------------------------------------------------------------------

/// For each topic, the queue of each consumer group: (group name, its queue).
type GroupQueues = HashMap<String, Vec<(String, mpsc::Sender<Event>)>>;

/// The in-process queues: the whole backend in embedded mode, the fallback in cluster mode.
#[derive(Clone, Default)]
struct InProcess {
    groups: Arc<Mutex<GroupQueues>>,
}

impl InProcess {
    /// Creates (or replaces) the queue of (`topic`, `group`) and returns its receiving end.
    fn register(&self, topic: &str, group: &str) -> mpsc::Receiver<Event> {
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

    /// Queues the event for every group of `topic`, waiting while a queue is full.
    async fn publish(&self, topic: &str, key: &str, payload: Bytes, time: i64) {
        let event = Event {
            id: next_local_id(),
            topic: topic.to_owned(),
            key: key.to_owned(),
            payload,
            time,
        };
        for sender in self.senders(topic) {
            // Waits when the group's queue is full (backpressure); fails only if it stopped.
            if sender.send(event.clone()).await.is_err() {
                tracing::warn!(topic, "event consumer stopped; event not delivered to it");
            }
        }
    }
}

/// `local-{process}-{n}`: `n` counts events in this process; `process` is random per process, so
/// ids recorded by consumers are not reused after a restart.
fn next_local_id() -> String {
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
struct Consumer {
    topic: String,
    group: String,
    batch_size: usize,
    max_wait: Duration,
    stop: CancellationToken,
}

impl Consumer {
    /// The embedded-mode loop: batches from the in-process queue until stopped, then flushes.
    async fn run_in_process<H, Fut>(self, mut queue: mpsc::Receiver<Event>, mut handler: H)
    where
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
    async fn handle_local<H, Fut>(
        &self,
        first: Event,
        queue: &mut mpsc::Receiver<Event>,
        handler: &mut H,
    ) where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let mut batch = vec![first];
        let deadline = Instant::now() + self.max_wait;
        while batch.len() < self.batch_size {
            tokio::select! {
                event = queue.recv() => match event {
                    Some(event) => batch.push(event),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
                () = self.stop.cancelled() => break,
            }
        }
        self.deliver_local(handler, batch).await;
        metrics::gauge!(EVENT_CONSUMER_LAG, "topic" => self.topic.clone(), "group" => self.group.clone())
            .set(queue.len() as f64);
    }

    /// Shutdown: stops accepting, then delivers everything still queued.
    async fn flush_local<H, Fut>(&self, mut queue: mpsc::Receiver<Event>, handler: &mut H)
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        queue.close();
        let mut rest = Vec::new();
        while let Some(event) = queue.recv().await {
            rest.push(event);
        }
        for batch in rest.chunks(self.batch_size) {
            self.deliver_local(handler, batch.to_vec()).await;
        }
    }

    async fn deliver_local<H, Fut>(&self, handler: &mut H, batch: Vec<Event>)
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let size = batch.len();
        if !self.deliver(handler, batch).await {
            tracing::error!(
                topic = self.topic,
                group = self.group,
                lost = size,
                "event batch failed during shutdown; its events are lost"
            );
        }
    }

    /// Hands `batch` to `handler`, retrying with a growing pause while it fails. After `stop`,
    /// one last attempt is made; returns whether the handler succeeded.
    async fn deliver<H, Fut>(&self, handler: &mut H, batch: Vec<Event>) -> bool
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

// ---------------------------------------------------------------------------------------------
// Redis Streams
// ---------------------------------------------------------------------------------------------

/// The cluster-mode backend; the in-process queues are its fallback while Redis is down.
struct RedisBackend {
    redis: Redis,
    client: redis::Client,
    prefix: String,
    options: RedisStreamOptions,
    local: InProcess,
}

impl RedisBackend {
    /// `XADD`s the event, or queues it in-process when Redis cannot take it.
    async fn publish(&self, topic: &str, key: &str, payload: Bytes, time: i64) {
        let mut connection = self.redis.connection();
        let added: RedisResult<String> = redis::cmd("XADD")
            .arg(stream_key(&self.prefix, topic))
            .arg("MAXLEN")
            .arg("~")
            .arg(self.options.max_len)
            .arg("*")
            .arg("k")
            .arg(key)
            .arg("t")
            .arg(time)
            .arg("p")
            .arg(payload.as_ref())
            .query_async(&mut connection)
            .await;
        if let Err(err) = added {
            if self.local.senders(topic).is_empty() {
                // Nothing in this process would receive it (every topic this build consumes
                // has a consumer in every process, `Subscription`): say so, never silently.
                tracing::warn!(
                    topic,
                    key,
                    error = format!("{err:#}"),
                    "cannot publish to redis and no consumer of this process takes the topic; \
                     event lost"
                );
                metrics::counter!(EVENTS_LOST_TOTAL, "topic" => topic.to_owned()).increment(1);
                return;
            }
            tracing::warn!(
                topic,
                key,
                error = format!("{err:#}"),
                "cannot publish to redis; delivering the event to this process's consumers"
            );
            metrics::counter!(EVENTS_FALLBACK_TOTAL, "topic" => topic.to_owned()).increment(1);
            self.local.publish(topic, key, payload, time).await;
        }
    }
}

/// The non-blocking side of one Redis consumer (acknowledging, reclaiming, reporting), on the
/// shared connection.
struct RedisConsumer {
    connection: crate::infra::redis::RedisConnection,
    key: String,
    /// This consumer's name in its group.
    name: String,
    options: RedisStreamOptions,
}

/// `host-pid-random`: unique per process and `consume` call, and says where it runs.
fn consumer_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    let mut random = uuid::Uuid::new_v4().simple().to_string();
    random.truncate(8);
    format!("{host}-{}-{random}", std::process::id())
}

/// Creates `group` on the stream at `key` (and the stream) unless it exists.
async fn ensure_group(
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
use crate::infra::redis::is_connection_error;

/// The event in a stream entry written by [`RedisBackend::publish`]; `None` if it is malformed.
fn entry_event(topic: &str, mut entry: StreamId) -> Option<Event> {
    let key: String = redis::from_redis_value(entry.map.remove("k")?).ok()?;
    let time: i64 = redis::from_redis_value(entry.map.remove("t")?).ok()?;
    let payload: Vec<u8> = redis::from_redis_value(entry.map.remove("p")?).ok()?;
    Some(Event {
        id: entry.id,
        topic: topic.to_owned(),
        key,
        payload: Bytes::from(payload),
        time,
    })
}

impl RedisConsumer {
    /// `XACK`s `ids`. A failure leaves them pending: they are delivered again after `min_idle`.
    async fn ack(&self, group: &str, ids: &[String]) {
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
    async fn report_lag(&self, topic: &str, group: &str) {
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
    async fn remove_dead_consumers(&self, group: &str) {
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
    async fn leave(&self, group: &str) {
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
struct Reader {
    client: redis::Client,
    connection: Option<MultiplexedConnection>,
    /// `CLIENT ID` of `connection` (0: none), for `CLIENT UNBLOCK` when stopping.
    client_id: Arc<AtomicI64>,
    /// Whether a read has entries in hand and is still filling its batch (up to `max_wait`):
    /// they are pending on this consumer, and the consumer must not reclaim them meanwhile.
    holding: Arc<AtomicBool>,
    key: String,
    group: String,
    name: String,
    batch_size: usize,
    max_wait: Duration,
    stop: CancellationToken,
    /// Pause after the next failed read.
    pause: Duration,
}

impl Reader {
    /// The next batch of new entries: up to `batch_size`, read for at most `max_wait` after the
    /// first; empty when none came within [`READ_BLOCK`], after `stop`, or after a failure
    /// (logged, then a growing pause that `stop` cuts short, then a fresh connection).
    async fn next(mut self) -> (Self, Vec<StreamId>) {
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

    async fn read(&mut self) -> RedisResult<Vec<StreamId>> {
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
    async fn read_group(
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
    async fn connect(&mut self) -> RedisResult<MultiplexedConnection> {
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

    fn disconnect(&mut self) {
        self.connection = None;
        self.client_id.store(0, Ordering::SeqCst);
    }
}

impl Consumer {
    /// The cluster-mode loop: one select over stop, the reclaim tick, the in-process fallback
    /// queue and the in-flight Redis read, so the handler only ever runs for one batch at a time.
    async fn run_redis<H, Fut>(
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
    async fn finish_read<F>(
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
    async fn handle_entries<H, Fut>(
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
        let mut events = Vec::with_capacity(entries.len());
        for entry in entries {
            let id = entry.id.clone();
            match entry_event(&self.topic, entry) {
                Some(event) => events.push(event),
                None => tracing::warn!(
                    key = redis.key,
                    id,
                    "malformed stream entry; acknowledged without handling"
                ),
            }
        }
        let size = events.len();
        if !events.is_empty() && !self.deliver(handler, events).await {
            tracing::warn!(
                topic = self.topic,
                group = self.group,
                size,
                "event batch not handled before stop; left pending for another consumer"
            );
            return;
        }
        redis.ack(&self.group, &ids).await;
    }

    /// Takes over entries pending longer than `min_idle` (`XAUTOCLAIM`, from any consumer of
    /// the group, this one included), handles them, then reports the group's lag.
    async fn reclaim<H, Fut>(&self, redis: &RedisConsumer, handler: &mut H)
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

    #[tokio::test(start_paused = true)]
    async fn ids_are_unique_and_kept_across_retries() {
        let stream = EventStream::in_process();
        let stop = CancellationToken::new();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut attempts = 0;
        tokio::spawn(stream.consume(
            "t",
            "g",
            10,
            Duration::from_millis(10),
            stop.clone(),
            move |events: Vec<Event>| {
                attempts += 1;
                tx.send(
                    events
                        .iter()
                        .map(|event| event.id.clone())
                        .collect::<Vec<_>>(),
                )
                .unwrap();
                let fail = attempts == 1;
                async move {
                    anyhow::ensure!(!fail, "first attempt fails");
                    Ok(())
                }
            },
        ));
        stream.publish("t", "a", &1).await.unwrap();
        stream.publish("t", "b", &2).await.unwrap();
        let first = rx.recv().await.unwrap();
        let retry = rx.recv().await.unwrap();
        assert_eq!(first, retry, "a retried batch keeps its ids");
        assert_eq!(first.len(), 2);
        assert_ne!(first[0], first[1]);
        assert!(first.iter().all(|id| id.starts_with("local-")), "{first:?}");
        stop.cancel();
    }
}
