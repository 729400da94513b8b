//! Following topics from a position of one's own: for a read model that each process keeps for
//! itself (the search index), which must see every event of its topics — not share them with
//! the other processes as a consumer group does — and must resume after a restart exactly where
//! its last durable write left off.
//!
//! Data flow: the follower stores [`Positions`] (per topic, the last stream entry it applied)
//! with its own data, in the same durable write as the changes those entries caused; at start it
//! asks [`EventStream::can_resume`] whether the stream still holds everything after them (else it
//! rebuilds from the database, starting from [`EventStream::heads`], taken before its scan) and
//! then runs [`EventStream::follow`], whose handler gets each batch with the positions it
//! reaches.
//!
//! - **Redis Streams**: `XREAD COUNT … BLOCK … STREAMS <topics…> <positions…>` on a connection
//!   of its own, no group and nothing stored in Redis per follower; a batch is re-read from the
//!   same positions until its handler returns `Ok`, so nothing is skipped, and a restart from
//!   the stored positions applies nothing twice. A stream trimmed past a stored position
//!   (`XINFO STREAM` → `max-deleted-entry-id`) makes [`EventStream::can_resume`] answer false.
//! - **In-process**: one consumer group per topic (registered when `follow` is called, before
//!   the outbox relay starts), their batches funnelled into the one handler, one call at a time
//!   (batches that arrive meanwhile are handed over together in the next call). The
//!   outbox keeps each row until every group's handler returned `Ok`, so the outbox, not the
//!   positions, is what a restart resumes from; positions are always empty.

use std::{collections::BTreeMap, future::Future, time::Duration};

use redis::{
    aio::MultiplexedConnection,
    streams::{StreamRangeReply, StreamReadReply},
    AsyncConnectionConfig,
};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{
    redis_streams::{entry_event, RedisBackend},
    stream_key, Backend, Event, EventStream, FIRST_RETRY_PAUSE, MAX_RETRY_PAUSE,
};

/// How long one idle `XREAD` blocks; stopping also cuts it short.
const FOLLOW_BLOCK: Duration = Duration::from_secs(2);
/// Connect timeout of the following connection, and the margin beyond the `BLOCK` time.
const FOLLOW_IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Per topic, the id of the last stream entry applied (Redis stream ids, e.g. `1732900000000-0`).
/// Empty in-process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Positions(pub BTreeMap<String, String>);

impl Positions {
    /// The position of `topic`: its last applied entry, or the stream's start.
    pub fn of(&self, topic: &str) -> &str {
        self.0.get(topic).map_or("0-0", String::as_str)
    }

    /// Moves each topic of `later` to its position there.
    pub fn advance(&mut self, later: &Positions) {
        for (topic, id) in &later.0 {
            self.0.insert(topic.clone(), id.clone());
        }
    }
}

/// A stream id as (milliseconds, sequence), for comparing; `None` if malformed.
fn parse_stream_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

impl EventStream {
    /// Whether followers resume from stored [`Positions`] (Redis Streams) rather than from what
    /// the outbox still holds (in-process).
    pub fn keeps_positions(&self) -> bool {
        matches!(self.backend, Backend::Redis(_))
    }

    /// Where each of `topics` ends now: with Redis the id of its stream's last entry (`0-0` for
    /// an empty stream); in-process nothing (the outbox is the position).
    pub async fn heads(&self, topics: &[&str]) -> anyhow::Result<Positions> {
        let Backend::Redis(backend) = &self.backend else {
            return Ok(Positions::default());
        };
        let mut connection = backend.redis.connection();
        let mut heads = Positions::default();
        for topic in topics {
            let last: StreamRangeReply = redis::cmd("XREVRANGE")
                .arg(stream_key(&backend.prefix, topic))
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(1)
                .query_async(&mut connection)
                .await?;
            let id = last
                .ids
                .into_iter()
                .next()
                .map_or_else(|| "0-0".to_owned(), |entry| entry.id);
            heads.0.insert((*topic).to_owned(), id);
        }
        Ok(heads)
    }

