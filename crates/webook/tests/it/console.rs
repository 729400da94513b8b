//! The web console in a real headless Chromium against the real binary (`common::browser`):
//! - a newcomer signs up, writes and publishes; a reader finds the article on the home page,
//!   reads, likes, collects, comments, follows the author, searches, rewards through the fake
//!   payment page, and the author's account shows the share — each step asserting what the page
//!   shows, then no CSP violation or script error, and the layout at phone width;
//! - a visitor without an account reads an article, its topic, its author's page and search
//!   results, and is asked to sign in only to like, comment, reward, follow the author or the
//!   topic — each time coming back to the same page, where the write then goes through;
//! - the search box suggests articles and people as you type (a pinyin prefix finds a Chinese
//!   title), chosen with the arrow keys and Enter, hidden when the box is emptied;
//! - an admin stops, resumes, edits and triggers a job from the dashboard, and sees the
//!   instances and findings pages; a reader sees no operator pages;
//! - an admin refunds a paid reward from the refunds tab (the author's credit reversed), sees a
//!   refund of a failed payment refused, and credits a payment that arrived after it failed
//!   from the findings tab (a credit without a note refused in the row): who, what and why shown;
//! - an admin watches the events page show what two consumer groups parked (a withdrawal
//!   whose event does not decode), sees a replay of it fail again, discards one with a reason
//!   and, the payload repaired, replays the other's group: the article leaves the hot list;
//! - an admin works the moderation pages: the review queue (a reported article shown as it was
//!   reported, hidden with a reason — and a repeat shown as changing nothing), the audit log, a
//!   word list created and edited, a held article and a held comment approved, the author told
//!   why on their notifications page;
//! - cluster mode: two instances on PostgreSQL + Redis, a change made through one shows on the
//!   other; the unread badge on one instance follows likes, comments and follows made through
//!   the other live (the notification stream), the notifications page shows and reads them;
//! - the badge's stream renews a refused access token by itself, and the badge goes at logout;
//! - the console's assets: versioned, gzipped, cached, under the CSP;
//! - page load times on a seeded 100 000-article database (browser navigation timing), split
//!   into phases (document, scripts, page module, API calls, DOM) with Chromium's main-thread
//!   time (DevTools `Performance.getMetrics`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::Path;

use fantoccini::{key::Key, wd::WindowHandle};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{
    browser::Browser,
    process::{webook, webook_at, Server, BINARY},
};
use platform::testing::{RedisServer, TestDb};

const PASSWORD: &str = "Console-Passw0rd!";
const ACCESS_SECRET: &str = "console-test-access-secret-0123456789";
const REFRESH_SECRET: &str = "console-test-refresh-secret-0123456789";

/// An embedded server with generous rate limits (every sign-in comes from one address).
fn embedded(dir: &Path, env: &[(&str, &str)]) -> Server {
    let mut command = webook(dir);
    command
        .env("WEBOOK_AUTH_RATE_LIMIT", "1000")
        .env("WEBOOK_LOG", "warn,webook::app=info")
        .env("WEBOOK_JOB_POLL_MAX", "200ms");
    for (key, value) in env {
        command.env(key, value);
    }
    Server::start(command)
}

/// Signs up through the page and waits to be logged in.
async fn sign_up(browser: &Browser, server: &Server, email: &str) {
    browser.open(&server.url("/#/signup")).await;
    browser.ready("signup").await;
    browser.fill("input[name=email]", email).await;
    browser.fill("input[name=password]", PASSWORD).await;
    browser.fill("input[name=confirmPassword]", PASSWORD).await;
    browser.click("button[type=submit]").await;
    browser.el("[data-test=whoami]").await;
    left(browser, "signup").await;
}

/// Waits until the console has moved on from `page` and rendered the next one.
async fn left(browser: &Browser, page: &str) {
    browser
        .wait_js(
            &format!("a page after {page}"),
            "const d = document.documentElement.dataset; \
             return d.page !== arguments[0] && d.ready !== undefined;",
            vec![json!(page)],
        )
        .await;
}

/// Logs in through the page.
async fn log_in(browser: &Browser, server: &Server, email: &str) {
    log_in_with(browser, server, email, PASSWORD).await;
}

async fn log_in_with(browser: &Browser, server: &Server, email: &str, password: &str) {
    browser.open(&server.url("/#/login")).await;
    browser.ready("login").await;
    submit_login(browser, email, password).await;
    browser.el("[data-test=whoami]").await;
    left(browser, "login").await;
}

/// On the login page: fills in `email` and `password` and submits.
async fn submit_login(browser: &Browser, email: &str, password: &str) {
    browser.fill("form input[name=email]", email).await;
    browser.fill("form input[name=password]", password).await;
    browser
        .click("form:has(input[name=email]) button[type=submit]")
        .await;
}

async fn log_out(browser: &Browser) {
    browser.click("[data-action=logout]").await;
    browser
        .wait_js(
            "logged out",
            "return document.querySelector('[data-test=whoami]') === null;",
            vec![],
        )
        .await;
}

/// Writes and publishes an article through the editor; returns its id (from the article page
/// the editor lands on).
async fn publish(browser: &Browser, server: &Server, title: &str, text: &str, tags: &str) -> i64 {
    browser.open(&server.url("/#/write")).await;
    browser.ready("editor").await;
    browser.fill("input[name=title]", title).await;
    browser.fill("textarea[name=content]", text).await;
    browser.fill("input[name=tags]", tags).await;
    browser.click("[data-action=publish]").await;
    browser.ready("article").await;
    browser.wait_text("[data-test=title]", title).await;
    let hash = browser.js("return location.hash;", vec![]).await;
    hash.as_str()
        .and_then(|hash| hash.strip_prefix("#/article/"))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("the editor should land on the article, at {hash}"))
}

/// The window that is not `keep`.
async fn other_window(browser: &Browser, keep: &WindowHandle) -> WindowHandle {
    let windows = browser.client().windows().await.unwrap();
    windows
        .into_iter()
        .find(|w| w != keep)
        .expect("a second window")
}

#[tokio::test]
async fn a_newcomer_publishes_and_a_reader_reads_likes_comments_follows_searches_and_rewards() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[]);
    let browser = Browser::start("reader_and_writer").await;

    // The writer: the run command's first page, sign-up, the editor.
    browser.open(&server.url("/")).await;
    browser.ready("home").await;
    browser.el("[data-test=hot]").await;
    sign_up(&browser, &server, "writer@example.com").await;
    let title = "Ownership in Rust 所有权入门";
    let id = publish(
        &browser,
        &server,
        title,
        "Every value has one owner: borrowcheckers agree.\n\n第二段：借用与生命周期。",
        "rust, 入门",
    )
    .await;
    browser
        .wait_text("[data-test=content]", "Every value has one owner")
        .await;
    browser.wait_text("[data-test=content]", "第二段").await;
    browser.wait_text("[data-test=tags]", "rust").await;
    browser.wait_text("[data-test=tags]", "入门").await;
    log_out(&browser).await;

    // A wrong password shows the API's message.
    browser.open(&server.url("/#/login")).await;
    browser.ready("login").await;
    browser
        .fill("form input[name=email]", "writer@example.com")
        .await;
    browser
        .fill("form input[name=password]", "not-the-password-1!")
        .await;
    browser
        .click("form:has(input[name=email]) button[type=submit]")
        .await;
    browser
        .wait_text("[role=alert]", "wrong email or password")
        .await;

    // The reader finds it among the latest articles.
    sign_up(&browser, &server, "reader@example.com").await;
    browser.open(&server.url("/")).await;
    browser.ready("home").await;
    browser.wait_text("[data-test=latest]", title).await;
    browser
        .click(&format!("[data-test=latest] a[href='#/article/{id}']"))
        .await;
    browser.ready("article").await;
    browser.wait_text("[data-test=title]", title).await;
    browser.wait_text("[data-test=author]", "user1").await;

    browser.click("[data-action=like]").await;
    browser
        .wait_attr("[data-action=like]", "aria-pressed", "true")
        .await;
    browser.wait_text("[data-test=likeCnt]", "1").await;
    browser.click("[data-action=collect]").await;
    browser
        .wait_attr("[data-action=collect]", "aria-pressed", "true")
        .await;
    browser.wait_text("[data-test=collectCnt]", "1").await;

    let comment = "Clear explanation <b>not bold</b>, 谢谢！";
    browser.fill("textarea[name=comment]", comment).await;
    browser.click("[data-action=comment]").await;
    browser
        .wait_text("[data-test=comments] .comment", comment)
        .await;
    browser.wait_text("[data-test=commentCnt]", "1").await;
    // A reload shows what the server kept: the like, the collect and the comment, as text.
    browser.client().refresh().await.unwrap();
    browser.ready("article").await;
    browser
        .wait_attr("[data-action=like]", "aria-pressed", "true")
        .await;
    browser
        .wait_text("[data-test=comments] .comment", comment)
        .await;
    let bold = browser
        .js(
            "return document.querySelectorAll('[data-test=comments] b').length;",
            vec![],
        )
        .await;
    assert_eq!(bold, json!(0), "a comment's markup must stay text");

    // The author's page: follow.
    browser.click("[data-test=author]").await;
    browser.ready("user").await;
    browser.wait_text("[data-test=nickname]", "user1").await;
    browser.wait_text("[data-test=articles]", title).await;
    browser.click("[data-action=follow]").await;
    browser
        .wait_attr("[data-action=follow]", "aria-pressed", "true")
        .await;
    browser.wait_text("[data-test=followers]", "1").await;

    // Search, with the match highlighted (the index follows within moments).
    browser
        .wait_js(
            "the search page finds the article",
            "if (!location.hash.startsWith('#/search')) location.hash = '#/search?q=ownership'; \
             const d = document.documentElement.dataset; \
             if (d.page !== 'search' || d.ready === undefined) return false; \
             const list = document.querySelector('[data-test=search-articles]'); \
             if (list && list.innerText.includes(arguments[0])) return true; \
             location.hash = '#/search?q=ownership&again=' + Date.now(); return false;",
            vec![json!(title)],
        )
        .await;
    let highlighted = browser
        .js(
            "return [...document.querySelectorAll('[data-test=search-articles] em')] \
             .map(e => e.textContent.toLowerCase());",
            vec![],
        )
        .await;
    assert!(
        highlighted
            .as_array()
            .unwrap()
            .iter()
            .any(|text| text == "ownership"),
        "{highlighted}"
    );

    // A reward through the fake payment page, in a second window.
    browser.open(&server.url(&format!("/#/article/{id}"))).await;
    browser.ready("article").await;
    // Rewarding is folded away after the comments until asked for.
    browser.click("[data-action=open-reward]").await;
    browser.fill("input[name=amount]", "1.00").await;
    browser.click("[data-action=reward]").await;
    let qr = browser.el("[data-test=qr]").await;
    let qr_src = qr.attr("src").await.unwrap().unwrap();
    let qr_answer = reqwest::get(server.url(&qr_src)).await.unwrap();
    assert_eq!(qr_answer.status(), StatusCode::OK);
    assert!(qr_answer.text().await.unwrap().contains("<svg"));
    browser
        .wait_text("[data-test=reward-status]", "Waiting")
        .await;
    let console_window = browser.client().window().await.unwrap();
    browser.click("[data-test=pay-link]").await;
    let pay_window = other_window(&browser, &console_window).await;
    browser.client().switch_to_window(pay_window).await.unwrap();
    browser.wait_text("#amount", "¥1.00").await;
    browser.click("#pay").await;
    browser.wait_text("#status", "Paid").await;
    browser.client().close_window().await.unwrap();
    browser
        .client()
        .switch_to_window(console_window)
        .await
        .unwrap();
    browser
        .wait_text("[data-test=reward-status]", "Paid, thank you")
        .await;
    assert_eq!(
        browser
            .js(
                "return document.querySelector('a[href=\"#/ops/jobs\"]') === null;",
                vec![]
            )
            .await,
        json!(true),
        "a reader sees no operator pages"
    );
    browser.open(&server.url("/#/me/account")).await;
    browser.ready("account").await;
    browser.wait_text("[data-test=rewards-sent]", "¥1.00").await;

    // The author sees the share (¥1.00 less the platform's 10 %).
    log_out(&browser).await;
    log_in(&browser, &server, "writer@example.com").await;
    browser.open(&server.url("/#/me/account")).await;
    browser.ready("account").await;
    browser.wait_text("[data-test=balance]", "¥0.90").await;
    browser
        .wait_text("[data-test=rewards-received]", title)
        .await;
    browser.open(&server.url("/#/me/articles")).await;
    browser.ready("my-articles").await;
    browser.wait_text("main", title).await;

    // Chinese, and the phone width: nothing wider than the screen.
    browser.client().set_window_size(360, 740).await.unwrap();
    browser.open(&server.url(&format!("/#/article/{id}"))).await;
    browser.ready("article").await;
    let overflow = browser
        .js(
            "return document.documentElement.scrollWidth - window.innerWidth;",
            vec![],
        )
        .await;
    assert!(
        overflow.as_i64().unwrap() <= 0,
        "the article page is {overflow} px wider than a phone"
    );
    browser.click("[data-action=lang]").await;
    browser.wait_text("main", "评论").await;

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

