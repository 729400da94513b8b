//! A page found by pruning (only the documents that can still make it scored) is the page every
//! match scored gives: the same hits, in the same order, with the same score bits — page after
//! page through cursors, for articles and users, over an index of many segments with replaced
//! and removed documents, nudges by freshness and likes, and ties broken by id at page
//! boundaries. The queries are the quality benchmark's (every category) as typed and complete:
//! pages of the strict query and of the loose one (typos, pinyin, slips, a word left out).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use serde::Deserialize;

use crate::{search_quality::load, search_recall::state};
use webook::search::{
    index::{self, article_key, ArticleDoc, Change, SearchIndex, UserDoc},
    query::{self, After, Hit, ParsedQuery},
    synonyms::Synonyms,
};

const DAY_MS: i64 = 86_400_000;
const NOW: i64 = 1_800_000_000_000;
/// Ids of the articles (and users) given twins: the same title, age and likes.
const TWINS: std::ops::Range<i64> = 1001..1041;
/// Ids of the articles with "zorbax quintel" loosely in their title and tags.
const LOOSE_IN_TITLE: std::ops::Range<i64> = 2001..2006;
/// Id of the article with "zorbax quintel" only in its body, one word as typed.
const IN_BODY: i64 = 2100;

#[derive(Deserialize)]
struct Article {
    title: String,
    body: String,
    tags: Vec<String>,
    author: String,
}

#[derive(Deserialize)]
struct Labelled {
    q: String,
}

fn article(id: i64, a: &Article, days: i64, likes: i64) -> Change {
    Change::Article(ArticleDoc {
        id,
        title: a.title.clone(),
        text: a.body.clone(),
        author: a.author.clone(),
        tags: a.tags.clone(),
        ctime: NOW - days * DAY_MS,
        likes,
    })
}

/// The quality corpus with ages and likes spread, twins, and users made of its authors, in
/// commits of 40 changes (many segments); then every 7th article replaced (a deleted copy
/// left in an older segment) and every 11th removed. Returns the index and the removed ids.
fn corpus(dir: &std::path::Path) -> (SearchIndex, Vec<i64>) {
    let articles: Vec<Article> = load("articles.json");
    let (index, _) = SearchIndex::open(dir, 20_000_000).unwrap();
    let mut changes: Vec<Change> = articles
        .iter()
        .zip(1..)
        .map(|(a, id)| article(id, a, id % 45, (id * 7) % 120))
        .collect();
    let twin = Article {
        title: "数据库索引设计".to_owned(),
        body: "数据库的索引怎么设计".to_owned(),
        tags: vec!["数据库".to_owned()],
        author: "双胞胎".to_owned(),
    };
    changes.extend(TWINS.map(|id| article(id, &twin, 3, 10)));
    // Both words of "zorbax quintel" loosely in short fields; and as typed and loosely in the
    // body of one (see `a_match_in_long_fields_only_still_makes_a_loose_page`).
    let loose_in_title = Article {
        title: "zorbix quintal".to_owned(),
        body: "notes".to_owned(),
        tags: vec!["zorbix".to_owned(), "quintal".to_owned()],
        author: "tester".to_owned(),
    };
    changes.extend(LOOSE_IN_TITLE.map(|id| article(id, &loose_in_title, 2, 5)));
    let in_body = Article {
        title: "随笔".to_owned(),
        body: "zorbax quintal".to_owned(),
        tags: Vec::new(),
        author: "tester".to_owned(),
    };
    changes.push(article(IN_BODY, &in_body, 2, 5));
    changes.extend(articles.iter().zip(1..).map(|(a, id)| {
        Change::User(UserDoc {
            id,
            nickname: a.author.clone(),
            about: a.title.clone(),
        })
    }));
    changes.extend(TWINS.map(|id| {
        Change::User(UserDoc {
            id,
            nickname: "数据库老司机".to_owned(),
            about: "数据库".to_owned(),
        })
    }));
    for chunk in changes.chunks(40) {
        index.apply(chunk.to_vec(), &state()).unwrap();
    }
    let mut later = Vec::new();
    let mut removed = Vec::new();
    for (a, id) in articles.iter().zip(1..) {
        if id % 11 == 0 {
            later.push(Change::Remove(article_key(id)));
            removed.push(id);
        } else if id % 7 == 0 {
            later.push(article(id, a, 1, 200));
        }
    }
    for chunk in later.chunks(10) {
        index.apply(chunk.to_vec(), &state()).unwrap();
    }
    (index, removed)
}

