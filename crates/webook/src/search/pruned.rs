//! The page of a query without scoring every document that matches it.
//!
//! A common query matches a large part of the corpus ("数据库" a quarter of a million
//! articles), and scoring every match — phrases checked position by position in every body —
//! is what a search costs. But a term's relevance is the BM25 of its atoms
//! ([`super::reading`]), and the atoms in long fields (body, about) add at most their weight
//! times `k1 + 1` whatever the text: a document's score is bounded by what its short fields
//! (tags, title, author; nickname) score plus that. So:
//!
//! 1. go through the atoms in short fields of every reading of every term (short posting
//!    lists; a phrase without its positions — all its grams there, scored as if it occurred as
//!    often as the rarest of them — which bounds it from above), and bound each document
//!    found — the candidates — by its short scores, the long bounds and its own nudge
//!    (freshness, likes): per term, the best of its readings (as typed, loosely), each in its
//!    tier;
//! 2. score the candidates exactly, best bound first, in batches (each in doc order, with the
//!    query's own scorers: the same bits as the whole query gives), until the next bound is
//!    below the page's last hit;
//! 3. the documents never found have no term in a short field: their scores are bounded by
//!    the long bounds and the largest nudge. When that is below the page's last hit too, the
//!    page is exact; otherwise (or with fewer candidates than the page) the caller scores
//!    every match, as before.
//!
//! Pruning pays when the matches far outnumber the candidates. When it is the other way
//! round — a word few documents hold, next to one many titles do — the candidates stop being
//! gathered once they are [`CHEAPER_TO_SCORE_ALL`] times what tantivy estimates going through
//! every match costs, and the caller does that.
//!
//! The loose query (too few hits as typed) is pruned the same way, knowing more: every
//! document after the cursor matching all terms as typed is one of the strict hits already
//! found. They start
//! its page, and every other document — candidate or never found — is bounded as one that
//! matches some term loosely, which keeps the bounds in the loose tier.
//!
//! The page is the same as the whole query's, hit for hit and score for score: the bounds are
//! upper bounds (with a margin for `f32` rounding), ties are never pruned, and the scores
//! come from the same scorers.

use std::{cmp::Reverse, collections::BinaryHeap};

use tantivy::{
    fieldnorm::FieldNormReader,
    postings::Postings,
    query::{Bm25Weight, EnableScoring, Query, Weight},
    schema::{Field, IndexRecordOption},
    DocId, DocSet, Searcher, SegmentReader, Term, TERMINATED,
};

use super::tiered::{squash, SQUASH_CAP, SQUASH_HALF};

/// How a page orders its hits (the query module's nudges and cursors).
pub trait Order {
    /// The key of document `doc` of segment `segment` scored `score`: (nudged score, id).
    fn key(&self, segment: usize, doc: DocId, score: f32) -> (f32, u64);
    /// The most a document scored `score` can be keyed (called per candidate: keep it cheap).
    fn most(&self, score: f32) -> f32;
    /// Whether a hit keyed `key` belongs on the page (comes after its cursor).
    fn keeps(&self, key: (f32, u64)) -> bool;
}

/// A term of the query: every document must match all of them, by the best of its readings.
pub struct TermPlan {
    /// The term's query: the best of its readings' ([`super::reading::Reading`]s) scores.
    pub query: Box<dyn Query>,
    /// Its readings (as typed, loosely), each in its tier.
    pub readings: Vec<ReadingPlan>,
}

/// An atom of a reading in a short field, as the candidate pass goes through it.
pub enum Short {
    /// Scored exactly, by its query.
    Exact(Box<dyn Query>),
    /// A phrase of `terms` in `field` weighted `weight` (its own, boosted), bounded without
    /// reading a position: the documents holding all of its terms, scored as if the phrase
    /// occurred as often as the least frequent of them (BM25 grows with the count).
    Phrase {
        field: Field,
        terms: Vec<Term>,
        weight: Bm25Weight,
    },
}

/// A [`Short`] ready for a segment.
enum ShortWeight<'a> {
    Exact(Box<dyn Weight>),
    Phrase(&'a Field, &'a [Term], &'a Bm25Weight),
}