#[tokio::test]
async fn a_visitor_reads_an_article_its_author_a_topic_and_search_and_signs_in_only_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[]);
    let browser = Browser::start("visitor").await;

    browser.open(&server.url("/")).await;
    browser.ready("home").await;
    sign_up(&browser, &server, "reader@example.com").await;
    log_out(&browser).await;
    sign_up(&browser, &server, "author@example.com").await;
    let title = "Readers without accounts 访客也能读";
    let id = publish(&browser, &server, title, "Open to everyone.", "open").await;
    let author = browser
        .js(
            "return document.querySelector('[data-test=author]').getAttribute('href');",
            vec![],
        )
        .await;
    let author = author.as_str().unwrap().to_owned();
    log_out(&browser).await;
    let article = format!("#/article/{id}");

    // A visitor finds it among the latest articles on the home page, and opens it: no login.
    browser.open(&server.url("/")).await;
    browser.ready("home").await;
    browser.wait_text("[data-test=latest]", title).await;
    browser.click("[data-test=latest] a").await;
    browser.ready("article").await;
    browser.wait_text("[data-test=title]", title).await;
    browser
        .wait_text("[data-test=content]", "Open to everyone.")
        .await;
    // Its tag's topic, and its author's page.
    browser.click("[data-test=tags] a").await;
    browser.ready("topic").await;
    browser.wait_text("[data-test=topic-articles]", title).await;
    browser.open(&server.url(&format!("/{article}"))).await;
    browser.ready("article").await;
    browser.click("[data-test=author]").await;
    browser.ready("user").await;
    browser.el("[data-test=followers]").await;
    // Search finds it, in either language, once it is in the index (the page asks once, as a
    // reader's would; the index takes its commit interval, and its first Chinese title builds
    // the word dictionary).
    platform::testing::wait_until("the search index to hold the article", || async {
        server.search_article_ids("访客").await == vec![id]
    })
    .await;
    for query in ["accounts", "访客"] {
        browser
            .open(&server.url(&format!("/#/search?q={query}")))
            .await;
        browser.ready("search").await;
        browser
            .wait_text("[data-test=search-articles]", title)
            .await;
    }
    let at = browser.js("return location.hash;", vec![]).await;
    assert!(
        at.as_str().is_some_and(|at| at.starts_with("#/search?q=")),
        "reading search results must not ask a visitor to sign in: {at}"
    );

    // Each write asks them to sign in, and signing in brings them back to the same page, where
    // the write then goes through.
    // Liking:
    browser.open(&server.url(&format!("/{article}"))).await;
    browser.ready("article").await;
    browser.click("[data-action=like]").await;
    sign_in_and_return(&browser, "article", &article).await;
    browser.wait_text("[data-test=title]", title).await;
    browser.click("[data-action=like]").await;
    browser
        .wait_attr("[data-action=like]", "aria-pressed", "true")
        .await;
    log_out(&browser).await;
    // commenting (what they wrote is lost with the page, as on any site that asks first):
    browser.open(&server.url(&format!("/{article}"))).await;
    browser.ready("article").await;
    browser
        .fill("textarea[name=comment]", "A visitor's first words")
        .await;
    browser.click("[data-action=comment]").await;
    sign_in_and_return(&browser, "article", &article).await;
    browser
        .fill("textarea[name=comment]", "A visitor's first words")
        .await;
    browser.click("[data-action=comment]").await;
    browser
        .wait_text("[data-test=comments]", "A visitor's first words")
        .await;
    log_out(&browser).await;
    // rewarding:
    browser.open(&server.url(&format!("/{article}"))).await;
    browser.ready("article").await;
    browser.click("[data-action=open-reward]").await;
    browser.fill("input[name=amount]", "1.00").await;
    browser.click("[data-action=reward]").await;
    sign_in_and_return(&browser, "article", &article).await;
    browser.el("[data-action=open-reward]").await;
    log_out(&browser).await;
    // following the author:
    browser.open(&server.url(&format!("/{author}"))).await;
    browser.ready("user").await;
    browser.click("[data-action=follow]").await;
    sign_in_and_return(&browser, "user", &author).await;
    browser.click("[data-action=follow]").await;
    browser.wait_text("[data-test=followers]", "1").await;
    log_out(&browser).await;
    // following the topic:
    browser.open(&server.url("/#/topic/open")).await;
    browser.ready("topic").await;
    browser.click("[data-action=follow-topic]").await;
    sign_in_and_return(&browser, "topic", "#/topic/open").await;
    browser.click("[data-action=follow-topic]").await;
    browser
        .wait_attr("[data-action=follow-topic]", "aria-pressed", "true")
        .await;

    // What they did while signed in is theirs: one like, one comment, one follower, one topic.
    let token = server.log_in("reader@example.com", PASSWORD).await;
    let read = api_get(&server, &token, &format!("/articles/pub/{id}")).await;
    assert_eq!(read["likeCnt"], 1, "{read}");
    assert_eq!(read["commentCnt"], 1, "{read}");
    let topics = api_get(&server, &token, "/topics/followed").await;
    assert_eq!(topics.as_array().map(Vec::len), Some(1), "{topics}");

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

/// On the login page a write sent them to (its address names `hash` to come back to): signs in
/// as the reader, and waits for page `page` at `hash`.
async fn sign_in_and_return(browser: &Browser, page: &str, hash: &str) {
    browser.ready("login").await;
    let at = browser.js("return location.hash;", vec![]).await;
    let next = format!("next={}", urlencoding_of(hash));
    assert!(
        at.as_str().is_some_and(|at| at.contains(&next)),
        "the login page should come back to {hash}: {at}"
    );
    submit_login(browser, "reader@example.com", PASSWORD).await;
    browser.ready(page).await;
    browser.el("[data-test=whoami]").await;
    assert_eq!(
        browser.js("return location.hash;", vec![]).await,
        json!(hash)
    );
}

/// On the login page a write sent them to: signs `email` in, and waits for the article titled
/// `title` they came from.
async fn sign_in_and_return_to_article(browser: &Browser, email: &str, title: &str) {
    submit_login(browser, email, PASSWORD).await;
    browser.ready("article").await;
    browser.wait_text("[data-test=title]", title).await;
}

/// `text` as `encodeURIComponent` writes it (the characters of the console's hashes).
fn urlencoding_of(text: &str) -> String {
    text.replace('#', "%23").replace('/', "%2F")
}

#[tokio::test]
async fn a_public_page_reads_without_script_and_the_console_takes_it_over() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[]);
    let browser = Browser::start("public_pages").await;
    sign_up(&browser, &server, "public@example.com").await;
    let title = "Server-rendered 服务端渲染的页面";
    let id = publish(
        &browser,
        &server,
        title,
        "Readable by crawlers.",
        "Rendering",
    )
    .await;
    log_out(&browser).await;

    // Without JavaScript (a crawler, a link preview): the content and the share card are in
    // the page as served.
    let plain = Browser::start_without_script("public_pages_no_script").await;
    plain.open(&server.url(&format!("/a/{id}"))).await;
    let shown = |css: &'static str| {
        let plain = &plain;
        async move {
            let element = plain.el(css).await;
            element.text().await.unwrap()
        }
    };
    assert_eq!(shown("[data-test=ssr-article] h1").await, title);
    assert!(shown("[data-test=ssr-article] .content")
        .await
        .contains("Readable by crawlers."));
    let meta = |css: &'static str| {
        let plain = &plain;
        async move {
            let found = plain
                .client()
                .find(fantoccini::Locator::Css(css))
                .await
                .unwrap();
            found.attr("content").await.unwrap().unwrap_or_default()
        }
    };
    assert_eq!(meta("meta[property='og:title']").await, title);
    assert_eq!(
        meta("meta[property='og:description']").await,
        "Readable by crawlers."
    );
    assert!(meta("meta[property='og:image']")
        .await
        .starts_with("http://"));
    assert_eq!(meta("meta[name='twitter:card']").await, "summary");
    let lang = plain
        .client()
        .find(fantoccini::Locator::Css("html"))
        .await
        .unwrap();
    // Mostly Chinese by its letters' weight: a Chinese page.
    assert_eq!(lang.attr("lang").await.unwrap().as_deref(), Some("zh-CN"));
    // The topic page and the author page too.
    plain.open(&server.url("/t/rendering")).await;
    assert!(shown("[data-test=ssr-topic]").await.contains(title));
    plain
        .click("[data-test=ssr-topic] .article-item .meta a")
        .await;
    assert!(shown("[data-test=ssr-author]").await.contains(title));
    plain.close().await;

    // A visitor searches too: the article is found by its tag, which the hit marks.
    platform::testing::wait_until("the search index to hold the tagged article", || async {
        server.search_article_ids("rendering").await.contains(&id)
    })
    .await;
    browser.open(&server.url("/#/search?q=rendering")).await;
    browser.ready("search").await;
    browser
        .wait_text("[data-test=search-articles]", title)
        .await;
    browser
        .wait_text("[data-test=search-articles] .tag em", "#Rendering")
        .await;

    // With JavaScript, the console takes the page over: the live article, whose like asks the
    // visitor to sign in and brings them back to this very page.
    browser.open(&server.url(&format!("/a/{id}"))).await;
    browser.ready("article").await;
    browser.wait_text("[data-test=title]", title).await;
    browser.click("[data-action=like]").await;
    browser.ready("login").await;
    sign_in_and_return_to_article(&browser, "public@example.com", title).await;
    let path = browser.js("return location.pathname;", vec![]).await;
    assert_eq!(path, json!(format!("/a/{id}")));
    // The topic's page in the console lists it, and following the topic holds across a reload.
    browser.open(&server.url("/t/Rendering")).await;
    browser.ready("topic").await;
    browser.wait_text("[data-test=topic-articles]", title).await;
    browser
        .wait_attr("[data-action=follow-topic]", "aria-pressed", "false")
        .await;
    browser.click("[data-action=follow-topic]").await;
    browser
        .wait_attr("[data-action=follow-topic]", "aria-pressed", "true")
        .await;
    browser.open(&server.url("/#/topic/rendering")).await;
    browser.ready("topic").await;
    browser
        .wait_attr("[data-action=follow-topic]", "aria-pressed", "true")
        .await;
    // Most liked first: the same one article, and the order marked as the current one.
    browser.click("[data-test=topic-sort] a:last-child").await;
    browser.ready("topic").await;
    browser.wait_text("[data-test=topic-articles]", title).await;
    browser
        .wait_attr(
            "[data-test=topic-sort] a:last-child",
            "aria-current",
            "page",
        )
        .await;
    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

