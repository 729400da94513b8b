//! The rules of tags: a tag belongs to its creator and is unique per creator by its normalised
//! name; only an object's owner tags it, with their own tags, and a replace is all or nothing;
//! a draft's tags are its owner's business; a tag's article list shows published articles only.
//!
//! **The owner's tag list** (`GET /tags`) is read through a [`VersionedCache`] keyed by owner —
//! in-process, or Redis with a near cache in cluster mode — filled on a miss with the list as
//! the database has it, and invalidated after every create that inserted (the course preloaded a
//! Redis list at start-up with appends, duplicating it on every restart and appending to cold
//! entries; a versioned fill-on-miss entry is the whole list or nothing, and a reader that loaded
//! before a create cannot put the old list back after it).
//!
//! **A replace's event** (`tags_changed`, for the search feature) is recorded in the replace's
//! transaction (transactional outbox), not sent after it: it exists exactly when the replace
//! committed. As elsewhere, it is recorded only where a consumer can receive it
//! ([`Outbox::wants`]), and the relay is woken after the commit.
//!
//! The list is served in pages (by id, a [`TagCursor`] after the last one) cut from that cached
//! whole list: an owner has at most `tag_max_per_user` tags ([`TagSettings`]), so the entry is
//! bounded, and a create beyond the cap is code 4.
//!
//! Writes run to completion even when the caller goes away ([`to_completion`]): a committed
//! create always invalidates its owner's cached list.
//!
//! **Keys made by older rules** are computed again once per database at start-up
//! ([`TagService::rekey`], before the routes serve; see [`store`](super::store)): an owner's
//! tags that now share a key merge into the oldest, and the owners' cached lists are dropped.
//! The search index keeps the merged tags' names on their objects until the objects' next tag
//! change or `webook search reindex`.

use std::time::Duration;

use platform::{
    cache::VersionedCache,
    db::now_millis,
    detached::to_completion,
    error::{positive_id, AppError, Msg},
    events::outbox::Outbox,
    page::Page,
    redis::Redis,
};

use crate::{
    biz::Biz,
    tag::{
        model::{
            distinct_tag_ids, ArticleCursor, Tag, TagCursor, TagName, TaggedArticle, TopicCursor,
            TopicOrder, TOPIC_TAGS_CHANGED,
        },
        settings::TagSettings,
        store::{Created, ReplaceError, TagStore},
    },
};

/// How long an owner's cached tag list lives without being read again or invalidated.
const OWNER_TAGS_TTL: Duration = Duration::from_secs(30 * 60);

/// Tags; cheap to clone.
#[derive(Debug, Clone)]
pub struct TagService {
    store: TagStore,
    outbox: Outbox,
    owner_tags: VersionedCache,
    max_per_user: u32,
}

fn owner_key(uid: i64) -> String {
    uid.to_string()
}

impl TagService {
    /// The service over `store`, recording events in `outbox`; owners' tag lists are cached
    /// in-process, or in `redis` (under its prefix) with a near cache. `memory_bytes` is the
    /// process's whole cache budget (`cache_memory_bytes`): the tag lists take a 32nd of it.
    /// An owner may have `settings.tag_max_per_user` tags.
    pub fn new(
        store: TagStore,
        outbox: Outbox,
        redis: Option<(&Redis, &str)>,
        memory_bytes: u64,
        settings: &TagSettings,
    ) -> Self {
        Self {
            store,
            outbox,
            max_per_user: settings.tag_max_per_user,
            owner_tags: VersionedCache::new(
                "tag_owner_lists",
                memory_bytes / 32,
                OWNER_TAGS_TTL,
                redis,
            ),
        }
    }

    /// The id of `uid`'s tag named like `name` (by its key, see [`TagName`]), created if needed;
    /// code 4 for an invalid name, or a new one beyond `tag_max_per_user`.
    pub async fn create(&self, uid: i64, name: &str) -> Result<i64, AppError> {
        let name = TagName::parse(name)?;
        let service = self.clone();
        to_completion(async move {
            let cap = service.max_per_user;
            match service.store.create(uid, &name, cap, now_millis()).await? {
                Created::New(id) => {
                    service.owner_tags.invalidate(&owner_key(uid)).await;
                    tracing::debug!(uid, tag = id, "tag created");
                    Ok(id)
                }
                Created::Existing(id) => Ok(id),
                Created::CapReached => Err(AppError::InvalidInput(Msg::owned(
                    format!("at most {cap} tags per user"),
                    format!("每个用户最多 {cap} 个标签"),
                ))),
            }
        })
        .await
    }

