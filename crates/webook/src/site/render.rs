//! The public site's documents, as text: the article, author and topic pages (into the
//! console's shell, [`ConsoleShell`]), Atom feeds and sitemaps. Pure functions of what the
//! handlers read, so each is tested on its own.
//!
//! Escaping: titles, names and keys are plain text and escaped here; an abstract is stored
//! HTML-escaped already (it goes in as is, in text and in attributes: the escape covers both
//! quotes); an article's content is HTML sanitised when it was saved (an allow-list,
//! `crate::article`), embedded as is.

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use platform::text::escape_html as esc;

use crate::{
    article::{PublishedItem, ReaderCopy},
    console::{ConsoleShell, ShellPage},
    ranking::RankedArticle,
    tag::{TaggedArticle, Topic, TopicOrder},
    user::Person,
};

/// The site's name in titles and share cards.
pub const SITE_NAME: &str = "webook";
/// Entries in a feed.
pub const FEED_ENTRIES: usize = 20;

/// RFC 3339 (Atom's and the W3C's date-time format) of Unix milliseconds, in UTC.
pub fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The calendar day of Unix milliseconds (UTC), as pages show it.
fn day(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d")
        .to_string()
}

/// The language of a text for `<html lang>`: Chinese when at least one in ten of its first
/// thousand letters is a Han character (a Chinese article quotes English terms freely; an
/// English one rarely holds Han characters), English otherwise.
pub fn lang_of(text: &str) -> &'static str {
    let (mut letters, mut han) = (0u32, 0u32);
    for c in text.chars().filter(|c| c.is_alphabetic()).take(1000) {
        letters += 1;
        if is_han(c) {
            han += 1;
        }
    }
    if han > 0 && han * 10 >= letters {
        "zh-CN"
    } else {
        "en"
    }
}

fn is_han(c: char) -> bool {
    matches!(c, '\u{4E00}'..='\u{9FFF}' | '\u{3400}'..='\u{4DBF}' | '\u{20000}'..='\u{2A6DF}' | '\u{F900}'..='\u{FAFF}')
}

/// The visible text of sanitised HTML, roughly (tags dropped, entities kept): enough to tell
/// its language.
fn text_of_html(html: &str) -> String {
    let mut out = String::with_capacity(html.len().min(4096));
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
        if out.len() >= 4096 {
            break;
        }
    }
    out
}

/// The first image of sanitised content with an absolute http(s) address: the share card's
/// picture.
fn first_image(content: &str) -> Option<&str> {
    let at = content.find("<img ")?;
    let rest = &content[at..content[at..]
        .find('>')
        .map_or(content.len(), |end| at + end)];
    let src = rest.find("src=\"")? + "src=\"".len();
    let value = &rest[src..src + rest[src..].find('"')?];
    (value.starts_with("https://") || value.starts_with("http://")).then_some(value)
}

/// Share-card and description tags common to every page.
struct Card<'a> {
    /// `og:type`.
    kind: &'a str,
    /// Plain text.
    title: &'a str,
    /// HTML-escaped already.
    description: &'a str,
    /// Absolute.
    url: &'a str,
    /// Absolute.
    image: &'a str,
    /// Atom feed of the page, absolute.
    feed: Option<(&'a str, &'a str)>,
}

fn card_tags(out: &mut String, card: &Card<'_>) {
    let title = esc(card.title);
    let _ = write!(
        out,
        "<meta name=\"description\" content=\"{desc}\">\n\
         <link rel=\"canonical\" href=\"{url}\">\n\
         <meta property=\"og:site_name\" content=\"{SITE_NAME}\">\n\
         <meta property=\"og:type\" content=\"{kind}\">\n\
         <meta property=\"og:title\" content=\"{title}\">\n\
         <meta property=\"og:description\" content=\"{desc}\">\n\
         <meta property=\"og:url\" content=\"{url}\">\n\
         <meta property=\"og:image\" content=\"{image}\">\n\
         <meta name=\"twitter:card\" content=\"summary\">\n\
         <meta name=\"twitter:title\" content=\"{title}\">\n\
         <meta name=\"twitter:description\" content=\"{desc}\">\n\
         <meta name=\"twitter:image\" content=\"{image}\">\n",
        desc = card.description,
        url = esc(card.url),
        kind = card.kind,
        image = esc(card.image),
    );
    if let Some((feed_title, feed_url)) = card.feed {
        let _ = writeln!(
            out,
            "<link rel=\"alternate\" type=\"application/atom+xml\" title=\"{}\" href=\"{}\">",
            esc(feed_title),
            esc(feed_url)
        );
    }
}

