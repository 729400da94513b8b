//! Phase 2 of `webook seed` ([`super`]): the articles, in batches of [`ARTICLES_PER_BATCH`],
//! each written in a transaction of its own by the article feature
//! ([`crate::article::SeededArticle`]: the author's copy, and the reader copy of those ever
//! published). No counters yet (an article nobody has read) and no feed items yet (the state of
//! a database whose feed was added after its articles).
//!
//! Authors are drawn by the users' Zipf weights (a few prolific ones); each article's status
//! and times come from [`Generator`] (statuses decided up front, creation times spread evenly
//! over the window in id order); its language, title and body from [`text`].

use super::{
    generator::{Batch, Generator, Sink, WriterGone},
    random::{Rng, Stream, WeightedPicker},
    text::{self, Language},
};
use crate::article::SeededArticle;

/// Articles per batch, and so per transaction.
const ARTICLES_PER_BATCH: usize = 2_000;

impl Generator {
    /// Phase 2: every article. Returns each article's author (by article index: the author's
    /// user index), for the feed.
    pub(super) fn articles(&self, send: Sink<'_>) -> Result<Vec<u32>, WriterGone> {
        let plan = &self.plan;
        send(Batch::Phase {
            name: "articles",
            rows: plan.articles,
        })?;
        let authors = WeightedPicker::new(&self.author_weights);
        let mut article_authors: Vec<u32> = Vec::with_capacity(plan.articles as usize);
        for start in (0..plan.articles).step_by(ARTICLES_PER_BATCH) {
            let end = (start + ARTICLES_PER_BATCH as u64).min(plan.articles);
            let rows: Vec<SeededArticle> =
                (start..end).map(|i| self.article(i, &authors)).collect();
            article_authors.extend(
                rows.iter()
                    .map(|row| (row.author_id - self.first_user_id) as u32),
            );
            send(Batch::Articles(rows))?;
        }
        Ok(article_authors)
    }

    fn article(&self, index: u64, authors: &WeightedPicker) -> SeededArticle {
        let mut rng = Rng::new(self.plan.seed, Stream::ArticleText, index);
        let author = authors.pick(&mut rng) as i64;
        let language = Language::draw(&mut rng);
        let text = text::article(&mut rng, language);
        let (ctime, utime) = self.article_times(index);
        SeededArticle {
            id: self.first_article_id + index as i64,
            author_id: self.first_user_id + author,
            title: text.title,
            content: text.content,
            abstract_text: text.abstract_text,
            status: i64::from(self.statuses[index as usize]),
            ctime,
            utime,
        }
    }
}