impl ShortWeight<'_> {
    /// Calls `callback` with each document of `reader` the atom may match, and at least the
    /// score it has there.
    fn for_each(
        &self,
        reader: &SegmentReader,
        callback: &mut dyn FnMut(DocId, f32),
    ) -> tantivy::Result<()> {
        let (field, terms, weight) = match self {
            Self::Exact(weight) => return weight.for_each(reader, callback),
            Self::Phrase(field, terms, weight) => (**field, *terms, *weight),
        };
        let index = reader.inverted_index(field)?;
        let mut postings = Vec::with_capacity(terms.len());
        for term in terms {
            match index.read_postings(term, IndexRecordOption::WithFreqs)? {
                Some(found) => postings.push(found),
                None => return Ok(()),
            }
        }
        let norms = match reader.fieldnorms_readers().get_field(field)? {
            Some(norms) => norms,
            None => FieldNormReader::constant(reader.max_doc(), 1),
        };
        let Some((lead, rest)) = postings.split_first_mut() else {
            return Ok(());
        };
        let mut doc = lead.doc();
        'docs: while doc != TERMINATED {
            for other in rest.iter_mut() {
                let found = if other.doc() < doc {
                    other.seek(doc)
                } else {
                    other.doc()
                };
                if found != doc {
                    doc = lead.seek(found);
                    continue 'docs;
                }
            }
            let fewest = rest
                .iter()
                .map(|postings| postings.term_freq())
                .fold(lead.term_freq(), u32::min);
            callback(doc, weight.score(norms.fieldnorm_id(doc), fewest));
            doc = lead.advance();
        }
        Ok(())
    }
}

/// A reading of a term, as pruning bounds it.
pub struct ReadingPlan {
    /// Its atoms in short fields.
    pub short: Vec<Short>,
    /// The most its atoms in long fields add to its relevance.
    pub long_max: f32,
    /// Its tier's bonus.
    pub bonus: f32,
    /// Whether it is the term as typed (see [`search`]'s `strict`).
    pub typed: bool,
}

/// A document found in a short field, with the most it can score.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    bound: f32,
    segment: usize,
    doc: DocId,
}

/// A hit's sort key, ordered as the page: (score, id).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Key(f32, u64);

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// At least [`squash`]`(relevance)`, for a bound: without its rounding, which costs more than
/// the rest of it, plus the most rounding adds.
fn squash_above(relevance: f32) -> f32 {
    SQUASH_CAP * relevance / (relevance + SQUASH_HALF) + 1.0 / 16.0
}

/// A search's working memory for the candidates, zero between searches: kept in [`SCRATCH`],
/// so that a search does not map, fault in and unmap a megabyte or two — which cost a new
/// thread's first search here up to 190 ms with eight at once, and stalls every thread.
#[derive(Default)]
struct Scratch {
    /// Per term, per document: the short relevance.
    columns: Vec<f32>,
    /// Per document: whether it was found.
    seen: Vec<bool>,
    /// The documents found.
    touched: Vec<DocId>,
}

impl Scratch {
    /// Room for `docs` documents of `terms` terms, laid out `docs` to a column.
    fn fit(&mut self, docs: usize, terms: usize) {
        if self.seen.len() != docs || self.columns.len() < docs * terms {
            // Another layout: start from zero, with room for the terms most queries have
            // (columns never written cost address space, not memory).
            self.columns = vec![0.0; docs * terms.max(COMMON_TERMS)];
            self.seen = vec![false; docs];
        }
    }

    /// Zeroes what the documents found wrote (in `terms` columns of `docs`).
    fn clear(&mut self, docs: usize, terms: usize) {
        for &doc in &self.touched {
            let doc = doc as usize;
            self.seen[doc] = false;
            for column in self.columns[..docs * terms].chunks_mut(docs) {
                column[doc] = 0.0;
            }
        }
        self.touched.clear();
    }
}

/// The working memories not in use; at most [`SCRATCH_KEPT`] (one per concurrent search).
static SCRATCH: std::sync::Mutex<Vec<Scratch>> = std::sync::Mutex::new(Vec::new());
const SCRATCH_KEPT: usize = 16;
/// Terms a [`Scratch`] has room for from the start.
const COMMON_TERMS: usize = 4;

impl Scratch {
    /// One not in use, or a new one.
    fn take() -> Self {
        SCRATCH
            .lock()
            .ok()
            .and_then(|mut kept| kept.pop())
            .unwrap_or_default()
    }

    /// Kept for the next search (all zero again: see [`Scratch::clear`]).
    fn give_back(self) {
        if let Ok(mut kept) = SCRATCH.lock() {
            if kept.len() < SCRATCH_KEPT {
                kept.push(self);
            }
        }
    }
}

