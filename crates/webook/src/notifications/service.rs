//! [`NotificationService`]: the consumers that write each user's inbox from outbox events, and
//! what the routes read and change.
//!
//! **Writing (consumers, group `notifications`).** One consumer per topic of
//! [`CONSUMED_TOPICS`], on the platform's event stream exactly as the feed's: a batch is decoded
//! into [`Change`]s and applied by [`NotificationStore::apply`] in one transaction that records
//! the batch's event ids (redelivered events change nothing) — see [`super::store`] for why the
//! counts stay exact. What each topic produces:
//! - `comment_changed` (one event per recipient: the article's author, the author replied to):
//!   a `reply` when the comment answers the recipient's comment, else a `comment`; a deletion
//!   removes it;
//! - `like_changed` / `collect_changed` of articles: the article author's `like` / `collect` row
//!   of that article and day gains the actor; an unlike / uncollect takes them away;
//! - `follow_changed`: a `follow` for the followee; a cancel removes it;
//! - `payment_succeeded` of a reward: a `reward` for the article's author (the reward row says
//!   who paid whom); `payment_refunded` removes it;
//! - `article_withdrawn`: the article's like, collect, comment and reply notifications go;
//! - `moderation_acted`: the author's (or the account's) `moderation` notification of that
//!   target shows the latest action and its reason (a repeat of it changes nothing).
//!
//! Never to the actor themself; never of a kind the recipient turned off — preferences are read
//! when the event is handled (within a batch's wait of the action, usually), not when it happened.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{
    article::{ArticleEvent, TOPIC_WITHDRAWN},
    biz::Biz,
    comment::{CommentEvent, TOPIC_COMMENT_CHANGED},
    feed::{FollowEvent, TOPIC_FOLLOW_CHANGED},
    interactive::{InteractionEvent, TOPIC_COLLECT_CHANGED, TOPIC_LIKE_CHANGED},
    moderation::{ModerationEvent, TOPIC_MODERATION_ACTED},
    notifications::{
        live::Live,
        model::{Change, Kind, NotificationView, Preferences, Source, Unread},
        store::NotificationStore,
    },
    payment::{PaymentEvent, TOPIC_PAYMENT_REFUNDED, TOPIC_PAYMENT_SUCCEEDED},
    reward::{RewardStore, REWARD_BIZ},
};
use platform::{
    db::now_millis,
    error::{AppError, Msg},
    events::{Event, EventStream, Subscription},
    page::{decode_cursor, overfetch, Page},
    telemetry::MetricsSpec,
};

/// Consumer group of every topic notifications consume.
pub const GROUP: &str = "notifications";
/// Events handled per consumer batch.
const EVENT_BATCH: usize = 100;
/// Longest an event waits for its batch.
const EVENT_MAX_WAIT: Duration = Duration::from_millis(20);

/// The topics notifications consume.
pub const CONSUMED_TOPICS: [&str; 8] = [
    TOPIC_COMMENT_CHANGED,
    TOPIC_LIKE_CHANGED,
    TOPIC_COLLECT_CHANGED,
    TOPIC_FOLLOW_CHANGED,
    TOPIC_PAYMENT_SUCCEEDED,
    TOPIC_PAYMENT_REFUNDED,
    TOPIC_WITHDRAWN,
    TOPIC_MODERATION_ACTED,
];

/// Counter: notifications written or given a new actor, by `topic`.
pub const NOTIFICATIONS_WRITTEN_TOTAL: &str = "notifications_written_total";
/// Counter: notifications removed or given one actor less, by `topic`.
pub const NOTIFICATIONS_REMOVED_TOTAL: &str = "notifications_removed_total";

/// Histogram: from an event's publication to its batch's commit in the inboxes (seconds), by
/// `topic` — what a user waits, after a like, for its notification.
pub const NOTIFICATION_DELAY_SECONDS: &str = "notification_delay_seconds";

/// Buckets of [`NOTIFICATION_DELAY_SECONDS`]: milliseconds to seconds.
const DELAY_BUCKETS: &[f64] = &[
    0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];

