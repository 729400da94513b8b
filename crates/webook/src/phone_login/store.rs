//! Where live login codes are kept, as keyed digests (never the code): the `sms_codes` table
//! when embedded, a Redis hash per phone and purpose in cluster mode. Each operation is atomic
//! on its own — one SQL statement (a conditional upsert, a conditional update) or one Lua
//! script — so concurrent sends and checks of one phone cannot interleave: of fifty checks of
//! a right code, exactly one is accepted.
//!
//! A code is `(digest, generation, attempts_left, sent_at, expires_at)`. Sending replaces it
//! unless the last was sent less than the resend interval ago; checking accepts a matching,
//! unexpired code with attempts left and kills it (attempts 0: it cannot be used twice), or
//! takes one attempt from it; a retry of an undelivered send replaces the digest of its own
//! generation only while that code is alive.

use std::time::Duration;

use anyhow::Context;
use platform::{
    db::{duration_millis, Db},
    redis::Redis,
};

/// Which code: a phone and what the code is for (`login`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeKey {
    /// Normalised phone number.
    pub phone: String,
    /// What the code is for.
    pub purpose: &'static str,
}

/// A new code to store.
#[derive(Debug, Clone)]
pub struct NewCode<'a> {
    /// Keyed digest of phone and code.
    pub digest: &'a str,
    /// Identifies this send (a random id).
    pub generation: &'a str,
    /// Wrong tries allowed.
    pub attempts: u32,
    /// Now (ms).
    pub now: i64,
    /// Validity.
    pub ttl: Duration,
    /// Least time since the last send.
    pub resend_interval: Duration,
}

/// What storing a new code did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Issued {
    /// Stored; it replaced any earlier code.
    Stored,
    /// The last code was sent too recently; the next may be sent after this long.
    TooSoon(Duration),
}

/// The live codes, in the mode's store.
#[derive(Clone)]
pub enum CodeStore {
    /// `sms_codes` (embedded).
    Sql(Db),
    /// Redis hashes `<prefix>:sms_code:<purpose>:<phone>` (cluster).
    Redis {
        /// The connection.
        redis: Redis,
        /// Key prefix.
        prefix: String,
        /// The three scripts.
        scripts: std::sync::Arc<Scripts>,
    },
}

impl std::fmt::Debug for CodeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sql(_) => "CodeStore::Sql",
            Self::Redis { .. } => "CodeStore::Redis",
        })
    }
}

/// The Lua scripts of the Redis store.
pub struct Scripts {
    issue: redis::Script,
    check: redis::Script,
    reissue: redis::Script,
}

/// Stores the code unless one was sent within the resend interval; returns 0, or the
/// milliseconds until a code may be sent. ARGV: digest, generation, attempts, now, resend, ttl.
const ISSUE_SCRIPT: &str = r"
local now = tonumber(ARGV[4])
local resend = tonumber(ARGV[5])
local sent = tonumber(redis.call('HGET', KEYS[1], 's'))
if sent and sent + resend > now then
  return sent + resend - now
end
local ttl = tonumber(ARGV[6])
redis.call('HSET', KEYS[1], 'h', ARGV[1], 'g', ARGV[2], 'a', ARGV[3], 's', now, 'e', now + ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return 0
";

/// 1 and the code killed when it matches and is alive; else one attempt taken (when alive)
/// and 0. A missing or expired code is 0 like a wrong one. ARGV: digest, now.
const CHECK_SCRIPT: &str = r"
local code = redis.call('HMGET', KEYS[1], 'h', 'a', 'e')
if not code[1] then return 0 end
local left = tonumber(code[2])
if left <= 0 or tonumber(code[3]) <= tonumber(ARGV[2]) then return 0 end
if code[1] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'a', 0)
  return 1
end
redis.call('HSET', KEYS[1], 'a', left - 1)
return 0
";

/// Replaces the digest of generation `ARGV[1]` with `ARGV[2]` while that code is alive; 1 if it
/// did. ARGV: generation, digest, now.
const REISSUE_SCRIPT: &str = r"
local code = redis.call('HMGET', KEYS[1], 'g', 'a', 'e')
if code[1] ~= ARGV[1] then return 0 end
if tonumber(code[2]) <= 0 or tonumber(code[3]) <= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], 'h', ARGV[2])
return 1
";

impl CodeStore {
    /// The embedded store.
    pub fn sql(db: Db) -> Self {
        Self::Sql(db)
    }

    /// The cluster store under `prefix`.
    pub fn redis(redis: Redis, prefix: &str) -> Self {
        Self::Redis {
            redis,
            prefix: prefix.to_owned(),
            scripts: std::sync::Arc::new(Scripts {
                issue: redis::Script::new(ISSUE_SCRIPT),
                check: redis::Script::new(CHECK_SCRIPT),
                reissue: redis::Script::new(REISSUE_SCRIPT),
            }),
        }
    }

    fn redis_key(prefix: &str, key: &CodeKey) -> String {
        format!("{prefix}:sms_code:{}:{}", key.purpose, key.phone)
    }

