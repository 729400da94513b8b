//! Criterion benches of the pure kernels the request and job paths are built from, each on
//! fixed, seeded inputs:
//!
//! - `score/*`: one score per formula (Hacker News, Reddit, weighted) — run once per candidate
//!   by the hot-list scan;
//! - `top_n/*`: keeping the best 100 of 10 000 and 100 000 scored candidates with the bounded
//!   heap ([`TopN`]) against sorting them all and truncating;
//! - `hot_list_json/*`: building the served bytes of a 100-item list from its shared copy
//!   ([`Snapshot::from_shared`]: parse, envelope, gzip) and serialising the items alone;
//! - `article/*`: sanitising a ~6 kB article body, bounding its markup first (`check_markup`)
//!   and extracting its abstract, which every save and publish does; the abstract also through
//!   ammonia's text-only cleaner, the implementation before the block-aware scan (baseline);
//! - `nested_html/*`: sanitising 10 blocks nested 16, 64 and 256 deep (256 is the deepest
//!   accepted: the parser's cost grows with the square of the depth), and refusing 100 000
//!   nested `<div>`s with `check_markup` (what a hostile publish now costs);
//! - `response_gzip/*`: gzipping the JSON of an article read (long-form articles from the seed
//!   generator: English of 15–30 kB, Chinese of 9–14 kB) at level 1, what the compression layer uses for every
//!   client that accepts gzip, and at level 6, zlib's default, through flate2 with the
//!   workspace's backend;
//! - `cache_lookup/*`: a hit in an embedded [`VersionedCache`] (what a read does two or three
//!   times), and what counting it in `cache_requests_total` costs: the series looked up by name
//!   and labels (as every lookup did before 2026-12-04) against a handle taken once;
//! - `event_publish/*`: publishing a read event on the in-process stream with no consumer group
//!   (serialising it and counting it: what every article read adds besides the queueing);
//! - `search_highlight/*`: the highlights of one search answer of 20 article hits whose bodies
//!   are 50 000 characters of generated Chinese text ([`Highlighter::article`], as
//!   `GET /search` runs it after the query): for a plain query (`数据库`, the baseline), for a
//!   crafted one (99 characters: ten terms of nine distinct characters, ~135 fragments to look
//!   for) inserted after every paragraph (of at most 1 000 characters), and for the crafted
//!   query over bodies made of nothing but its characters (a match at every position); figures
//!   in docs/PERFORMANCE.md → Search.
//! - `segment/*`: jieba's search-mode words of generated Chinese text — 1 000 article titles,
//!   and one article of 9–14 kB — with webook's segmenter over its dictionary FST
//!   ([`Segmenter`]) against jieba-rs with its own dictionary (the baseline: the same words,
//!   what the index used before 2026-12-08); and building each from its embedded dictionary.
//!
//! Run: `cargo bench -p webook --bench kernels` (figures in docs/PERFORMANCE.md → Kernels).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{hint::black_box, ops::RangeInclusive, time::Duration};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use flate2::{write::GzEncoder, Compression};
use futures_util::FutureExt;
use platform::{
    cache::{Lookup, VersionedCache, CACHE_REQUESTS_TOTAL},
    events::EventStream,
    telemetry,
};
use segment::Segmenter;
use webook::{
    article::model::{abstract_of, check_markup, sanitize_html},
    ranking::{
        cache::{RankedArticle, Snapshot},
        model::{ScoreFormula, Signals, TopN},
        store::SharedList,
    },
    search::{
        highlight::{self, Highlighter},
        query::ParsedQuery,
    },
    seed::{
        random::{Rng, Stream},
        text::{self, Language},
    },
};

const HOUR_MS: i64 = 3_600_000;
const NOW: i64 = 1_796_000_000_000;

