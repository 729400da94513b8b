//! Search on {SQLite, PostgreSQL} × {embedded, Redis streams}: Chinese substrings of 2, 3 and 4
//! characters over jieba-segmented text, English with typeahead, mixed queries; tag matches
//! outrank body matches; what is published or withdrawn shows within 2 s; paging returns every
//! hit once; bad input is answered with code 4 and odd syntax as text; highlights escape the
//! text; email and phone are never indexed nor answered; a rebuild from the database gives the
//! same results as the index fed by events; an index directory that disappears makes search
//! report `degraded` while queries are still answered from the last good index, and search
//! recovers by itself once the directory is back — rebuilt when it comes back empty, taken as
//! it is when it is a copy of the last commit or was rebuilt from the database since (as
//! `webook search reindex` does). (Several instances and a killed one resuming: `cluster.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use common::{get, member, post, Member, Setup};
use platform::testing::wait_until;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use webook::{
    search::{
        feeder::{Feeder, Readiness},
        index::{self, ArticleDoc, Change, IndexState, SearchIndex},
        query,
        store::SearchStore,
        SearchService, SearchType,
    },
    testing::TestApp,
};

/// What the issue allows between a change and its visibility in search.
const VISIBLE_WITHIN: Duration = Duration::from_secs(2);

async fn app(setup: Setup) -> TestApp {
    setup
        .spawn(|config| {
            let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
            auth.auth_rate_limit = 1_000_000;
            auth.write_rate_limit = 0;
        })
        .await
}

fn escape(q: &str) -> String {
    url::form_urlencoded::byte_serialize(q.as_bytes()).collect()
}

/// `/search` data for `q` (`kind` all/article/user), asserting code 0.
async fn search(app: &TestApp, q: &str, kind: &str) -> Value {
    let answer = get(
        app,
        &format!("/search?q={}&type={kind}&limit=50", escape(q)),
        None,
    )
    .await;
    assert_eq!(answer.code(), 0, "{q}: {}", answer.raw);
    answer.json()["data"].clone()
}

async fn article_ids(app: &TestApp, q: &str) -> Vec<i64> {
    ids(&search(app, q, "article").await["articles"])
}

fn ids(list: &Value) -> Vec<i64> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect()
}

