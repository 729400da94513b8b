//! Session state behind the tokens: whether a session is revoked, and its refresh generation.
//!
//! A login creates a session id (`ssid`) at refresh generation 0 and stores nothing: sessions
//! that were never refreshed or revoked need no state. Then:
//! - **refresh** presents a refresh token of generation `g`. If `g` is the current generation the
//!   session moves to `g + 1` (the new refresh token's generation) atomically, so a refresh token
//!   works once. If `g` is older, somebody is replaying a used token: the whole session is revoked
//!   (both the thief's and the owner's tokens stop working) — OAuth's refresh-token reuse
//!   detection;
//! - **logout** revokes the session;
//! - every authenticated request checks "revoked?".
//!
//! State lives for the refresh-token lifetime, after which every token of the session has
//! expired anyway. Two implementations:
//! - [`SessionStore::local`] (embedded): an in-process map — the answer to "revoked?" costs no
//!   I/O — written through to the `sessions` table and reloaded at start, so a restart does not
//!   bring revoked sessions back. Processes sharing one SQLite file do not see each other's
//!   revocations until restart; embedded mode serves HTTP from one process.
//! - [`SessionStore::redis`] (cluster): one Redis hash per session with a TTL, changed by Lua
//!   scripts, so a logout on one instance rejects the token on every instance at once.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use sqlx::Row;

use crate::infra::{
    db::{now_millis, Db},
    redis::Redis,
};

/// Outcome of presenting a refresh token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// Accepted; the new refresh token carries this generation.
    Rotated {
        /// The session's new generation.
        generation: u64,
    },
    /// The token was already used: the session is now revoked.
    Reused,
    /// The session was revoked earlier (logout or reuse).
    Revoked,
}

/// Session state store (see the module docs); cheap to clone.
#[derive(Clone)]
pub struct SessionStore {
    backend: Backend,
    ttl: Duration,
}

#[derive(Clone)]
enum Backend {
    Local(Arc<LocalSessions>),
    Redis {
        redis: Redis,
        key_prefix: String,
        rotate: Arc<redis::Script>,
        revoke: Arc<redis::Script>,
    },
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.backend {
            Backend::Local(_) => "local",
            Backend::Redis { .. } => "redis",
        };
        f.debug_struct("SessionStore")
            .field("backend", &kind)
            .finish()
    }
}

#[derive(Debug, Clone, Copy)]
struct SessionState {
    uid: i64,
    generation: u64,
    revoked: bool,
    expires_at: i64,
}

struct LocalSessions {
    db: Db,
    states: Mutex<LocalStates>,
}

/// The in-process map, purged of expired entries whenever it has doubled since the last purge.
struct LocalStates {
    map: HashMap<String, SessionState>,
    purge_at_len: usize,
}

/// Smallest map size at which expired entries are purged.
const MIN_PURGE_LEN: usize = 1024;

