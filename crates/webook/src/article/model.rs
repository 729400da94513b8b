//! Article domain types, validation, HTML sanitising and abstracts.
//!
//! Content is HTML from a rich-text editor. [`Draft::parse`] checks the title and the text rules
//! of [`platform::text`], bounds the markup's shape ([`check_markup`]: nesting depth and
//! element count, measured by one linear scan), then sanitises it with an allow-list
//! ([`sanitize_html`]) and derives the abstract from the result ([`abstract_of`]). The bound
//! comes first because the HTML parser's work grows with the square of the nesting depth: 100 000
//! nested `<div>`s (488 KiB, under the size limit) took 12.7 s of CPU. Parsing is CPU work, so the
//! service runs it off the async workers ([`platform::cpu`]).

use std::{ops::ControlFlow, sync::LazyLock};

use serde::{Deserialize, Serialize};

use platform::{
    error::{AppError, Msg},
    text::{self, Lines},
};

/// Topic of the event emitted when an article is published or republished.
pub const TOPIC_PUBLISHED: &str = "article_published";
/// Topic of the event emitted when an article is withdrawn.
pub const TOPIC_WITHDRAWN: &str = "article_withdrawn";

/// Payload of [`TOPIC_PUBLISHED`] and [`TOPIC_WITHDRAWN`] events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArticleEvent {
    /// Article id.
    pub id: i64,
    /// Author's user id.
    pub author: i64,
    /// When it happened (ms).
    pub time: i64,
}

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 256;
/// Longest content after sanitising, in bytes.
pub const MAX_CONTENT_BYTES: usize = 512 * 1024;
/// Length of an abstract, in characters of text.
pub const ABSTRACT_CHARS: usize = 128;
/// Deepest element nesting accepted (an editor's output nests a dozen levels; browsers stop
/// nesting at 512).
pub const MAX_NESTING: usize = 256;
/// Most elements one article may have (a 512 KiB article of short paragraphs has ~30 000).
pub const MAX_ELEMENTS: usize = 50_000;

/// Where an article is in its life (the `status` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "i64", try_from = "i64")]
pub enum ArticleStatus {
    /// Never published, or edited since the last publish.
    Unpublished = 1,
    /// Readers see the reader copy.
    Published = 2,
    /// Withdrawn by the author; readers get 404001.
    Private = 3,
    /// Reader copy only: hidden by a moderator (readers get 404001, the author sees why); a
    /// moderator may restore it.
    Hidden = 4,
    /// Reader copy only: removed by a moderator for good (as hidden, but never restored).
    Removed = 5,
}