    /// Whether following `topics` from `positions` would see every entry after them: each topic
    /// has a position and, with Redis, no entry after it was trimmed away — nothing was added
    /// after it, or the stream's first remaining entry is at or before it (trimming removes the
    /// oldest entries first), or, from the stream's start, nothing was ever removed. In-process
    /// always (the outbox keeps what was not handled).
    pub async fn can_resume(&self, topics: &[&str], positions: &Positions) -> anyhow::Result<bool> {
        let Backend::Redis(backend) = &self.backend else {
            return Ok(true);
        };
        let mut connection = backend.redis.connection();
        for topic in topics {
            let Some(position) = positions.0.get(*topic).and_then(|id| parse_stream_id(id)) else {
                return Ok(false);
            };
            let info: redis::Value = match redis::cmd("XINFO")
                .arg("STREAM")
                .arg(stream_key(&backend.prefix, topic))
                .query_async(&mut connection)
                .await
            {
                Ok(info) => info,
                // No such stream: nothing was ever published to it (or Redis was emptied, and
                // then what it lost was never readable anyway).
                Err(err) if err.code() == Some("ERR") => continue,
                Err(err) => return Err(err.into()),
            };
            let info = StreamInfo::of(info);
            let nothing_new = info.last_generated.is_some_and(|last| last <= position);
            let intact_after = info.first_entry.is_some_and(|first| first <= position);
            let never_trimmed = position == (0, 0)
                && info.entries_added.is_some()
                && info.entries_added == info.length;
            if !(nothing_new || intact_after || never_trimmed) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Follows `topics` from `from` until `stop`, handing `handler` each batch (at most
    /// `batch_size` events, gathered for at most `max_wait` after the first) with the positions
    /// it reaches; a batch whose handler fails is delivered again after a growing pause. See the
    /// module docs for what `group` and the positions mean on each backend.
    #[allow(clippy::too_many_arguments)]
    pub fn follow<H, Fut>(
        &self,
        topics: &[&str],
        group: &str,
        from: Positions,
        batch_size: usize,
        max_wait: Duration,
        stop: CancellationToken,
        mut handler: H,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        H: FnMut(Vec<Event>, Positions) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send,
    {
        let backend = self.backend.clone();
        // In-process groups must exist before this returns (the relay hands rows only to the
        // groups registered when it relays them).
        type Funnelled = (Vec<Event>, oneshot::Sender<anyhow::Result<()>>);
        let (funnel, mut funnelled) = mpsc::channel::<Funnelled>(topics.len().max(1));
        let consumers: Vec<_> = match &backend {
            Backend::InProcess(_) => topics
                .iter()
                .map(|topic| {
                    let funnel = funnel.clone();
                    self.consume(
                        topic,
                        group,
                        batch_size,
                        max_wait,
                        stop.clone(),
                        move |events| {
                            let funnel = funnel.clone();
                            async move {
                                let (reply, outcome) = oneshot::channel();
                                funnel
                                    .send((events, reply))
                                    .await
                                    .map_err(|_| anyhow::anyhow!("the follower stopped"))?;
                                outcome
                                    .await
                                    .map_err(|_| anyhow::anyhow!("the follower stopped"))?
                            }
                        },
                    )
                })
                .collect(),
            Backend::Redis(_) => Vec::new(),
        };
        drop(funnel);
        let topics: Vec<String> = topics.iter().map(|topic| (*topic).to_owned()).collect();
        let group = group.to_owned();
        async move {
            match backend {
                Backend::InProcess(_) => {
                    let consumers = futures_util::future::join_all(consumers);
                    // Batches that arrive while one is handled (other topics') are handled
                    // together next: one handler call — one commit — for all of them.
                    let funnel = async move {
                        while let Some((mut events, reply)) = funnelled.recv().await {
                            let mut replies = vec![reply];
                            while let Ok((more, reply)) = funnelled.try_recv() {
                                events.extend(more);
                                replies.push(reply);
                            }
                            // Each consumer gets the outcome with its kind kept, so a transient
                            // failure stays one (never parked) and a permanent one is parked.
                            let span = followed_span(&group, &events);
                            let handled = handler(events, Positions::default());
                            let outcome = tracing::Instrument::instrument(handled, span)
                                .await
                                .map_err(|err| {
                                    (
                                        super::failure::classify(&err),
                                        super::failure::unmarked(&err),
                                    )
                                });
                            for reply in replies {
                                let _ = reply.send(outcome.clone().map_err(|(failure, text)| {
                                    let err = anyhow::Error::msg(text);
                                    match failure {
                                        super::failure::Failure::Transient => {
                                            super::failure::transient(err)
                                        }
                                        super::failure::Failure::Permanent => {
                                            super::failure::permanent(err)
                                        }
                                        super::failure::Failure::Unclassified => err,
                                    }
                                }));
                            }
                        }
                    };
                    tokio::join!(consumers, funnel);
                }
                Backend::Redis(backend) => {
                    let follower = RedisFollower {
                        backend,
                        topics,
                        group,
                        positions: from,
                        batch_size: batch_size.max(1),
                        max_wait,
                        stop,
                        connection: None,
                    };
                    follower.run(handler).await;
                }
            }
        }
    }
}

/// What [`EventStream::can_resume`] reads of an `XINFO STREAM` reply.
#[derive(Debug, Default)]
struct StreamInfo {
    last_generated: Option<(u64, u64)>,
    first_entry: Option<(u64, u64)>,
    /// Redis ≥ 7.
    entries_added: Option<u64>,
    length: Option<u64>,
}

impl StreamInfo {
    fn of(info: redis::Value) -> Self {
        let fields: Vec<redis::Value> = match info {
            redis::Value::Array(items) => items,
            redis::Value::Map(pairs) => pairs
                .into_iter()
                .flat_map(|(key, value)| [key, value])
                .collect(),
            _ => Vec::new(),
        };
        let mut parsed = Self::default();
        let mut fields = fields.into_iter();
        while let (Some(key), Some(value)) = (fields.next(), fields.next()) {
            let Ok(key) = redis::from_redis_value::<String>(key) else {
                continue;
            };
            match key.as_str() {
                "last-generated-id" => {
                    parsed.last_generated = redis::from_redis_value::<String>(value)
                        .ok()
                        .and_then(|id| parse_stream_id(&id));
                }
                "first-entry" => {
                    parsed.first_entry = redis::from_redis_value::<(String, redis::Value)>(value)
                        .ok()
                        .and_then(|(id, _)| parse_stream_id(&id));
                }
                "entries-added" => parsed.entries_added = redis::from_redis_value(value).ok(),
                "length" => parsed.length = redis::from_redis_value(value).ok(),
                _ => {}
            }
        }
        parsed
    }
}

/// The consumer span of a followed batch (its topics, in order of first appearance, name it).
fn followed_span(group: &str, events: &[Event]) -> tracing::Span {
    if !crate::tracing_otlp::enabled() {
        return tracing::Span::none();
    }
    let mut topics: Vec<&str> = Vec::new();
    for event in events {
        if !topics.contains(&event.topic.as_str()) {
            topics.push(&event.topic);
        }
    }
    super::delivery::consumer_span(&topics.join(","), group, events)
}

struct RedisFollower {
    backend: std::sync::Arc<RedisBackend>,
    topics: Vec<String>,
    /// The follower's name (the consumer span's group).
    group: String,
    positions: Positions,
    batch_size: usize,
    max_wait: Duration,
    stop: CancellationToken,
    connection: Option<MultiplexedConnection>,
}

impl RedisFollower {
    async fn run<H, Fut>(mut self, mut handler: H)
    where
        H: FnMut(Vec<Event>, Positions) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let mut pause = FIRST_RETRY_PAUSE;
        let stop = self.stop.clone();
        while !stop.is_cancelled() {
            let read = tokio::select! {
                read = self.read_batch() => read,
                () = stop.cancelled() => break,
            };
            let outcome = match read {
                // Nothing, or only malformed entries: passed without a handler call.
                Ok((events, reached)) if events.is_empty() => {
                    self.positions.advance(&reached);
                    Ok(())
                }
                Ok((events, reached)) => {
                    let span = followed_span(&self.group, &events);
                    let handled = handler(events, reached.clone());
                    match tracing::Instrument::instrument(handled, span).await {
                        Ok(()) => {
                            self.positions.advance(&reached);
                            Ok(())
                        }
                        Err(err) => Err(err.context("a followed batch failed; it is read again")),
                    }
                }
                Err(err) => {
                    self.connection = None;
                    Err(anyhow::Error::from(err).context("cannot follow events in redis"))
                }
            };
            match outcome {
                Ok(()) => pause = FIRST_RETRY_PAUSE,
                Err(err) => {
                    tracing::warn!(error = format!("{err:#}"), retry_in = ?pause, "event follower");
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {},
                        () = stop.cancelled() => {},
                    }
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
            }
        }
        tracing::debug!(topics = ?self.topics, "event follower stopped");
    }

    /// The next batch after the current positions (read again from them if the last one
    /// failed), with the positions it reaches.
    async fn read_batch(&mut self) -> redis::RedisResult<(Vec<Event>, Positions)> {
        let mut reached = self.positions.clone();
        let mut last = Vec::new();
        let mut events = self
            .read(&reached, self.batch_size, FOLLOW_BLOCK, &mut last)
            .await?;
        advance_to(&mut reached, &mut last);
        if events.is_empty() {
            return Ok((events, reached));
        }
        let deadline = tokio::time::Instant::now() + self.max_wait;
        while events.len() < self.batch_size {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left < Duration::from_millis(1) {
                break;
            }
            let more = self
                .read(&reached, self.batch_size - events.len(), left, &mut last)
                .await?;
            advance_to(&mut reached, &mut last);
            if more.is_empty() {
                break;
            }
            events.extend(more);
        }
        Ok((events, reached))
    }

    /// One `XREAD` from `from`; the entry ids read are appended to `read_ids` as (topic, id).
    async fn read(
        &mut self,
        from: &Positions,
        count: usize,
        block: Duration,
        read_ids: &mut Vec<(String, String)>,
    ) -> redis::RedisResult<Vec<Event>> {
        let mut connection = self.connect().await?;
        let block_ms = u64::try_from(block.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut command = redis::cmd("XREAD");
        command
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS");
        for topic in &self.topics {
            command.arg(stream_key(&self.backend.prefix, topic));
        }
        for topic in &self.topics {
            command.arg(from.of(topic));
        }
        let reply: Option<StreamReadReply> = command.query_async(&mut connection).await?;
        let mut events = Vec::new();
        for stream in reply.map(|reply| reply.keys).unwrap_or_default() {
            let Some(topic) = self
                .topics
                .iter()
                .find(|topic| stream_key(&self.backend.prefix, topic) == stream.key)
            else {
                continue;
            };
            for entry in stream.ids {
                read_ids.push((topic.clone(), entry.id.clone()));
                match entry_event(topic, entry) {
                    Some(event) => events.push(event),
                    // Skipped, but its position is passed: it cannot be applied anyway.
                    None => tracing::warn!(topic, "skipping a malformed stream entry"),
                }
            }
        }
        Ok(events)
    }

    async fn connect(&mut self) -> redis::RedisResult<MultiplexedConnection> {
        if let Some(connection) = &self.connection {
            return Ok(connection.clone());
        }
        {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(FOLLOW_IO_TIMEOUT))
                .set_response_timeout(Some(FOLLOW_BLOCK.max(self.max_wait) + FOLLOW_IO_TIMEOUT));
            let connection = self
                .backend
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            self.connection = Some(connection.clone());
            Ok(connection)
        }
    }
}

/// Moves `positions` past the entries in `read_ids` (emptied).
fn advance_to(positions: &mut Positions, read_ids: &mut Vec<(String, String)>) {
    for (topic, id) in read_ids.drain(..) {
        positions.0.insert(topic, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_compare_by_time_then_sequence() {
        assert!(parse_stream_id("5-1") > parse_stream_id("5-0"));
        assert!(parse_stream_id("10-0") > parse_stream_id("9-99"));
        assert_eq!(parse_stream_id("7"), Some((7, 0)));
        assert_eq!(parse_stream_id("x-1"), None);
    }

    #[test]
    fn positions_advance_per_topic() {
        let mut positions = Positions::default();
        assert_eq!(positions.of("a"), "0-0");
        positions.advance(&Positions(BTreeMap::from([("a".into(), "3-0".into())])));
        positions.advance(&Positions(BTreeMap::from([("b".into(), "4-0".into())])));
        assert_eq!(positions.of("a"), "3-0");
        assert_eq!(positions.of("b"), "4-0");
    }
}