    /// Stores `code` for `key` unless the last was sent within its resend interval.
    pub async fn issue(&self, key: &CodeKey, code: &NewCode<'_>) -> anyhow::Result<Issued> {
        match self {
            Self::Sql(db) => {
                let resend_before = code.now - duration_millis(code.resend_interval);
                let stored: Vec<String> = sqlx::query_scalar(
                    "INSERT INTO sms_codes \
                     (phone, purpose, code_hash, generation, attempts_left, sent_at, expires_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (phone, purpose) DO UPDATE SET code_hash = excluded.code_hash, \
                     generation = excluded.generation, attempts_left = excluded.attempts_left, \
                     sent_at = excluded.sent_at, expires_at = excluded.expires_at \
                     WHERE sms_codes.sent_at <= $8 RETURNING generation",
                )
                .bind(&key.phone)
                .bind(key.purpose)
                .bind(code.digest)
                .bind(code.generation)
                .bind(i64::from(code.attempts))
                .bind(code.now)
                .bind(code.now + duration_millis(code.ttl))
                .bind(resend_before)
                // To completion: an autocommit's failed commit is reported only then
                // (platform::db).
                .fetch_all(db.writer())
                .await?;
                if !stored.is_empty() {
                    return Ok(Issued::Stored);
                }
                let sent_at: Option<i64> = sqlx::query_scalar(
                    "SELECT sent_at FROM sms_codes WHERE phone = $1 AND purpose = $2",
                )
                .bind(&key.phone)
                .bind(key.purpose)
                .fetch_optional(db.writer())
                .await?;
                let wait = sent_at.map_or(0, |sent| sent - resend_before).max(1);
                Ok(Issued::TooSoon(Duration::from_millis(
                    u64::try_from(wait).unwrap_or(1),
                )))
            }
            Self::Redis {
                redis,
                prefix,
                scripts,
            } => {
                let wait: i64 = scripts
                    .issue
                    .key(Self::redis_key(prefix, key))
                    .arg(code.digest)
                    .arg(code.generation)
                    .arg(code.attempts)
                    .arg(code.now)
                    .arg(duration_millis(code.resend_interval))
                    .arg(duration_millis(code.ttl).max(1))
                    .invoke_async(&mut redis.connection())
                    .await
                    .context("storing an SMS code in Redis")?;
                Ok(if wait <= 0 {
                    Issued::Stored
                } else {
                    Issued::TooSoon(Duration::from_millis(u64::try_from(wait).unwrap_or(1)))
                })
            }
        }
    }

    /// Whether `digest` is `key`'s live code: if so it is killed (used once); if not, a live
    /// code loses one attempt. Missing, expired, dead and wrong are all `false`.
    pub async fn check(&self, key: &CodeKey, digest: &str, now: i64) -> anyhow::Result<bool> {
        match self {
            Self::Sql(db) => {
                let mut tx = db.writer().begin().await?;
                let accepted = sqlx::query(
                    "UPDATE sms_codes SET attempts_left = 0 WHERE phone = $1 AND purpose = $2 \
                     AND code_hash = $3 AND attempts_left > 0 AND expires_at > $4",
                )
                .bind(&key.phone)
                .bind(key.purpose)
                .bind(digest)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1;
                if !accepted {
                    sqlx::query(
                        "UPDATE sms_codes SET attempts_left = attempts_left - 1 \
                         WHERE phone = $1 AND purpose = $2 AND attempts_left > 0 \
                         AND expires_at > $3",
                    )
                    .bind(&key.phone)
                    .bind(key.purpose)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(accepted)
            }
            Self::Redis {
                redis,
                prefix,
                scripts,
            } => {
                let accepted: i64 = scripts
                    .check
                    .key(Self::redis_key(prefix, key))
                    .arg(digest)
                    .arg(now)
                    .invoke_async(&mut redis.connection())
                    .await
                    .context("checking an SMS code in Redis")?;
                Ok(accepted == 1)
            }
        }
    }

    /// Replaces the digest of `generation` with `digest` while that code is alive (not used,
    /// killed, expired or replaced by a newer send); whether it did.
    pub async fn reissue(
        &self,
        key: &CodeKey,
        generation: &str,
        digest: &str,
        now: i64,
    ) -> anyhow::Result<bool> {
        match self {
            Self::Sql(db) => Ok(sqlx::query(
                "UPDATE sms_codes SET code_hash = $1 WHERE phone = $2 AND purpose = $3 \
                 AND generation = $4 AND attempts_left > 0 AND expires_at > $5",
            )
            .bind(digest)
            .bind(&key.phone)
            .bind(key.purpose)
            .bind(generation)
            .bind(now)
            .execute(db.writer())
            .await?
            .rows_affected()
                == 1),
            Self::Redis {
                redis,
                prefix,
                scripts,
            } => {
                let replaced: i64 = scripts
                    .reissue
                    .key(Self::redis_key(prefix, key))
                    .arg(generation)
                    .arg(digest)
                    .arg(now)
                    .invoke_async(&mut redis.connection())
                    .await
                    .context("replacing an SMS code in Redis")?;
                Ok(replaced == 1)
            }
        }
    }

    /// Deletes codes expired before `now` (SQL; Redis expires its own keys); how many.
    pub async fn purge_expired(&self, now: i64) -> anyhow::Result<u64> {
        match self {
            Self::Sql(db) => Ok(sqlx::query("DELETE FROM sms_codes WHERE expires_at <= $1")
                .bind(now)
                .execute(db.writer())
                .await?
                .rows_affected()),
            Self::Redis { .. } => Ok(0),
        }
    }
}
