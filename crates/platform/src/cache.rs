//! Object caches that never serve a value older than the last write that returned.
//!
//! A [`VersionedCache`] holds byte values (serialised objects) under string keys. Every key has a
//! version; writers bump it ([`VersionedCache::set`] stores the new value, [`invalidate`] leaves
//! a tombstone), and a reader that missed may only [`fill`] the key if its version has not moved
//! since the miss. That closes the classic race of cache-aside — a reader loads the old row from
//! the database, a writer commits and invalidates, then the reader stores the old row — without
//! locks: the reader's fill is simply refused.
//!
//! Two layouts, chosen by mode:
//! - **embedded**: one in-process W-TinyLFU cache (`moka`'s synchronous one: every closure
//!   here is short and never waits, so the async cache's per-key async locks were pure cost;
//!   docs/PERFORMANCE.md → HTTP → Browse, round three), bounded by bytes and a TTL; writes and
//!   fills both go through the key's `and_compute_with`, so they are serialised per key;
//! - **cluster**: a Redis hash per key (`ver`, `data`) changed by Lua scripts, with the in-process
//!   cache in front as a near cache. A read sends Redis the near copy's version and gets back
//!   "unchanged" or the current version and value, in one round trip ([`crate::redis_probe`],
//!   which also lets reads made together share one), so large values cross the network once per
//!   change, and a write on one instance is seen by the next read on every instance.
//!
//! Versions come from one counter per process (embedded) or per cache in Redis (cluster), never
//! per key, so a key that expired and came back cannot repeat a version a near cache still holds.
//! A Redis counter that is missing (Redis restarted empty, or the key was evicted) starts again
//! from Redis's clock in microseconds, not from 0: every version of the new run is above every
//! version of the last one (which would need a million writes a second to catch up), so a near
//! cache's copy from before the restart can never match a version written after it.
//!
//! A write whose Redis step fails (Redis down) is not forgotten: its key goes on a pending list
//! that a background task retries every [`RETRY_INTERVAL`] until Redis takes the invalidation,
//! so a persisted Redis that comes back with the old value is corrected within moments (the
//! database was the truth meanwhile: a read that cannot reach Redis is a miss, answered from the
//! database, and drops the key's near copy). A process that dies with keys still pending leaves
//! them stale until their TTL.
//!
//! In-process, a tombstone is an entry like any other and can be evicted (size) or expire; a
//! reader that missed on the key before that must still not fill it. So a miss on an absent key
//! takes a fresh version as its token, evictions and expiries raise a floor for the key's bucket
//! (one of [`FLOOR_BUCKETS`], by hash) to the version that left, and a fill of an absent key is
//! accepted only above its bucket's floor. (Found by the benchmark: under eviction pressure a
//! like's tombstone was evicted and a read that had loaded the counters before the like put
//! them back.) Cache failures never fail a request: a Redis error on read
//! is a miss (the caller reads the database), on write it is logged and the entry's TTL bounds the
//! damage.
//!
//! [`invalidate`]: VersionedCache::invalidate
//! [`fill`]: VersionedCache::fill

use std::{
    future::Future,
    hash::{BuildHasher, RandomState},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::body::Bytes;
use moka::{
    notification::RemovalCause,
    ops::compute::{CompResult, Op},
};
use serde::{de::DeserializeOwned, Serialize};

use crate::{
    redis::Redis,
    redis_probe::{self, Probe, Probed},
};

/// Counter: cache lookups by `cache`, `layer` (local, redis) and `result` (hit, miss).
pub const CACHE_REQUESTS_TOTAL: &str = "cache_requests_total";

static NEXT_LOCAL_VERSION: AtomicU64 = AtomicU64::new(1);

/// What a reader saw when it missed; hand it back to [`VersionedCache::fill`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillToken(u64);

/// The result of a lookup.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// The cached value.
    Hit(Bytes),
    /// Not cached; load it and offer it back with this token.
    Miss(FillToken),
}

#[derive(Debug, Clone)]
struct Slot {
    version: u64,
    value: Option<Bytes>,
}

