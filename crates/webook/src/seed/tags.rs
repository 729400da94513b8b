//! The seed's tags phase (after the other phases committed): every author of a published
//! article gets `--tags-per-author` tags of their own, names drawn from [`VOCABULARY`] (Chinese
//! and English topics), and each published article carries 0–3 of its author's tags — the rows
//! the tags feature would have written had the authors created and attached them through the
//! API (`tags`, `tag_bizs`; see `migrations/0014_tags.sql`).
//!
//! Data flow: one transaction for the phase. It reads the authors of this run's published
//! articles (with their first publication: a tag is created just before it) and writes their
//! tags with explicit ids (after the largest in the table; PostgreSQL's sequence is moved past
//! them); then it reads this run's published articles in id order, [`READ_BATCH`] at a time,
//! and writes their tag rows with multi-row statements. The non-unique index of `tag_bizs` is
//! dropped first and built once before the commit ([`store::suspend_indexes`]), as for the feed.
//! Interrupted, the phase leaves no tag at all.
//!
//! Reproducibility: an author's tag names draw from [`Stream::TagNames`] (by user index), an
//! article's tags from [`Stream::ArticleTags`] (by article index), so the same plan gives the
//! same rows.

use std::collections::HashMap;

use anyhow::Context;
use indicatif::ProgressBar;
use sqlx::AnyConnection;

use super::{
    random::{Rng, Stream},
    store, Plan, Report,
};
use crate::{biz::Biz, tag::tag_key};
use platform::{
    config::DatabaseKind,
    db::{bulk_row_placeholders, Db},
};

/// The names authors' tags are drawn from: distinct keys, each a valid tag name.
pub const VOCABULARY: &[&str] = &[
    "Rust",
    "Go",
    "Java",
    "Python",
    "TypeScript",
    "MySQL",
    "PostgreSQL",
    "Redis",
    "Kafka",
    "Elasticsearch",
    "Kubernetes",
    "Docker",
    "Linux",
    "Architecture",
    "Performance",
    "Testing",
    "Security",
    "Open Source",
    "Career",
    "Reading Notes",
    "后端",
    "前端",
    "数据库",
    "缓存",
    "分布式",
    "微服务",
    "算法",
    "面试",
    "性能优化",
    "高并发",
    "系统设计",
    "读书笔记",
    "随笔",
    "旅行",
    "摄影",
    "美食",
    "生活",
    "职场",
    "产品",
    "设计",
];

/// Most tags an article gets (it gets 0 to this many, and at most its author's count).
pub const MAX_TAGS_PER_ARTICLE: u64 = 3;
/// Published articles read per query.
pub const READ_BATCH: i64 = 10_000;
/// Rows per multi-row `INSERT` (6 values each for tags, 5 for tag rows).
const ROWS_PER_STATEMENT: usize = 1_000;

/// What the tags phase wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TagReport {
    /// `tags` rows.
    pub tags: u64,
    /// Published articles carrying at least one tag.
    pub tagged_articles: u64,
    /// `tag_bizs` rows.
    pub tag_rows: u64,
}

/// A tag row to write.
struct TagRow {
    id: i64,
    uid: i64,
    name: &'static str,
    ctime: i64,
}

/// A tag on an article.
struct TagBizRow {
    tid: i64,
    uid: i64,
    article_id: i64,
    ctime: i64,
}

