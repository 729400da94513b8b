//! A term's readings as typed, as one query whose score is computed the same way wherever the
//! term is matched — by the whole query over every document, or by [`super::pruned`] at the
//! few documents that can still make the page — so a hit scores the same bits either way and
//! cursors continue across both.
//!
//! A [`Reading`] is a set of [`Atom`]s (a phrase of grams, or one word, in one field, with a
//! weight) combined two ways: atoms that match on their own (the term's exact phrase, its
//! prefix expansions, its synonyms) and groups of pieces that match when every piece does (a
//! compound's dictionary words, each in any field). A document's relevance for the term is
//! the sum of the BM25 of the atoms alone that match there and of the atoms of each group
//! that matches there (the group's pieces all do) — in a fixed order, in `f64`, so nothing
//! but the matches decides the bits — and its score the tier's bonus plus that relevance
//! [squashed](super::tiered::squash). The documents are those of a union (a heap of where
//! each atom stands) of the atoms alone and the groups, each group an intersection of the
//! unions of its pieces' atoms — so a rare piece leads a group past the documents of a
//! common one.
//!
//! A term's loose readings are [`Alternatives`] of the same atoms (a typo word, the pinyin, a
//! homophone slip, all words but one), scored by the best alternative that matches; and a
//! term's query is [`best_of`] its readings, each in its tier, asked for documents lazily.
//!
//! For pruning, a reading splits into its atoms in short fields (tags, title, author;
//! nickname), cheap to go through, and a bound on what its atoms in the long ones (body,
//! about) can add: BM25 never exceeds its weight times `k1 + 1` however often a word occurs.

use std::{cmp::Reverse, collections::BinaryHeap};

use tantivy::{
    query::{
        Bm25Weight, BoostQuery, EnableScoring, Explanation, PhraseQuery, Query, Scorer, TermQuery,
        Weight,
    },
    schema::{Field, IndexRecordOption},
    DocId, DocSet, Score, Searcher, SegmentReader, Term, TERMINATED,
};

use super::{pruned::Short, tiered::tiered};

/// A phrase of grams (offsets from the first), or a single word, in one field, weighted.
#[derive(Debug, Clone)]
pub struct Atom {
    /// The field.
    pub field: Field,
    /// The terms with their offsets; one term: a term query.
    pub terms: Vec<(usize, String)>,
    /// Its weight (the field's times the reading's).
    pub boost: f32,
    /// Whether the field is a long one (body, about): bounded rather than gone through when
    /// pruning.
    pub long: bool,
}

impl Atom {
    /// The atom as a tantivy query (`None`: no terms).
    pub fn query(&self) -> Option<Box<dyn Query>> {
        let query: Box<dyn Query> = match self.terms.as_slice() {
            [] => return None,
            [(_, only)] => Box::new(TermQuery::new(
                Term::from_field_text(self.field, only),
                IndexRecordOption::WithFreqs,
            )),
            terms => Box::new(PhraseQuery::new_with_offset(
                terms
                    .iter()
                    .map(|(offset, text)| (*offset, Term::from_field_text(self.field, text)))
                    .collect(),
            )),
        };
        Some(if (self.boost - 1.0).abs() < f32::EPSILON {
            query
        } else {
            Box::new(BoostQuery::new(query, self.boost))
        })
    }

    /// The atom as the candidate pass of [`super::pruned`] goes through it: a phrase bounded
    /// without its positions, a word exactly.
    fn short(&self, searcher: &Searcher) -> tantivy::Result<Option<Short>> {
        if self.terms.len() < 2 {
            return Ok(self.query().map(Short::Exact));
        }
        let terms: Vec<Term> = self
            .terms
            .iter()
            .map(|(_, text)| Term::from_field_text(self.field, text))
            .collect();
        let weight = Bm25Weight::for_terms(searcher, &terms)?.boost_by(self.boost);
        Ok(Some(Short::Phrase {
            field: self.field,
            terms,
            weight,
        }))
    }

