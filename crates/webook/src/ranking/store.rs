//! SQL of the hot list: the candidate scan, the details of the winners, and the shared copy of
//! embedded mode (`ranking_snapshots`). One implementation for SQLite and PostgreSQL.
//!
//! The scan reads only numbers — id, author, first publication, last update and the counters,
//! joined from `interactives` in the same query — in keyset batches over the
//! `published_articles (ctime, id)` index (never OFFSET), so its cost is linear in the number of
//! candidates and its memory one batch. The keyset condition carries a redundant
//! `ctime >= <last ctime>`: PostgreSQL cannot turn the `OR` form into an index bound and would
//! otherwise start every batch at the window's start (a quadratic scan); the row-value form
//! `(ctime, id) > (…)` fixes PostgreSQL but SQLite then stops using it as a bound. A scan
//! ([`CandidateScan`]) runs its PostgreSQL batches on one connection with parallel query off
//! (see there why). Titles, abstracts and author names are read afterwards, for the N winners
//! only.

use std::collections::HashMap;

use sqlx::Row;

use crate::{article::ArticleStatus, ranking::model::Signals};
use platform::{
    config::DatabaseKind,
    db::{placeholders, Db},
};

/// The `biz` of articles in `interactives`.
const ARTICLE_BIZ: &str = crate::biz::Biz::Article.as_str();

/// One published article as the scan sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Article id.
    pub id: i64,
    /// Author's user id.
    pub author_id: i64,
    /// First publication (ms).
    pub first_published: i64,
    /// Last publish or update of the reader copy (ms).
    pub utime: i64,
    /// Its counters.
    pub signals: Signals,
}

/// What the list shows of a winner besides numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Details {
    /// Title.
    pub title: String,
    /// Abstract.
    pub abstract_text: String,
    /// Author's nickname ('' when unset).
    pub author_nickname: String,
}

/// A list as shared between instances: the items' JSON and its fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedList {
    /// The items, a JSON array (the `data` of `GET /ranking/top`).
    pub items: String,
    /// When it was computed (ms).
    pub computed_at: i64,
    /// The fire time of the computation (ms): newer lists have later fire times.
    pub fence_at: i64,
    /// The computation's fencing token, breaking ties between runs of one fire time.
    pub fence_token: i64,
}

/// The hot list's SQL.
#[derive(Debug, Clone)]
pub struct RankingStore {
    db: Db,
}

impl RankingStore {
    /// The store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Starts one pass over the published articles first published at or after `since` (ms),
    /// in (first publication, id) order; [`CandidateScan::next_batch`] reads them.
    pub async fn scan(&self, since: i64) -> sqlx::Result<CandidateScan> {
        let transaction = match self.db.kind() {
            DatabaseKind::Sqlite => None,
            DatabaseKind::Postgres => {
                let mut transaction = self.db.pool().begin().await?;
                sqlx::query("SET LOCAL max_parallel_workers_per_gather = 0")
                    .execute(&mut *transaction)
                    .await?;
                Some(transaction)
            }
        };
        Ok(CandidateScan {
            store: self.clone(),
            since,
            after: None,
            transaction,
        })
    }

    /// Title, abstract and author nickname of each of `ids` (one query).
    pub async fn details(&self, ids: &[i64]) -> sqlx::Result<HashMap<i64, Details>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT p.id, p.title, p.abstract, COALESCE(u.nickname, '') AS nickname \
             FROM published_articles p LEFT JOIN users u ON u.id = p.author_id \
             WHERE p.id IN ({})",
            placeholders(1, ids.len())
        );
        let mut query = sqlx::query(&sql);
        for id in ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(self.db.pool()).await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("id")?,
                    Details {
                        title: row.try_get("title")?,
                        abstract_text: row.try_get("abstract")?,
                        author_nickname: row.try_get("nickname")?,
                    },
                ))
            })
            .collect()
    }

    /// The shared list called `name`, if any.
    pub async fn load_shared(&self, name: &str) -> sqlx::Result<Option<SharedList>> {
        let row = sqlx::query(
            "SELECT items, computed_at, fence_at, fence_token FROM ranking_snapshots \
             WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(self.db.pool())
        .await?;
        row.map(|row| {
            Ok(SharedList {
                items: row.try_get("items")?,
                computed_at: row.try_get("computed_at")?,
                fence_at: row.try_get("fence_at")?,
                fence_token: row.try_get("fence_token")?,
            })
        })
        .transpose()
    }

    /// Stores `list` as `name` unless the stored list has a newer fence. Returns whether it
    /// was stored.
    pub async fn store_shared(&self, name: &str, list: &SharedList) -> sqlx::Result<bool> {
        let stored = sqlx::query(
            "INSERT INTO ranking_snapshots (name, items, computed_at, fence_at, fence_token) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (name) DO UPDATE SET items = excluded.items, \
                 computed_at = excluded.computed_at, fence_at = excluded.fence_at, \
                 fence_token = excluded.fence_token \
             WHERE ranking_snapshots.fence_at < excluded.fence_at \
                OR (ranking_snapshots.fence_at = excluded.fence_at \
                    AND ranking_snapshots.fence_token <= excluded.fence_token)",
        )
        .bind(name)
        .bind(&list.items)
        .bind(list.computed_at)
        .bind(list.fence_at)
        .bind(list.fence_token)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        Ok(stored == 1)
    }
}

