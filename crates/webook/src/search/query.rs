//! From what a user typed to ranked ids: parsing (no syntax to get wrong — quotes group words,
//! everything else is text), the tantivy query, scoring and keyset-style paging.
//!
//! Each term (a whitespace-separated word, or a quoted phrase) must match, in one of two ways:
//! its grams as a phrase in some field (an exact substring: "简单" in "安装简单"), or, when jieba
//! cuts it into several words, every word somewhere (so "安装简单" also finds "安装非常简单").
//! Scores are BM25 of those matches. The last term, unless the query ends in a space, matches
//! as a prefix too when it ends in a Latin word or is one Chinese character (typeahead: "datab"
//! finds "database"; a longer Chinese term already matches anywhere).
//! Fields weigh differently: for articles tags ×4, title ×3, author ×1.5, body ×1; for users
//! nickname ×3, about-me ×1. BM25 scores are then nudged by freshness and popularity (at most
//! +30%, see [`tweak`]) and ties broken by the higher id, one total order that cursors follow —
//! for one reference time: freshness is age at the `now_ms` [`search`] is given, which the
//! pages of one list share (the service keeps it in their cursors).

use tantivy::{
    collector::TopDocs,
    query::{BooleanQuery, BoostQuery, Occur, PhrasePrefixQuery, PhraseQuery, Query, TermQuery},
    schema::{Field, IndexRecordOption},
    DocAddress, Searcher, Term,
};

use super::{
    index::{Fields, ARTICLE, USER},
    tokens,
};

/// Longest query, in characters (API.md: q ≤ 100).
pub const MAX_QUERY_CHARS: usize = 100;
/// Most terms a query is split into; the rest are ignored.
const MAX_TERMS: usize = 10;
/// Most index terms a prefix expands to.
const MAX_PREFIX_EXPANSIONS: u32 = 50;

/// What the user typed, as terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedQuery {
    /// Terms, in order.
    pub terms: Vec<String>,
    /// Whether the last term is still being typed (matches as a prefix too).
    pub last_is_prefix: bool,
}

impl ParsedQuery {
    /// Splits `q` on whitespace, keeping "quoted text" together; drops terms that have no
    /// letters or digits. Never fails: anything is text.
    pub fn parse(q: &str) -> Self {
        let mut terms = Vec::new();
        let mut current = String::new();
        let mut quoted = false;
        for c in q.chars() {
            if c == '"' {
                if !current.trim().is_empty() {
                    terms.push((std::mem::take(&mut current), quoted));
                }
                current.clear();
                quoted = !quoted;
            } else if c.is_whitespace() && !quoted {
                if !current.is_empty() {
                    terms.push((std::mem::take(&mut current), false));
                }
            } else {
                current.push(c);
            }
        }
        if !current.trim().is_empty() {
            terms.push((current, quoted));
        }
        let searchable = |term: &str| term.chars().any(char::is_alphanumeric);
        // Still being typed: the query ends inside a searchable, unquoted last term.
        let ends_open = q
            .chars()
            .last()
            .is_some_and(|c| !c.is_whitespace() && c != '"')
            && terms
                .last()
                .is_some_and(|(term, quoted)| !quoted && searchable(term));
        terms.retain(|(term, _)| searchable(term));
        let last_is_prefix = ends_open && terms.len() <= MAX_TERMS;
        terms.truncate(MAX_TERMS);
        Self {
            last_is_prefix,
            terms: terms
                .into_iter()
                .map(|(term, _)| term.trim().to_owned())
                .collect(),
        }
    }