    /// The most its BM25 can be in any document of `searcher` (a little more: what `f32`
    /// rounding could add): its weight times `k1 + 1`, what BM25 tends to as a word fills a
    /// field. Not tantivy's `max_score`, which assumes the longest field: lengths are kept
    /// rounded down, so a document can score more than that where fields are short.
    fn max_score(&self, searcher: &Searcher) -> tantivy::Result<f32> {
        let terms: Vec<Term> = self
            .terms
            .iter()
            .map(|(_, text)| Term::from_field_text(self.field, text))
            .collect();
        if terms.is_empty() {
            return Ok(0.0);
        }
        let weight = Bm25Weight::for_terms(searcher, &terms)?.boost_by(self.boost);
        Ok(weight.score(0, u32::MAX) * 1.001 + 0.001)
    }
}

/// A term's readings: atoms that match alone, and groups of pieces that match together.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// Atoms that match on their own.
    alone: Vec<Atom>,
    /// Groups of pieces: a group matches when each of its pieces has an atom that does.
    groups: Vec<Vec<Vec<Atom>>>,
}

impl Reading {
    /// Adds atoms that match on their own.
    pub fn alone(&mut self, atoms: Vec<Atom>) {
        self.alone.extend(atoms);
    }

    /// Adds a group that matches when each piece (atoms, any of which will do) does.
    pub fn all_of(&mut self, pieces: Vec<Vec<Atom>>) {
        if !pieces.is_empty() && pieces.iter().all(|piece| !piece.is_empty()) {
            self.groups.push(pieces);
        }
    }

    /// Every atom: those alone, then those of each group.
    fn atoms(&self) -> impl Iterator<Item = &Atom> {
        self.alone
            .iter()
            .chain(self.groups.iter().flatten().flatten())
    }

    /// The reading as a query scored `bonus` + squashed relevance ([`tiered`]); `None` when
    /// nothing can match.
    pub fn query(&self, bonus: f32) -> Option<Box<dyn Query>> {
        if self.alone.is_empty() && self.groups.is_empty() {
            return None;
        }
        let queries = |atoms: &[Atom]| atoms.iter().map(Atom::query).collect::<Option<Vec<_>>>();
        let groups = self
            .groups
            .iter()
            .map(|group| group.iter().map(|piece| queries(piece)).collect())
            .collect::<Option<Vec<_>>>()?;
        Some(tiered(
            Box::new(ReadingQuery {
                alone: queries(&self.alone)?,
                groups,
                best: false,
            }),
            bonus,
        ))
    }

    /// Its atoms in short fields: every document where the term scores more than
    /// [`Reading::long_max`] matches one of them.
    pub fn short(&self, searcher: &Searcher) -> tantivy::Result<Vec<Short>> {
        shorts(self.atoms(), searcher)
    }

    /// The most its atoms in long fields add to the relevance of any document: with the BM25
    /// of its short atoms that match, a bound on the document's relevance for the term.
    pub fn long_max(&self, searcher: &Searcher) -> tantivy::Result<f32> {
        let mut sum = 0.0;
        for atom in self.atoms().filter(|atom| atom.long) {
            sum += atom.max_score(searcher)?;
        }
        Ok(sum)
    }
}

/// A term's loose readings (typo words, pinyin, a word left out, a homophone slipped in):
/// alternatives, each of pieces that must all match (one for a word), each piece any of its
/// atoms. A document's relevance is its best alternative's — the sum of the BM25 of the atoms
/// that match there — so that what an alternative's atoms in long fields can add bounds what
/// they all can: a text with several spellings of a typo is not made more relevant by them.
#[derive(Debug, Clone, Default)]
pub struct Alternatives {
    alternatives: Vec<Vec<Vec<Atom>>>,
}

impl Alternatives {
    /// Adds an alternative that matches when each piece (atoms, any of which will do) does.
    pub fn add(&mut self, pieces: Vec<Vec<Atom>>) {
        if !pieces.is_empty() && pieces.iter().all(|piece| !piece.is_empty()) {
            self.alternatives.push(pieces);
        }
    }

    /// Whether it has no alternatives: nothing can match it.
    pub fn is_empty(&self) -> bool {
        self.alternatives.is_empty()
    }

    /// The best of the alternatives as a query scored `bonus` + squashed relevance
    /// ([`tiered`]); `None` when nothing can match. Merged lazily, as a [`Reading`]'s groups
    /// are (see [`best_of`]): pruning seeks it to a few candidates far apart.
    pub fn query(&self, bonus: f32) -> Option<Box<dyn Query>> {
        if self.alternatives.is_empty() {
            return None;
        }
        let groups = self
            .alternatives
            .iter()
            .map(|pieces| {
                pieces
                    .iter()
                    .map(|atoms| atoms.iter().map(Atom::query).collect::<Option<Vec<_>>>())
                    .collect::<Option<Vec<_>>>()
            })
            .collect::<Option<Vec<_>>>()?;
        Some(tiered(
            Box::new(ReadingQuery {
                alone: Vec::new(),
                groups,
                best: true,
            }),
            bonus,
        ))
    }