/// The most a document with no reading in a short field scores (`long_bounds`: per reading,
/// its bonus and squashed long bound); `None` when no such document can match.
fn rest_bound(terms: &[TermPlan], long_bounds: &[f32], strict: bool) -> Option<f32> {
    let mut column = 0;
    let mut per_term = Vec::with_capacity(terms.len());
    for term in terms {
        let (mut typed, mut other) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for reading in &term.readings {
            let bound = long_bounds[column];
            column += 1;
            if reading.typed {
                typed = typed.max(bound);
            } else {
                other = other.max(bound);
            }
        }
        per_term.push((typed, other));
    }
    best_sum(&per_term, strict)
}

/// The most a document scores whose terms score at most `per_term` (as typed, other ways);
/// with the `strict` hits known, as a document that is not one of them: matching some term
/// other than as typed. `None` when no such document can match.
fn best_sum(per_term: &[(f32, f32)], strict: bool) -> Option<f32> {
    let best = |&(typed, other): &(f32, f32)| typed.max(other);
    let sum = if strict {
        // Exactly, without a subtraction's rounding: terms are few.
        (0..per_term.len())
            .map(|loose| {
                per_term
                    .iter()
                    .enumerate()
                    .map(|(at, term)| if at == loose { term.1 } else { best(term) })
                    .sum::<f32>()
            })
            .fold(f32::NEG_INFINITY, f32::max)
    } else {
        per_term.iter().map(best).sum()
    };
    sum.is_finite().then_some(sum)
}

/// What going through every document that matches all of `terms` costs, as tantivy's scorers
/// estimate it: per segment, the cheapest term's.
fn matches_cost(terms: &[Box<dyn Weight>], readers: &[SegmentReader]) -> tantivy::Result<u64> {
    let mut cost = 0u64;
    for reader in readers {
        let mut cheapest = u64::MAX;
        for weight in terms {
            cheapest = cheapest.min(weight.scorer(reader, 1.0)?.cost());
        }
        cost = cost.saturating_add(cheapest);
    }
    Ok(cost)
}

/// How many times the candidates must outnumber what scoring every match costs
/// ([`matches_cost`]) for [`search`] to leave the page to that instead: a candidate scored is
/// one match gone through at most, but the batches stop early where the bounds tell.
const CHEAPER_TO_SCORE_ALL: usize = 4;

/// Candidates scored in the first batch, per hit asked for; each batch doubles.
const FIRST_BATCH_PER_HIT: usize = 3;

