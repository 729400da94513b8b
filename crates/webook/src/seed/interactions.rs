//! Phase 3 of `webook seed` ([`super`]): every published article's counters, then the likes and
//! the collects, written by the interactive feature ([`crate::interactive::SeededCounters`],
//! [`crate::interactive::SeededInteraction`]) in one transaction for the whole phase, so the
//! counters always match the like and collect rows.
//!
//! Reads, likes and collects follow the articles' popularity
//! ([`Popularity`](super::generator::Popularity)); each article's likers are distinct users
//! (`start + k·step mod users`, a step coprime to the number of users), and every like comes
//! after its article. Likes are sent sorted by user (the order of `user_likes`' unique index)
//! in passes over ranges of users of about
//! [`Plan::likes_per_pass`](super::Plan::likes_per_pass) likes each, so the index grows at its
//! end instead of being rewritten at random; collects the same.

use super::{
    generator::{Batch, Generator, Sink, WriterGone},
    random::{coprime_step, Rng, Stream},
};
use crate::interactive::{LikeOrCollect, SeededCounters, SeededInteraction};

/// Rows per batch sent to the writer.
const ROWS_PER_BATCH: usize = 10_000;

impl Generator {
    /// Phase 3, first part: the counters of every published article read, liked or collected.
    pub(super) fn counters(&self, send: Sink<'_>) -> Result<(), WriterGone> {
        let plan = &self.plan;
        let (published, popularity) = (&self.published, &self.popularity);
        let counted =
            |p: usize| popularity.reads[p] + popularity.likes[p] + popularity.collects[p] > 0;
        send(Batch::Phase {
            name: "counters",
            rows: (0..published.len()).filter(|&p| counted(p)).count() as u64,
        })?;
        let mut batch = Vec::with_capacity(ROWS_PER_BATCH);
        for (p, &i) in published.iter().enumerate() {
            if !counted(p) {
                continue;
            }
            let (ctime, _) = self.article_times(i);
            batch.push(SeededCounters {
                biz_id: self.first_article_id + i as i64,
                reads: popularity.reads[p] as i64,
                likes: popularity.likes[p] as i64,
                collects: popularity.collects[p] as i64,
                ctime,
                utime: plan.until,
            });
            if batch.len() == ROWS_PER_BATCH {
                send(Batch::Counters(std::mem::take(&mut batch)))?;
            }
        }
        if !batch.is_empty() {
            send(Batch::Counters(batch))?;
        }
        Ok(())
    }

    /// Phase 3, second part: the likes, then the collects (none when the plan has none).
    pub(super) fn likes_and_collects(&self, send: Sink<'_>) -> Result<(), WriterGone> {
        let (plan, popularity) = (&self.plan, &self.popularity);
        for (kind, counts, total) in [
            (LikeOrCollect::Like, &popularity.likes, plan.likes),
            (LikeOrCollect::Collect, &popularity.collects, plan.collects),
        ] {
            if total == 0 {
                continue;
            }
            send(Batch::Phase {
                name: match kind {
                    LikeOrCollect::Like => "likes",
                    LikeOrCollect::Collect => "collects",
                },
                rows: total,
            })?;
            self.interactions(kind, counts, &self.published, total, send)?;
        }
        Ok(())
    }

    /// The likes (or collects) of every published article, sorted by user, in passes over
    /// ranges of users of at most about [`Plan::likes_per_pass`](super::Plan::likes_per_pass)
    /// rows each.
    fn interactions(
        &self,
        kind: LikeOrCollect,
        counts: &[u64],
        published: &[u64],
        total: u64,
        send: Sink<'_>,
    ) -> Result<(), WriterGone> {
        let plan = &self.plan;
        let users = plan.users;
        let passes = total.div_ceil(plan.likes_per_pass).max(1);
        let users_per_pass = users.div_ceil(passes);
        let stream = match kind {
            LikeOrCollect::Like => Stream::Likers,
            LikeOrCollect::Collect => Stream::Collectors,
        };
        let time_salt = match kind {
            LikeOrCollect::Like => 0,
            LikeOrCollect::Collect => 1u64 << 62,
        };
        let mut keys: Vec<u64> = Vec::new();
        for pass in 0..passes {
            let (low, high) = (
                pass * users_per_pass,
                ((pass + 1) * users_per_pass).min(users),
            );
            keys.clear();
            for (p, &count) in counts.iter().enumerate() {
                if count == 0 {
                    continue;
                }
                let mut rng = Rng::new(plan.seed, stream, p as u64);
                let step = coprime_step(users, &mut rng);
                let start = rng.below(users);
                for k in 0..count {
                    let user = (start + k * step) % users;
                    if (low..high).contains(&user) {
                        keys.push((user << 32) | p as u64);
                    }
                }
            }
            keys.sort_unstable();
            for chunk in keys.chunks(ROWS_PER_BATCH) {
                let rows = chunk
                    .iter()
                    .map(|&key| {
                        let (user, p) = (key >> 32, key & 0xffff_ffff);
                        let index = published[p as usize];
                        let (ctime, _) = self.article_times(index);
                        let after = Rng::new(plan.seed, Stream::InteractionTime, key ^ time_salt)
                            .below((plan.until - ctime).max(1) as u64);
                        SeededInteraction {
                            uid: self.first_user_id + user as i64,
                            biz_id: self.first_article_id + index as i64,
                            time: ctime + after as i64,
                        }
                    })
                    .collect();
                send(Batch::Interactions(kind, rows))?;
            }
        }
        Ok(())
    }
}
