//! Write-time screening of text against the moderators' word lists.
//!
//! Moderators keep [`WordList`]s (Chinese and English words), each with an [`Action`]: a
//! write whose text contains one of its words is refused ([`Action::Refuse`], with a message
//! naming the list) or held for review ([`Action::Hold`]). A [`Screen`] is the compiled,
//! immutable form of all lists: built once when the lists change ([`Screen::new`]), shared in
//! an `Arc`, and asked about every article and comment written ([`Screen::check`] for plain
//! text, [`Screen::check_html`] for article content). Its [`Verdict`] has at most one
//! [`Hit`] per list that matched.
//!
//! # Matching disguised words
//!
//! Words and texts are compared in a *normalised* form ([`normalise_word`]), so that a writer
//! cannot slip a word past the lists by disguising it:
//!
//! - Unicode NFKC: full-width "ＷＥＣＨＡＴ", circled and other compatibility forms become
//!   their plain letters;
//! - lower case (`char::to_lowercase`): `"WeChat"` is `"wechat"`;
//! - every character that is neither a letter nor a digit (`char::is_alphanumeric` false:
//!   punctuation, symbols, whitespace, emoji) is dropped, in the text *and* in the words, so
//!   `"微 信"`, `"微.信"` and `"w-e c_h*a t"` all contain "微信" / "wechat". In HTML, markup
//!   between characters is dropped the same way: `we<b>chat</b>` contains "wechat".
//!
//! The known trade-off of dropping separators: "we chat" in English prose matches "wechat",
//! as Discourse's watched words do for disguised words. That is wanted; but to keep "class"
//! from matching "ass", a word made only of ASCII letters and digits (after normalisation)
//! matches only on a word boundary: the kept character just before its first character, and
//! the one just after its last, must each be absent, not an ASCII letter or digit, or
//! separated from the match in the original text by at least one dropped character (or tag).
//! So "ass." and "kick ass" match "ass", "class" and "assess" do not, and "we chat" matches
//! "wechat" while "we chatted" does not. Only ASCII letters and digits count as touching:
//! "中ass" and "éass" match "ass". Words with any other character (Chinese words, "qq群")
//! match anywhere: Chinese is written without spaces.
//!
//! # Data flow and cost
//!
//! `check(text)` makes one pass over the text that builds the normalised stream (a UTF-8
//! string of the kept characters) and, for each kept character, the byte range of the
//! original text it came from and whether dropped characters preceded it. Then one
//! Aho–Corasick automaton, built over the distinct normalised words of *all* lists (each
//! remembering the lists and original words it stands for), scans the stream once. The
//! automaton reports overlapping matches (`MatchKind::Standard`), so a word of one list
//! never hides an overlapping word of another: every list with a match is reported. The
//! cost is linear in the text, whatever the number of words (about 2 ms for 100 kB of
//! article HTML against 10 000 words, `benches/screen.rs`); the scan stops as soon as every
//! list has a hit. The stream is the normalised characters plus a 12-byte slot each: about
//! 5 bytes per byte of Chinese text, 13 per byte of English, freed when the check returns.
//!
//! A list's hit is its first match: the one that ends first in the normalised stream (of
//! two ending together, the longer). Its byte range covers exactly the disguised word in the
//! original text ("微 信" and its space; in HTML, the markup between its characters, and
//! entities such as `&amp;` whole).
//!
//! Limits: NFKC is applied to each run of a character and the combining marks after it
//! (enough for composed/decomposed accents and all compatibility forms; compositions of two
//! starters, such as conjoining Hangul jamo, are not made). Byte offsets are kept in 32
//! bits: texts are at most 512 KiB (article content); past 4 GiB, ranges would saturate. In
//! HTML, only `&amp; &lt; &gt; &quot; &apos; &nbsp;` and numeric references are decoded;
//! other named references (`&mdash;`, `&eacute;`) count as dropped characters. The text of
//! `<script>`/`<style>` elements is screened like any text (sanitised content has none).

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, MatchKind};
use serde::{Deserialize, Serialize};
use unicode_normalization::{
    char::canonical_combining_class, is_nfkc_quick, IsNormalized, UnicodeNormalization,
};

/// What happens to a write whose text contains a word of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The write is refused, with a message naming the list.
    Refuse,
    /// The write is accepted but held for a moderator's review.
    Hold,
}

impl Action {
    /// The action's name as stored and serialised: `"refuse"` or `"hold"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Refuse => "refuse",
            Self::Hold => "hold",
        }
    }

    /// The action named `name` ([`Action::as_str`]), if any.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "refuse" => Some(Self::Refuse),
            "hold" => Some(Self::Hold),
            _ => None,
        }
    }
}

/// A moderator's word list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordList {
    /// The list's name, shown in a refusal ("contact details", "广告").
    pub name: String,
    /// What a match does.
    pub action: Action,
    /// The words as the moderator wrote them; compared in their [normalised](normalise_word)
    /// form.
    pub words: Vec<String>,
}

/// A list's match in a screened text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hit {
    /// The list's name.
    pub list: String,
    /// The list's action.
    pub action: Action,
    /// The word matched, as the moderator wrote it.
    pub word: String,
    /// Start of the match: a byte offset in the original text (or HTML).
    pub start: usize,
    /// End (exclusive) of the match: `&text[start..end]` is the word as disguised.
    pub end: usize,
}

