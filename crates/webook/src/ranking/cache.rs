//! Where computed lists live: the local snapshot every instance serves from, and the shared copy
//! that carries a list from the instance (or CLI) that computed it to every other.
//!
//! - [`Snapshot`]: one computed list with its response bytes built once, plain and gzipped
//!   (`Bytes`, cloned by reference count per request), their ETags and the fence; held in an `ArcSwap` by the service, so a
//!   reader's `load` is a couple of atomic operations and never waits for a writer.
//! - [`SharedCopy`]: Redis in cluster mode (a hash with the items, a ZSET of scores for rank
//!   look-ups, both expiring after several intervals, and a non-expiring fence key), the
//!   `ranking_snapshots` table in embedded mode. A write whose fence — (fire time, token) — is
//!   older than the stored one is refused, so a stale computation never replaces a newer list.
//!   An article withdrawn after a list was computed is removed from the stored list in place
//!   ([`SharedCopy::remove`]: same fence, fewer items — atomic in Redis, so two instances
//!   removing different articles at once both take effect), and instances install a list of the
//!   same fence with fewer items as the newer one.

use std::{io::Write, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{body::Bytes, http::HeaderValue};
use flate2::{write::GzEncoder, Compression};
use serde::{Deserialize, Serialize};

use crate::{
    ranking::store::{RankingStore, SharedList},
    user::Person,
};
use platform::redis::Redis;

/// Name of the one list computed today.
pub const TOP_LIST: &str = "top";

/// One article of the list, as `GET /ranking/top` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RankedArticle {
    /// Article id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Abstract.
    #[serde(rename = "abstract")]
    pub abstract_text: String,
    /// Author.
    pub author: Person,
    /// Likes when computed.
    pub like_cnt: i64,
    /// Score when computed.
    pub score: f64,
    /// First publication (ms).
    pub ctime: i64,
    /// Last update of the reader copy (ms).
    pub utime: i64,
}

/// A computed list, ready to serve.
#[derive(Debug)]
pub struct Snapshot {
    /// The items, best first.
    pub items: Vec<RankedArticle>,
    /// The whole response body for the full list (`{"code":0,"msg":"ok","data":[…]}`).
    pub body: Bytes,
    /// Strong ETag of `body`, ready to send.
    pub etag: HeaderValue,
    /// `body` gzip-compressed once, for clients that accept gzip (a browser always does).
    pub gzip_body: Bytes,
    /// Strong ETag of `gzip_body` (another representation, so another tag).
    pub gzip_etag: HeaderValue,
    /// `x-ranking-computed-at`, ready to send.
    pub computed_at_header: HeaderValue,
    /// When it was computed (ms).
    pub computed_at: i64,
    /// (fire time, token) of the computation.
    pub fence: (i64, i64),
}

/// A strong ETag for the list `items_json` computed at `computed_at`: it changes with the
/// content, including when articles are removed from a list after its computation.
fn entity_tag(computed_at: i64, items_json: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(items_json.as_bytes());
    format!("{computed_at}-{}", hex::encode(&digest[..8]))
}

/// `list` without the articles `ids`; `None` when none of them is in it.
pub fn without(list: &SharedList, ids: &[i64]) -> anyhow::Result<Option<SharedList>> {
    let items: Vec<RankedArticle> =
        serde_json::from_str(&list.items).context("decoding a shared ranking")?;
    let before = items.len();
    let kept: Vec<RankedArticle> = items
        .into_iter()
        .filter(|item| !ids.contains(&item.id))
        .collect();
    if kept.len() == before {
        return Ok(None);
    }
    Ok(Some(SharedList {
        items: serde_json::to_string(&kept)?,
        ..list.clone()
    }))
}

