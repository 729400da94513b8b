//! Phase 4 of `webook seed` ([`super`]): the follows and their counts, then the feed the
//! feed's consumers would have built from them — one item per published article, the pull
//! authors and every follower's inbox — written by the feed feature
//! ([`crate::feed::SeededFollow`] and the rest) in one transaction for the whole phase, so the
//! counts always match the follow rows and the feed always agrees with the follows.
//!
//! Data flow: one pass over every follow ([`FollowTally`]) counts each user's followees, dates
//! each user's last follow and sizes each inbox; the follows are then sent sorted by follower
//! (the order of their unique index), in passes over ranges of followers
//! ([`Generator::follow_passes`], at most about
//! [`Plan::likes_per_pass`](super::Plan::likes_per_pass) follows in memory), with the counts
//! after them; then the items in id (= publication) order and the pull authors; then each
//! follower's inbox — the newest `feed_inbox_cap` of its followees' pushed items, a k-way merge
//! from the ends of their lists ([`newest_items`]) — by follower again, in the same passes.
//!
//! Who follows whom: each user's followers are distinct other users (`start + k·step mod
//! (users − 1)` over the other users), and every follow is made after both users registered and
//! before the first article (at the latest when the article window opens). An item is
//! **pulled** when its author has more than `feed_push_threshold` followers (the author is then
//! a pull author since their first article published, withdrawn ones included), else
//! **pushed**. Withdrawn articles have no item (their withdrawal removed it).

use std::collections::BinaryHeap;

use super::{
    generator::{Batch, Generator, Sink, WriterGone, PUBLISHED},
    random::{coprime_step, Rng, Stream},
};
use crate::feed::{
    Delivery, SeededFeedItem, SeededFollow, SeededFollowCount, SeededInboxRow, SeededPullAuthor,
};

/// Rows per batch sent to the writer.
const ROWS_PER_BATCH: usize = 10_000;

/// A feed item being generated: a published article.
struct Item {
    /// Article index.
    article: u64,
    /// Author's user index.
    author: u32,
    /// Publication time.
    ctime: i64,
}

/// The pushed items (indexes into the items) of each author, ascending.
struct Pushed {
    /// Author `a`'s are `items[starts[a]..starts[a + 1]]`.
    starts: Vec<usize>,
    items: Vec<u32>,
}

impl Pushed {
    /// The pushed items of `users` authors among `items`: those whose author is not `pulled`.
    fn of(items: &[Item], users: usize, pulled: impl Fn(u32) -> bool) -> Self {
        let mut starts = vec![0usize; users + 1];
        for item in items.iter().filter(|item| !pulled(item.author)) {
            starts[item.author as usize + 1] += 1;
        }
        for user in 0..users {
            starts[user + 1] += starts[user];
        }
        let mut pushed = vec![0u32; starts[users]];
        let mut next = starts.clone();
        for (q, item) in items.iter().enumerate() {
            if !pulled(item.author) {
                let slot = &mut next[item.author as usize];
                pushed[*slot] = q as u32;
                *slot += 1;
            }
        }
        Self {
            starts,
            items: pushed,
        }
    }

    /// The pushed items of user index `author`, ascending.
    fn of_author(&self, author: usize) -> &[u32] {
        &self.items[self.starts[author]..self.starts[author + 1]]
    }
}

/// What one pass over every follow finds, by user index.
struct FollowTally {
    /// Registration times (empty without follows).
    registered: Vec<i64>,
    /// Users each one follows.
    followees: Vec<u64>,
    /// Time of each user's last follow, either way.
    last_follow: Vec<i64>,
    /// Pushed items each follower's inbox would get before the cap.
    inbox_wanted: Vec<u64>,
    /// Follows of authors with pushed items: the keys the inbox passes sort.
    feeding: u64,
}

impl Generator {
    /// Phase 4 (module docs): the follows and their counts, then one item per published
    /// article and the pull authors, then every follower's inbox of pushed items (its newest
    /// `feed_inbox_cap`). `article_authors` maps article index → author's user index.
    pub(super) fn follows_and_feed(
        &self,
        article_authors: &[u32],
        send: Sink<'_>,
    ) -> Result<(), WriterGone> {
        let items = self.feed_items(article_authors);
        let pushed = Pushed::of(&items, self.plan.users as usize, |author| {
            self.pulled(author)
        });
        let tally = self.tally_follows(&pushed);
        if self.plan.follows > 0 {
            self.follows(&tally, send)?;
        }
        self.feed(&items, article_authors, send)?;
        self.inboxes(&items, &pushed, &tally, send)
    }

    /// Whether the items of user index `author` are pulled: above the push threshold.
    fn pulled(&self, author: u32) -> bool {
        self.followers[author as usize] as i64 > self.plan.feed.feed_push_threshold
    }

    /// The items: the published articles in id (= publication) order; item q has id
    /// first_feed_item_id + q, so (time, id) order is item order.
    fn feed_items(&self, article_authors: &[u32]) -> Vec<Item> {
        (0..self.plan.articles)
            .filter(|&i| self.statuses[i as usize] == PUBLISHED)
            .map(|i| Item {
                article: i,
                author: article_authors[i as usize],
                ctime: self.article_times(i).0,
            })
            .collect()
    }

