//! Screening benchmarks: compiling 10 000 words, and `check_html` on articles of 10 kB,
//! 100 kB and 1 MB (throughput in bytes, to show the cost is linear in the text), against the
//! baseline of what a publish already does to the same article: sanitising its HTML.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use webook::{
    article::model::sanitize_html,
    screening::matcher::{Action, Screen, WordList},
};

/// A small deterministic generator (64-bit LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        u32::try_from(self.0 >> 33).unwrap_or(0)
    }

    fn below(&mut self, n: u32) -> u32 {
        self.next() % n
    }
}

fn cjk(rng: &mut Lcg) -> char {
    char::from_u32(0x4E00 + rng.below(0x9FA5 - 0x4E00 + 1)).unwrap_or('中')
}

/// 10 000 words: half 2–4-character CJK words (U+4E00–U+9FA5), half 4–10-letter ASCII
/// words; in three lists, of which the article hits two (so every check scans it all).
fn lists() -> Vec<WordList> {
    let mut rng = Lcg(42);
    let mut words: Vec<String> = vec![
        "微信".to_owned(),
        "wechat".to_owned(),
        "代开发票".to_owned(),
    ];
    words.extend((3..10_000).map(|i| {
        if i % 2 == 0 {
            (0..2 + rng.below(3)).map(|_| cjk(&mut rng)).collect()
        } else {
            (0..4 + rng.below(7))
                .map(|_| char::from(b'a' + u8::try_from(rng.below(26)).unwrap_or(0)))
                .collect()
        }
    }));
    let never = words.split_off(7_000);
    let mut hold = words.split_off(2_000);
    // The third special word is a hold word.
    hold.push(words.remove(2));
    vec![
        WordList {
            name: "contact".to_owned(),
            action: Action::Refuse,
            words,
        },
        WordList {
            name: "spam".to_owned(),
            action: Action::Hold,
            words: hold,
        },
        WordList {
            name: "unused".to_owned(),
            action: Action::Refuse,
            words: never,
        },
    ]
}

/// An article of about `bytes` bytes: `<p>` paragraphs of common Chinese characters and
/// English words with punctuation, a few disguised hits ("微 信", "W-e-C-h-a-t", "代开<b>发票</b>").
fn article(bytes: usize) -> String {
    const HAN: &str = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理";
    const EN: &[&str] = &[
        "the",
        "system",
        "article",
        "reading",
        "community",
        "writes",
        "about",
        "rust",
        "server",
        "and",
        "performance",
        "of",
        "content",
        "users",
        "comment",
        "with",
    ];
    const PUNCT: &[&str] = &["，", "。", "、", "！", ", ", ". ", " ", "；"];
    const DISGUISED: &[&str] = &["微 信", "W-e-C-h-a-t", "代开<b>发票</b>", "ｗｅｃｈａｔ"];
    let han: Vec<char> = HAN.chars().collect();
    let mut rng = Lcg(7);
    let mut out = String::with_capacity(bytes + 256);
    let mut paragraph = 0;
    while out.len() < bytes {
        out.push_str("<p>");
        for sentence in 0..8 {
            for _ in 0..6 + rng.below(12) {
                out.push(han[rng.below(u32::try_from(han.len()).unwrap_or(1)) as usize]);
            }
            out.push_str(PUNCT[rng.below(8) as usize]);
            if sentence % 2 == 0 {
                for _ in 0..2 + rng.below(5) {
                    out.push_str(EN[rng.below(16) as usize]);
                    out.push(' ');
                }
            }
            if paragraph % 5 == 3 && sentence == 4 {
                out.push_str(DISGUISED[(paragraph / 5) % DISGUISED.len()]);
            }
        }
        out.push_str("</p>\n");
        paragraph += 1;
    }
    out
}

fn build(c: &mut Criterion) {
    let lists = lists();
    let mut group = c.benchmark_group("screen_build");
    group.sample_size(10);
    group.bench_function("10000_words", |b| b.iter(|| Screen::new(black_box(&lists))));
    group.finish();
}

fn check(c: &mut Criterion) {
    let screen = Screen::new(&lists());
    let mut group = c.benchmark_group("screen_check_html");
    for bytes in [10_000, 100_000, 1_000_000] {
        let html = article(bytes);
        let verdict = screen.check_html(&html);
        assert_eq!(verdict.hits.len(), 2, "{verdict:?}");
        group.throughput(Throughput::Bytes(html.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(bytes), &html, |b, html| {
            b.iter(|| screen.check_html(black_box(html)));
        });
    }
    group.finish();
    // The baseline: what a publish already does to the same article (its HTML sanitised).
    let mut group = c.benchmark_group("screen_baseline_sanitize_html");
    for bytes in [10_000, 100_000, 1_000_000] {
        let html = article(bytes);
        group.throughput(Throughput::Bytes(html.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(bytes), &html, |b, html| {
            b.iter(|| sanitize_html(black_box(html)));
        });
    }
    group.finish();
}

criterion_group!(benches, build, check);
criterion_main!(benches);
