//! SQL of the hot list: the candidate scan, the details of the winners, and the shared copy of
//! embedded mode (`ranking_snapshots`). One implementation for SQLite and PostgreSQL.
//!
//! The scan ([`RankingStore::fold_candidates`]) reads only numbers — id, author, first
//! publication, last update and the counters, joined from `interactives` in the same query —
//! in one statement whose rows are folded as they arrive (into the ranking's bounded heap), so
//! its memory is the fold's state and its time that of the engine's own scan and join. On an
//! embedded SQLite file it runs on a direct connection ([`direct`]) instead of sqlx, whose
//! per-row thread hand-off and decoding cost several times the query itself (docs/
//! PERFORMANCE.md → Hot list). Titles, abstracts and author names are read afterwards, for the
//! N winners only.

use std::collections::HashMap;

use futures_util::TryStreamExt;
use sqlx::Row;

use crate::{article::ArticleStatus, ranking::model::Signals};
use platform::db::{direct, placeholders, Db};

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
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Details {
    /// Title.
    pub title: String,
    /// Abstract.
    #[sqlx(rename = "abstract")]
    pub abstract_text: String,
    /// Author's nickname ('' when unset).
    #[sqlx(rename = "nickname")]
    pub author_nickname: String,
}

/// A [`RankingStore::details`] row: the article's id and its details.
#[derive(sqlx::FromRow)]
struct DetailsRow {
    id: i64,
    #[sqlx(flatten)]
    details: Details,
}

/// A list as shared between instances: the items' JSON and its fence.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
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

    /// Folds every published article first published at or after `since` (ms) into `state`
    /// with `step`, in one statement, in no particular order (the ranking does not depend on
    /// it); returns the state. On an SQLite file the rows are stepped through on a blocking
    /// thread ([`direct::read`]), columns read in place; elsewhere they stream through the
    /// pool.
    pub async fn fold_candidates<A, F>(
        &self,
        since: i64,
        mut state: A,
        mut step: F,
    ) -> anyhow::Result<A>
    where
        A: Send + 'static,
        F: FnMut(&mut A, Candidate) + Send + 'static,
    {
        let published = i64::from(ArticleStatus::Published);
        match self.db.sqlite_file() {
            Some(file) => {
                direct::read(file, move |connection| {
                    fold_sqlite_rows(connection, (published, since), state, step)
                })
                .await
            }
            None => {
                let mut rows = sqlx::query(CANDIDATES)
                    .bind(ARTICLE_BIZ)
                    .bind(published)
                    .bind(since)
                    .fetch(self.db.pool());
                while let Some(row) = rows.try_next().await? {
                    step(&mut state, candidate(|index| row.try_get(index))?);
                }
                Ok(state)
            }
        }
    }

    /// Title, abstract and author nickname of each of `ids` (one query).
    pub async fn details(&self, ids: &[i64]) -> sqlx::Result<HashMap<i64, Details>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT p.id, p.title, p.abstract, COALESCE(u.nickname, '') AS nickname \
             FROM published_articles p LEFT JOIN users u ON u.id = p.author_id \
             WHERE p.status = 2 AND p.id IN ({})",
            placeholders(1, ids.len())
        );
        let mut query = sqlx::query_as::<_, DetailsRow>(&sql);
        for id in ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(self.db.pool()).await?;
        Ok(rows.into_iter().map(|row| (row.id, row.details)).collect())
    }

    /// Those of `ids` readers can see now (published), in one query.
    pub async fn published_now(&self, ids: &[i64]) -> sqlx::Result<Vec<i64>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT id FROM published_articles WHERE status = 2 AND id IN ({})",
            placeholders(1, ids.len())
        );
        let mut query = sqlx::query_scalar::<_, i64>(&sql);
        for id in ids {
            query = query.bind(id);
        }
        query.fetch_all(self.db.pool()).await
    }

    /// The shared list called `name`, if any.
    pub async fn load_shared(&self, name: &str) -> sqlx::Result<Option<SharedList>> {
        sqlx::query_as(
            "SELECT items, computed_at, fence_at, fence_token FROM ranking_snapshots \
             WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(self.db.pool())
        .await
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

/// The candidate scan: numbers only, the counters joined, no ORDER BY (one pass in whatever
/// order the engine reads fastest). Binds: biz, published status, window start.
const CANDIDATES: &str = "SELECT p.id, p.author_id, p.ctime, p.utime, \
            COALESCE(i.like_cnt, 0), COALESCE(i.collect_cnt, 0), COALESCE(i.read_cnt, 0) \
     FROM published_articles p \
     LEFT JOIN interactives i ON i.biz = $1 AND i.biz_id = p.id \
     WHERE p.status = $2 AND p.ctime >= $3";

/// A candidate from the columns of a [`CANDIDATES`] row, read with `column(index)`.
fn candidate<E>(mut column: impl FnMut(usize) -> Result<i64, E>) -> Result<Candidate, E> {
    Ok(Candidate {
        id: column(0)?,
        author_id: column(1)?,
        first_published: column(2)?,
        utime: column(3)?,
        signals: Signals {
            likes: column(4)?,
            collects: column(5)?,
            reads: column(6)?,
        },
    })
}

/// [`RankingStore::fold_candidates`] on a direct SQLite connection.
fn fold_sqlite_rows<A>(
    connection: &direct::rusqlite::Connection,
    (published, since): (i64, i64),
    mut state: A,
    mut step: impl FnMut(&mut A, Candidate),
) -> direct::rusqlite::Result<A> {
    let mut statement = connection.prepare(CANDIDATES)?;
    let mut rows = statement.query((ARTICLE_BIZ, published, since))?;
    while let Some(row) = rows.next()? {
        step(&mut state, candidate(|index| row.get(index))?);
    }
    Ok(state)
}
