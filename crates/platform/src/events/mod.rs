//! The event stream: `publish(topic, key, payload)` on one side, consumer groups that receive
//! events in batches on the other. One type, [`EventStream`], with two backends
//! behind the same API; every event carries an [`Event::id`] that stays the same when the event
//! is delivered again, so consumers that must not count twice can deduplicate.
//!
//! Events that report a committed write do not call `publish` themselves: they are recorded in
//! the write's transaction and relayed by the [`outbox`], so none is lost between the commit and
//! the publish; consumers that must apply each once use [`dedup`].
//!
//! Traced ([`crate::tracing_otlp`]): a publish (or outbox insert) is a producer span whose
//! `traceparent` the event carries — in the outbox row, the stream entry (field `tp`), the
//! in-process queue — and each batch a group handles runs in a consumer span continuing it.
//!
//! Layout: this file is the API (types, [`EventStream`], settings, metric names); `in_process`
//! holds the in-process queues and their consumer loop, `redis_streams` the Redis backend,
//! [`outbox`] the transactional outbox and its relay, [`dedup`] the applied-event ids.
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
//! `{prefix}:stream:{topic}` ([`stream_key`]); a published event is `XADD key MAXLEN ~ max_len * k
//! <key> t <time> p <payload>`, sent by one publisher task per process in pipelines of whatever
//! has been published meanwhile; `publish` returns once its event's pipeline is in (so under
//! load concurrent publishers share one round trip, and a returned publish is in Redis as
//! before). Events whose publisher went away first are still sent; a graceful stop waits for
//! them ([`EventStream::flush`]). Each group is a Redis consumer group on that stream, created from the
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
    future::Future,
    sync::{atomic::AtomicI64, Arc},
    time::Duration,
};

use anyhow::Context;
use axum::body::Bytes;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::{db::now_millis, redis::Redis};

/// Counter: events published, by `topic`.
pub const EVENTS_PUBLISHED_TOTAL: &str = "events_published_total";
/// Counts one event published on `topic` in [`EVENTS_PUBLISHED_TOTAL`]. Each thread keeps the
/// handles of the topics it has published on (a handful, named by the features): a publish — one
/// per article read — neither allocates the label nor searches the registry.
pub(crate) fn count_published(topic: &str) {
    thread_local! {
        static PUBLISHED: std::cell::RefCell<std::collections::HashMap<String, metrics::Counter>> =
            std::cell::RefCell::default();
    }
    PUBLISHED.with_borrow_mut(|by_topic| match by_topic.get(topic) {
        Some(counter) => counter.increment(1),
        None => {
            let counter = metrics::counter!(EVENTS_PUBLISHED_TOTAL, "topic" => topic.to_owned());
            counter.increment(1);
            by_topic.insert(topic.to_owned(), counter);
        }
    });
}

/// Counter: events handled, by `topic` and `group`.
pub const EVENTS_CONSUMED_TOTAL: &str = "events_consumed_total";
/// Histogram: events per handled batch, by `topic` and `group`.
pub const EVENT_BATCH_SIZE: &str = "event_batch_size";
/// Histogram: seconds per call of a group's handler (a batch, or one event of a failing batch
/// retried alone), by `topic` and `group`. The rate of its `_sum` is the share of time the
/// consumer is busy: near 1, the group is what limits its topic.
pub const EVENT_BATCH_DURATION_SECONDS: &str = "event_batch_duration_seconds";
/// Counter: in-process publishes that found a consumer group's queue full and waited for room
/// (backpressure: the group is slower than its publishers), by `topic`.
pub const EVENTS_PUBLISH_WAITS_TOTAL: &str = "events_publish_waits_total";
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

/// Events a (topic, group) queue holds before publishers wait (or the group's batch size, when
/// larger: a consumer that fell behind takes a whole batch at once).
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
    /// The W3C `traceparent` of the span that published it (recorded it, for the outbox), when
    /// traces are exported: the consumer's span continues that trace ([`crate::tracing_otlp`]).
    pub traceparent: Option<String>,
}

impl Event {
    /// The payload as `T`; an error (permanent: [`failure::classify`] finds the
    /// `serde_json::Error`) when it does not decode — the event is parked, not skipped.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> anyhow::Result<T> {
        serde_json::from_slice(&self.payload).with_context(|| {
            format!(
                "the payload of event {} ({}) does not decode",
                self.id, self.topic
            )
        })
    }

    /// The payload as `T`, or `None` when it is malformed — logged with the event's id and
    /// topic, and for the consumer to skip: retrying cannot fix it.
    pub fn payload_as<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        match serde_json::from_slice(&self.payload) {
            Ok(payload) => Some(payload),
            Err(err) => {
                tracing::warn!(id = %self.id, topic = %self.topic, %err, "skipping a malformed event");
                None
            }
        }
    }
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
    shared: Arc<Shared>,
}