/// Its number in the API, described for the OpenAPI document.
impl utoipa::PartialSchema for ArticleStatus {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::Integer)
            .enum_values(Some([1, 2, 3, 4, 5]))
            .description(Some(
                "1 unpublished (never published, or edited since the last publish), 2 \
                 published, 3 private (withdrawn); of a reader copy only: 4 hidden by a \
                 moderator, 5 removed by a moderator.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for ArticleStatus {}

impl From<ArticleStatus> for i64 {
    fn from(status: ArticleStatus) -> Self {
        status as i64
    }
}

impl TryFrom<i64> for ArticleStatus {
    type Error = String;

    fn try_from(value: i64) -> Result<Self, Self::Error> {
        match value {
            1 => Ok(Self::Unpublished),
            2 => Ok(Self::Published),
            3 => Ok(Self::Private),
            4 => Ok(Self::Hidden),
            5 => Ok(Self::Removed),
            other => Err(format!("unknown article status {other}")),
        }
    }
}

/// The author's copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema, sqlx::FromRow)]
pub struct Article {
    /// Id (shared with the reader copy).
    pub id: i64,
    /// Author's user id.
    #[serde(skip)]
    pub author_id: i64,
    /// Title (plain text).
    pub title: String,
    /// Sanitised HTML.
    pub content: String,
    /// Status of the author's copy.
    #[sqlx(try_from = "i64")]
    pub status: ArticleStatus,
    /// Created (ms).
    pub ctime: i64,
    /// Last edited (ms).
    pub utime: i64,
    /// **(webook)** Why a moderator hid or removed the reader copy; absent when readers can
    /// see it (or it was never published).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hidden: String,
}

/// One row of the author's list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema, sqlx::FromRow)]
pub struct ListItem {
    /// Id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// First 128 characters of the text, HTML-escaped.
    #[serde(rename = "abstract")]
    #[sqlx(rename = "abstract")]
    pub abstract_text: String,
    /// Status of the author's copy.
    #[sqlx(try_from = "i64")]
    pub status: ArticleStatus,
    /// Created (ms).
    pub ctime: i64,
    /// Last edited (ms).
    pub utime: i64,
    /// **(webook)** Why a moderator hid or removed the reader copy; absent when readers can
    /// see it (or it was never published).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hidden: String,
}

/// One published article of `GET /articles/pub` (the latest, or one author's), with its counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublishedItem {
    /// Id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// First 128 characters of the text, HTML-escaped.
    #[serde(rename = "abstract")]
    pub abstract_text: String,
    /// Its author.
    pub author: crate::user::Person,
    /// Reads (applied in batches: may lag by moments).
    pub read_cnt: i64,
    /// Likes.
    pub like_cnt: i64,
    /// Comments not deleted.
    pub comment_cnt: i64,
    /// First publication (ms).
    pub ctime: i64,
    /// Last publish (ms).
    pub utime: i64,
}

/// The reader copy with its author's display name: what the reader view and its cache hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedArticle {
    /// Id.
    pub id: i64,
    /// Author's user id.
    pub author_id: i64,
    /// Author's display name.
    pub author_name: String,
    /// Title.
    pub title: String,
    /// Sanitised HTML.
    pub content: String,
    /// First 128 characters of the text, HTML-escaped.
    pub abstract_text: String,
    /// Status of the reader copy.
    pub status: ArticleStatus,
    /// First publication (ms); never changes on republish.
    pub ctime: i64,
    /// Last publish (ms).
    pub utime: i64,
}

/// A validated title and content, ready to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    /// Trimmed title.
    pub title: String,
    /// Sanitised HTML.
    pub content: String,
    /// Derived from `content`.
    pub abstract_text: String,
}

impl Draft {
    /// Validates a title and content and sanitises the content (module docs). Publishing needs
    /// a title and some content (visible text or an image); a draft may be empty. CPU-bound:
    /// call it off the async workers.
    pub fn parse(title: &str, content: &str, publishing: bool) -> Result<Self, AppError> {
        let title = title.trim();
        if title.chars().count() > MAX_TITLE_CHARS {
            return Err(AppError::InvalidInput(Msg::field(
                "title",
                format!("at most {MAX_TITLE_CHARS} characters"),
                format!("最多 {MAX_TITLE_CHARS} 个字符"),
            )));
        }
        text::check("title", title, Lines::Single)?;
        text::require_visible("title", title)?;
        text::check("content", content, Lines::Multi)?;
        check_markup(content)?;
        let content = sanitize_html(content);
        if content.len() > MAX_CONTENT_BYTES {
            return Err(AppError::InvalidInput(Msg::field(
                "content",
                format!("at most {} KiB", MAX_CONTENT_BYTES / 1024),
                format!("最多 {} KiB", MAX_CONTENT_BYTES / 1024),
            )));
        }
        if publishing && title.is_empty() {
            return Err(AppError::InvalidInput(Msg::field(
                "title",
                "required to publish",
                "发表时不能为空",
            )));
        }
        if publishing && !has_visible_text(&content) && !content.contains("<img") {
            return Err(AppError::InvalidInput(Msg::field(
                "content",
                "required to publish",
                "发表时不能为空",
            )));
        }
        let abstract_text = abstract_of(&content);
        Ok(Self {
            title: title.to_owned(),
            content,
            abstract_text,
        })
    }
}

