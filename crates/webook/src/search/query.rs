//! From what a user typed to ranked ids: parsing (no syntax to get wrong — quotes group words,
//! everything else is text), the tantivy query, scoring and keyset-style paging.
//!
//! The query is [`fold`]ed, then split into terms (whitespace-separated words, or quoted
//! phrases). Every term must match, by the best of its interpretations, in tiers:
//! - **as typed** (tier 2): its grams as a phrase in some field (an exact substring: "简单" in
//!   "安装简单", "锁" in "分布式锁"); or every one of its [`tokens::pieces`] somewhere
//!   ("分布式系统" finds "分布式…系统"); or, for the last term while it is being typed (no
//!   space after it) and ending in a Latin word, the [`MAX_PREFIX_EXPANSIONS`] words of the
//!   index that start with it and occur in the most documents ([`expand`]: the same choice
//!   whatever the index's segments); or one of its [synonyms](super::synonyms), as exactly.
//! - **loosely** (tier 1): all of its pieces but one, when it has three or more
//!   ("缓存穿透解决方案" finds a text on 缓存穿透 that never says 解决方案), a Latin word with
//!   typos (none up to 4 letters, one up to 8, two beyond — Meilisearch's rule), a Chinese term of 2–8 characters with one of them
//!   mistyped for a [homophone](super::homophones) that stands next to its neighbour in the
//!   index (a pinyin input slip: "微服物" finds "微服务", "故障之后" never "故障之前"), or a
//!   Latin word as the pinyin, full or initials, of words in a title, tag or name
//!   ("fenbushi", "fbs" → 分布式).
//!
//! A term's score is its tier's bonus plus its BM25 (of the exact phrase ×2, the pieces, the
//! expansions; fields weigh: tags ×4, title ×3, author ×1.5, body ×1; nickname ×3, about
//! ×1), squashed below a cap ([`super::tiered`]); the query's is the sum over its terms, so
//! every document matching all terms as typed ranks above every one that needs a loose
//! match. A term's readings as typed are one [`Reading`] (its score computed the same way
//! wherever it is), so that the strict query's page is found by [`pruned`] — scoring only the
//! documents that can still make it — when its bounds can tell, and by scoring every match
//! otherwise, the same page either way. The loose query is only run when the strict one does
//! not fill the page asked for ([`Prepared::search`]): the documents both find score the same
//! in both, so pages continue either way. A term's loose readings are [`Alternatives`],
//! scored by the best that matches (a text with two spellings of a typo is not made more
//! relevant by both), and the loose page is pruned too, starting from the strict hits. A
//! Latin word's typos are looked for among alphabetic words only ([`expand::within`]). Scores are then nudged by freshness and popularity
//! (at most +30% of the BM25 part, see [`tweak`]) and ties broken by the higher id, one total
//! order that cursors follow
//! — for one reference time: freshness is age at the `now_ms` a search is given, which the
//! pages of one list share (the service keeps it in their cursors).

use tantivy::{
    collector::TopDocs,
    query::{BooleanQuery, EmptyQuery, Occur, Query},
    schema::Field,
    DocAddress, Searcher,
};

use super::{
    expand,
    fold::fold,
    index::{Fields, ARTICLE, USER},
    pruned,
    reading::{best_of, Alternatives, Atom, Reading},
    synonyms::Synonyms,
    tiered::TIER,
    tokens::{self, is_cjk, is_word_char},
};

/// Counter: pages of hits, by `how` they were found — `pruned` (only the documents that could
/// make the page scored) or `every_match` — and by `reading`: `as_typed` (the strict query
/// filled the page, or nothing reads any term loosely) or `loose`.
pub const SEARCH_PAGES_TOTAL: &str = "search_pages_total";

/// Longest query, in characters (API.md: q ≤ 100).
pub const MAX_QUERY_CHARS: usize = 100;
/// Most terms a query is split into; the rest are ignored.
const MAX_TERMS: usize = 10;
/// Most index words a prefix expands to, per field.
pub const MAX_PREFIX_EXPANSIONS: usize = 50;
/// Most index words a word with typos expands to, per field.
const MAX_TYPO_EXPANSIONS: usize = 20;
/// Longest Chinese term read as having a character mistyped.
const MAX_SLIP_CHARS: usize = 8;
/// Most characters a mistyped one is taken for.
const MAX_SLIPS: usize = 3;
/// Most slip-corrected terms one query tries (each a phrase in every field).
const MAX_SLIPS_PER_QUERY: usize = 12;
/// Weight of a term's exact phrase over its other matches.
const PHRASE_BOOST: f32 = 2.0;
/// Weight of a prefix expansion that is not the typed word itself.
const EXPANSION_BOOST: f32 = 0.7;
/// Tier bonus of a term matched as typed, and loosely.
const AS_TYPED: f32 = 2.0 * TIER;
const LOOSELY: f32 = TIER;