fn keyed(hits: &[Hit]) -> Vec<(i64, u32)> {
    hits.iter()
        .map(|hit| (hit.id, hit.score.to_bits()))
        .collect()
}

#[test]
fn a_pruned_page_is_the_page_every_match_scored_gives() {
    let dir = tempfile::tempdir().unwrap();
    let (index, removed) = corpus(dir.path());
    let searcher = index.reader().searcher();
    let segments = searcher.segment_readers().len();
    assert!(segments > 1, "{segments} segments");
    let labelled: Vec<Labelled> = load("queries.json");
    let mut queries: Vec<String> = labelled
        .iter()
        .flat_map(|l| [l.q.clone(), format!("{} ", l.q)])
        .collect();
    queries.extend(
        [
            "数据库 ",
            "数据库索引设计 ",
            "数据库 索引 ",
            "数据库老司机 ",
            "索引",
            "d",
            "数",
        ]
        .map(str::to_owned),
    );
    let (mut pages, mut pruned, mut pruned_loose) = (0, 0, 0);
    for kind in [index::ARTICLE, index::USER] {
        for q in &queries {
            for limit in [3, 10] {
                let prepare = || {
                    query::prepare(
                        &searcher,
                        index.fields(),
                        kind,
                        &ParsedQuery::parse(q),
                        &Synonyms::default(),
                    )
                    .unwrap()
                };
                let (mut fast, mut every) = (prepare(), prepare());
                let mut after: Option<After> = None;
                for page in 0..4 {
                    let got = fast.search(&searcher, kind, after, limit, NOW).unwrap();
                    let want = every
                        .search_every_match(&searcher, kind, after, limit, NOW)
                        .unwrap();
                    assert_eq!(
                        keyed(&got),
                        keyed(&want),
                        "{kind} {q:?}, limit {limit}, page {page}"
                    );
                    if kind == index::ARTICLE {
                        assert!(
                            got.iter().all(|hit| !removed.contains(&hit.id)),
                            "{q:?} finds a removed article"
                        );
                    }
                    pages += 1;
                    match got.last() {
                        Some(last) if got.len() == limit => after = Some(last.after()),
                        _ => break,
                    }
                }
                pruned += fast.pruned_pages();
                pruned_loose += fast.pruned_loose_pages();
            }
        }
    }
    // Pruning is what is tested: a good share of the pages are answered by it (the others
    // have fewer candidates than the page — a specific query, a deep page — or a bound too
    // loose in so small a corpus).
    assert!(
        pruned * 10 > pages,
        "only {pruned} of {pages} pages were pruned"
    );
    eprintln!("{pruned} of {pages} pages pruned, {pruned_loose} of the loose query");
    // Those of the loose query too (typos, pinyin, slips: too few hits as typed).
    assert!(
        pruned_loose * 20 > pages,
        "only {pruned_loose} of {pages} pages were pruned loose ones"
    );
    // Twins tie on score; ids order them, across page boundaries.
    let mut twins = query::prepare(
        &searcher,
        index.fields(),
        index::ARTICLE,
        &ParsedQuery::parse("数据库索引设计 "),
        &Synonyms::default(),
    )
    .unwrap();
    let first = twins
        .search(&searcher, index::ARTICLE, None, 7, NOW)
        .unwrap();
    let second = twins
        .search(&searcher, index::ARTICLE, Some(first[6].after()), 7, NOW)
        .unwrap();
    let ids: Vec<i64> = first.iter().chain(&second).map(|hit| hit.id).collect();
    assert_eq!(ids, (1027..1041).rev().collect::<Vec<_>>());
}

/// A document no short field finds, matching one term as typed and the other loosely in its
/// body, outranks every document matching both loosely: the loose page bounds the documents it
/// never found by what one term as typed and the others loosely can score.
#[test]
fn a_match_in_long_fields_only_still_makes_a_loose_page() {
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = corpus(dir.path());
    let searcher = index.reader().searcher();
    let prepare = || {
        query::prepare(
            &searcher,
            index.fields(),
            index::ARTICLE,
            &ParsedQuery::parse("zorbax quintel"),
            &Synonyms::default(),
        )
        .unwrap()
    };
    let (mut fast, mut every) = (prepare(), prepare());
    let want = every
        .search_every_match(&searcher, index::ARTICLE, None, 3, NOW)
        .unwrap();
    assert_eq!(want.first().map(|hit| hit.id), Some(IN_BODY), "{want:?}");
    let got = fast
        .search(&searcher, index::ARTICLE, None, 3, NOW)
        .unwrap();
    assert_eq!(keyed(&got), keyed(&want));
}
