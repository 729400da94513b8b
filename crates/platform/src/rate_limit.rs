//! Per-key rate limits ("at most N attempts per window"): sign-up and login per client address,
//! writes and comments per user, SMS codes per phone and per client, rewards per user, the SMS
//! budget of the whole site.
//!
//! Two implementations behind one type, chosen by mode:
//! - [`RateLimiter::local`]: in-process GCRA: a burst of N, refilled evenly over the window, so
//!   a client that used its N attempts gets all of them back after one window;
//! - [`RateLimiter::redis`]: a sliding-window log in a Redis sorted set, checked and updated by
//!   one Lua script using Redis's clock, so the limit holds across every instance.
//!
//! [`RateLimiter::check`] counts an attempt for good; [`RateLimiter::acquire`] counts it and
//! returns a [`Charge`] that the caller may [`Charge::refund`] when the attempt turned out not to
//! happen (an SMS code refused as "too soon" costs nothing). A rejected attempt answers
//! [`AppError::RateLimited`] with the time until the next attempt will be allowed (the
//! `Retry-After` header) and is counted in [`RATE_LIMITED_TOTAL`].
//!
//! If Redis is unreachable, the Redis limiter counts the attempt in an in-process limiter of the
//! same limit and window instead (each instance then holds the limit on its own: a dead Redis
//! neither locks everybody out nor lifts the limits), logs it and counts it in
//! [`RATE_LIMIT_FALLBACK_TOTAL`].

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::time::Instant;

use crate::{error::AppError, redis::Redis};

/// Counter: attempts rejected by a rate limiter, by `limiter` name.
pub const RATE_LIMITED_TOTAL: &str = "rate_limited_total";
/// Counter: attempts a Redis limiter counted in its in-process fallback because Redis was
/// unreachable, by `limiter` name.
pub const RATE_LIMIT_FALLBACK_TOTAL: &str = "rate_limit_fallback_total";

/// Describes this module's metrics (the recorder's installation calls it).
pub fn describe_metrics() {
    metrics::describe_counter!(
        RATE_LIMITED_TOTAL,
        "Attempts refused by a rate limit (HTTP 429), by limiter"
    );
    metrics::describe_counter!(
        RATE_LIMIT_FALLBACK_TOTAL,
        "Attempts a shared rate limit counted in this instance only because Redis was \
         unreachable, by limiter"
    );
}

/// Keys held before idle ones are purged (bounds memory under address churn).
const LOCAL_PURGE_THRESHOLD: usize = 10_000;

/// Sliding-window check: drops entries older than the window, admits and records the attempt
/// (member `ARGV[3]`) if fewer than the limit remain, else returns the milliseconds until the
/// oldest one expires.
const SLIDING_WINDOW_SCRIPT: &str = r"
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
  return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, tonumber(oldest[2]) + window - now)
";

/// A named limit of `limit` attempts per `window` per key.
#[derive(Clone)]
pub struct RateLimiter {
    name: &'static str,
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Local(Arc<Gcra>),
    Redis {
        redis: Redis,
        key_prefix: String,
        script: Arc<redis::Script>,
        limit: u32,
        window: Duration,
        /// Counts attempts while Redis is unreachable.
        fallback: Arc<Gcra>,
    },
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.backend {
            Backend::Local(_) => "local",
            Backend::Redis { .. } => "redis",
        };
        f.debug_struct("RateLimiter")
            .field("name", &self.name)
            .field("backend", &kind)
            .finish()
    }
}

/// One counted attempt. Dropping it keeps it counted; [`Charge::refund`] gives it back.
#[derive(Debug)]
pub struct Charge<'a> {
    limiter: &'a RateLimiter,
    key: String,
    taken: Taken,
}

#[derive(Debug)]
enum Taken {
    /// In an in-process limiter (the local backend, or the fallback of the Redis one).
    Local,
    /// In Redis, as this member of the key's sorted set.
    Redis(String),
}

impl Charge<'_> {
    /// Gives the attempt back, as if it had not been made.
    pub async fn refund(self) {
        match (&self.limiter.backend, self.taken) {
            (Backend::Local(gcra), _) => gcra.refund(&self.key),
            (Backend::Redis { fallback, .. }, Taken::Local) => fallback.refund(&self.key),
            (
                Backend::Redis {
                    redis, key_prefix, ..
                },
                Taken::Redis(member),
            ) => {
                let removed: Result<i64, _> = redis::cmd("ZREM")
                    .arg(format!("{key_prefix}{}", self.key))
                    .arg(member)
                    .query_async(&mut redis.connection())
                    .await;
                if let Err(err) = removed {
                    tracing::warn!(limiter = self.limiter.name, %err, "rate limiter refund lost");
                }
            }
        }
    }
}

