//! Highlights: the parts of a title or a body that match the query, marked with `<em>`, the
//! rest HTML-escaped, cut on character boundaries.
//!
//! Matching agrees with the index: on [folded](super::fold) text (each folded character
//! mapped back to the one it came from, so marks fall on the text as written), against the
//! words and phrases the query matched with ([`super::query::Prepared::needles`]: its terms,
//! their pieces, the words its prefixes and typos expanded to, its synonyms). A needle that
//! begins (ends) with a Latin letter or digit matches only where a word begins (ends), as the
//! index matches whole words: "go" is not marked inside "Google". Overlapping matches merge
//! into one mark.
//!
//! Cost: one request's highlights are bounded whatever the query and the hits. A
//! [`Highlighter`] is built once per request: every fragment of the query (up to ~150 for 100
//! characters) goes into one Aho-Corasick automaton, so each text is scanned once, not once
//! per fragment; and the request has [`REQUEST_WORK_BUDGET`] work units to spend (a character
//! scanned, a fragment of the automaton, a match found). A hit whose scan the budget cannot
//! pay, and every hit after it, shows the start of its body unmarked and no title highlight —
//! never an error. Only the first [`SCAN_CHARS`] characters of a body are looked through, and
//! only those are taken out of its markup.

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use platform::text::push_html_escaped;
use serde::Serialize;

use super::{
    fold::fold_chars,
    query::ParsedQuery,
    tokens::{self, is_word_char},
};

/// Highlights of an article hit: escaped text, matches in `<em>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Highlight {
    /// The title, when it matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// An excerpt of the body around its first match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// Characters of body text shown around the first match.
pub const BODY_WINDOW_CHARS: usize = 120;
/// Characters shown before the first match.
const LEAD_CHARS: usize = 30;
/// Characters of a body looked through for matches (a long article's highlight comes from its
/// first part).
pub const SCAN_CHARS: usize = 50_000;
/// Work units one request's highlighting may spend: twenty bodies of [`SCAN_CHARS`] characters
/// with a match at every second one (a few milliseconds).
pub const REQUEST_WORK_BUDGET: u64 = 2_000_000;

/// The needles of `parsed` found without the index: its terms and their pieces, folded,
/// longest first (a [`super::query::Prepared`] has the whole set).
pub fn needles(parsed: &ParsedQuery) -> Vec<String> {
    let mut needles: Vec<String> = Vec::new();
    for term in &parsed.terms {
        needles.push(term.clone());
        needles.extend(tokens::pieces(term));
    }
    needles.retain(|needle| needle.chars().any(char::is_alphanumeric));
    needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    needles.dedup();
    needles
}

fn render(text: &[char], from: usize, to: usize, marks: &[(usize, usize)]) -> String {
    let mut out = String::with_capacity((to - from) * 3 + 16);
    if from > 0 {
        out.push('…');
    }
    let mut marks = marks.iter().peekable();
    let mut at = from;
    while at < to {
        while marks.peek().is_some_and(|(_, end)| *end <= at) {
            marks.next();
        }
        match marks.peek() {
            Some(&&(start, end)) if start <= at => {
                let end = end.min(to);
                out.push_str("<em>");
                for &c in &text[at..end] {
                    push_html_escaped(&mut out, c);
                }
                out.push_str("</em>");
                at = end;
            }
            next => {
                let end = next.map_or(to, |(start, _)| (*start).min(to));
                for &c in &text[at..end] {
                    push_html_escaped(&mut out, c);
                }
                at = end;
            }
        }
    }
    if to < text.len() {
        out.push('…');
    }
    out
}

/// Work units left to a request.
#[derive(Debug)]
struct Budget {
    left: u64,
    spent: u64,
}

impl Budget {
    /// Takes `units`; false (and nothing left from now on) when they are not there.
    fn take(&mut self, units: usize) -> bool {
        let units = u64::try_from(units).unwrap_or(u64::MAX);
        if units > self.left {
            self.left = 0;
            return false;
        }
        self.left -= units;
        self.spent += units;
        true
    }
}

/// The highlights of one request's hits, within one budget (see the module docs).
#[derive(Debug)]
pub struct Highlighter {
    /// The needles; `None` when there are none.
    automaton: Option<AhoCorasick>,
    /// For each needle: whether it must begin, and end, where a word does.
    edges: Vec<(bool, bool)>,
    budget: Budget,
}

impl Highlighter {
    /// The highlighter of a request whose query matched with `needles` (folded), with
    /// [`REQUEST_WORK_BUDGET`].
    pub fn new(needles: Vec<String>) -> Self {
        Self::with_budget(needles, REQUEST_WORK_BUDGET)
    }

