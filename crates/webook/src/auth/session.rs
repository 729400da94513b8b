//! Session state behind the tokens: whether a session is revoked, and its refresh generation.
//!
//! A login creates a session id (`ssid`) at refresh generation 0 and stores nothing: sessions
//! that were never refreshed or revoked need no state. Then:
//! - **refresh** presents a refresh token of generation `g`. If `g` is the current generation the
//!   session moves to `g + 1` (the new refresh token's generation) atomically, so a refresh token
//!   works once. If `g` is older, somebody is replaying a used token: the whole session is revoked
//!   (both the thief's and the owner's tokens stop working) — OAuth's refresh-token reuse
//!   detection. One exception, the retry window (`refresh_retry_window`, 30 s by default): the
//!   token of the generation just left, presented again within the window after that refresh,
//!   gets tokens of the current generation without moving it ([`Rotation::Repeated`]). That is a
//!   client whose answer was lost — a tab reloaded or closed while its refresh was on the way
//!   (the browser drops the answer, the server has rotated), a connection dropped — and it kept
//!   the old token; without the window its next refresh logged the user out. The window starts
//!   at the rotation and is not extended by a repeat, so a thief holding the previous token has
//!   those seconds at most, and any older token still revokes;
//! - **logout** revokes the session;
//! - every authenticated request checks "revoked?".
//!
//! **The database is the truth** in both modes: table `sessions`, changed by single conditional
//! statements ([`rotate_in_db`], [`revoke_in_db`]), so the outcome of a refresh is decided by the
//! database and memory or Redis only ever follow a committed change. A refresh whose write fails
//! changes nothing anywhere, so the client's retry with the same token is a normal refresh, not a
//! reuse (an earlier version advanced memory first and logged the user out on the retry).
//!
//! How "revoked?" is answered without a query per request:
//! - [`SessionStore::local`] (embedded, one server per database): an in-process map of the
//!   sessions with state, loaded at start and updated after each committed change;
//! - [`SessionStore::cluster`]: Redis caches each session's flag (`<prefix>:session:<ssid>`,
//!   field `revoked`, `"1"` or `"0"`). A miss reads the database and fills the flag only if the
//!   key is still absent (`HSETNX`), so a revocation written meanwhile is never overwritten by a
//!   stale "0"; "0" lives [`NOT_REVOKED_TTL`], "1" until the session's tokens expire. A logout
//!   commits to the database, then sets the flag; if Redis cannot take it, the flag is retried in
//!   the background until it can (a Redis restarted with stale data is corrected within a second
//!   of answering). While Redis is unreachable, "revoked?" reads the database, with answers kept
//!   [`FALLBACK_TTL`] in-process: sessions survive a Redis restart or outage, and the
//!   authenticated API keeps serving.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;

use platform::{
    db::{now_millis, Db},
    redis::Redis,
};

/// How long Redis keeps a "not revoked" flag: the longest a revocation whose Redis write was
/// lost (with the instance that made it) can go unseen by other instances.
pub const NOT_REVOKED_TTL: Duration = Duration::from_secs(60);
/// How long an instance keeps the database's answer while Redis is unreachable.
pub const FALLBACK_TTL: Duration = Duration::from_secs(2);
/// How often flags that Redis could not take are retried.
const RETRY_INTERVAL: Duration = Duration::from_millis(500);

/// Sets the flag only if the session has none (a revocation set meanwhile stays), with its TTL.
const FILL_SCRIPT: &str = r"
if redis.call('HSETNX', KEYS[1], 'revoked', ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
";

/// Outcome of presenting a refresh token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// Accepted; the new refresh token carries this generation.
    Rotated {
        /// The session's new generation.
        generation: u64,
    },
    /// The token of the generation just left, within the retry window of that rotation: the
    /// first answer was lost. The new refresh token carries the current generation again.
    Repeated {
        /// The session's current generation (unchanged).
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
    db: Db,
    cache: Cache,
    ttl: Duration,
    retry_window: Duration,
}

#[derive(Clone)]
enum Cache {
    /// Embedded: the sessions with state, by ssid → (revoked, expires_at).
    Local(Arc<Mutex<LocalStates>>),
    /// Cluster: Redis, with a database fallback.
    Redis(Arc<RedisFlags>),
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.cache {
            Cache::Local(_) => "local",
            Cache::Redis(_) => "redis",
        };
        f.debug_struct("SessionStore")
            .field("cache", &kind)
            .finish()
    }
}

