//! The seed's randomness: a small, fast generator whose output is fixed by this file alone (so a
//! `--seed` gives the same dataset whatever crate versions are built in), and the Zipf
//! machinery that shares totals out among articles and followees and picks authors.
//!
//! Every article, user, like and follow draws from its own stream, `Rng::new(seed, stream,
//! index)`, so what one row gets does not depend on batch sizes, passes or the order rows are
//! generated in.

/// SplitMix64 (Steele, Lea and Flood): one 64-bit state, passes BigCrush, a few ns per draw.
#[derive(Debug, Clone)]
pub struct Rng(u64);

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function: a bijective, well-mixing hash of a 64-bit word.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The independent streams of one seed (the `stream` argument of [`Rng::new`]).
#[derive(Debug, Clone, Copy)]
#[repr(u64)]
pub enum Stream {
    /// A user's profile, by user index.
    User = 1,
    /// An article's status, by article index.
    ArticleStatus,
    /// An article's times, by article index.
    ArticleTime,
    /// An article's author, title and content, by article index.
    ArticleText,
    /// The likers of an article, by published-article index.
    Likers,
    /// The collectors of an article, by published-article index.
    Collectors,
    /// The time of one like or collect, by `(user index << 32) | published-article index`.
    InteractionTime,
    /// Shuffles and weight jitter (one draw sequence per purpose, index 0, 1, …).
    Shuffle,
    /// The followers of a user, by user index.
    Followers,
    /// The time of one follow, by `(follower index << 32) | followee index`.
    FollowTime,
    /// The comment thread of an article, by published-article index.
    Comments,
    /// An author's tag names, by user index.
    TagNames,
    /// The tags on a published article, by article index.
    ArticleTags,
}

impl Rng {
    /// The generator of `index` in `stream` under `seed`.
    pub fn new(seed: u64, stream: Stream, index: u64) -> Self {
        Self(mix(
            mix(seed ^ (stream as u64).wrapping_mul(GOLDEN_GAMMA)).wrapping_add(index)
        ))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        mix(self.0)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias, below 2^-32 for the sizes used
    /// here, does not matter for test data). `n` must not be 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// One element of `items` (which must not be empty).
    pub fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len() as u64) as usize]
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// Zipf weights with noise: rank r (from 1) weighs `r^-exponent`, times a factor in [0.5, 1.5)
/// so neighbouring ranks are not in lockstep (real popularity is not a perfect power law).
pub fn zipf_weights(count: usize, exponent: f64, rng: &mut Rng) -> Vec<f64> {
    (1..=count)
        .map(|rank| (rank as f64).powf(-exponent) * (0.5 + rng.unit()))
        .collect()
}

/// Shares `total` out among slots in proportion to `weights`, at most `cap` per slot, summing to
/// exactly `total`. Systematic rounding: slot i gets ⌊total·Cᵢ/W⌋ − ⌊total·Cᵢ₋₁/W⌋ for the
/// cumulative weights C (no sorting, one pass); what a slot gets over `cap` moves to the next
/// slots (a lower rank), and what is left after the last moves to the first slots with room.
///
/// Errors when `total` cannot fit (`total > cap × slots`).
pub fn allocate(total: u64, weights: &[f64], cap: u64) -> Result<Vec<u64>, String> {
    let room = cap.saturating_mul(weights.len() as u64);
    if total > room {
        return Err(format!(
            "{total} do not fit: at most {cap} per article on {} articles",
            weights.len()
        ));
    }
    let sum: f64 = weights.iter().sum();
    let mut counts = Vec::with_capacity(weights.len());
    let (mut cumulative, mut given, mut carry) = (0.0f64, 0u64, 0u64);
    for (i, weight) in weights.iter().enumerate() {
        cumulative += weight;
        let upto = if i + 1 == weights.len() {
            total
        } else {
            ((total as f64 * cumulative / sum).floor() as u64).clamp(given, total)
        };
        let share = upto - given + carry;
        given = upto;
        let kept = share.min(cap);
        carry = share - kept;
        counts.push(kept);
    }
    for count in &mut counts {
        if carry == 0 {
            break;
        }
        let add = (cap - *count).min(carry);
        *count += add;
        carry -= add;
    }
    Ok(counts)
}