/// The feature's metrics.
pub const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[(NOTIFICATION_DELAY_SECONDS, DELAY_BUCKETS)],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_counter!(
        NOTIFICATIONS_WRITTEN_TOTAL,
        "Notifications written or given a new actor, by source topic"
    );
    metrics::describe_histogram!(
        NOTIFICATION_DELAY_SECONDS,
        metrics::Unit::Seconds,
        "From an event's publication to its notification's commit, by source topic"
    );
    metrics::describe_counter!(
        NOTIFICATIONS_REMOVED_TOTAL,
        "Notifications removed or given one actor less, by source topic"
    );
}

/// Notifications: the consumers and the inbox's reads and writes.
#[derive(Debug, Clone)]
pub struct NotificationService {
    store: NotificationStore,
    rewards: RewardStore,
    live: Live,
}

impl NotificationService {
    /// The service over `store`, finding rewards in `rewards`, telling open streams through
    /// `live`.
    pub fn new(store: NotificationStore, rewards: RewardStore, live: Live) -> Self {
        Self {
            store,
            rewards,
            live,
        }
    }

    /// The store.
    pub fn store(&self) -> &NotificationStore {
        &self.store
    }

    /// Who must look at their unread count again (`GET /notifications/stream`).
    pub fn live(&self) -> &Live {
        &self.live
    }