/// A well-mixed hash of `n` (splitmix64), for repeatable "random" inputs.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Signals and first-publication time of candidate `n`: likes skewed (cubed uniform), up to a
/// week old.
fn candidate(n: u64) -> (Signals, i64) {
    let hash = mix(n);
    let roll = i64::try_from(hash % 1000).unwrap();
    let likes = roll * roll * roll / 1_000_000;
    let signals = Signals {
        likes,
        collects: likes / 4,
        reads: likes * 10 + i64::try_from((hash >> 20) % 500).unwrap(),
    };
    let age = i64::try_from((hash >> 40) % (7 * 24)).unwrap() * HOUR_MS;
    (signals, NOW - age)
}

fn scores(c: &mut Criterion) {
    let inputs: Vec<(Signals, i64)> = (0..1024).map(candidate).collect();
    let formulas = [
        ("hacker_news", ScoreFormula::default()),
        ("reddit", ScoreFormula::Reddit),
        (
            "weighted",
            ScoreFormula::Weighted {
                likes: 1.0,
                collects: 2.0,
                reads: 0.1,
                gravity: 1.5,
            },
        ),
    ];
    let mut group = c.benchmark_group("score");
    group.throughput(Throughput::Elements(inputs.len() as u64));
    for (name, formula) in formulas {
        group.bench_function(BenchmarkId::new(name, "1024 candidates"), |b| {
            b.iter(|| {
                let mut sum = 0.0;
                for (signals, first) in &inputs {
                    sum += formula.score(*signals, *first, NOW);
                }
                black_box(sum)
            });
        });
    }
    group.finish();
}

fn top_n(c: &mut Criterion) {
    let formula = ScoreFormula::default();
    let mut group = c.benchmark_group("top_n");
    for total in [10_000u64, 100_000] {
        let scored: Vec<(f64, i64)> = (0..total)
            .map(|n| {
                let (signals, first) = candidate(n);
                (
                    formula.score(signals, first, NOW),
                    i64::try_from(n).unwrap(),
                )
            })
            .collect();
        group.throughput(Throughput::Elements(total));
        group.bench_function(BenchmarkId::new("bounded_heap_100", total), |b| {
            b.iter(|| {
                let mut top = TopN::new(100);
                for (score, id) in &scored {
                    top.push(*score, *id, *id);
                }
                black_box(top.into_sorted())
            });
        });
        group.bench_function(BenchmarkId::new("full_sort_then_100", total), |b| {
            b.iter(|| {
                let mut all = scored.clone();
                all.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
                all.truncate(100);
                black_box(all)
            });
        });
    }
    group.finish();
}

/// A 100-item list like the served one: titles and abstracts of realistic length, mixed
/// Chinese and English.
fn hot_list_items() -> Vec<RankedArticle> {
    (0..100)
        .map(|n| RankedArticle {
            id: 1_000_000 + n,
            title: format!("热榜文章 {n}: why keyset pagination beats OFFSET at scale"),
            abstract_text:
                "在大数据量下，使用游标分页而不是偏移量分页，可以让每一批查询的代价保持不变。\
                            Keyset pagination keeps every batch at the same cost, whatever its \
                            position in the scan."
                    .to_owned(),
            author: webook::user::Person {
                id: n % 20 + 1,
                name: format!("作者{}", n % 20 + 1),
            },
            like_cnt: 1000 - n * 7,
            score: 12.5 - f64::from(u32::try_from(n).unwrap()) * 0.1,
            ctime: NOW - n * HOUR_MS,
            utime: NOW - n * HOUR_MS / 2,
        })
        .collect()
}

fn hot_list_json(c: &mut Criterion) {
    let items = hot_list_items();
    let shared = SharedList {
        items: serde_json::to_string(&items).unwrap(),
        computed_at: NOW,
        fence_at: NOW,
        fence_token: 7,
    };
    let mut group = c.benchmark_group("hot_list_json");
    group.throughput(Throughput::Bytes(shared.items.len() as u64));
    group.bench_function("serialise_100_items", |b| {
        b.iter(|| black_box(serde_json::to_string(black_box(&items)).unwrap()));
    });
    group.bench_function("snapshot_from_shared_copy", |b| {
        b.iter(|| black_box(Snapshot::from_shared(black_box(&shared)).unwrap()));
    });
    group.finish();
}