/// The in-process map, purged of expired entries whenever it has doubled since the last purge.
struct LocalStates {
    revoked: HashMap<String, (bool, i64)>,
    purge_at_len: usize,
}

/// Smallest map size at which expired entries are purged.
const MIN_PURGE_LEN: usize = 1024;

struct RedisFlags {
    redis: Redis,
    key_prefix: String,
    fill: redis::Script,
    /// Database answers while Redis is unreachable: ssid → (revoked, when read).
    fallback: Mutex<HashMap<String, (bool, tokio::time::Instant)>>,
    /// Revocations committed to the database that Redis has not taken yet.
    pending: Mutex<HashSet<String>>,
    retrier: std::sync::OnceLock<()>,
}

impl SessionStore {
    /// The embedded store: loads the state of unexpired sessions from `sessions` and purges
    /// expired rows. Sessions live `ttl`; a used refresh token may be repeated within
    /// `retry_window` of its refresh (module docs).
    pub async fn local(db: Db, ttl: Duration, retry_window: Duration) -> anyhow::Result<Self> {
        delete_expired_rows(&db, now_millis()).await?;
        let rows: Vec<(String, i64, i64)> =
            sqlx::query_as("SELECT ssid, revoked, expires_at FROM sessions")
                .fetch_all(db.pool())
                .await
                .context("loading sessions")?;
        let mut revoked = HashMap::with_capacity(rows.len());
        for (ssid, flag, expires_at) in rows {
            revoked.insert(ssid, (flag != 0, expires_at));
        }
        Ok(Self {
            db,
            cache: Cache::Local(Arc::new(Mutex::new(LocalStates {
                purge_at_len: (revoked.len() * 2).max(MIN_PURGE_LEN),
                revoked,
            }))),
            ttl,
            retry_window,
        })
    }

    /// The cluster store: the database, with flags cached in `redis` under
    /// `<redis_prefix>:session:<ssid>`; `ttl` and `retry_window` as in [`Self::local`].
    pub fn cluster(
        db: Db,
        redis: Redis,
        redis_prefix: &str,
        ttl: Duration,
        retry_window: Duration,
    ) -> Self {
        Self {
            db,
            cache: Cache::Redis(Arc::new(RedisFlags {
                redis,
                key_prefix: format!("{redis_prefix}:session:"),
                fill: redis::Script::new(FILL_SCRIPT),
                fallback: Mutex::new(HashMap::new()),
                pending: Mutex::new(HashSet::new()),
                retrier: std::sync::OnceLock::new(),
            })),
            ttl,
            retry_window,
        }
    }

