//! The rules of reads, likes and collects for any `biz` + `biz_id`.
//!
//! - **Likes and collects** are written synchronously: the user's row and the counter in one
//!   transaction (see [`InteractiveStore`]), then the object's cached counts are invalidated —
//!   on a task of their own, so a caller that goes away cannot leave the commit without the
//!   invalidation ([`platform::detached`]).
//!   Likes waiting at the same moment share a transaction (group commit, [`LIKE_BATCH`]); each
//!   caller is answered after the commit.
//! - **Reads** are the highest-volume write in the system, so a read only publishes an event
//!   ([`READ_TOPIC`]). The [`read counter`](InteractiveService::read_counter) consumes them in
//!   batches (up to [`READ_BATCH`] events or [`READ_MAX_WAIT`]), adds them up per object and
//!   applies the batch as one statement in one transaction, then invalidates those objects'
//!   cached counts and refills them with one query (the objects just read are the ones about
//!   to be read again). Counts may lag a read by up to the batch wait; nothing is lost on graceful
//!   shutdown (the consumer drains its queue before the process exits). With Redis Streams
//!   (cluster), a batch can be delivered again after a consumer died between commit and
//!   acknowledgement; the applied entry ids are recorded in the same transaction
//!   ([`platform::events::dedup`]), so such a batch is counted once.
//! - **Counts** are read through a [`VersionedCache`] (in-process, or Redis with a near cache),
//!   refilled from the database after each change. The database is the source of truth; a cache
//!   failure never fails an action. (The seeds update a Redis hash with "increment if present";
//!   that loses increments racing with a refill. Invalidation with versioned fills cannot, and the
//!   read counter's refill is one query per batch, not one miss per object.)

use std::{collections::HashMap, time::Duration};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{
    biz::Biz,
    interactive::{
        model::{Counts, ReadEvent, UserFlags, TOPIC_COLLECT_CHANGED, TOPIC_LIKE_CHANGED},
        store::{InteractiveStore, LikeChange},
    },
};
use platform::{
    cache::{json_bytes, FillToken, VersionedCache},
    db::now_millis,
    detached::to_completion,
    error::{AppError, Msg},
    events::outbox::Outbox,
    events::{Event, EventStream, Subscription},
    redis::Redis,
    telemetry::MetricsSpec,
};

/// Topic of read events.
pub const READ_TOPIC: &str = "interactive_read";
/// Consumer group that turns read events into counts.
pub const READ_GROUP: &str = "read_counter";
/// Most read events applied in one transaction. Under a normal load a batch is what arrived
/// within [`READ_MAX_WAIT`]; a counter that fell behind takes up to this many at once, and a
/// batch's reads collapse into fewer rows the larger it is (Zipf-distributed reads of 90 000
/// articles: 2 000 reads touch 1 119 articles, 20 000 touch 7 374), so the counter's rate rises
/// with the load instead of capping it (docs/PERFORMANCE.md → Read batches).
pub const READ_BATCH: usize = 20_000;
/// Longest a read event waits for its batch to fill.
pub const READ_MAX_WAIT: Duration = Duration::from_millis(200);
const COUNTS_TTL: Duration = Duration::from_secs(10 * 60);
const FLAGS_TTL: Duration = Duration::from_secs(10 * 60);

/// Reads, likes and collects; cheap to clone.
#[derive(Debug, Clone)]
pub struct InteractiveService {
    store: InteractiveStore,
    likes: mpsc::Sender<LikeRequest>,
    counts_cache: VersionedCache,
    flags_cache: VersionedCache,
    events: EventStream,
    /// Likes and collects record their events in it; woken after each commit that did.
    outbox: Outbox,
    dedup_reads: bool,
}

/// Most likes committed in one transaction. Likes waiting for the writer are applied together,
/// in arrival order, as sets ([`InteractiveStore::set_likes`]): SQLite has one writer, and one
/// commit per like made the commit the bottleneck (group commit); on PostgreSQL, statements per
/// like made the round trips the bottleneck.
pub const LIKE_BATCH: usize = 128;