    /// Whether nothing searchable was typed.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// A field searched, with its weight: words and grams of the same text.
#[derive(Debug, Clone, Copy)]
struct Searched {
    words: Field,
    grams: Field,
    boost: f32,
}

fn searched(fields: &Fields, kind: &str) -> Vec<Searched> {
    let field = |words, grams, boost| Searched {
        words,
        grams,
        boost,
    };
    if kind == USER {
        vec![
            field(fields.nickname, fields.nickname_grams, 3.0),
            field(fields.about, fields.about_grams, 1.0),
        ]
    } else {
        vec![
            field(fields.tags, fields.tags_grams, 4.0),
            field(fields.title, fields.title_grams, 3.0),
            field(fields.author, fields.author_grams, 1.5),
            field(fields.body, fields.body_grams, 1.0),
        ]
    }
}

fn boxed(query: impl Query) -> Box<dyn Query> {
    Box::new(query)
}

fn boosted(query: Box<dyn Query>, boost: f32) -> Box<dyn Query> {
    if (boost - 1.0).abs() < f32::EPSILON {
        query
    } else {
        boxed(BoostQuery::new(query, boost))
    }
}

/// The grams of `term` as a query on `field`: one term, a phrase, or (`prefix`) a phrase whose
/// last gram may be a prefix.
fn gram_query(field: Field, grams: &[String], prefix: bool) -> Option<Box<dyn Query>> {
    let terms: Vec<Term> = grams
        .iter()
        .map(|gram| Term::from_field_text(field, gram))
        .collect();
    match (terms.len(), prefix) {
        (0, _) => None,
        (_, true) => {
            let mut query = PhrasePrefixQuery::new(terms);
            query.set_max_expansions(MAX_PREFIX_EXPANSIONS);
            Some(boxed(query))
        }
        (1, false) => terms
            .into_iter()
            .next()
            .map(|term| boxed(TermQuery::new(term, IndexRecordOption::WithFreqs))),
        (_, false) => Some(boxed(PhraseQuery::new(terms))),
    }
}

/// The query for `parsed` over documents of `kind`.
pub fn build(fields: &Fields, kind: &str, parsed: &ParsedQuery) -> Box<dyn Query> {
    // No filter on `kind`: the fields searched exist only in documents of that kind, and an
    // intersection with every document of the kind would cost a posting list of them all.
    let searched = searched(fields, kind);
    let mut must: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    for (at, term) in parsed.terms.iter().enumerate() {
        // A prefix is for a word being typed: Latin letters, or a first Chinese character
        // (further characters already match anywhere, as pairs).
        let typing = parsed.last_is_prefix && at + 1 == parsed.terms.len();
        let ends_in_cjk_run = {
            let mut chars = term.chars().rev();
            matches!((chars.next(), chars.next()), (Some(a), Some(b)) if tokens::is_cjk(a) && tokens::is_cjk(b))
        };
        let prefix = typing && !ends_in_cjk_run;
        let grams: Vec<String> = tokens::grams(term).into_iter().map(|t| t.text).collect();
        let mut either: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for field in &searched {
            if let Some(query) = gram_query(field.grams, &grams, prefix) {
                either.push((Occur::Should, boosted(query, field.boost)));
            }
        }
        // Or every word of it somewhere, when it is several words ("安装简单" also finds
        // "安装非常简单"); a one-word term is already its grams.
        let words = tokens::precise_words(term);
        if words.len() > 1 {
            let all_words = words
                .iter()
                .map(|word| {
                    let anywhere = searched
                        .iter()
                        .map(|field| {
                            let query = boxed(TermQuery::new(
                                Term::from_field_text(field.words, word),
                                IndexRecordOption::WithFreqs,
                            ));
                            (Occur::Should, boosted(query, field.boost))
                        })
                        .collect();
                    (Occur::Must, boxed(BooleanQuery::new(anywhere)))
                })
                .collect();
            either.push((Occur::Should, boxed(BooleanQuery::new(all_words))));
        }
        if either.is_empty() {
            continue;
        }
        must.push((Occur::Must, boxed(BooleanQuery::new(either))));
    }
    if must.len() == 1 {
        if let Some((_, only)) = must.pop() {
            return only;
        }
    }
    if must.is_empty() {
        return boxed(tantivy::query::EmptyQuery);
    }
    boxed(BooleanQuery::new(must))
}

/// Where a page starts: after the hit with this (score bits, id), in the order of [`search`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct After {
    /// The tweaked score's bits (`f32::to_bits`), so the cursor is exact.
    pub score_bits: u32,
    /// The id.
    pub id: u64,
}

/// One hit: the object's id and its sort key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Article or user id.
    pub id: i64,
    /// The tweaked score.
    pub score: f32,
}

impl Hit {
    /// The cursor that continues after this hit.
    pub fn after(&self) -> After {
        After {
            score_bits: self.score.to_bits(),
            id: u64::try_from(self.id).unwrap_or(0),
        }
    }
}