/// The outcome of screening a text: a hit for each list that matched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// At most one hit per list (its first match), ordered by list name.
    pub hits: Vec<Hit>,
}

impl Verdict {
    /// The first hit (by list name) of a list that refuses the write, if any.
    #[must_use]
    pub fn refused(&self) -> Option<&Hit> {
        self.hits.iter().find(|hit| hit.action == Action::Refuse)
    }

    /// The first hit (by list name) of a list that holds the write for review, if any.
    #[must_use]
    pub fn held(&self) -> Option<&Hit> {
        self.hits.iter().find(|hit| hit.action == Action::Hold)
    }

    /// Whether no list matched.
    #[must_use]
    pub const fn is_clean(&self) -> bool {
        self.hits.is_empty()
    }
}

/// The normalised form of a word: NFKC, lower case, letters and digits only.
///
/// Words are compared in this form, and it is what to show moderators and to deduplicate
/// by: "Ｗe-Chat" is "wechat", "微 信" is "微信". A word whose form is empty ("!!!") matches
/// nothing and is ignored by [`Screen::new`].
#[must_use]
pub fn normalise_word(word: &str) -> String {
    let mut stream = Stream::with_capacity(word.len());
    for (at, c) in word.char_indices() {
        stream.push(c, at, at + c.len_utf8());
    }
    stream.finish();
    stream.norm
}

/// A list as compiled: what a hit reports.
#[derive(Debug, Clone)]
struct ListInfo {
    name: String,
    action: Action,
}

/// One distinct normalised word of the automaton.
#[derive(Debug, Clone)]
struct Pattern {
    /// Its length in characters (to find its first character from its last).
    chars: usize,
    /// Made only of ASCII letters and digits: matches on word boundaries only.
    bounded: bool,
    /// The lists it is a word of, each with the first of its words that normalise to it.
    entries: Vec<(usize, String)>,
}

/// All word lists, compiled into one automaton. Immutable; cheap to clone (the automaton is
/// shared) and to share in an `Arc`.
#[derive(Debug, Clone)]
pub struct Screen {
    /// `None` when there are no words (or the automaton could not be built).
    automaton: Option<AhoCorasick>,
    /// Indexed by pattern id.
    patterns: Vec<Pattern>,
    lists: Vec<ListInfo>,
    /// Lists with at least one word: the scan stops once all of them have a hit.
    active_lists: usize,
    words: usize,
    build_error: Option<String>,
}

/// Why a [`Screen`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError(String);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "word lists could not be compiled: {}", self.0)
    }
}

impl std::error::Error for BuildError {}

impl Screen {
    /// The screen of `lists`. Words that normalise to nothing are ignored; duplicates (also
    /// across lists) are fine. Should the automaton not be built (only past hundreds of
    /// millions of bytes of words), the screen matches nothing and says why in
    /// [`Screen::build_error`]; [`Screen::try_new`] returns the error instead.
    #[must_use]
    pub fn new(lists: &[WordList]) -> Self {
        Self::try_new(lists).unwrap_or_else(|err| {
            let mut screen = Self::empty();
            screen.build_error = Some(err.0);
            screen
        })
    }

