//! What readers type, found (issue 49's table, one assertion per row): a single Chinese
//! character that ends a word, a Latin word with a Chinese one, a compound whose words stand
//! apart, a lone character the same before and after a rebuild, a one-word Latin query ranked
//! by relevance rather than freshness, full-width letters, a typo, pinyin, a synonym, full case
//! folding — and highlights that mark what matched, never "go" inside "Google". Index level
//! (no database): the same code `GET /search` runs, as `query::ranked` and `query::prepare`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use webook::search::{
    highlight::Highlighter,
    index::{self, ArticleDoc, Change, IndexState, SearchIndex},
    query::{self, ParsedQuery},
    synonyms::Synonyms,
};

const DAY_MS: i64 = 86_400_000;
const NOW: i64 = 1_800_000_000_000;

/// (id, title, body, tags, days old).
const CORPUS: &[(i64, &str, &str, &[&str], i64)] = &[
    (
        1,
        "Redis 分布式锁",
        "用 SET NX PX 实现，注意续期与释放。",
        &["Redis"],
        30,
    ),
    (
        2,
        "乐观锁与悲观锁",
        "数据库里的乐观锁靠版本号，悲观锁靠行锁。",
        &["数据库"],
        30,
    ),
    (
        3,
        "分布式事务：两阶段提交与 Saga",
        "多个服务一起提交或一起回滚。",
        &[],
        30,
    ),
    (
        4,
        "一致性的代价",
        "分布式的一致性让整个系统更复杂。",
        &[],
        30,
    ),
    (
        5,
        "消息队列入门：分区、副本与消费者组",
        "Kafka 的分区决定并行度，Kafka 的副本决定可靠性，Kafka 的消费者组分摊分区。",
        &[],
        30,
    ),
    (
        6,
        "我们的技术栈",
        "服务用 Java 编写，日志先写进 Kafka，再进 ClickHouse。",
        &[],
        0,
    ),
    (
        7,
        "Go 微服务实践",
        "用 Go 写微服务：gRPC、服务发现与熔断。",
        &["Go"],
        30,
    ),
    (
        8,
        "Rust 所有权入门",
        "Rust 的所有权与借用检查。",
        &["Rust"],
        30,
    ),
    (
        9,
        "Kubernetes 部署指南",
        "在 Kubernetes 上滚动发布服务。",
        &["Kubernetes"],
        30,
    ),
    (
        10,
        "İstanbul 游记",
        "İstanbul 的清晨，海峡边的咖啡。",
        &[],
        30,
    ),
    (11, "Google 的搜索技术", "倒排索引与网页排序。", &[], 30),
    (
        12,
        "JavaScript 闭包详解",
        "闭包捕获的是变量本身。",
        &["JavaScript"],
        30,
    ),
];

fn doc(&(id, title, body, tags, days): &(i64, &str, &str, &[&str], i64)) -> Change {
    Change::Article(ArticleDoc {
        id,
        title: title.to_owned(),
        text: body.to_owned(),
        author: "作者".to_owned(),
        tags: tags.iter().map(|tag| (*tag).to_owned()).collect(),
        ctime: NOW - days * DAY_MS,
        likes: 0,
    })
}

/// Article 13: sixty words that begin with 分 and sort before 分布 (so a prefix expanded to the
/// first fifty words in code-point order never reaches 分布).
fn filler() -> Change {
    let words: Vec<String> = ('\u{4E00}'..'\u{4F00}')
        .take(60)
        .map(|c| format!("分{c}"))
        .collect();
    Change::Article(ArticleDoc {
        id: 13,
        title: "杂记".to_owned(),
        text: words.join(" "),
        author: "作者".to_owned(),
        tags: Vec::new(),
        ctime: NOW - 30 * DAY_MS,
        likes: 0,
    })
}

/// An article of `title` alone, published now with `likes`.
fn titled(id: i64, title: &str, likes: i64) -> Change {
    Change::Article(ArticleDoc {
        id,
        title: title.to_owned(),
        text: String::new(),
        author: "作者".to_owned(),
        tags: Vec::new(),
        ctime: NOW,
        likes,
    })
}

