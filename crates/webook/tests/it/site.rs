//! The public site as a crawler, a feed reader and a link preview read it: server-rendered
//! article, author and topic pages with their share cards; Atom feeds read back by a real Atom
//! parser and checked against RFC 4287's required elements, with conditional GET; sitemaps
//! checked against the sitemaps.org schema's rules; topics across authors; and nothing of a
//! draft or a withdrawn article anywhere.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Read;

use quick_xml::events::Event;
use reqwest::header::{ACCEPT_ENCODING, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
use serde_json::json;
use webook::{auth::settings::AuthSettings, site::SiteSettings, testing::TestApp};

use crate::common::{get, member, post, Member, Setup};

const SITE: &str = "https://webook.example";

async fn app(setup: Setup, anonymous_reading: bool) -> TestApp {
    setup
        .spawn(|config| {
            let auth = config.settings_mut::<AuthSettings>();
            auth.auth_rate_limit = 1_000_000;
            auth.write_rate_limit = 0;
            auth.anonymous_reading = anonymous_reading;
            config.settings_mut::<SiteSettings>().site_url = SITE.to_owned();
        })
        .await
}

/// A raw GET: status, headers and body (gunzipped when the server sent gzip).
async fn fetch(
    app: &TestApp,
    path: &str,
    headers: &[(reqwest::header::HeaderName, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = app.client.get(app.url(path));
    for (name, value) in headers {
        request = request.header(name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.unwrap();
    let body = if headers.get("content-encoding").is_some_and(|v| v == "gzip") {
        let mut text = String::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_string(&mut text)
            .unwrap();
        text
    } else {
        String::from_utf8(bytes.to_vec()).unwrap()
    };
    (status, headers, body)
}

fn data(answer: crate::common::Answer) -> serde_json::Value {
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].clone()
}

async fn publish(app: &TestApp, author: &Member, title: &str, content: &str) -> i64 {
    data(
        post(
            app,
            "/articles/publish",
            Some(&author.token),
            json!({"title": title, "content": content}),
        )
        .await,
    )
    .as_i64()
    .unwrap()
}

async fn tag(app: &TestApp, author: &Member, name: &str, article: i64) {
    let tid = data(post(app, "/tags", Some(&author.token), json!({"name": name})).await);
    data(
        post(
            app,
            "/tags/attach",
            Some(&author.token),
            json!({"biz": "article", "bizId": article, "tids": [tid]}),
        )
        .await,
    );
}

/// The `content` of `<meta {attr}="{name}">` in a page.
fn meta<'a>(html: &'a str, attr: &str, name: &str) -> Option<&'a str> {
    let marker = format!("<meta {attr}=\"{name}\" content=\"");
    let start = html.find(&marker)? + marker.len();
    Some(&html[start..start + html[start..].find('"')?])
}

async fn an_article_page_carries_its_content_and_share_card_and_follows_its_article(setup: Setup) {
    let app = app(setup, true).await;
    let author = member(&app, "writer").await;
    data(
        post(
            &app,
            "/users/edit",
            Some(&author.token),
            json!({"nickname": "Ada & Co"}),
        )
        .await,
    );
    let title = "Redis 分布式锁 <实战>";
    let id = publish(&app, &author, title, "<p>用 SETNX 实现分布式锁，还要处理过期与续约。</p><img src=\"https://img.example/lock.png\">").await;

    let (status, headers, html) = fetch(&app, &format!("/a/{id}"), &[]).await;
    assert_eq!(status, 200, "{html}");
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(headers["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("script-src 'self'"));
    assert!(html.contains("<html lang=\"zh-CN\">"), "{html}");
    assert!(
        html.contains("<title>Redis 分布式锁 &lt;实战&gt; · webook</title>"),
        "{html}"
    );
    assert!(
        html.contains("<h1 class=\"page-title\">Redis 分布式锁 &lt;实战&gt;</h1>"),
        "{html}"
    );
    assert!(
        html.contains("<p>用 SETNX 实现分布式锁，还要处理过期与续约。</p>"),
        "{html}"
    );
    assert!(
        html.contains("<a href=\"/u/") && html.contains(">Ada &amp; Co</a>"),
        "{html}"
    );
    assert!(
        html.contains(&format!("<link rel=\"canonical\" href=\"{SITE}/a/{id}\">")),
        "{html}"
    );
    assert_eq!(
        meta(&html, "property", "og:title"),
        Some("Redis 分布式锁 &lt;实战&gt;")
    );
    assert_eq!(
        meta(&html, "property", "og:description"),
        Some("用 SETNX 实现分布式锁，还要处理过期与续约。")
    );
    assert_eq!(
        meta(&html, "property", "og:image"),
        Some("https://img.example/lock.png")
    );
    assert_eq!(
        meta(&html, "property", "og:url"),
        Some(format!("{SITE}/a/{id}").as_str())
    );
    assert_eq!(meta(&html, "property", "og:type"), Some("article"));
    assert_eq!(meta(&html, "name", "twitter:card"), Some("summary"));
    assert!(meta(&html, "name", "description").is_some());
    // The console's script is on the page, to take it over.
    assert!(html.contains("/app.js\"></script>"), "{html}");
    assert!(!html.contains("<noscript>"), "{html}");

    // Gzipped (from the copy compressed once) it is the same page; its ETag revalidates.
    let (_, gz_headers, gz_html) =
        fetch(&app, &format!("/a/{id}"), &[(ACCEPT_ENCODING, "gzip")]).await;
    assert_eq!(gz_headers["content-encoding"], "gzip");
    assert_eq!(gz_html, html);
    let etag = headers[ETAG].to_str().unwrap().to_owned();
    let (status, _, _) = fetch(&app, &format!("/a/{id}"), &[(IF_NONE_MATCH, &etag)]).await;
    assert_eq!(status, 304);

    // Republished: the page follows at once (no stale copy), and the old ETag no longer matches.
    data(
        post(
            &app,
            "/articles/publish",
            Some(&author.token),
            json!({"id": id, "title": "Redis locks, revised", "content": "<p>Second edition.</p>"}),
        )
        .await,
    );
    let (status, _, html) = fetch(&app, &format!("/a/{id}"), &[(IF_NONE_MATCH, &etag)]).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("Second edition.") && !html.contains("SETNX"),
        "{html}"
    );
    assert!(html.contains("<html lang=\"en\">"), "{html}");

    // Withdrawn, a draft, or nothing at all: a page saying so, 404, and none of its text.
    data(
        post(
            &app,
            "/articles/withdraw",
            Some(&author.token),
            json!({"id": id}),
        )
        .await,
    );
    let (status, _, html) = fetch(&app, &format!("/a/{id}"), &[]).await;
    assert_eq!(status, 404);
    assert!(!html.contains("Second edition."), "{html}");
    assert!(html.contains("noindex"), "{html}");
    let draft = data(
        post(
            &app,
            "/articles/edit",
            Some(&author.token),
            json!({"title": "secret draft", "content": "<p>not yet</p>"}),
        )
        .await,
    );
    for path in [
        format!("/a/{draft}"),
        "/a/0".into(),
        "/a/x".into(),
        "/a/99999999".into(),
    ] {
        let (status, _, html) = fetch(&app, &path, &[]).await;
        assert_eq!(status, 404, "{path}");
        assert!(!html.contains("secret draft"), "{path}");
    }
    app.stop().await.unwrap();
}

async fn topics_gather_every_authors_tag_of_a_name_newest_first(setup: Setup) {
    let app = app(setup, true).await;
    let (ann, bob) = (member(&app, "ann").await, member(&app, "bob").await);
    let first = publish(&app, &ann, "Ownership explained", "<p>borrowck</p>").await;
    tag(&app, &ann, "Rust", first).await;
    let second = publish(&app, &bob, "Async traits", "<p>futures</p>").await;
    tag(&app, &bob, "rust", second).await;
    let other = publish(&app, &bob, "Goroutines", "<p>go</p>").await;
    tag(&app, &bob, "go", other).await;
    let draft = data(
        post(
            &app,
            "/articles/edit",
            Some(&bob.token),
            json!({"title": "draft on rust", "content": "<p>x</p>"}),
        )
        .await,
    )
    .as_i64()
    .unwrap();
    tag(&app, &bob, "RUST", draft).await;

    // The API: any spelling, both authors' articles, newest first, paged without repeats.
    let page = data(
        get(
            &app,
            "/topics/%EF%BD%92%EF%BD%95%EF%BD%93%EF%BD%94?limit=1",
            None,
        )
        .await,
    );
    assert_eq!(page["key"], "rust");
    assert_eq!(page["articles"]["items"][0]["id"], second);
    let next = page["articles"]["next"].as_str().unwrap().to_owned();
    let next_newest = next.clone();
    let page = data(get(&app, &format!("/topics/Rust?limit=1&cursor={next}"), None).await);
    assert_eq!(page["articles"]["items"][0]["id"], first);
    assert!(page["articles"]["next"].is_null(), "{page}");
    assert_eq!(get(&app, "/topics/never-used", None).await.code(), 404001);

    // Most liked first: the older article, liked once, leads; paging goes on in that order.
    data(
        post(
            &app,
            "/articles/pub/like",
            Some(&bob.token),
            json!({"id": first, "like": true}),
        )
        .await,
    );
    let page = data(get(&app, "/topics/rust?sort=hot&limit=1", None).await);
    assert_eq!(page["articles"]["items"][0]["id"], first);
    assert_eq!(page["articles"]["items"][0]["likeCnt"], 1);
    let next = page["articles"]["next"].as_str().unwrap().to_owned();
    let page = data(
        get(
            &app,
            &format!("/topics/rust?sort=hot&limit=1&cursor={next}"),
            None,
        )
        .await,
    );
    assert_eq!(page["articles"]["items"][0]["id"], second);
    assert!(page["articles"]["next"].is_null(), "{page}");
    assert_eq!(get(&app, "/topics/rust?sort=top", None).await.code(), 4);
    // A newest-first cursor is not a most-liked one.
    assert_eq!(
        get(
            &app,
            &format!("/topics/rust?sort=hot&cursor={next_newest}"),
            None
        )
        .await
        .code(),
        4
    );
    let (_, _, html) = fetch(&app, "/t/rust?sort=hot", &[]).await;
    assert!(
        html.find("Ownership explained") < html.find("Async traits"),
        "most liked first"
    );

    // The page: both, not the draft, not the other topic's.
    let (status, _, html) = fetch(&app, "/t/RUST", &[]).await;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("Ownership explained") && html.contains("Async traits"),
        "{html}"
    );
    assert!(
        !html.contains("draft on rust") && !html.contains("Goroutines"),
        "{html}"
    );
    assert!(
        html.find("Async traits") < html.find("Ownership explained"),
        "newest first"
    );
    assert!(
        html.contains(&format!("<link rel=\"canonical\" href=\"{SITE}/t/rust\">")),
        "{html}"
    );
    assert_eq!(fetch(&app, "/t/never-used", &[]).await.0, 404);

    // An author's page: their published articles only, no email.
    let (status, _, html) = fetch(&app, &format!("/u/{}", bob.uid), &[]).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("Async traits") && html.contains("Goroutines"),
        "{html}"
    );
    assert!(
        !html.contains("draft on rust") && !html.contains("@webook.test"),
        "{html}"
    );
    assert_eq!(fetch(&app, "/u/99999999", &[]).await.0, 404);
    app.stop().await.unwrap();
}

/// Checks `xml` as an Atom feed (RFC 4287): a real parser reads it, and the feed and every entry
/// have the required elements, with RFC 3339 dates; returns the entries' titles.
fn valid_atom(xml: &str) -> Vec<String> {
    let feed = atom_syndication::Feed::read_from(xml.as_bytes())
        .unwrap_or_else(|err| panic!("{err}: {xml}"));
    assert!(!feed.id().is_empty() && !feed.title().is_empty(), "{xml}");
    assert!(
        feed.links()
            .iter()
            .any(|link| link.rel() == "self" && link.href().starts_with(SITE)),
        "{xml}"
    );
    let mut titles = Vec::new();
    for entry in feed.entries() {
        assert!(entry.id().starts_with(&format!("{SITE}/a/")), "{xml}");
        assert!(
            !entry.authors().is_empty() || !feed.authors().is_empty(),
            "an entry without an author: {xml}"
        );
        assert!(entry.published().is_some(), "{xml}");
        assert!(
            entry.links().iter().any(|link| link.rel() == "alternate"),
            "{xml}"
        );
        assert!(entry.summary().is_some(), "{xml}");
        titles.push(entry.title().as_str().to_owned());
    }
    // The parser takes dates as they come: check the format of every one.
    for date in xml
        .split("<updated>")
        .skip(1)
        .chain(xml.split("<published>").skip(1))
    {
        let date = &date[..date.find('<').unwrap()];
        chrono::DateTime::parse_from_rfc3339(date).unwrap_or_else(|err| panic!("{date}: {err}"));
    }
    titles
}

async fn feeds_validate_and_answer_conditional_gets(setup: Setup) {
    let app = app(setup, true).await;
    let author = member(&app, "feeder").await;
    let a = publish(&app, &author, "First & foremost", "<p>one &lt;tag&gt;</p>").await;
    tag(&app, &author, "Feeds", a).await;
    publish(&app, &author, "Second", "<p>two</p>").await;

    let (status, headers, xml) = fetch(&app, "/feed.atom", &[]).await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/atom+xml"));
    assert_eq!(valid_atom(&xml), ["Second", "First & foremost"]);
    // The summary carries the text as written, once unescaped by the feed reader.
    let feed = atom_syndication::Feed::read_from(xml.as_bytes()).unwrap();
    assert_eq!(
        feed.entries()[1].summary().unwrap().as_str(),
        "one &lt;tag&gt;"
    );

    let (_, _, xml) = fetch(&app, &format!("/u/{}/feed.atom", author.uid), &[]).await;
    assert_eq!(valid_atom(&xml), ["Second", "First & foremost"]);
    let (_, _, xml) = fetch(&app, "/t/feeds/feed.atom", &[]).await;
    assert_eq!(valid_atom(&xml), ["First & foremost"]);
    let (status, _, xml) = fetch(&app, "/hot.atom", &[]).await;
    assert_eq!(status, 200);
    valid_atom(&xml);
    assert_eq!(fetch(&app, "/u/99999999/feed.atom", &[]).await.0, 404);

    // Conditional GET: by ETag and by date; a new article changes both.
    let (_, headers, _) = fetch(&app, "/feed.atom", &[]).await;
    let etag = headers[ETAG].to_str().unwrap().to_owned();
    let modified = headers[LAST_MODIFIED].to_str().unwrap().to_owned();
    assert_eq!(
        fetch(&app, "/feed.atom", &[(IF_NONE_MATCH, &etag)]).await.0,
        304
    );
    assert_eq!(
        fetch(&app, "/feed.atom", &[(IF_MODIFIED_SINCE, &modified)])
            .await
            .0,
        304
    );
    // A second passes, so the new article's time is after the header's (whole seconds).
    let later = chrono::DateTime::parse_from_rfc2822(&modified)
        .unwrap()
        .timestamp()
        + 1;
    platform::testing::wait_until("the clock to pass the feed's date", || async {
        chrono::Utc::now().timestamp() > later
    })
    .await;
    publish(&app, &author, "Third", "<p>three</p>").await;
    let (status, _, xml) = fetch(&app, "/feed.atom", &[(IF_NONE_MATCH, &etag)]).await;
    assert_eq!(status, 200);
    assert_eq!(valid_atom(&xml)[0], "Third");
    assert_eq!(
        fetch(&app, "/feed.atom", &[(IF_MODIFIED_SINCE, &modified)])
            .await
            .0,
        200
    );
    app.stop().await.unwrap();
}

/// The `<loc>`s of a sitemap or sitemap index, checked against the protocol's rules: the
/// namespace, absolute URLs under the site of at most 2 048 characters, W3C dates, at most
/// 50 000 entries.
fn valid_sitemap(xml: &str, root: &str) -> Vec<String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let (mut locs, mut path) = (Vec::new(), Vec::<String>::new());
    let mut lastmods = 0;
    loop {
        match reader
            .read_event()
            .unwrap_or_else(|err| panic!("{err}: {xml}"))
        {
            Event::Start(start) => {
                let name = String::from_utf8(start.name().as_ref().to_vec()).unwrap();
                if path.is_empty() {
                    assert_eq!(name, root, "{xml}");
                    let ns = start.try_get_attribute("xmlns").unwrap().unwrap();
                    assert_eq!(&*ns.value, b"http://www.sitemaps.org/schemas/sitemap/0.9");
                }
                path.push(name);
            }
            Event::End(_) => {
                path.pop();
            }
            Event::Text(text) => {
                let text = text.unescape().unwrap().into_owned();
                match path.last().map(String::as_str) {
                    Some("loc") => {
                        assert!(text.starts_with(SITE) && text.len() <= 2048, "{text}");
                        locs.push(text[SITE.len()..].to_owned());
                    }
                    Some("lastmod") => {
                        chrono::DateTime::parse_from_rfc3339(&text).unwrap();
                        lastmods += 1;
                    }
                    _ => {}
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(locs.len() <= 50_000);
    assert_eq!(lastmods, locs.len(), "every entry has its lastmod: {xml}");
    locs
}

async fn sitemaps_list_what_is_published_and_robots_name_them(setup: Setup) {
    let app = app(setup, true).await;
    let author = member(&app, "mapper").await;
    let kept = publish(&app, &author, "Kept", "<p>k</p>").await;
    tag(&app, &author, "分布式 系统", kept).await;
    let gone = publish(&app, &author, "Gone", "<p>g</p>").await;
    data(
        post(
            &app,
            "/articles/withdraw",
            Some(&author.token),
            json!({"id": gone}),
        )
        .await,
    );
    let draft = data(
        post(
            &app,
            "/articles/edit",
            Some(&author.token),
            json!({"title": "d", "content": "<p>d</p>"}),
        )
        .await,
    );

    let (status, _, robots) = fetch(&app, "/robots.txt", &[]).await;
    assert_eq!(status, 200);
    assert!(
        robots.contains(&format!("Sitemap: {SITE}/sitemap.xml")),
        "{robots}"
    );
    assert!(robots.contains("Disallow: /admin/"), "{robots}");

    let (status, _, index) = fetch(&app, "/sitemap.xml", &[]).await;
    assert_eq!(status, 200);
    let sitemaps = valid_sitemap(&index, "sitemapindex");
    assert!(
        sitemaps.contains(&"/sitemaps/articles/0".to_owned()),
        "{index}"
    );
    assert!(
        sitemaps.contains(&"/sitemaps/authors/0".to_owned()),
        "{index}"
    );
    assert!(sitemaps.contains(&"/sitemaps/topics".to_owned()), "{index}");
    let mut urls = Vec::new();
    for sitemap in &sitemaps {
        let (status, headers, xml) = fetch(&app, sitemap, &[]).await;
        assert_eq!(status, 200, "{sitemap}");
        assert!(headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/xml"));
        urls.extend(valid_sitemap(&xml, "urlset"));
    }
    assert!(urls.contains(&format!("/a/{kept}")), "{urls:?}");
    assert!(
        !urls.contains(&format!("/a/{gone}")) && !urls.contains(&format!("/a/{draft}")),
        "{urls:?}"
    );
    assert!(urls.contains(&format!("/u/{}", author.uid)), "{urls:?}");
    assert!(
        urls.contains(&"/t/%E5%88%86%E5%B8%83%E5%BC%8F%20%E7%B3%BB%E7%BB%9F".to_owned()),
        "{urls:?}"
    );
    // Every listed page is there.
    for url in &urls {
        assert_eq!(fetch(&app, url, &[]).await.0, 200, "{url}");
    }
    assert_eq!(fetch(&app, "/sitemaps/articles/-1", &[]).await.0, 404);
    assert_eq!(fetch(&app, "/sitemaps/articles/nine", &[]).await.0, 404);

    // A sitemap is read at most once per TTL (each read scans published articles): an article
    // published since shows on its page only when its sitemap is read again, minutes later.
    let later = publish(&app, &author, "Later", "<p>l</p>").await;
    assert_eq!(fetch(&app, &format!("/a/{later}"), &[]).await.0, 200);
    let (_, _, xml) = fetch(&app, "/sitemaps/articles/0", &[]).await;
    let listed = valid_sitemap(&xml, "urlset");
    assert!(
        listed.contains(&format!("/a/{kept}")) && !listed.contains(&format!("/a/{later}")),
        "the kept entries, not a new read: {listed:?}"
    );
    app.stop().await.unwrap();
}

async fn with_anonymous_reading_off_nothing_public_is_served(setup: Setup) {
    let app = app(setup, false).await;
    let author = member(&app, "private").await;
    let id = publish(&app, &author, "Members only", "<p>inside</p>").await;
    // The page is the console's plain page (which asks for a login), without the content.
    let (status, _, html) = fetch(&app, &format!("/a/{id}"), &[]).await;
    assert_eq!(status, 200);
    assert!(
        !html.contains("Members only") && !html.contains("inside"),
        "{html}"
    );
    for path in [
        "/feed.atom".to_owned(),
        "/hot.atom".into(),
        format!("/u/{}/feed.atom", author.uid),
        "/sitemap.xml".into(),
        "/sitemaps/articles/0".into(),
    ] {
        assert_eq!(fetch(&app, &path, &[]).await.0, 404, "{path}");
    }
    let (_, _, robots) = fetch(&app, "/robots.txt", &[]).await;
    assert!(robots.contains("Disallow: /\n"), "{robots}");
    assert_eq!(get(&app, "/topics/x", None).await.status, 401);
    app.stop().await.unwrap();
}

setup_tests!(
    an_article_page_carries_its_content_and_share_card_and_follows_its_article,
    topics_gather_every_authors_tag_of_a_name_newest_first,
    feeds_validate_and_answer_conditional_gets,
    sitemaps_list_what_is_published_and_robots_name_them,
    with_anonymous_reading_off_nothing_public_is_served,
);