/// What the user typed, as terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedQuery {
    /// Terms, in order, folded.
    pub terms: Vec<String>,
    /// For each term, whether it was quoted: a phrase that matches only as it stands (no
    /// pieces apart, no loose reading).
    pub quoted: Vec<bool>,
    /// Whether the last term is still being typed (matches as a prefix too).
    pub last_is_prefix: bool,
}

impl ParsedQuery {
    /// Folds `q` and splits it on whitespace, keeping "quoted text" together; drops terms that
    /// have no letters or digits. Never fails: anything is text.
    pub fn parse(q: &str) -> Self {
        let q = fold(q);
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
            quoted: terms.iter().map(|(_, quoted)| *quoted).collect(),
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

/// A field searched, with its weight.
#[derive(Debug, Clone, Copy)]
struct Searched {
    field: Field,
    boost: f32,
    /// A long field (body, about): bounded rather than gone through by [`pruned`].
    long: bool,
}

/// The text fields of `kind` with their weights, and its pinyin fields.
fn searched(fields: &Fields, kind: &str) -> (Vec<Searched>, Vec<Searched>) {
    let field = |field, boost| Searched {
        field,
        boost,
        long: field == fields.body || field == fields.about,
    };
    if kind == USER {
        (
            vec![field(fields.nickname, 3.0), field(fields.about, 1.0)],
            vec![field(fields.nickname_pinyin, 3.0)],
        )
    } else {
        (
            vec![
                field(fields.tags, 4.0),
                field(fields.title, 3.0),
                field(fields.author, 1.5),
                field(fields.body, 1.0),
            ],
            vec![
                field(fields.tags_pinyin, 4.0),
                field(fields.title_pinyin, 3.0),
                field(fields.author_pinyin, 1.5),
            ],
        )
    }
}

fn boxed(query: impl Query) -> Box<dyn Query> {
    Box::new(query)
}

/// All of `queries` (none: `None`).
fn all(queries: Vec<Box<dyn Query>>) -> Option<Box<dyn Query>> {
    match queries.len() {
        0 => None,
        1 => queries.into_iter().next(),
        _ => Some(boxed(BooleanQuery::new(
            queries.into_iter().map(|q| (Occur::Must, q)).collect(),
        ))),
    }
}

/// The terms a phrase of `text` (folded) is checked with, by position: for each CJK
/// character the pair it starts (the last one of a run: nothing, the pair before covers it; a
/// run of one: the character alone), each Latin word whole. Positions skipped in `skip` are
/// left out (a typo), the characters next to them then standing alone.
fn phrase_terms(text: &str, skip: Option<usize>) -> Vec<(usize, String)> {
    let mut at_position: Vec<Vec<String>> = Vec::new();
    for token in tokens::grams(text) {
        if at_position.len() <= token.position {
            at_position.resize(token.position + 1, Vec::new());
        }
        at_position[token.position].push(token.text);
    }
    let cjk_pair = |grams: &[String]| {
        grams
            .iter()
            .find(|g| g.chars().count() == 2 && g.chars().all(is_cjk))
            .cloned()
    };
    let mut out = Vec::new();
    let mut covered = false;
    for (position, grams) in at_position.iter().enumerate() {
        let Some(first) = grams.first() else {
            covered = false;
            continue;
        };
        if Some(position) == skip {
            covered = false;
            continue;
        }
        let pair = cjk_pair(grams).filter(|_| skip != Some(position + 1));
        match pair {
            Some(pair) => {
                out.push((position, pair));
                covered = true;
            }
            None if covered => covered = false,
            None => {
                out.push((position, first.clone()));
                covered = false;
            }
        }
    }
    // Offsets from the first term kept.
    let base = out.first().map_or(0, |(position, _)| *position);
    out.into_iter()
        .map(|(position, term)| (position - base, term))
        .collect()
}

/// `text` (folded) as a substring of each field: one atom per field (none for no terms).
fn substring_atoms(searched: &[Searched], text: &str, boost: f32) -> Vec<Atom> {
    let terms = phrase_terms(text, None);
    if terms.is_empty() {
        return Vec::new();
    }
    searched
        .iter()
        .map(|s| Atom {
            field: s.field,
            terms: terms.clone(),
            boost: s.boost * boost,
            long: s.long,
        })
        .collect()
}

/// A query ready to run, with what its hits should highlight.
pub struct Prepared {
    /// Every term as typed.
    strict: Box<dyn Query>,
    /// Each term, for the loose query, built when it is needed.
    terms: Vec<TermReadings>,
    text_fields: Vec<Searched>,
    pinyin_fields: Vec<Searched>,
    /// The words and phrases the query matched with (folded): the terms, their pieces, the
    /// prefix and typo expansions used and the synonyms.
    needles: Vec<String>,
    /// Pages [`pruned`] answered, in all and of the loose query.
    pruned_pages: usize,
    pruned_loose_pages: usize,
}

/// A term of a [`Prepared`] query.
struct TermReadings {
    text: String,
    /// Whether it is being typed.
    typing: bool,
    /// Whether it was quoted (no loose reading).
    quoted: bool,
    /// Its readings as typed.
    reading: Reading,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("strict", &self.strict)
            .field("needles", &self.needles)
            .finish()
    }
}

/// The term as typed: its phrase, its pieces, its prefix expansions, its synonyms.
fn as_typed(
    searcher: &Searcher,
    text_fields: &[Searched],
    term: &str,
    typing: bool,
    synonyms: &Synonyms,
    needles: &mut Vec<String>,
) -> tantivy::Result<Reading> {
    let mut reading = Reading::default();
    needles.push(term.to_owned());
    let ends_in_word = term.chars().last().is_some_and(is_word_char);
    let lone_word = term.chars().all(is_word_char);
    if typing && ends_in_word {
        // The typed word, and the most frequent words that start with it.
        let grams = phrase_terms(term, None);
        let Some((last_offset, prefix)) = grams.last().cloned() else {
            return Ok(reading);
        };
        let before = &grams[..grams.len() - 1];
        let limit = if lone_word {
            MAX_PREFIX_EXPANSIONS
        } else {
            MAX_PREFIX_EXPANSIONS / 5
        };
        for s in text_fields {
            let mut atoms = Vec::new();
            for word in expand::prefixed(searcher, s.field, &prefix, limit)? {
                let boost = if word == prefix { 1.0 } else { EXPANSION_BOOST };
                let mut terms = before.to_vec();
                terms.push((last_offset, word.clone()));
                atoms.push(Atom {
                    field: s.field,
                    terms,
                    boost: s.boost * boost,
                    long: s.long,
                });
                if !needles.contains(&word) {
                    needles.push(word);
                }
            }
            reading.alone(atoms);
        }
    } else {
        reading.alone(substring_atoms(text_fields, term, PHRASE_BOOST));
    }
    let pieces = tokens::pieces(term);
    if pieces.len() > 1 {
        reading.all_of(
            pieces
                .iter()
                .map(|piece| substring_atoms(text_fields, piece, 1.0))
                .collect(),
        );
        needles.extend(pieces);
    }
    for other in synonyms.of(term) {
        reading.alone(substring_atoms(text_fields, &other, PHRASE_BOOST));
        needles.extend(tokens::pieces(&other));
        needles.push(other);
    }
    Ok(reading)
}

/// How many typos a Latin word of `letters` may have.
fn typos_allowed(letters: usize) -> u8 {
    match letters {
        0..=4 => 0,
        5..=8 => 1,
        _ => 2,
    }
}

/// The term loosely: with typos, as pinyin, with a word left out or a homophone slipped in
/// (`None`: no such reading).
fn loosely(
    searcher: &Searcher,
    text_fields: &[Searched],
    pinyin_fields: &[Searched],
    term: &str,
    typing: bool,
    slips_left: &mut usize,
    needles: &mut Vec<String>,
) -> tantivy::Result<Option<Alternatives>> {
    let mut loose = Alternatives::default();
    let letters = term.chars().count();
    if term.len() > tokens::MAX_TERM_BYTES {
        // Longer than any word the index holds.
        return Ok(None);
    }
    if term.chars().all(is_word_char) {
        // Each word found, in the fields where it was (in the order first found).
        let mut words: Vec<(String, Vec<Atom>)> = Vec::new();
        let mut found_in = |s: &Searched, word: String, boost: f32| {
            let atom = Atom {
                field: s.field,
                terms: vec![(0, word.clone())],
                boost: s.boost * boost,
                long: s.long,
            };
            match words.iter_mut().find(|(known, _)| *known == word) {
                Some((_, atoms)) => atoms.push(atom),
                None => words.push((word, vec![atom])),
            }
        };
        let typos = typos_allowed(letters);
        let first = text_fields.first().map(|s| s.field);
        if let Some(field) =
            first.filter(|_| typos > 0 && !term.chars().all(|c| c.is_ascii_digit()))
        {
            let automaton = expand::typo_automaton(field, term, typos)?;
            for s in text_fields {
                for found in expand::within(
                    searcher,
                    s.field,
                    &automaton,
                    expand::is_alphabetic(term),
                    MAX_TYPO_EXPANSIONS,
                )? {
                    if found != term {
                        found_in(s, found, 1.0);
                    }
                }
            }
        }
        if letters >= 2 && term.chars().all(|c| c.is_ascii_lowercase()) {
            for s in pinyin_fields {
                found_in(s, term.to_owned(), 1.0);
                if typing {
                    for found in expand::prefixed(searcher, s.field, term, MAX_PREFIX_EXPANSIONS)? {
                        if found != term {
                            found_in(s, found, EXPANSION_BOOST);
                        }
                    }
                }
            }
        }
        for (word, atoms) in words {
            // Pinyin is not highlighted: the words it stands for are not known here.
            if text_fields.iter().any(|s| s.field == atoms[0].field) && !needles.contains(&word) {
                needles.push(word);
            }
            loose.add(vec![atoms]);
        }
    }
    // All of its words but one, when it has three or more (of two, one would be half the
    // query: too loose to be worth a reader's time): an alternative for each word left out.
    let pieces = tokens::pieces(term);
    if pieces.len() > 2 {
        let each: Vec<Vec<Atom>> = pieces
            .iter()
            .map(|piece| substring_atoms(text_fields, piece, 1.0))
            .collect();
        if each.iter().all(|atoms| !atoms.is_empty()) {
            for left_out in 0..each.len() {
                loose.add(
                    each.iter()
                        .enumerate()
                        .filter(|(at, _)| *at != left_out)
                        .map(|(_, atoms)| atoms.clone())
                        .collect(),
                );
            }
        }
    }
    if term.chars().all(is_cjk) && (2..=MAX_SLIP_CHARS).contains(&letters) {
        // One character mistyped for one that sounds alike.
        let chars: Vec<char> = term.chars().collect();
        let fields: Vec<Field> = text_fields.iter().map(|s| s.field).collect();
        for at in 0..chars.len() {
            if *slips_left == 0 {
                break;
            }
            for sound in expand::homophones(searcher, &fields, &chars, at, MAX_SLIPS)? {
                if *slips_left == 0 {
                    break;
                }
                *slips_left -= 1;
                let mut meant = chars.clone();
                meant[at] = sound;
                let meant: String = meant.into_iter().collect();
                let atoms = substring_atoms(text_fields, &meant, 1.0);
                if !atoms.is_empty() {
                    loose.add(vec![atoms]);
                    needles.push(meant);
                }
            }
        }
    }
    Ok((!loose.is_empty()).then_some(loose))
}

/// The strict query for `parsed` over documents of `kind`, with `synonyms`; `searcher` is
/// looked at for the words prefixes expand to.
pub fn prepare(
    searcher: &Searcher,
    fields: &Fields,
    kind: &str,
    parsed: &ParsedQuery,
    synonyms: &Synonyms,
) -> tantivy::Result<Prepared> {
    // No filter on `kind`: the fields searched exist only in documents of that kind, and an
    // intersection with every document of the kind would cost a posting list of them all.
    let (text_fields, pinyin_fields) = searched(fields, kind);
    let mut strict = Vec::new();
    let mut terms = Vec::new();
    let mut needles = Vec::new();
    for (at, term) in parsed.terms.iter().enumerate() {
        let typing = parsed.last_is_prefix && at + 1 == parsed.terms.len();
        let quoted = parsed.quoted.get(at).copied().unwrap_or(false);
        let reading = if quoted {
            let mut reading = Reading::default();
            reading.alone(substring_atoms(&text_fields, term, PHRASE_BOOST));
            reading
        } else {
            as_typed(searcher, &text_fields, term, typing, synonyms, &mut needles)?
        };
        if quoted {
            needles.push(term.clone());
        }
        strict.push(reading.query(AS_TYPED).unwrap_or_else(|| boxed(EmptyQuery)));
        terms.push(TermReadings {
            text: term.clone(),
            typing,
            quoted,
            reading,
        });
    }
    Ok(Prepared {
        strict: all(strict).unwrap_or_else(|| boxed(EmptyQuery)),
        terms,
        text_fields,
        pinyin_fields,
        needles,
        pruned_pages: 0,
        pruned_loose_pages: 0,
    })
}

impl Prepared {
    /// Every term as typed or loosely, whichever reads it best; with what pruning needs of
    /// it when `typed` (each term's plan as typed, from [`Prepared::typed_plans`]) is given.
    /// `None` when no term has a loose reading (the strict query is all there is). Adds the
    /// words it matches with to the needles.
    fn loose(
        &mut self,
        searcher: &Searcher,
        typed: Option<Vec<Option<pruned::TermPlan>>>,
    ) -> tantivy::Result<Option<Loose>> {
        let prune = typed.is_some();
        let mut typed = typed.map(Vec::into_iter);
        let mut queries = Vec::new();
        let mut plans = Vec::new();
        let mut any_loose = false;
        let mut slips_left = MAX_SLIPS_PER_QUERY;
        for term in &self.terms {
            let fuzzy = if term.quoted {
                None
            } else {
                loosely(
                    searcher,
                    &self.text_fields,
                    &self.pinyin_fields,
                    &term.text,
                    term.typing,
                    &mut slips_left,
                    &mut self.needles,
                )?
            };
            any_loose |= fuzzy.is_some();
            let as_typed = match typed.as_mut() {
                Some(plans) => plans.next().flatten(),
                None => term.reading.query(AS_TYPED).map(|query| pruned::TermPlan {
                    query,
                    readings: Vec::new(),
                }),
            };
            let mut readings = Vec::new();
            let mut either = Vec::new();
            if let Some(plan) = as_typed {
                either.push(plan.query);
                readings.extend(plan.readings);
            }
            if let Some(fuzzy) = &fuzzy {
                if let Some(query) = fuzzy.query(LOOSELY) {
                    either.push(query);
                    if prune {
                        readings.push(pruned::ReadingPlan {
                            short: fuzzy.short(searcher)?,
                            long_max: fuzzy.long_max(searcher)?,
                            bonus: LOOSELY,
                            typed: false,
                        });
                    }
                }
            }
            if either.is_empty() {
                // Nothing in the index can match this term.
                return Ok(None);
            }
            let query = best_of(either);
            queries.push(query.box_clone());
            plans.push(pruned::TermPlan { query, readings });
        }
        Ok(any_loose
            .then(|| all(queries).map(|query| Loose { query, plans }))
            .flatten())
    }

