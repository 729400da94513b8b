//! Pure ranking logic of the hot list: how hot an article is ([`ScoreFormula`]) and how the best
//! `N` of a stream of scored articles are kept ([`TopN`]). No I/O, no clock: the caller passes
//! "now" in, so every result here is a function of its arguments.
//!
//! # Score formulas
//!
//! `hours` is the time since the article's **first** publication, in (fractional) hours, so
//! editing or republishing an article does not make it fresh again. It is clamped at `0`: an
//! article whose publication time lies in the future (clock skew between instances, a bad row)
//! counts as published just now and cannot outrank everything.
//!
//! - **Hacker News** (the default, gravity `1.5`):
//!   `(likes - 1) / (hours + 2)^gravity`. Votes dominate; the denominator decays old articles.
//! - **Reddit "hot"**:
//!   `sign(likes) * log10(max(|likes|, 1)) + (first_published_seconds - 1_134_028_003) / 45_000`.
//!   Votes count logarithmically (10 likes = 1 point, 100 = 2 points) and every 45 000 s
//!   (12.5 hours) of newer publication is worth one more point. It does not depend on "now"
//!   except through the clamp: a publication time after `now` is taken as `now`.
//! - **Weighted** (Hacker News skeleton, several interactions):
//!   `(likes * w_likes + collects * w_collects + reads * w_reads) / (hours + 2)^gravity`.
//!
//! Every score is finite: arithmetic is done in `f64` from exact integer differences, and a
//! result that would still overflow (absurd weights) is clamped to `±f64::MAX`; a `NaN` (only
//! reachable with parameters that [`ScoreFormula::from_config`] rejects) becomes `0`.
//!
//! # Top N and the tie-break
//!
//! [`TopN`] keeps the best `n` items in a bounded binary **min-heap** whose root is the worst
//! kept item. Items are ordered by `(score, id)`: a higher score ranks higher and, between equal
//! scores, the higher id (the newer article) ranks higher. Scores are compared with
//! [`f64::total_cmp`], except that `-0.0` equals `0.0` and any `NaN` ranks below every number
//! (including `-inf`), so the order is total and deterministic whatever the input order.
//! Until the heap is full every item goes in; afterwards a new item replaces the root only when
//! it ranks **strictly** higher, so of two items with the same `(score, id)` the one offered
//! first is kept (ids are unique in practice).
//!
//! Complexity for `M` offered items: `O(M log N)` time (`O(1)` for an item that does not beat
//! the root, `O(log N)` otherwise) and `O(N)` memory — the heap's own vector is the only
//! allocation, and [`TopN::into_sorted`] sorts it in place (`O(N log N)`).

use std::cmp::Ordering;

/// Gravity of the default Hacker News formula.
pub const DEFAULT_GRAVITY: f64 = 1.5;

/// Largest accepted gravity (beyond it every article older than an hour scores ~0).
pub const MAX_GRAVITY: f64 = 10.0;

/// Reddit's epoch offset, in seconds (2005-12-08T07:46:43Z).
const REDDIT_EPOCH_SECONDS: f64 = 1_134_028_003.0;

/// Seconds of newer publication worth one Reddit point (12.5 hours).
const REDDIT_SECONDS_PER_POINT: f64 = 45_000.0;

/// Milliseconds in an hour.
const MS_PER_HOUR: f64 = 3_600_000.0;

/// Upper bound of the capacity [`TopN::new`] reserves up front; a larger `n` still works, the
/// vector then grows as items arrive (never beyond `n`).
const MAX_PREALLOCATED: usize = 1 << 16;

/// Interaction counts of one article.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signals {
    /// Number of likes.
    pub likes: i64,
    /// Number of collects (bookmarks).
    pub collects: i64,
    /// Number of reads.
    pub reads: i64,
}

/// How an article's hotness is computed; see the module documentation for the formulas.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScoreFormula {
    /// `(likes - 1) / (hours + 2)^gravity`
    HackerNews {
        /// Exponent of the time decay (default [`DEFAULT_GRAVITY`]).
        gravity: f64,
    },
    /// Reddit "hot": `sign(likes) * log10(max(|likes|, 1)) + (first_published_seconds - 1_134_028_003) / 45_000`
    Reddit,
    /// `(likes*w_likes + collects*w_collects + reads*w_reads) / (hours + 2)^gravity`
    Weighted {
        /// Weight of one like.
        likes: f64,
        /// Weight of one collect.
        collects: f64,
        /// Weight of one read.
        reads: f64,
        /// Exponent of the time decay.
        gravity: f64,
    },
}