    /// One pass over every follow: followee counts, the last follow of each user, and how
    /// many pushed items each follower's inbox would get before the cap.
    fn tally_follows(&self, pushed: &Pushed) -> FollowTally {
        let plan = &self.plan;
        let users = plan.users as usize;
        let registered: Vec<i64> = if plan.follows == 0 {
            Vec::new()
        } else {
            (0..plan.users)
                .map(|u| self.registration(u, &mut Rng::new(plan.seed, Stream::User, u)))
                .collect()
        };
        let mut followees = vec![0u64; users];
        let mut last_follow = vec![0i64; users];
        let mut inbox_wanted = vec![0u64; users];
        let mut feeding = 0u64;
        for followee in 0..users {
            let count = self.followers[followee];
            if count == 0 {
                continue;
            }
            let items = pushed.of_author(followee).len() as u64;
            if items > 0 {
                feeding += count;
            }
            for follower in self.followers_of(followee as u64, count) {
                let time = self.follow_time(follower, followee as u64, &registered);
                let follower = follower as usize;
                followees[follower] += 1;
                inbox_wanted[follower] += items;
                last_follow[follower] = last_follow[follower].max(time);
                last_follow[followee] = last_follow[followee].max(time);
            }
        }
        FollowTally {
            registered,
            followees,
            last_follow,
            inbox_wanted,
            feeding,
        }
    }

    /// The follows, sorted by follower, then the counts of every user following or followed.
    fn follows(&self, tally: &FollowTally, send: Sink<'_>) -> Result<(), WriterGone> {
        let plan = &self.plan;
        let users = plan.users as usize;
        let followers = &self.followers;
        let counted = |u: usize| followers[u] + tally.followees[u] > 0;
        send(Batch::Phase {
            name: "follows",
            rows: plan.follows + (0..users).filter(|&u| counted(u)).count() as u64,
        })?;
        self.follow_passes(
            plan.follows,
            |_| true,
            |keys| {
                for chunk in keys.chunks(ROWS_PER_BATCH) {
                    let rows = chunk
                        .iter()
                        .map(|&key| {
                            let (follower, followee) = (key >> 32, key & 0xffff_ffff);
                            SeededFollow {
                                follower: self.first_user_id + follower as i64,
                                followee: self.first_user_id + followee as i64,
                                time: self.follow_time(follower, followee, &tally.registered),
                            }
                        })
                        .collect();
                    send(Batch::Follows(rows))?;
                }
                Ok(())
            },
        )?;
        let counts: Vec<SeededFollowCount> = (0..users)
            .filter(|&u| counted(u))
            .map(|u| SeededFollowCount {
                uid: self.first_user_id + u as i64,
                followers: followers[u] as i64,
                followees: tally.followees[u] as i64,
                utime: tally.last_follow[u],
            })
            .collect();
        for chunk in counts.chunks(ROWS_PER_BATCH) {
            send(Batch::FollowCounts(chunk.to_vec()))?;
        }
        Ok(())
    }

    /// The items, pushed or pulled, then the pull authors.
    fn feed(
        &self,
        items: &[Item],
        article_authors: &[u32],
        send: Sink<'_>,
    ) -> Result<(), WriterGone> {
        let pull_authors = self.pull_authors(article_authors);
        send(Batch::Phase {
            name: "feed",
            rows: (items.len() + pull_authors.len()) as u64,
        })?;
        for (chunk_index, chunk) in items.chunks(ROWS_PER_BATCH).enumerate() {
            let first = chunk_index * ROWS_PER_BATCH;
            let rows = chunk
                .iter()
                .enumerate()
                .map(|(k, item)| SeededFeedItem {
                    id: self.first_feed_item_id + (first + k) as i64,
                    article_id: self.first_article_id + item.article as i64,
                    actor: self.first_user_id + i64::from(item.author),
                    delivery: if self.pulled(item.author) {
                        Delivery::Pulled
                    } else {
                        Delivery::Pushed
                    },
                    ctime: item.ctime,
                })
                .collect();
            send(Batch::FeedItems(rows))?;
        }
        for chunk in pull_authors.chunks(ROWS_PER_BATCH) {
            send(Batch::PullAuthors(chunk.to_vec()))?;
        }
        Ok(())
    }

    /// The pull authors, by id: since their first article published above the threshold
    /// (withdrawn ones count: the consumer saw them published).
    fn pull_authors(&self, article_authors: &[u32]) -> Vec<SeededPullAuthor> {
        let mut pull_authors = Vec::new();
        let mut joined = vec![false; self.plan.users as usize];
        for &i in &self.published {
            let author = article_authors[i as usize];
            if self.pulled(author) && !std::mem::replace(&mut joined[author as usize], true) {
                pull_authors.push(SeededPullAuthor {
                    uid: self.first_user_id + i64::from(author),
                    ctime: self.article_times(i).0,
                });
            }
        }
        pull_authors.sort_unstable_by_key(|row| row.uid);
        pull_authors
    }