    /// How many documents match every term as typed.
    pub fn count(&self, searcher: &Searcher) -> tantivy::Result<usize> {
        searcher.search(self.strict.as_ref(), &tantivy::collector::Count)
    }

    /// Up to `limit` hits after `after`, best first ([`search`]): of the strict query, and
    /// when it has fewer, of the loose one (which ranks the strict one's hits the same, above
    /// the rest).
    pub fn search(
        &mut self,
        searcher: &Searcher,
        kind: &str,
        after: Option<After>,
        limit: usize,
        now_ms: i64,
    ) -> tantivy::Result<Vec<Hit>> {
        self.page(searcher, kind, after, limit, now_ms, true)
    }

    /// The page [`Prepared::search`] gives, with every match scored: for tests and
    /// benchmarks, which compare.
    pub fn search_every_match(
        &mut self,
        searcher: &Searcher,
        kind: &str,
        after: Option<After>,
        limit: usize,
        now_ms: i64,
    ) -> tantivy::Result<Vec<Hit>> {
        self.page(searcher, kind, after, limit, now_ms, false)
    }

    /// How many pages of [`Prepared::search`] were answered without scoring every match.
    pub fn pruned_pages(&self) -> usize {
        self.pruned_pages
    }

    /// How many of those were pages of the loose query.
    pub fn pruned_loose_pages(&self) -> usize {
        self.pruned_loose_pages
    }