/// The site icon as the share picture when a page has none of its own.
fn icon(origin: &str, shell: &ConsoleShell) -> String {
    format!("{origin}{}/icon.svg", shell.assets())
}

/// An article's page: its title, author, date and content; a description and share card from
/// its abstract and first image.
pub fn article_page(shell: &ConsoleShell, origin: &str, article: &ReaderCopy) -> String {
    let url = format!("{origin}/a/{}", article.id);
    let author_url = format!("{origin}/u/{}", article.author_id);
    let image = first_image(&article.content)
        .map(str::to_owned)
        .unwrap_or_else(|| icon(origin, shell));
    let mut head = String::with_capacity(2048);
    card_tags(
        &mut head,
        &Card {
            kind: "article",
            title: &article.title,
            description: &article.abstract_text,
            url: &url,
            image: &image,
            feed: Some((
                &format!("{} · {SITE_NAME}", article.author_name),
                &format!("{author_url}/feed.atom"),
            )),
        },
    );
    let _ = write!(
        head,
        "<meta property=\"article:published_time\" content=\"{}\">\n\
         <meta property=\"article:modified_time\" content=\"{}\">\n\
         <meta property=\"article:author\" content=\"{}\">\n",
        rfc3339(article.ctime),
        rfc3339(article.utime),
        esc(&author_url),
    );
    let main = format!(
        "<div class=\"article-page\"><article class=\"reader\" data-test=\"ssr-article\">\
         <header class=\"article-head\"><h1 class=\"page-title\">{title}</h1>\
         <p class=\"meta\"><a href=\"/u/{author}\" rel=\"author\">{name}</a> · \
         <time datetime=\"{published}\">{day}</time></p></header>\
         <div class=\"content\">{content}</div></article></div>",
        title = esc(&article.title),
        author = article.author_id,
        name = esc(&article.author_name),
        published = rfc3339(article.ctime),
        day = day(article.ctime),
        content = article.content,
    );
    let lang = lang_of(&format!(
        "{} {}",
        article.title,
        text_of_html(&article.content)
    ));
    shell.render(&ShellPage {
        lang,
        title: &format!("{} · {SITE_NAME}", article.title),
        head: &head,
        main: &main,
    })
}

/// One article in a list: title, abstract, author (when `show_author`) and date.
fn list_item(
    out: &mut String,
    id: i64,
    title: &str,
    abstract_text: &str,
    author: Option<&Person>,
    ctime: i64,
) {
    let _ = write!(
        out,
        "<li class=\"article-item\"><a class=\"article-title\" href=\"/a/{id}\">{}</a>",
        esc(title)
    );
    if !abstract_text.is_empty() {
        let _ = write!(out, "<p class=\"abstract\">{abstract_text}</p>");
    }
    out.push_str("<p class=\"meta\">");
    if let Some(author) = author {
        let _ = write!(
            out,
            "<a href=\"/u/{}\">{}</a> · ",
            author.id,
            esc(&author.name)
        );
    }
    let _ = write!(
        out,
        "<time datetime=\"{}\">{}</time></p></li>",
        rfc3339(ctime),
        day(ctime)
    );
}

/// What an author page shows of its author.
#[derive(Debug, Clone)]
pub struct Author {
    /// Id.
    pub id: i64,
    /// Display name.
    pub name: String,
    /// About me, plain text.
    pub about: String,
}

