//! Words of the index a query word stands for: those it begins (typeahead), those within a
//! few typos of it, and the characters a Chinese one may have been mistyped for, found in the term dictionaries of every segment and chosen by how many
//! documents hold them — summed over the segments, so the choice is the same however the
//! index is cut into segments (before and after a reindex alike). Work is bounded: at most
//! [`MAX_SCANNED`] dictionary entries per field and segment.

use std::collections::{HashMap, HashSet};

use tantivy::{
    query::{DfaWrapper, FuzzyTermQuery},
    schema::Field,
    termdict::{TermDictionary, TermStreamer},
    Searcher, Term,
};

use tantivy_fst::Automaton;

use super::homophones;

/// Most dictionary entries looked at per field and segment for one word.
pub const MAX_SCANNED: usize = 20_000;

/// The `limit` words of `field` beginning with `prefix` (itself included) held by the most
/// documents, most first (ties: the shorter, then in byte order).
pub fn prefixed(
    searcher: &Searcher,
    field: Field,
    prefix: &str,
    limit: usize,
) -> tantivy::Result<Vec<String>> {
    let mut found: HashMap<Vec<u8>, u64> = HashMap::new();
    for segment in searcher.segment_readers() {
        let index = segment.inverted_index(field)?;
        let stream = starting_with(index.terms(), prefix.as_bytes(), true)?;
        tally_range(&mut found, stream, |_| true);
    }
    // The typed word itself, if the index has it, whatever its count.
    let typed = found.contains_key(prefix.as_bytes());
    let mut words = most_held(found, limit);
    if typed && !words.iter().any(|word| word == prefix) {
        words.pop();
        words.push(prefix.to_owned());
    }
    Ok(words)
}

/// What recognises the words within `typos` edits of `word` (a transposition is one): built
/// once per word, for every field and segment.
pub fn typo_automaton(field: Field, word: &str, typos: u8) -> tantivy::Result<DfaWrapper> {
    FuzzyTermQuery::new(Term::from_field_text(field, word), typos, true).automaton()
}

/// The `limit` words of `field` that `automaton` ([`typo_automaton`]) recognises, the word
/// itself included if the index has it, held by the most documents, most first. With
/// `alphabetic` (the word typed is: see [`is_alphabetic`]), only alphabetic words — a Latin
/// word's typos are Latin words, a Cyrillic one's Cyrillic — and the dictionary's Chinese
/// grams, most of it, are never walked.
pub fn within(
    searcher: &Searcher,
    field: Field,
    automaton: &DfaWrapper,
    alphabetic: bool,
    limit: usize,
) -> tantivy::Result<Vec<String>> {
    let mut found: HashMap<Vec<u8>, u64> = HashMap::new();
    for segment in searcher.segment_readers() {
        let index = segment.inverted_index(field)?;
        let terms = index.terms();
        if alphabetic {
            tally_matches(
                &mut found,
                terms.search(Alphabetic(automaton)).into_stream()?,
            );
        } else {
            tally_matches(&mut found, terms.search(automaton).into_stream()?);
        }
    }
    Ok(most_held(found, limit))
}

/// Whether `word` is written in an alphabet — its characters are below U+0800 (Latin with its
/// accents, Greek, Cyrillic, …), two bytes at most in UTF-8 — rather than in CJK characters.
pub fn is_alphabetic(word: &str) -> bool {
    word.chars().all(|c| u32::from(c) < 0x800)
}

/// A typo automaton over [alphabetic](is_alphabetic) words only: a state `None` is past the
/// first byte of a character of three bytes or more.
struct Alphabetic<'a>(&'a DfaWrapper);

impl Automaton for Alphabetic<'_> {
    type State = Option<u32>;

    fn start(&self) -> Self::State {
        Some(self.0.start())
    }

    fn is_match(&self, state: &Self::State) -> bool {
        state.as_ref().is_some_and(|state| self.0.is_match(state))
    }

    fn can_match(&self, state: &Self::State) -> bool {
        state.as_ref().is_some_and(|state| self.0.can_match(state))
    }

    fn accept(&self, state: &Self::State, byte: u8) -> Self::State {
        state
            .as_ref()
            .filter(|_| byte < 0xE0)
            .map(|state| self.0.accept(state, byte))
    }
}

/// Tallies the words `stream` finds.
fn tally_matches<A: Automaton>(found: &mut HashMap<Vec<u8>, u64>, mut stream: TermStreamer<'_, A>) {
    tally(found, || {
        stream
            .advance()
            .then(|| (stream.key().to_vec(), stream.value().doc_freq))
    });
}

