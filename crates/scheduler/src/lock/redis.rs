//! Locks in Redis, for any number of processes.
//!
//! - acquire: one Lua script runs `SET lock owner NX PX ttl` and, only if that set the key,
//!   `INCR fence` — so a fencing token is issued exactly once per real acquisition. When the
//!   caller claims a fire time, the script first refuses if `tick` already holds that time or a
//!   later one, and records it on success;
//! - extend: `PEXPIRE` only if the key still holds our owner token (compare-and-extend);
//! - release: `DEL` only if the key still holds our owner token (compare-and-delete), so a holder
//!   whose lock expired cannot delete its successor's lock.
//!
//! Keys are `<prefix>{<key>}`, `<prefix>{<key>}:fence` and `<prefix>{<key>}:tick`: the braces are a Redis Cluster hash
//! tag, keeping the keys of one lock in one slot as the script requires. The fence counter and
//! the claimed tick never expire (two small keys per job).

use std::{sync::LazyLock, time::Duration};

use async_trait::async_trait;
use redis::{aio::ConnectionManager, Script};

use super::{Grant, LockBackend, LockError};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if ARGV[3] ~= '' then
            local claimed = redis.call('GET', KEYS[3])
            if claimed and tonumber(claimed) >= tonumber(ARGV[3]) then
              return 0
            end
          end
          if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
            if ARGV[3] ~= '' then
              redis.call('SET', KEYS[3], ARGV[3])
            end
            return redis.call('INCR', KEYS[2])
          end
          return 0",
    )
});

static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('GET', KEYS[1]) == ARGV[1] then
            return redis.call('PEXPIRE', KEYS[1], ARGV[2])
          end
          return 0",
    )
});

static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('GET', KEYS[1]) == ARGV[1] then
            return redis.call('DEL', KEYS[1])
          end
          return 0",
    )
});

/// Redis [`LockBackend`].
#[derive(Clone)]
pub struct RedisLocks {
    connection: ConnectionManager,
    prefix: String,
}

impl std::fmt::Debug for RedisLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLocks")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisLocks {
    /// Locks stored under `prefix` (e.g. `"myapp:lock:"`) on `connection`.
    pub fn new(connection: ConnectionManager, prefix: impl Into<String>) -> Self {
        Self {
            connection,
            prefix: prefix.into(),
        }
    }

    fn lock_key(&self, key: &str) -> String {
        format!("{}{{{key}}}", self.prefix)
    }

    fn fence_key(&self, key: &str) -> String {
        format!("{}{{{key}}}:fence", self.prefix)
    }

    fn tick_key(&self, key: &str) -> String {
        format!("{}{{{key}}}:tick", self.prefix)
    }
}

fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn backend_error(err: redis::RedisError) -> LockError {
    LockError(err.into())
}

#[async_trait]
impl LockBackend for RedisLocks {
    async fn try_acquire(
        &self,
        key: &str,
        ttl: Duration,
        tick: Option<i64>,
    ) -> Result<Option<Grant>, LockError> {
        let owner = uuid::Uuid::new_v4().to_string();
        let mut connection = self.connection.clone();
        let fencing_token: u64 = ACQUIRE
            .key(self.lock_key(key))
            .key(self.fence_key(key))
            .key(self.tick_key(key))
            .arg(&owner)
            .arg(ttl_millis(ttl))
            .arg(tick.map(|tick| tick.to_string()).unwrap_or_default())
            .invoke_async(&mut connection)
            .await
            .map_err(backend_error)?;
        Ok((fencing_token > 0).then_some(Grant {
            owner,
            fencing_token,
        }))
    }

    async fn extend(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, LockError> {
        let mut connection = self.connection.clone();
        let extended: i64 = EXTEND
            .key(self.lock_key(key))
            .arg(owner)
            .arg(ttl_millis(ttl))
            .invoke_async(&mut connection)
            .await
            .map_err(backend_error)?;
        Ok(extended == 1)
    }

    async fn release(&self, key: &str, owner: &str) -> Result<bool, LockError> {
        let mut connection = self.connection.clone();
        let released: i64 = RELEASE
            .key(self.lock_key(key))
            .arg(owner)
            .invoke_async(&mut connection)
            .await
            .map_err(backend_error)?;
        Ok(released == 1)
    }
}
