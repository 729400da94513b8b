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
//! found. They start its page, and every other document — candidate or never found — is
//! bounded as one that matches some term loosely, which keeps the bounds in the loose tier.
//!
//! The page is the same as the whole query's, hit for hit and score for score: the bounds are
//! upper bounds (with a margin for `f32` rounding), ties are never pruned, and the scores
//! come from the same scorers.

use std::{cmp::Reverse, collections::BinaryHeap};

use tantivy::{
    fieldnorm::FieldNormReader,
    postings::{Postings, SegmentPostings},
    query::{Bm25Weight, EnableScoring, Query, Scorer, Weight},
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

impl<'a> ShortWeight<'a> {
    /// The atom going through `reader`'s documents it may match, a block at a time.
    fn cursor(&self, reader: &SegmentReader) -> tantivy::Result<ShortCursor<'a>> {
        let (field, terms, weight) = match self {
            Self::Exact(weight) => return Ok(ShortCursor::Exact(weight.scorer(reader, 1.0)?)),
            Self::Phrase(field, terms, weight) => (**field, *terms, *weight),
        };
        let index = reader.inverted_index(field)?;
        let mut postings = Vec::with_capacity(terms.len());
        for term in terms {
            match index.read_postings(term, IndexRecordOption::WithFreqs)? {
                Some(found) => postings.push(found),
                None => return Ok(ShortCursor::Done),
            }
        }
        if postings.is_empty() {
            return Ok(ShortCursor::Done);
        }
        let norms = match reader.fieldnorms_readers().get_field(field)? {
            Some(norms) => norms,
            None => FieldNormReader::constant(reader.max_doc(), 1),
        };
        Ok(ShortCursor::Phrase {
            postings,
            norms,
            weight,
        })
    }
}

/// A [`ShortWeight`] going through a segment's documents in order.
enum ShortCursor<'a> {
    Exact(Box<dyn Scorer>),
    /// The phrase's terms' postings (at least one), the first leading.
    Phrase {
        postings: Vec<SegmentPostings>,
        norms: FieldNormReader,
        weight: &'a Bm25Weight,
    },
    Done,
}