/// What every clone of a stream shares beside its backend.
#[derive(Default)]
struct Shared {
    /// The database of the outbox and the dead-letter store, once an outbox was made for the
    /// stream ([`outbox::Outbox::new`]).
    store: std::sync::OnceLock<crate::db::Db>,
    /// Every consumer group of this process, as registered.
    groups: std::sync::Mutex<Vec<Arc<GroupHealth>>>,
    policy: std::sync::Mutex<DeliveryPolicy>,
    /// Faults injected into handlers (tests), and whether there are any (the hot path's look).
    faults: std::sync::Mutex<Vec<delivery::InjectedFault>>,
    has_faults: std::sync::atomic::AtomicBool,
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
    /// Whether an event of `topic` published now can reach a consumer: always with Redis (the
    /// stream keeps it for groups created later, in any process); in-process only when a group
    /// of this process consumes the topic (else it would be dropped on arrival).
    pub fn is_consumed(&self, topic: &str) -> bool {
        match &self.backend {
            Backend::InProcess(local) => local.has_groups(topic),
            Backend::Redis(_) => true,
        }
    }

    /// An in-process stream.
    pub fn in_process() -> Self {
        Self {
            backend: Backend::InProcess(InProcess::default()),
            shared: Arc::default(),
        }
    }

    /// Gives the stream its database: where consumers park what they give up on and, in
    /// embedded mode, the outbox each group reads. [`outbox::Outbox::new`] calls it; groups
    /// registered before have neither.
    pub fn attach_store(&self, db: crate::db::Db) {
        let _ = self.shared.store.set(db);
    }

    /// Replaces the delivery policy for the groups registered from now on (tests shorten it).
    pub fn set_policy(&self, policy: DeliveryPolicy) {
        *self
            .shared
            .policy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = policy;
    }

