//! How text becomes index terms, the same way for documents and for queries. All text is
//! [`fold`]ed first (width, case, diacritics), so the terms are what a reader might type.
//!
//! Two analyses, each a tantivy tokenizer registered under its name:
//! - [`GRAMS`]: every CJK character alone *and* with the next one, both at the character's
//!   position; every run of letters and digits as one word at one position. A query's grams
//!   matched as a phrase are an exact substring match (at word boundaries for Latin text), so
//!   "简单" finds "安装简单" and "锁" finds "分布式锁" whatever a word segmenter made of
//!   either — the recall of Elasticsearch's `ik_max_word` (every sub-word and every single
//!   character) without its dictionary. Unigrams also let a phrase skip one character: the
//!   typo tolerance of Chinese queries ([`super::query`]).
//! - [`PINYIN`]: for Chinese titles, tags and names, each jieba search-mode word (and each
//!   whole run of Chinese characters) as its full pinyin and as its initials, so `fenbushi`
//!   and `fbs` find 分布式.
//!
//! Query terms are also cut into [`pieces`]: the dictionary words that cover them, the
//! shorter words of a compound included ("分布式系统" → 分布式, 系统), so a compound whose
//! words stand apart in a text still matches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::LazyLock;

use pinyin::ToPinyin;
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

use segment::Segmenter;

pub use super::fold::fold;

/// Name of the character analysis in the index's tokenizer manager.
pub const GRAMS: &str = "webook_grams";
/// Name of the pinyin analysis.
pub const PINYIN: &str = "webook_pinyin";

/// Longest term kept, in bytes (a longer "word" is noise: a URL, a hash).
pub const MAX_TERM_BYTES: usize = 40;
/// Longest pinyin term kept (a run of 12 Chinese characters spelled out).
const MAX_PINYIN_BYTES: usize = 64;

/// Bytes of the word segmenter's dictionary in memory: 0 until the first text that needs it.
pub const SEARCH_DICTIONARY_BYTES: &str = "search_dictionary_bytes";

/// [`SEARCH_DICTIONARY_BYTES`]' value in this process.
static DICTIONARY_BYTES: AtomicUsize = AtomicUsize::new(0);

/// jieba's segmentation (see the `segment` crate), built once on first use.
static JIEBA: LazyLock<Segmenter> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // the dictionary is compiled in, and its tests read it whole
    let segmenter = Segmenter::embedded().expect("the embedded word list is well-formed");
    DICTIONARY_BYTES.store(segmenter.memory_bytes(), Ordering::Relaxed);
    report_dictionary();
    segmenter
});

/// Sets [`SEARCH_DICTIONARY_BYTES`]: 0 until the dictionary is loaded, so the series is
/// there from the start.
pub fn report_dictionary() {
    metrics::gauge!(SEARCH_DICTIONARY_BYTES).set(DICTIONARY_BYTES.load(Ordering::Relaxed) as f64);
}

/// Loads the dictionary now rather than in the first request that needs it.
pub fn warm_up() {
    LazyLock::force(&JIEBA);
}

/// Whether `c` is written without spaces between words (Han, kana, hangul, CJK punctuation is
/// not: it is not alphanumeric).
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // hangul syllables
        | 0xF900..=0xFAFF    // compatibility ideographs
        | 0x20000..=0x3134F) // extensions B–G
}

/// Whether `c` is part of a Latin-style word (letters and digits written with spaces between
/// words).
pub fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() && !is_cjk(c)
}

/// jieba's search-mode words of `text` (already folded), with byte offsets: words, and the
/// shorter words inside long ones.
pub fn words(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    for word in JIEBA.cut_for_search(text, true) {
        if word.word.len() > MAX_TERM_BYTES || !word.word.chars().any(char::is_alphanumeric) {
            continue;
        }
        tokens.push(Token {
            offset_from: word.byte_start,
            offset_to: word.byte_end,
            position: tokens.len(),
            text: word.word.to_owned(),
            position_length: 1,
        });
    }
    tokens
}

