//! The segmenter against jieba-rs with its own embedded dictionary: the same words, the same
//! cuts, in every mode, on real articles, on generated text and on every dictionary word.

use std::sync::LazyLock;

use tantivy_fst::Streamer;

use super::{Segmenter, Word};

static OURS: LazyLock<Segmenter> = LazyLock::new(|| Segmenter::embedded().unwrap());
static JIEBA: LazyLock<jieba_rs::Jieba> = LazyLock::new(jieba_rs::Jieba::new);

/// Every dictionary word, in byte order.
fn dictionary() -> Vec<String> {
    let mut words = Vec::new();
    let mut stream = OURS.words.stream();
    while let Some((word, _)) = stream.next() {
        words.push(String::from_utf8(word.to_vec()).unwrap());
    }
    words
}

fn theirs(tokens: Vec<jieba_rs::Token<'_>>) -> Vec<Word<'_>> {
    tokens
        .into_iter()
        .map(|t| Word {
            word: t.word,
            byte_start: t.byte_start,
            byte_end: t.byte_end,
        })
        .collect()
}

/// Asserts both segmenters cut `text` alike in all four modes.
fn assert_same(text: &str) {
    for hmm in [true, false] {
        assert_eq!(
            OURS.cut(text, hmm),
            theirs(JIEBA.cut(text, hmm)),
            "cut(hmm: {hmm}) of {text:?}"
        );
        assert_eq!(
            OURS.cut_for_search(text, hmm),
            theirs(JIEBA.cut_for_search(text, hmm)),
            "cut_for_search(hmm: {hmm}) of {text:?}"
        );
    }
}

#[test]
fn the_word_list_is_jiebas_dictionary() {
    let words = dictionary();
    let total: u64 = {
        let mut total = 0;
        let mut stream = OURS.words.stream();
        while let Some((_, freq)) = stream.next() {
            total += freq.value();
        }
        total
    };
    // jieba-rs says how many words it holds and their frequencies' sum only in its Debug.
    assert_eq!(
        format!("{:?}", *JIEBA),
        format!(
            "Jieba {{ records_len: {}, total_freq: {total} }}",
            words.len()
        )
    );
    let missing: Vec<&String> = words
        .iter()
        .filter(|w| !JIEBA.has_word(w))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "not jieba's words: {missing:?}");
    assert!(
        OURS.words.size() <= super::MAP_BYTES,
        "the map is {} bytes, more than the {} allocated for it",
        OURS.words.size(),
        super::MAP_BYTES
    );
    // Every character of the main block that starts a word has its place in the table.
    let first: std::collections::HashSet<char> =
        words.iter().filter_map(|w| w.chars().next()).collect();
    for c in super::MAIN_BLOCK.filter_map(char::from_u32) {
        let starts_a_word = first.contains(&c);
        let listed = OURS.first_char[(c as u32 - super::MAIN_BLOCK.start()) as usize].is_some();
        assert_eq!(listed, starts_a_word, "{c}");
    }
}

#[test]
fn cuts_articles_as_jieba_does() {
    let articles: serde_json::Value = serde_json::from_str(include_str!(
        "../../webook/tests/data/search_quality/articles.json"
    ))
    .unwrap();
    let articles = articles.as_array().unwrap();
    assert!(articles.len() > 300);
    for article in articles {
        for field in ["title", "body"] {
            let text = article[field].as_str().unwrap();
            assert_same(text);
            // What the index sees is folded: lowercased, among other things.
            assert_same(&text.to_lowercase());
        }
    }
}

#[test]
fn cuts_every_dictionary_word_as_jieba_does() {
    let words = dictionary();
    // Alone, and run together twenty at a time so that words meet other words.
    for (i, word) in words.iter().enumerate() {
        if i % 7 == 0 {
            assert_same(word);
        }
    }
    for chunk in words.chunks(20) {
        assert_same(&chunk.concat());
    }
}

/// splitmix64: a reproducible stream of pseudo-random numbers.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn char_in(&mut self, from: u32, to: u32) -> char {
        char::from_u32(from + self.below((to - from + 1) as usize) as u32).unwrap()
    }
}