/// Histogram: seconds one like batch's transaction took (the writer is busy for the rate of its
/// `_sum`).
pub const LIKE_BATCH_DURATION: &str = "like_batch_duration_seconds";
/// Counter: likes and unlikes the writer applied (divided by the batches counted in
/// [`LIKE_BATCH_DURATION`], the mean batch).
pub const LIKES_APPLIED: &str = "likes_applied_total";
/// Gauge: likes waiting for the writer (at most [`LIKE_QUEUE`]; callers wait beyond).
pub const LIKES_WAITING: &str = "likes_waiting";

/// The like writer's metrics, for the recorder.
pub const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[],
    describe: describe_metrics,
};

/// Describes the like writer's metrics to the installed recorder.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        LIKE_BATCH_DURATION,
        metrics::Unit::Seconds,
        "Time one batch of likes took to commit"
    );
    metrics::describe_counter!(LIKES_APPLIED, "Likes and unlikes the like writer applied");
    metrics::describe_gauge!(LIKES_WAITING, "Likes waiting for the like writer");
}

/// Likes waiting for the writer before callers wait to enqueue.
const LIKE_QUEUE: usize = 4096;

struct LikeRequest {
    change: LikeChange,
    reply: oneshot::Sender<anyhow::Result<bool>>,
}