    /// Their atoms in short fields: every document where the term scores more than
    /// [`Alternatives::long_max`] matches one of them.
    pub fn short(&self, searcher: &Searcher) -> tantivy::Result<Vec<Short>> {
        shorts(self.alternatives.iter().flatten().flatten(), searcher)
    }

    /// The most an alternative's atoms in long fields add to its relevance, of all of them.
    pub fn long_max(&self, searcher: &Searcher) -> tantivy::Result<f32> {
        let mut most = 0.0f32;
        for pieces in &self.alternatives {
            let mut sum = 0.0;
            for atom in pieces.iter().flatten().filter(|atom| atom.long) {
                sum += atom.max_score(searcher)?;
            }
            most = most.max(sum);
        }
        Ok(most)
    }
}

/// `atoms` in short fields, for [`super::pruned`].
fn shorts<'a>(
    atoms: impl Iterator<Item = &'a Atom>,
    searcher: &Searcher,
) -> tantivy::Result<Vec<Short>> {
    let mut short = Vec::new();
    for atom in atoms.filter(|atom| !atom.long) {
        short.extend(atom.short(searcher)?);
    }
    Ok(short)
}

/// The documents of any of `queries`, scored by the best of them that matches there: each
/// query is asked for its documents only as they are needed, so a seek of
/// [`super::pruned`]'s to a candidate does not make a reading read the documents in between
/// (tantivy's disjunctions score a window of 4 096 documents at every seek out of the last
/// one: a phrase checked in every body of that window, for each candidate).
pub fn best_of(queries: Vec<Box<dyn Query>>) -> Box<dyn Query> {
    match <[_; 1]>::try_from(queries) {
        Ok([only]) => only,
        Err(queries) => Box::new(ReadingQuery {
            alone: Vec::new(),
            groups: queries.into_iter().map(|query| vec![vec![query]]).collect(),
            best: true,
        }),
    }
}

/// The same shape as a [`Reading`], of queries, weights or scorers.
type Groups<T> = Vec<Vec<Vec<T>>>;

/// A [`Reading`] (or [`Alternatives`]: groups scored by the best) as a tantivy query.
#[derive(Debug)]
struct ReadingQuery {
    alone: Vec<Box<dyn Query>>,
    groups: Groups<Box<dyn Query>>,
    /// Scored by the best child that matches rather than their sum.
    best: bool,
}

impl Clone for ReadingQuery {
    fn clone(&self) -> Self {
        let clones = |queries: &[Box<dyn Query>]| queries.iter().map(|q| q.box_clone()).collect();
        Self {
            alone: clones(&self.alone),
            groups: self
                .groups
                .iter()
                .map(|group| group.iter().map(|piece| clones(piece)).collect())
                .collect(),
            best: self.best,
        }
    }
}

impl Query for ReadingQuery {
    fn weight(&self, enable_scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        let weights = |queries: &[Box<dyn Query>]| {
            queries
                .iter()
                .map(|query| query.weight(enable_scoring))
                .collect::<tantivy::Result<Vec<_>>>()
        };
        Ok(Box::new(ReadingWeight {
            alone: weights(&self.alone)?,
            groups: self
                .groups
                .iter()
                .map(|group| group.iter().map(|piece| weights(piece)).collect())
                .collect::<tantivy::Result<_>>()?,
            best: self.best,
        }))
    }

    fn query_terms<'a>(&'a self, visitor: &mut dyn FnMut(&'a Term, bool)) {
        for query in self
            .alone
            .iter()
            .chain(self.groups.iter().flatten().flatten())
        {
            query.query_terms(visitor);
        }
    }
}

struct ReadingWeight {
    alone: Vec<Box<dyn Weight>>,
    groups: Groups<Box<dyn Weight>>,
    best: bool,
}