    /// A page of `uid`'s tags, by id, after `cursor` (cut from the cached whole list, see the
    /// module docs).
    pub async fn owned_by(
        &self,
        uid: i64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<Tag>, AppError> {
        let after = cursor.map(TagCursor::decode).transpose()?;
        let tags = self.all_owned_by(uid).await?;
        let items: Vec<Tag> = tags
            .iter()
            .filter(|tag| after.is_none_or(|after| tag.id > after.tag_id))
            .take(limit + 1)
            .cloned()
            .collect();
        Ok(Page::from_overfetched(items, limit, |tag| vec![tag.id]))
    }

    /// Every tag of `uid`, by id (cached, see the module docs).
    async fn all_owned_by(&self, uid: i64) -> Result<Vec<Tag>, AppError> {
        Ok(self
            .owner_tags
            .get_or_load(&owner_key(uid), self.store.owned_by(uid), |_| true)
            .await?)
    }

    /// Gives tag rows written without their tag's key that key ([`TagStore::key_tag_rows`]),
    /// computes the stored keys again if older rules made them (module docs), then drops the
    /// cached lists of the owners concerned.
    pub async fn rekey(&self) -> anyhow::Result<()> {
        let keyed = self.store.key_tag_rows().await?;
        if keyed > 0 {
            tracing::info!(rows = keyed, "tag rows given their tag's key");
        }
        let Some(report) = self.store.rekey(now_millis()).await? else {
            return Ok(());
        };
        for uid in &report.owners {
            self.owner_tags.invalidate(&owner_key(*uid)).await;
        }
        tracing::info!(
            rekeyed = report.rekeyed,
            merged = report.merged,
            owners = report.owners.len(),
            "tag keys follow the current rules"
        );
        Ok(())
    }

    /// Replaces `uid`'s tags on object `biz`/`biz_id` with `tids` (duplicates collapse; empty
    /// clears). 4 for non-positive ids or too many tags; 404001 no such object; 403002 the
    /// object or a tag is not the caller's — and then nothing changes.
    pub async fn replace(
        &self,
        uid: i64,
        biz: Biz,
        biz_id: i64,
        tids: &[i64],
    ) -> Result<(), AppError> {
        positive_id("bizId", biz_id)?;
        let tids = distinct_tag_ids(tids)?;
        let service = self.clone();
        to_completion(async move {
            let announce = service.outbox.wants(TOPIC_TAGS_CHANGED);
            match service
                .store
                .replace(uid, biz, biz_id, &tids, now_millis(), announce)
                .await
            {
                Ok(tags) => {
                    if announce {
                        service.outbox.committed();
                    }
                    tracing::debug!(uid, %biz, biz_id, tags = tags.len(), "tags replaced");
                    Ok(())
                }
                Err(ReplaceError::NoSuchObject) => Err(no_such_object()),
                Err(ReplaceError::NotTheOwner) => Err(AppError::Forbidden(Msg::new(
                    "the object is not yours",
                    "这不是你的对象",
                ))),
                Err(ReplaceError::NotTheirTag) => Err(AppError::Forbidden(Msg::new(
                    "a tag is not yours",
                    "有标签不是你的",
                ))),
                Err(ReplaceError::Db(err)) => Err(err.into()),
            }
        })
        .await
    }

    /// The tags on object `biz`/`biz_id` (only `owner`'s, when given), by id, as `caller`
    /// (`None`: a visitor) may see them: 404001 when the object does not exist, or is not
    /// published and not the caller's (a draft's tags are private).
    pub async fn on_object(
        &self,
        caller: Option<i64>,
        biz: Biz,
        biz_id: i64,
        owner: Option<i64>,
    ) -> Result<Vec<Tag>, AppError> {
        positive_id("bizId", biz_id)?;
        if let Some(owner) = owner {
            positive_id("uid", owner)?;
        }
        if !self.store.may_see(caller, biz, biz_id).await? {
            return Err(no_such_object());
        }
        Ok(self.store.on_object(biz, biz_id, owner).await?)
    }

    /// A page of the published articles carrying tag `tid`, newest id first, after `cursor`.
    /// 404001 for an unknown tag.
    pub async fn articles(
        &self,
        tid: i64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaggedArticle>, AppError> {
        positive_id("id", tid)?;
        let after = match cursor {
            Some(cursor) => ArticleCursor::decode(cursor)?,
            None => ArticleCursor::START,
        };
        let Some((items, more)) = self.store.articles(tid, after, limit).await? else {
            return Err(AppError::NotFound(Msg::new("no such tag", "标签不存在")));
        };
        let next = items.last().filter(|_| more).map(|last| {
            ArticleCursor {
                article_id: last.id,
            }
            .encode()
        });
        Ok(Page { items, next })
    }

    /// Topic `name` (any spelling of it: compared normalised) with a page of its published
    /// articles in `order`, after `cursor`. Code 4 for a name no tag could have; 404001 when
    /// no owner has a tag of that name.
    pub async fn topic(
        &self,
        name: &str,
        order: TopicOrder,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Topic, AppError> {
        let key = TagName::parse(name)?.key;
        let after = match cursor {
            Some(cursor) => TopicCursor::decode(order, cursor)?,
            None => TopicCursor::START,
        };
        let Some(shown) = self.store.topic_name(&key).await? else {
            return Err(AppError::NotFound(Msg::new("no such topic", "话题不存在")));
        };
        let (items, more) = self.store.topic_articles(&key, order, after, limit).await?;
        let next = items
            .last()
            .filter(|_| more)
            .map(|last| TopicCursor::after(order, last));
        Ok(Topic {
            name: shown,
            key,
            articles: Page { items, next },
        })
    }
}

/// A topic: every owner's tags of one normalised name, and a page of its articles.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct Topic {
    /// The name it is shown by (as most of its articles' tags write it).
    pub name: String,
    /// Its normalised name ([`crate::tag::tag_key`]): what `/topics/{name}` and `/t/{name}`
    /// accept any spelling of.
    pub key: String,
    /// Its published articles, in the order asked for.
    pub articles: Page<TaggedArticle>,
}

fn no_such_object() -> AppError {
    AppError::NotFound(Msg::new("no such object", "对象不存在"))
}