/// Elements that never have content, so never nest.
#[rustfmt::skip]
const VOID_ELEMENTS: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "keygen", "link", "meta", "param",
    "source", "track", "wbr",
];

/// Elements whose content is text up to their end tag, never markup.
#[rustfmt::skip]
const RAW_TEXT_ELEMENTS: &[&str] = &[
    "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "plaintext",
];

/// Start tags that close an open `<p>` (the parser does the same, so they do not nest in it).
#[rustfmt::skip]
const CLOSES_P: &[&str] = &[
    "address", "article", "aside", "blockquote", "details", "div", "dl", "fieldset", "figcaption",
    "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "main",
    "menu", "nav", "ol", "p", "pre", "section", "summary", "table", "ul",
];

/// Refuses markup nested deeper than [`MAX_NESTING`] or with more than [`MAX_ELEMENTS`]
/// elements, in one linear pass that never builds a tree. The depth is that of a stack of open
/// elements kept like the HTML parser's where it matters: void elements and self-closing tags do
/// not nest, an end tag closes up to its open element (and is ignored when there is none), a new
/// `<li>`, `<dt>`/`<dd>`, `<tr>`, `<td>`/`<th>` or `<option>` closes the open one, and block
/// starts close an open `<p>`. It can overestimate only for markup the parser repairs in ways
/// not modelled here, never underestimate by more than that.
pub fn check_markup(html: &str) -> Result<(), AppError> {
    let mut open: Vec<&str> = Vec::new();
    let mut elements = 0usize;
    let mut at = 0usize;
    while let Some(offset) = html.as_bytes()[at..].iter().position(|b| *b == b'<') {
        let (name, closing, self_closing) = match markup_at(html, at + offset) {
            Markup::Comment { end } => {
                at = end;
                continue;
            }
            Markup::Text => {
                at += offset + 1;
                continue;
            }
            Markup::Tag {
                name,
                closing,
                self_closing,
                end,
            } => {
                at = end;
                (name, closing, self_closing)
            }
        };
        if closing {
            if let Some(index) = open.iter().rposition(|o| o.eq_ignore_ascii_case(name)) {
                open.truncate(index);
            }
            continue;
        }
        elements += 1;
        if elements > MAX_ELEMENTS {
            return Err(AppError::InvalidInput(Msg::field(
                "content",
                format!("at most {MAX_ELEMENTS} HTML elements"),
                format!("最多 {MAX_ELEMENTS} 个 HTML 元素"),
            )));
        }
        let is = |names: &[&str]| names.iter().any(|n| n.eq_ignore_ascii_case(name));
        if is(RAW_TEXT_ELEMENTS) {
            at = end_of_raw_text(html, at, name);
            continue;
        }
        if is(VOID_ELEMENTS) || self_closing {
            continue;
        }
        close_implied(&mut open, name, is(CLOSES_P));
        open.push(name);
        if open.len() > MAX_NESTING {
            return Err(AppError::InvalidInput(Msg::field(
                "content",
                format!("HTML nested more than {MAX_NESTING} levels deep"),
                format!("HTML 嵌套超过 {MAX_NESTING} 层"),
            )));
        }
    }
    Ok(())
}

/// Pops what the start tag `name` closes implicitly (see [`check_markup`]).
fn close_implied(open: &mut Vec<&str>, name: &str, closes_p: bool) {
    let top_is = |open: &Vec<&str>, names: &[&str]| {
        open.last()
            .is_some_and(|top| names.iter().any(|n| n.eq_ignore_ascii_case(top)))
    };
    if closes_p && top_is(open, &["p"]) {
        open.pop();
    }
    let siblings: &[&str] = match name.to_ascii_lowercase().as_str() {
        "li" => &["li"],
        "dt" | "dd" => &["dt", "dd"],
        "tr" => &["tr"],
        "td" | "th" => &["td", "th"],
        "option" => &["option"],
        _ => return,
    };
    // Close the open sibling and whatever inline elements were left open inside it.
    if let Some(index) = open
        .iter()
        .rposition(|o| siblings.iter().any(|s| s.eq_ignore_ascii_case(o)))
    {
        let container = [
            "ul", "ol", "dl", "table", "tbody", "thead", "tfoot", "select",
        ];
        let inside_another_container = open[index + 1..]
            .iter()
            .any(|o| container.iter().any(|c| c.eq_ignore_ascii_case(o)));
        if !inside_another_container {
            open.truncate(index);
        }
    }
}