pub(crate) fn state() -> IndexState {
    IndexState {
        schema: index::SCHEMA_VERSION,
        complete: true,
        positions: Default::default(),
        built_at: 1,
    }
}

/// The corpus in one commit (`one_by_one`: one commit, so one segment, per article).
fn indexed(dir: &std::path::Path, one_by_one: bool) -> SearchIndex {
    let (index, _) = SearchIndex::open(dir, 20_000_000).unwrap();
    if one_by_one {
        for article in CORPUS {
            index.apply(vec![doc(article)], &state()).unwrap();
        }
        index.apply(vec![filler()], &state()).unwrap();
    } else {
        let mut all: Vec<Change> = CORPUS.iter().map(doc).collect();
        all.push(filler());
        index.apply(all, &state()).unwrap();
    }
    index
}

fn ids(index: &SearchIndex, q: &str) -> Vec<i64> {
    let searcher = index.reader().searcher();
    query::ranked(&searcher, index.fields(), index::ARTICLE, q, 50, NOW)
        .unwrap()
        .into_iter()
        .map(|hit| hit.id)
        .collect()
}

/// The title highlight of article `id` for `q`, as `GET /search` shows it.
fn title_mark(index: &SearchIndex, q: &str, id: i64) -> Option<String> {
    let searcher = index.reader().searcher();
    let mut prepared = query::prepare(
        &searcher,
        index.fields(),
        index::ARTICLE,
        &ParsedQuery::parse(q),
        &Synonyms::default(),
    )
    .unwrap();
    let hits = prepared
        .search(&searcher, index::ARTICLE, None, 50, NOW)
        .unwrap();
    assert!(
        hits.iter().any(|hit| hit.id == id),
        "{q:?} does not find {id}"
    );
    let title = CORPUS.iter().find(|a| a.0 == id).unwrap().1;
    Highlighter::new(prepared.needles()).title(title)
}

#[test]
fn the_queries_readers_type_find_the_articles_they_mean() {
    let dir = tempfile::tempdir().unwrap();
    let index = indexed(dir.path(), false);
    let first = |q: &str| ids(&index, q).first().copied();
    let finds = |q: &str, id: i64| {
        let found = ids(&index, q);
        assert!(found.contains(&id), "{q:?} → {found:?}, want {id}");
    };
    // 锁 ending a word ("分布式锁") is found, with the lock articles.
    finds("锁", 1);
    finds("锁", 2);
    assert_eq!(first("redis 锁"), Some(1));
    // A compound whose words stand apart in the text (and not the texts with one of them).
    assert_eq!(ids(&index, "分布式系统"), [4]);
    // A lone character finds what it begins.
    finds("分", 3);
    // One Latin word being typed: the article about Kafka (three times in its text) above a
    // fresher passing mention.
    assert_eq!(ids(&index, "kafka")[..2], [5, 6]);
    assert_eq!(ids(&index, "kafk")[..2], [5, 6]);
    // Full-width letters, capitals, dotted capital I.
    assert_eq!(first("ｇｏ 微服务"), Some(7));
    assert_eq!(first("ｒｕｓｔ"), Some(8));
    assert_eq!(first("RUST "), Some(8));
    assert_eq!(first("istanbul"), Some(10));
    // A typo, pinyin in full and as initials, a synonym.
    assert_eq!(first("微服物"), Some(7));
    assert_eq!(first("kubernets "), Some(9));
    assert_eq!(first("javascirpt"), Some(12));
    finds("fenbushi", 1);
    finds("fenbushi", 3);
    finds("fbs", 1);
    assert_eq!(first("k8s"), Some(9));
    assert_eq!(first("js "), Some(12));
    // Words of four letters or fewer get no typo.
    assert_eq!(ids(&index, "rusx "), Vec::<i64>::new());
}