/// An author's page: name, about, their latest published articles (and a link to the next
/// ones' page when `next` is given).
pub fn author_page(
    shell: &ConsoleShell,
    origin: &str,
    author: &Author,
    articles: &[PublishedItem],
    next: Option<&str>,
) -> String {
    let url = format!("{origin}/u/{}", author.id);
    let description = if author.about.trim().is_empty() {
        esc(&format!("{} on {SITE_NAME}", author.name))
    } else {
        esc(&author.about.chars().take(160).collect::<String>())
    };
    let mut head = String::with_capacity(1536);
    card_tags(
        &mut head,
        &Card {
            kind: "profile",
            title: &author.name,
            description: &description,
            url: &url,
            image: &icon(origin, shell),
            feed: Some((
                &format!("{} · {SITE_NAME}", author.name),
                &format!("{url}/feed.atom"),
            )),
        },
    );
    let mut main = format!(
        "<section class=\"profile\" data-test=\"ssr-author\"><header class=\"card profile-head\">\
         <h1 class=\"page-title\">{}</h1>",
        esc(&author.name)
    );
    if !author.about.trim().is_empty() {
        let _ = write!(main, "<p class=\"about\">{}</p>", esc(&author.about));
    }
    main.push_str("</header><section class=\"card\"><ul class=\"articles\">");
    for item in articles {
        list_item(
            &mut main,
            item.id,
            &item.title,
            &item.abstract_text,
            None,
            item.ctime,
        );
    }
    main.push_str("</ul>");
    if let Some(next) = next {
        let _ = write!(
            main,
            "<p><a rel=\"next\" href=\"/u/{}?cursor={}\">→</a></p>",
            author.id,
            esc(next)
        );
    }
    main.push_str("</section></section>");
    let text: String = articles.iter().map(|a| a.title.as_str()).collect();
    shell.render(&ShellPage {
        lang: lang_of(&format!("{} {} {text}", author.name, author.about)),
        title: &format!("{} · {SITE_NAME}", author.name),
        head: &head,
        main: &main,
    })
}

/// The path of topic `key` (percent-encoded).
pub fn topic_path(key: &str) -> String {
    format!(
        "/t/{}",
        url::form_urlencoded::byte_serialize(key.as_bytes())
            .collect::<String>()
            .replace('+', "%20")
    )
}

/// A topic's page: its name and a page of its articles (from any author) in `order`, with
/// links to both orders.
pub fn topic_page(shell: &ConsoleShell, origin: &str, topic: &Topic, order: TopicOrder) -> String {
    let path = topic_path(&topic.key);
    let url = format!("{origin}{path}");
    let description = esc(&format!("#{} on {SITE_NAME}", topic.name));
    let mut head = String::with_capacity(1536);
    card_tags(
        &mut head,
        &Card {
            kind: "website",
            title: &format!("#{}", topic.name),
            description: &description,
            url: &url,
            image: &icon(origin, shell),
            feed: Some((
                &format!("#{} · {SITE_NAME}", topic.name),
                &format!("{url}/feed.atom"),
            )),
        },
    );
    let (sort, newest, hottest) = match order {
        TopicOrder::Newest => ("", " aria-current=\"page\"", ""),
        TopicOrder::Hottest => ("&amp;sort=hot", "", " aria-current=\"page\""),
    };
    let mut main = format!(
        "<section data-test=\"ssr-topic\"><h1 class=\"page-title\">#{}</h1>\
         <p class=\"meta\"><a href=\"{path}\"{newest}>Newest</a> · \
         <a href=\"{path}?sort=hot\"{hottest}>Most liked</a></p>\
         <section class=\"card\"><ul class=\"articles\">",
        esc(&topic.name)
    );
    for item in &topic.articles.items {
        list_item(
            &mut main,
            item.id,
            &item.title,
            &item.abstract_text,
            Some(&item.author),
            item.ctime,
        );
    }
    main.push_str("</ul>");
    if let Some(next) = &topic.articles.next {
        let _ = write!(
            main,
            "<p><a rel=\"next\" href=\"{path}?cursor={}{sort}\">→</a></p>",
            esc(next)
        );
    }
    main.push_str("</section></section>");
    let text: String = topic
        .articles
        .items
        .iter()
        .map(|a| a.title.as_str())
        .collect();
    shell.render(&ShellPage {
        lang: lang_of(&format!("{} {text}", topic.name)),
        title: &format!("#{} · {SITE_NAME}", topic.name),
        head: &head,
        main: &main,
    })
}