/// Waits until `q` finds exactly `expected` (any order), failing after [`VISIBLE_WITHIN`].
async fn visible(app: &TestApp, q: &str, expected: &[i64]) {
    let started = Instant::now();
    let mut expected = expected.to_vec();
    expected.sort_unstable();
    loop {
        let mut found = article_ids(app, q).await;
        found.sort_unstable();
        if found == expected {
            return;
        }
        assert!(
            started.elapsed() < VISIBLE_WITHIN,
            "{q}: found {found:?}, expected {expected:?} within {VISIBLE_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn publish(app: &TestApp, author: &Member, title: &str, content: &str) -> i64 {
    let answer = post(
        app,
        "/articles/publish",
        Some(&author.token),
        json!({"title": title, "content": content}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].as_i64().unwrap()
}

async fn search_ready(app: &TestApp) {
    platform::testing::wait_until("the search index is ready", || async {
        app.get_json("/readyz").await.1["data"]["details"]["search"] == "ready"
    })
    .await;
}

/// The corpus of the recall tests: (title, content).
const CORPUS: &[(&str, &str)] = &[
    (
        "Rust 安装简单",
        "<p>这个数据库的安装非常简单，性能也很好。</p>",
    ),
    (
        "分布式系统设计",
        "<p>一致性和可用性之间需要权衡。Database replication matters.</p>",
    ),
    (
        "缓存的使用",
        "<p>缓存可以提升性能，但要小心&lt;script&gt;缓存击穿。</p>",
    ),
];

async fn corpus(app: &TestApp) -> (Member, Vec<i64>) {
    search_ready(app).await;
    let author = member(app, "searchauthor").await;
    let mut ids = Vec::new();
    for (title, content) in CORPUS {
        ids.push(publish(app, &author, title, content).await);
    }
    visible(app, "性能", &[ids[0], ids[2]]).await;
    (author, ids)
}

async fn chinese_substrings_english_and_mixed_queries_find_their_articles(setup: Setup) {
    let app = app(setup).await;
    let (_, ids) = corpus(&app).await;
    let (rust, distributed, cache) = (ids[0], ids[1], ids[2]);
    let cases: &[(&str, &[i64])] = &[
        // Two characters, one of them a word of its own and one across jieba's words.
        ("简单", &[rust]),
        ("装简", &[rust]),
        ("性能", &[rust, cache]),
        // Three characters across word boundaries.
        ("库的安", &[rust]),
        ("致性和", &[distributed]),
        // Four.
        ("安装非常", &[rust]),
        ("提升性能", &[cache]),
        // Words apart in the text: every word must be there.
        ("安装简单", &[rust]),
        ("安装复杂", &[]),
        // English, case-insensitive, with the last word as a prefix (typeahead).
        ("database", &[distributed]),
        ("DATABASE REPLIC", &[distributed]),
        ("replic ", &[]),
        // Mixed scripts.
        ("Rust 安装", &[rust]),
        ("Database 权衡", &[distributed]),
        ("rust缓存", &[]),
    ];
    for (q, expected) in cases {
        let mut found = article_ids(&app, q).await;
        found.sort_unstable();
        let mut expected = expected.to_vec();
        expected.sort_unstable();
        assert_eq!(found, expected, "query {q:?}");
    }
    // The title match ranks above the body-only match.
    assert_eq!(article_ids(&app, "缓存").await, [cache]);
    let both = article_ids(&app, "性能").await;
    assert_eq!(both.len(), 2);
}

async fn hits_show_highlights_escaped_and_page_every_hit_once(setup: Setup) {
    let app = app(setup).await;
    let (author, corpus_ids) = corpus(&app).await;
    let data = search(&app, "装简", "article").await;
    let hit = &data["articles"]["items"][0];
    assert_eq!(hit["id"], corpus_ids[0]);
    assert_eq!(hit["highlight"]["title"], "Rust 安<em>装简</em>单");
    assert_eq!(hit["author"]["id"], author.uid);
    assert_eq!(hit["tags"], json!([]));
    assert!(hit["ctime"].as_i64().unwrap() > 0);
    let data = search(&app, "缓存击穿", "article").await;
    let content = data["articles"]["items"][0]["highlight"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        content.contains("&lt;script&gt;<em>缓存击穿</em>"),
        "{content}"
    );
    assert!(!content.contains("<script"), "{content}");

    // 23 hits in pages of 5: each once, in one order.
    let mut paged = Vec::new();
    for n in 0..23 {
        paged.push(publish(&app, &author, &format!("分页测试 {n}"), "<p>内容</p>").await);
    }
    visible(&app, "分页测试", &paged).await;
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(cursor) => format!(
                "/search?q={}&type=article&limit=5&cursor={cursor}",
                escape("分页测试")
            ),
            None => format!("/search?q={}&type=article&limit=5", escape("分页测试")),
        };
        let answer = get(&app, &path, None).await;
        assert_eq!(answer.code(), 0, "{}", answer.raw);
        let data = answer.json()["data"].clone();
        let page = ids(&data["articles"]);
        assert!(page.len() <= 5);
        seen.extend(page);
        match data["articles"]["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "a hit came twice: {seen:?}");
    paged.sort_unstable();
    assert_eq!(sorted, paged);
}

/// Issue 46, item 6: the freshness nudge moves every score as time passes; a cursor keeps the
/// time its first page was ranked at, so pages asked for an hour apart each still continue
/// where the last one stopped.
async fn pages_asked_for_as_time_passes_show_every_hit_once(setup: Setup) {
    let app = app(setup).await;
    search_ready(&app).await;
    let author = member(&app, "pager").await;
    let mut published = Vec::new();
    for n in 0..6 {
        published.push(publish(&app, &author, &format!("翻页时钟 {n}"), "<p>正文</p>").await);
    }
    visible(&app, "翻页时钟", &published).await;
    let search: SearchService = app.service();
    let start = platform::db::now_millis();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    // Six hits in pages of two: three pages, and a few more asked for only if pages repeat.
    for page in 0..8 {
        let now = start + page * 3_600_000;
        let results = search
            .search_at("翻页时钟", SearchType::Article, cursor.as_deref(), 2, now)
            .await
            .unwrap();
        seen.push(
            results
                .articles
                .items
                .iter()
                .map(|hit| hit.id)
                .collect::<Vec<_>>(),
        );
        match results.articles.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut all: Vec<i64> = seen.iter().flatten().copied().collect();
    all.sort_unstable();
    published.sort_unstable();
    assert_eq!(all, published, "pages {seen:?}");

    // A cursor whose time was edited is refused (code 4), never a 5xx.
    let first = get(
        &app,
        &format!("/search?q={}&type=article&limit=2", escape("翻页时钟")),
        None,
    )
    .await;
    let next = first.json()["data"]["articles"]["next"]
        .as_str()
        .unwrap()
        .to_owned();
    let [list, bits, id, _at] = platform::page::decode_cursor::<4>(&next).unwrap();
    let now = platform::db::now_millis();
    for at in [
        i64::MIN,
        -1,
        0,
        now - 2 * 86_400_000,
        now + 3_600_000,
        i64::MAX,
    ] {
        let edited = platform::page::encode_cursor(&[list, bits, id, at]);
        let answer = get(
            &app,
            &format!(
                "/search?q={}&type=article&limit=2&cursor={edited}",
                escape("翻页时钟")
            ),
            None,
        )
        .await;
        assert_eq!(
            answer.status_and_code(),
            (reqwest::StatusCode::OK, 4),
            "{at}: {}",
            answer.raw
        );
    }
}

/// An operator's synonyms apply without a reindex or a restart: a group added to the file
/// finds its articles within a few seconds; a broken file keeps the groups read last.
async fn synonyms_from_the_operator_s_file_apply_without_a_reindex(setup: Setup) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("synonyms.txt");
    std::fs::write(&file, "vm, 虚拟机\n").unwrap();
    let path = file.clone();
    let app = setup
        .spawn(move |config| {
            let search = config.settings_mut::<webook::search::SearchSettings>();
            search.search_synonyms = path;
        })
        .await;
    search_ready(&app).await;
    let author = member(&app, "synonyms").await;
    let vm = publish(&app, &author, "虚拟机的内存", "<p>气球驱动</p>").await;
    let ship = publish(&app, &author, "容器编排入门", "<p>调度</p>").await;
    visible(&app, "虚拟机 ", &[vm]).await;
    assert_eq!(article_ids(&app, "vm ").await, [vm]);
    // The built-in groups still apply.
    assert_eq!(article_ids(&app, "容器编排 ").await, [ship]);
    assert_eq!(article_ids(&app, "orchestration ").await, Vec::<i64>::new());
    // A group added to the file applies once it is read again (within 2 s of the change).
    std::fs::write(&file, "vm, 虚拟机\norchestration, 容器编排\n").unwrap();
    let later = std::time::SystemTime::now() + Duration::from_secs(1);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(later)
        .unwrap();
    platform::testing::wait_until("the new group applies", || async {
        article_ids(&app, "orchestration ").await == [ship]
    })
    .await;
    assert_eq!(article_ids(&app, "vm ").await, [vm]);
    // A file that cannot be read keeps the groups read last, and says so in the metrics
    // (process-wide: counted from where it stood).
    let errors = || async {
        app.metrics_text()
            .await
            .lines()
            .find(|line| line.starts_with("search_synonyms_reload_errors_total"))
            .and_then(|line| line.split_whitespace().last())
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = errors().await;
    std::fs::remove_file(&file).unwrap();
    platform::testing::wait_until("the failed read is counted", || async {
        article_ids(&app, "vm ").await == [vm] && errors().await > before
    })
    .await;
    assert_eq!(article_ids(&app, "orchestration ").await, [ship]);
}

/// Issue 46, item 5: `/search` is limited per client address (in cluster mode through Redis).
async fn searches_beyond_the_per_address_limit_answer_429(setup: Setup) {
    let app = setup
        .spawn(|config| {
            let search = config.settings_mut::<webook::search::SearchSettings>();
            search.search_rate_limit = 3;
            search.search_rate_window = Duration::from_secs(60);
            // The tests connect from 127.0.0.1: as a proxy, each forwarded client counts apart.
            config.trusted_proxies = vec!["127.0.0.1/32".into()];
        })
        .await;
    search_ready(&app).await;
    let search_from = |client: &'static str, q: &'static str| {
        let request = app
            .client
            .get(app.url(&format!("/search?q={q}")))
            .header("x-forwarded-for", client);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let retry_after = response
                .headers()
                .get("retry-after")
                .map(|value| value.to_str().unwrap().parse::<u64>().unwrap());
            let body: Value = response.json().await.unwrap();
            (status, body["code"].as_i64().unwrap(), retry_after)
        }
    };
    // Refused input counts too: the limit is on what an address asks.
    assert_eq!(search_from("198.51.100.7", "rust").await.1, 0);
    assert_eq!(search_from("198.51.100.7", "%21%21").await.1, 4);
    assert_eq!(search_from("198.51.100.7", "rust").await.1, 0);
    let (status, code, retry_after) = search_from("198.51.100.7", "rust").await;
    assert_eq!(
        (status, code),
        (reqwest::StatusCode::TOO_MANY_REQUESTS, 429001)
    );
    let retry_after = retry_after.expect("a Retry-After header");
    assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    // Another address has its own allowance.
    assert_eq!(
        search_from("198.51.100.8", "rust").await,
        (reqwest::StatusCode::OK, 0, None)
    );
}

async fn bad_input_is_code_4_and_odd_syntax_is_text(setup: Setup) {
    let app = app(setup).await;
    search_ready(&app).await;
    for path in [
        format!("/search?q={}", "a".repeat(101)),
        "/search?q=".to_owned(),
        "/search?q=%21%21%21".to_owned(),
        "/search?q=rust&type=tags".to_owned(),
        "/search?q=rust&limit=101".to_owned(),
        "/search?q=rust&limit=0".to_owned(),
        "/search?q=rust&cursor=garbage".to_owned(),
        "/search?q=rust&type=user&cursor=MS4xLjE".to_owned(),
        "/search?q=a%00b".to_owned(),
    ] {
        let answer = get(&app, &path, None).await;
        assert_eq!(answer.code(), 4, "{path}: {}", answer.raw);
    }
    for q in [
        "title:(rust AND",
        "\"unclosed",
        "a* ~ ^2 [1 TO 2]",
        "\\ rust",
        "🦀 rust",
    ] {
        search(&app, q, "all").await;
    }
    // A hundred characters is allowed.
    search(&app, &"安".repeat(100), "all").await;
}

async fn tag_matches_outrank_body_matches(setup: Setup) {
    let app = app(setup).await;
    search_ready(&app).await;
    let author = member(&app, "tagger").await;
    let mentioned_twice = publish(
        &app,
        &author,
        "笔记一",
        "<p>消息队列很好，消息队列很快。</p>",
    )
    .await;
    let tagged = publish(&app, &author, "笔记二", "<p>今天聊聊消息队列。</p>").await;
    visible(&app, "消息队列", &[mentioned_twice, tagged]).await;
    assert_eq!(
        article_ids(&app, "消息队列").await,
        [mentioned_twice, tagged]
    );
    let tag = post(
        &app,
        "/tags",
        Some(&author.token),
        json!({"name": "消息队列"}),
    )
    .await;
    let tag = tag.json()["data"].as_i64().unwrap();
    let attached = post(
        &app,
        "/tags/attach",
        Some(&author.token),
        json!({"biz": "article", "bizId": tagged, "tids": [tag]}),
    )
    .await;
    assert_eq!(attached.code(), 0, "{}", attached.raw);
    let started = Instant::now();
    while article_ids(&app, "消息队列").await != [tagged, mentioned_twice] {
        assert!(
            started.elapsed() < VISIBLE_WITHIN,
            "the tag did not lift the tagged article"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let data = search(&app, "消息队列", "article").await;
    assert_eq!(data["articles"]["items"][0]["tags"], json!(["消息队列"]));
}

async fn published_and_withdrawn_articles_show_within_two_seconds(setup: Setup) {
    let app = app(setup).await;
    search_ready(&app).await;
    let author = member(&app, "visibility").await;
    let id = publish(&app, &author, "可见性检查", "<p>正文</p>").await;
    visible(&app, "可见性检查", &[id]).await;
    let withdrawn = post(
        &app,
        "/articles/withdraw",
        Some(&author.token),
        json!({"id": id}),
    )
    .await;
    assert_eq!(withdrawn.code(), 0, "{}", withdrawn.raw);
    // The database says withdrawn at once: never served again, even before the index knows.
    assert_eq!(article_ids(&app, "可见性检查").await, Vec::<i64>::new());
    visible(&app, "可见性检查", &[]).await;
    // Republished (an edit with a new title) comes back under the new title only.
    let republished = post(
        &app,
        "/articles/publish",
        Some(&author.token),
        json!({"id": id, "title": "重新发布检查", "content": "<p>正文</p>"}),
    )
    .await;
    assert_eq!(republished.code(), 0, "{}", republished.raw);
    visible(&app, "重新发布检查", &[id]).await;
    visible(&app, "可见性检查", &[]).await;
}

async fn email_and_phone_are_never_indexed_nor_answered(setup: Setup) {
    let app = app(setup).await;
    search_ready(&app).await;
    let user = member(&app, "privatefellow").await;
    let edit = post(
        &app,
        "/users/edit",
        Some(&user.token),
        json!({"nickname": "隐私小明", "aboutMe": "喜欢写 Rust 代码"}),
    )
    .await;
    assert_eq!(edit.code(), 0, "{}", edit.raw);
    sqlx::query("UPDATE users SET phone = '13800138000' WHERE id = $1")
        .bind(user.uid)
        .execute(app.platform.db.pool())
        .await
        .unwrap();
    platform::testing::wait_until("the profile is searchable", || async {
        ids(&search(&app, "隐私小明", "user").await["users"]) == [user.uid]
    })
    .await;
    let answer = get(
        &app,
        &format!("/search?q={}", escape("隐私小明 Rust")),
        None,
    )
    .await;
    let hit = &answer.json()["data"]["users"]["items"][0];
    assert_eq!(hit["id"], user.uid);
    assert_eq!(hit["nickname"], "隐私小明");
    assert_eq!(hit["aboutMe"], "喜欢写 Rust 代码");
    assert_eq!(common::sorted_keys(hit), ["aboutMe", "id", "nickname"]);
    for q in [
        "privatefellow",
        "privatefellow@webook.test",
        "webook.test",
        "13800138000",
        "隐私小明",
    ] {
        let answer = get(&app, &format!("/search?q={}", escape(q)), None).await;
        assert!(!answer.raw.contains("privatefellow"), "{q}: {}", answer.raw);
        assert!(!answer.raw.contains("13800138000"), "{q}: {}", answer.raw);
    }
    for q in ["privatefellow", "13800138000", "webook.test"] {
        let data = search(&app, q, "all").await;
        assert_eq!(data["users"]["items"], json!([]), "{q}");
        assert_eq!(data["articles"]["items"], json!([]), "{q}");
    }
}

async fn a_rebuild_from_the_database_gives_the_same_results(setup: Setup) {
    let app = app(setup).await;
    let (author, _) = corpus(&app).await;
    let mut added = Vec::new();
    for n in 0..10 {
        added.push(
            publish(
                &app,
                &author,
                &format!("重建 {n} 数据库"),
                "<p>Database 性能 安装</p>",
            )
            .await,
        );
    }
    let queries = [
        "性能",
        "数据库",
        "安装",
        "database",
        "重建 数据",
        "Rust 安装",
    ];
    // Fed by events: wait until the last article is in.
    visible(&app, "重建", &added).await;
    let dir = tempfile::tempdir().unwrap();
    let (index, state) = SearchIndex::open(dir.path(), 20_000_000).unwrap();
    assert!(state.is_none(), "a new index is to be rebuilt");
    let feeder = Feeder::new(
        Arc::new(index),
        SearchStore::new(app.platform.db.clone()),
        Arc::new(Readiness::default()),
        Default::default(),
    );
    let rows = feeder
        .rebuild(Default::default(), &CancellationToken::new(), |_, _| {})
        .await
        .unwrap()
        .unwrap();
    assert!(rows >= 13, "{rows} rows");
    drop(feeder);
    let (rebuilt, state) = SearchIndex::open(dir.path(), 20_000_000).unwrap();
    assert!(state.unwrap().complete);
    let searcher = rebuilt.reader().searcher();
    for q in queries {
        let now = platform::db::now_millis();
        let hits = query::ranked(&searcher, rebuilt.fields(), index::ARTICLE, q, 50, now).unwrap();
        let from_rebuild: Vec<i64> = hits.iter().map(|hit| hit.id).collect();
        assert!(!from_rebuild.is_empty(), "{q}");
        assert_eq!(article_ids(&app, q).await, from_rebuild, "{q}");
    }
}

/// The index directory of `app` (under its data dir).
fn index_dir(app: &TestApp) -> std::path::PathBuf {
    let config = &app.platform.config;
    config
        .settings::<webook::search::SearchSettings>()
        .unwrap()
        .dir(config)
}

/// `/readyz` → `details.search`.
async fn search_status(app: &TestApp) -> String {
    let (status, body) = app.get_json("/readyz").await;
    // Search's health is a detail: the instance itself stays ready.
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    body["data"]["details"]["search"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn a_lost_index_directory_degrades_search_until_it_is_back(setup: Setup) {
    let app = app(setup).await;
    search_ready(&app).await;
    let author = member(&app, "lostindex").await;
    let before = publish(&app, &author, "故障之前", "<p>索引还在</p>").await;
    visible(&app, "故障之前", &[before]).await;

    // As a failed or full index volume would: the directory is gone.
    let dir = index_dir(&app);
    std::fs::remove_dir_all(&dir).unwrap();
    let during = publish(&app, &author, "故障期间", "<p>索引不在</p>").await;
    platform::testing::wait_until("search reports degraded", || async {
        search_status(&app).await.starts_with("degraded")
    })
    .await;
    assert_eq!(
        search_status(&app).await,
        "degraded: index directory missing"
    );
    // Queries are still answered, from the last good index.
    assert_eq!(article_ids(&app, "故障之前").await, [before]);
    assert_eq!(article_ids(&app, "故障期间").await, Vec::<i64>::new());

    // The directory comes back empty: the feeder rebuilds and catches up by itself.
    std::fs::create_dir(&dir).unwrap();
    platform::testing::wait_until("search is ready again", || async {
        search_status(&app).await == "ready"
    })
    .await;
    assert_eq!(article_ids(&app, "故障期间").await, [during]);
    assert_eq!(article_ids(&app, "故障之前").await, [before]);
    let after = publish(&app, &author, "故障之后", "<p>索引恢复</p>").await;
    visible(&app, "故障之后", &[after]).await;
}

/// The reproduction: with the search index gone (a full or failed index volume), every
/// other consumer keeps flowing — a new article reaches a follower's feed, a read is counted, a
/// paid reward is credited to the author — while `/readyz` names search. (Before consumer
/// groups were isolated, the search group's retries held every other group in embedded mode.)
async fn an_unwritable_index_leaves_feed_rewards_and_read_counts_flowing(setup: Setup) {
    let app = app(setup).await;
    search_ready(&app).await;
    let author = member(&app, "sickauthor").await;
    let reader = member(&app, "sickreader").await;
    let followed = post(
        &app,
        "/follow/follow",
        Some(&reader.token),
        json!({ "followee": author.uid }),
    )
    .await;
    assert_eq!(followed.code(), 0, "{}", followed.raw);
    std::fs::remove_dir_all(index_dir(&app)).unwrap();

    let id = publish(&app, &author, "索引坏了", "<p>别的照常</p>").await;
    // The feed.
    platform::testing::wait_until("the article to reach the follower's feed", || async {
        let feed = get(&app, "/feed?limit=10", Some(&reader.token))
            .await
            .json();
        feed["data"]["items"].as_array().is_some_and(|items| {
            items
                .iter()
                .any(|item| item.to_string().contains(&id.to_string()))
        })
    })
    .await;
    // Read counts.
    let read = get(&app, &format!("/articles/pub/{id}"), Some(&reader.token)).await;
    assert_eq!(read.code(), 0, "{}", read.raw);
    platform::testing::wait_until("the read to be counted", || async {
        let read_cnt: Option<i64> = sqlx::query_scalar(
            "SELECT read_cnt FROM interactives WHERE biz = 'article' AND biz_id = $1",
        )
        .bind(id)
        .fetch_optional(app.platform.db.pool())
        .await
        .unwrap();
        read_cnt.is_some_and(|count| count >= 1)
    })
    .await;
    // Rewards: paid on the fake provider's page, credited to the author by the consumer.
    let ordered = post(
        &app,
        "/articles/pub/reward",
        Some(&reader.token),
        json!({ "id": id, "amt": 500 }),
    )
    .await;
    assert_eq!(ordered.code(), 0, "{}", ordered.raw);
    let code_url = ordered.json()["data"]["codeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let trade_no = code_url.strip_prefix("/pay/fake/").unwrap().to_owned();
    let paid = post(
        &app,
        &format!("/pay/fake/{trade_no}/confirm"),
        None,
        json!({ "result": "success" }),
    )
    .await;
    assert_eq!(paid.code(), 0, "{}", paid.raw);
    platform::testing::wait_until("the author to be credited", || async {
        get(&app, "/account", Some(&author.token)).await.json()["data"]["balance"]
            .as_i64()
            .is_some_and(|balance| balance > 0)
    })
    .await;
    // And search says what is wrong with it: nothing above waited for it.
    platform::testing::wait_until("search reports degraded", || async {
        search_status(&app).await.starts_with("degraded")
    })
    .await;
}

/// Copies the files of the index directory `from` into a new directory `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

async fn a_restored_copy_of_the_last_commit_is_taken_as_it_is(setup: Setup) {
    let app = app(setup).await;
    search_ready(&app).await;
    let author = member(&app, "restoredindex").await;
    let before = publish(&app, &author, "备份之前", "<p>索引备份</p>").await;
    visible(&app, "备份之前", &[before]).await;
    let dir = index_dir(&app);
    let backup = dir.with_extension("backup");
    copy_dir(&dir, &backup);

    std::fs::remove_dir_all(&dir).unwrap();
    let during = publish(&app, &author, "备份期间", "<p>索引不在</p>").await;
    platform::testing::wait_until("search reports degraded", || async {
        search_status(&app).await.starts_with("degraded")
    })
    .await;
    // Written behind the event stream: only a rebuild from the database would index it.
    sqlx::query("UPDATE published_articles SET title = '幕后改名' WHERE id = $1")
        .bind(before)
        .execute(app.platform.db.pool())
        .await
        .unwrap();

    // The copy holds the index's last commit: taken as it is, then the failed batch applied.
    std::fs::rename(&backup, &dir).unwrap();
    platform::testing::wait_until("search is ready again", || async {
        search_status(&app).await == "ready"
    })
    .await;
    assert_eq!(article_ids(&app, "备份期间").await, [during]);
    assert_eq!(article_ids(&app, "备份之前").await, [before]);
    assert_eq!(article_ids(&app, "幕后改名").await, Vec::<i64>::new());
}

async fn an_index_rebuilt_since_the_failure_is_taken_as_it_is(setup: Setup) {
    let app = app(setup).await;
    search_ready(&app).await;
    let author = member(&app, "reindexed").await;
    let before = publish(&app, &author, "重建之前", "<p>索引还在</p>").await;
    visible(&app, "重建之前", &[before]).await;
    let dir = index_dir(&app);
    std::fs::remove_dir_all(&dir).unwrap();
    let during = publish(&app, &author, "重建期间", "<p>索引不在</p>").await;
    platform::testing::wait_until("search reports degraded", || async {
        search_status(&app).await.starts_with("degraded")
    })
    .await;

    // What `webook search reindex` does, beside the directory, then moved into place.
    let rebuilt_dir = dir.with_extension("rebuilt");
    let heads = app
        .platform
        .events
        .heads(webook::search::feeder::TOPICS)
        .await
        .unwrap();
    let (rebuilt, _) = SearchIndex::open(&rebuilt_dir, 20_000_000).unwrap();
    let feeder = Feeder::new(
        Arc::new(rebuilt),
        SearchStore::new(app.platform.db.clone()),
        Arc::new(Readiness::default()),
        Default::default(),
    );
    feeder
        .rebuild(heads, &CancellationToken::new(), |_, _| {})
        .await
        .unwrap()
        .unwrap();
    drop(feeder);
    // Written behind the event stream after that rebuild: only another rebuild would see it.
    sqlx::query("UPDATE published_articles SET title = '幕后改名' WHERE id = $1")
        .bind(before)
        .execute(app.platform.db.pool())
        .await
        .unwrap();
    std::fs::rename(&rebuilt_dir, &dir).unwrap();

    platform::testing::wait_until("search is ready again", || async {
        search_status(&app).await == "ready"
    })
    .await;
    assert_eq!(article_ids(&app, "重建期间").await, [during]);
    assert_eq!(article_ids(&app, "重建之前").await, [before]);
    assert_eq!(article_ids(&app, "幕后改名").await, Vec::<i64>::new());
}

fn article_change(id: i64, title: &str) -> Change {
    Change::Article(ArticleDoc {
        id,
        title: title.to_owned(),
        text: String::new(),
        author: "author".to_owned(),
        tags: Vec::new(),
        ctime: 1,
        likes: 0,
    })
}

fn complete(built_at: i64) -> IndexState {
    IndexState {
        schema: index::SCHEMA_VERSION,
        complete: true,
        positions: Default::default(),
        built_at,
    }
}

/// Segments merged away after the last commit leave the reader too: it searches the merged
/// segment and no longer maps the deleted files (it kept them, and their disk space, until the
/// next commit).
#[tokio::test]
async fn the_reader_lets_go_of_segments_merged_after_the_last_commit() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("index");
    let (index, _) = SearchIndex::open(&dir, 20_000_000).unwrap();
    // Tantivy merges once 8 small segments exist: the 8th, 15th and 22nd commits start a
    // merge, and the last one ends after its commit has reloaded the reader.
    const MERGED_AT: usize = 8;
    let commits = 22;
    for n in 0..commits {
        let changes = (0..5)
            .map(|k| article_change(n * 5 + k + 1, &format!("article {n} {k}")))
            .collect();
        index.apply(changes, &complete(1)).unwrap();
    }
    let deleted_mappings = || {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter(|line| line.contains(dir.to_str().unwrap()) && line.ends_with("(deleted)"))
            .count()
    };
    wait_until(
        "the merges to end and the reader to search their segment",
        || async {
            let searchable = index.index().searchable_segment_ids().unwrap();
            let read: Vec<_> = index
                .reader()
                .searcher()
                .segment_readers()
                .iter()
                .map(|segment| segment.segment_id())
                .collect();
            searchable.len() < MERGED_AT
                && read.len() == searchable.len()
                && read.iter().all(|id| searchable.contains(id))
        },
    )
    .await;
    wait_until("no merged-away segment to stay mapped", || async {
        deleted_mappings() == 0
    })
    .await;
    let searcher = index.reader().searcher();
    assert_eq!(searcher.num_docs(), u64::try_from(commits * 5).unwrap());
}

#[test]
fn a_commit_is_known_by_its_mark_wherever_its_files_are() {
    let root = tempfile::tempdir().unwrap();
    let (first, _) = SearchIndex::open(&root.path().join("first"), 20_000_000).unwrap();
    first
        .apply(vec![article_change(1, "one")], &complete(1))
        .unwrap();
    let mark = first.committed().unwrap();

    let copy_dir_path = root.path().join("copy");
    copy_dir(first.dir(), &copy_dir_path);
    let (copy, state) = SearchIndex::open(&copy_dir_path, 20_000_000).unwrap();
    assert_eq!(state, Some(complete(1)));
    assert_eq!(copy.committed(), Some(mark.clone()));

    first
        .apply(vec![article_change(2, "two")], &complete(1))
        .unwrap();
    assert_ne!(first.committed(), Some(mark.clone()), "a later commit");

    // The same documents from another rebuild: another mark.
    let (other, _) = SearchIndex::open(&root.path().join("other"), 20_000_000).unwrap();
    other
        .apply(vec![article_change(1, "one")], &complete(2))
        .unwrap();
    assert_ne!(other.committed(), Some(mark));
}

#[test]
fn a_lost_directory_is_never_recreated_and_its_reader_still_answers() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("index");
    let (lost, _) = SearchIndex::open(&dir, 20_000_000).unwrap();
    lost.apply(vec![article_change(1, "one")], &complete(1))
        .unwrap();

    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(lost.count(index::ARTICLE).unwrap(), 1);
    assert!(lost
        .apply(vec![article_change(2, "two")], &complete(1))
        .is_err());
    lost.close_writer();
    assert!(lost.reopen().is_err());
    assert!(!dir.exists(), "reopen created the directory");

    std::fs::create_dir(&dir).unwrap();
    let (reopened, state) = lost.reopen().unwrap();
    assert_eq!(state, None, "an empty directory is to be rebuilt");
    reopened
        .apply(vec![article_change(2, "two")], &complete(2))
        .unwrap();
    assert_eq!(reopened.count(index::ARTICLE).unwrap(), 1);
    assert_eq!(lost.count(index::ARTICLE).unwrap(), 1);
}

crate::setup_tests!(
    chinese_substrings_english_and_mixed_queries_find_their_articles,
    hits_show_highlights_escaped_and_page_every_hit_once,
    pages_asked_for_as_time_passes_show_every_hit_once,
    searches_beyond_the_per_address_limit_answer_429,
    bad_input_is_code_4_and_odd_syntax_is_text,
    tag_matches_outrank_body_matches,
    published_and_withdrawn_articles_show_within_two_seconds,
    email_and_phone_are_never_indexed_nor_answered,
    a_rebuild_from_the_database_gives_the_same_results,
    synonyms_from_the_operator_s_file_apply_without_a_reindex,
    a_lost_index_directory_degrades_search_until_it_is_back,
    a_restored_copy_of_the_last_commit_is_taken_as_it_is,
    an_index_rebuilt_since_the_failure_is_taken_as_it_is,
    an_unwritable_index_leaves_feed_rewards_and_read_counts_flowing,
);

/// Every like changes its article's popularity in the index, so a stream of likes is a stream
/// of index changes; a commit costs the index a new segment whatever it holds. The real server
/// (its own process, so its metrics are its own), with `search_commit_gap` at a second,
/// commits the liked article at most once a second however fast the likes come: 1 500 likes
/// and unlikes are not cut into the outbox relay's batches of 500 events, nor committed every
/// `search_commit_interval` (200 ms).
#[tokio::test]
async fn a_stream_of_likes_commits_the_index_at_most_once_a_commit_gap() {
    use common::process::{webook, Server};
    const LIKES: usize = 1_500;
    let dir = tempfile::tempdir().unwrap();
    let mut command = webook(dir.path());
    command
        .env("WEBOOK_WRITE_RATE_LIMIT", "0")
        .env("WEBOOK_SEARCH_COMMIT_GAP", "1s");
    let server = Server::start(command);
    let token = server
        .sign_up_and_log_in("liker@example.com", "hello#world1")
        .await;
    let id = server
        .publish(&token, "Popular", "<p>liked many times</p>")
        .await;
    server.search_ready().await;
    wait_until("the article is searchable", || async {
        server.search_article_ids("popular").await.contains(&id)
    })
    .await;
    let applied = "search_events_applied_total";
    let puts = "search_documents_written_total{kind=\"put\"}";
    let (applied_before, puts_before) = (server.metric(applied).await, server.metric(puts).await);

    let started = Instant::now();
    for n in 0..LIKES {
        let body = json!({"id": id, "like": n % 2 == 0});
        let answer = server.post_json("/articles/pub/like", &token, &body).await;
        assert_eq!(answer["code"], 0, "{answer}");
    }
    let took = started.elapsed();
    wait_until("the index has applied every like", || async {
        server.metric(applied).await >= applied_before + LIKES as f64
    })
    .await;
    let written = server.metric(puts).await - puts_before;
    // One commit per started second of likes, and the last one's.
    let at_most = took.as_secs_f64().ceil() + 1.0;
    assert!(
        (1.0..=at_most).contains(&written),
        "{LIKES} likes in {took:?} wrote the article {written} times (at most {at_most})"
    );
}