impl Default for ScoreFormula {
    /// Hacker News with gravity [`DEFAULT_GRAVITY`].
    fn default() -> Self {
        ScoreFormula::HackerNews {
            gravity: DEFAULT_GRAVITY,
        }
    }
}

impl ScoreFormula {
    /// Score at `now_ms` of an article first published at `first_published_ms` (epoch ms).
    /// Hours since publication are clamped at 0 (a future timestamp counts as just published).
    /// Always finite.
    pub fn score(&self, signals: Signals, first_published_ms: i64, now_ms: i64) -> f64 {
        // A future publication counts as published now; i64::min keeps it exact.
        let published_ms = first_published_ms.min(now_ms);
        let raw = match *self {
            ScoreFormula::HackerNews { gravity } => {
                let hours = hours_between(published_ms, now_ms);
                (signals.likes as f64 - 1.0) / decay(hours, gravity)
            }
            ScoreFormula::Reddit => {
                let likes = signals.likes as f64;
                let order = likes.abs().max(1.0).log10();
                let sign = if signals.likes > 0 {
                    1.0
                } else if signals.likes < 0 {
                    -1.0
                } else {
                    0.0
                };
                let seconds = published_ms as f64 / 1000.0 - REDDIT_EPOCH_SECONDS;
                sign * order + seconds / REDDIT_SECONDS_PER_POINT
            }
            ScoreFormula::Weighted {
                likes,
                collects,
                reads,
                gravity,
            } => {
                let hours = hours_between(published_ms, now_ms);
                let weighted = signals.likes as f64 * likes
                    + signals.collects as f64 * collects
                    + signals.reads as f64 * reads;
                weighted / decay(hours, gravity)
            }
        };
        finite(raw)
    }

    /// Parses config: name "hacker_news" (aliases "hn"), "reddit", "weighted" (trimmed, ASCII
    /// case-insensitive); gravity and weights `(likes, collects, reads)` passed in; rejects
    /// non-finite or negative gravity/weights and gravity > 10 with a clear message naming the
    /// setting (e.g. "ranking_gravity must be between 0 and 10, got 11").
    ///
    /// Every setting is checked whatever the formula, so a bad value never lies dormant until
    /// someone switches formulas. The weighted formula also needs at least one non-zero weight.
    pub fn from_config(name: &str, gravity: f64, weights: (f64, f64, f64)) -> Result<Self, String> {
        let normalized = name.trim().to_ascii_lowercase();
        let kind = match normalized.as_str() {
            "hacker_news" | "hn" => Kind::HackerNews,
            "reddit" => Kind::Reddit,
            "weighted" => Kind::Weighted,
            _ => {
                return Err(format!(
                    "ranking_formula must be one of \"hacker_news\" (alias \"hn\"), \"reddit\", \
                     \"weighted\", got {name:?}"
                ))
            }
        };
        if !gravity.is_finite() || !(0.0..=MAX_GRAVITY).contains(&gravity) {
            return Err(format!(
                "ranking_gravity must be between 0 and {MAX_GRAVITY}, got {gravity}"
            ));
        }
        let (likes, collects, reads) = weights;
        for (setting, weight) in [
            ("ranking_weight_likes", likes),
            ("ranking_weight_collects", collects),
            ("ranking_weight_reads", reads),
        ] {
            if !weight.is_finite() || weight < 0.0 {
                return Err(format!(
                    "{setting} must be a finite number >= 0, got {weight}"
                ));
            }
        }
        Ok(match kind {
            Kind::HackerNews => ScoreFormula::HackerNews { gravity },
            Kind::Reddit => ScoreFormula::Reddit,
            Kind::Weighted => {
                if likes == 0.0 && collects == 0.0 && reads == 0.0 {
                    return Err("ranking_weight_likes, ranking_weight_collects and \
                                ranking_weight_reads must not all be 0 for the weighted formula"
                        .to_string());
                }
                ScoreFormula::Weighted {
                    likes,
                    collects,
                    reads,
                    gravity,
                }
            }
        })
    }
}