/// One entry of a feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Article id.
    pub id: i64,
    /// Title, plain text.
    pub title: String,
    /// Abstract, HTML-escaped.
    pub summary: String,
    /// Author.
    pub author: Person,
    /// First publication (ms).
    pub published: i64,
    /// Last publish (ms).
    pub updated: i64,
}

impl From<PublishedItem> for Entry {
    fn from(item: PublishedItem) -> Self {
        Self {
            id: item.id,
            title: item.title,
            summary: item.abstract_text,
            author: item.author,
            published: item.ctime,
            updated: item.utime,
        }
    }
}

impl From<TaggedArticle> for Entry {
    fn from(item: TaggedArticle) -> Self {
        Self {
            id: item.id,
            title: item.title,
            summary: item.abstract_text,
            author: item.author,
            published: item.ctime,
            updated: item.utime,
        }
    }
}

impl From<&RankedArticle> for Entry {
    fn from(item: &RankedArticle) -> Self {
        Self {
            id: item.id,
            title: item.title.clone(),
            summary: item.abstract_text.clone(),
            author: item.author.clone(),
            published: item.ctime,
            updated: item.utime,
        }
    }
}

/// What a feed is about.
#[derive(Debug, Clone)]
pub struct FeedHead<'a> {
    /// Plain text.
    pub title: &'a str,
    /// The feed's own path (`/feed.atom`).
    pub path: &'a str,
    /// The page it follows (`/u/3`), a path.
    pub page: &'a str,
}

/// The feed's `updated`: the latest entry's, or the Unix epoch for an empty feed (nothing in
/// it ever changed).
pub fn feed_updated(entries: &[Entry]) -> i64 {
    entries.iter().map(|entry| entry.updated).max().unwrap_or(0)
}

/// An Atom 1.0 feed (RFC 4287) of `entries`: every required element, each entry's author,
/// a self link and the page it follows.
pub fn atom(origin: &str, head: &FeedHead<'_>, entries: &[Entry]) -> String {
    let mut out = String::with_capacity(1024 + entries.len() * 768);
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n\
         <feed xmlns=\"http://www.w3.org/2005/Atom\">\n\
         <id>{origin}{path}</id>\n\
         <title>{title}</title>\n\
         <updated>{updated}</updated>\n\
         <generator>{SITE_NAME}</generator>\n\
         <link rel=\"self\" type=\"application/atom+xml\" href=\"{origin}{path}\"/>\n\
         <link rel=\"alternate\" type=\"text/html\" href=\"{origin}{page}\"/>\n",
        origin = esc(origin),
        path = esc(head.path),
        page = esc(head.page),
        title = esc(head.title),
        updated = rfc3339(feed_updated(entries)),
    );
    for entry in entries {
        let _ = write!(
            out,
            "<entry>\n<id>{origin}/a/{id}</id>\n<title>{title}</title>\n\
             <link rel=\"alternate\" type=\"text/html\" href=\"{origin}/a/{id}\"/>\n\
             <published>{published}</published>\n<updated>{updated}</updated>\n\
             <author><name>{name}</name><uri>{origin}/u/{author}</uri></author>\n\
             <summary type=\"html\">{summary}</summary>\n</entry>\n",
            origin = esc(origin),
            id = entry.id,
            title = esc(&entry.title),
            published = rfc3339(entry.published),
            updated = rfc3339(entry.updated),
            name = esc(&entry.author.name),
            author = entry.author.id,
            // The abstract is HTML-escaped text: as `type="html"` content it is escaped once
            // more, so a reader unescapes it to that HTML, which shows the text as written.
            summary = esc(&entry.summary),
        );
    }
    out.push_str("</feed>\n");
    out
}