    /// The screen of `lists`, or why its automaton could not be built.
    ///
    /// # Errors
    ///
    /// When the automaton exceeds the `aho-corasick` crate's limits.
    pub fn try_new(lists: &[WordList]) -> Result<Self, BuildError> {
        let mut by_form: HashMap<String, usize> = HashMap::new();
        let mut forms: Vec<String> = Vec::new();
        let mut patterns: Vec<Pattern> = Vec::new();
        let mut words = 0;
        let mut active_lists = 0;
        for (list, word_list) in lists.iter().enumerate() {
            let mut active = false;
            for word in &word_list.words {
                let form = normalise_word(word);
                if form.is_empty() {
                    continue;
                }
                let id = *by_form.entry(form).or_insert_with_key(|form| {
                    forms.push(form.clone());
                    patterns.push(Pattern {
                        chars: form.chars().count(),
                        bounded: form.bytes().all(|b| b.is_ascii_alphanumeric()),
                        entries: Vec::new(),
                    });
                    patterns.len() - 1
                });
                let entries = &mut patterns[id].entries;
                if !entries.iter().any(|(l, _)| *l == list) {
                    entries.push((list, word.clone()));
                    words += 1;
                    active = true;
                }
            }
            if active {
                active_lists += 1;
            }
        }
        let automaton = if forms.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::Standard)
                    .build(&forms)
                    .map_err(|err| BuildError(err.to_string()))?,
            )
        };
        Ok(Self {
            automaton,
            patterns,
            lists: lists
                .iter()
                .map(|list| ListInfo {
                    name: list.name.clone(),
                    action: list.action,
                })
                .collect(),
            active_lists,
            words,
            build_error: None,
        })
    }

    /// The screen of no lists: every text is clean.
    #[must_use]
    pub const fn empty() -> Self {
        Self {
            automaton: None,
            patterns: Vec::new(),
            lists: Vec::new(),
            active_lists: 0,
            words: 0,
            build_error: None,
        }
    }

    /// Words screened for: those with a non-empty normalised form, counted once per list
    /// whatever their duplicates in it (`"WeChat"` and `"wechat"` in one list count once).
    #[must_use]
    pub const fn word_count(&self) -> usize {
        self.words
    }

    /// Why [`Screen::new`] gave a screen that matches nothing although it had words.
    #[must_use]
    pub fn build_error(&self) -> Option<&str> {
        self.build_error.as_deref()
    }

    /// Screens plain text (a comment, a title): one pass over it.
    #[must_use]
    pub fn check(&self, text: &str) -> Verdict {
        if self.automaton.is_none() {
            return Verdict::default();
        }
        let mut stream = Stream::with_capacity(text.len());
        for (at, c) in text.char_indices() {
            stream.push(c, at, at + c.len_utf8());
        }
        stream.finish();
        self.scan(&stream)
    }

    /// Screens HTML (article content) in one pass: tags (`<...>`, comments) are dropped like
    /// punctuation and never matched, attribute values included; `&amp; &lt; &gt; &quot;
    /// &apos; &nbsp;` and numeric references (`&#39;`, `&#x5FAE;`) are decoded. Hit ranges
    /// are byte offsets in the HTML.
    #[must_use]
    pub fn check_html(&self, html: &str) -> Verdict {
        if self.automaton.is_none() {
            return Verdict::default();
        }
        let mut stream = Stream::with_capacity(html.len());
        let bytes = html.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            match bytes[at] {
                b'<' => {
                    if let Some(end) = tag_end(bytes, at) {
                        stream.separate();
                        at = end;
                        continue;
                    }
                }
                b'&' => {
                    if let Some((decoded, end)) = entity(bytes, at) {
                        match decoded {
                            Some(c) => stream.push(c, at, end),
                            None => stream.separate(),
                        }
                        at = end;
                        continue;
                    }
                }
                byte if byte.is_ascii() => {
                    stream.push(char::from(byte), at, at + 1);
                    at += 1;
                    continue;
                }
                _ => {}
            }
            let Some(c) = html[at..].chars().next() else {
                break;
            };
            stream.push(c, at, at + c.len_utf8());
            at += c.len_utf8();
        }
        stream.finish();
        self.scan(&stream)
    }

    /// Runs the automaton over a normalised stream: the first match of each list.
    fn scan(&self, stream: &Stream) -> Verdict {
        let Some(automaton) = &self.automaton else {
            return Verdict::default();
        };
        let norm = stream.norm.as_bytes();
        let mut found: Vec<Option<ListMatch>> = vec![None; self.lists.len()];
        let mut missing = self.active_lists;
        let mut stop_after: Option<usize> = None;
        let mut cursor = Cursor::default();
        for m in automaton.find_overlapping_iter(&stream.norm) {
            if stop_after.is_some_and(|end| m.end() > end) {
                break;
            }
            let pattern = &self.patterns[m.pattern().as_usize()];
            let last = cursor.last_char_before(norm, m.end());
            let first = last + 1 - pattern.chars;
            if pattern.bounded && !stream.on_boundary(first, last, m.start(), m.end()) {
                continue;
            }
            for (entry, (list, _)) in pattern.entries.iter().enumerate() {
                let this = ListMatch {
                    first,
                    last,
                    pattern: m.pattern().as_usize(),
                    entry,
                };
                let found = &mut found[*list];
                match found {
                    None => {
                        *found = Some(this);
                        missing -= 1;
                    }
                    // Two matches ending together: the longer one is the list's first.
                    Some(earlier) if earlier.last == last && first < earlier.first => {
                        *found = Some(this);
                    }
                    Some(_) => {}
                }
            }
            if missing == 0 && stop_after.is_none() {
                stop_after = Some(m.end());
            }
        }
        let mut hits: Vec<Hit> = found
            .iter()
            .enumerate()
            .filter_map(|(list, found)| {
                let found = (*found)?;
                let info = &self.lists[list];
                Some(Hit {
                    list: info.name.clone(),
                    action: info.action,
                    word: self.patterns[found.pattern].entries[found.entry].1.clone(),
                    start: stream.slots[found.first].start as usize,
                    end: stream.slots[found.last].end as usize,
                })
            })
            .collect();
        // Stable: lists of one name stay in their given order.
        hits.sort_by(|a, b| a.list.cmp(&b.list));
        Verdict { hits }
    }
}

/// A list's first match so far: characters `first..=last` of the stream, and its word.
#[derive(Debug, Clone, Copy)]
struct ListMatch {
    first: usize,
    last: usize,
    pattern: usize,
    /// In the pattern's entries.
    entry: usize,
}

/// Where a kept character of the normalised stream came from.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Byte range in the original text (of the whole run or entity it came from).
    start: u32,
    end: u32,
    /// Dropped characters (or markup) came between it and the kept character before it.
    separated: bool,
}

/// The normalised stream of a text, built one character at a time.
#[derive(Debug)]
struct Stream {
    /// The kept characters, normalised.
    norm: String,
    /// One per character of `norm`.
    slots: Vec<Slot>,
    /// Something was dropped since the last kept character.
    separated: bool,
    /// The run being gathered: a character (`pending`) and the combining marks after it
    /// (`marks`), from `run_start` to `run_end` in the original text.
    pending: Option<char>,
    marks: Vec<char>,
    run_start: usize,
    run_end: usize,
}