/// Picks indexes with probability proportional to fixed weights (binary search over the
/// cumulative weights: O(log n) per pick).
#[derive(Debug)]
pub struct WeightedPicker {
    cumulative: Vec<f64>,
}

impl WeightedPicker {
    /// A picker over `weights` (not empty, all positive).
    pub fn new(weights: &[f64]) -> Self {
        let mut sum = 0.0;
        let cumulative = weights
            .iter()
            .map(|weight| {
                sum += weight;
                sum
            })
            .collect();
        Self { cumulative }
    }

    /// An index, drawn with `rng`.
    pub fn pick(&self, rng: &mut Rng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let target = rng.unit() * total;
        self.cumulative
            .partition_point(|&c| c <= target)
            .min(self.cumulative.len().saturating_sub(1))
    }
}

/// A step in `1..n` that shares no factor with `n`, so `start + k·step (mod n)` for k < n visits
/// every residue once: the distinct users who like one article, without a set.
pub fn coprime_step(n: u64, rng: &mut Rng) -> u64 {
    if n <= 2 {
        return 1;
    }
    loop {
        let step = rng.between(1, n - 1);
        if gcd(step, n) == 1 {
            return step;
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let draw = |seed, stream, index| Rng::new(seed, stream, index).next_u64();
        assert_eq!(draw(1, Stream::User, 5), draw(1, Stream::User, 5));
        assert_ne!(draw(1, Stream::User, 5), draw(2, Stream::User, 5));
        assert_ne!(draw(1, Stream::User, 5), draw(1, Stream::Likers, 5));
        assert_ne!(draw(1, Stream::User, 5), draw(1, Stream::User, 6));
        // The generator is part of the dataset's definition: this value must never change.
        assert_eq!(Rng(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn draws_stay_in_range() {
        let mut rng = Rng::new(7, Stream::Shuffle, 0);
        for _ in 0..10_000 {
            assert!(rng.below(10) < 10);
            let x = rng.between(3, 5);
            assert!((3..=5).contains(&x));
            let u = rng.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn allocation_is_exact_capped_and_skewed() {
        let mut rng = Rng::new(3, Stream::Shuffle, 0);
        let weights = zipf_weights(1000, 1.0, &mut rng);
        for (total, cap) in [
            (0, 10),
            (1, 10),
            (12_345, 1_000),
            (99_999, 100),
            (100_000, 100),
        ] {
            let counts = allocate(total, &weights, cap).unwrap();
            assert_eq!(counts.len(), 1000);
            assert_eq!(counts.iter().sum::<u64>(), total, "total {total}");
            assert!(counts.iter().all(|&c| c <= cap), "cap {cap}");
        }
        let counts = allocate(12_345, &weights, u64::MAX).unwrap();
        let top: u64 = counts[..10].iter().sum();
        let bottom: u64 = counts[990..].iter().sum();
        assert!(top > 12_345 / 5, "top 1% holds {top}");
        assert!(bottom < 12_345 / 500, "bottom 1% holds {bottom}");
        assert!(allocate(100_001, &weights, 100).is_err());
    }

    #[test]
    fn coprime_steps_visit_distinct_residues() {
        let mut rng = Rng::new(9, Stream::Likers, 0);
        for n in [1u64, 2, 3, 12, 97, 360, 1000] {
            let step = coprime_step(n, &mut rng);
            let start = rng.below(n);
            let mut seen: Vec<u64> = (0..n).map(|k| (start + k * step) % n).collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len() as u64, n, "n {n} step {step}");
        }
    }

    #[test]
    fn weighted_picks_follow_the_weights() {
        let picker = WeightedPicker::new(&[8.0, 1.0, 1.0]);
        let mut rng = Rng::new(4, Stream::Shuffle, 1);
        let mut hits = [0u32; 3];
        for _ in 0..10_000 {
            hits[picker.pick(&mut rng)] += 1;
        }
        assert!(hits[0] > 7_500 && hits[0] < 8_500, "{hits:?}");
        assert!(hits[1] > 700 && hits[2] > 700, "{hits:?}");
    }
}
