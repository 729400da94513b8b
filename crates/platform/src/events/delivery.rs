//! Handing a batch to a consumer group's handler so that one bad event cannot hold the group,
//! and the group cannot hold any other: the consumer group both backends' loops run
//! ([`Consumer`]: defined here, its loops in `in_process` and `redis_streams`), the one
//! algorithm they settle batches with ([`Consumer::settle`]), what it reports ([`GroupHealth`]) and how it is tuned
//! ([`DeliveryPolicy`]).
//!
//! A batch goes to the handler whole. When the handler fails:
//! - **transient** ([`super::failure`]): the whole batch again after a pause growing from 50 ms
//!   to 5 s, for as long as it takes — an outage heals, and nothing is parked for it. (Embedded
//!   mode bounds what piles up behind such a group: past [`DeliveryPolicy::max_backlog`] outbox
//!   rows the batch in hand is parked as `overflow`, replayable once the fault is gone.)
//! - **permanent** or **unclassified**: the batch is split and its events handed over one at a
//!   time, so the events that can be applied are, and the failing one is known. An event that
//!   fails permanently [`DeliveryPolicy::permanent_attempts`] times is parked (moved to the
//!   dead-letter store, [`super::parked`]); one that keeps failing unclassified is retried like a
//!   transient failure until it has failed for [`DeliveryPolicy::unclassified_park_after`] (and
//!   at least [`DeliveryPolicy::unclassified_min_attempts`] times), then parked. The group then
//!   goes on with the next event.
//! - A panic in the handler counts as a permanent failure of the events it was given.
//!
//! Order: a group applies its events in order except that a parked event is skipped, and
//! applied later, if at all, by a replay. Each group's handler says what that means for it (see
//! `docs/ARCHITECTURE.md` → Events).
//!
//! Every group keeps a [`GroupHealth`]: the publish time of the oldest event it holds (its lag
//! grows while it is stuck, though it handles nothing), since when it fails and why, and
//! counters. [`EventStream::monitor`](super::EventStream::monitor) turns them into the
//! `event_group_lag_seconds` and `events_parked` gauges and the `events` line of `/readyz`.

