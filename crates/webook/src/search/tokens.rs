//! How text becomes index terms, the same way for documents and for queries.
//!
//! Two analyses, each a tantivy tokenizer registered under its name:
//! - [`WORDS`]: jieba's search-mode segmentation (words, and the shorter words inside long
//!   ones), lowercased, punctuation and spaces dropped. English words come out whole. Scores
//!   relevance: a query word that is a dictionary word matches documents where jieba found it.
//! - [`GRAMS`]: every run of CJK characters as overlapping character pairs (a lone character as
//!   itself), every run of letters and digits as one lowercased word, positions counted across
//!   both. A query's grams matched as a phrase are an exact substring match (at word boundaries
//!   for Latin text), so "简单" finds "安装简单" whatever jieba made of either — the recall a word
//!   segmenter alone misses.

use std::sync::LazyLock;

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// Name of the word analysis in the index's tokenizer manager.
pub const WORDS: &str = "webook_words";
/// Name of the character-pair analysis.
pub const GRAMS: &str = "webook_grams";

/// Longest term kept, in bytes (a longer "word" is noise: a URL, a hash).
const MAX_TERM_BYTES: usize = 40;

/// The segmenter with its default dictionary, loaded once (≈ 0.3 s) on first use.
static JIEBA: LazyLock<jieba_rs::Jieba> = LazyLock::new(jieba_rs::Jieba::new);

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

fn lowercased(word: &str) -> String {
    if word.bytes().all(|b| !b.is_ascii_uppercase()) {
        word.to_owned()
    } else {
        word.to_lowercase()
    }
}

/// The word terms of `text`, with byte offsets.
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
            text: lowercased(word.word),
            position_length: 1,
        });
    }
    tokens
}

/// The words of `text` in jieba's precise mode (no shorter words inside long ones),
/// lowercased: what a query term is made of.
pub fn precise_words(text: &str) -> Vec<String> {
    JIEBA
        .cut(text, true)
        .into_iter()
        .filter(|word| {
            word.word.len() <= MAX_TERM_BYTES && word.word.chars().any(char::is_alphanumeric)
        })
        .map(|word| lowercased(word.word))
        .collect()
}

/// The gram terms of `text`, with byte offsets.
pub fn grams(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let push = |tokens: &mut Vec<Token>, from: usize, to: usize, term: String| {
        tokens.push(Token {
            offset_from: from,
            offset_to: to,
            position: tokens.len(),
            text: term,
            position_length: 1,
        });
    };
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if is_cjk(c) {
            // A run of CJK characters: each with the next, or alone if the run is one long.
            let mut previous = (start, c);
            let mut alone = true;
            while let Some(&(at, next)) = chars.peek() {
                if !is_cjk(next) {
                    break;
                }
                chars.next();
                let end = at + next.len_utf8();
                push(
                    &mut tokens,
                    previous.0,
                    end,
                    text[previous.0..end].to_owned(),
                );
                previous = (at, next);
                alone = false;
            }
            if alone {
                push(&mut tokens, start, start + c.len_utf8(), c.to_string());
            }
        } else if c.is_alphanumeric() {
            let mut end = start + c.len_utf8();
            while let Some(&(at, next)) = chars.peek() {
                if !next.is_alphanumeric() || is_cjk(next) {
                    break;
                }
                chars.next();
                end = at + next.len_utf8();
            }
            if end - start <= MAX_TERM_BYTES {
                push(&mut tokens, start, end, lowercased(&text[start..end]));
            }
        }
    }
    tokens
}

/// A tantivy tokenizer over one of the analyses above.
#[derive(Clone, Copy)]
pub struct Analysis(fn(&str) -> Vec<Token>);

impl Analysis {
    /// [`words`].
    pub const WORDS: Analysis = Analysis(words);
    /// [`grams`].
    pub const GRAMS: Analysis = Analysis(grams);
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
            tokens: (self.0)(text).into_iter(),
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
    fn grams_pair_cjk_characters_and_keep_latin_words_whole() {
        assert_eq!(texts(grams("安装简单")), ["安装", "装简", "简单"]);
        assert_eq!(
            texts(grams("Rust安装，很 Simple!")),
            ["rust", "安装", "很", "simple"]
        );
        assert_eq!(texts(grams("v1.80 版")), ["v1", "80", "版"]);
        let tokens = grams("a安装");
        assert_eq!((tokens[1].offset_from, tokens[1].offset_to), (1, 7));
        assert_eq!(tokens[1].position, 1);
    }

    #[test]
    fn words_segment_chinese_and_drop_punctuation() {
        let terms = texts(words("我们中出了一个叛徒, Hello World!"));
        assert!(terms.contains(&"叛徒".to_owned()), "{terms:?}");
        assert!(terms.contains(&"hello".to_owned()), "{terms:?}");
        assert!(terms
            .iter()
            .all(|term| term.chars().all(char::is_alphanumeric)));
        let tokens = words("安装 简单");
        for token in &tokens {
            assert_eq!(&"安装 简单"[token.offset_from..token.offset_to], token.text);
        }
    }

    #[test]
    fn overlong_terms_are_dropped() {
        let long = "x".repeat(MAX_TERM_BYTES + 1);
        assert!(grams(&long).is_empty());
        assert!(words(&long).is_empty());
    }
}