    fn page(
        &mut self,
        searcher: &Searcher,
        kind: &str,
        after: Option<After>,
        limit: usize,
        now_ms: i64,
        prune: bool,
    ) -> tantivy::Result<Vec<Hit>> {
        let order = PageOrder::new(searcher, kind, now_ms, after);
        // Each term's plan as typed, made once for the strict page and the loose one.
        let mut typed = if prune {
            Some(self.typed_plans(searcher)?)
        } else {
            None
        };
        let pruned = match typed.as_mut() {
            Some(plans) if plans.iter().all(Option::is_some) => {
                let every: Vec<pruned::TermPlan> = plans.drain(..).flatten().collect();
                let page = pruned::search(searcher, &every, &order, limit, None)?;
                plans.extend(every.into_iter().map(Some));
                page
            }
            // A term with no reading as typed: nothing matches them all.
            _ => None,
        };
        let strict_pruned = pruned.is_some();
        let hits = match pruned {
            Some(hits) => as_hits(hits),
            None => search(searcher, self.strict.as_ref(), kind, after, limit, now_ms)?,
        };
        if hits.len() >= limit {
            self.count_page(prune, strict_pruned, false);
            return Ok(hits);
        }
        // Fewer strict hits than asked for: the loose query finds them again, ranked the same
        // (they start its page: every strict match after the cursor is one of them).
        let Some(loose) = self.loose(searcher, typed)? else {
            self.count_page(prune, strict_pruned, false);
            return Ok(hits);
        };
        if prune {
            let known: Vec<(f32, u64)> = hits
                .iter()
                .map(|hit| (hit.score, u64::try_from(hit.id).unwrap_or(0)))
                .collect();
            if let Some(page) = pruned::search(searcher, &loose.plans, &order, limit, Some(&known))?
            {
                self.count_page(prune, true, true);
                return Ok(as_hits(page));
            }
        }
        self.count_page(prune, false, true);
        search(searcher, loose.query.as_ref(), kind, after, limit, now_ms)
    }