/// Up to `limit` characters that sound like `chars[at]` and stand next to its neighbour in
/// the index (in a pair with the character before it, or for the first one, after it) in
/// some of `fields`, held by the most documents, most first: what a slip of a pinyin input
/// method typed `chars[at]` for.
pub fn homophones(
    searcher: &Searcher,
    fields: &[Field],
    chars: &[char],
    at: usize,
    limit: usize,
) -> tantivy::Result<Vec<char>> {
    let Some(&typed) = chars.get(at) else {
        return Ok(Vec::new());
    };
    let sounds: HashSet<char> = homophones::of(typed).collect();
    let mut found: HashMap<char, u64> = HashMap::new();
    if let Some(&left) = at.checked_sub(1).and_then(|before| chars.get(before)) {
        // The pairs that start with the character before: one scan of the dictionary.
        let mut prefix = [0u8; 4];
        let prefix = left.encode_utf8(&mut prefix).as_bytes();
        let mut pairs: HashMap<Vec<u8>, u64> = HashMap::new();
        for &field in fields {
            for segment in searcher.segment_readers() {
                let index = segment.inverted_index(field)?;
                let stream = starting_with(index.terms(), prefix, false)?;
                tally_range(&mut pairs, stream, |pair| {
                    std::str::from_utf8(&pair[prefix.len()..])
                        .ok()
                        .and_then(|rest| rest.chars().next())
                        .is_some_and(|second| sounds.contains(&second))
                });
            }
        }
        for (pair, docs) in pairs {
            let second = std::str::from_utf8(&pair[prefix.len()..])
                .ok()
                .and_then(|rest| rest.chars().next());
            if let Some(second) = second.filter(|c| sounds.contains(c)) {
                *found.entry(second).or_default() += docs;
            }
        }
    } else if let Some(&right) = chars.get(at + 1) {
        // The first character: each sound-alike in a pair with the one after.
        for sound in &sounds {
            let pair: String = [*sound, right].iter().collect();
            let docs: u64 = fields
                .iter()
                .map(|&field| searcher.doc_freq(&Term::from_field_text(field, &pair)))
                .collect::<tantivy::Result<Vec<u64>>>()?
                .into_iter()
                .sum();
            if docs > 0 {
                found.insert(*sound, docs);
            }
        }
    }
    let mut sounds: Vec<(char, u64)> = found.into_iter().collect();
    sounds.sort_by(|(a, a_docs), (b, b_docs)| b_docs.cmp(a_docs).then_with(|| a.cmp(b)));
    Ok(sounds.into_iter().take(limit).map(|(c, _)| c).collect())
}

/// The entries of `terms` that start with `prefix` (`prefix` itself too if `inclusive`).
fn starting_with<'a>(
    terms: &'a TermDictionary,
    prefix: &[u8],
    inclusive: bool,
) -> std::io::Result<TermStreamer<'a>> {
    let mut range = if inclusive {
        terms.range().ge(prefix)
    } else {
        terms.range().gt(prefix)
    };
    if let Some(upper) = successor(prefix) {
        range = range.lt(upper);
    }
    range.into_stream()
}

/// Adds to `found` the document count of each entry `next` yields (key, documents), at most
/// [`MAX_SCANNED`] of them.
fn tally(found: &mut HashMap<Vec<u8>, u64>, mut next: impl FnMut() -> Option<(Vec<u8>, u32)>) {
    for _ in 0..MAX_SCANNED {
        let Some((key, docs)) = next() else {
            return;
        };
        *found.entry(key).or_default() += u64::from(docs);
    }
}

/// Adds to `found` the document count of each entry of a range of a dictionary that `keep`
/// keeps, looking at [`MAX_SCANNED`] entries at most.
fn tally_range(
    found: &mut HashMap<Vec<u8>, u64>,
    mut stream: TermStreamer<'_>,
    keep: impl Fn(&[u8]) -> bool,
) {
    let mut scanned = 0;
    while scanned < MAX_SCANNED && stream.advance() {
        scanned += 1;
        if keep(stream.key()) {
            *found.entry(stream.key().to_vec()).or_default() += u64::from(stream.value().doc_freq);
        }
    }
}

/// The smallest byte string above every one that starts with `prefix` (`None`: there is
/// none, `prefix` being all 0xFF).
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut upper = prefix.to_vec();
    while let Some(last) = upper.pop() {
        if last < u8::MAX {
            upper.push(last + 1);
            return Some(upper);
        }
    }
    None
}

fn most_held(found: HashMap<Vec<u8>, u64>, limit: usize) -> Vec<String> {
    let mut words: Vec<(Vec<u8>, u64)> = found.into_iter().collect();
    words.sort_by(|(a, a_docs), (b, b_docs)| {
        b_docs
            .cmp(a_docs)
            .then_with(|| a.len().cmp(&b.len()))
            .then_with(|| a.cmp(b))
    });
    words
        .into_iter()
        .filter_map(|(word, _)| String::from_utf8(word).ok())
        .take(limit)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_successor_bounds_every_extension() {
        assert_eq!(successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(successor(&[b'a', 0xFF]), Some(b"b".to_vec()));
        assert_eq!(successor(&[0xFF]), None);
    }
}