/// What a `<` of an HTML text starts.
enum Markup<'a> {
    /// A comment; `end` is the index past its `-->`.
    Comment { end: usize },
    /// A start or end tag; `end` is the index past its `>`.
    Tag {
        name: &'a str,
        closing: bool,
        self_closing: bool,
        end: usize,
    },
    /// Neither (a `<` in text, `<!doctype>`, `<?…>`): the `<` is one character.
    Text,
}

/// Reads the markup starting at the `<` at `start` (one tokenizer for the bound and the text
/// scan, so they agree on what is a tag).
fn markup_at(html: &str, start: usize) -> Markup<'_> {
    let bytes = html.as_bytes();
    let rest = &html[start..];
    if rest.starts_with("<!--") {
        let end = rest.find("-->").map_or(bytes.len(), |end| start + end + 3);
        return Markup::Comment { end };
    }
    let closing = bytes.get(start + 1) == Some(&b'/');
    let name_start = (start + 1 + usize::from(closing)).min(bytes.len());
    let name_len = bytes[name_start..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-' || **b == b':')
        .count();
    if name_len == 0 || !bytes[name_start].is_ascii_alphabetic() {
        return Markup::Text;
    }
    let end = end_of_tag(bytes, name_start + name_len);
    Markup::Tag {
        name: &html[name_start..name_start + name_len],
        closing,
        self_closing: end >= 2 && bytes[end - 2] == b'/',
        end,
    }
}

/// The index just after the `>` ending the tag whose name ends at `from` (quoted attribute
/// values may contain `>`), or the end of the input.
fn end_of_tag(bytes: &[u8], from: usize) -> usize {
    let mut quote: Option<u8> = None;
    for (offset, byte) in bytes[from..].iter().enumerate() {
        match (quote, *byte) {
            (None, b'"' | b'\'') => quote = Some(*byte),
            (Some(q), b) if b == q => quote = None,
            (None, b'>') => return from + offset + 1,
            _ => {}
        }
    }
    bytes.len()
}

/// The index after `</name…>` that ends a raw-text element's content starting at `from` (the
/// end of the input when there is none). Compares in place: no copy of the rest per element.
fn end_of_raw_text(html: &str, from: usize, name: &str) -> usize {
    let bytes = html.as_bytes();
    let name = name.as_bytes();
    let mut at = from;
    while let Some(offset) = bytes[at..].windows(2).position(|pair| pair == b"</") {
        let candidate = at + offset + 2;
        if bytes
            .get(candidate..candidate + name.len())
            .is_some_and(|found| found.eq_ignore_ascii_case(name))
        {
            return end_of_tag(bytes, candidate + name.len());
        }
        at = at + offset + 1;
    }
    bytes.len()
}

/// The allow-list: the formatting a rich-text editor produces (ammonia's defaults: headings,
/// lists, emphasis, links, images, tables, code…), links opened safely, no scripts, styles, event
/// handlers or `javascript:`/`data:` URLs.
static SANITIZER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut builder = ammonia::Builder::default();
    builder
        .add_tags(["figure", "figcaption", "mark"])
        .add_tag_attributes("code", ["class"])
        .add_tag_attributes("pre", ["class"])
        .url_schemes(["http", "https", "mailto"].into_iter().collect())
        .link_rel(Some("noopener noreferrer nofollow"));
    builder
});

/// Everything not on the allow-list is removed (script and style elements with their content).
pub fn sanitize_html(html: &str) -> String {
    SANITIZER.clean(html).to_string()
}

