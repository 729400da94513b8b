//! Live unread counts for `GET /notifications/stream` (Server-Sent Events).
//!
//! Data flow: whoever changes an inbox — the consumers after a batch's commit, the read routes —
//! calls [`Live::changed`] with the users concerned. In-process (embedded mode) that is a
//! [`tokio::sync::broadcast`] of user ids every open stream of the process listens to. In
//! cluster mode the ids are `PUBLISH`ed on the Redis channel `{prefix}:notifications:unread`
//! instead, and every instance relays what its subscription receives into its own broadcast
//! ([`Live::relay`], a background task on a connection of its own, reconnecting with a pause),
//! so a stream open on one instance hears of a batch another instance applied. A stream wakes
//! only for its user, reads the unread count (index-only) and sends it when it differs from the
//! last one it sent. Id 0 means "everyone check again": sent when the relay (re)subscribes,
//! since changes published while it was away were missed; a stream that lags behind the
//! broadcast checks again too. A failed `PUBLISH` falls back to this process's broadcast.

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use platform::redis::Redis;

/// Ids a slow stream may fall behind by before it just checks again.
const CAPACITY: usize = 1024;
/// Pause before the relay subscribes again after losing Redis.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
/// The id that asks every stream to check again.
pub const EVERYONE: i64 = 0;

/// Who must look at their unread count again.
#[derive(Clone)]
pub struct Live {
    local: broadcast::Sender<i64>,
    redis: Option<(Redis, Arc<str>)>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("cluster", &self.redis.is_some())
            .finish()
    }
}

impl Live {
    /// In-process, or through Redis under `prefix` in cluster mode.
    pub fn new(redis: Option<(&Redis, &str)>) -> Self {
        let (local, _) = broadcast::channel(CAPACITY);
        Self {
            local,
            redis: redis.map(|(redis, prefix)| {
                (
                    redis.clone(),
                    Arc::from(format!("{prefix}:notifications:unread")),
                )
            }),
        }
    }

    /// The ids of users whose count may have changed, as they come.
    pub fn subscribe(&self) -> broadcast::Receiver<i64> {
        self.local.subscribe()
    }

    /// Tells every stream of `uids` (on every instance) to look again.
    pub async fn changed(&self, uids: &[i64]) {
        if uids.is_empty() {
            return;
        }
        if let Some((redis, channel)) = &self.redis {
            let mut pipe = redis::pipe();
            for uid in uids {
                pipe.cmd("PUBLISH").arg(&**channel).arg(*uid).ignore();
            }
            match pipe.query_async::<()>(&mut redis.connection()).await {
                Ok(()) => return,
                Err(err) => {
                    tracing::warn!(%err, "cannot publish unread changes; telling this process only");
                }
            }
        }
        for uid in uids {
            // No stream open: nobody to tell.
            let _ = self.local.send(*uid);
        }
    }

    /// Cluster mode: relays the channel into this process's broadcast until `stop`, subscribing
    /// again (after [`RECONNECT_PAUSE`]) whenever the subscription is lost. In-process: nothing.
    pub async fn relay(self, redis_url: Option<String>, stop: CancellationToken) {
        let (Some((_, channel)), Some(url)) = (&self.redis, redis_url) else {
            return;
        };
        loop {
            match self.relay_once(&url, channel, &stop).await {
                Ok(()) => return,
                Err(err) => {
                    tracing::warn!(error = format!("{err:#}"), "unread relay lost redis");
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(RECONNECT_PAUSE) => {}
            }
        }
    }

    /// One subscription: `Ok` when stopped, an error when it was lost.
    async fn relay_once(
        &self,
        url: &str,
        channel: &str,
        stop: &CancellationToken,
    ) -> anyhow::Result<()> {
        let client = redis::Client::open(url)?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        // Whatever was published while unsubscribed was missed: everyone checks again.
        let _ = self.local.send(EVERYONE);
        let mut messages = pubsub.on_message();
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                message = messages.next() => match message {
                    Some(message) => match message.get_payload::<i64>() {
                        Ok(uid) => {
                            let _ = self.local.send(uid);
                        }
                        Err(err) => tracing::warn!(%err, "an unread change that is no user id"),
                    },
                    None => anyhow::bail!("the subscription ended"),
                },
            }
        }
    }
}