impl RateLimiter {
    /// An in-process limiter. `limit` and `window` must be above zero (config validation).
    pub fn local(name: &'static str, limit: u32, window: Duration) -> anyhow::Result<Self> {
        Ok(Self {
            name,
            backend: Backend::Local(Arc::new(Gcra::new(name, limit, window)?)),
        })
    }

    /// A limiter shared by every instance through Redis; keys are
    /// `<redis_prefix>:ratelimit:<name>:<key>`. `limit` and `window` must be above zero.
    pub fn redis(
        name: &'static str,
        redis: Redis,
        redis_prefix: &str,
        limit: u32,
        window: Duration,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            name,
            backend: Backend::Redis {
                redis,
                key_prefix: format!("{redis_prefix}:ratelimit:{name}:"),
                script: Arc::new(redis::Script::new(SLIDING_WINDOW_SCRIPT)),
                limit,
                window,
                fallback: Arc::new(Gcra::new(name, limit, window)?),
            },
        })
    }

    /// The limiter of the mode: shared through `redis` (with its key prefix) in cluster mode,
    /// in-process without it.
    pub fn of_mode(
        name: &'static str,
        redis: Option<(&Redis, &str)>,
        limit: u32,
        window: Duration,
    ) -> anyhow::Result<Self> {
        match redis {
            Some((redis, prefix)) => Self::redis(name, redis.clone(), prefix, limit, window),
            None => Self::local(name, limit, window),
        }
    }

    /// [`RateLimiter::of_mode`] for a limit a setting may turn off: `None` when `limit` is 0.
    pub fn unless_off(
        name: &'static str,
        redis: Option<(&Redis, &str)>,
        limit: u32,
        window: Duration,
    ) -> anyhow::Result<Option<Self>> {
        (limit > 0)
            .then(|| Self::of_mode(name, redis, limit, window))
            .transpose()
    }

    /// The limiter's name (its metrics label).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Counts one attempt for `key` for good; `Err(RateLimited)` when over the limit.
    pub async fn check(&self, key: &str) -> Result<(), AppError> {
        self.acquire(key).await.map(drop)
    }

    /// Counts one attempt for `key`, refundable; `Err(RateLimited)` (nothing counted) when over
    /// the limit.
    pub async fn acquire(&self, key: &str) -> Result<Charge<'_>, AppError> {
        let outcome = match &self.backend {
            Backend::Local(gcra) => gcra.acquire(key).map(|()| Taken::Local),
            Backend::Redis {
                redis,
                key_prefix,
                script,
                limit,
                window,
                fallback,
            } => {
                let member = uuid::Uuid::new_v4().simple().to_string();
                let result: Result<u64, _> = script
                    .key(format!("{key_prefix}{key}"))
                    .arg(u64::try_from(window.as_millis()).unwrap_or(u64::MAX))
                    .arg(*limit)
                    .arg(&member)
                    .invoke_async(&mut redis.connection())
                    .await;
                match result {
                    Ok(0) => Ok(Taken::Redis(member)),
                    Ok(wait_ms) => Err(Duration::from_millis(wait_ms)),
                    Err(err) => {
                        tracing::warn!(
                            limiter = self.name,
                            %err,
                            "rate limiter's Redis unavailable; counting on this instance"
                        );
                        metrics::counter!(RATE_LIMIT_FALLBACK_TOTAL, "limiter" => self.name)
                            .increment(1);
                        fallback.acquire(key).map(|()| Taken::Local)
                    }
                }
            }
        };
        match outcome {
            Ok(taken) => Ok(Charge {
                limiter: self,
                key: key.to_owned(),
                taken,
            }),
            Err(retry_after) => {
                metrics::counter!(RATE_LIMITED_TOTAL, "limiter" => self.name).increment(1);
                Err(AppError::RateLimited { retry_after })
            }
        }
    }
}

/// The in-process limit: per key, the theoretical arrival time (TAT) of the next attempt; an
/// attempt is admitted while it would put the TAT at most one window ahead of now, and moves
/// it one period (window / limit) on. A refund moves it one period back.
struct Gcra {
    period: Duration,
    window: Duration,
    state: Mutex<Keys>,
}