/// Up to `limit` hits of every term of `terms` after `after`, best first, in the order of
/// `keys` — or `None` when the bounds cannot tell them without scoring every match.
///
/// `strict`, when given, are the hits (keyed as `keys` keys them) of every term as typed — all
/// of them that come after the cursor, fewer than a page: they start the page, and a document
/// never found is bounded as matching at least one term some other way.
pub fn search(
    searcher: &Searcher,
    terms: &[TermPlan],
    keys: &dyn Order,
    limit: usize,
    strict: Option<&[(f32, u64)]>,
) -> tantivy::Result<Option<Vec<(f32, u64)>>> {
    let limit = limit.max(1);
    if terms.is_empty() {
        return Ok(None);
    }
    let scoring = EnableScoring::enabled_from_searcher(searcher);
    let whole: Vec<Box<dyn Weight>> = terms
        .iter()
        .map(|term| term.query.weight(scoring))
        .collect::<tantivy::Result<_>>()?;
    // A column per reading: where each term's first is.
    let mut first_column = Vec::with_capacity(terms.len());
    let mut short: Vec<(usize, ShortWeight)> = Vec::new();
    let mut long_bounds = Vec::new();
    for term in terms {
        first_column.push(long_bounds.len());
        for reading in &term.readings {
            for atom in &reading.short {
                let weight = match atom {
                    Short::Exact(query) => ShortWeight::Exact(query.weight(scoring)?),
                    Short::Phrase {
                        field,
                        terms,
                        weight,
                    } => ShortWeight::Phrase(field, terms, weight),
                };
                short.push((long_bounds.len(), weight));
            }
            long_bounds.push(reading.bonus + squash(reading.long_max));
        }
    }
    let rest = rest_bound(terms, &long_bounds, strict.is_some()).map(|rest| keys.most(rest));
    let known = strict.unwrap_or_default();

    // 1. Candidates: each reading's short relevance per document (a column per reading, so
    // that each atom's postings, in doc order, write one column in order).
    let readers = searcher.segment_readers();
    let width = long_bounds.len();
    let mut candidates = Vec::new();
    let most_docs = readers
        .iter()
        .map(|r| r.max_doc() as usize)
        .max()
        .unwrap_or(0);
    let mut scratch = Scratch::take();
    scratch.fit(most_docs, width);
    let most_candidates = usize::try_from(matches_cost(&whole, readers)?)
        .unwrap_or(usize::MAX)
        .saturating_mul(CHEAPER_TO_SCORE_ALL)
        .max(limit * FIRST_BATCH_PER_HIT * 2);
    let mut per_term = Vec::with_capacity(terms.len());
    let simple = strict.is_none() && terms.iter().all(|term| term.readings.len() == 1);
    for (segment, reader) in readers.iter().enumerate() {
        for (column, weight) in &short {
            let column = &mut scratch.columns[column * most_docs..][..most_docs];
            let (seen, touched) = (&mut scratch.seen, &mut scratch.touched);
            weight.for_each(reader, &mut |doc, score| {
                if !seen[doc as usize] {
                    seen[doc as usize] = true;
                    touched.push(doc);
                }
                column[doc as usize] += score;
            })?;
        }
        for &doc in &scratch.touched {
            if reader.is_deleted(doc) {
                continue;
            }
            let bound = if simple {
                // One reading per term, no strict hits: the sum of the terms' bounds.
                let mut bound = 0.0f32;
                for (term, &column) in terms.iter().zip(&first_column) {
                    let short = scratch.columns[column * most_docs + doc as usize];
                    bound += if short > 0.0 {
                        let reading = &term.readings[0];
                        reading.bonus + squash_above(short * 1.001 + 0.001 + reading.long_max)
                    } else {
                        long_bounds[column]
                    };
                }
                bound
            } else {
                per_term.clear();
                for (term, &first) in terms.iter().zip(&first_column) {
                    let (mut typed, mut other) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
                    for (column, reading) in (first..).zip(&term.readings) {
                        let short = scratch.columns[column * most_docs + doc as usize];
                        let bound = if short > 0.0 {
                            reading.bonus + squash_above(short * 1.001 + 0.001 + reading.long_max)
                        } else {
                            long_bounds[column]
                        };
                        if reading.typed {
                            typed = typed.max(bound);
                        } else {
                            other = other.max(bound);
                        }
                    }
                    per_term.push((typed, other));
                }
                match best_sum(&per_term, strict.is_some()) {
                    Some(bound) => bound,
                    // A strict hit, or no match.
                    None => continue,
                }
            };
            candidates.push(Candidate {
                bound,
                segment,
                doc,
            });
        }
        scratch.clear(most_docs, width);
        if candidates.len() > most_candidates {
            // Far more candidates than matches (a term few documents hold, and another found
            // in many short fields): scoring every match costs less than scoring candidates
            // that do not match.
            scratch.give_back();
            return Ok(None);
        }
    }
    scratch.give_back();
    if rest.is_some() && candidates.len() + known.len() < limit {
        return Ok(None);
    }

    // 2. Exact scores, best bound first, in batches: the best bounds left, those of them that
    // the document's own nudge leaves above the page's last hit, in doc order.
    let mut page: BinaryHeap<Reverse<Key>> = BinaryHeap::with_capacity(limit + 1);
    for &(score, id) in known {
        page.push(Reverse(Key(score, id)));
        if page.len() > limit {
            page.pop();
        }
    }
    let last = |page: &BinaryHeap<Reverse<Key>>| {
        (page.len() >= limit)
            .then(|| page.peek().map(|Reverse(key)| key.0))
            .flatten()
    };
    let mut left = candidates.as_mut_slice();
    let mut batch_size = limit * FIRST_BATCH_PER_HIT;
    let mut scored = Vec::new();
    while !left.is_empty() {
        let floor = last(&page);
        let size = batch_size.min(left.len());
        if size < left.len() {
            left.select_nth_unstable_by(size - 1, |a, b| b.bound.total_cmp(&a.bound));
        }
        let (batch, mut tail) = std::mem::take(&mut left).split_at_mut(size);
        if let Some(floor) = floor {
            if batch
                .iter()
                .all(|candidate| keys.most(candidate.bound) < floor)
            {
                // What is left is bounded by this batch: nothing can make the page.
                break;
            }
            // Keep only what could still make the page: one pass, after which the batches
            // choose among few.
            let mut kept = 0;
            for at in 0..tail.len() {
                if keys.most(tail[at].bound) >= floor {
                    tail.swap(kept, at);
                    kept += 1;
                }
            }
            tail = &mut tail[..kept];
        }
        left = tail;
        batch_size *= 2;
        scored.clear();
        scored.extend(batch.iter().copied().filter(|candidate| {
            floor.is_none_or(|floor| {
                keys.most(candidate.bound) >= floor
                    && keys
                        .key(candidate.segment, candidate.doc, candidate.bound)
                        .0
                        >= floor
            })
        }));
        scored.sort_unstable_by_key(|candidate| (candidate.segment, candidate.doc));
        for group in scored.chunk_by(|a, b| a.segment == b.segment) {
            let reader = &readers[group[0].segment];
            let mut scorers = whole
                .iter()
                .map(|weight| weight.scorer(reader, 1.0))
                .collect::<tantivy::Result<Vec<_>>>()?;
            'candidates: for candidate in group {
                let mut score = 0.0f32;
                for scorer in &mut scorers {
                    if scorer.doc() > candidate.doc || scorer.seek(candidate.doc) != candidate.doc {
                        continue 'candidates;
                    }
                    score += scorer.score();
                }
                let key = keys.key(candidate.segment, candidate.doc, score);
                // A strict hit is on the page already.
                if keys.keeps(key) && !known.iter().any(|&(_, id)| id == key.1) {
                    page.push(Reverse(Key(key.0, key.1)));
                    if page.len() > limit {
                        page.pop();
                    }
                }
            }
        }
    }

    // 3. The documents never found.
    let exact = match (rest, last(&page)) {
        (None, _) => true,
        (Some(rest), Some(floor)) => rest < floor,
        (Some(_), None) => false,
    };
    if !exact {
        return Ok(None);
    }
    let mut hits: Vec<Key> = page.into_iter().map(|Reverse(key)| key).collect();
    hits.sort_unstable_by(|a, b| b.cmp(a));
    Ok(Some(
        hits.into_iter().map(|Key(score, id)| (score, id)).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use tantivy::{
        collector::TopDocs,
        doc,
        query::BooleanQuery,
        schema::{Schema, TEXT},
        Index,
    };

    use super::*;
    use crate::search::{reading::Atom, reading::Reading, tiered::TIER};

    /// Keys by score alone, every hit kept.
    struct ByScore;

    impl Order for ByScore {
        fn key(&self, segment: usize, doc: DocId, score: f32) -> (f32, u64) {
            (score, ((segment as u64) << 32) | u64::from(doc))
        }
        fn most(&self, score: f32) -> f32 {
            score
        }
        fn keeps(&self, _: (f32, u64)) -> bool {
            true
        }
    }

    /// A term's plan: the word in the title (short, weighted 10) and in the body (long).
    fn plan(searcher: &Searcher, title: Field, body: Field, word: &str) -> TermPlan {
        let atom = |field, boost, long| Atom {
            field,
            terms: vec![(0, word.to_owned())],
            boost,
            long,
        };
        let mut reading = Reading::default();
        reading.alone(vec![atom(title, 10.0, false), atom(body, 1.0, true)]);
        TermPlan {
            query: reading.query(2.0 * TIER).unwrap(),
            readings: vec![ReadingPlan {
                short: reading.short(searcher).unwrap(),
                long_max: reading.long_max(searcher).unwrap(),
                bonus: 2.0 * TIER,
                typed: true,
            }],
        }
    }

    #[test]
    fn a_rare_word_next_to_one_many_titles_hold_is_left_to_scoring_every_match() {
        // 2 000 titles with "alpha", three of them with "beta" too; 6 000 without either.
        let mut schema = Schema::builder();
        let title = schema.add_text_field("title", TEXT);
        let body = schema.add_text_field("body", TEXT);
        let index = Index::create_in_ram(schema.build());
        let mut writer = index.writer(15_000_000).unwrap();
        for at in 0..8_000 {
            let text = match at {
                0 | 700 | 1_400 => "alpha beta",
                0..2_000 => "alpha",
                _ => "other",
            };
            writer
                .add_document(doc!(title => text, body => "gamma"))
                .unwrap();
        }
        writer.commit().unwrap();
        let searcher = index.reader().unwrap().searcher();
        let terms = [
            plan(&searcher, title, body, "alpha"),
            plan(&searcher, title, body, "beta"),
        ];
        let whole = BooleanQuery::intersection(terms.iter().map(|t| t.query.box_clone()).collect());
        let page = searcher
            .search(&whole, &TopDocs::with_limit(2).order_by_score())
            .unwrap();
        assert_eq!(
            page.len(),
            2,
            "the three documents with both words make the page"
        );

        // Scoring the 2 000 candidates, best bound first, would find the page from the first
        // batch (the three with "beta" in the title are bounded highest, and the documents
        // never found, with neither word in a title, are bounded below them); but the three
        // matches cost less to go through than the candidates to gather: left to the caller.
        let pruned = search(&searcher, &terms, &ByScore, 2, None).unwrap();
        assert_eq!(pruned, None);
    }
}
