//! The console's page as a shell for server-rendered pages: the public site's article, author
//! and topic pages (the `site` feature) are this same document with their language, title,
//! head tags and content filled in, so a browser shows the content at once and the console's
//! script then takes the page over (its router reads a clean path such as `/a/7` as the route
//! `#/article/7`), while a crawler or a browser without JavaScript keeps the rendered content.
//!
//! The document is split once, at start-up, at the places a page fills: the `lang` of `<html>`,
//! the `<title>`, the end of `<head>` and the inside of `<main>`; the `<noscript>` notice goes
//! (such a page needs no script to be read).

use anyhow::Context;
use axum::http::{header, HeaderMap, HeaderValue};

use super::http::CONTENT_SECURITY_POLICY;

/// The console's page cut where a server-rendered page fills it; cheap to clone.
#[derive(Debug, Clone)]
pub struct ConsoleShell {
    /// Up to the value of `<html lang="…">`.
    opening: String,
    /// From after the language up to `<title>`.
    before_title: String,
    /// From after `</title>` up to `</head>`.
    head_rest: String,
    /// From `</head>` up to the inside of `<main …>`.
    before_main: String,
    /// From `</main>` to the end, without the `<noscript>` notice.
    closing: String,
    /// The path prefix of the console's files, `/assets/<version>`.
    assets: String,
}

/// What one server-rendered page puts into the shell.
#[derive(Debug, Clone, Copy)]
pub struct ShellPage<'a> {
    /// The document's language (`en`, `zh-CN`).
    pub lang: &'a str,
    /// The title, plain text (escaped here).
    pub title: &'a str,
    /// Tags for `<head>`, HTML.
    pub head: &'a str,
    /// The inside of `<main>`, HTML.
    pub main: &'a str,
}

fn cut<'a>(text: &'a str, marker: &str) -> anyhow::Result<(&'a str, &'a str)> {
    let at = text
        .find(marker)
        .with_context(|| format!("the console's index.html has no {marker}"))?;
    Ok((&text[..at], &text[at + marker.len()..]))
}

impl ConsoleShell {
    /// Cuts `index` (the console's page with its asset paths filled in) for `version`.
    pub fn new(index: &str, version: &str) -> anyhow::Result<Self> {
        let (opening, rest) = cut(index, "<html lang=\"")?;
        let (_, rest) = cut(rest, "\"")?;
        let (before_title, rest) = cut(rest, "<title>")?;
        let (_, rest) = cut(rest, "</title>")?;
        let (head_rest, rest) = cut(rest, "</head>")?;
        let (before_main, rest) = cut(rest, "<main id=\"main\" tabindex=\"-1\">")?;
        let (_, rest) = cut(rest, "</main>")?;
        let closing = match (rest.find("<noscript>"), rest.find("</noscript>")) {
            (Some(start), Some(end)) if start < end => {
                format!("{}{}", &rest[..start], &rest[end + "</noscript>".len()..])
            }
            _ => rest.to_owned(),
        };
        Ok(Self {
            opening: format!("{opening}<html lang=\""),
            before_title: format!("\"{before_title}<title>"),
            head_rest: format!("</title>{head_rest}"),
            before_main: format!("</head>{before_main}<main id=\"main\" tabindex=\"-1\">"),
            closing: format!("</main>{closing}"),
            assets: format!("/assets/{version}"),
        })
    }

    /// The path prefix of the console's files (`/assets/<version>`).
    pub fn assets(&self) -> &str {
        &self.assets
    }

    /// The whole document of `page`.
    pub fn render(&self, page: &ShellPage<'_>) -> String {
        let mut out = String::with_capacity(
            self.opening.len()
                + self.before_title.len()
                + self.head_rest.len()
                + self.before_main.len()
                + self.closing.len()
                + page.title.len()
                + page.head.len()
                + page.main.len()
                + 64,
        );
        out.push_str(&self.opening);
        out.push_str(&platform::text::escape_html(page.lang));
        out.push_str(&self.before_title);
        out.push_str(&platform::text::escape_html(page.title));
        out.push_str(&self.head_rest);
        out.push_str(page.head);
        out.push_str(&self.before_main);
        out.push_str(page.main);
        out.push_str(&self.closing);
        out
    }

    /// The headers every console document carries: its Content-Security-Policy (no inline
    /// script or style), no framing, referrers to this origin only.
    pub fn security_headers(headers: &mut HeaderMap) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_fills_the_consoles_document_and_drops_the_noscript_notice() {
        let bundle = super::super::assets::Bundle::load().unwrap();
        let index = std::str::from_utf8(&bundle.index.bytes).unwrap();
        let shell = ConsoleShell::new(index, &bundle.version).unwrap();
        let html = shell.render(&ShellPage {
            lang: "zh-CN",
            title: "Redis <锁>",
            head: "<meta name=\"description\" content=\"d\">",
            main: "<article>body</article>",
        });
        assert!(html.starts_with("<!doctype html>"), "{html}");
        assert!(html.contains("<html lang=\"zh-CN\">"), "{html}");
        assert!(html.contains("<title>Redis &lt;锁&gt;</title>"), "{html}");
        assert!(
            html.contains("<meta name=\"description\" content=\"d\">\n</head>")
                || html.contains("<meta name=\"description\" content=\"d\"></head>"),
            "{html}"
        );
        assert!(
            html.contains("<main id=\"main\" tabindex=\"-1\"><article>body</article></main>"),
            "{html}"
        );
        assert!(!html.contains("noscript"), "{html}");
        assert!(!html.contains("Loading…"), "{html}");
        // The console's script still boots on the page.
        assert!(
            html.contains(&format!("{}/app.js", shell.assets())),
            "{html}"
        );
    }
}