/// A ~6 kB article body: paragraphs, a list, links, an image, and things the sanitiser removes.
fn article_html() -> String {
    let mut html = String::new();
    for n in 0..12 {
        html.push_str(&format!(
            "<h2>第{n}节 Section {n}</h2><p>这是一段中文正文，讨论热榜的计算方式与缓存策略。\
             This paragraph explains <strong>why</strong> the list is served from memory, with \
             a <a href=\"https://example.com/{n}\" onclick=\"steal()\">link</a>.</p>\
             <ul><li>one</li><li>two</li></ul><script>alert({n})</script>"
        ));
    }
    html.push_str("<p><img src=\"https://example.com/a.png\" onerror=\"x()\"></p>");
    html
}

fn article(c: &mut Criterion) {
    let html = article_html();
    let clean = sanitize_html(&html);
    let mut group = c.benchmark_group("article");
    group.throughput(Throughput::Bytes(html.len() as u64));
    group.bench_function("sanitize_6kB", |b| {
        b.iter(|| black_box(sanitize_html(black_box(&html))));
    });
    group.bench_function("check_markup_6kB", |b| {
        b.iter(|| black_box(check_markup(black_box(&html)).is_ok()));
    });
    group.bench_function("abstract_of_6kB", |b| {
        b.iter(|| black_box(abstract_of(black_box(&clean))));
    });
    let text_only = {
        let mut builder = ammonia::Builder::empty();
        builder.clean_content_tags(["script", "style"].into_iter().collect());
        builder
    };
    group.bench_function("abstract_via_text_cleaner_6kB_baseline", |b| {
        b.iter(|| {
            let text = text_only
                .clean(black_box(&clean))
                .to_string()
                .replace("&nbsp;", " ")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&amp;", "&");
            black_box(webook::article::model::abstract_of_text(&text))
        });
    });
    group.finish();
}

fn nested_html(c: &mut Criterion) {
    let mut group = c.benchmark_group("nested_html");
    group.sample_size(10);
    for depth in [16usize, 64, 256] {
        let block = format!("{}x{}", "<div>".repeat(depth), "</div>".repeat(depth));
        let html = block.repeat(10);
        group.bench_with_input(
            BenchmarkId::new("sanitize_10_blocks", depth),
            &html,
            |b, html| {
                b.iter(|| black_box(sanitize_html(black_box(html))));
            },
        );
    }
    let hostile = "<div>".repeat(100_000);
    group.bench_function("check_markup_refuses_100k_nested", |b| {
        b.iter(|| black_box(check_markup(black_box(&hostile)).is_err()));
    });
    group.finish();
}

/// The JSON of an article read (`{code, msg, data}` with the article) whose content is the first
/// generated `language` article with a length in `bytes`.
fn article_response(language: Language, bytes: RangeInclusive<usize>) -> Vec<u8> {
    let article = (0..100_000)
        .map(|index| text::article(&mut Rng::new(1, Stream::ArticleText, index), language))
        .find(|article| bytes.contains(&article.content.len()))
        .expect("no generated article of that length");
    serde_json::to_vec(&serde_json::json!({
        "code": 0,
        "msg": "ok",
        "data": {
            "id": 55542, "title": article.title, "content": article.content,
            "abstract": article.abstract_text, "author": {"id": 2381, "name": "韩明丽"},
            "status": 2, "readCnt": 38393, "likeCnt": 12, "collectCnt": 3,
            "liked": false, "collected": false, "ctime": NOW, "utime": NOW,
        },
    }))
    .unwrap()
}

fn gzip(bytes: &[u8], level: u32) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::new(level));
    std::io::Write::write_all(&mut encoder, bytes).unwrap();
    encoder.finish().unwrap()
}