impl Weight for ReadingWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        let scorers = |weights: &[Box<dyn Weight>]| {
            weights
                .iter()
                .map(|weight| weight.scorer(reader, boost))
                .collect::<tantivy::Result<Vec<_>>>()
        };
        let mut children = scorers(&self.alone)?;
        for group in &self.groups {
            let pieces = group
                .iter()
                .map(|piece| scorers(piece).map(Merge::new))
                .collect::<tantivy::Result<Vec<_>>>()?;
            children.push(Box::new(GroupScorer::new(pieces)));
        }
        Ok(Box::new(ReadingScorer::new(
            Merge::new(children),
            self.best,
        )))
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        let mut scorer = self.scorer(reader, 1.0)?;
        if scorer.seek(doc) != doc {
            return Err(tantivy::TantivyError::InvalidArgument(format!(
                "document {doc} does not match"
            )));
        }
        Ok(Explanation::new(
            "relevance of a term's readings",
            scorer.score(),
        ))
    }
}

/// Scorers gone through together in doc order: a heap of where each stands.
struct Merge {
    scorers: Vec<Box<dyn Scorer>>,
    /// `(doc, scorer)` of the scorers not at the current document.
    heap: BinaryHeap<Reverse<(DocId, usize)>>,
    /// The scorers at the current document, in order.
    here: Vec<usize>,
    doc: DocId,
}

impl Merge {
    /// The scorers, each at its first document, merged (at none yet: call [`Merge::next`]).
    fn new(scorers: Vec<Box<dyn Scorer>>) -> Self {
        let heap = scorers
            .iter()
            .enumerate()
            .filter(|(_, scorer)| scorer.doc() != TERMINATED)
            .map(|(at, scorer)| Reverse((scorer.doc(), at)))
            .collect();
        Self {
            scorers,
            heap,
            here: Vec::new(),
            doc: 0,
        }
    }

    /// Moves the scorers at the current document on, then gathers those at the next lowest:
    /// that document ([`TERMINATED`] when none is left).
    fn next(&mut self) -> DocId {
        for &at in &self.here {
            let doc = self.scorers[at].advance();
            if doc != TERMINATED {
                self.heap.push(Reverse((doc, at)));
            }
        }
        self.here.clear();
        self.gather()
    }

    /// Like [`Merge::next`], to the first document at or after `target`.
    fn seek(&mut self, target: DocId) -> DocId {
        if self.doc >= target && !self.here.is_empty() {
            return self.doc;
        }
        for &at in &self.here {
            let doc = self.scorers[at].seek(target);
            if doc != TERMINATED {
                self.heap.push(Reverse((doc, at)));
            }
        }
        self.here.clear();
        // Those behind the target; a scorer put back is at or after it, so is not met again.
        while let Some(&Reverse((doc, at))) = self.heap.peek() {
            if doc >= target {
                break;
            }
            self.heap.pop();
            let doc = self.scorers[at].seek(target);
            if doc != TERMINATED {
                self.heap.push(Reverse((doc, at)));
            }
        }
        self.gather()
    }

    fn gather(&mut self) -> DocId {
        let Some(Reverse((doc, _))) = self.heap.peek().copied() else {
            self.doc = TERMINATED;
            return TERMINATED;
        };
        while let Some(Reverse((at_doc, at))) = self.heap.peek().copied() {
            if at_doc != doc {
                break;
            }
            self.heap.pop();
            self.here.push(at);
        }
        self.here.sort_unstable();
        self.doc = doc;
        doc
    }

    /// The current document.
    fn doc(&self) -> DocId {
        self.doc
    }

    /// The sum of the scores of the scorers at the current document, in their order.
    fn sum(&mut self) -> f64 {
        let mut sum = 0.0;
        for &at in &self.here {
            sum += f64::from(self.scorers[at].score());
        }
        sum
    }

    /// The best score of the scorers at the current document.
    fn max(&mut self) -> f32 {
        let mut best = 0.0f32;
        for &at in &self.here {
            best = best.max(self.scorers[at].score());
        }
        best
    }

    /// How many documents the scorers hold, at most.
    fn size_hint(&self) -> u32 {
        self.scorers
            .iter()
            .map(|scorer| scorer.size_hint())
            .fold(0, u32::saturating_add)
    }

    fn cost(&self) -> u64 {
        self.scorers
            .iter()
            .map(|scorer| scorer.cost())
            .fold(0, u64::saturating_add)
    }
}

