//! Per-key rate limits ("at most N attempts per window"), used for sign-up and login per client
//! IP.
//!
//! Two implementations behind one type, chosen by mode:
//! - [`RateLimiter::local`]: in-process GCRA (`governor`): a burst of N, refilled evenly over the
//!   window, so a client that used its N attempts gets all of them back after one window;
//! - [`RateLimiter::redis`]: a sliding-window log in a Redis sorted set, checked and updated by
//!   one Lua script using Redis's clock, so the limit holds across every instance.
//!
//! A rejected attempt answers [`AppError::RateLimited`] with the time until the next attempt
//! will be allowed (the `Retry-After` header). If Redis is unreachable the limiter lets the
//! attempt through and logs it: a dead Redis must not lock everybody out of logging in.

use std::{num::NonZeroU32, sync::Arc, time::Duration};

use governor::{
    clock::{Clock, DefaultClock},
    DefaultKeyedRateLimiter, Quota,
};

use crate::{error::AppError, redis::Redis};

/// Counter: attempts rejected by a rate limiter, by `limiter` name.
pub const RATE_LIMITED_TOTAL: &str = "rate_limited_total";

/// Keyed state entries kept before idle keys are purged (bounds memory under IP churn).
const LOCAL_PURGE_THRESHOLD: usize = 10_000;

/// Sliding-window check: drops entries older than the window, admits and records the attempt if
/// fewer than the limit remain, else returns the milliseconds until the oldest one expires.
const SLIDING_WINDOW_SCRIPT: &str = r"
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, now .. '-' .. ARGV[3])
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
    Local(Arc<DefaultKeyedRateLimiter<String>>),
    Redis {
        redis: Redis,
        key_prefix: String,
        script: Arc<redis::Script>,
        limit: u32,
        window: Duration,
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

impl RateLimiter {
    /// An in-process limiter. `limit` and `window` must be above zero (config validation).
    pub fn local(name: &'static str, limit: u32, window: Duration) -> anyhow::Result<Self> {
        let burst = NonZeroU32::new(limit).ok_or_else(|| anyhow::anyhow!("{name}: limit 0"))?;
        let period = window / limit;
        let quota = Quota::with_period(period)
            .ok_or_else(|| anyhow::anyhow!("{name}: window too short for {limit} attempts"))?
            .allow_burst(burst);
        Ok(Self {
            name,
            backend: Backend::Local(Arc::new(DefaultKeyedRateLimiter::keyed(quota))),
        })
    }

    /// A limiter shared by every instance through Redis; keys are
    /// `<redis_prefix>:ratelimit:<name>:<key>`.
    pub fn redis(
        name: &'static str,
        redis: Redis,
        redis_prefix: &str,
        limit: u32,
        window: Duration,
    ) -> Self {
        Self {
            name,
            backend: Backend::Redis {
                redis,
                key_prefix: format!("{redis_prefix}:ratelimit:{name}:"),
                script: Arc::new(redis::Script::new(SLIDING_WINDOW_SCRIPT)),
                limit,
                window,
            },
        }
    }

    /// Counts one attempt for `key`; `Err(RateLimited)` when over the limit.
    pub async fn check(&self, key: &str) -> Result<(), AppError> {
        let wait = match &self.backend {
            Backend::Local(limiter) => {
                if limiter.len() > LOCAL_PURGE_THRESHOLD {
                    limiter.retain_recent();
                }
                limiter
                    .check_key(&key.to_owned())
                    .err()
                    .map(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
            }
            Backend::Redis {
                redis,
                key_prefix,
                script,
                limit,
                window,
            } => {
                let redis_key = format!("{key_prefix}{key}");
                let attempt_id = uuid::Uuid::new_v4().simple().to_string();
                let result: Result<u64, _> = script
                    .key(redis_key)
                    .arg(u64::try_from(window.as_millis()).unwrap_or(u64::MAX))
                    .arg(*limit)
                    .arg(attempt_id)
                    .invoke_async(&mut redis.connection())
                    .await;
                match result {
                    Ok(0) => None,
                    Ok(wait_ms) => Some(Duration::from_millis(wait_ms)),
                    Err(err) => {
                        tracing::warn!(limiter = self.name, %err, "rate limiter unavailable; allowing");
                        None
                    }
                }
            }
        };
        match wait {
            None => Ok(()),
            Some(retry_after) => {
                metrics::counter!(RATE_LIMITED_TOTAL, "limiter" => self.name).increment(1);
                Err(AppError::RateLimited { retry_after })
            }
        }
    }
}
