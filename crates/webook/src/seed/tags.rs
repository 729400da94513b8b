//! Phase 6 of `webook seed` ([`super`]), after the other phases committed: every author of a
//! published article gets `--tags-per-author` tags of their own, names drawn from
//! [`VOCABULARY`] (Chinese and English topics), and each published article carries 0–3 of its
//! author's tags — the rows the tags feature would have written had the authors created and
//! attached them through the API ([`crate::tag::SeededTag`], [`crate::tag::SeededTagRow`]).
//!
//! Data flow: one transaction for the phase. It reads the authors of this run's published
//! articles from the article feature ([`crate::article::published_authors`], with their first
//! publication: a tag is created just before it) and has the tag feature write their tags
//! ([`crate::tag::insert_seeded_tags`]: explicit ids after the largest in the table,
//! PostgreSQL's sequence moved past them); then it reads this run's published articles in id
//! order, [`READ_BATCH`] at a time ([`crate::article::published_after`]), and has the tag
//! feature write their tag rows. The non-unique index of the tag rows
//! ([`crate::tag::SEEDED_BULK_TABLES`]) is dropped first and built once before the commit
//! ([`indexes`](super::indexes)), as for the feed. Last, the feed indexes this run's article
//! items by the topics they now carry ([`crate::feed::index_seeded_topics`]). Interrupted, the
//! phase leaves no tag at all.
//!
//! Reproducibility: an author's tag names draw from [`Stream::TagNames`] (by user index), an
//! article's tags from [`Stream::ArticleTags`] (by article index), so the same plan gives the
//! same rows.

use std::{collections::HashMap, ops::Range};

use anyhow::Context;
use indicatif::ProgressBar;
use sqlx::AnyConnection;

use super::{
    indexes::{restore_indexes, suspend_indexes},
    random::{Rng, Stream},
    Plan, Report,
};
use crate::{
    article::{self, PublishedArticle},
    tag::{self, SeededTag, SeededTagRow},
};
use platform::{config::DatabaseKind, db::Db};

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

/// Writes the tags of the users and published articles `report` describes (module docs).
pub async fn seed_tags(
    db: &Db,
    plan: &Plan,
    report: &Report,
    progress: &ProgressBar,
) -> anyhow::Result<TagReport> {
    let mut written = TagReport::default();
    if plan.tags_per_author == 0 || report.published == 0 {
        return Ok(written);
    }
    let kind = db.kind();
    let articles = report.first_article_id..report.first_article_id + report.articles() as i64;
    progress.set_message("tags");
    progress.set_length(report.published);
    progress.set_position(0);
    let mut tx = db.writer().begin().await?;
    let suspended = suspend_indexes(&mut tx, kind, tag::SEEDED_BULK_TABLES)
        .await
        .context("suspending the tag rows' index")?;
    let first_tag_of = author_tags(&mut tx, kind, plan, report, &articles, &mut written).await?;
    tag_articles(
        &mut tx,
        kind,
        plan,
        &articles,
        &first_tag_of,
        &mut written,
        progress,
    )
    .await?;
    progress.set_message("indexing");
    restore_indexes(&mut tx, &suspended)
        .await
        .context("building the tag rows' index")?;
    crate::feed::index_seeded_topics(&mut tx, articles)
        .await
        .context("indexing the feed's items by topic")?;
    tx.commit().await.context("committing tags")?;
    Ok(written)
}

/// Writes `--tags-per-author` tags for each author of a published article among `articles`,
/// each created just before the author's first publication. Returns each author's first tag
/// id: author k (by id) has ids `first_tag_id + k·per_author + 0…per_author−1`.
async fn author_tags(
    tx: &mut AnyConnection,
    kind: DatabaseKind,
    plan: &Plan,
    report: &Report,
    articles: &Range<i64>,
    written: &mut TagReport,
) -> anyhow::Result<HashMap<i64, i64>> {
    let per_author = plan.tags_per_author;
    let first_tag_id = tag::next_tag_id(&mut *tx).await?;
    let authors = article::published_authors(&mut *tx, articles.clone()).await?;
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
            tags.push(SeededTag {
                id: first + n as i64,
                uid: author,
                name: VOCABULARY[name as usize],
                ctime: first_published - 1,
            });
        }
    }
    tag::insert_seeded_tags(&mut *tx, kind, &tags)
        .await
        .context("writing tags")?;
    written.tags = tags.len() as u64;
    Ok(first_tag_of)
}

/// Puts 0–3 of its author's tags on each published article among `articles`, reading them
/// [`READ_BATCH`] at a time in id order.
async fn tag_articles(
    tx: &mut AnyConnection,
    kind: DatabaseKind,
    plan: &Plan,
    articles: &Range<i64>,
    first_tag_of: &HashMap<i64, i64>,
    written: &mut TagReport,
    progress: &ProgressBar,
) -> anyhow::Result<()> {
    let mut after = articles.start - 1;
    loop {
        let batch = article::published_after(&mut *tx, after, articles.end, READ_BATCH).await?;
        let Some(last) = batch.last() else {
            break;
        };
        after = last.id;
        let mut rows = Vec::new();
        for published in &batch {
            let Some(&first) = first_tag_of.get(&published.author_id) else {
                continue;
            };
            let before = rows.len();
            rows.extend(article_tags(plan, articles.start, published, first));
            written.tagged_articles += u64::from(rows.len() > before);
        }
        tag::insert_seeded_tag_rows(&mut *tx, kind, &rows)
            .await
            .context("writing the articles' tags")?;
        written.tag_rows += rows.len() as u64;
        progress.inc(batch.len() as u64);
    }
    Ok(())
}

/// The tags on `published`: 0–3 of its author's, whose first tag id is `first`, drawn from
/// the article's own stream (by article index: its id less `first_article_id`).
fn article_tags(
    plan: &Plan,
    first_article_id: i64,
    published: &PublishedArticle,
    first: i64,
) -> impl Iterator<Item = SeededTagRow> {
    let per_author = plan.tags_per_author;
    let mut rng = Rng::new(
        plan.seed,
        Stream::ArticleTags,
        (published.id - first_article_id) as u64,
    );
    let count = rng.below(MAX_TAGS_PER_ARTICLE + 1).min(per_author);
    let mut picked = draw_distinct(&mut rng, per_author, count);
    picked.sort_unstable();
    let &PublishedArticle {
        id: article_id,
        author_id: uid,
        ctime,
    } = published;
    picked.into_iter().map(move |n| SeededTagRow {
        tid: first + n as i64,
        uid,
        article_id,
        ctime,
    })
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