/// The documents where every piece of a group matches (an intersection of unions), scored
/// the sum of the atoms that match there.
struct GroupScorer {
    pieces: Vec<Merge>,
    doc: DocId,
}

impl GroupScorer {
    fn new(pieces: Vec<Merge>) -> Self {
        let mut group = Self { pieces, doc: 0 };
        group.align(0);
        group
    }

    /// Moves every piece to the first document at or after `target` where all of them match.
    fn align(&mut self, mut target: DocId) -> DocId {
        loop {
            let mut highest = target;
            for piece in &mut self.pieces {
                let doc = piece.seek(highest);
                if doc == TERMINATED {
                    self.doc = TERMINATED;
                    return TERMINATED;
                }
                highest = highest.max(doc);
            }
            if self.pieces.iter().all(|piece| piece.doc() == highest) {
                self.doc = highest;
                return highest;
            }
            target = highest;
        }
    }
}

impl DocSet for GroupScorer {
    fn advance(&mut self) -> DocId {
        if self.doc == TERMINATED {
            return TERMINATED;
        }
        self.align(self.doc + 1)
    }

    fn seek(&mut self, target: DocId) -> DocId {
        if self.doc >= target {
            return self.doc;
        }
        self.align(target)
    }

    fn doc(&self) -> DocId {
        self.doc
    }

    fn size_hint(&self) -> u32 {
        self.pieces.iter().map(Merge::size_hint).min().unwrap_or(0)
    }

    fn cost(&self) -> u64 {
        self.pieces.iter().map(Merge::cost).min().unwrap_or(0)
    }
}

impl Scorer for GroupScorer {
    fn score(&mut self) -> Score {
        let mut sum = 0.0f64;
        for piece in &mut self.pieces {
            sum += piece.sum();
        }
        #[allow(clippy::cast_possible_truncation)]
        let sum = sum as f32;
        sum
    }
}

/// A reading's documents: any of its atoms alone, or of its groups; scored the sum of what
/// matches (or its best).
struct ReadingScorer {
    merge: Merge,
    best: bool,
}

impl ReadingScorer {
    fn new(mut merge: Merge, best: bool) -> Self {
        merge.next();
        Self { merge, best }
    }
}

impl DocSet for ReadingScorer {
    fn advance(&mut self) -> DocId {
        self.merge.next()
    }

    fn seek(&mut self, target: DocId) -> DocId {
        self.merge.seek(target)
    }

    fn doc(&self) -> DocId {
        self.merge.doc()
    }

    fn size_hint(&self) -> u32 {
        self.merge.size_hint()
    }

    fn cost(&self) -> u64 {
        self.merge.cost()
    }
}

impl Scorer for ReadingScorer {
    fn score(&mut self) -> Score {
        if self.best {
            return self.merge.max();
        }
        #[allow(clippy::cast_possible_truncation)]
        let relevance = self.merge.sum() as f32;
        relevance
    }
}

#[cfg(test)]
mod tests {
    use tantivy::{
        collector::TopDocs,
        doc,
        schema::{Schema, TEXT},
        Index,
    };

    use super::*;

    #[test]
    fn the_long_bound_is_above_every_score_even_where_lengths_are_rounded() {
        // One document of 101 words (its length kept rounded down) among many without the
        // field: the field's average length is about 1, where tantivy's `max_score` (which
        // assumes the longest field) falls 2% below this document's score.
        let mut schema = Schema::builder();
        let field = schema.add_text_field("about", TEXT);
        let other = schema.add_text_field("other", TEXT);
        let index = Index::create_in_ram(schema.build());
        let mut writer = index.writer(15_000_000).unwrap();
        writer
            .add_document(doc!(field => vec!["redis"; 101].join(" ")))
            .unwrap();
        for _ in 0..100 {
            writer.add_document(doc!(other => "x")).unwrap();
        }
        writer.commit().unwrap();
        let searcher = index.reader().unwrap().searcher();
        let atom = Atom {
            field,
            terms: vec![(0, "redis".to_owned())],
            boost: 1.0,
            long: true,
        };
        let query = atom.query().unwrap();
        let top = searcher
            .search(&query, &TopDocs::with_limit(1).order_by_score())
            .unwrap();
        let (score, _) = top[0];
        let bound = atom.max_score(&searcher).unwrap();
        assert!(score <= bound, "score {score} above the bound {bound}");
    }
}