    /// A page of `uid`'s notifications, newest first (by last change, then id).
    pub async fn page(
        &self,
        uid: i64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<NotificationView>, AppError> {
        let after = cursor.map(decode_cursor::<2>).transpose()?;
        let rows = self.store.page(uid, after, overfetch(limit)).await?;
        Ok(Page::from_overfetched(rows, limit, |row| {
            vec![row.time, row.id]
        }))
    }

    /// How many of `uid`'s notifications are unread.
    pub async fn unread(&self, uid: i64) -> Result<Unread, AppError> {
        Ok(Unread {
            count: self.store.unread(uid).await?,
        })
    }

    /// Marks `uid`'s notification `id` read; 404001 if it has none such.
    pub async fn mark_read(&self, uid: i64, id: i64) -> Result<(), AppError> {
        if self.store.mark_read(uid, id).await? {
            self.live.changed(&[uid]).await;
            Ok(())
        } else {
            Err(AppError::NotFound(Msg::new(
                "no such notification",
                "通知不存在",
            )))
        }
    }

    /// Marks all of `uid`'s notifications read.
    pub async fn mark_all_read(&self, uid: i64) -> Result<(), AppError> {
        if self.store.mark_all_read(uid).await? > 0 {
            self.live.changed(&[uid]).await;
        }
        Ok(())
    }

    /// The kinds `uid` turned off.
    pub async fn preferences(&self, uid: i64) -> Result<Preferences, AppError> {
        let muted = self.store.muted(uid).await?;
        Ok(Preferences {
            muted: muted
                .into_iter()
                .map(|kind| kind.as_str().to_owned())
                .collect(),
        })
    }

    /// Replaces the kinds `uid` turned off; code 4 naming `muted` for an unknown kind. Answers
    /// the preferences as stored.
    pub async fn set_preferences(
        &self,
        uid: i64,
        muted: &[String],
    ) -> Result<Preferences, AppError> {
        let mut kinds = muted
            .iter()
            .map(|name| Kind::parse("muted", name))
            .collect::<Result<Vec<_>, _>>()?;
        kinds.sort_unstable();
        kinds.dedup();
        self.store.set_muted(uid, &kinds).await?;
        self.preferences(uid).await
    }

    /// What one event changes (`None`: nothing for notifications, e.g. a payment of another
    /// kind, or a like of something that is not an article).
    async fn change_of(&self, event: &Event) -> anyhow::Result<Option<Change>> {
        Ok(match event.topic.as_str() {
            TOPIC_COMMENT_CHANGED => Some(Change::Comment(event.decode::<CommentEvent>()?)),
            topic @ (TOPIC_LIKE_CHANGED | TOPIC_COLLECT_CHANGED) => {
                let interaction = event.decode::<InteractionEvent>()?;
                (interaction.biz == Biz::Article).then_some(Change::Interaction {
                    source: if topic == TOPIC_LIKE_CHANGED {
                        Source::Like
                    } else {
                        Source::Collect
                    },
                    actor: interaction.uid,
                    article: interaction.biz_id,
                    on: interaction.on,
                    time: interaction.time,
                })
            }
            TOPIC_FOLLOW_CHANGED => {
                let follow = event.decode::<FollowEvent>()?;
                Some(Change::Follow {
                    follower: follow.follower,
                    followee: follow.followee,
                    on: follow.on,
                    time: follow.time,
                })
            }
            topic @ (TOPIC_PAYMENT_SUCCEEDED | TOPIC_PAYMENT_REFUNDED) => {
                let payment = event.decode::<PaymentEvent>()?;
                if payment.biz != REWARD_BIZ {
                    return Ok(None);
                }
                // The reward row says who paid whom for what (written before its payment).
                self.rewards
                    .by_id(payment.biz_id)
                    .await?
                    .map(|reward| Change::Reward {
                        rid: reward.id,
                        payer: reward.payer_id,
                        author: reward.author_id,
                        article: reward.article_id,
                        amt: payment.amt,
                        on: topic == TOPIC_PAYMENT_SUCCEEDED,
                        time: event.time,
                    })
            }
            TOPIC_WITHDRAWN => Some(Change::Withdrawn {
                article: event.decode::<ArticleEvent>()?.id,
            }),
            TOPIC_MODERATION_ACTED => Some(Change::Moderation(event.decode::<ModerationEvent>()?)),
            other => anyhow::bail!("notifications do not consume {other}"),
        })
    }

    /// Applies a batch of `topic`'s events.
    pub async fn apply(&self, topic: &str, events: &[Event]) -> anyhow::Result<()> {
        let mut changes = Vec::with_capacity(events.len());
        for event in events {
            if let Some(change) = self.change_of(event).await? {
                changes.push((event.id.clone(), change));
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        let applied = self.store.apply(GROUP, changes, now_millis()).await?;
        let delay = metrics::histogram!(NOTIFICATION_DELAY_SECONDS, "topic" => topic.to_owned());
        let committed = now_millis();
        for event in events {
            delay.record(committed.saturating_sub(event.time).max(0) as f64 / 1000.0);
        }
        self.live.changed(&applied.recipients).await;
        metrics::counter!(NOTIFICATIONS_WRITTEN_TOTAL, "topic" => topic.to_owned())
            .increment(applied.written);
        metrics::counter!(NOTIFICATIONS_REMOVED_TOTAL, "topic" => topic.to_owned())
            .increment(applied.removed);
        tracing::debug!(
            topic,
            events = applied.events,
            written = applied.written,
            removed = applied.removed,
            "notifications applied"
        );
        Ok(())
    }

    /// The consumers, one per topic of [`CONSUMED_TOPICS`] (group [`GROUP`]), run until `stop`.
    pub fn consumers(
        &self,
        events: &EventStream,
        subscription: Subscription,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let consumers: Vec<_> = CONSUMED_TOPICS
            .iter()
            .map(|&topic| {
                let service = self.clone();
                tokio::spawn(events.subscribe(
                    subscription,
                    topic,
                    GROUP,
                    EVENT_BATCH,
                    EVENT_MAX_WAIT,
                    stop.clone(),
                    move |batch| {
                        let service = service.clone();
                        async move {
                            let span = tracing::info_span!(
                                "notifications_batch",
                                topic,
                                events = batch.len()
                            );
                            tracing::Instrument::instrument(service.apply(topic, &batch), span)
                                .await
                        }
                    },
                ))
            })
            .collect();
        async move {
            for consumer in consumers {
                match consumer.await {
                    Err(err) if err.is_panic() => {
                        tracing::error!(%err, "a notifications consumer panicked");
                    }
                    // Cancelled with the runtime at shutdown: no failure to report.
                    _ => {}
                }
            }
        }
    }
}