    /// The highlighter of a request for `needles` that may spend `budget` work units.
    pub fn with_budget(needles: Vec<String>, budget: u64) -> Self {
        let mut budget = Budget {
            left: budget,
            spent: 0,
        };
        let patterns: Vec<String> = needles
            .into_iter()
            .filter(|needle| needle.chars().any(char::is_alphanumeric))
            .collect();
        let edges = patterns
            .iter()
            .map(|p| {
                (
                    p.chars().next().is_some_and(is_word_char),
                    p.chars().last().is_some_and(is_word_char),
                )
            })
            .collect();
        let size: usize = patterns.iter().map(|pattern| pattern.chars().count()).sum();
        let automaton = if patterns.is_empty() || !budget.take(size) {
            None
        } else {
            // A DFA: a few hundred patterns of a few bytes build in well under a millisecond,
            // and a DFA scans a text several times faster than the NFA chosen by default.
            AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .kind(Some(AhoCorasickKind::DFA))
                .build(&patterns)
                .map_err(|err| tracing::warn!(%err, "search highlights: no automaton"))
                .ok()
        };
        Self {
            automaton,
            edges,
            budget,
        }
    }

    /// Work units spent so far.
    pub fn work(&self) -> u64 {
        self.budget.spent
    }

    /// Whether the budget is spent: the hits from now on are shown unmarked.
    pub fn exhausted(&self) -> bool {
        self.budget.left == 0
    }

    /// Marked character ranges of `text` (sorted, merged); `None` when the budget cannot pay
    /// for them.
    fn marks(&mut self, text: &[char]) -> Option<Vec<(usize, usize)>> {
        if !self.budget.take(text.len()) {
            return None;
        }
        let Some(automaton) = &self.automaton else {
            return Some(Vec::new());
        };
        // The folded text, each folded character's source, and for each byte offset in it
        // where a folded character starts, its index.
        let folded = fold_chars(text);
        let lowered: String = folded.iter().map(|&(c, _)| c).collect();
        let mut char_at: Vec<u32> = vec![0; lowered.len() + 1];
        for (at, (offset, _)) in lowered.char_indices().enumerate() {
            char_at[offset] = u32::try_from(at).ok()?;
        }
        char_at[lowered.len()] = u32::try_from(folded.len()).ok()?;
        // Where the matches starting at each character of `text` reach (the longest of
        // them): the union of the matches without sorting them.
        let mut reach: Vec<usize> = vec![0; text.len() + 1];
        // Standard semantics report every match of every fragment, overlapping ones too.
        let found = automaton.try_find_overlapping_iter(lowered.as_str()).ok()?;
        for found in found {
            if !self.budget.take(1) {
                return None;
            }
            let first = char_at[found.start()] as usize;
            let end = char_at[found.end()] as usize;
            let (starts_word, ends_word) = self.edges[found.pattern().as_usize()];
            if (starts_word && first > 0 && is_word_char(folded[first - 1].0))
                || (ends_word && end < folded.len() && is_word_char(folded[end].0))
                || end == first
            {
                continue;
            }
            let (from, to) = (folded[first].1, folded[end - 1].1 + 1);
            reach[from] = reach[from].max(to);
        }
        // Covered characters, grouped into runs.
        let mut merged: Vec<(usize, usize)> = Vec::new();
        let mut covered_to = 0;
        for (at, &reaches) in reach[..text.len()].iter().enumerate() {
            covered_to = covered_to.max(reaches);
            if covered_to > at {
                match merged.last_mut() {
                    Some(last) if last.1 == at => last.1 = at + 1,
                    _ => merged.push((at, at + 1)),
                }
            }
        }
        Some(merged)
    }

    /// `text` escaped with its matches marked, whole (titles); `None` when nothing matches or
    /// the budget is spent.
    pub fn title(&mut self, text: &str) -> Option<String> {
        let chars: Vec<char> = text.chars().collect();
        let marks = self.marks(&chars)?;
        (!marks.is_empty()).then(|| render(&chars, 0, chars.len(), &marks))
    }

    /// About [`BODY_WINDOW_CHARS`] characters of `text` around its first match (within its
    /// first [`SCAN_CHARS`]), escaped, matches marked, `…` where it was cut; `None` when
    /// nothing matches. Once the budget is spent: its first [`BODY_WINDOW_CHARS`] characters,
    /// escaped, unmarked (from its first visible one).
    pub fn content(&mut self, text: &str) -> Option<String> {
        let chars: Vec<char> = text.chars().take(SCAN_CHARS).collect();
        let Some(marks) = self.marks(&chars) else {
            return Some(plain(&chars));
        };
        let (first, first_end) = *marks.first()?;
        let from = first.saturating_sub(LEAD_CHARS);
        let to = (from + BODY_WINDOW_CHARS)
            .min(chars.len())
            .max(first_end.min(chars.len()));
        Some(render(&chars, from, to, &marks))
    }

