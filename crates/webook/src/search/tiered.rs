//! Tiers of relevance in one score: a query whose documents score `bonus` plus their
//! relevance squashed below [`SQUASH_CAP`], so that a sum of bonuses (multiples of [`TIER`])
//! orders documents first and relevance within them — without running a query twice. At most
//! ten terms of at most [`SQUASH_CAP`] each stay below one [`TIER`], even nudged by 30%.

use tantivy::{
    query::{EnableScoring, Explanation, Query, Scorer, Weight},
    DocId, DocSet, Score, SegmentReader, Term,
};

/// The unit of bonuses.
pub const TIER: f32 = 32_768.0;
/// What a squashed relevance stays below.
pub const SQUASH_CAP: f32 = 1_000.0;
const _: () = assert!(10.0 * SQUASH_CAP * 1.3 < TIER);
/// The relevance squashed to half the cap (about what a rare word in a title scores).
pub const SQUASH_HALF: f32 = 20.0;

/// `relevance` (≥ 0) squashed below [`SQUASH_CAP`], in the same order, rounded to a multiple
/// of 1/16: sums of a few of them (below 2^20) are then exact in f32 whatever their order, so
/// a document scores the same bits in every query that adds up the same terms.
pub fn squash(relevance: f32) -> f32 {
    let relevance = relevance.max(0.0);
    (SQUASH_CAP * relevance / (relevance + SQUASH_HALF) * 16.0).round() / 16.0
}

/// `query`'s documents, scored `bonus` + [`squash`] of their score.
pub fn tiered(query: Box<dyn Query>, bonus: f32) -> Box<dyn Query> {
    Box::new(Tiered { query, bonus })
}

struct Tiered {
    query: Box<dyn Query>,
    bonus: f32,
}

impl Clone for Tiered {
    fn clone(&self) -> Self {
        Self {
            query: self.query.box_clone(),
            bonus: self.bonus,
        }
    }
}

impl std::fmt::Debug for Tiered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tiered(+{}, {:?})", self.bonus, self.query)
    }
}

impl Query for Tiered {
    fn weight(&self, enable_scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        let weight = self.query.weight(enable_scoring)?;
        Ok(if enable_scoring.is_scoring_enabled() {
            Box::new(TieredWeight {
                weight,
                bonus: self.bonus,
            })
        } else {
            weight
        })
    }

    fn query_terms<'a>(&'a self, visitor: &mut dyn FnMut(&'a Term, bool)) {
        self.query.query_terms(visitor)
    }
}

struct TieredWeight {
    weight: Box<dyn Weight>,
    bonus: f32,
}

impl Weight for TieredWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        Ok(Box::new(TieredScorer {
            scorer: self.weight.scorer(reader, boost)?,
            bonus: self.bonus,
        }))
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        let inner = self.weight.explain(reader, doc)?;
        let mut explanation = Explanation::new_with_string(
            format!("tier +{} and squashed relevance", self.bonus),
            self.bonus + squash(inner.value()),
        );
        explanation.add_detail(inner);
        Ok(explanation)
    }

    fn count(&self, reader: &SegmentReader) -> tantivy::Result<u32> {
        self.weight.count(reader)
    }
}

struct TieredScorer {
    scorer: Box<dyn Scorer>,
    bonus: f32,
}

impl DocSet for TieredScorer {
    fn advance(&mut self) -> DocId {
        self.scorer.advance()
    }

    fn seek(&mut self, target: DocId) -> DocId {
        self.scorer.seek(target)
    }

    fn doc(&self) -> DocId {
        self.scorer.doc()
    }

    fn size_hint(&self) -> u32 {
        self.scorer.size_hint()
    }

    fn cost(&self) -> u64 {
        self.scorer.cost()
    }
}

impl Scorer for TieredScorer {
    fn score(&mut self) -> Score {
        self.bonus + squash(self.scorer.score())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squashing_keeps_order_and_stays_below_the_cap() {
        assert_eq!(squash(0.0), 0.0);
        assert!((squash(SQUASH_HALF) - SQUASH_CAP / 2.0).abs() < 0.01);
        assert!(squash(10.0) < squash(10.5));
        assert!(squash(1e9) <= SQUASH_CAP);
        // Sums in any order are the same bits.
        let (a, b, c) = (squash(3.3), squash(17.1), TIER * 2.0 + squash(0.7));
        assert_eq!(((a + b) + c).to_bits(), ((c + a) + b).to_bits());
        assert_eq!(((b + c) + a).to_bits(), ((a + c) + b).to_bits());
    }
}