/// A byte offset as stored in a [`Slot`] (texts are far below 4 GiB; past it, saturates).
fn offset(at: usize) -> u32 {
    u32::try_from(at).unwrap_or(u32::MAX)
}

/// CJK unified ideographs: never combining marks, their own NFKC form, letters.
fn is_cjk_unified(c: char) -> bool {
    ('\u{4E00}'..='\u{9FFF}').contains(&c)
}

impl Stream {
    fn with_capacity(bytes: usize) -> Self {
        Self {
            norm: String::with_capacity(bytes),
            slots: Vec::with_capacity(bytes / 3),
            separated: false,
            pending: None,
            marks: Vec::new(),
            run_start: 0,
            run_end: 0,
        }
    }

    /// Adds the character `c`, found at `start..end` of the original text.
    #[inline]
    fn push(&mut self, c: char, start: usize, end: usize) {
        if self.pending.is_some()
            && !c.is_ascii()
            && !is_cjk_unified(c)
            && canonical_combining_class(c) != 0
        {
            // A combining mark: normalised with the character it follows.
            self.marks.push(c);
            self.run_end = end;
            return;
        }
        self.flush();
        self.pending = Some(c);
        self.run_start = start;
        self.run_end = end;
    }

    /// Markup (or a dropped entity) between characters: a separator, never matched.
    fn separate(&mut self) {
        self.flush();
        self.separated = true;
    }

    fn finish(&mut self) {
        self.flush();
    }

    /// Normalises the gathered run into kept characters.
    #[inline]
    fn flush(&mut self) {
        let Some(c) = self.pending.take() else {
            return;
        };
        let (start, end) = (offset(self.run_start), offset(self.run_end));
        if self.marks.is_empty() {
            // Fast paths: a character alone that is its own NFKC form.
            if c.is_ascii() {
                if c.is_ascii_alphanumeric() {
                    self.keep(c.to_ascii_lowercase(), start, end);
                } else {
                    self.separated = true;
                }
                return;
            }
            if is_cjk_unified(c) {
                self.keep(c, start, end);
                return;
            }
            if is_nfkc_quick(std::iter::once(c)) == IsNormalized::Yes {
                self.fold(c, start, end);
                return;
            }
        }
        let mut marks = std::mem::take(&mut self.marks);
        for normal in std::iter::once(c).chain(marks.iter().copied()).nfkc() {
            self.fold(normal, start, end);
        }
        marks.clear();
        self.marks = marks;
    }

    /// Keeps the lower case of a normalised character if it is a letter or digit.
    fn fold(&mut self, c: char, start: u32, end: u32) {
        for lower in c.to_lowercase() {
            if lower.is_alphanumeric() {
                self.keep(lower, start, end);
            } else {
                self.separated = true;
            }
        }
    }

    #[inline]
    fn keep(&mut self, c: char, start: u32, end: u32) {
        self.norm.push(c);
        self.slots.push(Slot {
            start,
            end,
            separated: self.separated,
        });
        self.separated = false;
    }

    /// Whether the match of characters `first..=last` (bytes `start..end` of the stream) of
    /// an ASCII word is on a word boundary: no ASCII letter or digit touches it in the
    /// original text.
    fn on_boundary(&self, first: usize, last: usize, start: usize, end: usize) -> bool {
        let norm = self.norm.as_bytes();
        // A byte below 0x80 is a whole character in UTF-8.
        let touches_before =
            start > 0 && norm[start - 1].is_ascii_alphanumeric() && !self.slots[first].separated;
        let touches_after =
            norm.get(end).is_some_and(u8::is_ascii_alphanumeric) && !self.slots[last + 1].separated;
        !touches_before && !touches_after
    }
}

/// Maps match ends (bytes of the stream, in increasing order) to character indexes.
#[derive(Debug, Default)]
struct Cursor {
    /// Characters of the stream before `bytes`.
    chars: usize,
    bytes: usize,
}