/// Elements a reader sees as separate blocks (and `<br>`): their boundaries separate words in
/// the text of an article, as a browser lays them out.
#[rustfmt::skip]
const BLOCK_ELEMENTS: &[&str] = &[
    "address", "article", "aside", "blockquote", "br", "caption", "dd", "details", "div", "dl",
    "dt", "figcaption", "figure", "footer", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr",
    "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot",
    "th", "thead", "tr", "ul",
];

/// Calls `each` with the characters of `html`'s text in order, as a reader sees them: tags
/// dropped, a space at each block boundary, entities decoded, comments and the content of
/// `script`/`style` skipped. Stops when `each` breaks. One pass, no tree: used on sanitised
/// content, whose markup is well-formed.
fn for_each_text_char(html: &str, mut each: impl FnMut(char) -> ControlFlow<()>) {
    let bytes = html.as_bytes();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &html[at..];
        let mut chars = rest.chars();
        let Some(c) = chars.next() else { break };
        match c {
            '<' => match markup_at(html, at) {
                Markup::Comment { end } => at = end,
                Markup::Text => {
                    at += 1;
                    if each('<').is_break() {
                        return;
                    }
                }
                Markup::Tag {
                    name, closing, end, ..
                } => {
                    at = end;
                    if !closing
                        && ["script", "style"]
                            .iter()
                            .any(|n| n.eq_ignore_ascii_case(name))
                    {
                        at = end_of_raw_text(html, at, name);
                    } else if BLOCK_ELEMENTS.iter().any(|n| n.eq_ignore_ascii_case(name))
                        && each(' ').is_break()
                    {
                        return;
                    }
                }
            },
            '&' => {
                let (decoded, len) = decode_entity(rest);
                at += len;
                if each(decoded).is_break() {
                    return;
                }
            }
            _ => {
                at += c.len_utf8();
                if each(c).is_break() {
                    return;
                }
            }
        }
    }
}

/// The character an entity at the start of `text` stands for and the entity's length; a `&`
/// that starts no known entity stands for itself.
fn decode_entity(text: &str) -> (char, usize) {
    const NAMED: &[(&str, char)] = &[
        ("&amp;", '&'),
        ("&lt;", '<'),
        ("&gt;", '>'),
        ("&quot;", '"'),
        ("&#39;", '\''),
        ("&apos;", '\''),
        ("&nbsp;", '\u{a0}'),
    ];
    if let Some((entity, c)) = NAMED.iter().find(|(entity, _)| text.starts_with(entity)) {
        return (*c, entity.len());
    }
    let numeric = text.strip_prefix("&#").and_then(|digits| {
        let end = digits.find(';').filter(|end| *end <= 8)?;
        let value = match digits[..end].strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => digits[..end].parse().ok()?,
        };
        Some((char::from_u32(value)?, end + 3))
    });
    numeric.unwrap_or(('&', 1))
}

/// The whole text of `html` as a reader sees it (tags dropped, blocks separated by a space,
/// entities decoded): what search indexes and highlights.
pub fn text_of(html: &str) -> String {
    let mut text = String::with_capacity(html.len() / 2);
    for_each_text_char(html, |c| {
        text.push(c);
        ControlFlow::Continue(())
    });
    text
}

/// The first `max_chars` characters of [`text_of`]`(html)`: what a search hit's highlight
/// looks through, without reading past it.
pub fn text_prefix_of(html: &str, max_chars: usize) -> String {
    let mut text = String::with_capacity(max_chars.min(html.len()));
    let mut left = max_chars;
    for_each_text_char(html, |c| {
        if left == 0 {
            return ControlFlow::Break(());
        }
        text.push(c);
        left -= 1;
        ControlFlow::Continue(())
    });
    text
}