    fn policy(&self) -> DeliveryPolicy {
        self.shared
            .policy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the faults injected into this process's handlers (`/debug/event-faults`).
    pub fn set_faults(&self, faults: Vec<delivery::InjectedFault>) {
        let mut current = self
            .shared
            .faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.shared
            .has_faults
            .store(!faults.is_empty(), std::sync::atomic::Ordering::Release);
        *current = faults;
    }

    /// The faults injected now.
    pub fn faults(&self) -> Vec<delivery::InjectedFault> {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Every consumer group of this process as it is now.
    pub fn groups(&self) -> Vec<GroupStatus> {
        let policy = self.policy();
        let mut groups: Vec<GroupStatus> = self
            .group_healths()
            .iter()
            .map(|health| health.status(&policy))
            .collect();
        groups.sort_by(|a, b| (&a.group, &a.topic).cmp(&(&b.group, &b.topic)));
        groups
    }

    fn group_healths(&self) -> Vec<Arc<GroupHealth>> {
        self.shared
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Registers `health`, replacing a group of the same topic and name.
    fn add_group(&self, health: Arc<GroupHealth>) {
        let mut groups = self
            .shared
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        groups.retain(|known| !(known.topic == health.topic && known.group == health.group));
        groups.push(health);
    }

    /// Until `stop`: every second sets each group's [`delivery::EVENT_GROUP_LAG_SECONDS`] and
    /// the `events` line of `status` (`ok`, or `degraded: …` naming the stuck groups and those
    /// with parked events); every [`PARKED_REFRESH`] reads the open parked events per group from
    /// the store ([`delivery::EVENTS_PARKED`]).
    pub async fn monitor(self, status: crate::status::StatusBoard, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut parked_read = None::<tokio::time::Instant>;
        loop {
            tokio::select! {
                _ = ticks.tick() => {},
                () = stop.cancelled() => return,
            }
            let healths = self.group_healths();
            let due = parked_read.is_none_or(|at| at.elapsed() >= PARKED_REFRESH);
            if let (true, Some(store)) = (due, self.shared.store.get()) {
                parked_read = Some(tokio::time::Instant::now());
                if let Ok(counts) = parked::open_counts(store).await {
                    for health in &healths {
                        let open = counts
                            .iter()
                            .find(|(topic, group, _)| {
                                *topic == health.topic && *group == health.group
                            })
                            .map_or(0, |(_, _, open)| *open);
                        health
                            .open_parked
                            .store(open, std::sync::atomic::Ordering::Release);
                    }
                }
            }
            let statuses = self.groups();
            let mut problems = Vec::new();
            for group in &statuses {
                metrics::gauge!(delivery::EVENT_GROUP_LAG_SECONDS, "topic" => group.topic.clone(), "group" => group.group.clone())
                    .set(group.lag_seconds);
                if let Some(open) = group.open_parked {
                    metrics::gauge!(delivery::EVENTS_PARKED, "topic" => group.topic.clone(), "group" => group.group.clone())
                        .set(open as f64);
                }
                if group.stuck {
                    problems.push(format!(
                        "{}/{} stuck {:.0}s ({})",
                        group.group,
                        group.topic,
                        group.failing_seconds,
                        group.last_error.as_deref().unwrap_or("failing")
                    ));
                }
                if let Some(open) = group.open_parked.filter(|open| *open > 0) {
                    problems.push(format!("{}/{} {open} parked", group.group, group.topic));
                }
            }
            status.set(
                "events",
                if problems.is_empty() {
                    "ok".to_owned()
                } else {
                    format!("degraded: {}", problems.join("; "))
                },
            );
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
                crate::redact_url(redis_url)
            )
        })?;
        Ok(Self {
            shared: Arc::default(),
            backend: Backend::Redis(Arc::new(RedisBackend {
                redis,
                client,
                prefix: redis_prefix.to_owned(),
                options,
                local: InProcess::default(),
                publisher: redis_streams::Publisher::default(),
            })),
        })
    }

    /// Publishes `payload` (serialised as JSON) on `topic` under `key` to every consumer group.
    /// In-process it waits while a group's queue is full; with Redis it hands the event to a
    /// buffer that one task `XADD`s in pipelines (or, when Redis refuses them, delivers to the
    /// in-process queues of this process; see the module docs) and waits until its pipeline is
    /// done.
    pub async fn publish(
        &self,
        topic: &str,
        key: &str,
        payload: &impl Serialize,
    ) -> anyhow::Result<()> {
        let payload = Bytes::from(serde_json::to_vec(payload).context("serialising an event")?);
        let time = now_millis();
        let span = crate::tracing_otlp::producer_span(topic, 1);
        let traceparent = crate::tracing_otlp::traceparent_of(&span);
        let published = async {
            match &self.backend {
                Backend::InProcess(local) => {
                    local.publish(topic, key, payload, time, traceparent).await;
                }
                Backend::Redis(backend) => {
                    backend
                        .publish(topic, key, payload, time, traceparent)
                        .await;
                }
            }
        };
        tracing::Instrument::instrument(published, span).await;
        count_published(topic);
        Ok(())
    }

    /// Waits until the events published so far have left this process's publish buffer (Redis:
    /// added to the stream or delivered to the in-process fallback; in-process there is no
    /// buffer), including those whose publisher stopped waiting. Graceful shutdown calls it
    /// before stopping the consumers.
    pub async fn flush(&self) {
        if let Backend::Redis(backend) = &self.backend {
            backend.flush().await;
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
        self.subscribe(
            Subscription::FallbackOnly,
            topic,
            group,
            batch_size,
            max_wait,
            stop,
            handler,
        )
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
        self.subscribe(
            Subscription::Stream,
            topic,
            group,
            batch_size,
            max_wait,
            stop,
            handler,
        )
    }

    /// [`EventStream::consume`] for [`Subscription::Stream`], else
    /// [`EventStream::consume_fallback`]: the in-process queue of (`topic`, `group`) always,
    /// the Redis stream only for [`Subscription::Stream`].
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
    ) -> impl Future<Output = ()> + Send + 'static
    where
        H: FnMut(Vec<Event>) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send,
    {
        let batch_size = batch_size.max(1);
        let (local, redis, outbox) = match &self.backend {
            Backend::InProcess(local) => (
                local.register(topic, group, batch_size),
                None,
                Some(local.watch_head(topic)),
            ),
            Backend::Redis(backend) => (
                backend.local.register(topic, group, batch_size),
                (subscription == Subscription::Stream).then_some(backend),
                None,
            ),
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
        let health = Arc::new(GroupHealth::new(topic, group));
        self.add_group(health.clone());
        let consumer = Consumer {
            topic: topic.to_owned(),
            group: group.to_owned(),
            batch_size,
            max_wait,
            stop,
            health,
            shared: self.shared.clone(),
            policy: self.policy(),
        };
        async move {
            match redis {
                None => consumer.run_in_process(local, outbox, handler).await,
                Some((redis, reader)) => consumer.run_redis(redis, reader, local, handler).await,
            }
        }
    }
}

/// How often [`EventStream::monitor`] reads the open parked events from the store.
const PARKED_REFRESH: Duration = Duration::from_secs(5);

pub mod dedup;
pub mod delivery;
pub mod failure;
pub mod follow;
mod in_process;
pub mod outbox;
mod outbox_row;
pub mod parked;
mod redis_streams;

use delivery::Consumer;
use delivery::GroupHealth;
pub use delivery::{DeliveryPolicy, GroupStatus};
use in_process::InProcess;
use redis_streams::{consumer_name, Reader, RedisBackend, RedisConsumer};

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    #[tokio::test]
    async fn every_publish_is_counted_under_its_topic() {
        let metrics = crate::telemetry::metrics_handle().unwrap();
        let events = EventStream::in_process();
        // The first publish of a topic on a thread takes its handle, the later ones reuse it;
        // a second topic gets a series of its own.
        for _ in 0..3 {
            events.publish("count-test-a", "1", &1).await.unwrap();
        }
        events.publish("count-test-b", "1", &1).await.unwrap();
        // And from another thread, which keeps handles of its own.
        let other = events.clone();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(other.publish("count-test-a", "2", &2))
        })
        .join()
        .unwrap()
        .unwrap();
        let rendered = metrics.render();
        let count = |topic: &str| {
            let series = format!("{EVENTS_PUBLISHED_TOTAL}{{topic=\"{topic}\"}} ");
            rendered
                .lines()
                .find_map(|line| line.strip_prefix(&series)?.parse::<u64>().ok())
        };
        assert_eq!(count("count-test-a"), Some(4), "{rendered}");
        assert_eq!(count("count-test-b"), Some(1), "{rendered}");
    }

    #[tokio::test]
    async fn a_publish_that_finds_a_full_queue_waits_and_is_counted_and_the_queue_holds_a_batch() {
        let metrics = crate::telemetry::metrics_handle().unwrap();
        let waits = || {
            let series = format!("{EVENTS_PUBLISH_WAITS_TOTAL}{{topic=\"waits-test\"}} ");
            metrics
                .render()
                .lines()
                .find_map(|line| line.strip_prefix(&series)?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let stream = EventStream::in_process();
        let stop = CancellationToken::new();
        let (entered, mut handling) = mpsc::unbounded_channel();
        let release = Arc::new(tokio::sync::Notify::new());
        let batch = QUEUE_CAPACITY + 500;
        let consumer = tokio::spawn(stream.consume(
            "waits-test",
            "g",
            batch,
            Duration::from_millis(1),
            stop.clone(),
            {
                let release = release.clone();
                move |events| {
                    let (entered, release) = (entered.clone(), release.clone());
                    async move {
                        entered.send(events.len()).unwrap();
                        release.notified().await;
                        Ok(())
                    }
                }
            },
        ));
        // The first batch holds the handler; then a whole batch fits in the queue (larger than
        // the default capacity) without a publisher waiting.
        stream.publish("waits-test", "0", &0).await.unwrap();
        assert_eq!(handling.recv().await, Some(1));
        let fill = async {
            for i in 0..batch {
                stream
                    .publish("waits-test", &i.to_string(), &i)
                    .await
                    .unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(10), fill)
            .await
            .expect("a batch's worth of events fits in the queue");
        assert_eq!(waits(), 0, "no publish waited for room");
        // One more waits for room, and is counted while it waits.
        let blocked = tokio::spawn({
            let stream = stream.clone();
            async move { stream.publish("waits-test", "last", &0).await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while waits() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the wait was not counted"
            );
            tokio::task::yield_now().await;
        }
        assert!(
            !blocked.is_finished(),
            "the publish waits while the queue is full"
        );
        release.notify_one();
        assert_eq!(
            handling.recv().await,
            Some(batch),
            "the queued batch, whole"
        );
        release.notify_one();
        blocked.await.unwrap().unwrap();
        assert_eq!(handling.recv().await, Some(1), "then the one that waited");
        release.notify_one();
        assert_eq!(waits(), 1);
        stop.cancel();
        consumer.await.unwrap();
    }

    #[tokio::test]
    async fn in_process_a_topic_counts_as_consumed_once_a_group_subscribes() {
        let events = EventStream::in_process();
        assert!(!events.is_consumed("t"), "no group yet");
        let stop = CancellationToken::new();
        let consumer = events.consume(
            "t",
            "g",
            10,
            Duration::from_millis(5),
            stop.clone(),
            |_| async { Ok(()) },
        );
        assert!(
            events.is_consumed("t"),
            "registered when subscribing, before running"
        );
        assert!(!events.is_consumed("other"));
        stop.cancel();
        consumer.await;
    }
    use tokio::sync::mpsc;

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
                    // Transient: the batch is retried whole (a permanent failure would split it).
                    if fail {
                        return Err(failure::transient(anyhow::anyhow!("first attempt fails")));
                    }
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