/// The envelope around `items_json`, as bytes.
pub fn envelope(items_json: &str) -> Bytes {
    Bytes::from(format!(r#"{{"code":0,"msg":"ok","data":{items_json}}}"#))
}

impl Snapshot {
    /// The ETag a snapshot of `list` has, without building one.
    pub fn etag_of(list: &SharedList) -> anyhow::Result<HeaderValue> {
        HeaderValue::from_str(&format!(
            "\"{}\"",
            entity_tag(list.computed_at, &list.items)
        ))
        .context("ranking ETag")
    }

    /// Builds a snapshot from a shared list (parsing its items once).
    pub fn from_shared(list: &SharedList) -> anyhow::Result<Self> {
        let items: Vec<RankedArticle> =
            serde_json::from_str(&list.items).context("decoding a shared ranking")?;
        let tag = entity_tag(list.computed_at, &list.items);
        let body = envelope(&list.items);
        let mut gzip = GzEncoder::new(Vec::with_capacity(body.len() / 4), Compression::default());
        gzip.write_all(&body).context("compressing the hot list")?;
        let gzip_body = Bytes::from(gzip.finish().context("compressing the hot list")?);
        Ok(Self {
            items,
            body,
            etag: HeaderValue::from_str(&format!("\"{tag}\"")).context("ranking ETag")?,
            gzip_body,
            gzip_etag: HeaderValue::from_str(&format!("\"{tag}-gzip\"")).context("ranking ETag")?,
            computed_at_header: HeaderValue::from(list.computed_at),
            computed_at: list.computed_at,
            fence: (list.fence_at, list.fence_token),
        })
    }
}

const STORE_SCRIPT: &str = r"
-- KEYS: 1 list hash, 2 rank zset, 3 fence; ARGV: 1 fence_at, 2 fence_token, 3 items,
-- 4 computed_at, 5 ttl ms, then id, score pairs.
local fence = redis.call('GET', KEYS[3])
if fence then
  local at, token = string.match(fence, '^(-?%d+):(-?%d+)$')
  at, token = tonumber(at), tonumber(token)
  local new_at, new_token = tonumber(ARGV[1]), tonumber(ARGV[2])
  if at > new_at or (at == new_at and token > new_token) then return 0 end
end
redis.call('SET', KEYS[3], ARGV[1] .. ':' .. ARGV[2])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[1], 'items', ARGV[3], 'computed_at', ARGV[4],
  'fence_at', ARGV[1], 'fence_token', ARGV[2])
for i = 6, #ARGV, 2 do
  redis.call('ZADD', KEYS[2], ARGV[i + 1], ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
";

const REMOVE_SCRIPT: &str = r"
-- KEYS: 1 list hash, 2 rank zset; ARGV: article ids. Removes those articles from the stored
-- list (same fence); returns how many were removed.
local items = redis.call('HGET', KEYS[1], 'items')
if not items then return 0 end
local remove = {}
for i = 1, #ARGV do remove[tonumber(ARGV[i])] = true end
local kept, removed = {}, 0
for _, item in ipairs(cjson.decode(items)) do
  if remove[item.id] then removed = removed + 1 else kept[#kept + 1] = item end
end
if removed == 0 then return 0 end
local encoded = '[]'
if #kept > 0 then encoded = cjson.encode(kept) end
redis.call('HSET', KEYS[1], 'items', encoded)
for i = 1, #ARGV do redis.call('ZREM', KEYS[2], ARGV[i]) end
return removed
";

/// The copy every instance refreshes from (see the module docs).
#[derive(Clone)]
pub enum SharedCopy {
    /// `ranking_snapshots` (embedded mode).
    Sql(RankingStore),
    /// Redis (cluster mode).
    Redis {
        /// The connection.
        redis: Redis,
        /// Key prefix (`<redis_prefix>:ranking:`).
        prefix: String,
        /// The fenced store script.
        store: Arc<redis::Script>,
        /// The in-place removal script.
        remove: Arc<redis::Script>,
    },
}

impl std::fmt::Debug for SharedCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sql(_) => "SharedCopy::Sql",
            Self::Redis { .. } => "SharedCopy::Redis",
        })
    }
}