/// A sitemap index (sitemaps.org 0.9) of `(path, lastmod ms)`.
pub fn sitemap_index(origin: &str, sitemaps: &[(String, i64)]) -> String {
    let mut out = String::with_capacity(256 + sitemaps.len() * 128);
    out.push_str(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <sitemapindex xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n",
    );
    for (path, lastmod) in sitemaps {
        let _ = writeln!(
            out,
            "<sitemap><loc>{}{}</loc><lastmod>{}</lastmod></sitemap>",
            esc(origin),
            esc(path),
            rfc3339(*lastmod)
        );
    }
    out.push_str("</sitemapindex>\n");
    out
}

/// A sitemap (sitemaps.org 0.9) of `(path, lastmod ms)`.
pub fn sitemap(origin: &str, urls: &[(String, i64)]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    out.push_str(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n",
    );
    for (path, lastmod) in urls {
        let _ = writeln!(
            out,
            "<url><loc>{}{}</loc><lastmod>{}</lastmod></url>",
            esc(origin),
            esc(path),
            rfc3339(*lastmod)
        );
    }
    out.push_str("</urlset>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_text_with_english_terms_is_chinese_and_english_text_is_english() {
        assert_eq!(
            lang_of("用 Redis 实现分布式锁：SETNX、过期时间与续约"),
            "zh-CN"
        );
        assert_eq!(lang_of("Distributed locks with Redis"), "en");
        assert_eq!(lang_of("Kafka consumer groups explained, 消费者"), "en");
        assert_eq!(lang_of(""), "en");
    }

    #[test]
    fn the_share_picture_is_the_first_absolute_image() {
        assert_eq!(
            first_image(
                r#"<p>x</p><img alt="a" src="https://img.example/1.png"><img src="https://img.example/2.png">"#
            ),
            Some("https://img.example/1.png")
        );
        assert_eq!(first_image(r#"<img src="/local.png">"#), None);
        assert_eq!(first_image("<p>no image</p>"), None);
    }

    #[test]
    fn topic_paths_are_percent_encoded() {
        assert_eq!(topic_path("rust"), "/t/rust");
        assert_eq!(
            topic_path("分布式 系统"),
            "/t/%E5%88%86%E5%B8%83%E5%BC%8F%20%E7%B3%BB%E7%BB%9F"
        );
        assert_eq!(topic_path("c#/c++"), "/t/c%23%2Fc%2B%2B");
    }

    #[test]
    fn a_feed_escapes_what_it_quotes_and_dates_in_utc() {
        let feed = atom(
            "https://w.example",
            &FeedHead {
                title: "A & <B>",
                path: "/feed.atom",
                page: "/",
            },
            &[Entry {
                id: 7,
                title: "Redis <锁>".into(),
                summary: "a &lt;b&gt;".into(),
                author: Person {
                    id: 3,
                    name: "Tom & Jerry".into(),
                },
                published: 0,
                updated: 1_700_000_000_123,
            }],
        );
        assert!(feed.contains("<title>A &amp; &lt;B&gt;</title>"), "{feed}");
        assert!(feed.contains("<title>Redis &lt;锁&gt;</title>"), "{feed}");
        assert!(
            feed.contains("<summary type=\"html\">a &amp;lt;b&amp;gt;</summary>"),
            "{feed}"
        );
        assert!(
            feed.contains("<updated>2023-11-14T22:13:20Z</updated>"),
            "{feed}"
        );
        assert!(feed.contains("<name>Tom &amp; Jerry</name>"), "{feed}");
    }
}
