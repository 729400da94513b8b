//! Article domain types, validation, HTML sanitising and abstracts.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 256;
/// Longest content after sanitising, in bytes.
pub const MAX_CONTENT_BYTES: usize = 512 * 1024;
/// Length of an abstract, in characters of text.
pub const ABSTRACT_CHARS: usize = 128;

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
}

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
            other => Err(format!("unknown article status {other}")),
        }
    }
}

/// The author's copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    pub status: ArticleStatus,
    /// Created (ms).
    pub ctime: i64,
    /// Last edited (ms).
    pub utime: i64,
}

/// One row of the author's list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListItem {
    /// Id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// First 128 characters of the text, HTML-escaped.
    #[serde(rename = "abstract")]
    pub abstract_text: String,
    /// Status of the author's copy.
    pub status: ArticleStatus,
    /// Created (ms).
    pub ctime: i64,
    /// Last edited (ms).
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
    /// Validates a title and sanitises content. Publishing needs a title and some content;
    /// a draft may be empty.
    pub fn parse(title: &str, content: &str, publishing: bool) -> Result<Self, AppError> {
        let title: String = title.trim().chars().filter(|c| !c.is_control()).collect();
        if title.chars().count() > MAX_TITLE_CHARS {
            return Err(AppError::InvalidInput(format!(
                "title: at most {MAX_TITLE_CHARS} characters"
            )));
        }
        let content = sanitize_html(content);
        if content.len() > MAX_CONTENT_BYTES {
            return Err(AppError::InvalidInput(format!(
                "content: at most {} KiB",
                MAX_CONTENT_BYTES / 1024
            )));
        }
        if publishing && title.is_empty() {
            return Err(AppError::InvalidInput("title: required to publish".into()));
        }
        let abstract_text = abstract_of(&content);
        if publishing && abstract_text.is_empty() && !content.contains("<img") {
            return Err(AppError::InvalidInput(
                "content: required to publish".into(),
            ));
        }
        Ok(Self {
            title,
            content,
            abstract_text,
        })
    }
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

static TEXT_ONLY: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut builder = ammonia::Builder::empty();
    builder.clean_content_tags(["script", "style"].into_iter().collect());
    builder
});

/// The first 128 characters of `html`'s text (tags dropped, whitespace collapsed), escaped so
/// that inserting it as HTML shows text and never creates markup.
pub fn abstract_of(html: &str) -> String {
    // The text-only cleaner yields text with &, <, > and non-breaking spaces escaped; undo that
    // to count characters of the text itself.
    let escaped_text = TEXT_ONLY.clean(html).to_string();
    let text = escaped_text
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
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
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
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
    fn drafts_validate_titles_and_publishing_needs_substance() {
        assert!(Draft::parse("", "", false).is_ok());
        assert!(Draft::parse("", "<p>x</p>", true).is_err());
        assert!(Draft::parse("t", "<script>only()</script>", true).is_err());
        assert!(Draft::parse("t", r#"<img src="https://x.cn/a.png">"#, true).is_ok());
        assert!(Draft::parse(&"题".repeat(256), "<p>x</p>", true).is_ok());
        assert!(Draft::parse(&"题".repeat(257), "<p>x</p>", true).is_err());
        let draft = Draft::parse("  title\u{0007} ", "<p onclick=x>body</p>", true).unwrap();
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