impl SharedCopy {
    /// The Redis copy under `<redis_prefix>:ranking:`.
    pub fn redis(redis: Redis, redis_prefix: &str) -> Self {
        Self::Redis {
            redis,
            prefix: format!("{redis_prefix}:ranking:"),
            store: Arc::new(redis::Script::new(STORE_SCRIPT)),
            remove: Arc::new(redis::Script::new(REMOVE_SCRIPT)),
        }
    }

    fn keys(prefix: &str, name: &str) -> [String; 3] {
        [
            format!("{prefix}{name}"),
            format!("{prefix}{name}:rank"),
            format!("{prefix}{name}:fence"),
        ]
    }

    /// The list called `name`, if one is stored (and, in Redis, not expired).
    pub async fn load(&self, name: &str) -> anyhow::Result<Option<SharedList>> {
        match self {
            Self::Sql(store) => Ok(store.load_shared(name).await?),
            Self::Redis { redis, prefix, .. } => {
                let [list, _, _] = Self::keys(prefix, name);
                let mut connection = redis.connection();
                let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
                    .arg(&list)
                    .query_async(&mut connection)
                    .await?;
                if fields.is_empty() {
                    return Ok(None);
                }
                let number = |field: &str| -> anyhow::Result<i64> {
                    fields
                        .get(field)
                        .with_context(|| format!("shared ranking has no {field}"))?
                        .parse()
                        .with_context(|| format!("shared ranking {field}"))
                };
                Ok(Some(SharedList {
                    items: fields
                        .get("items")
                        .context("shared ranking has no items")?
                        .clone(),
                    computed_at: number("computed_at")?,
                    fence_at: number("fence_at")?,
                    fence_token: number("fence_token")?,
                }))
            }
        }
    }

    /// Stores `list` (with each item's score, for rank look-ups) unless a newer one is stored;
    /// Redis keys expire after `ttl`. Returns whether it was stored.
    pub async fn store(
        &self,
        name: &str,
        list: &SharedList,
        scores: &[(i64, f64)],
        ttl: Duration,
    ) -> anyhow::Result<bool> {
        match self {
            Self::Sql(store) => Ok(store.store_shared(name, list).await?),
            Self::Redis {
                redis,
                prefix,
                store,
                ..
            } => {
                let [list_key, rank_key, fence_key] = Self::keys(prefix, name);
                let mut invocation = store.key(list_key);
                invocation
                    .key(rank_key)
                    .key(fence_key)
                    .arg(list.fence_at)
                    .arg(list.fence_token)
                    .arg(&list.items)
                    .arg(list.computed_at)
                    .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1));
                for (id, score) in scores {
                    invocation.arg(id).arg(score);
                }
                let mut connection = redis.connection();
                let stored: i64 = invocation.invoke_async(&mut connection).await?;
                Ok(stored == 1)
            }
        }
    }

    /// Removes the articles `ids` from the stored list `name` in place, keeping its fence (a
    /// newer list stored meanwhile is left alone). Returns whether anything was removed.
    pub async fn remove(&self, name: &str, ids: &[i64]) -> anyhow::Result<bool> {
        match self {
            // One process writes the embedded copy (the data dir is locked), and a newer list
            // stored between the load and the store wins by its fence.
            Self::Sql(store) => {
                let Some(list) = store.load_shared(name).await? else {
                    return Ok(false);
                };
                match without(&list, ids)? {
                    Some(filtered) => Ok(store.store_shared(name, &filtered).await?),
                    None => Ok(false),
                }
            }
            Self::Redis {
                redis,
                prefix,
                remove,
                ..
            } => {
                let [list_key, rank_key, _] = Self::keys(prefix, name);
                let mut invocation = remove.key(list_key);
                invocation.key(rank_key);
                for id in ids {
                    invocation.arg(id);
                }
                let mut connection = redis.connection();
                let removed: i64 = invocation.invoke_async(&mut connection).await?;
                Ok(removed > 0)
            }
        }
    }
}