    /// Counts a page found by [`pruned`] (`pruned`) or by scoring every match, of the
    /// `loose` query or as typed.
    fn count_page(&mut self, prune: bool, pruned: bool, loose: bool) {
        if !prune {
            return;
        }
        if pruned {
            self.pruned_pages += 1;
            self.pruned_loose_pages += usize::from(loose);
        }
        let how = if pruned { "pruned" } else { "every_match" };
        let reading = if loose { "loose" } else { "as_typed" };
        metrics::counter!(SEARCH_PAGES_TOTAL, "how" => how, "reading" => reading).increment(1);
    }

    /// Each term as typed, as [`pruned`] bounds it (`None`: the term has no reading as
    /// typed).
    fn typed_plans(&self, searcher: &Searcher) -> tantivy::Result<Vec<Option<pruned::TermPlan>>> {
        let mut plans = Vec::with_capacity(self.terms.len());
        for term in &self.terms {
            let plan = match term.reading.query(AS_TYPED) {
                Some(query) => Some(pruned::TermPlan {
                    query,
                    readings: vec![pruned::ReadingPlan {
                        short: term.reading.short(searcher)?,
                        long_max: term.reading.long_max(searcher)?,
                        bonus: AS_TYPED,
                        typed: true,
                    }],
                }),
                None => None,
            };
            plans.push(plan);
        }
        Ok(plans)
    }