/// Whether `html` has any visible text (not only whitespace or zero-width characters).
pub fn has_visible_text(html: &str) -> bool {
    let mut visible = false;
    for_each_text_char(html, |c| {
        if text::is_visible(c) {
            visible = true;
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    visible
}

/// The first 128 characters of `html`'s text (tags dropped, blocks and line breaks separating
/// words, whitespace collapsed), escaped so that inserting it as HTML shows text and never
/// creates markup.
pub fn abstract_of(html: &str) -> String {
    // Collapsing whitespace needs to see past the 128th character only to the next word, so
    // the text taken is bounded too.
    let mut text = String::with_capacity(ABSTRACT_CHARS * 4);
    let mut kept = 0usize;
    for_each_text_char(html, |c| {
        text.push(c);
        if !c.is_whitespace() {
            kept += 1;
        }
        if kept > ABSTRACT_CHARS {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    abstract_of_text(&text)
}

/// The abstract of plain `text`: its first 128 characters with whitespace runs collapsed to one
/// space, escaped for HTML. [`abstract_of`] is this applied to an HTML body's text.
pub fn abstract_of_text(text: &str) -> String {
    let mut out = String::with_capacity(ABSTRACT_CHARS + 16);
    for c in text
        .split_whitespace()
        .flat_map(|word| " ".chars().chain(word.chars()))
        .skip(1)
        .take(ABSTRACT_CHARS)
    {
        platform::text::push_html_escaped(&mut out, c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xss_payloads_do_not_survive_sanitising() {
        let dirty = r#"<p onclick="steal()">hi<script>alert(1)</script></p>
            <img src="x" onerror="alert(2)"><a href="javascript:alert(3)">x</a>
            <a href="data:text/html,<script>">y</a><iframe src="https://evil"></iframe>
            <style>body{}</style><svg onload="alert(4)"></svg><b>bold</b>"#;
        let clean = sanitize_html(dirty);
        for bad in [
            "script",
            "onclick",
            "onerror",
            "javascript:",
            "data:",
            "iframe",
            "<style",
            "onload",
            "alert(",
        ] {
            assert!(!clean.contains(bad), "{bad} survived: {clean}");
        }
        assert!(
            clean.contains("<b>bold</b>") && clean.contains("<p>hi</p>"),
            "{clean}"
        );
        assert!(
            clean.contains(r#"rel="noopener noreferrer nofollow""#),
            "{clean}"
        );
    }

    #[test]
    fn rich_text_formatting_survives() {
        let html = r#"<h2>T</h2><ul><li><em>a</em></li></ul><pre><code class="language-rust">fn</code></pre><a href="https://x.cn/p">l</a><img src="https://x.cn/i.png" alt="i"><table><tr><td>1</td></tr></table>"#;
        let clean = sanitize_html(html);
        for kept in [
            "<h2>",
            "<em>",
            "language-rust",
            "https://x.cn/p",
            "<img",
            "<td>",
        ] {
            assert!(clean.contains(kept), "{kept} lost: {clean}");
        }
    }

    #[test]
    fn abstracts_are_text_only_unicode_safe_and_escaped() {
        assert_eq!(
            abstract_of("<p>Hello <b>world</b></p>\n<p>again</p>"),
            "Hello world again"
        );
        let chinese = "测".repeat(200);
        let abs = abstract_of(&format!("<p>{chinese}</p>"));
        assert_eq!(abs.chars().count(), ABSTRACT_CHARS);
        // Text that looks like markup stays text.
        let abs = abstract_of("<p>&lt;img src=x onerror=alert(1)&gt; &amp; 'q'</p>");
        assert_eq!(abs, "&lt;img src=x onerror=alert(1)&gt; &amp; &#39;q&#39;");
        assert_eq!(abstract_of("<script>alert(1)</script><p>x</p>"), "x");
        assert_eq!(abstract_of(""), "");
    }

    #[test]
    fn abstracts_separate_blocks_and_line_breaks() {
        assert_eq!(
            abstract_of("<p>one</p><p>two</p><ul><li>three</li></ul>line<br>break"),
            "one two three line break"
        );
        assert_eq!(
            abstract_of("<h2>标题</h2><p>第一段</p><table><tr><td>a</td><td>b</td></tr></table>"),
            "标题 第一段 a b"
        );
        assert_eq!(
            abstract_of("<p>in<b>line</b> <em>stays</em> glued</p>"),
            "inline stays glued"
        );
        assert_eq!(
            abstract_of("<p>a&nbsp;&amp;&#x41;&#66;&unknown;</p>"),
            "a &amp;AB&amp;unknown;"
        );
        assert_eq!(abstract_of("<!-- note --><p>x</p>"), "x");
    }

    #[test]
    fn markup_is_bounded_before_it_is_parsed() {
        let deep = "<div>".repeat(MAX_NESTING + 1);
        assert_eq!(
            Draft::parse("t", &deep, false).unwrap_err().to_string(),
            format!("content: HTML nested more than {MAX_NESTING} levels deep")
        );
        Draft::parse("t", &"<div>".repeat(MAX_NESTING), false).unwrap();
        // Siblings closed by their end tags, or implicitly, do not add up to depth.
        let flat = "<p>x</p>".repeat(10_000);
        check_markup(&flat).unwrap();
        let implicit = format!(
            "<ul>{}</ul><table>{}</table><p>a<p>b<div>c</div>",
            "<li>item".repeat(1_000),
            "<tr><td>1<td>2".repeat(1_000)
        );
        check_markup(&implicit).unwrap();
        // An end tag that matches nothing open does not hide nesting.
        let hidden = "<div></span>".repeat(MAX_NESTING + 1);
        assert!(check_markup(&hidden).is_err());
        // Raw text and comments are not markup.
        check_markup(&format!(
            "<script>{}</script><!-- {} -->",
            "<div>".repeat(1000),
            "<div>".repeat(1000)
        ))
        .unwrap();
        let many = "<br>".repeat(MAX_ELEMENTS + 1);
        assert!(check_markup(&many)
            .unwrap_err()
            .to_string()
            .contains("HTML elements"));
    }

    #[test]
    fn text_fields_follow_the_text_rules() {
        for (title, content) in [
            ("a\u{0}b", "<p>x</p>"),
            ("\u{202E}fdp", "<p>x</p>"),
            ("\u{200B}\u{200B}", "<p>x</p>"),
            ("t", "<p>x\u{0}</p>"),
        ] {
            assert!(
                Draft::parse(title, content, false).is_err(),
                "{title:?} {content:?}"
            );
        }
        // Only invisible text is no content to publish.
        let err = Draft::parse("t", "<p>\u{200B}&nbsp;</p>", true).unwrap_err();
        assert_eq!(err.to_string(), "content: required to publish");
    }

    #[test]
    fn drafts_validate_titles_and_publishing_needs_substance() {
        assert!(Draft::parse("", "", false).is_ok());
        assert!(Draft::parse("", "<p>x</p>", true).is_err());
        assert!(Draft::parse("t", "<script>only()</script>", true).is_err());
        assert!(Draft::parse("t", r#"<img src="https://x.cn/a.png">"#, true).is_ok());
        assert!(Draft::parse(&"题".repeat(256), "<p>x</p>", true).is_ok());
        assert!(Draft::parse(&"题".repeat(257), "<p>x</p>", true).is_err());
        let draft = Draft::parse("  title ", "<p onclick=x>body</p>", true).unwrap();
        assert_eq!(draft.title, "title");
        assert_eq!(draft.content, "<p>body</p>");
        assert_eq!(draft.abstract_text, "body");
    }

    #[test]
    fn status_round_trips_as_its_number() {
        assert_eq!(serde_json::to_string(&ArticleStatus::Private).unwrap(), "3");
        assert_eq!(
            serde_json::from_str::<ArticleStatus>("2").unwrap(),
            ArticleStatus::Published
        );
        assert!(serde_json::from_str::<ArticleStatus>("9").is_err());
    }
}