/// The pieces of a query term (folded): the dictionary words that cover it, in order, a
/// compound cut into the shorter words inside it when they cover it whole ("分布式系统" →
/// 分布式, 系统; "数据库" stays whole: "库" is no word of its own there). Latin words and
/// digits come out whole.
pub fn pieces(term: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    for word in JIEBA.cut(term, true) {
        let word = word.word;
        if !word.chars().any(char::is_alphanumeric) {
            continue;
        }
        match cover(word) {
            Some(parts) => pieces.extend(parts),
            None => pieces.push(word.to_owned()),
        }
    }
    pieces
}

/// The shorter dictionary words that cover `word` from its start to its end, longest first
/// at each step; `None` when they do not (or `word` has fewer than three characters).
fn cover(word: &str) -> Option<Vec<String>> {
    if word.chars().count() < 3 || !word.chars().all(is_cjk) {
        return None;
    }
    let inner: Vec<(usize, usize)> = JIEBA
        .cut_for_search(word, false)
        .into_iter()
        .filter(|part| part.word.len() < word.len())
        .map(|part| (part.byte_start, part.byte_end))
        .collect();
    let mut parts = Vec::new();
    let mut at = 0;
    while at < word.len() {
        let end = inner
            .iter()
            .filter(|(start, end)| *start == at && *end - *start > 3)
            .map(|(_, end)| *end)
            .max()?;
        parts.push(word[at..end].to_owned());
        at = end;
    }
    Some(parts)
}

/// The gram terms of `text` (already folded), with byte offsets.
pub fn grams(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut position = 0;
    let push = |tokens: &mut Vec<Token>, from: usize, to: usize, position: usize| {
        tokens.push(Token {
            offset_from: from,
            offset_to: to,
            position,
            text: text[from..to].to_owned(),
            position_length: 1,
        });
    };
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if is_cjk(c) {
            let end = start + c.len_utf8();
            push(&mut tokens, start, end, position);
            if let Some(&(at, next)) = chars.peek() {
                if is_cjk(next) {
                    push(&mut tokens, start, at + next.len_utf8(), position);
                }
            }
            position += 1;
        } else if c.is_alphanumeric() {
            let mut end = start + c.len_utf8();
            while let Some(&(at, next)) = chars.peek() {
                if !is_word_char(next) {
                    break;
                }
                chars.next();
                end = at + next.len_utf8();
            }
            if end - start <= MAX_TERM_BYTES {
                push(&mut tokens, start, end, position);
                position += 1;
            }
        }
    }
    tokens
}

/// The full pinyin and the initials of `word`, if every character of it has a reading.
pub fn spelled(word: &str) -> Option<(String, String)> {
    let mut full = String::new();
    let mut initials = String::new();
    for c in word.chars() {
        let reading = c.to_pinyin()?;
        full.push_str(reading.plain());
        initials.push_str(reading.first_letter());
    }
    (!full.is_empty()).then_some((full, initials))
}

/// The pinyin terms of `text` (already folded): each search-mode word of each run of Chinese
/// characters, and the whole run, as full pinyin, and (two characters or more) as initials.
pub fn pinyin(text: &str) -> Vec<Token> {
    let mut tokens: Vec<Token> = Vec::new();
    let mut push = |from: usize, to: usize, term: String| {
        if term.len() <= MAX_PINYIN_BYTES && !tokens.iter().any(|t| t.text == term) {
            tokens.push(Token {
                offset_from: from,
                offset_to: to,
                position: tokens.len(),
                text: term,
                position_length: 1,
            });
        }
    };
    let spell = |from: usize, word: &str, push: &mut dyn FnMut(usize, usize, String)| {
        if let Some((full, initials)) = spelled(word) {
            push(from, from + word.len(), full);
            if word.chars().nth(1).is_some() {
                push(from, from + word.len(), initials);
            }
        }
    };
    let mut run_start = None;
    let ends = text
        .char_indices()
        .map(|(at, c)| (at, is_cjk(c)))
        .chain(std::iter::once((text.len(), false)));
    for (at, cjk) in ends {
        match (cjk, run_start) {
            (true, None) => run_start = Some(at),
            (false, Some(start)) => {
                let run = &text[start..at];
                for word in JIEBA.cut_for_search(run, true) {
                    spell(start + word.byte_start, word.word, &mut push);
                }
                spell(start, run, &mut push);
                run_start = None;
            }
            _ => {}
        }
    }
    tokens
}