/// Advances the generation if ARGV[1] is current; on an older one revokes the session.
/// Returns the new generation, -1 when already revoked, -2 on reuse.
const ROTATE_SCRIPT: &str = r"
if redis.call('HGET', KEYS[1], 'revoked') == '1' then return -1 end
local current = tonumber(redis.call('HGET', KEYS[1], 'gen') or '0')
if tonumber(ARGV[1]) ~= current then
  redis.call('HSET', KEYS[1], 'revoked', '1', 'uid', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return -2
end
redis.call('HSET', KEYS[1], 'gen', current + 1, 'uid', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return current + 1
";

const REVOKE_SCRIPT: &str = r"
redis.call('HSET', KEYS[1], 'revoked', '1', 'uid', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
";

impl SessionStore {
    /// The embedded store: loads unexpired state from `sessions` and purges expired rows.
    pub async fn local(db: Db, ttl: Duration) -> anyhow::Result<Self> {
        delete_expired_rows(&db, now_millis()).await?;
        let rows = sqlx::query("SELECT ssid, uid, generation, revoked, expires_at FROM sessions")
            .fetch_all(db.pool())
            .await
            .context("loading sessions")?;
        let mut states = HashMap::with_capacity(rows.len());
        for row in rows {
            let generation: i64 = row.try_get("generation")?;
            let revoked: i64 = row.try_get("revoked")?;
            states.insert(
                row.try_get::<String, _>("ssid")?,
                SessionState {
                    uid: row.try_get("uid")?,
                    generation: u64::try_from(generation).unwrap_or(0),
                    revoked: revoked != 0,
                    expires_at: row.try_get("expires_at")?,
                },
            );
        }
        Ok(Self {
            backend: Backend::Local(Arc::new(LocalSessions {
                db,
                states: Mutex::new(LocalStates {
                    purge_at_len: (states.len() * 2).max(MIN_PURGE_LEN),
                    map: states,
                }),
            })),
            ttl,
        })
    }

    /// The cluster store on `redis`; keys are `<redis_prefix>:session:<ssid>`.
    pub fn redis(redis: Redis, redis_prefix: &str, ttl: Duration) -> Self {
        Self {
            backend: Backend::Redis {
                redis,
                key_prefix: format!("{redis_prefix}:session:"),
                rotate: Arc::new(redis::Script::new(ROTATE_SCRIPT)),
                revoke: Arc::new(redis::Script::new(REVOKE_SCRIPT)),
            },
            ttl,
        }
    }

    fn ttl_millis(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Whether `ssid` was revoked.
    pub async fn is_revoked(&self, ssid: &str) -> anyhow::Result<bool> {
        match &self.backend {
            Backend::Local(local) => Ok(local.with_states(|states| {
                states
                    .get(ssid)
                    .is_some_and(|state| state.revoked && state.expires_at > now_millis())
            })),
            Backend::Redis {
                redis, key_prefix, ..
            } => {
                let revoked: Option<String> = redis::cmd("HGET")
                    .arg(format!("{key_prefix}{ssid}"))
                    .arg("revoked")
                    .query_async(&mut redis.connection())
                    .await?;
                Ok(revoked.as_deref() == Some("1"))
            }
        }
    }

    /// Presents a refresh token of generation `presented` for session `ssid` of user `uid`.
    pub async fn rotate(&self, ssid: &str, uid: i64, presented: u64) -> anyhow::Result<Rotation> {
        match &self.backend {
            Backend::Local(local) => {
                let now = now_millis();
                let expires_at = now.saturating_add(self.ttl_millis());
                let (rotation, state) = local.with_states(|states| {
                    let state = states.entry(ssid.to_owned()).or_insert(SessionState {
                        uid,
                        generation: 0,
                        revoked: false,
                        expires_at,
                    });
                    let rotation = if state.revoked {
                        Rotation::Revoked
                    } else if state.generation != presented {
                        state.revoked = true;
                        Rotation::Reused
                    } else {
                        state.generation += 1;
                        Rotation::Rotated {
                            generation: state.generation,
                        }
                    };
                    state.expires_at = expires_at;
                    (rotation, *state)
                });
                if rotation != Rotation::Revoked {
                    local.persist(ssid, state).await?;
                }
                Ok(rotation)
            }
            Backend::Redis {
                redis,
                key_prefix,
                rotate,
                ..
            } => {
                let outcome: i64 = rotate
                    .key(format!("{key_prefix}{ssid}"))
                    .arg(presented)
                    .arg(self.ttl_millis())
                    .arg(uid)
                    .invoke_async(&mut redis.connection())
                    .await?;
                Ok(match outcome {
                    -1 => Rotation::Revoked,
                    -2 => Rotation::Reused,
                    generation => Rotation::Rotated {
                        generation: u64::try_from(generation)
                            .context("negative session generation")?,
                    },
                })
            }
        }
    }

    /// Revokes session `ssid` of user `uid`: its access and refresh tokens stop working.
    pub async fn revoke(&self, ssid: &str, uid: i64) -> anyhow::Result<()> {
        match &self.backend {
            Backend::Local(local) => {
                let expires_at = now_millis().saturating_add(self.ttl_millis());
                let state = local.with_states(|states| {
                    let state = states.entry(ssid.to_owned()).or_insert(SessionState {
                        uid,
                        generation: 0,
                        revoked: true,
                        expires_at,
                    });
                    state.revoked = true;
                    state.expires_at = expires_at;
                    *state
                });
                local.persist(ssid, state).await
            }
            Backend::Redis {
                redis,
                key_prefix,
                revoke,
                ..
            } => {
                let _: i64 = revoke
                    .key(format!("{key_prefix}{ssid}"))
                    .arg(self.ttl_millis())
                    .arg(uid)
                    .invoke_async(&mut redis.connection())
                    .await?;
                Ok(())
            }
        }
    }
}

impl SessionStore {
    /// Drops state of sessions whose every token has expired: rows of `sessions` and entries of
    /// the in-process map (embedded). Redis expires its keys itself, so in cluster mode this does
    /// nothing. Returns the number of rows deleted.
    pub async fn purge_expired(&self) -> anyhow::Result<u64> {
        let Backend::Local(local) = &self.backend else {
            return Ok(0);
        };
        let now = now_millis();
        let deleted = delete_expired_rows(&local.db, now).await?;
        local.with_states(|states| states.retain(|_, state| state.expires_at > now));
        Ok(deleted)
    }
}

/// Deletes the `sessions` rows expired at `now` (ms).
async fn delete_expired_rows(db: &Db, now: i64) -> anyhow::Result<u64> {
    Ok(sqlx::query("DELETE FROM sessions WHERE expires_at <= $1")
        .bind(now)
        .execute(db.writer())
        .await
        .context("purging expired sessions")?
        .rows_affected())
}

impl LocalSessions {
    /// Runs `f` on the map, first dropping expired entries when the map has doubled since the
    /// last purge. The lock is never held across an `.await`.
    fn with_states<T>(&self, f: impl FnOnce(&mut HashMap<String, SessionState>) -> T) -> T {
        let mut states = self
            .states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if states.map.len() >= states.purge_at_len {
            let now = now_millis();
            states.map.retain(|_, state| state.expires_at > now);
            states.purge_at_len = (states.map.len() * 2).max(MIN_PURGE_LEN);
        }
        f(&mut states.map)
    }

    /// Writes `state` through to SQL. Concurrent writers may finish out of order, so the upsert
    /// never moves a generation backwards nor un-revokes.
    async fn persist(&self, ssid: &str, state: SessionState) -> anyhow::Result<()> {
        sqlx::query(
            "INSERT INTO sessions (ssid, uid, generation, revoked, expires_at) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (ssid) DO UPDATE SET \
               generation = CASE WHEN excluded.generation > sessions.generation \
                            THEN excluded.generation ELSE sessions.generation END, \
               revoked = CASE WHEN excluded.revoked > sessions.revoked \
                         THEN excluded.revoked ELSE sessions.revoked END, \
               expires_at = CASE WHEN excluded.expires_at > sessions.expires_at \
                            THEN excluded.expires_at ELSE sessions.expires_at END",
        )
        .bind(ssid)
        .bind(state.uid)
        .bind(i64::try_from(state.generation).unwrap_or(i64::MAX))
        .bind(i64::from(state.revoked))
        .bind(state.expires_at)
        .execute(self.db.writer())
        .await
        .context("saving session state")?;
        Ok(())
    }
}
