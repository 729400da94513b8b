//! Highlights: the parts of a title or a body that match the query, marked with `<em>`, the
//! rest HTML-escaped, cut on character boundaries.
//!
//! Matching is on characters, case-insensitive (each character lowercased on its own, so
//! positions never shift), against the query's terms and the jieba words inside them — what
//! made the document match. Overlapping matches merge into one mark.

use platform::text::push_html_escaped;

use super::{query::ParsedQuery, tokens};

/// Characters of body text shown around the first match.
pub const BODY_WINDOW_CHARS: usize = 120;
/// Characters shown before the first match.
const LEAD_CHARS: usize = 30;
/// Characters of a body looked through for matches (a long article's highlight comes from its
/// first part).
const SCAN_CHARS: usize = 50_000;

fn lower(c: char) -> char {
    let mut lower = c.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(single), None) => single,
        _ => c,
    }
}

/// What to look for: the terms and their words, lowercased, longest first, each at least one
/// letter or digit.
pub fn needles(parsed: &ParsedQuery) -> Vec<Vec<char>> {
    let mut needles: Vec<Vec<char>> = Vec::new();
    for term in &parsed.terms {
        needles.push(term.chars().map(lower).collect());
        for word in tokens::words(term) {
            needles.push(word.text.chars().map(lower).collect());
        }
        for gram in tokens::grams(term) {
            needles.push(gram.text.chars().map(lower).collect());
        }
    }
    needles.retain(|needle| needle.iter().any(|c| c.is_alphanumeric()));
    needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    needles.dedup();
    needles
}

/// Marked character ranges of `text` (sorted, merged).
fn matches(text: &[char], needles: &[Vec<char>]) -> Vec<(usize, usize)> {
    let lowered: Vec<char> = text.iter().copied().map(lower).collect();
    let mut ranges = Vec::new();
    for needle in needles {
        if needle.is_empty() || needle.len() > lowered.len() {
            continue;
        }
        for start in 0..=lowered.len() - needle.len() {
            if lowered[start..start + needle.len()] == needle[..] {
                ranges.push((start, start + needle.len()));
            }
        }
    }
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
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

/// `text` escaped with its matches marked, whole (titles, names); `None` when nothing matches.
pub fn whole(text: &str, needles: &[Vec<char>]) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    let marks = matches(&chars, needles);
    (!marks.is_empty()).then(|| render(&chars, 0, chars.len(), &marks))
}

/// About [`BODY_WINDOW_CHARS`] characters of `text` around its first match, escaped, matches
/// marked, `…` where it was cut; `None` when nothing matches.
pub fn excerpt(text: &str, needles: &[Vec<char>]) -> Option<String> {
    let chars: Vec<char> = text.chars().take(SCAN_CHARS).collect();
    let marks = matches(&chars, needles);
    let first = marks.first()?.0;
    let from = first.saturating_sub(LEAD_CHARS);
    let to = (from + BODY_WINDOW_CHARS)
        .min(chars.len())
        .max(marks[0].1.min(chars.len()));
    Some(render(&chars, from, to, &marks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needles_of(q: &str) -> Vec<Vec<char>> {
        needles(&ParsedQuery::parse(q))
    }

    #[test]
    fn marks_matches_case_insensitively_and_escapes_the_rest() {
        assert_eq!(
            whole("Rust <b>安装</b>简单", &needles_of("rust 简单")).as_deref(),
            Some("<em>Rust</em> &lt;b&gt;安装&lt;/b&gt;<em>简单</em>")
        );
        assert_eq!(whole("nothing here", &needles_of("rust")), None);
    }

    #[test]
    fn overlapping_matches_merge() {
        assert_eq!(
            whole("安装简单", &needles_of("安装 装简")).as_deref(),
            Some("<em>安装简</em>单")
        );
    }

    #[test]
    fn excerpts_cut_on_characters_around_the_first_match() {
        let text = format!("{}关键词{}", "前".repeat(200), "后".repeat(200));
        let excerpt = excerpt(&text, &needles_of("关键词")).unwrap();
        assert!(
            excerpt.starts_with('…') && excerpt.ends_with('…'),
            "{excerpt}"
        );
        assert!(excerpt.contains("<em>关键词</em>"));
        assert_eq!(excerpt.chars().filter(|c| *c == '前').count(), LEAD_CHARS);
        // A short text is shown whole.
        assert_eq!(
            super::excerpt("a & b", &needles_of("b")).as_deref(),
            Some("a &amp; <em>b</em>")
        );
    }
}
