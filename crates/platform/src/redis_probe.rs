//! Redis look-ups of one request, sent together: one round trip for the lot.
//!
//! In cluster mode a read of a cached object asks Redis whether the near copy is still current
//! (`crate::cache`), and a page made of several objects (an article, its counters, the reader's
//! flags) would pay one round trip per object. A [`probe`] awaited inside [`together`] is not
//! sent at once: it joins the scope's queue, and once the scope's future has been polled — every
//! concurrent branch has reached its probe — the queue goes to Redis as **one** call of
//! [`PROBE_SCRIPT`], whose answer is split back to the waiting probes. Outside `together` a probe
//! is a call of its own; either way it is one atomic script run per call.
//!
//! A probe asks for a versioned hash of `crate::cache` (`ver`, `data`): if `ver` is the version
//! the near copy holds, the answer is only "unchanged" (the value does not cross the network),
//! otherwise the current version and data, in the same round trip.
//!
//! Data flow: `probe` → (inside a scope) the scope's queue, with a oneshot for its answer → after
//! each poll of the inner future the scope takes the queue, groups it by connection and starts
//! one script call per group → each call's reply is split and sent to the probes → the inner
//! future is woken. An error (Redis away, a reply of the wrong shape) reaches every probe of the
//! call, and callers treat it as Redis being away, as they would a failed command.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};

use axum::body::Bytes;
use futures_util::{stream::FuturesUnordered, StreamExt};
use redis::Value;
use tokio::sync::oneshot;

use crate::redis::Redis;

/// Answers every probe of a call, in `KEYS` order: `1` when the hash's `ver` is `ARGV[i]` (the
/// near copy's version, empty when there is none), else `{ver, data}` (either nil).
pub const PROBE_SCRIPT: &str = r"
local out = {}
for i, key in ipairs(KEYS) do
  local ver = redis.call('HGET', key, 'ver')
  if ver and ver == ARGV[i] then
    out[i] = 1
  else
    out[i] = {ver, redis.call('HGET', key, 'data')}
  end
end
return out
";

/// What to ask of one key: a versioned hash's data, unless its version is `known` (the version
/// of the near copy, if there is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The version of the near copy, if there is one.
    pub known: Option<u64>,
}

/// The answer to a [`Probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// The hash is at the `known` version.
    Unchanged,
    /// The hash's current version and data (either absent when Redis has none).
    Changed {
        /// `ver`, if the hash exists.
        version: Option<u64>,
        /// `data`, if set (a tombstone has a version and no data).
        data: Option<Bytes>,
    },
}

type Answer = Result<Probed, String>;

struct Queued {
    redis: Redis,
    key: String,
    probe: Probe,
    answer: oneshot::Sender<Answer>,
}

type Queue = Arc<Mutex<Vec<Queued>>>;

tokio::task_local! {
    static QUEUE: Queue;
}

fn lock(queue: &Queue) -> std::sync::MutexGuard<'_, Vec<Queued>> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

fn script() -> &'static redis::Script {
    static SCRIPT: std::sync::LazyLock<redis::Script> =
        std::sync::LazyLock::new(|| redis::Script::new(PROBE_SCRIPT));
    &SCRIPT
}

/// Asks `probe` of `key`: batched with the other probes of the enclosing [`together`], or a call
/// of its own outside one.
pub async fn probe(redis: &Redis, key: String, probe: Probe) -> anyhow::Result<Probed> {
    let queue = QUEUE.try_with(Arc::clone).ok();
    let Some(queue) = queue else {
        let mut answers = call(redis, &[(key, probe)]).await?;
        return answers
            .pop()
            .ok_or_else(|| anyhow::anyhow!("redis answered no probe"));
    };
    let (answer, answered) = oneshot::channel();
    lock(&queue).push(Queued {
        redis: redis.clone(),
        key,
        probe,
        answer,
    });
    answered
        .await
        .map_err(|_| anyhow::anyhow!("the probe's call was dropped"))?
        .map_err(anyhow::Error::msg)
}

/// Runs `work`, sending the probes its concurrent branches make together (module docs).
pub fn together<F: Future>(work: F) -> Together<F> {
    Together {
        work: Box::pin(work),
        queue: Queue::default(),
        calls: FuturesUnordered::new(),
    }
}

/// The future of [`together`].
pub struct Together<F: Future> {
    work: Pin<Box<F>>,
    queue: Queue,
    calls: FuturesUnordered<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl<F: Future> Future for Together<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        loop {
            let polled = QUEUE.sync_scope(this.queue.clone(), || this.work.as_mut().poll(cx));
            if let Poll::Ready(output) = polled {
                return Poll::Ready(output);
            }
            let mut queued = std::mem::take(&mut *lock(&this.queue));
            while !queued.is_empty() {
                // One call per connection (in practice there is one).
                let redis = queued[0].redis.clone();
                let (same, rest): (Vec<_>, Vec<_>) = queued
                    .into_iter()
                    .partition(|entry| entry.redis.same_connection(&redis));
                queued = rest;
                this.calls.push(Box::pin(answer_all(redis, same)));
            }
            // A finished call has answered its probes, which woke `work`: poll it again now.
            let mut finished = false;
            while let Poll::Ready(Some(())) = this.calls.poll_next_unpin(cx) {
                finished = true;
            }
            if !finished {
                return Poll::Pending;
            }
        }
    }
}

async fn answer_all(redis: Redis, queued: Vec<Queued>) {
    let (probes, answers): (Vec<_>, Vec<_>) = queued
        .into_iter()
        .map(|entry| ((entry.key, entry.probe), entry.answer))
        .unzip();
    match call(&redis, &probes).await {
        Ok(results) => {
            for (answer, result) in answers.into_iter().zip(results) {
                // A probe whose caller left has nobody to answer.
                let _ = answer.send(Ok(result));
            }
        }
        Err(err) => {
            let message = format!("{err:#}");
            for answer in answers {
                let _ = answer.send(Err(message.clone()));
            }
        }
    }
}

/// One script call answering `probes`, in order.
async fn call(redis: &Redis, probes: &[(String, Probe)]) -> anyhow::Result<Vec<Probed>> {
    let mut invocation = script().prepare_invoke();
    for (key, probe) in probes {
        invocation.key(key).arg(
            probe
                .known
                .map_or_else(String::new, |known| known.to_string()),
        );
    }
    let reply: Vec<Value> = invocation.invoke_async(&mut redis.connection()).await?;
    anyhow::ensure!(
        reply.len() == probes.len(),
        "redis answered {} of {} probes",
        reply.len(),
        probes.len()
    );
    probes
        .iter()
        .zip(reply)
        .map(|(_, value)| decode(value))
        .collect()
}

fn decode(value: Value) -> anyhow::Result<Probed> {
    match value {
        Value::Int(1) => Ok(Probed::Unchanged),
        Value::Array(parts) => {
            let mut parts = parts.into_iter();
            let version = match parts.next() {
                Some(Value::BulkString(digits)) => Some(
                    std::str::from_utf8(&digits)
                        .ok()
                        .and_then(|digits| digits.parse().ok())
                        .ok_or_else(|| anyhow::anyhow!("a cache version that is not a number"))?,
                ),
                _ => None,
            };
            Ok(Probed::Changed {
                version,
                data: bulk(parts.next()),
            })
        }
        other => anyhow::bail!("unexpected probe reply from redis: {other:?}"),
    }
}

fn bulk(value: Option<Value>) -> Option<Bytes> {
    match value {
        Some(Value::BulkString(bytes)) => Some(Bytes::from(bytes)),
        _ => None,
    }
}