/// Formula names accepted by [`ScoreFormula::from_config`], before their parameters are checked.
enum Kind {
    HackerNews,
    Reddit,
    Weighted,
}

/// Hours from `from_ms` to `to_ms`, at least 0; exact integer difference (no overflow).
fn hours_between(from_ms: i64, to_ms: i64) -> f64 {
    let elapsed_ms = (i128::from(to_ms) - i128::from(from_ms)).max(0);
    elapsed_ms as f64 / MS_PER_HOUR
}

/// The time-decay denominator `(hours + 2)^gravity`.
fn decay(hours: f64, gravity: f64) -> f64 {
    (hours + 2.0).powf(gravity)
}

/// `x` made finite: `NaN` → 0, `±inf` → `±f64::MAX`.
fn finite(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(f64::MIN, f64::MAX)
    }
}

/// The ranking order of `(score, id)` pairs: higher score, then higher id, ranks higher
/// (`Greater`). `NaN` is below every number, `-0.0 == 0.0`, otherwise [`f64::total_cmp`].
fn rank_cmp(a_score: f64, a_id: i64, b_score: f64, b_id: i64) -> Ordering {
    let by_score = match (a_score.is_nan(), b_score.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) if a_score == b_score => Ordering::Equal,
        (false, false) => a_score.total_cmp(&b_score),
    };
    by_score.then(a_id.cmp(&b_id))
}

/// One kept item with its ranking key.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked<T> {
    /// The item's score.
    pub score: f64,
    /// The item's id (the tie-break between equal scores: higher first).
    pub id: i64,
    /// The item itself.
    pub item: T,
}

impl<T> Ranked<T> {
    /// `self` compared with `other` in ranking order (`Greater` = ranks higher).
    fn rank(&self, other: &Self) -> Ordering {
        rank_cmp(self.score, self.id, other.score, other.id)
    }
}

/// The best `n` items seen, in a bounded min-heap.
#[derive(Debug, Clone)]
pub struct TopN<T> {
    /// How many items to keep.
    limit: usize,
    /// Binary min-heap in ranking order: `heap[0]` is the worst kept item and every parent
    /// ranks no higher than its children.
    heap: Vec<Ranked<T>>,
}

impl<T> TopN<T> {
    /// An empty top-`n`; `TopN::new(0)` keeps nothing. Reserves room for `n` items up front.
    pub fn new(n: usize) -> Self {
        TopN {
            limit: n,
            heap: Vec::with_capacity(n.min(MAX_PREALLOCATED)),
        }
    }

    /// Offers an item; O(log n). NaN scores are treated as the lowest possible score.
    pub fn push(&mut self, score: f64, id: i64, item: T) {
        let candidate = Ranked { score, id, item };
        if self.heap.len() < self.limit {
            self.heap.push(candidate);
            self.sift_up(self.heap.len() - 1);
        } else if let Some(root) = self.heap.first_mut() {
            if candidate.rank(root) == Ordering::Greater {
                *root = candidate;
                self.sift_down(0);
            }
        }
    }

    /// Number of items kept.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no item is kept.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The kept items, best first: higher score, then higher id.
    pub fn into_sorted(self) -> Vec<Ranked<T>> {
        let mut items = self.heap;
        items.sort_unstable_by(|a, b| b.rank(a));
        items
    }

    /// Restores the heap property upwards from `index` after a push.
    fn sift_up(&mut self, mut index: usize) {
        while index > 0 {
            let parent = (index - 1) / 2;
            if self.heap[index].rank(&self.heap[parent]) == Ordering::Less {
                self.heap.swap(index, parent);
                index = parent;
            } else {
                break;
            }
        }
    }