#[tokio::test]
async fn the_search_box_suggests_articles_and_people_as_you_type() {
    let dir = tempfile::tempdir().unwrap();
    // The test's polls and the browser's suggestions all come from one address.
    let server = embedded(dir.path(), &[("WEBOOK_SEARCH_RATE_LIMIT", "0")]);
    let browser = Browser::start("search_suggestions").await;
    sign_up(&browser, &server, "suggest@example.com").await;
    let locks_title = "分布式锁的三种实现";
    let locks = publish(
        &browser,
        &server,
        locks_title,
        "数据库、Redis 与 ZooKeeper 各有取舍。",
        "分布式",
    )
    .await;
    let kafka_title = "Kafka 消费者组";
    let kafka = publish(
        &browser,
        &server,
        kafka_title,
        "一个分区只归组里的一个消费者。",
        "消息队列",
    )
    .await;
    // The index follows the publications within moments; these are the words typed below.
    for (q, id) in [("fenbu", locks), ("kafk", kafka)] {
        platform::testing::wait_until(&format!("/search?q={q} to find article {id}"), || async {
            server.search_article_ids(q).await.contains(&id)
        })
        .await;
    }

    browser.open(&server.url("/#/search")).await;
    browser.ready("search").await;
    let list = "[data-test=search-suggestions]";
    browser.wait_attr("#search-q", "role", "combobox").await;
    browser
        .wait_attr("#search-q", "aria-expanded", "false")
        .await;
    let controls = browser
        .js(
            "return document.getElementById('search-q').getAttribute('aria-controls') === \
             document.querySelector(arguments[0]).id;",
            vec![json!(list)],
        )
        .await;
    assert_eq!(controls, json!(true), "the box controls the list");

    // A pinyin prefix (no trailing space: still being typed) suggests the Chinese title.
    browser.fill("#search-q", "fenbu").await;
    let shown = |q: &str, id: i64| {
        format!(
            "{list}[data-q='{q}']:not([hidden]) \
             [data-test=suggestion][role=option][data-kind=article][data-id='{id}']"
        )
    };
    browser.wait_text(&shown("fenbu", locks), locks_title).await;
    browser
        .wait_attr("#search-q", "aria-expanded", "true")
        .await;
    let markup = browser
        .js(
            "return document.querySelector(arguments[0]).innerText;",
            vec![json!(list)],
        )
        .await;
    assert!(
        !markup.as_str().unwrap().contains("<em>"),
        "highlights are elements, not text: {markup}"
    );

    // Another word; ArrowDown chooses the first option, Enter opens it.
    browser.fill("#search-q", "kafk").await;
    browser.wait_text(&shown("kafk", kafka), kafka_title).await;
    browser
        .wait_attr(
            &format!("{list} [data-test=suggestion]"),
            "data-id",
            &kafka.to_string(),
        )
        .await;
    let search_box = browser.el("#search-q").await;
    search_box.send_keys(&Key::Down).await.unwrap();
    browser
        .wait_js(
            "the Kafka suggestion active",
            "const box = document.getElementById('search-q'); \
             const option = document.getElementById(box.getAttribute('aria-activedescendant')); \
             return option !== null && option.dataset.id === arguments[0] && \
               option.getAttribute('aria-selected') === 'true';",
            vec![json!(kafka.to_string())],
        )
        .await;
    search_box.send_keys(&Key::Enter).await.unwrap();
    browser.ready("article").await;
    browser.wait_text("[data-test=title]", kafka_title).await;
    assert_eq!(
        browser.js("return location.hash;", vec![]).await,
        json!(format!("#/article/{kafka}"))
    );

    // Emptying the box, key by key, hides the list.
    browser.open(&server.url("/#/search")).await;
    browser.ready("search").await;
    browser.fill("#search-q", "kafk").await;
    browser.wait_text(&shown("kafk", kafka), kafka_title).await;
    let search_box = browser.el("#search-q").await;
    for _ in 0.."kafk".len() {
        search_box.send_keys(&Key::Backspace).await.unwrap();
    }
    browser
        .wait_attr("#search-q", "aria-expanded", "false")
        .await;
    browser
        .wait_js(
            "the emptied box's list hidden",
            "const box = document.getElementById('search-q'); \
             return box.value === '' && document.querySelector(arguments[0]).hidden;",
            vec![json!(list)],
        )
        .await;

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

/// The admin API as a script: sign-up, login, the token.
async fn api_login(server: &Server, email: &str) -> String {
    server.sign_up_and_log_in(email, PASSWORD).await
}

async fn job_status(server: &Server, token: &str, name: &str) -> Value {
    let jobs = api_get(server, token, "/jobs").await;
    jobs.as_array()
        .unwrap()
        .iter()
        .find(|job| job["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no job {name} in {jobs}"))
}

#[tokio::test]
async fn an_admin_moves_the_database_to_postgresql_from_the_move_page() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[("WEBOOK_ADMINS", "[1]")]);
    api_login(&server, "admin@example.com").await;
    let destination = TestDb::empty_postgres().await;
    let browser = Browser::start("db_move").await;
    log_in(&browser, &server, "admin@example.com").await;
    browser.click("a[href='#/ops/move']").await;
    browser.ready("move").await;
    browser.wait_text("[data-test=move-phase]", "SrcOnly").await;

    browser
        .fill("input[name=destination]", &destination.url)
        .await;
    browser.click("[data-action=move-start]").await;
    browser
        .wait_attr("tr[data-test=move-table-users]", "data-done", "true")
        .await;
    browser
        .wait_text("tr[data-test=move-table-users]", "1 / 1")
        .await;
    browser
        .wait_attr("[data-test=move-task]", "data-state", "done")
        .await;

    browser.click("[data-action=move-switch-SrcFirst]").await;
    browser.accept_dialog().await;
    browser
        .wait_text("[data-test=move-phase]", "SrcFirst")
        .await;
    browser.click("[data-action=move-validate]").await;
    browser
        .wait_attr("[data-test=move-task]", "data-kind", "validate")
        .await;
    browser
        .wait_attr("[data-test=move-task]", "data-state", "done")
        .await;
    // The destination's migration wrote `meta` rows of its own: found, listed, fixed.
    browser.el("tr[data-state=open]").await;
    browser.click("[data-action=move-fix]").await;
    browser
        .wait_attr("[data-test=move-task]", "data-kind", "fix")
        .await;
    browser
        .wait_attr("[data-test=move-task]", "data-state", "done")
        .await;
    browser
        .wait_text("[data-test=move-open-findings]", "0")
        .await;

    browser.click("[data-action=move-switch-DstFirst]").await;
    browser.accept_dialog().await;
    browser
        .wait_text("[data-test=move-phase]", "DstFirst")
        .await;
    // The process now writes to PostgreSQL first: a new member lands there.
    api_login(&server, "after-the-switch@example.com").await;
    let on_postgres: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM users WHERE email = 'after-the-switch@example.com'",
    )
    .fetch_one(&destination_pool(&destination.url).await)
    .await
    .unwrap();
    assert_eq!(on_postgres, 1);

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the page reported {problems:?}");
    browser.close().await;
}

/// A switch whose coordinator hangs (a stall point holds it after every instance paused) is
/// shown with its stage, members and coordinator, and the abort button ends it: the phase
/// stays, the outcome says who aborted, writes are served again.
#[tokio::test]
async fn an_admin_aborts_a_stuck_switch_from_the_move_page() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(
        dir.path(),
        &[
            ("WEBOOK_ADMINS", "[1]"),
            ("WEBOOK_DB_MOVE_STALL", "acknowledged"),
            // Long enough that neither the pause's deadline nor a takeover ends it first.
            ("WEBOOK_DB_MOVE_PAUSE_DEADLINE", "60s"),
        ],
    );
    let token = api_login(&server, "admin@example.com").await;
    let destination = TestDb::empty_postgres().await;
    let browser = Browser::start("db_move_abort").await;
    log_in(&browser, &server, "admin@example.com").await;
    browser.click("a[href='#/ops/move']").await;
    browser.ready("move").await;
    browser
        .fill("input[name=destination]", &destination.url)
        .await;
    browser.click("[data-action=move-start]").await;
    browser
        .wait_attr("[data-test=move-task]", "data-state", "done")
        .await;

    browser.click("[data-action=move-switch-SrcFirst]").await;
    browser.accept_dialog().await;
    browser.wait_text("[data-test=move-stage]", "pause").await;
    browser
        .wait_text("[data-test=move-coordinator]", "lease")
        .await;
    browser.el("[data-action=move-abort]:not([hidden])").await;
    browser.click("[data-action=move-abort]").await;
    browser.accept_dialog().await;
    browser.wait_text("[data-test=move-stage]", "abort").await;
    browser
        .wait_text("[data-test=move-outcome]", "aborted by the operator")
        .await;
    browser.wait_text("[data-test=move-phase]", "SrcOnly").await;
    // Served again: a write answers at once.
    let answer = api_get(&server, &token, "/admin/db-move").await;
    assert_eq!(answer["stage"], "abort", "{answer}");
    api_login(&server, "after-the-abort@example.com").await;

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the page reported {problems:?}");
    browser.close().await;
}

async fn destination_pool(url: &str) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::AnyPool::connect(url).await.unwrap()
}