    /// The words and phrases the hits matched with, longest first: what highlights mark.
    pub fn needles(mut self) -> Vec<String> {
        self.needles
            .retain(|needle| needle.chars().any(char::is_alphanumeric));
        self.needles
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.needles.dedup();
        self.needles
    }
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

/// The first `limit` hits of `q` over documents of `kind` in `searcher`'s index, ranked at
/// `now_ms`, with the built-in synonyms: a search as the service makes it, for tests and
/// benchmarks.
pub fn ranked(
    searcher: &Searcher,
    fields: &Fields,
    kind: &str,
    q: &str,
    limit: usize,
    now_ms: i64,
) -> tantivy::Result<Vec<Hit>> {
    // The built-in groups, built once: benchmarks time this function.
    static BUILT_IN: std::sync::LazyLock<Synonyms> = std::sync::LazyLock::new(Synonyms::default);
    let mut prepared = prepare(searcher, fields, kind, &ParsedQuery::parse(q), &BUILT_IN)?;
    prepared.search(searcher, kind, None, limit, now_ms)
}

/// `score` with the nudges of [`tweak`] applied to its relevance, not its tiers.
fn nudged(score: f32, age_ms: i64, likes: u64) -> f32 {
    let tiers = (score / TIER).floor() * TIER;
    tiers + tweak(score - tiers, age_ms, likes)
}

/// What [`tweak`] multiplies a score by at most (published now, liked without end).
fn most_nudge() -> f32 {
    tweak(1.0, 0, u64::MAX)
}

/// How hits of one kind are ordered: (nudged score, id), ranked at `now_ms`.
#[derive(Debug, Clone, Copy)]
struct Keys {
    article: bool,
    now_ms: i64,
    /// What a score is multiplied by at most (1 for users: no nudges).
    most_nudge: f32,
}

/// The sort keys of one segment's documents.
struct SegmentKeys {
    keys: Keys,
    ids: Option<std::sync::Arc<dyn tantivy::columnar::ColumnValues<u64>>>,
    ctimes: Option<std::sync::Arc<dyn tantivy::columnar::ColumnValues<i64>>>,
    likes: Option<std::sync::Arc<dyn tantivy::columnar::ColumnValues<u64>>>,
}

impl Keys {
    /// The order of hits of `kind` ranked at `now_ms`.
    pub fn new(kind: &str, now_ms: i64) -> Self {
        let article = kind == ARTICLE;
        Self {
            article,
            now_ms,
            most_nudge: if article { most_nudge() } else { 1.0 },
        }
    }