fn response_gzip(c: &mut Criterion) {
    let mut group = c.benchmark_group("response_gzip");
    // The generator's longest Chinese articles are ~14 kB (3-byte characters, fewer of them).
    for (name, language, bytes) in [
        ("english", Language::English, 15_000..=30_000),
        ("chinese", Language::Chinese, 9_000..=14_000),
    ] {
        let response = article_response(language, bytes);
        group.throughput(Throughput::Bytes(response.len() as u64));
        for level in [1, 6] {
            println!(
                "response_gzip {name}: {} bytes, level {level} gives {} bytes",
                response.len(),
                gzip(&response, level).len()
            );
            group.bench_function(
                BenchmarkId::new(format!("{name}_level_{level}"), response.len()),
                |b| {
                    b.iter(|| black_box(gzip(black_box(&response), level)));
                },
            );
        }
    }
    group.finish();
}

fn cache_lookup(c: &mut Criterion) {
    // As in the server: the recorder first, so handles and lookups reach the real registry.
    telemetry::install_metrics(&webook::app::metrics()).unwrap();
    let cache = VersionedCache::new("bench", 1 << 20, Duration::from_secs(600), None);
    let key = "article:12345";
    // Embedded lookups and fills never wait, so they run to completion in one poll.
    let Some(Lookup::Miss(token)) = cache.get(key).now_or_never() else {
        panic!("a new cache holds nothing");
    };
    cache
        .fill(key, token, axum::body::Bytes::from(vec![b'x'; 2_000]))
        .now_or_never()
        .unwrap();
    let mut group = c.benchmark_group("cache_lookup");
    group.bench_function("versioned_local_hit", |b| {
        b.iter(|| match cache.get(black_box(key)).now_or_never() {
            Some(Lookup::Hit(value)) => value,
            _ => panic!("the filled key must hit"),
        })
    });
    // What every lookup did before the handles were kept.
    let by_name = |cache: &'static str| metrics::counter!(CACHE_REQUESTS_TOTAL, "cache" => cache, "layer" => "local", "result" => "hit");
    group.bench_function("counter_by_name", |b| {
        b.iter(|| by_name(black_box("bench")).increment(1))
    });
    let held = by_name("bench");
    group.bench_function("counter_held", |b| b.iter(|| held.increment(1)));
    group.finish();
}

fn event_publish(c: &mut Criterion) {
    telemetry::install_metrics(&webook::app::metrics()).unwrap();
    let events = EventStream::in_process();
    let read = serde_json::json!({"biz": "article", "biz_id": 12345, "uid": 678});
    let mut group = c.benchmark_group("event_publish");
    group.bench_function("in_process_read_event", |b| {
        // With no group nothing waits: one poll publishes.
        b.iter(|| {
            events
                .publish("bench_read", black_box("article:12345"), &read)
                .now_or_never()
                .unwrap()
                .unwrap()
        })
    });
    group.finish();
}

/// A query of 99 characters with as many fragments as it can have: ten terms of nine distinct
/// Chinese characters (each term, its jieba words and its eight character pairs are looked for).
fn crafted_query() -> String {
    const CHARS: &str = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手用主行方又如前所本见经头面公同三已老从动两";
    let chars: Vec<char> = CHARS.chars().collect();
    let terms: Vec<String> = chars
        .chunks(9)
        .take(10)
        .map(|chunk| chunk.iter().collect())
        .collect();
    terms.join(" ")
}

/// Hits of one answer: 20 bodies of 50 000 characters of generated Chinese text in paragraphs
/// (of at most 1 000 characters), with `insert` after each.
fn highlight_bodies(insert: &str) -> Vec<String> {
    (0..20u64)
        .map(|hit| {
            let mut html = String::new();
            let mut chars = 0;
            let mut index = hit * 1_000;
            while chars < 50_000 {
                let article = text::article(
                    &mut Rng::new(1, Stream::ArticleText, index),
                    Language::Chinese,
                );
                index += 1;
                let text = webook::article::text_of(&article.content);
                for piece in text.split_whitespace() {
                    let piece: String = piece.chars().take(1_000).collect();
                    chars += piece.chars().count() + insert.chars().count();
                    html.push_str("<p>");
                    html.push_str(&piece);
                    html.push_str(insert);
                    html.push_str("</p>");
                }
            }
            html
        })
        .collect()
}