#[tokio::test]
async fn an_admin_stops_resumes_edits_and_triggers_a_job_from_the_dashboard() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[("WEBOOK_ADMINS", "[1]")]);
    let token = api_login(&server, "admin@example.com").await;
    let browser = Browser::start("jobs_dashboard").await;
    log_in(&browser, &server, "admin@example.com").await;
    browser.click("a[href='#/ops/jobs']").await;
    browser.ready("jobs").await;
    let row = "tr[data-job=ranking]";
    browser
        .wait_text(&format!("{row} [data-test=status]"), "waiting")
        .await;
    browser
        .wait_text(&format!("{row} [data-test=next-time]"), ":")
        .await;

    browser.click(&format!("{row} [data-action=stop]")).await;
    browser.accept_dialog().await;
    // The dashboard shows what the server now says, without a reload.
    browser
        .wait_text(&format!("{row} [data-test=status]"), "paused")
        .await;
    assert_eq!(
        job_status(&server, &token, "ranking").await["status"],
        "paused"
    );
    browser.click(&format!("{row} [data-action=resume]")).await;
    browser
        .wait_text(&format!("{row} [data-test=status]"), "waiting")
        .await;

    // Edit the schedule.
    browser.click(&format!("{row} [data-action=edit]")).await;
    browser.fill("form input[name=cron]", "@every 7m").await;
    browser
        .click("form:has(input[name=cron]) button[type=submit]")
        .await;
    browser.wait_text(row, "@every 7m").await;
    assert_eq!(
        job_status(&server, &token, "ranking").await["cron"],
        "@every 7m"
    );
    // An invalid schedule shows the API's message.
    browser.click(&format!("{row} [data-action=edit]")).await;
    browser.fill("form input[name=cron]", "0 0 25 * * *").await;
    browser
        .click("form:has(input[name=cron]) button[type=submit]")
        .await;
    browser.wait_text("[role=alert]", "hour field").await;

    // Trigger it and watch the run appear with its outcome.
    browser.open(&server.url("/#/ops/jobs")).await;
    browser.ready("jobs").await;
    browser.click(&format!("{row} [data-action=trigger]")).await;
    browser.click(&format!("{row} [data-action=runs]")).await;
    browser.el("[data-test=runs] tr[data-status=ok]").await;

    // Someone else changes a job: the dashboard follows (live refresh).
    let sweep = job_status(&server, &token, "payment_sweep").await;
    let stopped = reqwest::Client::new()
        .post(server.url(&format!("/jobs/{}/stop", sweep["id"])))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status(), StatusCode::OK);
    browser
        .wait_text("tr[data-job=payment_sweep] [data-test=status]", "paused")
        .await;

    browser.open(&server.url("/#/ops/instances")).await;
    browser.ready("instances").await;
    browser.el("tr[data-instance]").await;
    browser.wait_text("tr[data-instance]", "up").await;
    browser.open(&server.url("/#/ops/findings")).await;
    browser.ready("findings").await;

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

/// The ids on the hot list (`GET /ranking/top`).
async fn hot_ids(server: &Server) -> Vec<i64> {
    let (status, body) = server.get_json("/ranking/top").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect()
}

/// The parked events of `group` in `state`, as `GET /admin/events/parked` lists them.
async fn parked_events(server: &Server, token: &str, group: &str, state: &str) -> Vec<Value> {
    api_get(
        server,
        token,
        &format!("/admin/events/parked?group={group}&state={state}"),
    )
    .await
    .as_array()
    .unwrap()
    .clone()
}

#[tokio::test]
async fn an_admin_sees_parked_events_discards_one_and_replays_another_from_the_events_page() {
    let dir = tempfile::tempdir().unwrap();
    // The hot list is computed when the test triggers it, and only then: a recomputation would
    // drop the withdrawn article by itself, whatever happened to its event.
    let server = embedded(
        dir.path(),
        &[
            ("WEBOOK_ADMINS", "[1]"),
            ("WEBOOK_RANKING_SCHEDULE", "@every 1h"),
        ],
    );
    let token = api_login(&server, "admin@example.com").await;
    let publish = |title: &str| {
        api_post(
            &server,
            &token,
            "/articles/publish",
            json!({"title": title, "content": format!("<p>{title}</p>")}),
        )
    };
    let kept = publish("Stays on the hot list").await.as_i64().unwrap();
    let withdrawn = publish("Withdrawn, its event garbled")
        .await
        .as_i64()
        .unwrap();
    let ranking = job_status(&server, &token, "ranking").await;
    api_post(
        &server,
        &token,
        &format!("/jobs/{}/trigger", ranking["id"]),
        Value::Null,
    )
    .await;
    platform::testing::wait_until("the hot list to show both articles", || async {
        let hot = hot_ids(&server).await;
        hot.contains(&kept) && hot.contains(&withdrawn)
    })
    .await;

    let browser = Browser::start("events_page").await;
    log_in(&browser, &server, "admin@example.com").await;
    browser.click("a[href='#/ops/jobs']").await;
    browser.ready("jobs").await;
    browser.click("a[href='#/ops/events']").await;
    browser.ready("events").await;
    let group_row =
        "[data-test=events-groups] tr[data-group=ranking][data-topic=article_withdrawn]";
    browser.wait_attr(group_row, "data-health", "ok").await;
    browser.el("[data-test=no-parked]").await;

    // The writer's bug: the withdrawal commits with an event nobody can decode. The page,
    // polling, shows what the groups did with it.
    let db = crate::common::embedded_db(dir.path()).await;
    crate::common::withdraw_with_a_garbled_event(&db, withdrawn).await;
    let ranking_event =
        "[data-test=events-parked] tr[data-group=ranking][data-topic=article_withdrawn]";
    let feed_event = "[data-test=events-parked] tr[data-group=feed][data-topic=article_withdrawn]";
    for row in [ranking_event, feed_event] {
        browser
            .wait_text(&format!("{row} [data-test=last-error]"), "does not decode")
            .await;
        browser
            .wait_text(&format!("{row} [data-test=failure]"), "permanent")
            .await;
        browser
            .wait_text(&format!("{row} [data-test=attempts]"), "3")
            .await;
        browser
            .wait_text(&format!("{row} [data-test=key]"), &withdrawn.to_string())
            .await;
        browser.wait_attr(row, "data-state", "parked").await;
    }
    browser.wait_attr(group_row, "data-parked", "1").await;
    browser
        .wait_attr(
            "[data-test=events-groups] tr[data-group=feed][data-topic=article_withdrawn]",
            "data-parked",
            "1",
        )
        .await;
    // The payload, on demand.
    browser
        .click(&format!("{ranking_event} [data-test=payload] summary"))
        .await;
    let payload = browser
        .el(&format!("{ranking_event} pre.payload"))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(payload, "\"not json\"");

    // A replay cannot help a payload that does not decode: the group parks it again, and the
    // row shows the new attempt where it was.
    browser
        .click(&format!("{ranking_event} [data-action=replay]"))
        .await;
    browser
        .wait_text("[role=status]", "marked for replay")
        .await;
    browser
        .wait_text(&format!("{ranking_event} [data-test=attempts]"), "4")
        .await;
    browser
        .wait_attr(ranking_event, "data-state", "parked")
        .await;

    // Discard the feed's copy (the feed hides withdrawn articles by itself): a reason is
    // required; given, the event leaves the open list and is kept as discarded.
    browser
        .click(&format!("{feed_event} [data-action=discard]"))
        .await;
    browser
        .click("tr[data-discard] [data-action=discard-confirm]")
        .await;
    browser
        .wait_text("tr[data-discard] [role=alert]", "say why")
        .await;
    let reason = "the feed hides withdrawn articles by itself";
    browser
        .fill("tr[data-discard] input[name=reason]", reason)
        .await;
    browser
        .click("tr[data-discard] [data-action=discard-confirm]")
        .await;
    browser
        .wait_text("[role=status]", "1 event discarded")
        .await;
    browser
        .wait_js(
            "the discarded event to leave the open list",
            "return document.querySelector(arguments[0]) === null;",
            vec![json!(feed_event)],
        )
        .await;
    let discarded = parked_events(&server, &token, "feed", "discarded").await;
    assert_eq!(discarded.len(), 1, "{discarded:?}");
    assert_eq!(discarded[0]["note"], reason);
    assert_eq!(discarded[0]["resolved_by"], "admin:1");
    browser
        .el("#events-state")
        .await
        .select_by_value("discarded")
        .await
        .unwrap();
    browser
        .wait_text(&format!("{feed_event} [data-test=state]"), "discarded")
        .await;
    browser
        .wait_text(&format!("{feed_event} [data-test=resolution]"), reason)
        .await;

    // The writer's bug fixed (here: the row's payload repaired), the whole group replays: the
    // event is applied at last and the withdrawn article leaves the hot list.
    let parked = parked_events(&server, &token, "ranking", "parked").await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    crate::common::repair_parked_payload(
        &db,
        parked[0]["id"].as_i64().unwrap(),
        &crate::common::withdrawal_payload(withdrawn, 1),
    )
    .await;
    browser
        .el("#events-state")
        .await
        .select_by_value("open")
        .await
        .unwrap();
    browser.el(ranking_event).await;
    // Until its withdrawal is applied, the article stays on the hot list.
    assert!(hot_ids(&server).await.contains(&withdrawn));
    browser
        .click(&format!("{group_row} [data-action=replay-group]"))
        .await;
    browser.accept_dialog().await;
    browser
        .wait_js(
            "the replayed event to leave the open list",
            "return document.querySelector(arguments[0]) === null;",
            vec![json!(ranking_event)],
        )
        .await;
    browser
        .wait_text(&format!("{group_row} [data-test=replayed]"), "1")
        .await;
    browser.wait_attr(group_row, "data-parked", "0").await;
    browser.wait_attr(group_row, "data-health", "ok").await;
    let replayed = parked_events(&server, &token, "ranking", "replayed").await;
    assert_eq!(replayed.len(), 1, "{replayed:?}");
    assert_eq!(replayed[0]["resolved_by"], "admin:1");
    platform::testing::wait_until("the withdrawn article to leave the hot list", || async {
        !hot_ids(&server).await.contains(&withdrawn)
    })
    .await;
    assert!(hot_ids(&server).await.contains(&kept));
    db.close().await;

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the page reported {problems:?}");
    browser.close().await;
}

/// A reward of `article` by the holder of `token` with `amt` fen, at the fake provider: its
/// trade number (the last segment of the payment page's URL).
async fn reward_trade(server: &Server, token: &str, article: i64, amt: i64) -> String {
    let created = api_post(
        server,
        token,
        "/articles/pub/reward",
        json!({"id": article, "amt": amt}),
    )
    .await;
    let code_url = created["codeURL"].as_str().unwrap();
    code_url
        .rsplit('/')
        .next()
        .filter(|trade_no| !trade_no.is_empty())
        .unwrap_or_else(|| panic!("a trade number at the end of {code_url}"))
        .to_owned()
}