    /// The keys of `segment`'s documents.
    pub fn segment(self, segment: &tantivy::SegmentReader) -> SegmentKeys {
        let fast = segment.fast_fields();
        SegmentKeys {
            keys: self,
            ids: fast
                .u64("id")
                .ok()
                .map(|column| column.first_or_default_col(0)),
            ctimes: fast
                .i64("ctime")
                .ok()
                .map(|column| column.first_or_default_col(0)),
            likes: fast
                .u64("likes")
                .ok()
                .map(|column| column.first_or_default_col(0)),
        }
    }

    /// The most a document scored `score` can be nudged to (the freshest, most liked): the
    /// bits [`nudged`] gives such a document, without working its nudge out again.
    pub fn most(self, score: f32) -> f32 {
        // Scores are not negative: truncation is the floor, without a call to `floorf`.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let tiers = f32::from((score / TIER) as u16) * TIER;
        tiers + (score - tiers) * self.most_nudge
    }
}

impl SegmentKeys {
    /// The key of `doc`, scored `score`.
    pub fn key(&self, doc: tantivy::DocId, score: f32) -> (f32, u64) {
        let id = self.ids.as_ref().map_or(0, |ids| ids.get_val(doc));
        let score = if self.keys.article {
            let now_ms = self.keys.now_ms;
            let ctime = self.ctimes.as_ref().map_or(now_ms, |c| c.get_val(doc));
            let likes = self.likes.as_ref().map_or(0, |l| l.get_val(doc));
            nudged(score, now_ms.saturating_sub(ctime), likes)
        } else {
            score
        };
        (score, id)
    }
}

/// The order of a page for [`pruned`]: its keys in each segment, after its cursor.
struct PageOrder {
    keys: Keys,
    segments: Vec<SegmentKeys>,
    after: Option<After>,
}

impl PageOrder {
    /// The order of the hits of `kind` in `searcher` ranked at `now_ms`, after `after`.
    fn new(searcher: &Searcher, kind: &str, now_ms: i64, after: Option<After>) -> Self {
        let keys = Keys::new(kind, now_ms);
        Self {
            keys,
            segments: searcher
                .segment_readers()
                .iter()
                .map(|reader| keys.segment(reader))
                .collect(),
            after,
        }
    }
}

/// `(score, id)` keys as hits.
fn as_hits(keys: Vec<(f32, u64)>) -> Vec<Hit> {
    keys.into_iter()
        .map(|(score, id)| Hit {
            id: i64::try_from(id).unwrap_or(0),
            score,
        })
        .collect()
}

/// The loose query, and its terms as [`pruned`] bounds them (no readings when the page is
/// not pruned).
struct Loose {
    query: Box<dyn Query>,
    plans: Vec<pruned::TermPlan>,
}

impl pruned::Order for PageOrder {
    fn key(&self, segment: usize, doc: tantivy::DocId, score: f32) -> (f32, u64) {
        self.segments[segment].key(doc, score)
    }