#[test]
fn exact_matches_rank_above_typos_and_pinyin() {
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = SearchIndex::open(dir.path(), 20_000_000).unwrap();
    let article = titled;
    // The typo and the pinyin match are fresher and far more liked: still below.
    index
        .apply(
            vec![
                article(1, "微服务", 0),
                article(2, "微服物 微服物 微服物", 10_000),
                article(3, "fenbushi 笔记", 0),
                article(4, "分布式", 10_000),
            ],
            &state(),
        )
        .unwrap();
    assert_eq!(ids(&index, "微服物 "), [2, 1]);
    assert_eq!(ids(&index, "微服务 "), [1, 2]);
    assert_eq!(ids(&index, "fenbushi "), [3, 4]);
    // No exact match: the loose ones.
    assert_eq!(ids(&index, "fbs "), [4]);
}

#[test]
fn a_quoted_phrase_matches_only_as_it_stands() {
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = SearchIndex::open(dir.path(), 20_000_000).unwrap();
    let article = |id, title: &str| titled(id, title, 0);
    index
        .apply(
            vec![
                article(1, "machine learning basics"),
                article(2, "learning to fix the machine"),
                article(3, "分布式系统设计"),
                article(4, "分布式存储与文件系统"),
            ],
            &state(),
        )
        .unwrap();
    assert_eq!(ids(&index, "\"machine learning\""), [1]);
    assert_eq!(ids(&index, "machine learning ").len(), 2);
    assert_eq!(ids(&index, "\"分布式系统\""), [3]);
    assert_eq!(ids(&index, "分布式系统 ")[0], 3);
    assert_eq!(ids(&index, "分布式系统 ").len(), 2);
}

#[test]
fn results_are_the_same_however_the_index_is_cut_into_segments() {
    let one = tempfile::tempdir().unwrap();
    let many = tempfile::tempdir().unwrap();
    let (whole, split) = (indexed(one.path(), false), indexed(many.path(), true));
    assert!(split.reader().searcher().segment_readers().len() > 1);
    for q in ["分", "k", "ka", "kafk", "锁", "fen", "微服物", "go"] {
        assert_eq!(ids(&whole, q), ids(&split, q), "{q:?}");
    }
}

#[test]
fn highlights_mark_what_matched_and_only_that() {
    let dir = tempfile::tempdir().unwrap();
    let index = indexed(dir.path(), false);
    // Complete: "go" is a word, not the start of "Google" (which it does not find).
    assert!(!ids(&index, "go ").contains(&11));
    assert_eq!(
        title_mark(&index, "go ", 7).as_deref(),
        Some("<em>Go</em> 微服务实践")
    );
    // Being typed, "go" matched "google" whole: so it is marked whole.
    assert_eq!(
        title_mark(&index, "go", 11).as_deref(),
        Some("<em>Google</em> 的搜索技术")
    );
    assert_eq!(
        title_mark(&index, "redis 锁", 1).as_deref(),
        Some("<em>Redis</em> 分布式<em>锁</em>")
    );
    assert_eq!(
        title_mark(&index, "istanbul", 10).as_deref(),
        Some("<em>İstanbul</em> 游记")
    );
    // The words a typo and a synonym matched with.
    assert_eq!(
        title_mark(&index, "kubernets ", 9).as_deref(),
        Some("<em>Kubernetes</em> 部署指南")
    );
    assert_eq!(
        title_mark(&index, "k8s", 9).as_deref(),
        Some("<em>Kubernetes</em> 部署指南")
    );
}

/// A word's typos are looked for among words of alphabets only (not the Chinese grams of the
/// dictionary): accented Latin words (folded) and words of other alphabets stay within reach.
#[test]
fn a_typo_reaches_accented_words_and_other_alphabets() {
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = SearchIndex::open(dir.path(), 20_000_000).unwrap();
    index
        .apply(
            vec![
                titled(1, "naïve bayes", 0),
                titled(2, "天气 naiv", 0),
                titled(3, "москва", 0),
            ],
            &state(),
        )
        .unwrap();
    assert_eq!(ids(&index, "naive "), [1, 2]);
    assert_eq!(ids(&index, "naïbe "), [1]);
    // Cyrillic, one letter off: beyond ASCII, below the Chinese grams.
    assert_eq!(ids(&index, "масква "), [3]);
}