    fn expires_at(&self) -> i64 {
        now_millis().saturating_add(i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX))
    }

    /// Whether `ssid` was revoked.
    pub async fn is_revoked(&self, ssid: &str) -> anyhow::Result<bool> {
        match &self.cache {
            Cache::Local(states) => Ok(lock(states)
                .revoked
                .get(ssid)
                .is_some_and(|(revoked, expires_at)| *revoked && *expires_at > now_millis())),
            Cache::Redis(flags) => flags.is_revoked(&self.db, ssid, self.ttl).await,
        }
    }

    /// Presents a refresh token of generation `presented` for session `ssid` of user `uid`.
    pub async fn rotate(&self, ssid: &str, uid: i64, presented: u64) -> anyhow::Result<Rotation> {
        let expires_at = self.expires_at();
        let retry_window = i64::try_from(self.retry_window.as_millis()).unwrap_or(i64::MAX);
        let rotation = rotate_in_db(
            &self.db,
            ssid,
            uid,
            presented,
            expires_at,
            now_millis(),
            retry_window,
        )
        .await?;
        if rotation == Rotation::Reused {
            self.cache_revocation(ssid, expires_at).await;
        }
        Ok(rotation)
    }

    /// Revokes session `ssid` of user `uid`: its access and refresh tokens stop working.
    pub async fn revoke(&self, ssid: &str, uid: i64) -> anyhow::Result<()> {
        let expires_at = self.expires_at();
        revoke_in_db(&self.db, ssid, uid, expires_at).await?;
        self.cache_revocation(ssid, expires_at).await;
        Ok(())
    }

    /// Makes the cache say "revoked" after the database does.
    async fn cache_revocation(&self, ssid: &str, expires_at: i64) {
        match &self.cache {
            Cache::Local(states) => {
                let mut states = lock(states);
                if states.revoked.len() >= states.purge_at_len {
                    let now = now_millis();
                    states.revoked.retain(|_, (_, expires)| *expires > now);
                    states.purge_at_len = (states.revoked.len() * 2).max(MIN_PURGE_LEN);
                }
                states.revoked.insert(ssid.to_owned(), (true, expires_at));
            }
            Cache::Redis(flags) => flags.revoked(ssid, self.ttl).await,
        }
    }

    /// Drops state of sessions whose every token has expired: rows of `sessions` and entries of
    /// the in-process map (Redis expires its keys itself). Returns the number of rows deleted.
    pub async fn purge_expired(&self) -> anyhow::Result<u64> {
        let now = now_millis();
        let deleted = delete_expired_rows(&self.db, now).await?;
        if let Cache::Local(states) = &self.cache {
            lock(states)
                .revoked
                .retain(|_, (_, expires)| *expires > now);
        }
        Ok(deleted)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RedisFlags {
    fn key(&self, ssid: &str) -> String {
        format!("{}{ssid}", self.key_prefix)
    }

    async fn is_revoked(&self, db: &Db, ssid: &str, ttl: Duration) -> anyhow::Result<bool> {
        let key = self.key(ssid);
        let cached: redis::RedisResult<Option<String>> = redis::cmd("HGET")
            .arg(&key)
            .arg("revoked")
            .query_async(&mut self.redis.connection())
            .await;
        match cached {
            Ok(Some(flag)) => Ok(flag == "1"),
            Ok(None) => {
                let revoked = revoked_in_db(db, ssid).await?;
                // Only into an absent field: a revocation set meanwhile stays.
                let ttl = if revoked { ttl } else { NOT_REVOKED_TTL };
                let filled: redis::RedisResult<i64> = self
                    .fill
                    .key(&key)
                    .arg(if revoked { "1" } else { "0" })
                    .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
                    .invoke_async(&mut self.redis.connection())
                    .await;
                if let Err(err) = filled {
                    tracing::debug!(%err, "cannot cache a session flag");
                }
                Ok(revoked)
            }
            Err(err) => {
                tracing::debug!(%err, "redis unreachable; checking the session in the database");
                if let Some((revoked, read_at)) = lock(&self.fallback).get(ssid).copied() {
                    if read_at.elapsed() < FALLBACK_TTL {
                        return Ok(revoked);
                    }
                }
                let revoked = revoked_in_db(db, ssid).await?;
                let mut fallback = lock(&self.fallback);
                if fallback.len() > 100_000 {
                    fallback.retain(|_, (_, read_at)| read_at.elapsed() < FALLBACK_TTL);
                }
                fallback.insert(ssid.to_owned(), (revoked, tokio::time::Instant::now()));
                Ok(revoked)
            }
        }
    }

    /// Sets the flag of a session the database says is revoked, or keeps retrying until Redis
    /// takes it.
    async fn revoked(self: &Arc<Self>, ssid: &str, ttl: Duration) {
        lock(&self.fallback).insert(ssid.to_owned(), (true, tokio::time::Instant::now()));
        if let Err(err) = self.set_revoked(ssid, ttl).await {
            tracing::warn!(%err, ssid, "redis did not take a revocation; retrying in the background");
            lock(&self.pending).insert(ssid.to_owned());
            self.start_retrier(ttl);
        }
    }

    async fn set_revoked(&self, ssid: &str, ttl: Duration) -> redis::RedisResult<()> {
        let key = self.key(ssid);
        redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg(&key)
            .arg("revoked")
            .arg("1")
            .ignore()
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            .ignore()
            .query_async(&mut self.redis.connection())
            .await
    }

    /// One task per store, started at the first revocation Redis refused: retries the pending
    /// ones every [`RETRY_INTERVAL`].
    fn start_retrier(self: &Arc<Self>, ttl: Duration) {
        let flags = Arc::downgrade(self);
        self.retrier.get_or_init(|| {
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(RETRY_INTERVAL).await;
                    let Some(flags) = flags.upgrade() else { return };
                    let pending: Vec<String> = lock(&flags.pending).iter().cloned().collect();
                    for ssid in pending {
                        if flags.set_revoked(&ssid, ttl).await.is_ok() {
                            lock(&flags.pending).remove(&ssid);
                            tracing::info!(ssid, "redis took a pending revocation");
                        }
                    }
                }
            });
        });
    }
}