struct Keys {
    tat: HashMap<String, Instant>,
    /// Purge idle keys when there are more than this many.
    purge_above: usize,
}

impl Gcra {
    fn new(name: &str, limit: u32, window: Duration) -> anyhow::Result<Self> {
        anyhow::ensure!(limit > 0, "{name}: limit 0");
        let period = window / limit;
        anyhow::ensure!(
            !period.is_zero(),
            "{name}: window too short for {limit} attempts"
        );
        Ok(Self {
            period,
            window: period * limit,
            state: Mutex::new(Keys {
                tat: HashMap::new(),
                purge_above: LOCAL_PURGE_THRESHOLD,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        // The map stays consistent whatever panicked while holding it: every change is one
        // insert or remove.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits one attempt, or says how long until one would be.
    fn acquire(&self, key: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let mut keys = self.lock();
        if keys.tat.len() > keys.purge_above {
            keys.tat.retain(|_, tat| *tat > now);
            keys.purge_above = (keys.tat.len() * 2).max(LOCAL_PURGE_THRESHOLD);
        }
        let tat = keys
            .tat
            .get(key)
            .copied()
            .filter(|tat| *tat > now)
            .unwrap_or(now);
        let next = tat + self.period;
        let ahead = next - now;
        if ahead > self.window {
            return Err(ahead - self.window);
        }
        keys.tat.insert(key.to_owned(), next);
        Ok(())
    }

    fn refund(&self, key: &str) {
        let now = Instant::now();
        let mut keys = self.lock();
        let Some(tat) = keys.tat.get_mut(key) else {
            return;
        };
        match tat.checked_sub(self.period) {
            Some(earlier) if earlier > now => *tat = earlier,
            _ => {
                keys.tat.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn refused(result: Result<(), Duration>) -> Duration {
        result.unwrap_err()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_the_limit_then_one_per_period_and_all_back_after_a_window() {
        let gcra = Gcra::new("test", 3, Duration::from_secs(30)).unwrap();
        for _ in 0..3 {
            gcra.acquire("a").unwrap();
        }
        assert_eq!(refused(gcra.acquire("a")), Duration::from_secs(10));
        // Other keys have limits of their own.
        gcra.acquire("b").unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
        gcra.acquire("a").unwrap();
        refused(gcra.acquire("a"));
        tokio::time::advance(Duration::from_secs(30)).await;
        for _ in 0..3 {
            gcra.acquire("a").unwrap();
        }
        refused(gcra.acquire("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refund_gives_one_attempt_back() {
        let gcra = Gcra::new("test", 2, Duration::from_secs(60)).unwrap();
        gcra.acquire("a").unwrap();
        gcra.acquire("a").unwrap();
        refused(gcra.acquire("a"));
        gcra.refund("a");
        gcra.acquire("a").unwrap();
        refused(gcra.acquire("a"));
        // Refunds never give more than the limit.
        for _ in 0..5 {
            gcra.refund("a");
        }
        gcra.acquire("a").unwrap();
        gcra.acquire("a").unwrap();
        refused(gcra.acquire("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_keys_are_purged_beyond_the_threshold() {
        let gcra = Gcra::new("test", 1, Duration::from_secs(1)).unwrap();
        for i in 0..=LOCAL_PURGE_THRESHOLD {
            gcra.acquire(&i.to_string()).unwrap();
        }
        tokio::time::advance(Duration::from_secs(2)).await;
        gcra.acquire("late").unwrap();
        gcra.acquire("later").unwrap();
        assert_eq!(gcra.lock().tat.len(), 2);
    }

    #[test]
    fn limits_of_zero_or_shorter_than_a_nanosecond_per_attempt_are_refused() {
        assert!(RateLimiter::local("test", 0, Duration::from_secs(1)).is_err());
        assert!(RateLimiter::local("test", 10, Duration::from_nanos(5)).is_err());
    }

    #[tokio::test]
    async fn a_charge_from_check_stays_and_a_refunded_one_does_not() {
        let limiter = RateLimiter::local("test", 1, Duration::from_secs(60)).unwrap();
        let charge = limiter.acquire("k").await.unwrap();
        assert!(limiter.check("k").await.is_err());
        charge.refund().await;
        limiter.check("k").await.unwrap();
        assert!(matches!(
            limiter.check("k").await,
            Err(AppError::RateLimited { .. })
        ));
    }
}