#[test]
fn cuts_generated_text_as_jieba_does() {
    let words = dictionary();
    let mut random = Random(53);
    let pieces: &[&str] = &[
        " ",
        "  ",
        "\r\n",
        "\n",
        "\t",
        "，",
        "。",
        "！",
        "、",
        "·",
        ".",
        "-",
        "_",
        "+",
        "#",
        "&",
        "%",
        "v1.2-beta",
        "WES-5.4.5",
        "3.14",
        "C++",
        "Node.js",
        "100%",
        "a_b",
        "--",
        "..",
        "é",
        "😀",
        "ｆｕｌｌ",
        "ひらがな",
        "カタカナ",
        "한국어",
        "iPhone",
        "2024年",
        "x86_64",
    ];
    for _ in 0..4_000 {
        let mut text = String::new();
        for _ in 0..1 + random.below(12) {
            match random.below(10) {
                0..=4 => text.push_str(&words[random.below(words.len())]),
                5 => text.push(random.char_in(0x4E00, 0x9FFF)),
                6 => text.push(random.char_in(0x3400, 0x4DBF)),
                7 => text.push(random.char_in(0x20, 0x7E)),
                8 => text.push_str(pieces[random.below(pieces.len())]),
                _ => {
                    // Characters the model covers, unlikely to be words together.
                    for _ in 0..2 + random.below(4) {
                        text.push(random.char_in(0x4E00, 0x9FD5));
                    }
                }
            }
        }
        assert_same(&text);
    }
    for text in [
        "",
        " ",
        "\r\n",
        "a",
        "中",
        "𠀀𠀁",
        "鿖鿗",
        "我来到北京清华大学",
        "他来到了网易杭研大厦",
    ] {
        assert_same(text);
    }
}

#[test]
fn cuts_alike_at_the_edges_of_every_character_range() {
    // Each range a run is made of, by its first and last character and the ones just outside.
    let edges = [
        '\u{33FF}',
        '\u{3400}',
        '\u{4DBF}',
        '\u{4DC0}',
        '\u{4DFF}',
        '\u{4E00}',
        '\u{9FD5}',
        '\u{9FD6}',
        '\u{9FFF}',
        '\u{A000}',
        '\u{F8FF}',
        '\u{F900}',
        '\u{FAFF}',
        '\u{FB00}',
        '\u{1FFFF}',
        '\u{20000}',
        '\u{2A6DF}',
        '\u{2A6E0}',
        '\u{2A6FF}',
        '\u{2A700}',
        '\u{2B73F}',
        '\u{2B740}',
        '\u{2B81F}',
        '\u{2B820}',
        '\u{2CEAF}',
        '\u{2CEB0}',
        '\u{2EBEF}',
        '\u{2EBF0}',
        '\u{2F7FF}',
        '\u{2F800}',
        '\u{2FA1F}',
        '\u{2FA20}',
    ];
    for a in edges {
        for b in edges {
            assert_same(&format!("中文{a}{b}测试"));
            assert_same(&format!("{a}数据库{b}x1{a}"));
        }
    }
}

#[test]
fn a_word_the_route_cuts_into_characters_is_not_given_to_the_model() {
    // Dictionary words whose best route is one character at a time: with the model on, such
    // a run is emitted character by character, not re-joined.
    let words = dictionary();
    let split: Vec<&String> = words
        .iter()
        .filter(|w| w.chars().count() >= 2 && OURS.cut(w, false).len() == w.chars().count())
        .take(500)
        .collect();
    assert!(
        !split.is_empty(),
        "no dictionary word is cut into its characters"
    );
    for word in split {
        assert_same(word);
        assert_same(&format!("。{word}，"));
    }
}

#[test]
fn cuts_one_very_long_run_as_jieba_does() {
    // 20 000 words without a separator: one run, longer than the buffers a thread keeps.
    let words = dictionary();
    let text: String = words
        .iter()
        .step_by(17)
        .take(20_000)
        .map(String::as_str)
        .collect();
    assert!(text.chars().count() > 40_000);
    assert_same(&text);
    // And the buffers still work for a short text after it.
    assert_same("我来到北京清华大学");
}