    /// Every follower's inbox: the newest `feed_inbox_cap` pushed items of its followees,
    /// by follower.
    fn inboxes(
        &self,
        items: &[Item],
        pushed: &Pushed,
        tally: &FollowTally,
        send: Sink<'_>,
    ) -> Result<(), WriterGone> {
        let cap = self.plan.feed.feed_inbox_cap as u64;
        let inbox_rows: u64 = tally
            .inbox_wanted
            .iter()
            .map(|&wanted| wanted.min(cap))
            .sum();
        if inbox_rows == 0 {
            return Ok(());
        }
        send(Batch::Phase {
            name: "inboxes",
            rows: inbox_rows,
        })?;
        let mut batch = Vec::with_capacity(ROWS_PER_BATCH);
        let (mut heap, mut newest) = (BinaryHeap::new(), Vec::new());
        self.follow_passes(
            tally.feeding,
            |followee| !pushed.of_author(followee).is_empty(),
            |keys| {
                for follows in keys.chunk_by(|a, b| a >> 32 == b >> 32) {
                    let follower = follows[0] >> 32;
                    let lists: Vec<&[u32]> = follows
                        .iter()
                        .map(|&key| pushed.of_author((key & 0xffff_ffff) as usize))
                        .collect();
                    newest_items(&lists, cap, &mut heap, &mut newest);
                    for &q in newest.iter().rev() {
                        let item = &items[q as usize];
                        batch.push(SeededInboxRow {
                            uid: self.first_user_id + follower as i64,
                            event_id: self.first_feed_item_id + i64::from(q),
                            actor: self.first_user_id + i64::from(item.author),
                            ctime: item.ctime,
                        });
                        if batch.len() == ROWS_PER_BATCH {
                            send(Batch::Inbox(std::mem::take(&mut batch)))?;
                        }
                    }
                }
                Ok(())
            },
        )?;
        if !batch.is_empty() {
            send(Batch::Inbox(batch))?;
        }
        Ok(())
    }

    /// The follows whose followee (user index) passes `wanted`, `total` of them, as keys
    /// `(follower << 32) | followee` sorted (by follower first), in passes over ranges of
    /// followers of about [`Plan::likes_per_pass`](super::Plan::likes_per_pass) follows each;
    /// `each` gets every pass's keys.
    fn follow_passes(
        &self,
        total: u64,
        wanted: impl Fn(usize) -> bool,
        mut each: impl FnMut(&[u64]) -> Result<(), WriterGone>,
    ) -> Result<(), WriterGone> {
        let users = self.plan.users;
        let passes = total.div_ceil(self.plan.likes_per_pass).max(1);
        let users_per_pass = users.div_ceil(passes);
        let mut keys: Vec<u64> = Vec::new();
        for pass in 0..passes {
            let range = pass * users_per_pass..((pass + 1) * users_per_pass).min(users);
            keys.clear();
            for followee in 0..users {
                let count = self.followers[followee as usize];
                if count == 0 || !wanted(followee as usize) {
                    continue;
                }
                keys.extend(
                    self.followers_of(followee, count)
                        .filter(|follower| range.contains(follower))
                        .map(|follower| (follower << 32) | followee),
                );
            }
            keys.sort_unstable();
            each(&keys)?;
        }
        Ok(())
    }

    /// The `count` followers of user `followee` (indexes): distinct users other than itself,
    /// `start + k·step mod (users − 1)` over the other users (a step coprime to their number).
    fn followers_of(&self, followee: u64, count: u64) -> impl Iterator<Item = u64> {
        let others = self.plan.users.saturating_sub(1).max(1);
        let mut rng = Rng::new(self.plan.seed, Stream::Followers, followee);
        let step = coprime_step(others, &mut rng);
        let start = rng.below(others);
        (0..count).map(move |k| {
            let other = (start + k * step) % others;
            other + u64::from(other >= followee)
        })
    }

    /// When user `follower` followed `followee` (indexes): after both registered
    /// (`registered`, by index), before the first article (at the latest when the window opens).
    fn follow_time(&self, follower: u64, followee: u64, registered: &[i64]) -> i64 {
        let after = registered[follower as usize].max(registered[followee as usize]) + 1;
        let span = (self.window_start() - after + 1).max(1) as u64;
        let mut rng = Rng::new(
            self.plan.seed,
            Stream::FollowTime,
            (follower << 32) | followee,
        );
        after + rng.below(span) as i64
    }
}

/// The newest `cap` items of `lists` (each ascending; no item in two), newest first, into
/// `out`: a k-way merge from the lists' ends.
fn newest_items(
    lists: &[&[u32]],
    cap: u64,
    heap: &mut BinaryHeap<(u32, usize, usize)>,
    out: &mut Vec<u32>,
) {
    heap.clear();
    out.clear();
    for (list, items) in lists.iter().enumerate() {
        if let Some(&last) = items.last() {
            heap.push((last, list, items.len() - 1));
        }
    }
    while (out.len() as u64) < cap {
        let Some((item, list, position)) = heap.pop() else {
            break;
        };
        out.push(item);
        if position > 0 {
            heap.push((lists[list][position - 1], list, position - 1));
        }
    }
}