/// The payer's decision at the fake provider (`success` or `fail`), as its page's buttons send it.
async fn decide(server: &Server, trade_no: &str, result: &str) {
    let answer: Value = reqwest::Client::new()
        .post(server.url(&format!("/pay/fake/{trade_no}/confirm")))
        .json(&json!({ "result": result }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["code"], 0, "{trade_no} {result}: {answer}");
}

/// The balance of the holder of `token` (`GET /account`), fen.
async fn balance_of(server: &Server, token: &str) -> i64 {
    api_get(server, token, "/account").await["balance"]
        .as_i64()
        .unwrap()
}

/// The discrepancies (`status`) about `trade_no`, as the admin route lists them.
async fn findings_of(server: &Server, token: &str, status: &str, trade_no: &str) -> Vec<Value> {
    api_get(
        server,
        token,
        &format!("/payments/discrepancies?status={status}&limit=100"),
    )
    .await["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|found| found["tradeNo"] == trade_no)
        .cloned()
        .collect()
}

/// Chooses `value` in the status filter `select` and waits for the page it navigates to to be
/// rendered (a new `data-ready`, not the one before the choice).
async fn filter(browser: &Browser, select: &str, value: &str) {
    let before = browser
        .js("return document.documentElement.dataset.ready;", vec![])
        .await;
    browser
        .el(select)
        .await
        .select_by_value(value)
        .await
        .unwrap();
    browser
        .wait_js(
            &format!("the page filtered by {value}"),
            "const d = document.documentElement.dataset; \
             return d.ready !== undefined && d.ready !== arguments[0] \
               && location.hash.endsWith('status=' + arguments[1]);",
            vec![before, json!(value)],
        )
        .await;
}

/// How many elements match `css` now.
async fn rows(browser: &Browser, css: &str) -> i64 {
    browser
        .js(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        )
        .await
        .as_i64()
        .unwrap()
}

#[tokio::test]
async fn an_admin_refunds_a_reward_and_credits_a_payment_that_arrived_after_failure_from_the_console(
) {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[("WEBOOK_ADMINS", "[1]")]);
    let admin = api_login(&server, "admin@example.com").await;
    let author = api_login(&server, "author@example.com").await;
    let reader = api_login(&server, "reader@example.com").await;
    let article = api_post(
        &server,
        &author,
        "/articles/publish",
        json!({"title": "Worth a reward", "content": "<p>Worth a reward</p>"}),
    )
    .await
    .as_i64()
    .unwrap();

    // A reward, paid: the author has their share (¥1.00 less the platform's 10 %).
    let paid = reward_trade(&server, &reader, article, 100).await;
    decide(&server, &paid, "success").await;
    platform::testing::wait_until("the author credited ¥0.90", || async {
        balance_of(&server, &author).await == 90
    })
    .await;

    // The admin refunds it from the refunds tab: the refund succeeds at once (the fake provider)
    // and the author's credit is reversed with it.
    let browser = Browser::start("refunds_and_findings").await;
    log_in(&browser, &server, "admin@example.com").await;
    browser.click("a[href='#/ops/jobs']").await;
    browser.ready("jobs").await;
    browser.click("a[href='#/ops/refunds']").await;
    browser.ready("refunds").await;
    browser.el("[data-test=refunds]").await;
    browser.fill("input[name=tradeNo]", &paid).await;
    let reason = "the reader asked: wrong article";
    browser.fill("input[name=reason]", reason).await;
    browser.click("[data-action=refund]").await;
    browser.accept_dialog().await;
    browser
        .wait_attr("[data-test=refund-result]", "data-status", "succeeded")
        .await;
    browser.wait_text("[data-test=refund-result]", &paid).await;
    let refund_row = format!("[data-test=refunds] tr[data-trade='{paid}']");
    browser
        .wait_text(&format!("{refund_row} [data-test=status]"), "succeeded")
        .await;
    browser.wait_text(&refund_row, reason).await;
    browser
        .wait_text(&format!("{refund_row} [data-test=requested-by]"), "admin 1")
        .await;
    assert_eq!(balance_of(&server, &author).await, 0, "the credit reversed");
    let refunds = api_get(&server, &admin, "/payments/refunds?status=succeeded").await;
    let refunds = refunds["items"].as_array().unwrap();
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!(refunds[0]["tradeNo"], paid.as_str());
    assert_eq!(refunds[0]["requestedBy"], 1);
    assert_eq!(refunds[0]["reason"], reason);
    // The status filter: no failed refund; the succeeded one, as the server kept it.
    filter(&browser, "#refunds-status", "failed").await;
    browser.wait_text("main", "No refunds.").await;
    assert_eq!(rows(&browser, "[data-test=refunds] tbody tr").await, 0);
    filter(&browser, "#refunds-status", "succeeded").await;
    browser
        .wait_text(&format!("{refund_row} [data-test=status]"), "succeeded")
        .await;
    assert_eq!(rows(&browser, "[data-test=refunds] tbody tr").await, 1);

    // A second reward whose payment fails: the form shows the API's refusal to refund it.
    let failed = reward_trade(&server, &reader, article, 200).await;
    decide(&server, &failed, "fail").await;
    browser.fill("input[name=tradeNo]", &failed).await;
    browser.fill("input[name=reason]", "not paid").await;
    browser.click("[data-action=refund]").await;
    browser.accept_dialog().await;
    browser
        .wait_text("form [role=alert]", "only a paid payment can be refunded")
        .await;
    assert_eq!(
        api_get(&server, &admin, "/payments/refunds").await["items"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "nothing refunded"
    );

    // …and yet the provider was paid for it (what a payer finishing at the close could leave):
    // the day's reconciliation, run from its job, finds it paid after it failed.
    let now = chrono::Utc::now();
    let db = crate::common::embedded_db(dir.path()).await;
    sqlx::query(
        "UPDATE fake_pay_orders SET state = 'SUCCESS', transaction_id = $1, paid_at = $2 \
         WHERE trade_no = $3",
    )
    .bind(format!("late{failed}"))
    .bind(now.timestamp_millis())
    .bind(&failed)
    .execute(db.writer())
    .await
    .unwrap();
    db.close().await;
    let reconcile = job_status(&server, &admin, "payment_reconcile").await;
    let today = webook::payment::china_today(now)
        .format("%Y-%m-%d")
        .to_string();
    api_post(
        &server,
        &admin,
        &format!("/jobs/{}/edit", reconcile["id"]),
        json!({"cfg": {"date": today}}),
    )
    .await;
    api_post(
        &server,
        &admin,
        &format!("/jobs/{}/trigger", reconcile["id"]),
        Value::Null,
    )
    .await;
    platform::testing::wait_until("reconciliation to find the late payment", || async {
        findings_of(&server, &admin, "open", &failed)
            .await
            .iter()
            .any(|found| found["kind"] == "paid_after_failure")
    })
    .await;

    // The findings tab offers its three actions; a credit without a note is refused in the
    // row, with a note it is done: the row shows who did what, the author is credited.
    browser.click("a[href='#/ops/findings']").await;
    browser.ready("findings").await;
    let row = format!("[data-test=findings] tr[data-trade='{failed}']");
    for action in ["credit", "refund", "resolve"] {
        browser
            .el(&format!("{row} button[data-action={action}]"))
            .await;
    }
    browser
        .el(&format!("{row} input[type=checkbox][name=allowNegative]"))
        .await;
    browser
        .click(&format!("{row} button[data-action=credit]"))
        .await;
    browser
        .wait_text(&format!("{row} [role=alert]"), "say what was done and why")
        .await;
    assert_eq!(
        balance_of(&server, &author).await,
        0,
        "a refused credit credits nothing"
    );
    let note = "the payer finished paying as the order closed";
    browser.fill(&format!("{row} input[name=note]"), note).await;
    browser
        .click(&format!("{row} button[data-action=credit]"))
        .await;
    browser.wait_attr(&row, "data-status", "resolved").await;
    browser
        .wait_text(&format!("{row} [data-test=action]"), "credit")
        .await;
    browser
        .wait_text(&format!("{row} [data-test=acted-by]"), "admin 1")
        .await;
    browser
        .wait_text(&format!("{row} [data-test=note]"), note)
        .await;
    browser
        .wait_text(&format!("{row} [data-test=done]"), "credit")
        .await;
    assert_eq!(
        rows(&browser, &format!("{row} button")).await,
        0,
        "a closed finding offers no action"
    );
    platform::testing::wait_until("the author credited ¥1.80", || async {
        balance_of(&server, &author).await == 180
    })
    .await;
    let closed = findings_of(&server, &admin, "resolved", &failed).await;
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["action"], "credit");
    assert_eq!(closed[0]["actedBy"], 1);
    assert_eq!(closed[0]["note"], note);
    // The status filter: the resolved list shows it as it was closed.
    filter(&browser, "#findings-status", "resolved").await;
    browser
        .wait_text(&format!("{row} [data-test=acted-by]"), "admin 1")
        .await;

    // The refunds tab in Chinese.
    browser.click("a[href='#/ops/refunds']").await;
    browser.ready("refunds").await;
    browser.click("[data-action=lang]").await;
    browser.wait_text("main", "为支付退款").await;
    browser
        .wait_text(
            &format!("{refund_row} [data-test=requested-by]"),
            "管理员 1",
        )
        .await;

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

/// One instance of a two-instance cluster on `db` and `redis`.
fn cluster_instance(dir: &Path, index: usize, db: &TestDb, redis: &RedisServer) -> Server {
    let data_dir = dir.join(format!("instance-{index}"));
    std::fs::create_dir_all(&data_dir).unwrap();
    let mut command = webook(&data_dir);
    command
        .env("WEBOOK_DATABASE_URL", &db.url)
        .env("WEBOOK_REDIS_URL", redis.url())
        .env("WEBOOK_REDIS_PREFIX", "console")
        .env("WEBOOK_JWT_ACCESS_SECRET", ACCESS_SECRET)
        .env("WEBOOK_JWT_REFRESH_SECRET", REFRESH_SECRET)
        .env("WEBOOK_AUTH_RATE_LIMIT", "1000")
        .env("WEBOOK_LOG", "warn,webook::app=info")
        .env("WEBOOK_PAY_PROVIDER", "fake")
        .env("WEBOOK_PAY_ALLOW_FAKE", "true");
    Server::start(command)
}

#[tokio::test]
async fn in_cluster_mode_a_change_made_on_one_instance_shows_on_the_other() {
    let db = TestDb::postgres(&webook::schema::MIGRATIONS).await;
    let redis = RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let first = cluster_instance(dir.path(), 0, &db, &redis);
    let second = cluster_instance(dir.path(), 1, &db, &redis);
    let browser = Browser::start("cluster").await;

    sign_up(&browser, &first, "cluster-writer@example.com").await;
    let title = "Published on the first instance";
    let id = publish(
        &browser,
        &first,
        title,
        "Seen from the second one.",
        "cluster",
    )
    .await;

    // The second instance is another origin: its own login, the same account.
    log_in(&browser, &second, "cluster-writer@example.com").await;
    browser.open(&second.url("/")).await;
    browser.ready("home").await;
    browser.wait_text("[data-test=latest]", title).await;
    browser.open(&second.url("/#/me/articles")).await;
    browser.ready("my-articles").await;
    browser.wait_text("main", title).await;

    // A reader likes it on the second instance; the first shows the like.
    sign_up(&browser, &second, "cluster-reader@example.com").await;
    browser.open(&second.url(&format!("/#/article/{id}"))).await;
    browser.ready("article").await;
    browser.click("[data-action=like]").await;
    browser.wait_text("[data-test=likeCnt]", "1").await;
    log_in(&browser, &first, "cluster-writer@example.com").await;
    browser.open(&first.url(&format!("/#/article/{id}"))).await;
    browser.ready("article").await;
    browser.wait_text("[data-test=likeCnt]", "1").await;

    // And both instances report to the overview (any instance answers for all).
    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

/// `GET path` with `token` (none when empty): the whole envelope, whatever its code.
async fn api_envelope(server: &Server, token: &str, path: &str) -> Value {
    let mut request = reqwest::Client::new().get(server.url(path));
    if !token.is_empty() {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn an_admin_works_the_review_queue_held_articles_and_word_lists_from_the_moderation_page() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[("WEBOOK_ADMINS", "[1]")]);
    let admin = api_login(&server, "admin@example.com").await;
    let author = api_login(&server, "author@example.com").await;
    let reader = api_login(&server, "reader@example.com").await;
    let commenter = api_login(&server, "commenter@example.com").await;
    let article = api_post(
        &server,
        &author,
        "/articles/publish",
        json!({"title": "Spammy offer", "content": "<p>Buy cheap followers now</p>"}),
    )
    .await
    .as_i64()
    .unwrap();
    let comment = api_post(
        &server,
        &commenter,
        "/comments",
        json!({"biz": "article", "bizId": article, "content": "Nice offer, thanks"}),
    )
    .await
    .as_i64()
    .unwrap();
    // Two readers report the article, one the comment.
    for (who, reason, note) in [
        (&reader, "spam", "advertising"),
        (&commenter, "other", "links to a shop"),
    ] {
        api_post(
            &server,
            who,
            "/moderation/reports",
            json!({"kind": "article", "id": article, "reason": reason, "note": note}),
        )
        .await;
    }
    api_post(
        &server,
        &reader,
        "/moderation/reports",
        json!({"kind": "comment", "id": comment, "reason": "abuse"}),
    )
    .await;

    // The queue, reached from the operator pages' tabs: most reported first, each target with
    // its content as reported and its reports.
    let browser = Browser::start("moderation_page").await;
    log_in(&browser, &server, "admin@example.com").await;
    browser.click("a[href='#/ops/jobs']").await;
    browser.ready("jobs").await;
    browser.click("a[href='#/ops/moderation']").await;
    browser.ready("moderation").await;
    let card = format!("[data-test=queue] .mod-item[data-kind=article][data-id='{article}']");
    browser
        .wait_text(
            &format!("{card} [data-test=snapshot]"),
            "Buy cheap followers now",
        )
        .await;
    browser
        .wait_text(&format!("{card} [data-test=snapshot]"), "Spammy offer")
        .await;
    browser
        .wait_text(&format!("{card} [data-test=reports]"), "advertising")
        .await;
    browser
        .wait_text(&format!("{card} [data-test=reports]"), "links to a shop")
        .await;
    browser
        .wait_text(&format!("{card} [data-test=open]"), "2 open reports")
        .await;
    let order = browser
        .js(
            "return [...document.querySelectorAll('[data-test=queue] .mod-item')] \
             .map(c => c.dataset.kind + ' ' + c.dataset.id);",
            vec![],
        )
        .await;
    assert_eq!(
        order,
        json!([format!("article {article}"), format!("comment {comment}")]),
        "most reported first"
    );
    // A user's actions are not offered for an article.
    assert_eq!(
        rows(&browser, &format!("{card} [data-action=suspend]")).await,
        0
    );

    // Hidden with a reason: the article leaves the readers' view and the log says who and why.
    let reason = "advertising is not allowed here";
    browser
        .fill(&format!("{card} input[name=reason]"), reason)
        .await;
    browser.click(&format!("{card} [data-action=hide]")).await;
    browser
        .wait_attr(
            &format!("{card} [data-test=result]"),
            "data-changed",
            "true",
        )
        .await;
    browser
        .wait_text(&format!("{card} [data-test=result]"), "hidden")
        .await;
    browser
        .wait_text(&format!("{card} [data-test=result]"), "reports closed: 2")
        .await;
    let read = api_envelope(&server, &reader, &format!("/articles/pub/{article}")).await;
    assert_eq!(read["code"], 404_001, "a hidden article: {read}");
    let logged = api_get(
        &server,
        &admin,
        &format!("/admin/moderation/log?kind=article&id={article}"),
    )
    .await;
    assert_eq!(logged[0]["action"], "hide", "{logged}");
    assert_eq!(logged[0]["reason"], reason, "{logged}");
    assert_eq!(logged[0]["admin"], 1, "{logged}");
    assert_eq!(logged[0]["outcome"], "hidden", "{logged}");
    // The same again changes nothing, and the page says so.
    browser.click(&format!("{card} [data-action=hide]")).await;
    browser
        .wait_attr(
            &format!("{card} [data-test=result]"),
            "data-changed",
            "false",
        )
        .await;
    browser
        .wait_text(&format!("{card} [data-test=result]"), "Nothing changed")
        .await;

    // The audit log page lists both, newest first.
    browser.click("a[href='#/ops/moderation/log']").await;
    browser.ready("moderation-log").await;
    let entry = format!("[data-test=mod-log] tr[data-kind=article][data-target='{article}']");
    browser
        .wait_text(
            &format!("{entry}[data-action=hide] [data-test=reason]"),
            reason,
        )
        .await;
    assert_eq!(
        rows(&browser, &format!("{entry}[data-action=hide]")).await,
        2
    );

    // Word lists: a new hold list, then edited; the API keeps what the page sent.
    browser.click("a[href='#/ops/moderation/words']").await;
    browser.ready("word-lists").await;
    browser.fill("form input[name=name]", "invoices").await;
    browser
        .el("form:has(#new-list-title) select[name=action]")
        .await
        .select_by_value("hold")
        .await
        .unwrap();
    browser
        .fill("form:has(#new-list-title) textarea[name=words]", "代开发票")
        .await;
    browser.click("[data-action=create-list]").await;
    let list = "[data-test=word-lists] form[data-list=invoices]";
    browser.el(list).await;
    browser
        .fill(
            &format!("{list} textarea[name=words]"),
            "代开发票\nfake receipts\n",
        )
        .await;
    browser
        .click(&format!("{list} [data-action=save-list]"))
        .await;
    browser
        .wait_text(&format!("{list} [role=status]"), "saved")
        .await;
    let lists = api_get(&server, &admin, "/admin/moderation/word-lists").await;
    let saved = lists
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "invoices")
        .unwrap_or_else(|| panic!("no list invoices in {lists}"));
    assert_eq!(saved["action"], "hold", "{saved}");
    assert_eq!(
        saved["words"],
        json!(["代开发票", "fake receipts"]),
        "{saved}"
    );
    assert_eq!(saved["admin"], 1, "{saved}");

    // An article with a word of it is held; approved from the held tab, readers see it.
    let held = api_post(
        &server,
        &author,
        "/articles/publish",
        json!({"title": "Office services", "content": "<p>代开发票, cheap</p>"}),
    )
    .await
    .as_i64()
    .unwrap();
    let hidden = api_envelope(&server, &reader, &format!("/articles/pub/{held}")).await;
    assert_eq!(hidden["code"], 404_001, "a held article: {hidden}");
    browser.click("a[href='#/ops/moderation/held']").await;
    browser.ready("held").await;
    let row = format!("[data-test=held] tr[data-held='{held}']");
    browser
        .wait_text(&format!("{row} [data-test=title]"), "Office services")
        .await;
    browser
        .wait_text(&format!("{row} [data-test=held-reason]"), "invoices")
        .await;
    browser
        .fill(
            &format!("{row} input[name=reason]"),
            "a quote, not an offer",
        )
        .await;
    browser.click(&format!("{row} [data-action=approve]")).await;
    browser.wait_attr(&row, "data-state", "approved").await;
    let public = api_envelope(&server, "", &format!("/articles/pub/{held}")).await;
    assert_eq!(public["code"], 0, "approved: {public}");
    assert_eq!(public["data"]["title"], "Office services", "{public}");

    // A comment with the word is held as well; approved from the same page, it shows.
    let held_comment = api_post(
        &server,
        &reader,
        "/comments",
        json!({"biz": "article", "bizId": held, "content": "代开发票 for me too?"}),
    )
    .await
    .as_i64()
    .unwrap();
    let thread_ids = |thread: Value| -> Vec<i64> {
        thread["data"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["id"].as_i64().unwrap())
            .collect()
    };
    let thread_path = format!("/comments?biz=article&bizId={held}&limit=50");
    let thread = api_envelope(&server, "", &thread_path).await;
    assert!(!thread_ids(thread).contains(&held_comment), "held");
    // Away and back: the held page reads the lists again.
    browser.click("a[href='#/ops/moderation']").await;
    browser.ready("moderation").await;
    browser.click("a[href='#/ops/moderation/held']").await;
    browser.ready("held").await;
    let row = format!("[data-test=held-comments] tr[data-held='{held_comment}']");
    browser
        .wait_text(&format!("{row} [data-test=content]"), "for me too?")
        .await;
    browser
        .fill(&format!("{row} input[name=reason]"), "harmless")
        .await;
    browser.click(&format!("{row} [data-action=approve]")).await;
    browser.wait_attr(&row, "data-state", "approved").await;
    let thread = api_envelope(&server, "", &thread_path).await;
    assert!(thread_ids(thread).contains(&held_comment), "approved");

    // The article's author is told of the approval, and why, on their notifications page.
    log_out(&browser).await;
    log_in(&browser, &server, "author@example.com").await;
    browser.open(&server.url("/#/notifications")).await;
    browser.ready("notifications").await;
    let told = "[data-test=notifications] li[data-kind=moderation]:has([data-action=approve])";
    browser
        .wait_text(&format!("{told} [data-test=moderation]"), "approved")
        .await;
    browser
        .wait_text(
            &format!("{told} [data-test=reason]"),
            "a quote, not an offer",
        )
        .await;

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

/// Waits until the nav's unread badge shows `count`, as the notification stream told it (not a
/// poll: the page was not reloaded, and the stream is what brought it).
async fn badge_from_stream(browser: &Browser, count: i64) {
    browser
        .wait_js(
            &format!("the unread badge at {count}, from the stream"),
            "const b = document.querySelector('[data-test=unread]'); \
             return b !== null && b.dataset.count === arguments[0] && b.dataset.via === 'stream' \
               && b.hidden === (arguments[0] === '0') && window.sameDocument === true;",
            vec![json!(count.to_string())],
        )
        .await;
}

#[tokio::test]
async fn in_cluster_mode_the_unread_badge_follows_what_is_done_on_another_instance_live() {
    let db = TestDb::postgres(&webook::schema::MIGRATIONS).await;
    let redis = RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let first = cluster_instance(dir.path(), 0, &db, &redis);
    let second = cluster_instance(dir.path(), 1, &db, &redis);
    let author = api_login(&first, "live-author@example.com").await;
    let author_uid = user_id(&first, &author).await;
    let fan = api_login(&second, "live-fan@example.com").await;
    let title = "Told at once";
    let article = api_post(
        &first,
        &author,
        "/articles/publish",
        json!({"title": title, "content": "<p>Worth a like.</p>"}),
    )
    .await
    .as_i64()
    .unwrap();

    // The author has the console open on the first instance: no notification yet.
    let browser = Browser::start("live_notifications").await;
    log_in(&browser, &first, "live-author@example.com").await;
    browser.open(&first.url("/#/")).await;
    browser.ready("home").await;
    browser
        .js("window.sameDocument = true; return true;", vec![])
        .await;
    badge_from_stream(&browser, 0).await;

    // The fan acts through the second instance; the badge on the first follows, page unreloaded.
    api_post(
        &second,
        &fan,
        "/articles/pub/like",
        json!({"id": article, "like": true}),
    )
    .await;
    badge_from_stream(&browser, 1).await;
    let words = "A comment from the other instance";
    api_post(
        &second,
        &fan,
        "/comments",
        json!({"biz": "article", "bizId": article, "content": words}),
    )
    .await;
    api_post(
        &second,
        &fan,
        "/follow/follow",
        json!({ "followee": author_uid }),
    )
    .await;
    badge_from_stream(&browser, 3).await;

    // The notifications page shows each kind, unread.
    browser.click("[data-test=notifications-link]").await;
    browser.ready("notifications").await;
    let list = "[data-test=notifications]";
    browser
        .wait_text(
            &format!("{list} li[data-kind=like]"),
            &format!("liked {title}"),
        )
        .await;
    browser
        .wait_text(&format!("{list} li[data-kind=comment]"), words)
        .await;
    browser
        .wait_text(&format!("{list} li[data-kind=follow]"), "followed you")
        .await;
    assert_eq!(
        rows(&browser, &format!("{list} li[data-read=false]")).await,
        3
    );

    // One marked read, then all: the badge follows, and the other instance agrees.
    browser
        .click(&format!("{list} li[data-kind=follow] [data-action=read]"))
        .await;
    browser
        .wait_attr(&format!("{list} li[data-kind=follow]"), "data-read", "true")
        .await;
    browser
        .wait_attr("[data-test=unread]", "data-count", "2")
        .await;
    browser.click("[data-action=read-all]").await;
    browser
        .wait_attr("[data-test=unread]", "data-count", "0")
        .await;
    assert_eq!(
        rows(&browser, &format!("{list} li[data-read=false]")).await,
        0
    );
    assert_eq!(
        api_get(&second, &author, "/notifications/unread").await["count"],
        0
    );

    // A second person's like joins the day's like of the article: one row, "2 people liked".
    let other = api_login(&second, "live-other@example.com").await;
    api_post(
        &second,
        &other,
        "/articles/pub/like",
        json!({"id": article, "like": true}),
    )
    .await;
    badge_from_stream(&browser, 1).await;
    // The list is read when the page is opened: away and back (the same document).
    browser.click("a.brand").await;
    browser.ready("home").await;
    browser.click("[data-test=notifications-link]").await;
    browser.ready("notifications").await;
    browser
        .wait_text(
            &format!("{list} li[data-kind=like][data-read=false]"),
            &format!("2 people liked {title}"),
        )
        .await;
    assert_eq!(
        rows(&browser, &format!("{list} li[data-kind=like]")).await,
        1
    );

    // Preferences: follows muted from the page, as the API keeps them.
    browser
        .click("[data-test=preferences] input[value=follow]")
        .await;
    browser.click("[data-action=save-preferences]").await;
    browser.wait_text("[data-test=prefs-status]", "Saved").await;
    assert_eq!(
        api_get(&first, &author, "/notifications/preferences").await["muted"],
        json!(["follow"])
    );

    // Logging out takes the badge away.
    log_out(&browser).await;
    assert_eq!(rows(&browser, "[data-test=unread]").await, 0);

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

/// The id of the holder of `token` (`GET /users/profile` answers the bare profile).
async fn user_id(server: &Server, token: &str) -> i64 {
    let profile: Value = reqwest::Client::new()
        .get(server.url("/users/profile"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    profile["Id"].as_i64().unwrap()
}

#[tokio::test]
async fn the_unread_badge_renews_a_refused_token_and_goes_at_logout() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[]);
    let author = api_login(&server, "badge@example.com").await;
    let fan = api_login(&server, "badge-fan@example.com").await;
    let browser = Browser::start("badge_token").await;
    log_in(&browser, &server, "badge@example.com").await;

    // An access token the server refuses, on a page that calls nothing else: the stream's own
    // 401 renews it (with the refresh token, as every call does) and the stream then works.
    browser
        .js(
            "localStorage.setItem('webook.access', 'not.a.token'); return true;",
            vec![],
        )
        .await;
    browser.open(&server.url("/?renew=1#/no-such-page")).await;
    browser.ready("notfound").await;
    browser
        .js("window.sameDocument = true; return true;", vec![])
        .await;
    badge_from_stream(&browser, 0).await;
    let polls = browser
        .js(
            "return document.querySelector('[data-test=unread]').dataset.polls ?? null;",
            vec![],
        )
        .await;
    assert_eq!(
        polls,
        Value::Null,
        "the stream renewed the token itself, never down"
    );
    let renewed = browser
        .js("return localStorage.getItem('webook.access');", vec![])
        .await;
    assert_ne!(renewed, json!("not.a.token"), "the token was renewed");
    let author_id = user_id(&server, &author).await;
    api_post(
        &server,
        &fan,
        "/follow/follow",
        json!({ "followee": author_id }),
    )
    .await;
    badge_from_stream(&browser, 1).await;

    // Logged out: no badge, and the notifier stopped (it forgets the count it had).
    log_out(&browser).await;
    assert_eq!(rows(&browser, "[data-test=unread]").await, 0);
    let kept = browser
        .js(
            "const app = document.querySelector('script[type=module]').src; \
             return import(app.replace(/app\\.js$/, 'notify.js')).then((m) => m.unread());",
            vec![],
        )
        .await;
    assert_eq!(kept, Value::Null, "the notifier still holds a count");

    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}

#[tokio::test]
async fn assets_are_versioned_gzipped_cached_and_under_a_strict_policy() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[]);
    // reqwest here does not decompress: the encoding is seen as sent.
    let client = reqwest::Client::new();
    let page = client
        .get(server.url("/"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let headers = page.headers().clone();
    assert_eq!(headers["content-encoding"], "gzip");
    assert_eq!(headers["cache-control"], "no-cache");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    let etag = headers["etag"].to_str().unwrap().to_owned();
    let again = client
        .get(server.url("/"))
        .header("accept-encoding", "gzip")
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);

    let html = client.get(server.url("/")).send().await.unwrap();
    assert!(html.headers().get("content-encoding").is_none());
    let html = html.text().await.unwrap();
    assert!(!html.contains("{{assets}}"));
    let script = html
        .split("src=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .find(|src| src.starts_with("/assets/") && src.ends_with("/app.js"))
        .unwrap_or_else(|| panic!("index.html loads no versioned app.js:\n{html}"))
        .to_owned();
    let file = client
        .get(server.url(&script))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(file.status(), StatusCode::OK);
    assert_eq!(
        file.headers()["cache-control"],
        "public, max-age=31536000, immutable"
    );
    assert_eq!(file.headers()["content-encoding"], "gzip");
    assert!(file.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));

    // Another version's path is not this version's file; API routes are untouched.
    let stale = client
        .get(server.url("/assets/0123456789abcdef/app.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::NOT_FOUND);
    let (status, body) = server.get_json("/healthz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = server.get_json("/ranking/top").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = server.get_json("/console/qr.svg?text=").await;
    assert_eq!(
        (status, body["code"].clone()),
        (StatusCode::OK, json!(4)),
        "{body}"
    );
}

/// `POST path` with `token` and `body` (none when `Null`): the envelope's `data`.
async fn api_post(server: &Server, token: &str, path: &str, body: Value) -> Value {
    let mut request = reqwest::Client::new()
        .post(server.url(path))
        .bearer_auth(token);
    if !body.is_null() {
        request = request.json(&body);
    }
    let answer: Value = request.send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["code"], 0, "{path}: {answer}");
    answer["data"].clone()
}

/// `GET path` with `token`: the envelope's `data`.
async fn api_get(server: &Server, token: &str, path: &str) -> Value {
    let body: Value = reqwest::Client::new()
        .get(server.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["code"], 0, "{path}: {body}");
    body["data"].clone()
}

/// Loads of each page measured (after one to warm the browser's cache).
const TIMED_LOADS: usize = 5;
/// What a page load may take, median of [`TIMED_LOADS`], served by an optimised build. The
/// target is 100 ms; the browser alone takes ~75 ms for a page with no API call on the test
/// machine (the `notfound` row), and the slowest page measured 105 ms (docs/PERFORMANCE.md →
/// Web console), so the bound leaves that much room and no more.
const PAGE_LOAD_BUDGET_MS: f64 = 120.0;
/// The same served by the unoptimised test build, whose server spends several times longer on
/// each API call (measured: 76–123 ms where the release build takes under 100): still far
/// below what a scan of the 100 000 articles or a missing index would cost. Under the whole
/// suite's load (`scripts/test.sh`, 2026-12-06) even a page with no API call took 103 ms and
/// search 261 ms at the median, and in a later run (two more pages, the same load) the article
/// page 366 ms and search 369 ms, with every page two to three times its time alone (31–110 ms):
/// what the test build measures under the suite is the machine's load, so its bound only
/// catches what costs seconds — a scan of the 100 000 articles, a missing index, a page stalled
/// behind its own open streams (13 s, found and fixed with the unread badge). The precise
/// budget is the optimised build's, above.
const DEBUG_PAGE_LOAD_BUDGET_MS: f64 = 1000.0;

/// Every console page, loaded as a new document on the database `webook seed` makes with
/// 100 000 articles: the time from the navigation's start to the page's `console-ready` mark
/// (its API calls answered and painted), by the browser's own clock. The binary is the test
/// build unless `WEBOOK_CONSOLE_TIMING_BINARY` names another (the release build, for the
/// figures in docs/PERFORMANCE.md).
#[tokio::test]
async fn console_pages_load_within_budget_on_a_seeded_100_000_article_database() {
    let (binary, budget) = match std::env::var("WEBOOK_CONSOLE_TIMING_BINARY") {
        Ok(binary) => (binary, PAGE_LOAD_BUDGET_MS),
        Err(_) => (BINARY.to_owned(), DEBUG_PAGE_LOAD_BUDGET_MS),
    };
    let dir = tempfile::tempdir().unwrap();
    let seeded = webook_at(&binary, dir.path())
        .args([
            "seed",
            "--users",
            "10000",
            "--articles",
            "100000",
            "--likes",
            "500000",
            "--collects",
            "50000",
            "--reads",
            "10000000",
            "--days",
            "30",
            "--seed",
            "1",
        ])
        .output()
        .unwrap();
    assert!(
        seeded.status.success(),
        "webook seed failed: {}",
        String::from_utf8_lossy(&seeded.stderr)
    );
    let mut command = webook_at(&binary, dir.path());
    command
        .env("WEBOOK_ADMINS", "[1]")
        .env("WEBOOK_LOG", "warn,webook::app=info");
    let server = Server::start(command);
    // The search index of 100 000 articles is built at the first start (about a minute in a
    // debug build).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(600);
    while server.get_json("/readyz").await.1["data"]["details"]["search"] != "ready" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "search index not built"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }

    let email = "seed1@example.com";
    let password = "seed-Password-1!";
    let login = reqwest::Client::new()
        .post(server.url("/users/login"))
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .unwrap();
    let token = login.headers()["x-jwt-token"].to_str().unwrap().to_owned();
    let hot = api_get(&server, &token, "/ranking/top?limit=20").await;
    let hot = hot.as_array().unwrap();
    let article = &hot[0];
    let mut tag = None;
    for item in hot {
        let tags = api_get(
            &server,
            &token,
            &format!("/tags/biz?biz=article&bizId={}", item["id"]),
        )
        .await;
        if let Some(first) = tags.as_array().unwrap().first() {
            tag = Some(first["id"].clone());
            break;
        }
    }
    let tag = tag.expect("a hot article with tags");
    let word = article["title"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let pages = [
        // No API call at all: the browser's own cost of a console page (the floor).
        ("notfound", "#/no-such-page".to_owned()),
        ("home", "#/".to_owned()),
        ("article", format!("#/article/{}", article["id"])),
        ("user", format!("#/user/{}", article["author"]["id"])),
        ("tag", format!("#/tag/{tag}")),
        ("search", format!("#/search?q={word}")),
        ("my-articles", "#/me/articles".to_owned()),
        ("account", "#/me/account".to_owned()),
        ("jobs", "#/ops/jobs".to_owned()),
        ("notifications", "#/notifications".to_owned()),
        ("moderation", "#/ops/moderation".to_owned()),
    ];

    let browser = Browser::start("page_timing").await;
    log_in_with(&browser, &server, email, password).await;
    let mut report = Vec::new();
    let mut over = Vec::new();
    for (page, hash) in &pages {
        let mut loads = Vec::new();
        for load in 0..=TIMED_LOADS {
            // Chromium's own accounting of its main thread (counted per document).
            browser.cdp("Performance.enable", json!({})).await;
            // A query string makes each load a new document (the hash alone would not).
            browser
                .open(&server.url(&format!("/?load={load}{hash}")))
                .await;
            browser.ready(page).await;
            let after = main_thread(&browser).await;
            let phases = browser.js(LOAD_PHASES, vec![]).await;
            let mut phases: Phases = serde_json::from_value(phases).expect("the load's phases");
            (phases.script, phases.layout, phases.task) = after;
            if load > 0 {
                loads.push(phases);
            }
        }
        let median = |of: fn(&Phases) -> f64| {
            let mut values: Vec<f64> = loads.iter().map(of).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let ready = median(|p| p.ready);
        let (min, max) = loads
            .iter()
            .map(|p| p.ready)
            .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
        report.push(format!(
            "{page:<12} median {ready:6.1} ms (min {min:5.1}, max {max:5.1}) | document {:5.1} \
             boot {:5.1} module {:5.1} api {:5.1} ({} calls, server {:4.1}) render {:5.1} | \
             main thread: busy {:5.1}, script {:5.1}, layout+style {:5.1}",
            median(|p| p.document),
            median(|p| p.boot),
            median(|p| p.module),
            median(|p| p.api),
            loads[0].calls,
            median(|p| p.server),
            median(|p| p.render),
            median(|p| p.task),
            median(|p| p.script),
            median(|p| p.layout),
        ));
        if ready > budget {
            over.push(page.to_owned());
        }
    }
    eprintln!(
        "console page loads ({binary}), navigation start to console-ready, medians of \
         {TIMED_LOADS} loads each, in ms:\n{}",
        report.join("\n")
    );
    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    assert!(
        over.is_empty(),
        "pages over {budget} ms: {over:?}\n{}",
        report.join("\n")
    );
    browser.close().await;
}

/// Where one page load's time went, by the browser's clock (ms from the navigation's start):
/// the document's response, the console's scripts up to routing (`boot`), the page's module,
/// its API calls (`server`: the slowest call's wait for its first byte), building its DOM
/// (`render`); and Chromium's main-thread time: busy in all (`task`), in script, and in layout
/// and style.
#[derive(serde::Deserialize)]
struct Phases {
    ready: f64,
    document: f64,
    boot: f64,
    module: f64,
    api: f64,
    calls: u64,
    server: f64,
    render: f64,
    #[serde(default)]
    script: f64,
    #[serde(default)]
    layout: f64,
    #[serde(default)]
    task: f64,
}

/// Splits the load at the console's marks and the page's fetches (Resource Timing).
const LOAD_PHASES: &str = "
    const at = (name) => performance.getEntriesByName(name)[0].startTime;
    const nav = performance.getEntriesByType('navigation')[0];
    const ready = at('console-ready'), routed = at('console-route');
    const loaded = performance.getEntriesByName('console-module').length ? at('console-module') : routed;
    const calls = performance.getEntriesByType('resource')
      .filter((r) => r.initiatorType === 'fetch' && r.startTime >= loaded && r.responseEnd <= ready);
    const answered = calls.length ? Math.max(...calls.map((r) => r.responseEnd)) : loaded;
    const server = calls.length ? Math.max(...calls.map((r) => r.responseStart - r.requestStart)) : 0;
    return { ready, document: nav.responseEnd, boot: routed - nav.responseEnd, module: loaded - routed,
             api: answered - loaded, calls: calls.length, server, render: ready - answered };";

/// The document's main-thread time so far in script, in layout and style recalculation, and in
/// all tasks (Chromium's `Performance.getMetrics`, seconds), in ms.
async fn main_thread(browser: &Browser) -> (f64, f64, f64) {
    let metrics = browser.cdp("Performance.getMetrics", json!({})).await;
    let metric = |name: &str| {
        metrics["metrics"]
            .as_array()
            .and_then(|all| all.iter().find(|m| m["name"] == name))
            .and_then(|m| m["value"].as_f64())
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
            * 1000.0
    };
    (
        metric("ScriptDuration"),
        metric("LayoutDuration") + metric("RecalcStyleDuration"),
        metric("TaskDuration"),
    )
}

/// The live settings page: an admin reaches it from the operator tabs, changes a limit (the
/// API then answers the new value and the server enforces it), sees a refused value's one-line
/// message under its row, resets the limit, and finds both changes in the log; the settings
/// that need a restart are listed apart, read-only.
#[tokio::test]
async fn an_admin_changes_and_resets_a_live_setting_from_the_settings_page() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[("WEBOOK_ADMINS", "[1]")]);
    let admin = api_login(&server, "admin@example.com").await;
    let browser = Browser::start("settings_page").await;
    log_in(&browser, &server, "admin@example.com").await;
    browser.click("a[href='#/ops/jobs']").await;
    browser.ready("jobs").await;
    browser.click("a[href='#/ops/settings']").await;
    browser.ready("settings").await;
    let row = "[data-test=live-settings] tr[data-setting=comment_rate_limit]";
    browser
        .wait_text(&format!("{row} [data-test=set-by]"), "start-up value")
        .await;
    browser.fill(&format!("{row} input[name=value]"), "1").await;
    browser
        .click(&format!("{row} [data-action=save-setting]"))
        .await;
    browser
        .wait_text(&format!("{row} [data-test=set-by]"), "admin 1")
        .await;
    let stored = api_get(&server, &admin, "/admin/settings/comment_rate_limit").await;
    assert_eq!(
        (stored["value"].clone(), stored["overridden"].clone()),
        (json!(1), json!(true)),
        "{stored}"
    );
    // A value the server refuses: its message under the row, nothing stored.
    let window = "[data-test=live-settings] tr[data-setting=comment_rate_window]";
    browser
        .fill(&format!("{window} input[name=value]"), "0s")
        .await;
    browser
        .click(&format!("{window} [data-action=save-setting]"))
        .await;
    browser
        .wait_text(
            &format!("{window} [role=alert]"),
            "invalid comment_rate_window (WEBOOK_COMMENT_RATE_WINDOW): must be above 0",
        )
        .await;
    let window_stored = api_get(&server, &admin, "/admin/settings/comment_rate_window").await;
    assert_eq!(window_stored["overridden"], json!(false), "{window_stored}");
    // Reset: back to the start-up value.
    browser
        .click(&format!("{row} [data-action=reset-setting]"))
        .await;
    browser
        .wait_text(&format!("{row} [data-test=set-by]"), "start-up value")
        .await;
    let reset = api_get(&server, &admin, "/admin/settings/comment_rate_limit").await;
    assert_eq!(reset["overridden"], json!(false), "{reset}");
    // The log: the reset, then the change.
    browser
        .wait_text(
            "[data-test=settings-log] tr[data-key=comment_rate_limit]",
            "admin 1",
        )
        .await;
    let entries: i64 = browser
        .js(
            "return document.querySelectorAll('[data-test=settings-log] tr[data-key=comment_rate_limit]').length",
            vec![],
        )
        .await
        .as_i64()
        .unwrap();
    assert_eq!(entries, 2);
    // Restart-only settings are listed (folded away), but not as live rows.
    browser.click("details summary").await;
    browser.el("details tr[data-setting=listen]").await;
    let live_listen: i64 = browser
        .js(
            "return document.querySelectorAll('[data-test=live-settings] tr[data-setting=listen]').length",
            vec![],
        )
        .await
        .as_i64()
        .unwrap();
    assert_eq!(live_listen, 0);
    let problems = browser.problems().await;
    assert!(problems.is_empty(), "{problems:?}");
    browser.close().await;
}

/// With the live stream switched off for everyone (`notifications_stream = off`, the grey
/// release's switch), the stream answers 204 and the badge learns the count by polling at once,
/// without an error on the page.
#[tokio::test]
async fn with_the_stream_switched_off_the_unread_badge_polls() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(dir.path(), &[("WEBOOK_NOTIFICATIONS_STREAM", "off")]);
    let author = api_login(&server, "switched-off@example.com").await;
    let fan = api_login(&server, "switched-off-fan@example.com").await;
    let author_id = user_id(&server, &author).await;
    api_post(
        &server,
        &fan,
        "/follow/follow",
        json!({ "followee": author_id }),
    )
    .await;
    platform::testing::wait_until("the follow's notification", || async {
        api_get(&server, &author, "/notifications/unread").await["count"] == json!(1)
    })
    .await;
    let browser = Browser::start("badge_switched_off").await;
    log_in(&browser, &server, "switched-off@example.com").await;
    browser
        .wait_js(
            "the unread badge at 1, from a poll",
            "const b = document.querySelector('[data-test=unread]'); \
             return b !== null && b.dataset.count === '1' && b.dataset.via === 'poll' && !b.hidden;",
            vec![],
        )
        .await;
    let off = server
        .metric("feature_switch_decisions_total{switch=\"notifications_stream\",variant=\"off\"}")
        .await;
    assert!(off >= 1.0, "the stream was asked for and refused: {off}");
    let problems = browser.problems().await;
    assert!(problems.is_empty(), "the pages reported {problems:?}");
    browser.close().await;
}