fn search_highlight(c: &mut Criterion) {
    let crafted = crafted_query();
    assert_eq!(crafted.chars().count(), 99);
    let dense: String = {
        let chars: Vec<char> = crafted.chars().filter(|c| !c.is_whitespace()).collect();
        let body: String = (0..50_000).map(|n| chars[n % chars.len()]).collect();
        format!("<p>{body}</p>")
    };
    let cases = [
        (
            "plain_20x50k",
            "数据库".to_owned(),
            highlight_bodies("数据库"),
        ),
        (
            "crafted_20x50k",
            crafted.clone(),
            highlight_bodies(&crafted),
        ),
        ("crafted_dense_20x50k", crafted.clone(), vec![dense; 20]),
    ];
    let mut group = c.benchmark_group("search_highlight");
    group.sample_size(20);
    for (name, q, bodies) in &cases {
        let parsed = ParsedQuery::parse(q);
        let title = "数据库的索引与缓存";
        group.bench_function(*name, |b| {
            b.iter(|| {
                let mut highlighter = Highlighter::new(highlight::needles(&parsed));
                for body in bodies {
                    black_box(highlighter.article(title, black_box(body)));
                }
                highlighter.work()
            })
        });
    }
    group.finish();
}

/// Generated Chinese articles: the titles of the first 1 000, and the first body of 9–14 kB.
fn chinese_texts() -> (Vec<String>, String) {
    let articles: Vec<_> = (0..1_000)
        .map(|index| {
            text::article(
                &mut Rng::new(1, Stream::ArticleText, index),
                Language::Chinese,
            )
        })
        .collect();
    let body = (0..100_000)
        .map(|index| {
            text::article(
                &mut Rng::new(1, Stream::ArticleText, index),
                Language::Chinese,
            )
        })
        .find(|article| (9_000..=14_000).contains(&article.content.len()))
        .expect("no generated article of that length")
        .content;
    (articles.into_iter().map(|a| a.title).collect(), body)
}

fn segment(c: &mut Criterion) {
    let ours = Segmenter::embedded().unwrap();
    let jieba = jieba_rs::Jieba::new();
    let (titles, body) = chinese_texts();
    let mut group = c.benchmark_group("segment");
    let title_bytes: usize = titles.iter().map(String::len).sum();
    group.throughput(Throughput::Bytes(title_bytes as u64));
    group.bench_function("titles/fst", |b| {
        b.iter(|| {
            titles
                .iter()
                .map(|t| ours.cut_for_search(black_box(t), true).len())
                .sum::<usize>()
        })
    });
    group.bench_function("titles/jieba_rs", |b| {
        b.iter(|| {
            titles
                .iter()
                .map(|t| jieba.cut_for_search(black_box(t), true).len())
                .sum::<usize>()
        })
    });
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("article/fst", |b| {
        b.iter(|| ours.cut_for_search(black_box(&body), true).len())
    });
    group.bench_function("article/jieba_rs", |b| {
        b.iter(|| jieba.cut_for_search(black_box(&body), true).len())
    });
    group.finish();
    let mut group = c.benchmark_group("segment_load");
    group.sample_size(10);
    group.bench_function("fst", |b| {
        b.iter(|| Segmenter::embedded().unwrap().memory_bytes())
    });
    group.bench_function("jieba_rs", |b| {
        b.iter(|| format!("{:?}", jieba_rs::Jieba::new()).len())
    });
    group.finish();
}

criterion_group!(
    kernels,
    scores,
    top_n,
    hot_list_json,
    article,
    nested_html,
    response_gzip,
    cache_lookup,
    event_publish,
    search_highlight,
    segment
);
criterion_main!(kernels);