impl ShortCursor<'_> {
    /// No document before this one is left ([`TERMINATED`]: none at all).
    fn doc(&self) -> DocId {
        match self {
            Self::Exact(scorer) => scorer.doc(),
            Self::Phrase { postings, .. } => postings[0].doc(),
            Self::Done => TERMINATED,
        }
    }

    /// Calls `callback` with each document before `end` the atom may match, and at least the
    /// score it has there.
    fn until(&mut self, end: DocId, callback: &mut impl FnMut(DocId, f32)) {
        let (postings, norms, weight) = match self {
            Self::Exact(scorer) => {
                let mut doc = scorer.doc();
                while doc < end {
                    callback(doc, scorer.score());
                    doc = scorer.advance();
                }
                return;
            }
            Self::Phrase {
                postings,
                norms,
                weight,
            } => (postings, norms, weight),
            Self::Done => return,
        };
        let Some((lead, rest)) = postings.split_first_mut() else {
            return;
        };
        // The documents holding all of the terms (a phrase without its positions), scored
        // as if the phrase occurred as often as the least frequent of them.
        let mut doc = lead.doc();
        'docs: while doc < end {
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

/// A search's working memory for the candidates of a [`BLOCK`], zero between searches: kept
/// in [`SCRATCH`], so that a search neither allocates nor zeroes it (when it spanned a whole
/// segment, mapping and faulting it in cost a new thread's first search up to 190 ms with
/// eight at once).
#[derive(Default)]
struct Scratch {
    /// Per reading, per document of the block: the short relevance.
    columns: Vec<f32>,
    /// Per document of the block: whether it was found.
    seen: Vec<bool>,
    /// The documents of the block found (offsets in it).
    touched: Vec<DocId>,
}

impl Scratch {
    /// Room for a [`BLOCK`] of documents of `width` readings (a column of the block each).
    fn fit(&mut self, width: usize) {
        if self.columns.len() < BLOCK * width {
            self.columns = vec![0.0; BLOCK * width.max(COMMON_READINGS)];
            self.seen = vec![false; BLOCK];
        }
    }

    /// Zeroes what the documents found wrote (in `width` columns).
    fn clear(&mut self, width: usize) {
        for &at in &self.touched {
            let at = at as usize;
            self.seen[at] = false;
            for column in self.columns[..BLOCK * width].chunks_mut(BLOCK) {
                column[at] = 0.0;
            }
        }
        self.touched.clear();
    }
}

/// The working memories not in use; at most [`SCRATCH_KEPT`] (one per concurrent search).
static SCRATCH: std::sync::Mutex<Vec<Scratch>> = std::sync::Mutex::new(Vec::new());
const SCRATCH_KEPT: usize = 16;
/// Readings a [`Scratch`] has room for from the start.
const COMMON_READINGS: usize = 4;

/// Documents of a segment the candidate pass takes at a time: the block's columns (one per
/// reading) stay in a core's cache while the atoms write them and the bounds read them —
/// columns as long as a segment did not, and eight searches at once evicted each other's.
const BLOCK: usize = 8_192;

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

/// How many times the candidates must outnumber what tantivy estimates going through every
/// match costs ([`matches_cost`]: documents for words, more for phrases, whose positions it
/// counts in) for [`search`] to leave the page to that instead: the batches stop early where
/// the bounds tell, so pruning wins even with somewhat more candidates than matches.
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
    // that each atom's postings, in doc order, write one column in order), a block of
    // documents at a time.
    let readers = searcher.segment_readers();
    let width = long_bounds.len();
    let mut candidates = Vec::new();
    let mut scratch = Scratch::take();
    scratch.fit(width);
    // Found once the candidates are more than a few batches' worth.
    let mut most_candidates: Option<usize> = None;
    let mut per_term = Vec::with_capacity(terms.len());
    let simple = strict.is_none() && terms.iter().all(|term| term.readings.len() == 1);
    let block = BLOCK as DocId;
    for (segment, reader) in readers.iter().enumerate() {
        let mut cursors = short
            .iter()
            .map(|(column, weight)| Ok((*column, weight.cursor(reader)?)))
            .collect::<tantivy::Result<Vec<_>>>()?;
        loop {
            // The block of the next document any atom may match.
            let next = cursors
                .iter()
                .map(|(_, cursor)| cursor.doc())
                .min()
                .unwrap_or(TERMINATED);
            if next == TERMINATED {
                break;
            }
            let start = next - next % block;
            let end = start.saturating_add(block).min(TERMINATED);
            for (column, cursor) in &mut cursors {
                let column = &mut scratch.columns[*column * BLOCK..][..BLOCK];
                let (seen, touched) = (&mut scratch.seen, &mut scratch.touched);
                cursor.until(end, &mut |doc, score| {
                    let at = (doc - start) as usize;
                    if !seen[at] {
                        seen[at] = true;
                        touched.push(doc - start);
                    }
                    column[at] += score;
                });
            }
            for &at in &scratch.touched {
                let doc = start + at;
                if reader.is_deleted(doc) {
                    continue;
                }
                let short = |column: usize| scratch.columns[column * BLOCK + at as usize];
                let bound = if simple {
                    // One reading per term, no strict hits: the sum of the terms' bounds.
                    let mut bound = 0.0f32;
                    for (term, &column) in terms.iter().zip(&first_column) {
                        let short = short(column);
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
                            let short = short(column);
                            let bound = if short > 0.0 {
                                reading.bonus
                                    + squash_above(short * 1.001 + 0.001 + reading.long_max)
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
            scratch.clear(width);
            if candidates.len() > limit * FIRST_BATCH_PER_HIT * 2 {
                let most = match most_candidates {
                    Some(most) => most,
                    None => {
                        let cost = usize::try_from(matches_cost(&whole, readers)?)
                            .unwrap_or(usize::MAX)
                            .saturating_mul(CHEAPER_TO_SCORE_ALL);
                        *most_candidates.insert(cost)
                    }
                };
                if candidates.len() > most {
                    // Far more candidates than matches (a term few documents hold, and
                    // another found in many short fields): scoring every match costs less
                    // than scoring candidates that do not match.
                    scratch.give_back();
                    return Ok(None);
                }
            }
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

    #[test]
    fn a_segment_of_many_blocks_gives_the_page_every_match_scored_gives() {
        // One segment of 30 000 documents, almost four blocks. Titles: "alpha beta" (a phrase,
        // bounded without positions) in every 7th, "alpha" without "beta" after it in every
        // 5th, and at the first and last document of each block; "gamma" in every other one;
        // "delta" in every 3rd. Bodies: "gamma" in every 3rd, "delta" in every 4th. The best
        // titles, short ones with all three, are in the last blocks only.
        let mut schema = Schema::builder();
        let title = schema.add_text_field("title", TEXT);
        let body = schema.add_text_field("body", TEXT);
        let index = Index::create_in_ram(schema.build());
        let mut writer = index.writer_with_num_threads(1, 50_000_000).unwrap();
        let block = BLOCK as u32;
        for at in 0..30_000u32 {
            let title_text = if at > 2 * block && at % 997 == 0 {
                "alpha beta gamma delta".to_owned()
            } else {
                // Titles of 1 to 13 other words: scores of many lengths.
                let mut words: Vec<String> = (0..=at % 13).map(|n| format!("w{n}")).collect();
                if at % 7 == 0 || at % block == 0 || at % block == block - 1 {
                    words.push("beta alpha beta".to_owned());
                }
                if at % 5 == 0 {
                    words.push("alpha gamma beta".to_owned());
                }
                if at % 2 == 0 {
                    words.push("gamma".to_owned());
                }
                if at % 3 == 0 {
                    words.push("delta".to_owned());
                }
                words.join(" ")
            };
            let body_text = match (at % 3 == 0, at % 4 == 0) {
                (true, true) => "gamma delta",
                (true, false) => "gamma",
                (false, true) => "delta",
                (false, false) => "epsilon",
            };
            writer
                .add_document(doc!(title => title_text, body => body_text))
                .unwrap();
        }
        writer.commit().unwrap();
        let searcher = index.reader().unwrap().searcher();
        assert_eq!(searcher.segment_readers().len(), 1);

        let phrase = Atom {
            field: title,
            terms: vec![(0, "alpha".to_owned()), (1, "beta".to_owned())],
            boost: 10.0,
            long: false,
        };
        let mut alpha_beta = Reading::default();
        alpha_beta.alone(vec![phrase]);
        // Three terms, the commonest first: tantivy's intersection adds the cheapest two
        // first, the page in order — the same bits, terms being squashed to sixteenths.
        let terms = [
            plan(&searcher, title, body, "gamma"),
            plan(&searcher, title, body, "delta"),
            TermPlan {
                query: alpha_beta.query(2.0 * TIER).unwrap(),
                readings: vec![ReadingPlan {
                    short: alpha_beta.short(&searcher).unwrap(),
                    long_max: alpha_beta.long_max(&searcher).unwrap(),
                    bonus: 2.0 * TIER,
                    typed: true,
                }],
            },
        ];

        // Every match, scored and keyed by the whole query, as the search builds it.
        let whole = BooleanQuery::intersection(terms.iter().map(|t| t.query.box_clone()).collect());
        let weight = whole
            .weight(EnableScoring::enabled_from_searcher(&searcher))
            .unwrap();
        let mut scorer = weight.scorer(&searcher.segment_readers()[0], 1.0).unwrap();
        let mut every = Vec::new();
        while scorer.doc() != TERMINATED {
            every.push(ByScore.key(0, scorer.doc(), scorer.score()));
            scorer.advance();
        }
        every.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
        assert!(every.len() > 1_000, "{} matches", every.len());

        for limit in [10, 60] {
            let pruned = search(&searcher, &terms, &ByScore, limit, None).unwrap();
            assert_eq!(pruned.as_deref(), Some(&every[..limit]), "limit {limit}");
        }
        assert!(
            every[0].1 > 2 * BLOCK as u64,
            "the best hits are in the last blocks"
        );
    }
}