    fn most(&self, score: f32) -> f32 {
        self.keys.most(score)
    }

    fn keeps(&self, key: (f32, u64)) -> bool {
        is_after(key, self.after)
    }
}

/// Whether a hit keyed `key` comes after the cursor `after` (every hit does without one).
fn is_after(key: (f32, u64), after: Option<After>) -> bool {
    after.is_none_or(|after| key < (f32::from_bits(after.score_bits), after.id))
}

/// Up to `limit` hits of `query` after `after`, best first: (nudged score, id) descending.
pub fn search(
    searcher: &Searcher,
    query: &dyn Query,
    kind: &str,
    after: Option<After>,
    limit: usize,
    now_ms: i64,
) -> tantivy::Result<Vec<Hit>> {
    let keys = Keys::new(kind, now_ms);
    let collector =
        TopDocs::with_limit(limit.max(1)).tweak_score(move |segment: &tantivy::SegmentReader| {
            let keys = keys.segment(segment);
            move |doc: tantivy::DocId, score: tantivy::Score| {
                let key = keys.key(doc, score);
                if is_after(key, after) {
                    key
                } else {
                    (f32::NEG_INFINITY, 0)
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
            ParsedQuery::parse("\"hello world\" x").quoted,
            [true, false]
        );
        assert_eq!(
            parsed("AND OR ( ) : * ~ - +"),
            (strings(&["and", "or"]), false)
        );
        assert_eq!(
            parsed("\"unclosed quote"),
            (strings(&["unclosed quote"]), false)
        );
        assert!(ParsedQuery::parse("  !!! ").is_empty());
        // Folded first: full-width letters and spaces, capitals.
        assert_eq!(
            parsed("ｇｏ\u{3000}微服务 İstanbul"),
            (strings(&["go", "微服务", "istanbul"]), true)
        );
    }

    #[test]
    fn phrases_pair_chinese_characters_and_keep_latin_words_of_two_letters_whole() {
        let terms = |text: &str| -> Vec<(usize, String)> { phrase_terms(text, None) };
        let owned = |pairs: &[(usize, &str)]| -> Vec<(usize, String)> {
            pairs.iter().map(|(at, t)| (*at, (*t).to_owned())).collect()
        };
        assert_eq!(terms("v1.8"), owned(&[(0, "v1"), (1, "8")]));
        assert_eq!(terms("ai画"), owned(&[(0, "ai"), (1, "画")]));
        assert_eq!(
            terms("go is fun"),
            owned(&[(0, "go"), (1, "is"), (2, "fun")])
        );
        assert_eq!(
            terms("分布式锁"),
            owned(&[(0, "分布"), (1, "布式"), (2, "式锁")])
        );
        assert_eq!(terms("redis锁"), owned(&[(0, "redis"), (1, "锁")]));
        // A character skipped: its neighbours stand alone where no pair covers them.
        assert_eq!(phrase_terms("微服物", Some(2)), owned(&[(0, "微服")]));
        assert_eq!(
            phrase_terms("微服物", Some(1)),
            owned(&[(0, "微"), (2, "物")])
        );
    }

    #[test]
    fn nudges_never_outweigh_relevance_by_more_than_thirty_percent() {
        assert!((tweak(1.0, 0, u64::MAX) - 1.3).abs() < 0.01);
        assert!((tweak(1.0, i64::MAX / 2, 0) - 1.0).abs() < 0.01);
        assert!(tweak(1.0, 0, 10) > tweak(1.0, 0, 0));
        assert!(tweak(1.0, 0, 0) > tweak(1.0, 86_400_000 * 60, 0));
    }
}