/// Writes the tags of the users and published articles `report` describes (module docs).
pub async fn seed_tags(
    db: &Db,
    plan: &Plan,
    report: &Report,
    progress: &ProgressBar,
) -> anyhow::Result<TagReport> {
    let per_author = plan.tags_per_author;
    let mut written = TagReport::default();
    if per_author == 0 || report.published == 0 {
        return Ok(written);
    }
    let kind = db.kind();
    let articles = (
        report.first_article_id,
        report.first_article_id + report.articles() as i64,
    );
    progress.set_message("tags");
    progress.set_length(report.published);
    progress.set_position(0);
    let mut tx = db.writer().begin().await?;
    let suspended = store::suspend_indexes(&mut tx, kind, &["tag_bizs"])
        .await
        .context("suspending the tag rows' index")?;
    let first_tag_id: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM tags")
        .fetch_one(&mut *tx)
        .await?;

    // Authors, by id, with their first publication; author k's tags are ids
    // first_tag_id + k·per_author + 0…per_author−1.
    let authors: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT author_id, MIN(ctime) FROM published_articles \
         WHERE id >= $1 AND id < $2 AND status = 2 GROUP BY author_id ORDER BY author_id",
    )
    .bind(articles.0)
    .bind(articles.1)
    .fetch_all(&mut *tx)
    .await?;
    let mut first_tag_of = HashMap::with_capacity(authors.len());
    let mut tags = Vec::with_capacity(authors.len() * per_author as usize);
    for (k, &(author, first_published)) in authors.iter().enumerate() {
        let first = first_tag_id + k as i64 * per_author as i64;
        first_tag_of.insert(author, first);
        let user_index = (author - report.first_user_id) as u64;
        let names = draw_distinct(
            &mut Rng::new(plan.seed, Stream::TagNames, user_index),
            VOCABULARY.len() as u64,
            per_author,
        );
        for (n, name) in names.into_iter().enumerate() {
            tags.push(TagRow {
                id: first + n as i64,
                uid: author,
                name: VOCABULARY[name as usize],
                ctime: first_published - 1,
            });
        }
    }
    insert_tags(&mut tx, kind, &tags)
        .await
        .context("writing tags")?;
    store::advance_sequence(&mut tx, kind, "tags").await?;
    written.tags = tags.len() as u64;

    // Each published article: 0–3 of its author's tags.
    let mut after = articles.0 - 1;
    loop {
        let batch: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT id, author_id, ctime FROM published_articles \
             WHERE id > $1 AND id < $2 AND status = 2 ORDER BY id LIMIT $3",
        )
        .bind(after)
        .bind(articles.1)
        .bind(READ_BATCH)
        .fetch_all(&mut *tx)
        .await?;
        let Some(&(last, _, _)) = batch.last() else {
            break;
        };
        after = last;
        let mut rows = Vec::new();
        for &(article_id, author, ctime) in &batch {
            let Some(&first) = first_tag_of.get(&author) else {
                continue;
            };
            let mut rng = Rng::new(
                plan.seed,
                Stream::ArticleTags,
                (article_id - articles.0) as u64,
            );
            let count = rng.below(MAX_TAGS_PER_ARTICLE + 1).min(per_author);
            let mut picked = draw_distinct(&mut rng, per_author, count);
            picked.sort_unstable();
            written.tagged_articles += u64::from(count > 0);
            rows.extend(picked.into_iter().map(|n| TagBizRow {
                tid: first + n as i64,
                uid: author,
                article_id,
                ctime,
            }));
        }
        insert_tag_rows(&mut tx, kind, &rows)
            .await
            .context("writing the articles' tags")?;
        written.tag_rows += rows.len() as u64;
        progress.inc(batch.len() as u64);
    }
    progress.set_message("indexing");
    store::restore_indexes(&mut tx, &suspended)
        .await
        .context("building the tag rows' index")?;
    tx.commit().await.context("committing tags")?;
    Ok(written)
}

/// `count` distinct numbers below `range` (`count` ≤ `range`), in draw order: the first
/// `count` steps of a Fisher–Yates shuffle of `0..range`.
fn draw_distinct(rng: &mut Rng, range: u64, count: u64) -> Vec<u64> {
    let mut pool: Vec<u64> = (0..range).collect();
    let count = count.min(range) as usize;
    for slot in 0..count {
        let chosen = slot + rng.below((pool.len() - slot) as u64) as usize;
        pool.swap(slot, chosen);
    }
    pool.truncate(count);
    pool
}

async fn insert_tags(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[TagRow],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO tags (id, uid, name, name_key, ctime, utime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 6)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.id)
                .bind(row.uid)
                .bind(row.name)
                .bind(tag_key(row.name))
                .bind(row.ctime)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

async fn insert_tag_rows(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[TagBizRow],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO tag_bizs (tid, uid, biz, biz_id, ctime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 5)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.tid)
                .bind(row.uid)
                .bind(Biz::Article.as_str())
                .bind(row.article_id)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::TagName;

    #[test]
    fn the_vocabulary_is_valid_names_with_distinct_keys() {
        let mut keys = std::collections::HashSet::new();
        for name in VOCABULARY {
            let parsed = TagName::parse(name).unwrap();
            assert_eq!(parsed.name, *name, "already trimmed");
            assert!(keys.insert(parsed.key), "{name} twice");
        }
    }

    #[test]
    fn draws_are_distinct_and_within_range() {
        for index in 0..200 {
            let mut rng = Rng::new(1, Stream::TagNames, index);
            let drawn = draw_distinct(&mut rng, 10, 4);
            assert_eq!(drawn.len(), 4);
            assert!(drawn.iter().all(|&n| n < 10));
            let distinct: std::collections::HashSet<_> = drawn.iter().collect();
            assert_eq!(distinct.len(), 4);
        }
        assert_eq!(
            draw_distinct(&mut Rng::new(1, Stream::TagNames, 0), 3, 5).len(),
            3
        );
        assert!(draw_distinct(&mut Rng::new(1, Stream::TagNames, 0), 3, 0).is_empty());
    }
}