    /// The highlights of an article hit with `title` and body `html`; only as much of the
    /// body's text is taken out of its markup as is looked through (or shown).
    pub fn article(&mut self, title: &str, html: &str) -> Highlight {
        let title = self.title(title);
        let wanted = if self.exhausted() {
            // What is shown, past white space at its start, and whether it goes on.
            2 * BODY_WINDOW_CHARS + 1
        } else {
            SCAN_CHARS
        };
        let text = crate::article::text_prefix_of(html, wanted);
        Highlight {
            title,
            content: self.content(&text),
        }
    }
}

/// The first [`BODY_WINDOW_CHARS`] characters of `text` without the white space around it,
/// escaped, `…` where it was cut.
fn plain(text: &[char]) -> String {
    let start = text
        .iter()
        .position(|c| !c.is_whitespace())
        .unwrap_or(text.len());
    let end = text
        .iter()
        .rposition(|c| !c.is_whitespace())
        .map_or(start, |last| last + 1);
    let text = &text[start..end];
    render(text, 0, BODY_WINDOW_CHARS.min(text.len()), &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn highlighter(q: &str) -> Highlighter {
        Highlighter::new(needles(&ParsedQuery::parse(q)))
    }

    #[test]
    fn marks_matches_case_insensitively_and_escapes_the_rest() {
        assert_eq!(
            highlighter("rust 简单")
                .title("Rust <b>安装</b>简单")
                .as_deref(),
            Some("<em>Rust</em> &lt;b&gt;安装&lt;/b&gt;<em>简单</em>")
        );
        assert_eq!(highlighter("rust").title("nothing here"), None);
    }

    #[test]
    fn overlapping_matches_merge() {
        assert_eq!(
            highlighter("安装 装简").title("安装简单").as_deref(),
            Some("<em>安装简</em>单")
        );
    }

    #[test]
    fn excerpts_cut_on_characters_around_the_first_match() {
        let text = format!("{}关键词{}", "前".repeat(200), "后".repeat(200));
        let excerpt = highlighter("关键词").content(&text).unwrap();
        assert!(
            excerpt.starts_with('…') && excerpt.ends_with('…'),
            "{excerpt}"
        );
        assert!(excerpt.contains("<em>关键词</em>"));
        assert_eq!(excerpt.chars().filter(|c| *c == '前').count(), LEAD_CHARS);
        // A short text is shown whole.
        assert_eq!(
            highlighter("b").content("a & b").as_deref(),
            Some("a &amp; <em>b</em>")
        );
        assert_eq!(highlighter("rust").content("nothing here"), None);
    }

    /// What matching was before the automaton: every needle looked for at every position of
    /// the folded text, whole words for Latin edges.
    fn naive_marks(text: &[char], needles: &[String]) -> Vec<(usize, usize)> {
        let folded = fold_chars(text);
        let lowered: Vec<char> = folded.iter().map(|(c, _)| *c).collect();
        let mut ranges = Vec::new();
        for needle in needles {
            let needle: Vec<char> = needle.chars().collect();
            if needle.len() > lowered.len() || needle.is_empty() {
                continue;
            }
            for start in 0..=lowered.len() - needle.len() {
                let end = start + needle.len();
                let cut_before =
                    is_word_char(needle[0]) && start > 0 && is_word_char(lowered[start - 1]);
                let cut_after = is_word_char(needle[needle.len() - 1])
                    && end < lowered.len()
                    && is_word_char(lowered[end]);
                if lowered[start..end] == needle[..] && !cut_before && !cut_after {
                    ranges.push((folded[start].1, folded[end - 1].1 + 1));
                }
            }
        }
        ranges.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged
    }

    #[test]
    fn latin_needles_match_whole_words_and_folded_text_is_marked_as_written() {
        assert_eq!(
            highlighter("go").title("Google 与 Go 微服务").as_deref(),
            Some("Google 与 <em>Go</em> 微服务")
        );
        assert_eq!(
            highlighter("istanbul cafe")
                .title("İstanbul Café")
                .as_deref(),
            Some("<em>İstanbul</em> <em>Café</em>")
        );
        assert_eq!(
            highlighter("ｒｕｓｔ 锁").title("Rust 分布式锁").as_deref(),
            Some("<em>Rust</em> 分布式<em>锁</em>")
        );
    }

    #[test]
    fn one_scan_marks_what_a_scan_per_fragment_marked() {
        let texts = [
            "Rust 安装非常简单，RUST 的安装也简单；rustacean 们说：安装简单！",
            "ΩΩ Ω ω: the Ohm sign \u{2126} lowercases to a shorter ω; İstanbul keeps its İ",
            "数据库索引的数据库，据库数，库数据",
            "",
            "a",
        ];
        let queries = [
            "rust 安装简单",
            "ω ohm İstanbul",
            "数据库 据库 库数据",
            "\"安装 简单\" rust",
            "a",
        ];
        let same = |q: &str, text: &str| {
            let parsed = ParsedQuery::parse(q);
            let chars: Vec<char> = text.chars().collect();
            let marks = Highlighter::new(needles(&parsed)).marks(&chars).unwrap();
            assert_eq!(
                marks,
                naive_marks(&chars, &needles(&parsed)),
                "{q:?} in {text:?}"
            );
        };
        for q in queries {
            for text in texts {
                same(q, text);
            }
        }
        // And on texts and queries drawn from a few characters, so that matches overlap,
        // touch and nest in every way.
        let alphabet: Vec<char> = "abA安装简单Ω ".chars().collect();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut draw = |len: usize| -> String {
            (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    alphabet[(state >> 33) as usize % alphabet.len()]
                })
                .collect()
        };
        for _ in 0..300 {
            let q = draw(6);
            let text = draw(40);
            if !ParsedQuery::parse(&q).is_empty() {
                same(&q, &text);
            }
        }
    }

    /// A query of 99 characters made to have as many fragments as it can: ten terms of nine
    /// distinct Chinese characters.
    fn crafted_query() -> String {
        let chars: Vec<char> = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跑".chars().collect();
        let terms: Vec<String> = chars
            .chunks(9)
            .take(10)
            .map(|chunk| chunk.iter().collect())
            .collect();
        let q = terms.join(" ");
        assert_eq!(q.chars().count(), 99);
        q
    }

    /// Issue 46, item 5: the work of one request is bounded, not the work per hit — 25 hits of
    /// 50 000 characters that match the crafted query at every position.
    #[test]
    fn one_request_s_highlighting_is_bounded_whatever_the_query() {
        let q = crafted_query();
        let parsed = ParsedQuery::parse(&q);
        // More needles than a query has: each term, its pieces, its pairs and its characters
        // (a prefix or typos add at most a few hundred words).
        let mut many = needles(&parsed);
        for term in &parsed.terms {
            let chars: Vec<char> = term.chars().collect();
            many.extend(chars.windows(2).map(|pair| pair.iter().collect::<String>()));
            many.extend(chars.iter().map(char::to_string));
        }
        many.sort();
        many.dedup();
        assert!(many.len() > 150, "{}", many.len());
        let query_chars: Vec<char> = q.chars().filter(|c| !c.is_whitespace()).collect();
        let body: String = (0..SCAN_CHARS)
            .map(|n| query_chars[n % query_chars.len()])
            .collect();
        let html = format!("<p>{body}</p>");
        let title: String = body.chars().take(100).collect();
        let mut highlighter = Highlighter::new(many);
        let mut marked = 0;
        let mut plain = 0;
        for _ in 0..25 {
            let shown = highlighter.article(&title, &html);
            // Every hit gets a snippet: highlighted while the budget lasts, plain after.
            let content = shown.content.expect("a snippet for every hit");
            if content.contains("<em>") {
                assert!(shown.title.is_some());
                marked += 1;
            } else {
                assert!(highlighter.exhausted());
                let start: String = body.chars().take(BODY_WINDOW_CHARS).collect();
                assert_eq!(content, format!("{start}…"));
                plain += 1;
            }
        }
        assert!(marked >= 1 && plain >= 1, "{marked} marked, {plain} plain");
        assert_eq!(marked + plain, 25);
        assert!(
            highlighter.work() <= REQUEST_WORK_BUDGET,
            "work {} > budget {REQUEST_WORK_BUDGET}",
            highlighter.work()
        );
    }

    #[test]
    fn a_budget_too_small_for_the_query_shows_every_hit_plain() {
        let parsed = ParsedQuery::parse("rust");
        let mut highlighter = Highlighter::with_budget(needles(&parsed), 2);
        let shown = highlighter.article("Rust", "<p>rust &amp; more</p>");
        assert_eq!(shown.title, None);
        assert_eq!(shown.content.as_deref(), Some("rust &amp; more"));
        assert!(highlighter.work() <= 2);
    }
}