#[derive(Clone)]
struct Remote {
    redis: Redis,
    prefix: String,
    version_counter: String,
    set: std::sync::Arc<redis::Script>,
    invalidate_many: std::sync::Arc<redis::Script>,
    fill_many: std::sync::Arc<redis::Script>,
    /// Keys whose invalidation Redis refused, retried by one background task (module docs).
    pending: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Whether the retrier task is running (it ends when nothing is pending).
    retrying: Arc<std::sync::atomic::AtomicBool>,
}

/// How often keys whose invalidation Redis refused are retried.
pub const RETRY_INTERVAL: Duration = Duration::from_millis(200);

/// The next version from the cache's counter (`KEYS[2]`, never expiring); a missing counter starts
/// from Redis's clock in microseconds (module docs), below 2^53 so Lua's numbers hold it exactly.
const NEXT_VERSION: &str = r"
local function next_version(counter)
  if redis.call('EXISTS', counter) == 0 then
    local now = redis.call('TIME')
    redis.call('SET', counter, string.format('%.0f', tonumber(now[1]) * 1000000 + tonumber(now[2])))
  end
  return redis.call('INCR', counter)
end
";

const SET_SCRIPT: &str = r"
local g = next_version(KEYS[2])
redis.call('HSET', KEYS[1], 'ver', g, 'data', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return g
";

/// Leaves a tombstone under a new version in each of `KEYS[2..]` (`KEYS[1]` the counter, `ARGV[1]`
/// the TTL); the new versions.
const INVALIDATE_MANY_SCRIPT: &str = r"
local out = {}
for i = 2, #KEYS do
  local g = next_version(KEYS[1])
  redis.call('HSET', KEYS[i], 'ver', g)
  redis.call('HDEL', KEYS[i], 'data')
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
  out[i - 1] = g
end
return out
";

/// Fills each of `KEYS[2..]` (`KEYS[1]` the counter) with its value if its version is still the
/// token (token and value in `ARGV[2i - 2]`, `ARGV[2i - 1]`, `ARGV[1]` the TTL; token 0 for an
/// absent key); per key the new version, or 0 if refused.
const FILL_MANY_SCRIPT: &str = r"
local out = {}
for i = 2, #KEYS do
  local token, value = ARGV[2 * i - 2], ARGV[2 * i - 1]
  local v = redis.call('HGET', KEYS[i], 'ver')
  if (v == false and token == '0') or v == token then
    local g = next_version(KEYS[1])
    redis.call('HSET', KEYS[i], 'ver', g, 'data', value)
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    out[i - 1] = g
  else
    out[i - 1] = 0
  end
end
return out
";

/// Most keys one call of the `*_MANY` scripts takes. Redis runs a script alone, and the
/// requests' probes on the same connection queue behind it: 16 keys hold it for ~0.1 ms, where
/// 256 held it long enough to cost the browse scenario a fifth of its throughput in cluster mode
/// (docs/PERFORMANCE.md → Cluster reads, round two).
const MANY_CHUNK: usize = 16;

/// A script of this module: the version helper, then `body`.
fn script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{NEXT_VERSION}{body}"))
}

/// A versioned object cache (see the module docs); cheap to clone.
#[derive(Clone)]
pub struct VersionedCache {
    name: &'static str,
    lookups: Arc<Lookups>,
    local: moka::sync::Cache<String, Slot>,
    floors: Arc<EvictionFloors>,
    remote: Option<Remote>,
    ttl: Duration,
}

impl std::fmt::Debug for VersionedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionedCache")
            .field("name", &self.name)
            .field("redis", &self.remote.is_some())
            .field("ttl", &self.ttl)
            .finish()
    }
}

/// One layer's [`CACHE_REQUESTS_TOTAL`] series (hits and misses) of one cache, taken once when
/// the cache is built — after the recorder is installed, as the app does first — because a
/// lookup by name and labels in the registry on every read cost more than the cache's own
/// look-up (`cache_lookup/*` in the kernels bench). A cache built on another map (the article
/// feature's rendered pages) takes its own, so every cache reports under the same labels.
#[derive(Debug, Clone)]
pub struct LookupCounters {
    hit: metrics::Counter,
    miss: metrics::Counter,
}