/// Whether the database says `ssid` is revoked (a session without state is not).
async fn revoked_in_db(db: &Db, ssid: &str) -> anyhow::Result<bool> {
    let revoked: Option<i64> =
        sqlx::query_scalar("SELECT revoked FROM sessions WHERE ssid = $1 AND expires_at > $2")
            .bind(ssid)
            .bind(now_millis())
            .fetch_optional(db.pool())
            .await
            .context("reading session state")?;
    Ok(revoked.unwrap_or(0) != 0)
}

/// Decides a refresh in the database at `now` (ms), each step one conditional statement: the
/// session row exists (generation 0 if new); then either its generation moves from `presented`
/// to the next (rotated, `rotated_at` = `now`), or `presented` is the generation just left and
/// that rotation is less than `retry_window` ms old (repeated: the current generation again,
/// nothing moves), or, still unrevoked, it is revoked (reuse); otherwise it was revoked already.
/// Two refreshes racing with one token: one rotates, the other repeats within the window.
pub async fn rotate_in_db(
    db: &Db,
    ssid: &str,
    uid: i64,
    presented: u64,
    expires_at: i64,
    now: i64,
    retry_window: i64,
) -> anyhow::Result<Rotation> {
    let presented = i64::try_from(presented).context("refresh generation out of range")?;
    sqlx::query(
        "INSERT INTO sessions (ssid, uid, generation, revoked, expires_at) \
         VALUES ($1, $2, 0, 0, $3) ON CONFLICT (ssid) DO NOTHING",
    )
    .bind(ssid)
    .bind(uid)
    .bind(expires_at)
    .execute(db.writer())
    .await
    .context("saving session state")?;
    let rotated = update_generation(
        db,
        "UPDATE sessions SET generation = generation + 1, expires_at = $3, rotated_at = $4 \
         WHERE ssid = $1 AND revoked = 0 AND generation = $2 RETURNING generation",
        (ssid, presented, expires_at, now),
    )
    .await?;
    if let Some(generation) = rotated {
        return Ok(Rotation::Rotated { generation });
    }
    // The answer to the rotation away from `presented` may have been lost: within the window
    // the same token gets the current generation again. `rotated_at` stays, so repeats never
    // stretch the window.
    let repeated = update_generation(
        db,
        "UPDATE sessions SET expires_at = $3 \
         WHERE ssid = $1 AND revoked = 0 AND generation = $2 + 1 AND rotated_at > $4 \
         RETURNING generation",
        (
            ssid,
            presented,
            expires_at,
            now.saturating_sub(retry_window),
        ),
    )
    .await?;
    if let Some(generation) = repeated {
        return Ok(Rotation::Repeated { generation });
    }
    let reused = sqlx::query(
        "UPDATE sessions SET revoked = 1, expires_at = $2 WHERE ssid = $1 AND revoked = 0",
    )
    .bind(ssid)
    .bind(expires_at)
    .execute(db.writer())
    .await
    .context("saving session state")?
    .rows_affected();
    Ok(if reused > 0 {
        Rotation::Reused
    } else {
        Rotation::Revoked
    })
}

/// Runs one of [`rotate_in_db`]'s conditional updates — `sql` binds `$1` ssid, `$2` the presented
/// generation, `$3` the new expiry, `$4` a time (ms) — and returns the session's generation if
/// it matched. Run to completion (`fetch_all`): its commit's failure (a full disk) is reported
/// only then, and a rotation answered but never saved would leave the used token working too.
async fn update_generation(
    db: &Db,
    sql: &'static str,
    (ssid, presented, expires_at, at): (&str, i64, i64, i64),
) -> anyhow::Result<Option<u64>> {
    let generation: Vec<i64> = sqlx::query_scalar(sql)
        .bind(ssid)
        .bind(presented)
        .bind(expires_at)
        .bind(at)
        .fetch_all(db.writer())
        .await
        .context("saving session state")?;
    generation
        .first()
        .map(|&generation| u64::try_from(generation).context("negative session generation"))
        .transpose()
}

/// Marks `ssid` revoked in the database (creating its row if the session had no state).
pub async fn revoke_in_db(db: &Db, ssid: &str, uid: i64, expires_at: i64) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO sessions (ssid, uid, generation, revoked, expires_at) \
         VALUES ($1, $2, 0, 1, $3) \
         ON CONFLICT (ssid) DO UPDATE SET revoked = 1, \
           expires_at = CASE WHEN excluded.expires_at > sessions.expires_at \
                        THEN excluded.expires_at ELSE sessions.expires_at END",
    )
    .bind(ssid)
    .bind(uid)
    .bind(expires_at)
    .execute(db.writer())
    .await
    .context("saving session state")?;
    Ok(())
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