/// One pass over the candidates (see [`RankingStore::scan`]).
///
/// On PostgreSQL the batches run on one connection, in one transaction with parallel query
/// off: the planner, estimating the keyset bound and the redundant ctime bound as independent,
/// underestimates the rows left past the middle of the scan and picks a parallel plan whose
/// worker start-up then dominates each batch (docs/PERFORMANCE.md → Hot list). The transaction
/// only reads, and in READ
/// COMMITTED holds no snapshot between batches, so it does not hold back vacuum. Dropping the
/// scan ends it. On SQLite each batch takes any pooled reader.
#[derive(Debug)]
pub struct CandidateScan {
    store: RankingStore,
    since: i64,
    after: Option<(i64, i64)>,
    transaction: Option<sqlx::Transaction<'static, sqlx::Any>>,
}

impl CandidateScan {
    /// The scan continuing after `after` = (first publication, id) instead of from the start.
    pub fn resume_after(mut self, after: (i64, i64)) -> Self {
        self.after = Some(after);
        self
    }

    /// The next up to `limit` candidates; empty once the scan is over.
    pub async fn next_batch(&mut self, limit: i64) -> sqlx::Result<Vec<Candidate>> {
        let batch = match &mut self.transaction {
            Some(transaction) => {
                fetch_candidates(&mut **transaction, self.since, self.after, limit).await?
            }
            None => fetch_candidates(self.store.db.pool(), self.since, self.after, limit).await?,
        };
        if let Some(last) = batch.last() {
            self.after = Some((last.first_published, last.id));
        }
        Ok(batch)
    }
}

/// The keyset batch query (see the module docs) on `executor`.
async fn fetch_candidates<'e, E>(
    executor: E,
    since: i64,
    after: Option<(i64, i64)>,
    limit: i64,
) -> sqlx::Result<Vec<Candidate>>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let (after_ctime, after_id) = after.unwrap_or((since - 1, i64::MAX));
    let rows = sqlx::query(
        "SELECT p.id, p.author_id, p.ctime, p.utime, \
                COALESCE(i.like_cnt, 0) AS like_cnt, \
                COALESCE(i.collect_cnt, 0) AS collect_cnt, \
                COALESCE(i.read_cnt, 0) AS read_cnt \
         FROM published_articles p \
         LEFT JOIN interactives i ON i.biz = $1 AND i.biz_id = p.id \
         WHERE p.status = $2 AND p.ctime >= $3 AND p.ctime >= $4 \
           AND (p.ctime > $4 OR (p.ctime = $4 AND p.id > $5)) \
         ORDER BY p.ctime, p.id LIMIT $6",
    )
    .bind(ARTICLE_BIZ)
    .bind(i64::from(ArticleStatus::Published))
    .bind(since)
    .bind(after_ctime)
    .bind(after_id)
    .bind(limit)
    .fetch_all(executor)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(Candidate {
                id: row.try_get("id")?,
                author_id: row.try_get("author_id")?,
                first_published: row.try_get("ctime")?,
                utime: row.try_get("utime")?,
                signals: Signals {
                    likes: row.try_get("like_cnt")?,
                    collects: row.try_get("collect_cnt")?,
                    reads: row.try_get("read_cnt")?,
                },
            })
        })
        .collect()
}