impl LookupCounters {
    /// The series of `cache`'s lookups in `layer` (`local` or `redis`).
    pub fn new(cache: &'static str, layer: &'static str) -> Self {
        let series = |result: &'static str| metrics::counter!(CACHE_REQUESTS_TOTAL, "cache" => cache, "layer" => layer, "result" => result);
        Self {
            hit: series("hit"),
            miss: series("miss"),
        }
    }

    /// Counts one lookup that hit (or missed).
    pub fn count(&self, hit: bool) {
        let counter = if hit { &self.hit } else { &self.miss };
        counter.increment(1);
    }
}

/// A [`VersionedCache`]'s lookup counters, by layer.
struct Lookups {
    local: LookupCounters,
    redis: LookupCounters,
}

/// Buckets of the eviction floors (see the module docs): a fill is refused needlessly only when
/// another key of its bucket left the cache between its miss and its fill.
pub const FLOOR_BUCKETS: usize = 4096;

/// Per bucket of keys, the highest version of an entry of that bucket that was evicted or
/// expired: fills of absent keys with tokens at or below it are refused.
struct EvictionFloors {
    hasher: RandomState,
    floors: Box<[AtomicU64]>,
}

impl EvictionFloors {
    fn new() -> Self {
        Self {
            hasher: RandomState::new(),
            floors: (0..FLOOR_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn floor(&self, key: &str) -> &AtomicU64 {
        let bucket = self.hasher.hash_one(key) as usize % FLOOR_BUCKETS;
        &self.floors[bucket]
    }
}

/// What one entry costs besides its key's and value's bytes: the key's and slot's headers, moka's
/// entry record, hash-table bucket and access/write-order queue nodes, and allocator rounding
/// (an estimate, ~4 allocations of 40–80 bytes). Without it a cache of small values (counters,
/// flags) held several times its budget.
const ENTRY_OVERHEAD_BYTES: usize = 256;

/// `value` as JSON in an allocation of exactly its size, as cached values should be:
/// `serde_json::to_vec` grows its buffer by doubling, and `Bytes::from(Vec)` keeps the spare
/// capacity, so a cached value held up to twice what the cache's budget counted for it.
pub fn json_bytes(value: &impl Serialize) -> serde_json::Result<Bytes> {
    let mut bytes = serde_json::to_vec(value)?;
    bytes.shrink_to_fit();
    Ok(Bytes::from(bytes))
}

impl VersionedCache {
    /// A cache named `name` (metrics label, Redis key part) holding at most `max_bytes` locally,
    /// entries living `ttl`; with `redis`, shared through Redis under `redis_prefix`.
    pub fn new(
        name: &'static str,
        max_bytes: u64,
        ttl: Duration,
        redis: Option<(&Redis, &str)>,
    ) -> Self {
        let floors = Arc::new(EvictionFloors::new());
        let listener_floors = floors.clone();
        let local = moka::sync::Cache::builder()
            .name(name)
            .max_capacity(max_bytes)
            .eviction_listener(move |key: Arc<String>, slot: Slot, cause| {
                if matches!(cause, RemovalCause::Size | RemovalCause::Expired) {
                    listener_floors
                        .floor(&key)
                        .fetch_max(slot.version, Ordering::AcqRel);
                }
            })
            .weigher(|key: &String, slot: &Slot| {
                let size =
                    key.len() + slot.value.as_ref().map_or(0, Bytes::len) + ENTRY_OVERHEAD_BYTES;
                u32::try_from(size).unwrap_or(u32::MAX)
            })
            .time_to_live(ttl)
            .build();
        let remote = redis.map(|(redis, prefix)| Remote {
            redis: redis.clone(),
            prefix: format!("{prefix}:cache:{name}:"),
            version_counter: format!("{prefix}:cache-version:{name}"),
            set: std::sync::Arc::new(script(SET_SCRIPT)),
            invalidate_many: std::sync::Arc::new(script(INVALIDATE_MANY_SCRIPT)),
            fill_many: std::sync::Arc::new(script(FILL_MANY_SCRIPT)),
            pending: Arc::default(),
            retrying: Arc::default(),
        });
        Self {
            name,
            lookups: Arc::new(Lookups {
                local: LookupCounters::new(name, "local"),
                redis: LookupCounters::new(name, "redis"),
            }),
            local,
            floors,
            remote,
            ttl,
        }
    }

    fn next_local_version() -> u64 {
        NEXT_LOCAL_VERSION.fetch_add(1, Ordering::Relaxed)
    }

    /// Embedded writer: stores `value` (a tombstone for `None`) under a fresh version and returns
    /// it. Through `and_compute_with`, like [`VersionedCache::fill`], so the two serialise per
    /// key: moka's plain `insert` does not take the key's lock, and a fill that had decided on
    /// the old tombstone could then put its value over this newer write (seen as two racing
    /// republishes leaving the older version cached).
    fn write_local(&self, key: &str, value: Option<Bytes>) -> u64 {
        let written = self.local.entry(key.to_owned()).and_compute_with(|_| {
            Op::Put(Slot {
                version: Self::next_local_version(),
                value,
            })
        });
        match written {
            CompResult::Inserted(entry) | CompResult::ReplacedWith(entry) => entry.value().version,
            // A put always inserts or replaces.
            CompResult::StillNone(_) | CompResult::Unchanged(_) | CompResult::Removed(_) => 0,
        }
    }

    /// Embedded side of [`invalidate_many_for_refill`](Self::invalidate_many_for_refill): a
    /// present key gets a tombstone (a refill token if it held a value), an absent key a raised
    /// eviction floor, both under the key's lock so no fill slips between the check and the
    /// write.
    fn invalidate_local_for_refill(&self, key: &str) -> Option<FillToken> {
        let mut held_value = false;
        let written = self
            .local
            .entry(key.to_owned())
            .and_compute_with(|current| match current {
                Some(entry) => {
                    held_value = entry.value().value.is_some();
                    Op::Put(Slot {
                        version: Self::next_local_version(),
                        value: None,
                    })
                }
                None => {
                    self.floors
                        .floor(key)
                        .fetch_max(Self::next_local_version(), Ordering::AcqRel);
                    Op::Nop
                }
            });
        match written {
            CompResult::ReplacedWith(entry) if held_value => Some(FillToken(entry.value().version)),
            _ => None,
        }
    }

    /// Near cache (cluster): keeps `value` at Redis's `version`. A read uses it only after
    /// checking that version in Redis, so the order in which near copies land does not matter.
    fn keep_local(&self, key: &str, version: u64, value: Option<Bytes>) {
        self.local.insert(key.to_owned(), Slot { version, value });
    }

    fn ttl_millis(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// Looks `key` up. Traced ([`crate::tracing_otlp`]): a `cache get` span under the current
    /// one, with `cache.name` and `cache.hit`.
    pub async fn get(&self, key: &str) -> Lookup {
        let span = tracing::debug_span!(
            target: crate::tracing_otlp::TARGET,
            "cache",
            otel.name = "cache get",
            cache.name = self.name,
            cache.hit = tracing::field::Empty,
        );
        if span.is_disabled() {
            return self.lookup(key).await;
        }
        let lookup = tracing::Instrument::instrument(self.lookup(key), span.clone()).await;
        span.record("cache.hit", matches!(lookup, Lookup::Hit(_)));
        lookup
    }

    async fn lookup(&self, key: &str) -> Lookup {
        let local = self.local.get(key);
        let Some(remote) = &self.remote else {
            return match local {
                Some(Slot {
                    value: Some(value), ..
                }) => {
                    self.lookups.local.count(true);
                    Lookup::Hit(value)
                }
                other => {
                    self.lookups.local.count(false);
                    // A tombstone's version, or for an absent key a version of its own that no
                    // write will ever get (see the module docs on eviction floors).
                    let token = other.map_or_else(Self::next_local_version, |slot| slot.version);
                    Lookup::Miss(FillToken(token))
                }
            };
        };
        match self.get_remote(remote, key, local).await {
            Ok(lookup) => lookup,
            Err(err) => {
                tracing::warn!(cache = self.name, %err, "cache read failed; treating as a miss");
                // What changes meanwhile cannot be checked: the near copy goes.
                self.local.invalidate(key);
                // A token no Redis version can match: the fill will be refused.
                Lookup::Miss(FillToken(u64::MAX))
            }
        }
    }

    async fn get_remote(
        &self,
        remote: &Remote,
        key: &str,
        local: Option<Slot>,
    ) -> anyhow::Result<Lookup> {
        let (known, near_copy) = match local {
            Some(Slot {
                version,
                value: Some(value),
            }) => (Some(version), Some(value)),
            _ => (None, None),
        };
        let redis_key = format!("{}{key}", remote.prefix);
        let probed = redis_probe::probe(&remote.redis, redis_key, Probe { known }).await?;
        match (probed, near_copy) {
            (Probed::Unchanged, Some(value)) => {
                self.lookups.local.count(true);
                Ok(Lookup::Hit(value))
            }
            (
                Probed::Changed {
                    version: Some(version),
                    data: Some(data),
                },
                _,
            ) => {
                self.lookups.local.count(false);
                self.lookups.redis.count(true);
                self.keep_local(key, version, Some(data.clone()));
                Ok(Lookup::Hit(data))
            }
            (Probed::Changed { version, .. }, _) => {
                self.lookups.local.count(false);
                self.lookups.redis.count(false);
                Ok(Lookup::Miss(FillToken(version.unwrap_or(0))))
            }
            (other, _) => anyhow::bail!("redis answered a version probe with {other:?}"),
        }
    }

    /// Offers `value` loaded after a miss; stored only if no writer touched `key` since.
    pub async fn fill(&self, key: &str, token: FillToken, value: Bytes) {
        let Some(remote) = &self.remote else {
            self.local
                .entry(key.to_owned())
                .and_compute_with(|current| {
                    let unchanged = match current.as_ref().map(|entry| entry.value()) {
                        // Still the tombstone the reader missed on.
                        Some(slot) => slot.version == token.0 && slot.value.is_none(),
                        // Absent at the miss and now: nothing that left since was newer.
                        None => self.floors.floor(key).load(Ordering::Acquire) < token.0,
                    };
                    if unchanged {
                        let version = Self::next_local_version();
                        Op::Put(Slot {
                            version,
                            value: Some(value),
                        })
                    } else {
                        Op::Nop
                    }
                });
            return;
        };
        self.fill_remote(remote, vec![(key.to_owned(), token, value)])
            .await;
    }

    /// Writer: stores `value` as the new version of `key` (preloading readers' next hit).
    pub async fn set(&self, key: &str, value: Bytes) {
        let Some(remote) = &self.remote else {
            self.write_local(key, Some(value));
            return;
        };
        let result: Result<u64, _> = remote
            .set
            .key(format!("{}{key}", remote.prefix))
            .key(&remote.version_counter)
            .arg(value.as_ref())
            .arg(self.ttl_millis())
            .invoke_async(&mut remote.redis.connection())
            .await;
        match result {
            Ok(version) => {
                self.keep_local(key, version, Some(value));
            }
            Err(err) => {
                self.local.invalidate(key);
                tracing::error!(cache = self.name, %err, "cache write failed; retrying its invalidation");
                self.retry_later(remote, key);
            }
        }
    }

    /// Cache-aside for JSON values: a hit that decodes is the answer; otherwise `load` runs and
    /// its value is offered back under the miss's token (so a concurrent write wins), if
    /// `cacheable` says so. A value that no longer decodes (a deploy changed its shape) is
    /// dropped and reloaded.
    pub async fn get_or_load<T, E>(
        &self,
        key: &str,
        load: impl Future<Output = Result<T, E>>,
        cacheable: impl FnOnce(&T) -> bool,
    ) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
    {
        let token = match self.get(key).await {
            Lookup::Hit(bytes) => match serde_json::from_slice(&bytes) {
                Ok(value) => return Ok(value),
                Err(err) => {
                    tracing::warn!(cache = self.name, %err, "undecodable cache value; reloading");
                    self.invalidate_and_token(key).await
                }
            },
            Lookup::Miss(token) => token,
        };
        let value = load.await?;
        if cacheable(&value) {
            match json_bytes(&value) {
                Ok(bytes) => self.fill(key, token, bytes).await,
                Err(err) => {
                    tracing::error!(cache = self.name, %err, "cannot serialise a cache value")
                }
            }
        }
        Ok(value)
    }

    /// Writer: stores `value` serialised as JSON (see [`VersionedCache::set`]).
    pub async fn set_json(&self, key: &str, value: &impl Serialize) {
        match json_bytes(value) {
            Ok(bytes) => self.set(key, bytes).await,
            Err(err) => {
                tracing::error!(cache = self.name, %err, "cannot serialise a cache value");
                self.invalidate(key).await;
            }
        }
    }

    /// Drops a value the caller could not use and returns a token for refilling it.
    async fn invalidate_and_token(&self, key: &str) -> FillToken {
        self.invalidate(key).await;
        match self.get(key).await {
            Lookup::Miss(token) => token,
            Lookup::Hit(_) => FillToken(u64::MAX),
        }
    }

    /// Writer: drops `key`'s value and moves its version, so in-flight fills are refused.
    pub async fn invalidate(&self, key: &str) {
        self.invalidate_for_refill(key).await;
    }

    /// Writer: [`invalidate`](Self::invalidate), returning the token of the new version. A
    /// writer that then reads the committed state from the database may [`fill`](Self::fill)
    /// it with this token: a later writer's invalidation moves the version and refuses the fill,
    /// so the refill can never put back a value older than that writer's.
    pub async fn invalidate_for_refill(&self, key: &str) -> FillToken {
        let Some(remote) = &self.remote else {
            return FillToken(self.write_local(key, None));
        };
        self.local.invalidate(key);
        match self.invalidate_remote(remote, key).await {
            Ok(version) => FillToken(version),
            Err(err) => {
                tracing::error!(cache = self.name, %err, "cache invalidation failed; retrying it");
                self.retry_later(remote, key);
                FillToken(u64::MAX)
            }
        }
    }

    /// Writer, after a change to the objects of many keys: [`invalidate`](Self::invalidate)s
    /// each (in one round trip per [`MANY_CHUNK`] keys in cluster mode) and returns, in the
    /// order of `keys`, a token for refilling each key worth refilling: in cluster mode every
    /// key (Redis serves all instances); embedded only the keys that held a value. An object no
    /// reader had cached is left to its next reader, and its key costs no entry: the eviction
    /// floor of its bucket is raised instead, which refuses the in-flight fills a tombstone
    /// would (and, for the moment of such a fill, those of the bucket's other absent keys).
    pub async fn invalidate_many_for_refill(&self, keys: &[String]) -> Vec<Option<FillToken>> {
        let Some(remote) = &self.remote else {
            return keys
                .iter()
                .map(|key| self.invalidate_local_for_refill(key))
                .collect();
        };
        let mut tokens = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MANY_CHUNK) {
            for key in chunk {
                self.local.invalidate(key);
            }
            let mut invocation = remote.invalidate_many.prepare_invoke();
            invocation
                .key(&remote.version_counter)
                .arg(self.ttl_millis());
            for key in chunk {
                invocation.key(format!("{}{key}", remote.prefix));
            }
            let versions: redis::RedisResult<Vec<u64>> = invocation
                .invoke_async(&mut remote.redis.connection())
                .await;
            match versions {
                Ok(versions) if versions.len() == chunk.len() => {
                    tokens.extend(versions.into_iter().map(|version| Some(FillToken(version))));
                }
                other => {
                    let err = other.err().map_or_else(
                        || "an answer of the wrong length".to_owned(),
                        |err| err.to_string(),
                    );
                    tracing::error!(cache = self.name, %err, "cache invalidation failed; retrying it");
                    for key in chunk {
                        self.retry_later(remote, key);
                        tokens.push(None);
                    }
                }
            }
        }
        tokens
    }

    /// [`fill`](Self::fill) of each entry, in one round trip per [`MANY_CHUNK`] entries in
    /// cluster mode.
    pub async fn fill_many(&self, entries: Vec<(String, FillToken, Bytes)>) {
        let Some(remote) = &self.remote else {
            for (key, token, value) in entries {
                self.fill(&key, token, value).await;
            }
            return;
        };
        self.fill_remote(remote, entries).await;
    }

    /// The cluster side of [`fill`](Self::fill) and [`fill_many`](Self::fill_many).
    async fn fill_remote(&self, remote: &Remote, entries: Vec<(String, FillToken, Bytes)>) {
        // A token no Redis version can match would be refused anyway.
        let entries: Vec<_> = entries
            .into_iter()
            .filter(|(_, token, _)| token.0 != u64::MAX)
            .collect();
        for chunk in entries.chunks(MANY_CHUNK) {
            let mut invocation = remote.fill_many.prepare_invoke();
            invocation
                .key(&remote.version_counter)
                .arg(self.ttl_millis());
            for (key, token, value) in chunk {
                invocation
                    .key(format!("{}{key}", remote.prefix))
                    .arg(token.0)
                    .arg(value.as_ref());
            }
            let versions: redis::RedisResult<Vec<u64>> = invocation
                .invoke_async(&mut remote.redis.connection())
                .await;
            match versions {
                Ok(versions) => {
                    for ((key, _, value), version) in chunk.iter().zip(versions) {
                        if version != 0 {
                            self.keep_local(key, version, Some(value.clone()));
                        }
                    }
                }
                Err(err) => tracing::warn!(cache = self.name, %err, "cache fill failed"),
            }
        }
    }

    /// Leaves a tombstone for `key` in Redis under a new version; returns that version.
    async fn invalidate_remote(&self, remote: &Remote, key: &str) -> redis::RedisResult<u64> {
        let versions: Vec<u64> = remote
            .invalidate_many
            .key(&remote.version_counter)
            .key(format!("{}{key}", remote.prefix))
            .arg(self.ttl_millis())
            .invoke_async(&mut remote.redis.connection())
            .await?;
        versions.first().copied().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Parse, "no version for the key"))
        })
    }

    /// Puts `key` on the pending list and makes sure the retrier runs (module docs).
    fn retry_later(&self, remote: &Remote, key: &str) {
        remote
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.to_owned());
        if !remote.retrying.swap(true, Ordering::AcqRel) {
            let cache = self.clone();
            tokio::spawn(async move { cache.retry_pending().await });
        }
    }

    /// Retries the pending invalidations every [`RETRY_INTERVAL`] until none is left.
    async fn retry_pending(self) {
        let Some(remote) = &self.remote else { return };
        loop {
            tokio::time::sleep(RETRY_INTERVAL).await;
            let keys: Vec<String> = remote
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .cloned()
                .collect();
            if keys.is_empty() {
                remote.retrying.store(false, Ordering::Release);
                // A key added between the look and the store would have found the task running.
                let empty = remote
                    .pending
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .is_empty();
                if empty || remote.retrying.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            for key in keys {
                let done = self.invalidate_remote(remote, &key).await;
                if done.is_ok() {
                    self.local.invalidate(&key);
                    remote
                        .pending
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&key);
                    tracing::info!(cache = self.name, key, "pending cache invalidation done");
                }
            }
        }
    }

    /// Keys whose invalidation Redis has not taken yet (cluster mode; empty otherwise).
    pub fn pending_invalidations(&self) -> usize {
        self.remote.as_ref().map_or(0, |remote| {
            remote
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .len()
        })
    }
}