/// Days over which freshness halves.
const FRESHNESS_HALF_LIFE_DAYS: f32 = 30.0;
/// Likes that give half the popularity nudge.
const POPULARITY_HALF_LIKES: f32 = 50.0;

/// The score with its nudges: × (1 + 0.15 × freshness + 0.15 × popularity), freshness halving
/// every 30 days since first publication, popularity `likes / (likes + 50)`. Relevance still
/// leads: a nudge never adds more than 30%.
pub fn tweak(score: f32, age_ms: i64, likes: u64) -> f32 {
    let days = (age_ms.max(0) as f32) / 86_400_000.0;
    let freshness = 0.5f32.powf(days / FRESHNESS_HALF_LIFE_DAYS);
    let likes = likes as f32;
    let popularity = likes / (likes + POPULARITY_HALF_LIKES);
    score * (1.0 + 0.15 * freshness + 0.15 * popularity)
}

/// Up to `limit` hits of `query` after `after`, best first: (tweaked score, id) descending.
pub fn search(
    searcher: &Searcher,
    query: &dyn Query,
    kind: &str,
    after: Option<After>,
    limit: usize,
    now_ms: i64,
) -> tantivy::Result<Vec<Hit>> {
    let article = kind == ARTICLE;
    let collector =
        TopDocs::with_limit(limit.max(1)).tweak_score(move |segment: &tantivy::SegmentReader| {
            let fast = segment.fast_fields();
            let ids = fast
                .u64("id")
                .ok()
                .map(|column| column.first_or_default_col(0));
            let ctimes = fast
                .i64("ctime")
                .ok()
                .map(|column| column.first_or_default_col(0));
            let likes = fast
                .u64("likes")
                .ok()
                .map(|column| column.first_or_default_col(0));
            move |doc: tantivy::DocId, score: tantivy::Score| {
                let id = ids.as_ref().map_or(0, |ids| ids.get_val(doc));
                let score = if article {
                    let ctime = ctimes.as_ref().map_or(now_ms, |c| c.get_val(doc));
                    let likes = likes.as_ref().map_or(0, |l| l.get_val(doc));
                    tweak(score, now_ms.saturating_sub(ctime), likes)
                } else {
                    score
                };
                let key = (score, id);
                match after {
                    Some(after) if key >= (f32::from_bits(after.score_bits), after.id) => {
                        (f32::NEG_INFINITY, 0)
                    }
                    _ => key,
                }
            }
        });
    let top: Vec<((f32, u64), DocAddress)> = searcher.search(query, &collector)?;
    Ok(top
        .into_iter()
        .filter(|((score, _), _)| score.is_finite())
        .map(|((score, id), _)| Hit {
            id: i64::try_from(id).unwrap_or(0),
            score,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(q: &str) -> (Vec<String>, bool) {
        let parsed = ParsedQuery::parse(q);
        (parsed.terms, parsed.last_is_prefix)
    }

    fn strings(terms: &[&str]) -> Vec<String> {
        terms.iter().map(|term| (*term).to_owned()).collect()
    }

    #[test]
    fn anything_typed_is_text() {
        assert_eq!(parsed("rust 安装"), (strings(&["rust", "安装"]), true));
        assert_eq!(parsed("rust 安装 "), (strings(&["rust", "安装"]), false));
        assert_eq!(
            parsed("\"hello world\" x"),
            (strings(&["hello world", "x"]), true)
        );
        assert_eq!(
            parsed("\"hello world\""),
            (strings(&["hello world"]), false)
        );
        assert_eq!(
            parsed("AND OR ( ) : * ~ - +"),
            (strings(&["AND", "OR"]), false)
        );
        assert_eq!(
            parsed("\"unclosed quote"),
            (strings(&["unclosed quote"]), false)
        );
        assert!(ParsedQuery::parse("  !!! ").is_empty());
    }

    #[test]
    fn nudges_never_outweigh_relevance_by_more_than_thirty_percent() {
        assert!((tweak(1.0, 0, u64::MAX) - 1.3).abs() < 0.01);
        assert!((tweak(1.0, i64::MAX / 2, 0) - 1.0).abs() < 0.01);
        assert!(tweak(1.0, 0, 10) > tweak(1.0, 0, 0));
        assert!(tweak(1.0, 0, 0) > tweak(1.0, 86_400_000 * 60, 0));
    }
}