/// The like writer: takes whatever likes are waiting (up to [`LIKE_BATCH`]), commits them in one
/// transaction and answers each. If the batch fails, each like is retried alone, so one bad like
/// cannot fail the others. Ends when the service is dropped.
fn spawn_like_writer(store: InteractiveStore, outbox: Outbox) -> mpsc::Sender<LikeRequest> {
    let (sender, mut queue) = mpsc::channel::<LikeRequest>(LIKE_QUEUE);
    tokio::spawn(async move {
        while let Some(first) = queue.recv().await {
            let mut batch = vec![first];
            while batch.len() < LIKE_BATCH {
                match queue.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            metrics::gauge!(LIKES_WAITING).set(queue.len() as f64);
            metrics::counter!(LIKES_APPLIED).increment(batch.len() as u64);
            let changes: Vec<LikeChange> = batch.iter().map(|r| r.change.clone()).collect();
            let announce = outbox.wants(TOPIC_LIKE_CHANGED);
            let started = std::time::Instant::now();
            let result = store.set_likes(&changes, now_millis(), announce).await;
            metrics::histogram!(LIKE_BATCH_DURATION).record(started.elapsed().as_secs_f64());
            match result {
                Ok(changed) => {
                    if changed.contains(&true) {
                        outbox.committed();
                    }
                    for (request, changed) in batch.into_iter().zip(changed) {
                        let _ = request.reply.send(Ok(changed));
                    }
                }
                Err(err) => {
                    tracing::warn!(size = batch.len(), %err, "like batch failed; retrying one by one");
                    for request in batch {
                        let alone = store
                            .set_likes(
                                std::slice::from_ref(&request.change),
                                now_millis(),
                                announce,
                            )
                            .await
                            .map(|changed| changed.first().copied().unwrap_or(false))
                            .map_err(anyhow::Error::from);
                        if matches!(alone, Ok(true)) {
                            outbox.committed();
                        }
                        let _ = request.reply.send(alone);
                    }
                }
            }
        }
    });
    sender
}

fn cache_key(biz: Biz, biz_id: i64) -> String {
    format!("{biz}:{biz_id}")
}

fn flags_key(uid: i64, biz: Biz, biz_id: i64) -> String {
    format!("{uid}:{biz}:{biz_id}")
}

impl InteractiveService {
    /// The service; with `redis`, counts are cached in Redis (under `redis_prefix`) and read
    /// batches are deduplicated by event id, as Redis Streams may redeliver. `memory_bytes` is
    /// the process's whole cache budget (`cache_memory_bytes`): counters get an eighth of it,
    /// liked/collected flags (one entry per user and object) 7/32 (a quarter, less the tag
    /// lists' 1/32, so the shares add up to the budget).
    pub fn new(
        store: InteractiveStore,
        events: EventStream,
        outbox: Outbox,
        redis: Option<(&Redis, &str)>,
        memory_bytes: u64,
    ) -> Self {
        Self {
            likes: spawn_like_writer(store.clone(), outbox.clone()),
            outbox,
            store,
            counts_cache: VersionedCache::new(
                "interactive_counts",
                memory_bytes / 8,
                COUNTS_TTL,
                redis,
            ),
            flags_cache: VersionedCache::new(
                "interactive_flags",
                memory_bytes / 32 * 7,
                FLAGS_TTL,
                redis,
            ),
            events,
            dedup_reads: redis.is_some(),
        }
    }

    /// The event stream reads are published to.
    pub fn events(&self) -> &EventStream {
        &self.events
    }

    /// Likes or unlikes; idempotent. Returns once the like is committed (see [`LIKE_BATCH`]) and
    /// the caches are fixed; both happen even if the caller goes away ([`to_completion`]).
    pub async fn like(&self, uid: i64, biz: Biz, biz_id: i64, like: bool) -> Result<(), AppError> {
        let service = self.clone();
        to_completion(async move {
            let (reply, changed) = oneshot::channel();
            let request = LikeRequest {
                change: LikeChange {
                    uid,
                    biz,
                    biz_id,
                    like,
                },
                reply,
            };
            service
                .likes
                .send(request)
                .await
                .map_err(|_| anyhow::anyhow!("the like writer stopped"))?;
            if changed
                .await
                .map_err(|_| anyhow::anyhow!("the like writer dropped a like"))??
            {
                service.forget(uid, biz, biz_id).await;
            }
            Ok(())
        })
        .await
    }

    /// Collects into folder `cid` (0 = default) or removes from collections; idempotent. The
    /// write and the cache fix complete even if the caller goes away ([`to_completion`]).
    pub async fn collect(
        &self,
        uid: i64,
        biz: Biz,
        biz_id: i64,
        cid: i64,
        collect: bool,
    ) -> Result<(), AppError> {
        // Checked before the write's task: a refused collect has nothing to complete.
        if cid < 0 || !self.store.owns_collection(uid, cid).await? {
            return Err(AppError::InvalidInput(Msg::field(
                "cid",
                "no such collection",
                "收藏夹不存在",
            )));
        }
        let service = self.clone();
        to_completion(async move {
            if service
                .store
                .set_collect(
                    uid,
                    biz,
                    biz_id,
                    cid,
                    collect,
                    now_millis(),
                    service.outbox.wants(TOPIC_COLLECT_CHANGED),
                )
                .await?
            {
                service.outbox.committed();
                service.forget(uid, biz, biz_id).await;
            }
            Ok(())
        })
        .await
    }

    /// After `uid` changed its like or collect of the object: its counts and that user's flags.
    async fn forget(&self, uid: i64, biz: Biz, biz_id: i64) {
        self.counts_cache.invalidate(&cache_key(biz, biz_id)).await;
        self.flags_cache
            .invalidate(&flags_key(uid, biz, biz_id))
            .await;
    }

    /// After a committed change of the object's comment count ([`super::store::add_comments`]):
    /// drops its cached counts.
    pub async fn comments_changed(&self, biz: Biz, biz_id: i64) {
        self.counts_cache.invalidate(&cache_key(biz, biz_id)).await;
    }

    /// Counts one read of the object by `uid` (asynchronously). Never fails the read itself.
    pub async fn record_read(&self, biz: Biz, biz_id: i64, uid: i64) {
        let event = ReadEvent {
            biz: biz.to_owned(),
            biz_id,
            uid,
        };
        if let Err(err) = self
            .events
            .publish(READ_TOPIC, &cache_key(biz, biz_id), &event)
            .await
        {
            tracing::error!(
                biz = biz.as_str(),
                biz_id,
                error = format!("{err:#}"),
                "could not record a read"
            );
        }
    }

    /// The object's counters, cached.
    pub async fn counts(&self, biz: Biz, biz_id: i64) -> Result<Counts, AppError> {
        Ok(self
            .counts_cache
            .get_or_load(
                &cache_key(biz, biz_id),
                self.store.counts(biz, biz_id),
                |_| true,
            )
            .await?)
    }

    /// Counters of many objects in one query (for lists and the hot list); absent ids have none.
    pub async fn batch_counts(
        &self,
        biz: Biz,
        ids: &[i64],
    ) -> Result<HashMap<i64, Counts>, AppError> {
        Ok(self.store.batch_counts(biz, ids).await?)
    }

    /// Whether `uid` likes / has collected the object; cached per (user, object) and
    /// invalidated by that user's likes and collects of it.
    pub async fn user_flags(&self, uid: i64, biz: Biz, biz_id: i64) -> Result<UserFlags, AppError> {
        Ok(self
            .flags_cache
            .get_or_load(
                &flags_key(uid, biz, biz_id),
                self.store.user_flags(uid, biz, biz_id),
                |_| true,
            )
            .await?)
    }

    /// The read counter: consumes read events until `stop`, then drains. Spawn it once per
    /// process: with [`Subscription::Stream`] where reads are counted, with
    /// [`Subscription::FallbackOnly`] where they are not (`role = api`), so the reads this
    /// process published while Redis refused them are still counted.
    pub fn read_counter(
        &self,
        subscription: Subscription,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let service = self.clone();
        self.events.subscribe(
            subscription,
            READ_TOPIC,
            READ_GROUP,
            READ_BATCH,
            READ_MAX_WAIT,
            stop,
            move |events| {
                let service = service.clone();
                async move { service.apply_read_batch(events).await }
            },
        )
    }

    /// Applies one batch of read events; an error leaves the batch to be retried (a payload
    /// that does not decode is a permanent failure: that event is parked).
    pub async fn apply_read_batch(&self, events: Vec<Event>) -> anyhow::Result<()> {
        let reads: Vec<(Biz, i64, String)> = events
            .into_iter()
            .map(|event| {
                let read = event.decode::<ReadEvent>()?;
                Ok((read.biz, read.biz_id, event.id))
            })
            .collect::<anyhow::Result<_>>()?;
        let now = now_millis();
        let dedup_group = self.dedup_reads.then_some(READ_GROUP);
        let applied = self.store.apply_reads(&reads, dedup_group, now).await?;
        // Invalidate, then refill from the database with one query per biz: the objects just
        // read are the ones about to be read again, and each would otherwise miss on its own.
        // Both cache steps take every object of the biz at once (one Redis call each in cluster
        // mode, not two per object). Embedded, only the counters that were cached are refilled:
        // under a long-tailed read mix most objects of a batch were read once and are not.
        let mut by_biz: HashMap<Biz, Vec<i64>> = HashMap::new();
        for ((biz, biz_id), _) in &applied {
            by_biz.entry(*biz).or_default().push(*biz_id);
        }
        for (biz, ids) in by_biz {
            let keys: Vec<String> = ids.iter().map(|id| cache_key(biz, *id)).collect();
            let tokens = self.counts_cache.invalidate_many_for_refill(&keys).await;
            let refillable: Vec<(i64, String, FillToken)> = ids
                .into_iter()
                .zip(keys)
                .zip(tokens)
                .filter_map(|((id, key), token)| Some((id, key, token?)))
                .collect();
            if refillable.is_empty() {
                continue;
            }
            let ids: Vec<i64> = refillable.iter().map(|(id, _, _)| *id).collect();
            let mut counts = match self.store.batch_counts(biz, &ids).await {
                Ok(counts) => counts,
                Err(err) => {
                    // The batch is applied; readers load the counters themselves.
                    tracing::warn!(%err, "could not refill counters after a read batch");
                    continue;
                }
            };
            let mut refills = Vec::with_capacity(refillable.len());
            for (biz_id, key, token) in refillable {
                match json_bytes(&counts.remove(&biz_id).unwrap_or_default()) {
                    Ok(bytes) => refills.push((key, token, bytes)),
                    Err(err) => tracing::error!(%err, "cannot serialise counters"),
                }
            }
            self.counts_cache.fill_many(refills).await;
        }
        Ok(())
    }
}
