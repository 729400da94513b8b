//! Phase 5 of `webook seed` ([`super`]): comment threads under the published articles, with
//! every counter the runtime keeps — each comment's `child_cnt`, each top-level comment's
//! `reply_cnt` ([`crate::comment::SeededComment`], written by the comment feature), each
//! article's `comment_cnt` ([`crate::interactive::SeededCommentCount`], added by the
//! interactive feature) — in one transaction, so the counters always match the rows (an
//! interruption leaves no comments at all).
//!
//! What the threads look like: `--comments` are spread over the published articles by the same
//! Zipf ranks as reads and likes, and the `--hot-threads` most popular articles get
//! `--hot-thread-comments` more each (the huge threads benchmarks page through). In a thread,
//! three comments in ten start a new top-level comment; the rest reply to an earlier one —
//! mostly to the first, busiest conversations (a top-level comment drawn with weight falling
//! towards the later ones), half of the time to the latest reply in it rather than to the
//! top-level comment itself, so conversations nest deeply. Comments are dated evenly between
//! the article's publication and `--until`, in id order; their authors are drawn uniformly.

use super::{
    generator::{Batch, Generator, Sink, WriterGone},
    random::{Rng, Stream},
    text,
};
use crate::{comment::SeededComment, interactive::SeededCommentCount};

/// Comments per batch sent to the writer.
const COMMENTS_PER_BATCH: usize = 5_000;
/// Chance that a comment of a thread (after its first) starts a new top-level comment.
const TOP_LEVEL_CHANCE: f64 = 0.3;

/// The comment thread of one article: `count` comments with ids from `first_id`, written by
/// users drawn from `users` (ids from `first_user_id`) between `start` and `until`.
pub struct ThreadPlan {
    /// Seed of the plan.
    pub seed: u64,
    /// Published-article index (the thread's random stream).
    pub published_index: u64,
    /// The article's id.
    pub article_id: i64,
    /// Comments in the thread.
    pub count: u64,
    /// Id of its first comment.
    pub first_id: i64,
    /// Users to draw authors from, and the first one's id.
    pub users: u64,
    /// Id of user index 0.
    pub first_user_id: i64,
    /// The article's publication (ms): comments come after it.
    pub start: i64,
    /// The end of the window (ms).
    pub until: i64,
}

/// The rows of one thread, in id order, counters included.
pub fn thread(plan: &ThreadPlan) -> Vec<SeededComment> {
    let mut rng = Rng::new(plan.seed, Stream::Comments, plan.published_index);
    let count = plan.count as usize;
    let mut rows: Vec<SeededComment> = Vec::with_capacity(count);
    // Indexes (into rows) of the top-level comments, and of each one's latest reply.
    let mut roots: Vec<usize> = Vec::new();
    let mut latest_reply: Vec<Option<usize>> = Vec::new();
    let span = (plan.until - plan.start).max(1);
    for k in 0..count {
        let id = plan.first_id + k as i64;
        let ctime = plan.start + (i128::from(span) * (k as i128 + 1) / (count as i128 + 1)) as i64;
        let uid = plan.first_user_id + rng.below(plan.users.max(1)) as i64;
        let content = text::comment(&mut rng);
        let (root_id, parent_id) = if roots.is_empty() || rng.chance(TOP_LEVEL_CHANCE) {
            roots.push(k);
            latest_reply.push(None);
            (0, 0)
        } else {
            // Falling weight towards later conversations: u³ of the way along.
            let u = rng.unit();
            let r = ((roots.len() as f64) * u * u * u) as usize;
            let r = r.min(roots.len() - 1);
            let root = roots[r];
            let parent = match latest_reply[r] {
                Some(reply) if rng.chance(0.5) => reply,
                _ => root,
            };
            latest_reply[r] = Some(k);
            rows[parent].child_cnt += 1;
            rows[root].reply_cnt += 1;
            (rows[root].id, rows[parent].id)
        };
        rows.push(SeededComment {
            id,
            biz_id: plan.article_id,
            uid,
            root_id,
            parent_id,
            content,
            child_cnt: 0,
            reply_cnt: 0,
            ctime,
        });
    }
    rows
}

impl Generator {
    /// Phase 5 (module docs): every published article's thread, then the articles' counts.
    pub(super) fn comments(&self, send: Sink<'_>) -> Result<(), WriterGone> {
        let counts = &self.comment_counts;
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return Ok(());
        }
        send(Batch::Phase {
            name: "comments",
            rows: total,
        })?;
        let mut first_id = self.first_comment_id;
        let mut batch: Vec<SeededComment> = Vec::with_capacity(COMMENTS_PER_BATCH);
        let mut article_counts = Vec::new();
        for (p, &count) in counts.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let index = self.published[p];
            let article_id = self.first_article_id + index as i64;
            let (start, _) = self.article_times(index);
            let rows = thread(&ThreadPlan {
                seed: self.plan.seed,
                published_index: p as u64,
                article_id,
                count,
                first_id,
                users: self.plan.users,
                first_user_id: self.first_user_id,
                start,
                until: self.plan.until,
            });
            first_id += count as i64;
            article_counts.push(SeededCommentCount {
                biz_id: article_id,
                comments: count as i64,
            });
            for row in rows {
                batch.push(row);
                if batch.len() == COMMENTS_PER_BATCH {
                    send(Batch::Comments(std::mem::take(&mut batch)))?;
                }
            }
        }
        if !batch.is_empty() {
            send(Batch::Comments(batch))?;
        }
        send(Batch::CommentCounts(article_counts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(count: u64) -> ThreadPlan {
        ThreadPlan {
            seed: 7,
            published_index: 3,
            article_id: 42,
            count,
            first_id: 1000,
            users: 50,
            first_user_id: 10,
            start: 1_000_000,
            until: 2_000_000,
        }
    }

    #[test]
    fn threads_are_reproducible_with_counters_that_match_their_rows() {
        let rows = thread(&plan(5_000));
        assert_eq!(rows, thread(&plan(5_000)));
        assert_eq!(rows.len(), 5_000);
        let by_id = |id: i64| &rows[(id - 1000) as usize];
        let mut children = std::collections::HashMap::<i64, i64>::new();
        let mut replies = std::collections::HashMap::<i64, i64>::new();
        for row in &rows {
            assert!((10..60).contains(&row.uid));
            assert!(!row.content.is_empty());
            if row.parent_id == 0 {
                assert_eq!(row.root_id, 0);
                continue;
            }
            let parent = by_id(row.parent_id);
            assert!(parent.id < row.id && parent.ctime <= row.ctime);
            assert_eq!(
                row.root_id,
                if parent.root_id == 0 {
                    parent.id
                } else {
                    parent.root_id
                }
            );
            *children.entry(row.parent_id).or_default() += 1;
            *replies.entry(row.root_id).or_default() += 1;
        }
        for row in &rows {
            assert_eq!(row.child_cnt, children.get(&row.id).copied().unwrap_or(0));
            let expected = if row.root_id == 0 {
                replies.get(&row.id).copied().unwrap_or(0)
            } else {
                0
            };
            assert_eq!(row.reply_cnt, expected);
        }
        let top_level = rows.iter().filter(|row| row.root_id == 0).count();
        assert!((1_200..1_800).contains(&top_level), "{top_level}");
        let deepest = rows
            .iter()
            .filter(|row| row.parent_id != row.root_id)
            .count();
        assert!(deepest > 1_000, "replies to replies: {deepest}");
        assert!(rows.windows(2).all(|w| w[0].ctime <= w[1].ctime));
    }
}