impl Cursor {
    /// The index of the character ending at byte `end` (`end > 0`, on a boundary, never
    /// before the previous call's).
    fn last_char_before(&mut self, norm: &[u8], end: usize) -> usize {
        while self.bytes < end {
            self.bytes += match norm[self.bytes] {
                0x00..=0x7F => 1,
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            self.chars += 1;
        }
        self.chars - 1
    }
}

/// The end of the tag or comment starting at `html[at] == b'<'`, or `None` when the `<` is
/// text ("a < b"). A tag runs to its `>`, skipping quoted attribute values; one left open
/// runs to the end, as a browser drops it.
fn tag_end(html: &[u8], at: usize) -> Option<usize> {
    let rest = &html[at + 1..];
    if rest.starts_with(b"!--") {
        let body = at + 4;
        return Some(
            html[body..]
                .windows(3)
                .position(|w| w == b"-->")
                .map_or(html.len(), |p| body + p + 3),
        );
    }
    let next = *rest.first()?;
    if !(next.is_ascii_alphabetic() || matches!(next, b'/' | b'!' | b'?')) {
        return None;
    }
    let mut i = at + 1;
    let mut after_equals = false;
    while i < html.len() {
        match html[i] {
            b'>' => return Some(i + 1),
            b'=' => after_equals = true,
            quote @ (b'"' | b'\'') if after_equals => {
                match html[i + 1..].iter().position(|&b| b == quote) {
                    Some(p) => i += p + 1,
                    None => return Some(html.len()),
                }
                after_equals = false;
            }
            b if b.is_ascii_whitespace() => {}
            _ => after_equals = false,
        }
        i += 1;
    }
    Some(html.len())
}

/// The character reference starting at `html[at] == b'&'` and where it ends: `Some(c)` for
/// one decoded, `None` for another named reference (dropped like punctuation); or `None`
/// overall when the `&` starts no reference (it is then text).
fn entity(html: &[u8], at: usize) -> Option<(Option<char>, usize)> {
    let rest = &html[at + 1..];
    if let Some(numeric) = rest.strip_prefix(b"#") {
        let (digits, radix, skip) = match numeric.first() {
            Some(b'x' | b'X') => (&numeric[1..], 16, 3),
            _ => (numeric, 10, 2),
        };
        let len = digits
            .iter()
            .take(8)
            .take_while(|b| b.is_ascii_hexdigit() && (radix == 16 || b.is_ascii_digit()))
            .count();
        if len == 0 || digits.get(len) != Some(&b';') {
            return None;
        }
        let value = digits[..len].iter().fold(0u32, |v, b| {
            v * radix + char::from(*b).to_digit(radix).unwrap_or(0)
        });
        let c = char::from_u32(value)
            .filter(|c| *c != '\0')
            .unwrap_or('\u{FFFD}');
        return Some((Some(c), at + skip + len + 1));
    }
    let len = rest
        .iter()
        .take(32)
        .take_while(|b| b.is_ascii_alphanumeric())
        .count();
    if len == 0 || rest.get(len) != Some(&b';') || !rest[0].is_ascii_alphabetic() {
        return None;
    }
    let c = match &rest[..len] {
        b"amp" => Some('&'),
        b"lt" => Some('<'),
        b"gt" => Some('>'),
        b"quot" => Some('"'),
        b"apos" => Some('\''),
        b"nbsp" => Some('\u{A0}'),
        _ => None,
    };
    Some((c, at + 1 + len + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(name: &str, action: Action, words: &[&str]) -> WordList {
        WordList {
            name: name.to_owned(),
            action,
            words: words.iter().map(|w| (*w).to_owned()).collect(),
        }
    }

    fn contact() -> Screen {
        Screen::new(&[
            list("contact", Action::Refuse, &["微信", "WeChat", "qq"]),
            list("spam", Action::Hold, &["代开发票", "casino", "ass"]),
        ])
    }

    /// The words hit in `text`, as `(list, word, disguised text)`.
    fn hits(screen: &Screen, text: &str) -> Vec<(String, String, String)> {
        screen
            .check(text)
            .hits
            .into_iter()
            .map(|hit| (hit.list, hit.word, text[hit.start..hit.end].to_owned()))
            .collect()
    }

    fn one(list: &str, word: &str, seen: &str) -> Vec<(String, String, String)> {
        vec![(list.to_owned(), word.to_owned(), seen.to_owned())]
    }

    #[test]
    fn exact_chinese_and_english_words_match() {
        let screen = contact();
        assert_eq!(hits(&screen, "加微信"), one("contact", "微信", "微信"));
        assert_eq!(
            hits(&screen, "add me on wechat"),
            one("contact", "WeChat", "wechat")
        );
        assert_eq!(
            hits(&screen, "代开发票"),
            one("spam", "代开发票", "代开发票")
        );
        assert!(screen.check("微博 and weibo are fine").is_clean());
    }

    #[test]
    fn width_and_case_do_not_matter() {
        let screen = contact();
        assert_eq!(
            hits(&screen, "ＷＥＣＨＡＴ"),
            one("contact", "WeChat", "ＷＥＣＨＡＴ")
        );
        assert_eq!(hits(&screen, "WeChat!"), one("contact", "WeChat", "WeChat"));
        assert_eq!(hits(&screen, "ＱＱ群"), one("contact", "qq", "ＱＱ"));
    }

    #[test]
    fn separators_between_characters_are_skipped() {
        let screen = contact();
        assert_eq!(
            hits(&screen, "加我微 信吧"),
            one("contact", "微信", "微 信")
        );
        assert_eq!(
            hits(&screen, "加我微.信吧"),
            one("contact", "微信", "微.信")
        );
        assert_eq!(
            hits(&screen, "微　，信"),
            one("contact", "微信", "微　，信")
        );
        assert_eq!(
            hits(&screen, "my w-e c_h*a t is x"),
            one("contact", "WeChat", "w-e c_h*a t")
        );
        // Separators in the word itself are dropped too.
        let screen = Screen::new(&[list("l", Action::Hold, &["we-chat"])]);
        assert_eq!(hits(&screen, "wechat"), one("l", "we-chat", "wechat"));
    }

    #[test]
    fn compatibility_forms_are_folded() {
        let screen = Screen::new(&[
            list("a", Action::Refuse, &["wechat"]),
            list("b", Action::Hold, &["秘密", "fish", "café"]),
        ]);
        assert_eq!(
            hits(&screen, "ｗｅｃｈａｔ"),
            one("a", "wechat", "ｗｅｃｈａｔ")
        );
        // ㊙ (circled ideograph) is 秘 under NFKC.
        assert_eq!(hits(&screen, "这是㊙密"), one("b", "秘密", "㊙密"));
        // The ligature ﬁ is "fi": the range covers the whole ligature.
        assert_eq!(hits(&screen, "big ﬁsh"), one("b", "fish", "ﬁsh"));
        // A decomposed accent composes: the range covers the combining mark.
        assert_eq!(
            hits(&screen, "un cafe\u{301}!"),
            one("b", "café", "cafe\u{301}")
        );
        // And "cafe" alone is not "café".
        assert!(screen.check("un cafe!").is_clean());
    }

    #[test]
    fn ascii_words_match_on_word_boundaries_only() {
        let screen = contact();
        assert!(screen.check("a class of its own").is_clean());
        assert!(screen.check("assess it").is_clean());
        assert!(screen.check("bass").is_clean());
        assert_eq!(hits(&screen, "what an ass."), one("spam", "ass", "ass"));
        assert_eq!(hits(&screen, "ASS"), one("spam", "ass", "ASS"));
        assert_eq!(hits(&screen, "kick-ass"), one("spam", "ass", "ass"));
        // Boundaries are in the original text: separated letters still join into a word...
        assert_eq!(
            hits(&screen, "we chat"),
            one("contact", "WeChat", "we chat")
        );
        // ...but a word running on without a separator is another word.
        assert!(screen.check("we chatted").is_clean());
        assert!(screen.check("wechat2").is_clean());
        assert!(screen.check("awechat").is_clean());
        // A Chinese character next to an ASCII word is a boundary.
        assert_eq!(
            hits(&screen, "加wechat号"),
            one("contact", "WeChat", "wechat")
        );
    }

    #[test]
    fn chinese_words_match_anywhere() {
        let screen = contact();
        assert_eq!(
            hits(&screen, "有需要的朋友可以加微信联系我。"),
            one("contact", "微信", "微信")
        );
        assert_eq!(hits(&screen, "abc微信def"), one("contact", "微信", "微信"));
    }

    #[test]
    fn refuse_and_hold_lists_are_both_reported() {
        let screen = contact();
        let verdict = screen.check("代开发票，加微信");
        assert_eq!(verdict.hits.len(), 2);
        assert_eq!(verdict.refused().map(|h| h.word.as_str()), Some("微信"));
        assert_eq!(verdict.held().map(|h| h.word.as_str()), Some("代开发票"));
        assert!(!verdict.is_clean());
        // Ordered by list name.
        assert_eq!(verdict.hits[0].list, "contact");
        assert_eq!(verdict.hits[1].list, "spam");
        let held_only = screen.check("casino");
        assert!(held_only.refused().is_none());
        assert_eq!(held_only.held().map(|h| h.list.as_str()), Some("spam"));
    }

    #[test]
    fn overlapping_words_of_two_lists_are_both_found() {
        // The hold word ends first and overlaps the refuse word: both are reported.
        let screen = Screen::new(&[
            list("z-hold", Action::Hold, &["微信"]),
            list("a-refuse", Action::Refuse, &["信号"]),
        ]);
        let verdict = screen.check("微信号");
        assert_eq!(verdict.hits.len(), 2);
        assert_eq!(verdict.refused().map(|h| (h.start, h.end)), Some((3, 9)));
        assert_eq!(verdict.held().map(|h| (h.start, h.end)), Some((0, 6)));
        // One word inside another of another list.
        let screen = Screen::new(&[
            list("hold", Action::Hold, &["微信号码"]),
            list("refuse", Action::Refuse, &["信号"]),
        ]);
        let verdict = screen.check("微信号码");
        assert_eq!(verdict.hits.len(), 2);
        assert!(verdict.refused().is_some());
        // The same word in two lists.
        let screen = Screen::new(&[
            list("hold", Action::Hold, &["casino"]),
            list("refuse", Action::Refuse, &["Casino"]),
        ]);
        let verdict = screen.check("CASINO");
        assert_eq!(verdict.hits.len(), 2);
        assert_eq!(verdict.refused().map(|h| h.word.as_str()), Some("Casino"));
        assert_eq!(screen.word_count(), 2);
    }

    #[test]
    fn a_list_reports_its_first_match() {
        let screen = Screen::new(&[list("l", Action::Hold, &["信号", "微信"])]);
        let text = "好的，微信和信号";
        let verdict = screen.check(text);
        assert_eq!(verdict.hits.len(), 1);
        assert_eq!(verdict.hits[0].word, "微信");
        assert_eq!(&text[verdict.hits[0].start..verdict.hits[0].end], "微信");
        // Two matches ending together: the longer one.
        let screen = Screen::new(&[list("l", Action::Hold, &["信号", "微信号"])]);
        assert_eq!(screen.check("微信号").hits[0].word, "微信号");
    }

    #[test]
    fn empty_lists_texts_and_words() {
        assert!(Screen::empty().check("微信 wechat").is_clean());
        assert_eq!(Screen::empty().word_count(), 0);
        let screen = Screen::new(&[
            list("empty", Action::Refuse, &[]),
            list("blank", Action::Refuse, &["", "  ", "!!!", "——"]),
        ]);
        assert_eq!(screen.word_count(), 0);
        assert!(screen.check("!!! —— anything").is_clean());
        let screen = contact();
        assert_eq!(screen.word_count(), 6);
        assert!(screen.check("").is_clean());
        assert!(screen.check_html("").is_clean());
        assert!(screen.check(" ,.!? ").is_clean());
        assert!(screen.build_error().is_none());
        // Duplicates within a list count once.
        let screen = Screen::new(&[list(
            "l",
            Action::Hold,
            &["WeChat", "wechat", "ｗｅｃｈａｔ"],
        )]);
        assert_eq!(screen.word_count(), 1);
        assert_eq!(screen.check("wechat").hits[0].word, "WeChat");
    }

    #[test]
    fn byte_ranges_cover_the_disguised_word() {
        let screen = contact();
        let text = "加我微 信吧";
        let verdict = screen.check(text);
        let hit = &verdict.hits[0];
        assert_eq!((hit.start, hit.end), (6, 13));
        assert_eq!(&text[hit.start..hit.end], "微 信");
        let text = "Hi, W.e.C.h.a.t!";
        let hit = &screen.check(text).hits[0];
        assert_eq!(&text[hit.start..hit.end], "W.e.C.h.a.t");
    }

    #[test]
    fn normalised_form_of_words() {
        assert_eq!(normalise_word("Ｗe-Chat"), "wechat");
        assert_eq!(normalise_word("微 信"), "微信");
        assert_eq!(normalise_word("㊙"), "秘");
        assert_eq!(normalise_word("Café"), "café");
        assert_eq!(normalise_word("Cafe\u{301}"), "café");
        assert_eq!(normalise_word("①②"), "12");
        assert_eq!(normalise_word("!! ??"), "");
    }

    #[test]
    fn html_tags_are_skipped_and_entities_decoded() {
        let screen = contact();
        // Markup between characters is skipped like punctuation.
        let html = "<p>add me: we<b>chat</b></p>";
        let hit = &screen.check_html(html).hits[0];
        assert_eq!(hit.word, "WeChat");
        assert_eq!(&html[hit.start..hit.end], "we<b>chat");
        // Attribute values and tag names are never matched.
        assert!(screen
            .check_html(r#"<a href="wechat" title='微信 > qq'>link</a><qq>"#)
            .is_clean());
        assert!(screen.check_html("<!-- 微信 wechat -->ok").is_clean());
        assert!(screen.check_html("<img alt=wechat>").is_clean());
        // Entities are decoded; a hit's range covers them whole.
        let html = "<p>&#x5FAE;&#20449;</p>";
        let hit = &screen.check_html(html).hits[0];
        assert_eq!(hit.word, "微信");
        assert_eq!(&html[hit.start..hit.end], "&#x5FAE;&#20449;");
        let html = "we&nbsp;chat &amp; more";
        assert_eq!(screen.check_html(html).hits[0].word, "WeChat");
        let html = "w&#101;chat";
        let hit = &screen.check_html(html).hits[0];
        assert_eq!(&html[hit.start..hit.end], "w&#101;chat");
        // &lt; is a character (a separator), not a tag.
        assert_eq!(screen.check_html("&lt;qq&gt;").hits[0].word, "qq");
        assert_eq!(screen.check_html("1 < 2 qq").hits[0].word, "qq");
        // Other named references separate like punctuation.
        assert_eq!(screen.check_html("微&mdash;信").hits[0].word, "微信");
        // Plain check does not know markup: tag text is text there.
        assert!(!screen.check(r#"<a href="wechat">"#).is_clean());
        // An unterminated tag runs to the end.
        assert!(screen.check_html("ok <a title=\"微信").is_clean());
    }

    #[test]
    fn html_word_boundaries_use_markup_as_separator() {
        let screen = contact();
        assert!(screen.check_html("<p>class</p>").is_clean());
        assert_eq!(screen.check_html("<i>cl</i>ass").hits[0].word, "ass");
        assert_eq!(screen.check_html("<p>ass</p><p>x</p>").hits[0].word, "ass");
        assert!(screen.check_html("<p>class&#97;</p>").is_clean());
    }

    #[test]
    fn actions_serialise_in_lower_case() {
        assert_eq!(
            serde_json::to_string(&Action::Refuse).unwrap(),
            "\"refuse\""
        );
        assert_eq!(
            serde_json::from_str::<Action>("\"hold\"").unwrap(),
            Action::Hold
        );
        for action in [Action::Refuse, Action::Hold] {
            assert_eq!(Action::parse(action.as_str()), Some(action));
        }
        assert_eq!(Action::parse("Refuse"), None);
        let list: WordList =
            serde_json::from_str(r#"{"name":"ads","action":"refuse","words":["微信"]}"#).unwrap();
        assert_eq!(list.action, Action::Refuse);
    }

    #[test]
    fn screen_is_shareable() {
        fn shareable<T: Send + Sync + 'static>() {}
        shareable::<Screen>();
        let screen = std::sync::Arc::new(contact());
        let other = std::sync::Arc::clone(&screen);
        let found = std::thread::spawn(move || other.check("微信").is_clean())
            .join()
            .unwrap();
        assert!(!found);
    }

    /// A small deterministic generator (64-bit LCG).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next()).unwrap() % n
        }

        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }
    }

    /// The quadratic reference: every word of every list tried at every position of the
    /// normalised stream.
    fn naive(lists: &[WordList], text: &str) -> Vec<(String, String, usize, usize)> {
        let mut stream = Stream::with_capacity(text.len());
        for (at, c) in text.char_indices() {
            stream.push(c, at, at + c.len_utf8());
        }
        stream.finish();
        let chars: Vec<char> = stream.norm.chars().collect();
        let mut out = Vec::new();
        for list in lists {
            // (last, first, word)
            let mut best: Option<(usize, usize, &str)> = None;
            for word in &list.words {
                let form: Vec<char> = normalise_word(word).chars().collect();
                if form.is_empty() || form.len() > chars.len() {
                    continue;
                }
                let bounded = form.iter().all(char::is_ascii_alphanumeric);
                for first in 0..=chars.len() - form.len() {
                    let last = first + form.len() - 1;
                    if chars[first..=last] != form[..] {
                        continue;
                    }
                    if bounded {
                        let before = first > 0
                            && chars[first - 1].is_ascii_alphanumeric()
                            && !stream.slots[first].separated;
                        let after = last + 1 < chars.len()
                            && chars[last + 1].is_ascii_alphanumeric()
                            && !stream.slots[last + 1].separated;
                        if before || after {
                            continue;
                        }
                    }
                    let better = match best {
                        None => true,
                        Some((l, f, _)) => last < l || (last == l && first < f),
                    };
                    if better {
                        best = Some((last, first, word));
                    }
                }
            }
            if let Some((last, first, word)) = best {
                out.push((
                    list.name.clone(),
                    word.to_owned(),
                    stream.slots[first].start as usize,
                    stream.slots[last].end as usize,
                ));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn escape_html(text: &str) -> String {
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    }

    #[test]
    fn random_markup_never_panics_and_ranges_slice_the_html() {
        const PIECES: &[&str] = &[
            "<", ">", "&", "#", "x", "X", ";", "\"", "'", "=", "!", "-", "/", " ", "a", "b", "amp",
            "lt", "nbsp", "1", "9", "F", "微", "信", "\u{301}", "<!--", "-->", "&#", "&#x",
        ];
        let screen = Screen::new(&[
            list("a", Action::Refuse, &["ab", "微信", "b1"]),
            list("b", Action::Hold, &["a", "信"]),
        ]);
        let mut rng = Lcg(0x00C0_FFEE);
        let mut hits = 0;
        for _ in 0..5000 {
            let html: String = (0..rng.below(30)).map(|_| rng.pick(PIECES)).collect();
            for verdict in [screen.check_html(&html), screen.check(&html)] {
                for hit in &verdict.hits {
                    assert!(
                        hit.start < hit.end && hit.end <= html.len(),
                        "{html:?} {hit:?}"
                    );
                    assert!(html.is_char_boundary(hit.start) && html.is_char_boundary(hit.end));
                    hits += 1;
                }
            }
        }
        assert!(hits > 1000, "{hits}");
    }

    #[test]
    fn agrees_with_a_naive_matcher_on_random_texts() {
        const TEXT: &[&str] = &[
            "a", "b", "c", "A", "Ｂ", "微", "信", "号", " ", "-", ".", "。", "<", "&", "\u{301}",
            "x", "ab", "微信",
        ];
        const WORD: &[&str] = &["a", "b", "c", "B", "微", "信", "号", "ｃ", "-", "á"];
        let mut rng = Lcg(0x5EED);
        let mut matched = 0;
        for _ in 0..3000 {
            let lists: Vec<WordList> = (0..=rng.below(4))
                .map(|l| WordList {
                    name: ["z", "m", "a", "q"][l].to_owned(),
                    action: if rng.below(2) == 0 {
                        Action::Refuse
                    } else {
                        Action::Hold
                    },
                    words: (0..rng.below(5))
                        .map(|_| (0..=rng.below(4)).map(|_| rng.pick(WORD)).collect())
                        .collect(),
                })
                .collect();
            let text: String = (0..rng.below(24)).map(|_| rng.pick(TEXT)).collect();
            let screen = Screen::new(&lists);
            let verdict = screen.check(&text);
            let got: Vec<(String, String, usize, usize)> = verdict
                .hits
                .iter()
                .map(|h| (h.list.clone(), h.word.clone(), h.start, h.end))
                .collect();
            assert_eq!(got, naive(&lists, &text), "lists {lists:?}, text {text:?}");
            for hit in &verdict.hits {
                // The range is the word as disguised: it normalises to the word.
                assert_eq!(
                    normalise_word(&text[hit.start..hit.end]),
                    normalise_word(&hit.word),
                    "{text:?} {hit:?}"
                );
                let action = lists.iter().find(|l| l.name == hit.list).unwrap().action;
                assert_eq!(hit.action, action);
            }
            matched += verdict.hits.len();
            // The same text as HTML (escaped) is screened alike.
            let html = escape_html(&text);
            let html_hits: Vec<(String, String)> = screen
                .check_html(&html)
                .hits
                .into_iter()
                .map(|h| (h.list, h.word))
                .collect();
            let text_hits: Vec<(String, String)> =
                got.into_iter().map(|(l, w, _, _)| (l, w)).collect();
            assert_eq!(html_hits, text_hits, "html {html:?}");
        }
        // The generator does find words (the comparison is not vacuous).
        assert!(matched > 1000, "{matched}");
    }
}
