//! Normalisation: the one form text takes before it is indexed, queried or highlighted, so
//! that what a reader types matches however the text was written.
//!
//! Each character is folded on its own: compatibility decomposition (NFKD: full-width `ｇｏ` →
//! `go`, ligatures `ﬁ` → `fi`, half-width katakana, circled digits), full case folding
//! (lowercase, `ß` → `ss`, final sigma → `σ`), and Latin, Greek and Cyrillic diacritics
//! dropped (`İstanbul` → `istanbul`, `café` → `cafe`). Kana and hangul are kept whole: their
//! decomposition would split a syllable. Folding a character at a time keeps the map from
//! each folded character back to the one it came from ([`fold_chars`]), which highlights
//! need; the result equals NFKC plus case folding for everything a reader types, except that
//! a separate combining mark never composes with its base (it is dropped).

use unicode_normalization::char::decompose_compatible;

/// Whether `c` keeps its form: kana and hangul syllables, whose decomposition would split
/// them (`が` → `か` + a combining mark).
fn kept_whole(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0xAC00..=0xD7AF)
}

/// Whether `c` is a diacritic folded away: the combining diacritical marks (U+0300–U+036F),
/// which is what Latin, Greek and Cyrillic letters decompose into.
fn is_diacritic(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F)
}

/// Pushes the folded form of `c` to `out` (nothing for a diacritic of its own).
pub fn fold_char(c: char, out: &mut impl Extend<char>) {
    if c.is_ascii() {
        out.extend(std::iter::once(c.to_ascii_lowercase()));
        return;
    }
    if kept_whole(c) {
        out.extend(std::iter::once(c));
        return;
    }
    decompose_compatible(c, |part| {
        if is_diacritic(part) {
            return;
        }
        match part {
            'ß' | 'ẞ' => out.extend(['s', 's']),
            'ς' => out.extend(std::iter::once('σ')),
            _ => out.extend(part.to_lowercase().filter(|c| !is_diacritic(*c))),
        }
    });
}

/// `text` folded.
pub fn fold(text: &str) -> String {
    if text
        .bytes()
        .all(|b| b.is_ascii() && !b.is_ascii_uppercase())
    {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        fold_char(c, &mut out);
    }
    out
}

/// `chars` folded, each folded character with the index in `chars` of the one it came from.
pub fn fold_chars(chars: &[char]) -> Vec<(char, usize)> {
    let mut out = Vec::with_capacity(chars.len());
    let mut folded: Vec<char> = Vec::with_capacity(4);
    for (at, &c) in chars.iter().enumerate() {
        folded.clear();
        fold_char(c, &mut folded);
        out.extend(folded.iter().map(|&f| (f, at)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_case_and_diacritics_fold_away() {
        assert_eq!(fold("ｇｏ 微服务"), "go 微服务");
        assert_eq!(fold("ＲＵＳＴ１２"), "rust12");
        assert_eq!(fold("İstanbul"), "istanbul");
        assert_eq!(fold("Café NAÏVE"), "cafe naive");
        assert_eq!(fold("Straße"), "strasse");
        assert_eq!(fold("ΟΔΟΣ"), "οδοσ");
        assert_eq!(fold("ﬁle"), "file");
        assert_eq!(fold("数据库"), "数据库");
        assert_eq!(fold("がぎ ｶ"), "がぎ カ");
        assert_eq!(fold("한국어"), "한국어");
    }

    #[test]
    fn each_folded_character_knows_its_source() {
        let chars: Vec<char> = "aİß".chars().collect();
        assert_eq!(fold_chars(&chars), [('a', 0), ('i', 1), ('s', 2), ('s', 2)]);
    }
}