use std::{
    future::Future,
    panic::AssertUnwindSafe,
    sync::{
        atomic::{AtomicI64, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use futures_util::FutureExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{
    failure::{classify, permanent, Failure},
    parked::{self, FailureRecord},
    Event, Shared, FIRST_RETRY_PAUSE, MAX_RETRY_PAUSE,
};
use crate::db::{now_millis, Db};

/// Counter: handler calls that failed, by `topic`, `group` and `failure` (transient,
/// permanent, unclassified).
pub const EVENTS_FAILED_TOTAL: &str = "events_failed_total";
/// Counter: events parked, by `topic` and `group`.
pub const EVENTS_PARKED_TOTAL: &str = "events_parked_total";
/// Gauge: events parked and not yet replayed or discarded, by `topic` and `group` (from the
/// dead-letter store, refreshed every few seconds).
pub const EVENTS_PARKED: &str = "events_parked";
/// Gauge: age in seconds of the oldest event a group holds and has not yet handled (0 when it
/// holds none), by `topic` and `group`; refreshed every second, also while the group is stuck.
pub const EVENT_GROUP_LAG_SECONDS: &str = "event_group_lag_seconds";

/// How failing events are retried and when they are given up on; [`Default`] gives the
/// production values (their reasons below).
#[derive(Debug, Clone)]
pub struct DeliveryPolicy {
    /// Handler calls an event may fail permanently before it is parked: 3, so a failure that
    /// only looks permanent for a moment (a row another transaction is about to commit) gets
    /// two more chances within a few hundred milliseconds.
    pub permanent_attempts: u32,
    /// How long an event may keep failing with an unclassified error before it is parked: 10
    /// minutes — well past the 10 s after which `/readyz` and the lag gauge show the group
    /// stuck, so an operator has been told and can fix the cause first, and short enough that a
    /// bug in one handler does not hold its group for hours.
    pub unclassified_park_after: Duration,
    /// And at least this many failed calls (so a paused process is not a reason to park).
    pub unclassified_min_attempts: u32,
    /// A group failing for longer than this is reported stuck (`/readyz` details `events`).
    pub stuck_after: Duration,
    /// Embedded mode: outbox rows a failing group may fall behind by before the batch it holds
    /// is parked as `overflow` (100 000 rows, tens of MB): the bound on the outbox behind a
    /// stuck group. Redis Streams have their own (`RedisStreamOptions::max_len`).
    pub max_backlog: u64,
    /// How often a transiently failing embedded group counts the rows behind it: 30 s.
    pub backlog_check: Duration,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        Self {
            permanent_attempts: 3,
            unclassified_park_after: Duration::from_secs(600),
            unclassified_min_attempts: 10,
            stuck_after: Duration::from_secs(10),
            max_backlog: 100_000,
            backlog_check: Duration::from_secs(30),
        }
    }
}

/// One consumer group's state in this process, as its consumer loop updates it; shared with
/// [`super::EventStream::monitor`] and the operators' views.
#[derive(Debug)]
pub struct GroupHealth {
    pub(super) topic: String,
    pub(super) group: String,
    /// Publish time (ms) of the oldest event held and not yet handled; 0 when none.
    oldest_held: AtomicI64,
    /// When the current run of failures began (ms); 0 while not failing.
    failing_since: AtomicI64,
    last_failure: Mutex<Option<(Failure, String)>>,
    handled: AtomicU64,
    failed: AtomicU64,
    parked: AtomicU64,
    /// Embedded mode: the group's durable position in the outbox (-1 until loaded).
    pub(super) outbox_position: AtomicI64,
    /// Open parked events of the group (from the store; -1 unknown).
    pub(super) open_parked: AtomicI64,
    counters: Counters,
}

#[derive(Debug)]
struct Counters {
    handled: metrics::Counter,
    parked: metrics::Counter,
    batch_size: metrics::Histogram,
    batch_duration: metrics::Histogram,
}

impl GroupHealth {
    pub(super) fn new(topic: &str, group: &str) -> Self {
        let labels = [("topic", topic.to_owned()), ("group", group.to_owned())];
        Self {
            topic: topic.to_owned(),
            group: group.to_owned(),
            oldest_held: AtomicI64::new(0),
            failing_since: AtomicI64::new(0),
            last_failure: Mutex::new(None),
            handled: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            parked: AtomicU64::new(0),
            outbox_position: AtomicI64::new(-1),
            open_parked: AtomicI64::new(-1),
            counters: Counters {
                handled: metrics::counter!(super::EVENTS_CONSUMED_TOTAL, &labels),
                parked: metrics::counter!(EVENTS_PARKED_TOTAL, &labels),
                batch_size: metrics::histogram!(super::EVENT_BATCH_SIZE, &labels),
                batch_duration: metrics::histogram!(super::EVENT_BATCH_DURATION_SECONDS, &labels),
            },
        }
    }

    fn hold(&self, events: &[Event]) {
        let oldest = events.iter().map(|event| event.time).min().unwrap_or(0);
        self.oldest_held.store(oldest.max(1), Ordering::Release);
    }

    fn release(&self) {
        self.oldest_held.store(0, Ordering::Release);
    }

    fn handled(&self, count: usize) {
        self.handled.fetch_add(count as u64, Ordering::Relaxed);
        self.counters.handled.increment(count as u64);
        self.counters.batch_size.record(count as f64);
        self.failing_since.store(0, Ordering::Release);
    }

    /// A handler call failed: counted and remembered, and the group's run of failures begins
    /// (if it had not).
    fn failed(&self, failure: Failure, err: &anyhow::Error) {
        self.count_failure(failure, format!("{err:#}"));
        let _ = self.failing_since.compare_exchange(
            0,
            now_millis(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Counts a failed call in this process and in `events_failed_total`, and keeps its text.
    fn count_failure(&self, failure: Failure, text: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(EVENTS_FAILED_TOTAL, "topic" => self.topic.clone(), "group" => self.group.clone(), "failure" => failure.as_str())
            .increment(1);
        *self
            .last_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((failure, text));
    }

    /// A replay failed again: counted and remembered, but it is no run of failures of the
    /// group (which goes on with its events): neither stuck nor lagging for it.
    fn replay_failed(&self, failure: Failure, err: &anyhow::Error) {
        self.count_failure(failure, format!("replaying a parked event: {err:#}"));
    }

    fn parked(&self) {
        self.parked.fetch_add(1, Ordering::Relaxed);
        self.counters.parked.increment(1);
        // Parking is progress: the group goes on.
        self.failing_since.store(0, Ordering::Release);
    }

    /// What the group looks like now.
    pub fn status(&self, policy: &DeliveryPolicy) -> GroupStatus {
        let now = now_millis();
        let oldest = self.oldest_held.load(Ordering::Acquire);
        let failing_since = self.failing_since.load(Ordering::Acquire);
        let failing_ms = if failing_since == 0 {
            0
        } else {
            now.saturating_sub(failing_since).max(0)
        };
        let last_failure = self
            .last_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let open = self.open_parked.load(Ordering::Acquire);
        GroupStatus {
            topic: self.topic.clone(),
            group: self.group.clone(),
            lag_seconds: if oldest == 0 {
                0.0
            } else {
                now.saturating_sub(oldest).max(0) as f64 / 1000.0
            },
            failing_seconds: failing_ms as f64 / 1000.0,
            stuck: failing_ms > i64::try_from(policy.stuck_after.as_millis()).unwrap_or(i64::MAX),
            last_failure: last_failure.as_ref().map(|(failure, _)| failure.as_str()),
            last_error: last_failure.map(|(_, error)| error),
            handled: self.handled.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            parked: self.parked.load(Ordering::Relaxed),
            open_parked: (open >= 0).then_some(open),
        }
    }
}

/// A consumer group as this process sees it (the operators' views, `/readyz`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct GroupStatus {
    /// The topic it consumes.
    pub topic: String,
    /// The group's name.
    pub group: String,
    /// Age of the oldest event the group holds and has not handled (0 when it holds none).
    pub lag_seconds: f64,
    /// How long the group has been failing without progress (0 when it is not).
    pub failing_seconds: f64,
    /// Failing for longer than the policy's `stuck_after`.
    pub stuck: bool,
    /// The kind of the last failure since the process started, if any.
    pub last_failure: Option<&'static str>,
    /// The text of that failure.
    pub last_error: Option<String>,
    /// Events handled by this process.
    pub handled: u64,
    /// Handler calls that failed in this process.
    pub failed: u64,
    /// Events parked by this process.
    pub parked: u64,
    /// Parked events of the group still open (parked or being replayed), from the store.
    pub open_parked: Option<i64>,
}

/// Where the events of a batch came from: what progress and parking mean for them.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source<'a> {
    /// An in-process queue (not durable) or a Redis stream (acknowledged by the caller).
    Transient,
    /// The outbox in embedded mode: the rows' ids, in the batch's order.
    Outbox(&'a [i64]),
}

/// The errors one event has met since it was handed over alone.
struct Failures {
    permanent: u32,
    unclassified: u32,
    first_error: Option<String>,
    first_failed_at: i64,
    last: Option<(Failure, String)>,
}

impl Failures {
    fn new() -> Self {
        Self {
            permanent: 0,
            unclassified: 0,
            first_error: None,
            first_failed_at: 0,
            last: None,
        }
    }

    fn add(&mut self, failure: Failure, err: &anyhow::Error) {
        let text = format!("{err:#}");
        if self.first_error.is_none() {
            self.first_error = Some(text.clone());
            self.first_failed_at = now_millis();
        }
        match failure {
            Failure::Permanent => self.permanent += 1,
            Failure::Unclassified => self.unclassified += 1,
            Failure::Transient => {}
        }
        self.last = Some((failure, text));
    }

    /// Whether the event is given up on under `policy`.
    fn exhausted(&self, policy: &DeliveryPolicy) -> bool {
        if self.permanent >= policy.permanent_attempts {
            return true;
        }
        let park_after =
            i64::try_from(policy.unclassified_park_after.as_millis()).unwrap_or(i64::MAX);
        self.unclassified >= policy.unclassified_min_attempts
            && self.first_error.is_some()
            && now_millis().saturating_sub(self.first_failed_at) >= park_after
    }

    fn record(&self, failure: &'static str) -> FailureRecord {
        let last = self
            .last
            .as_ref()
            .map(|(_, text)| text.clone())
            .unwrap_or_default();
        FailureRecord {
            failure,
            attempts: self.permanent + self.unclassified,
            first_error: self.first_error.clone().unwrap_or_else(|| last.clone()),
            last_error: last,
            first_failed_at: self.first_failed_at,
            last_failed_at: now_millis(),
        }
    }
}

/// A failure injected into a group's handler for some keys (tests of the real binary, through
/// `/debug/event-faults` with `debug_endpoints` on): a batch holding one of `keys` fails with
/// `failure` before the handler sees it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct InjectedFault {
    /// The group whose handler fails.
    pub group: String,
    /// The topic (one group consumes several).
    pub topic: String,
    /// Event keys that fail; empty: every event.
    #[serde(default)]
    pub keys: Vec<String>,
    /// `permanent` or `transient`.
    pub failure: String,
}

impl InjectedFault {
    /// The error of this fault for `events`, if one of them is among its keys.
    pub(super) fn fails(
        &self,
        topic: &str,
        group: &str,
        events: &[Event],
    ) -> Option<anyhow::Error> {
        if self.topic != topic || self.group != group {
            return None;
        }
        let hit = events
            .iter()
            .find(|event| self.keys.is_empty() || self.keys.contains(&event.key))?;
        let err = anyhow::anyhow!("injected fault for key {}", hit.key);
        Some(if self.failure == "transient" {
            super::failure::transient(err)
        } else {
            permanent(err)
        })
    }
}

/// The span a batch of `topic` is handled in by `group`, continuing the trace of its first traced
/// event ([`crate::tracing_otlp::consumer_span`]; none when tracing is off).
pub(super) fn consumer_span(topic: &str, group: &str, events: &[Event]) -> tracing::Span {
    if !crate::tracing_otlp::enabled() {
        return tracing::Span::none();
    }
    crate::tracing_otlp::consumer_span(
        topic,
        group,
        events.len(),
        events
            .iter()
            .filter_map(|event| event.traceparent.as_deref()),
    )
}

/// Calls `handler` with `events`, turning a panic (while making the future or polling it) into
/// a permanent failure.
pub(super) async fn call<H, Fut>(handler: &mut H, events: Vec<Event>) -> anyhow::Result<()>
where
    H: FnMut(Vec<Event>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let future = match std::panic::catch_unwind(AssertUnwindSafe(|| handler(events))) {
        Ok(future) => future,
        Err(panic) => return Err(panicked(&*panic)),
    };
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(outcome) => outcome,
        Err(panic) => Err(panicked(&*panic)),
    }
}

fn panicked(panic: &(dyn std::any::Any + Send)) -> anyhow::Error {
    let message = panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    permanent(anyhow::anyhow!("the handler panicked: {message}"))
}

/// What both consumer loops share: who consumes, how it batches, when it stops, where it parks
/// what it gives up on, and the health it reports.
pub(super) struct Consumer {
    pub(super) topic: String,
    pub(super) group: String,
    pub(super) batch_size: usize,
    pub(super) max_wait: Duration,
    pub(super) stop: CancellationToken,
    pub(super) health: Arc<GroupHealth>,
    /// Where the stream's database is found once an [`Outbox`](super::outbox::Outbox) is made
    /// for it: the dead-letter store and, embedded, the outbox ([`Consumer::store`]).
    pub(super) shared: Arc<Shared>,
    pub(super) policy: DeliveryPolicy,
}

impl Consumer {
    /// The stream's database, if an outbox was made for it (looked up at each use: a consumer
    /// may start before the outbox is made).
    pub(super) fn store(&self) -> Option<&Db> {
        self.shared.store.get()
    }

    /// Calls the handler, unless a fault injected for this group fails the batch first.
    async fn call_handler<H, Fut>(&self, handler: &mut H, events: Vec<Event>) -> anyhow::Result<()>
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        if self.shared.has_faults.load(Ordering::Acquire) {
            let faults = self
                .shared
                .faults
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if let Some(err) = faults
                .iter()
                .find_map(|fault| fault.fails(&self.topic, &self.group, &events))
            {
                return Err(err);
            }
        }
        let span = consumer_span(&self.topic, &self.group, &events);
        let started = std::time::Instant::now();
        let result = tracing::Instrument::instrument(call(handler, events), span).await;
        self.health
            .counters
            .batch_duration
            .record(started.elapsed().as_secs_f64());
        result
    }

    /// Hands `batch` to `handler` until every event of it is handled or parked (module docs);
    /// returns how many of its events, from the first, are — all of them, unless `stop` came
    /// while they were failing (after `stop`, each call is tried once).
    pub(super) async fn settle<H, Fut>(
        &self,
        handler: &mut H,
        batch: &[Event],
        source: Source<'_>,
    ) -> usize
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        if batch.is_empty() {
            return 0;
        }
        let health = &self.health;
        health.hold(batch);
        let mut pause = FIRST_RETRY_PAUSE;
        let mut backlog_checked = tokio::time::Instant::now();
        let settled = loop {
            let err = match self.call_handler(handler, batch.to_vec()).await {
                Ok(()) => {
                    health.handled(batch.len());
                    break batch.len();
                }
                Err(err) => err,
            };
            let failure = classify(&err);
            health.failed(failure, &err);
            if self.stop.is_cancelled() {
                self.log_failure(
                    &err,
                    failure,
                    batch.len(),
                    "event batch failed during shutdown",
                );
                break 0;
            }
            if failure != Failure::Transient {
                self.log_failure(
                    &err,
                    failure,
                    batch.len(),
                    "event batch failed; handing its events over one at a time",
                );
                break self.settle_each(handler, batch, source).await;
            }
            self.log_failure(&err, failure, batch.len(), "event batch failed; retrying");
            if let Source::Outbox(ids) = source {
                if backlog_checked.elapsed() >= self.policy.backlog_check {
                    backlog_checked = tokio::time::Instant::now();
                    if self.park_overflow(batch, ids, &err).await {
                        break batch.len();
                    }
                }
            }
            if !self.pause(&mut pause).await {
                break 0;
            }
        };
        health.release();
        settled
    }

    /// Hands the events of a failed batch over one at a time; returns how many, from the first,
    /// are handled or parked.
    async fn settle_each<H, Fut>(
        &self,
        handler: &mut H,
        batch: &[Event],
        source: Source<'_>,
    ) -> usize
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        for (index, event) in batch.iter().enumerate() {
            let position = match source {
                Source::Outbox(ids) => ids.get(index).copied(),
                Source::Transient => None,
            };
            if !self.settle_one(handler, event, position).await {
                return index;
            }
        }
        batch.len()
    }

    /// Hands `event` over alone until it is handled or parked; false if `stop` came first.
    async fn settle_one<H, Fut>(
        &self,
        handler: &mut H,
        event: &Event,
        position: Option<i64>,
    ) -> bool
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let health = &self.health;
        let mut failures = Failures::new();
        let mut pause = FIRST_RETRY_PAUSE;
        loop {
            let err = match self.call_handler(handler, vec![event.clone()]).await {
                Ok(()) => {
                    health.handled(1);
                    return true;
                }
                Err(err) => err,
            };
            let failure = classify(&err);
            health.failed(failure, &err);
            failures.add(failure, &err);
            if self.stop.is_cancelled() {
                self.log_failure(&err, failure, 1, "event failed during shutdown");
                return false;
            }
            if failure != Failure::Transient && failures.exhausted(&self.policy) {
                let kind = if failures.permanent >= self.policy.permanent_attempts {
                    Failure::Permanent
                } else {
                    Failure::Unclassified
                };
                return self
                    .park(event, &failures.record(kind.as_str()), position)
                    .await;
            }
            tracing::warn!(
                topic = self.topic,
                group = self.group,
                id = event.id,
                key = event.key,
                failure = failure.as_str(),
                error = format!("{err:#}"),
                "event failed; retrying it alone"
            );
            if !self.pause(&mut pause).await {
                return false;
            }
        }
    }

    /// Parks `event` (retrying while the store fails); false if `stop` came first, or there is
    /// no store to park in (then the event is retried forever, as before parking existed).
    async fn park(&self, event: &Event, record: &FailureRecord, position: Option<i64>) -> bool {
        let Some(store) = self.store() else {
            tracing::error!(
                topic = self.topic,
                group = self.group,
                id = event.id,
                "event cannot be applied and there is no store to park it in; retrying"
            );
            return false;
        };
        let mut pause = FIRST_RETRY_PAUSE;
        loop {
            match parked::park(store, &self.group, event, record, position).await {
                Ok(()) => {
                    self.health.parked();
                    tracing::error!(
                        topic = self.topic,
                        group = self.group,
                        id = event.id,
                        key = event.key,
                        failure = record.failure,
                        attempts = record.attempts,
                        error = record.last_error,
                        "event parked: the group goes on without it (replay or discard it: \
                         `webook events parked`)"
                    );
                    return true;
                }
                Err(err) => {
                    tracing::warn!(
                        topic = self.topic,
                        group = self.group,
                        id = event.id,
                        error = format!("{err:#}"),
                        "cannot park an event; retrying"
                    );
                    if !self.pause(&mut pause).await {
                        return false;
                    }
                }
            }
        }
    }

    /// Embedded mode, a group failing transiently: when more than the policy's `max_backlog`
    /// outbox rows wait behind it, parks the batch in hand as `overflow` (with its progress) so
    /// the outbox can be trimmed; returns whether it did.
    async fn park_overflow(&self, batch: &[Event], ids: &[i64], err: &anyhow::Error) -> bool {
        let (Some(store), Some(&first)) = (self.store(), ids.first()) else {
            return false;
        };
        // Rows behind the group's position: the batch in hand and what follows it.
        let position = first - 1;
        let backlog =
            match super::outbox_row::backlog(store, &self.topic, position, self.policy.max_backlog)
                .await
            {
                Ok(backlog) => backlog,
                Err(_) => return false,
            };
        if backlog <= self.policy.max_backlog {
            return false;
        }
        let now = now_millis();
        let error = format!(
            "{err:#} (more than {} events waited behind this group; parked to bound the outbox)",
            self.policy.max_backlog
        );
        let record = FailureRecord {
            failure: "overflow",
            attempts: 1,
            first_error: error.clone(),
            last_error: error,
            first_failed_at: now,
            last_failed_at: now,
        };
        for (event, &id) in batch.iter().zip(ids) {
            if !self.park(event, &record, Some(id)).await {
                return false;
            }
        }
        true
    }

    /// Waits `pause` (or until `stop`) and doubles it up to the maximum; false if stopped.
    pub(super) async fn pause(&self, pause: &mut Duration) -> bool {
        let wait = *pause;
        *pause = (*pause * 2).min(MAX_RETRY_PAUSE);
        tokio::select! {
            () = tokio::time::sleep(wait) => true,
            () = self.stop.cancelled() => false,
        }
    }

    fn log_failure(&self, err: &anyhow::Error, failure: Failure, size: usize, what: &'static str) {
        tracing::warn!(
            topic = self.topic,
            group = self.group,
            size,
            failure = failure.as_str(),
            error = format!("{err:#}"),
            "{what}"
        );
    }

    /// Replays the group's events an operator marked for replay, each alone: applied, it is
    /// recorded as replayed; failing again, it goes back to parked (or, transient, back to the
    /// replay queue).
    pub(super) async fn replay_marked<H, Fut>(&self, handler: &mut H)
    where
        H: FnMut(Vec<Event>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let Some(store) = self.store() else { return };
        match parked::has_replays(store, &self.topic, &self.group).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
        let claimed = match parked::claim_replays(store, &self.topic, &self.group).await {
            Ok(claimed) => claimed,
            Err(err) => {
                tracing::warn!(
                    topic = self.topic,
                    group = self.group,
                    error = format!("{err:#}"),
                    "cannot claim events to replay"
                );
                return;
            }
        };
        for parked in claimed {
            // Not held for the lag gauge: a replayed event is old by nature, and its age says
            // nothing about how far behind the group is.
            let outcome = self.call_handler(handler, vec![parked.event()]).await;
            let recorded = match outcome {
                Ok(()) => {
                    self.health.handled(1);
                    tracing::info!(
                        topic = self.topic,
                        group = self.group,
                        id = parked.event_id,
                        "parked event replayed"
                    );
                    parked::replayed(store, parked.id).await
                }
                Err(err) => {
                    let failure = classify(&err);
                    self.health.replay_failed(failure, &err);
                    tracing::warn!(
                        topic = self.topic,
                        group = self.group,
                        id = parked.event_id,
                        failure = failure.as_str(),
                        error = format!("{err:#}"),
                        "replaying a parked event failed"
                    );
                    parked::parked_again(
                        store,
                        parked.id,
                        &format!("{err:#}"),
                        failure == Failure::Transient,
                    )
                    .await
                }
            };
            if let Err(err) = recorded {
                // The claim runs out and the replay is tried again: applied twice only for a
                // handler that does not deduplicate, as after any redelivery.
                tracing::warn!(
                    id = parked.id,
                    error = format!("{err:#}"),
                    "cannot record a replay's outcome"
                );
            }
            if self.stop.is_cancelled() {
                return;
            }
        }
    }
}