/// A tantivy tokenizer over one of the analyses above.
#[derive(Clone, Copy)]
pub struct Analysis(fn(&str) -> Vec<Token>);

impl Analysis {
    /// [`grams`] of the folded text.
    pub const GRAMS: Analysis = Analysis(grams);
    /// [`pinyin`] of the folded text.
    pub const PINYIN: Analysis = Analysis(pinyin);
}

/// The tokens of one text, handed out one at a time.
pub struct Tokens {
    tokens: std::vec::IntoIter<Token>,
    current: Token,
}

impl Tokenizer for Analysis {
    type TokenStream<'a> = Tokens;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Tokens {
        Tokens {
            tokens: (self.0)(&fold(text)).into_iter(),
            current: Token::default(),
        }
    }
}

impl TokenStream for Tokens {
    fn advance(&mut self) -> bool {
        match self.tokens.next() {
            Some(token) => {
                self.current = token;
                true
            }
            None => false,
        }
    }

    fn token(&self) -> &Token {
        &self.current
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(tokens: Vec<Token>) -> Vec<String> {
        tokens.into_iter().map(|token| token.text).collect()
    }

    #[test]
    fn grams_are_every_cjk_character_alone_and_paired_and_latin_words_whole() {
        assert_eq!(
            texts(grams("安装简单")),
            ["安", "安装", "装", "装简", "简", "简单", "单"]
        );
        let tokens = grams("rust安装，很 simple!");
        assert_eq!(
            texts(tokens.clone()),
            ["rust", "安", "安装", "装", "很", "simple"]
        );
        let positions: Vec<usize> = tokens.iter().map(|t| t.position).collect();
        assert_eq!(positions, [0, 1, 1, 2, 3, 4]);
        assert_eq!(texts(grams("v1.80 版")), ["v1", "80", "版"]);
        let tokens = grams("a安装");
        assert_eq!((tokens[2].offset_from, tokens[2].offset_to), (1, 7));
    }

    #[test]
    fn analyses_fold_before_they_cut() {
        let mut analysis = Analysis::GRAMS;
        let mut stream = analysis.token_stream("ＧＯ İstanbul");
        let mut seen = Vec::new();
        while stream.advance() {
            seen.push(stream.token().text.clone());
        }
        assert_eq!(seen, ["go", "istanbul"]);
    }

    #[test]
    fn compounds_are_cut_into_the_words_that_cover_them() {
        assert_eq!(pieces("分布式系统"), ["分布式", "系统"]);
        assert_eq!(pieces("数据库"), ["数据库"]);
        assert_eq!(pieces("redis 锁"), ["redis", "锁"]);
    }

    #[test]
    fn pinyin_spells_words_and_runs_in_full_and_as_initials() {
        let terms = texts(pinyin("分布式系统 rust"));
        for expected in ["fenbushi", "fbs", "xitong", "xt", "fenbushixitong", "fbsxt"] {
            assert!(
                terms.contains(&expected.to_owned()),
                "{expected}: {terms:?}"
            );
        }
        assert!(!terms.iter().any(|t| t == "rust"), "{terms:?}");
        assert_eq!(spelled("锁"), Some(("suo".to_owned(), "s".to_owned())));
    }

    #[test]
    fn overlong_terms_are_dropped() {
        let long = "x".repeat(MAX_TERM_BYTES + 1);
        assert!(grams(&long).is_empty());
        assert!(words(&long).is_empty());
    }
}