    /// Restores the heap property downwards from `index` after the root was replaced.
    fn sift_down(&mut self, mut index: usize) {
        let len = self.heap.len();
        loop {
            let left = 2 * index + 1;
            let right = left + 1;
            let mut smallest = index;
            if left < len && self.heap[left].rank(&self.heap[smallest]) == Ordering::Less {
                smallest = left;
            }
            if right < len && self.heap[right].rank(&self.heap[smallest]) == Ordering::Less {
                smallest = right;
            }
            if smallest == index {
                break;
            }
            self.heap.swap(index, smallest);
            index = smallest;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const HOUR_MS: i64 = 3_600_000;
    /// 2024-01-01T00:00:00Z.
    const NOW_MS: i64 = 1_704_067_200_000;

    fn hn() -> ScoreFormula {
        ScoreFormula::HackerNews {
            gravity: DEFAULT_GRAVITY,
        }
    }

    fn likes(likes: i64) -> Signals {
        Signals {
            likes,
            ..Signals::default()
        }
    }

    fn assert_close(actual: f64, expected: f64) {
        let tolerance = 1e-12 * expected.abs().max(1.0);
        assert!(
            (actual - expected).abs() <= tolerance,
            "expected {expected}, got {actual}"
        );
    }

    /// SplitMix64: a tiny deterministic PRNG for the property tests.
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// Uniform-ish in `0..bound` (`bound > 0`).
        fn below(&mut self, bound: u64) -> u64 {
            self.next_u64() % bound
        }
    }

    // ---- scores -------------------------------------------------------------------------

    #[test]
    fn hacker_news_matches_hand_computed_value() {
        // (11 - 1) / (2 + 2)^1.5 = 10 / 8
        let score = hn().score(likes(11), NOW_MS - 2 * HOUR_MS, NOW_MS);
        assert_close(score, 1.25);
        // gravity 2: (5 - 1) / (0 + 2)^2 = 1
        let g2 = ScoreFormula::HackerNews { gravity: 2.0 };
        assert_close(g2.score(likes(5), NOW_MS, NOW_MS), 1.0);
        // gravity 0: no decay at all
        let g0 = ScoreFormula::HackerNews { gravity: 0.0 };
        assert_close(g0.score(likes(5), NOW_MS - 1000 * HOUR_MS, NOW_MS), 4.0);
        // no likes: (0 - 1) / 2^1.5
        assert_close(hn().score(likes(0), NOW_MS, NOW_MS), -1.0 / 8f64.sqrt());
    }

    #[test]
    fn hacker_news_uses_fractional_hours() {
        // 30 minutes: (3 - 1) / 2.5^1.5
        let score = hn().score(likes(3), NOW_MS - HOUR_MS / 2, NOW_MS);
        assert_close(score, 2.0 / 2.5f64.powf(1.5));
    }

    #[test]
    fn reddit_matches_hand_computed_value() {
        // Published exactly 45 000 s after Reddit's epoch: time part 1.
        let published = (1_134_028_003 + 45_000) * 1000;
        let now = published + 10 * HOUR_MS; // "now" only matters for the clamp
        assert_close(ScoreFormula::Reddit.score(likes(100), published, now), 3.0);
        assert_close(ScoreFormula::Reddit.score(likes(1), published, now), 1.0);
        assert_close(ScoreFormula::Reddit.score(likes(0), published, now), 1.0);
        assert_close(ScoreFormula::Reddit.score(likes(-10), published, now), 0.0);
        // 2024-01-01T00:00:00Z with 1000 likes: 3 + (1_704_067_200 - 1_134_028_003) / 45_000
        let expected = 3.0 + (1_704_067_200.0 - 1_134_028_003.0) / 45_000.0;
        assert_close(
            ScoreFormula::Reddit.score(likes(1000), NOW_MS, NOW_MS),
            expected,
        );
        // 12.5 hours newer is worth exactly one point.
        let older = ScoreFormula::Reddit.score(likes(10), NOW_MS - 45_000_000, NOW_MS);
        let newer = ScoreFormula::Reddit.score(likes(10), NOW_MS, NOW_MS);
        assert_close(newer - older, 1.0);
    }

    #[test]
    fn weighted_matches_hand_computed_value() {
        let formula = ScoreFormula::Weighted {
            likes: 1.0,
            collects: 2.0,
            reads: 0.1,
            gravity: 1.5,
        };
        let signals = Signals {
            likes: 10,
            collects: 5,
            reads: 100,
        };
        // (10*1 + 5*2 + 100*0.1) / (2 + 2)^1.5 = 30 / 8
        assert_close(formula.score(signals, NOW_MS - 2 * HOUR_MS, NOW_MS), 3.75);
        // Only reads weighted, just published: 100 * 0.5 / 2^1
        let reads_only = ScoreFormula::Weighted {
            likes: 0.0,
            collects: 0.0,
            reads: 0.5,
            gravity: 1.0,
        };
        assert_close(reads_only.score(signals, NOW_MS, NOW_MS), 25.0);
    }

    #[test]
    fn future_publication_counts_as_just_published() {
        let weighted = ScoreFormula::Weighted {
            likes: 1.0,
            collects: 1.0,
            reads: 1.0,
            gravity: 1.5,
        };
        let signals = Signals {
            likes: 7,
            collects: 3,
            reads: 40,
        };
        for formula in [hn(), ScoreFormula::Reddit, weighted] {
            let now = formula.score(signals, NOW_MS, NOW_MS);
            for ahead in [1, HOUR_MS, 24 * HOUR_MS, 10_000 * 24 * HOUR_MS] {
                let future = formula.score(signals, NOW_MS + ahead, NOW_MS);
                assert_eq!(future, now, "{formula:?}, {ahead} ms ahead");
            }
            assert_eq!(formula.score(signals, i64::MAX, NOW_MS), now, "{formula:?}");
        }
    }

    #[test]
    fn exactly_now_is_zero_hours_and_one_day_old_is_24_hours() {
        // 0 hours: (3 - 1) / 2^1.5
        assert_close(hn().score(likes(3), NOW_MS, NOW_MS), 2.0 / 2f64.powf(1.5));
        // 24 hours: (3 - 1) / 26^1.5
        assert_close(
            hn().score(likes(3), NOW_MS - 24 * HOUR_MS, NOW_MS),
            2.0 / 26f64.powf(1.5),
        );
        // one week: (3 - 1) / 170^1.5
        assert_close(
            hn().score(likes(3), NOW_MS - 7 * 24 * HOUR_MS, NOW_MS),
            2.0 / 170f64.powf(1.5),
        );
    }

    #[test]
    fn fresh_article_with_few_likes_beats_old_article_with_many() {
        let weighted = ScoreFormula::Weighted {
            likes: 1.0,
            collects: 2.0,
            reads: 0.01,
            gravity: 1.5,
        };
        for formula in [hn(), ScoreFormula::Reddit, weighted] {
            let fresh = formula.score(likes(5), NOW_MS - HOUR_MS, NOW_MS);
            let old = formula.score(likes(100), NOW_MS - 48 * HOUR_MS, NOW_MS);
            assert!(fresh > old, "{formula:?}: fresh {fresh} <= old {old}");
            // Same age: more likes rank higher.
            let more = formula.score(likes(100), NOW_MS - HOUR_MS, NOW_MS);
            assert!(more > fresh, "{formula:?}: {more} <= {fresh}");
            // Same likes: older ranks lower.
            let older = formula.score(likes(5), NOW_MS - 2 * HOUR_MS, NOW_MS);
            assert!(older < fresh, "{formula:?}: {older} >= {fresh}");
        }
        // With HN gravity 1.5 a fresh article with only 2 likes loses to the old one.
        let barely = hn().score(likes(2), NOW_MS - HOUR_MS, NOW_MS);
        let old = hn().score(likes(100), NOW_MS - 48 * HOUR_MS, NOW_MS);
        assert!(barely < old, "{barely} >= {old}");
    }

    #[test]
    fn scores_are_always_finite() {
        let formulas = [
            hn(),
            ScoreFormula::HackerNews { gravity: 0.0 },
            ScoreFormula::HackerNews {
                gravity: MAX_GRAVITY,
            },
            ScoreFormula::Reddit,
            ScoreFormula::Weighted {
                likes: f64::MAX,
                collects: f64::MAX,
                reads: f64::MAX,
                gravity: 0.0,
            },
            // Parameters from_config rejects, built directly: still finite.
            ScoreFormula::HackerNews { gravity: f64::NAN },
            ScoreFormula::HackerNews { gravity: -1000.0 },
            ScoreFormula::HackerNews {
                gravity: f64::INFINITY,
            },
            ScoreFormula::Weighted {
                likes: f64::INFINITY,
                collects: f64::NEG_INFINITY,
                reads: f64::NAN,
                gravity: 1.5,
            },
        ];
        let counts = [i64::MIN, -1, 0, 1, i64::MAX];
        let times = [i64::MIN, -1, 0, NOW_MS, i64::MAX];
        for formula in formulas {
            for &l in &counts {
                for &c in &counts {
                    let signals = Signals {
                        likes: l,
                        collects: c,
                        reads: c,
                    };
                    for &published in &times {
                        for &now in &times {
                            let score = formula.score(signals, published, now);
                            assert!(
                                score.is_finite(),
                                "{formula:?} {signals:?} {published} {now}: {score}"
                            );
                        }
                    }
                }
            }
        }
    }

    // ---- from_config --------------------------------------------------------------------

    #[test]
    fn from_config_accepts_the_formulas_and_aliases() {
        let w = (1.0, 2.0, 0.5);
        assert_eq!(
            ScoreFormula::from_config("hacker_news", 1.5, w),
            Ok(ScoreFormula::HackerNews { gravity: 1.5 })
        );
        assert_eq!(
            ScoreFormula::from_config("hn", 1.8, w),
            Ok(ScoreFormula::HackerNews { gravity: 1.8 })
        );
        assert_eq!(
            ScoreFormula::from_config(" Hacker_News ", 0.0, w),
            Ok(ScoreFormula::HackerNews { gravity: 0.0 })
        );
        assert_eq!(
            ScoreFormula::from_config("reddit", 1.5, w),
            Ok(ScoreFormula::Reddit)
        );
        assert_eq!(
            ScoreFormula::from_config("weighted", 10.0, w),
            Ok(ScoreFormula::Weighted {
                likes: 1.0,
                collects: 2.0,
                reads: 0.5,
                gravity: 10.0,
            })
        );
        assert_eq!(
            ScoreFormula::from_config("weighted", 1.5, (0.0, 0.0, 1.0)),
            Ok(ScoreFormula::Weighted {
                likes: 0.0,
                collects: 0.0,
                reads: 1.0,
                gravity: 1.5,
            })
        );
        // Zero weights are fine for formulas that do not use them.
        assert_eq!(
            ScoreFormula::from_config("hn", 1.5, (0.0, 0.0, 0.0)),
            Ok(ScoreFormula::HackerNews { gravity: 1.5 })
        );
        assert_eq!(
            ScoreFormula::default(),
            ScoreFormula::HackerNews { gravity: 1.5 }
        );
    }

    #[test]
    fn from_config_rejects_with_exact_messages() {
        let w = (1.0, 1.0, 1.0);
        type Case = (&'static str, f64, (f64, f64, f64), &'static str);
        let cases: [Case; 13] = [
            (
                "hot",
                1.5,
                w,
                "ranking_formula must be one of \"hacker_news\" (alias \"hn\"), \"reddit\", \
                 \"weighted\", got \"hot\"",
            ),
            (
                "",
                1.5,
                w,
                "ranking_formula must be one of \"hacker_news\" (alias \"hn\"), \"reddit\", \
                 \"weighted\", got \"\"",
            ),
            (
                "hn",
                11.0,
                w,
                "ranking_gravity must be between 0 and 10, got 11",
            ),
            (
                "hn",
                -0.5,
                w,
                "ranking_gravity must be between 0 and 10, got -0.5",
            ),
            (
                "weighted",
                f64::NAN,
                w,
                "ranking_gravity must be between 0 and 10, got NaN",
            ),
            (
                "reddit",
                f64::INFINITY,
                w,
                "ranking_gravity must be between 0 and 10, got inf",
            ),
            (
                "hn",
                10.000001,
                w,
                "ranking_gravity must be between 0 and 10, got 10.000001",
            ),
            (
                "weighted",
                1.5,
                (-1.0, 1.0, 1.0),
                "ranking_weight_likes must be a finite number >= 0, got -1",
            ),
            (
                "weighted",
                1.5,
                (1.0, f64::NAN, 1.0),
                "ranking_weight_collects must be a finite number >= 0, got NaN",
            ),
            (
                "weighted",
                1.5,
                (1.0, 1.0, f64::INFINITY),
                "ranking_weight_reads must be a finite number >= 0, got inf",
            ),
            (
                "hn",
                1.5,
                (1.0, 1.0, -0.25),
                "ranking_weight_reads must be a finite number >= 0, got -0.25",
            ),
            (
                "weighted",
                1.5,
                (0.0, 0.0, 0.0),
                "ranking_weight_likes, ranking_weight_collects and ranking_weight_reads must \
                 not all be 0 for the weighted formula",
            ),
            (
                "reddit",
                1.5,
                (1.0, f64::NEG_INFINITY, 1.0),
                "ranking_weight_collects must be a finite number >= 0, got -inf",
            ),
        ];
        for (name, gravity, weights, message) in cases {
            assert_eq!(
                ScoreFormula::from_config(name, gravity, weights),
                Err(message.to_string()),
                "{name:?} {gravity} {weights:?}"
            );
        }
    }

    // ---- TopN ---------------------------------------------------------------------------

    /// Reference top-n, independent of `rank_cmp`: numbers sorted by `partial_cmp` (so
    /// `-0.0 == 0.0`), then id, both descending; `NaN`s after every number. Stable, so equal
    /// keys keep their input order.
    fn reference_top(input: &[(f64, i64)], n: usize) -> Vec<(f64, i64)> {
        let mut numbers: Vec<(f64, i64)> =
            input.iter().copied().filter(|(s, _)| !s.is_nan()).collect();
        let mut nans: Vec<(f64, i64)> = input.iter().copied().filter(|(s, _)| s.is_nan()).collect();
        numbers.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(b.1.cmp(&a.1)));
        nans.sort_by_key(|&(_, id)| std::cmp::Reverse(id));
        numbers.extend(nans);
        numbers.truncate(n);
        numbers
    }

