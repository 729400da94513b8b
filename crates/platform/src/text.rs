//! The rules every free-text field follows, checked once at the edge: no NUL or other control
//! characters (line breaks and tabs only where a field is multi-line), no bidirectional
//! overrides or isolates (they make text display differently from what it says, e.g. a name that
//! reads as someone else's), and, where a field needs a value, at least one visible character
//! (a title of zero-width spaces would show as nothing). Names (nicknames, tag names) also bound
//! the combining marks stacked on one character ([`limit_combining_marks`]: "Zalgo" text of
//! hundreds of marks draws over the lines around it, while real scripts stack at most a few).
//! A failure is code 4 naming the field.
//! Plain text shown to clients that may insert it as HTML goes out escaped ([`escape_html`]).

use crate::error::{AppError, Msg};

/// Whether a field may hold several lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// One line: no line breaks or tabs either (titles, names).
    Single,
    /// Line breaks (`\n`, `\r`) and tabs allowed (bodies, "about me").
    Multi,
}

/// Checks `value` of the field `field` against the rules of the module docs (except visibility,
/// see [`require_visible`]).
pub fn check(field: &str, value: &str, lines: Lines) -> Result<(), AppError> {
    for c in value.chars() {
        if c.is_control() && !(lines == Lines::Multi && matches!(c, '\n' | '\r' | '\t')) {
            return Err(AppError::InvalidInput(Msg::field(
                field,
                "must not contain control characters",
                "不能包含控制字符",
            )));
        }
        if is_bidi_control(c) {
            return Err(AppError::InvalidInput(Msg::field(
                field,
                "must not contain bidirectional override characters",
                "不能包含双向文本控制字符",
            )));
        }
    }
    Ok(())
}

/// Refuses a `value` that has characters but none of them visible.
pub fn require_visible(field: &str, value: &str) -> Result<(), AppError> {
    if !value.is_empty() && !value.chars().any(is_visible) {
        return Err(AppError::InvalidInput(Msg::field(
            field,
            "must contain visible characters",
            "须包含可见字符",
        )));
    }
    Ok(())
}

/// Most combining marks allowed in a row on one base character ([`limit_combining_marks`]).
/// Real writing stacks at most about three (Vietnamese decomposed: 2, Thai: 2, Hebrew with
/// points and a cantillation mark: 3); "Zalgo" text stacks dozens to hundreds.
pub const MAX_COMBINING_MARKS: usize = 4;

/// Refuses a `value` where more than [`MAX_COMBINING_MARKS`] combining marks (Unicode general
/// category M: Mn, Mc, Me) follow one another, as they are written (a precomposed letter is not
/// a mark).
pub fn limit_combining_marks(field: &str, value: &str) -> Result<(), AppError> {
    let mut run = 0;
    for c in value.chars() {
        if unicode_normalization::char::is_combining_mark(c) {
            run += 1;
            if run > MAX_COMBINING_MARKS {
                return Err(AppError::InvalidInput(Msg::field(
                    field,
                    format!("at most {MAX_COMBINING_MARKS} combining marks on one character"),
                    format!("每个字符最多 {MAX_COMBINING_MARKS} 个组合符号"),
                )));
            }
        } else {
            run = 0;
        }
    }
    Ok(())
}

/// Whether `c` is a format or filler character that draws nothing and is not white space or a
/// control: zero-width spaces, joiners and marks, the BOM, soft hyphens, fillers, variation
/// selectors, tags (the characters [`is_visible`] names beyond white space and controls).
pub fn is_invisible_format(c: char) -> bool {
    !c.is_whitespace() && !c.is_control() && !is_visible(c)
}

/// Appends `c` to `out` escaped for HTML text and attribute values (`&`, `<`, `>`, `"`, `'`).
pub fn push_html_escaped(out: &mut String, c: char) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '"' => out.push_str("&quot;"),
        '\'' => out.push_str("&#39;"),
        other => out.push(other),
    }
}

/// `text` escaped for HTML ([`push_html_escaped`]): plain text that a client may insert as
/// HTML and still shows as written.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        push_html_escaped(&mut out, c);
    }
    out
}

/// Embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069). The marks LRM, RLM and
/// ALM only steer neutral characters and are left alone.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Whether `c` draws something: not whitespace, not a control, not one of the characters that
/// render as nothing (zero-width spaces and joiners, the BOM, soft hyphens, fillers, variation
/// selectors, tags).
pub fn is_visible(c: char) -> bool {
    !(c.is_whitespace()
        || c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn message(result: Result<(), AppError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn html_escaping_turns_markup_into_text() {
        assert_eq!(
            escape_html(r#"<img src=x onerror="a('b')">&amp; 好"#),
            "&lt;img src=x onerror=&quot;a(&#39;b&#39;)&quot;&gt;&amp;amp; 好"
        );
        assert_eq!(escape_html("plain\ntext"), "plain\ntext");
    }

    #[test]
    fn control_characters_are_refused_naming_the_field() {
        assert_eq!(
            message(check("nickname", "a\u{0}b", Lines::Single)),
            "nickname: must not contain control characters"
        );
        for bad in ["\u{7}", "\u{7F}", "\u{85}", "\u{1B}[31m", "a\nb", "a\tb"] {
            assert!(check("title", bad, Lines::Single).is_err(), "{bad:?}");
        }
        check("aboutMe", "line one\r\nline two\tend", Lines::Multi).unwrap();
        assert!(check("aboutMe", "a\u{0}", Lines::Multi).is_err());
        check(
            "title",
            "正常的标题 with English — and emoji 🎉",
            Lines::Single,
        )
        .unwrap();
    }

    #[test]
    fn bidi_overrides_are_refused_but_marks_are_not() {
        for bad in ["\u{202E}gnp.exe", "a\u{2066}b\u{2069}", "\u{202A}x"] {
            assert_eq!(
                message(check("nickname", bad, Lines::Single)),
                "nickname: must not contain bidirectional override characters",
                "{bad:?}"
            );
        }
        check("title", "שלום\u{200F} abc", Lines::Single).unwrap();
    }

    #[test]
    fn combining_marks_are_bounded_per_character_but_real_scripts_pass() {
        for name in [
            "Nguyễn Thị Ánh",
            // Vietnamese decomposed: two marks on one letter.
            "Nguye\u{0302}\u{0303}n",
            "สมชาย ใจดี",
            "น้ำผึ้ง",
            "กี้",
            "देवनागरी",
            "क्षत्रिय",
            "שָׁלוֹם",
            "José",
            "❤\u{FE0F}",
        ] {
            limit_combining_marks("nickname", name).unwrap();
        }
        let four = format!("a{}", "\u{0301}".repeat(MAX_COMBINING_MARKS));
        limit_combining_marks("nickname", &four).unwrap();
        for zalgo in [
            format!("a{}", "\u{0301}".repeat(MAX_COMBINING_MARKS + 1)),
            format!("a{}", "\u{0301}".repeat(63)),
            format!("a{}", "\u{0301}".repeat(255)),
            // Marks without a base count the same.
            "\u{0301}".repeat(5),
        ] {
            assert_eq!(
                message(limit_combining_marks("nickname", &zalgo)),
                "nickname: at most 4 combining marks on one character"
            );
        }
    }

    #[test]
    fn invisible_format_characters_are_told_apart_from_spaces_and_controls() {
        for c in [
            '\u{200B}', '\u{200D}', '\u{00AD}', '\u{FEFF}', '\u{2060}', '\u{FE0F}',
        ] {
            assert!(is_invisible_format(c), "{c:?}");
        }
        for c in [' ', '\u{3000}', '\u{0}', '\n', 'a', '标', '\u{0301}'] {
            assert!(!is_invisible_format(c), "{c:?}");
        }
    }

    #[test]
    fn only_invisible_characters_are_not_a_value() {
        for invisible in [
            "\u{200B}\u{200B}",
            " \u{FEFF} ",
            "\u{3164}",
            "\u{00AD}\u{2060}",
            "\u{E0041}",
        ] {
            assert_eq!(
                message(require_visible("title", invisible)),
                "title: must contain visible characters",
                "{invisible:?}"
            );
        }
        require_visible("title", "").unwrap();
        require_visible("title", "\u{200B}a").unwrap();
        require_visible("title", "标题").unwrap();
    }
}