    fn same_key(a: (f64, i64), b: (f64, i64)) -> bool {
        a.1 == b.1 && (a.0 == b.0 || (a.0.is_nan() && b.0.is_nan()))
    }

    #[test]
    fn top_n_equals_full_sort_on_random_inputs() {
        const SCORES: [f64; 9] = [
            0.0,
            -0.0,
            0.5,
            1.0,
            -1.0,
            2.5,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-300,
        ];
        let mut rng = Rng(0x5EED_1234_ABCD_0001);
        let mut cases = 0;
        for round in 0..150 {
            for n in [0usize, 1, 3, 100] {
                let size = match round % 5 {
                    0 => rng.below(10) as usize,
                    1 => rng.below(200) as usize,
                    _ => rng.below(2000) as usize,
                };
                // Narrow ranges make duplicate scores, ids and whole keys common.
                let id_range = 1 + rng.below(if round % 2 == 0 { 20 } else { 5000 });
                let input: Vec<(f64, i64)> = (0..size)
                    .map(|_| {
                        let score = match rng.below(100) {
                            0 => f64::NAN,
                            1..=40 => SCORES[rng.below(SCORES.len() as u64) as usize],
                            41..=70 => rng.below(10) as f64 / 4.0,
                            _ => {
                                (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 200.0 - 100.0
                            }
                        };
                        let id = rng.below(id_range) as i64 - (id_range / 4) as i64;
                        (score, id)
                    })
                    .collect();

                let mut top = TopN::new(n);
                for (index, &(score, id)) in input.iter().enumerate() {
                    top.push(score, id, index);
                    assert!(top.len() <= n);
                }
                assert_eq!(top.len(), size.min(n));
                assert_eq!(top.is_empty(), size.min(n) == 0);
                let got = top.into_sorted();
                let expected = reference_top(&input, n);

                assert_eq!(
                    got.len(),
                    expected.len(),
                    "round {round}, n {n}, size {size}"
                );
                let mut seen = vec![false; size];
                for (rank, (ranked, &want)) in got.iter().zip(&expected).enumerate() {
                    let key = (ranked.score, ranked.id);
                    assert!(
                        same_key(key, want),
                        "round {round}, n {n}, size {size}, rank {rank}: got {key:?}, want {want:?}"
                    );
                    // The item is one that was pushed with exactly this key, and only once.
                    let pushed = input[ranked.item];
                    assert!(same_key(pushed, key) && pushed.0.to_bits() == key.0.to_bits());
                    assert!(!seen[ranked.item], "item {} returned twice", ranked.item);
                    seen[ranked.item] = true;
                }
                cases += 1;
            }
        }
        assert_eq!(cases, 600);
    }

    #[test]
    fn top_n_of_zero_keeps_nothing() {
        let mut top = TopN::new(0);
        for id in 0..100 {
            top.push(id as f64, id, ());
        }
        assert!(top.is_empty());
        assert_eq!(top.len(), 0);
        assert!(top.into_sorted().is_empty());
    }

    #[test]
    fn ties_break_by_higher_id_whatever_the_order() {
        for order in [[3, 1, 2, 5, 4], [5, 4, 3, 2, 1], [1, 2, 3, 4, 5]] {
            let mut top = TopN::new(3);
            for id in order {
                top.push(1.0, id, format!("article {id}"));
            }
            top.push(0.5, 100, "lower score".to_string());
            let ids: Vec<i64> = top.into_sorted().iter().map(|r| r.id).collect();
            assert_eq!(ids, vec![5, 4, 3]);
        }
        // Higher score wins over higher id.
        let mut top = TopN::new(2);
        top.push(1.0, 1, 'a');
        top.push(0.9, 99, 'b');
        top.push(2.0, 0, 'c');
        let items: Vec<char> = top.into_sorted().into_iter().map(|r| r.item).collect();
        assert_eq!(items, vec!['c', 'a']);
    }

    #[test]
    fn equal_key_does_not_replace_the_minimum() {
        let mut top = TopN::new(1);
        top.push(1.0, 7, "first");
        top.push(1.0, 7, "second");
        top.push(0.0, 7, "worse");
        assert_eq!(
            top.into_sorted(),
            vec![Ranked {
                score: 1.0,
                id: 7,
                item: "first"
            }]
        );
    }

    #[test]
    fn nan_ranks_below_everything_and_zero_signs_tie() {
        let mut top = TopN::new(1);
        top.push(f64::NAN, 100, "nan");
        top.push(f64::NEG_INFINITY, 1, "-inf");
        let sorted = top.into_sorted();
        assert_eq!(sorted.len(), 1);
        assert_eq!(sorted[0].item, "-inf");

        // A NaN never displaces a number, even with a higher id.
        let mut top = TopN::new(2);
        top.push(f64::MIN, 1, "min");
        top.push(-0.0, 2, "zero");
        top.push(-f64::NAN, 1000, "negative nan");
        top.push(f64::NAN, 1000, "nan");
        let items: Vec<&str> = top.into_sorted().into_iter().map(|r| r.item).collect();
        assert_eq!(items, vec!["zero", "min"]);

        // -0.0 and 0.0 are the same score: the higher id wins.
        let mut top = TopN::new(1);
        top.push(0.0, 1, "positive zero");
        top.push(-0.0, 2, "negative zero");
        let sorted = top.into_sorted();
        assert_eq!(sorted[0].item, "negative zero");

        // Only NaNs: kept, ordered by id.
        let mut top = TopN::new(5);
        for id in [2, 9, 4] {
            top.push(f64::NAN, id, id);
        }
        let ids: Vec<i64> = top.into_sorted().iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![9, 4, 2]);
    }

    #[test]
    fn ranking_scored_articles_end_to_end() {
        // (id, likes, hours old)
        let articles = [
            (1, 50, 1),
            (2, 500, 72),
            (3, 5, 0),
            (4, 50, 1),
            (5, 1, 2),
            (6, 30, -5),
        ];
        let formula = ScoreFormula::default();
        let mut top = TopN::new(3);
        for (id, l, hours) in articles {
            let score = formula.score(likes(l), NOW_MS - hours * HOUR_MS, NOW_MS);
            top.push(score, id, l);
        }
        let ids: Vec<i64> = top.into_sorted().iter().map(|r| r.id).collect();
        // 49/3^1.5 ≈ 9.43 (ids 4, 1), 29/2^1.5 ≈ 10.25 (id 6, future → now), 499/74^1.5 ≈ 0.78.
        assert_eq!(ids, vec![6, 4, 1]);
    }
}
