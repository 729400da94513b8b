//! Chinese word segmentation with jieba's dictionary held as a finite-state transducer.
//!
//! The segmentation is jieba's, word for word (that of jieba-rs 0.11, whose output this
//! module's tests compare it with): text is split into runs of Han characters and ASCII word
//! characters; each run's dictionary words form a graph whose most probable path (word
//! frequencies over the dictionary's total) is the cut; characters the path leaves alone
//! are joined again by jieba's hidden Markov model when they are no dictionary word
//! together. Search mode adds every two- and three-character dictionary word inside a
//! longer one, and the parts of a connected identifier (`v1.2-beta`).
//!
//! What differs is the memory. jieba-rs keeps its 349 045 words in a hash trie (a 16 MiB
//! slot table), a record and a logarithm per word and the decompressed text it loaded them
//! from: ≈ 38 MB resident for as long as the process lives. Here the words and their
//! frequencies are one FST map of 3.2 MB (and a 252 kB table of its first steps), built on
//! first use from the compressed list in this folder (`words.txt.gz`, 1.7 MB in the binary),
//! read line by line so the text is never whole in memory. The model for unknown words is
//! jieba-rs's own, compiled into its code: `HMM` is a jieba-rs segmenter with an empty
//! dictionary (≈ 0.5 MB), which cuts any run of two or more characters with the model alone.
//!
//! `words.txt.gz` is jieba's default dictionary (`dict.txt` of jieba-rs, MIT licence)
//! without its part-of-speech column, in byte order, compressed: made with
//! `cut -d' ' -f1,2 dict.txt | LC_ALL=C sort | gzip -9n`.

use std::io::BufRead;
use std::ops::Range;
use std::sync::LazyLock;

use tantivy_fst::raw::{CompiledAddr, Fst, Output};

/// jieba's dictionary: one `word frequency` line per word, in byte order.
static WORDS: &[u8] = include_bytes!("words.txt.gz");

/// Bytes the map of [`WORDS`] takes (3 200 048) and a little to spare, so its buffer is
/// allocated once.
const MAP_BYTES: usize = 3_300_000;

/// Most bytes of buffers a thread keeps between segmentations.
const SCRATCH_BYTES: usize = 64 << 10;

/// A segmenter without a dictionary: every run it is given goes through the model.
static HMM: LazyLock<jieba_rs::Jieba> = LazyLock::new(jieba_rs::Jieba::empty);

/// One word of a segmentation: its text and where it sits in the text segmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Word<'a> {
    /// The word.
    pub word: &'a str,
    /// Offset of its first byte.
    pub byte_start: usize,
    /// Offset past its last byte.
    pub byte_end: usize,
}

/// The segmenter: jieba's dictionary as a map from word to frequency.
pub struct Segmenter {
    words: Fst<Vec<u8>>,
    /// Where the map stands after each character of the main CJK block (U+4E00–U+9FFF, what
    /// nearly every word starts with): its node's address and the output so far, `None` when
    /// no word starts with it. The three byte steps a walk from the root would take, taken
    /// once (252 kB).
    first_char: Vec<Option<(u32, u32)>>,
    /// `ln` of the frequencies' sum.
    log_total: f64,
}

/// The main CJK block, which [`Segmenter::first_char`] covers.
const MAIN_BLOCK: std::ops::RangeInclusive<u32> = 0x4E00..=0x9FFF;

/// Buffers of one segmentation, kept per thread between calls.
#[derive(Default)]
struct Scratch {
    chars: Vec<(usize, char)>,
    edges: Vec<(usize, u64)>,
    first_edge: Vec<usize>,
    route: Vec<Step>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Scratch> = std::cell::Cell::new(Scratch::default());
}

/// What can go wrong building a segmenter from a word list.
#[derive(Debug, thiserror::Error)]
pub enum DictionaryError {
    /// The list could not be read (decompressed).
    #[error("reading the word list: {0}")]
    Read(#[from] std::io::Error),
    /// A line is not `word frequency`.
    #[error("line {line} of the word list is not `word frequency`")]
    Line {
        /// One-based line number.
        line: usize,
    },
    /// The words are not unique and in byte order.
    #[error("building the word map: {0}")]
    Map(#[from] tantivy_fst::Error),
    /// A frequency or the map's size is beyond what the first-character table holds (2^32).
    #[error("the word map is too large for its first-character table")]
    TooLarge,
}

/// One step of the best path through a run: where the word from here ends, and the log
/// probability of the rest of the run from here.
#[derive(Clone, Copy)]
struct Step {
    end: usize,
    prob: f64,
}

impl Segmenter {
    /// The segmenter over jieba's default dictionary (≈ 0.16 s in a release build).
    pub fn embedded() -> Result<Self, DictionaryError> {
        Self::from_list(std::io::BufReader::new(flate2::bufread::GzDecoder::new(
            WORDS,
        )))
    }

    /// A segmenter over `list`: `word frequency` lines, words unique and in byte order.
    pub fn from_list(list: impl BufRead) -> Result<Self, DictionaryError> {
        let mut builder = tantivy_fst::MapBuilder::new(Vec::with_capacity(MAP_BYTES))?;
        let mut total = 0u64;
        for (index, line) in list.lines().enumerate() {
            let line = line?;
            let (word, freq) = line
                .split_once(' ')
                .and_then(|(word, freq)| Some((word, freq.trim().parse::<u64>().ok()?)))
                .ok_or(DictionaryError::Line { line: index + 1 })?;
            builder.insert(word, freq)?;
            total += freq;
        }
        let words = Fst::new(builder.into_inner()?)?;
        let mut first_char = Vec::with_capacity(MAIN_BLOCK.count());
        for c in MAIN_BLOCK.filter_map(char::from_u32) {
            let step = match Self::step(&words, c) {
                Some((addr, out)) => Some((
                    u32::try_from(addr).map_err(|_| DictionaryError::TooLarge)?,
                    u32::try_from(out).map_err(|_| DictionaryError::TooLarge)?,
                )),
                None => None,
            };
            first_char.push(step);
        }
        Ok(Self {
            words,
            first_char,
            log_total: (total as f64).ln(),
        })
    }

    /// Where `words` stands after `c` from its root: the node's address and the output so
    /// far; `None` when no word starts with `c`.
    fn step(words: &Fst<Vec<u8>>, c: char) -> Option<(CompiledAddr, u64)> {
        let mut node = words.root();
        let mut out = Output::zero();
        for b in c.encode_utf8(&mut [0; 4]).bytes() {
            let transition = node.transition(node.find_input(b)?);
            out = out.cat(transition.out);
            node = words.node(transition.addr);
        }
        Some((node.addr(), out.value()))
    }

    /// Whether `word` is a dictionary word.
    pub fn has_word(&self, word: &str) -> bool {
        self.words.contains_key(word)
    }

    /// Bytes of the dictionary in memory: the map and its first-character table.
    pub fn memory_bytes(&self) -> usize {
        self.words.size() + self.first_char.len() * std::mem::size_of::<Option<(u32, u32)>>()
    }

    /// The words of `text` in order, covering it whole. With `hmm`, characters the
    /// dictionary leaves alone are joined by the model; without, only runs of ASCII letters
    /// and digits are.
    pub fn cut<'a>(&self, text: &'a str, hmm: bool) -> Vec<Word<'a>> {
        let mut words = Vec::new();
        self.cut_each(text, hmm, |word, _| words.push(word));
        words
    }

    /// Search mode: the words of [`Self::cut`], each preceded — for a word joined by `.`,
    /// `_` or `-` — by its parts that have a letter and two bytes or more, then by the two-
    /// and then three-character dictionary words inside it.
    pub fn cut_for_search<'a>(&self, text: &'a str, hmm: bool) -> Vec<Word<'a>> {
        let mut out = Vec::new();
        self.cut_each(text, hmm, |word, in_run| {
            if word.word.bytes().any(is_connector) {
                let mut offset = 0;
                for part in word.word.split(['.', '_', '-']) {
                    if part.len() >= 2 && part.bytes().any(|b| b.is_ascii_alphabetic()) {
                        let byte_start = word.byte_start + offset;
                        out.push(Word {
                            word: part,
                            byte_start,
                            byte_end: byte_start + part.len(),
                        });
                    }
                    offset += part.len() + 1;
                }
            }
            // Only a word of three characters or more has shorter words inside it.
            if in_run && word.word.chars().nth(2).is_some() {
                let starts: Vec<usize> = word
                    .word
                    .char_indices()
                    .map(|(at, _)| at)
                    .chain([word.word.len()])
                    .collect();
                let chars = starts.len() - 1;
                for len in [2, 3] {
                    if chars > len {
                        for i in 0..=chars - len {
                            let gram = &word.word[starts[i]..starts[i + len]];
                            if self.has_word(gram) {
                                out.push(Word {
                                    word: gram,
                                    byte_start: word.byte_start + starts[i],
                                    byte_end: word.byte_start + starts[i + len],
                                });
                            }
                        }
                    }
                }
            }
            out.push(word);
        });
        out
    }

    /// Hands each word of `text` to `emit` with whether it came from a run of word
    /// characters (the rest — spaces, punctuation — are one character each, `\r\n` one).
    fn cut_each<'a>(&self, text: &'a str, hmm: bool, mut emit: impl FnMut(Word<'a>, bool)) {
        let mut scratch = SCRATCH.take();
        let Scratch {
            chars,
            edges,
            first_edge,
            route,
        } = &mut scratch;
        let mut at = 0;
        while at < text.len() {
            let rest = &text[at..];
            let in_run = rest.chars().next().is_some_and(is_run_char);
            let len = rest
                .char_indices()
                .find(|&(_, c)| is_run_char(c) != in_run)
                .map_or(rest.len(), |(i, _)| i);
            let run = &rest[..len];
            if in_run {
                chars.clear();
                chars.extend(run.char_indices());
                self.graph(run, chars, edges, first_edge);
                self.best_path(chars, edges, first_edge, route);
                self.cut_run(run, at, chars, route, hmm, &mut |word| emit(word, true));
            } else {
                let mut i = 0;
                while i < run.len() {
                    let width = if run[i..].starts_with("\r\n") {
                        2
                    } else {
                        run[i..].chars().next().map_or(1, char::len_utf8)
                    };
                    emit(
                        Word {
                            word: &run[i..i + width],
                            byte_start: at + i,
                            byte_end: at + i + width,
                        },
                        false,
                    );
                    i += width;
                }
            }
            at += len;
        }
        let kept = chars.capacity() * std::mem::size_of::<(usize, char)>()
            + edges.capacity() * std::mem::size_of::<(usize, u64)>()
            + first_edge.capacity() * std::mem::size_of::<usize>()
            + route.capacity() * std::mem::size_of::<Step>();
        if kept <= SCRATCH_BYTES {
            SCRATCH.set(scratch);
        }
    }

    /// The dictionary words of `run` from each character: the (end character, frequency) of
    /// those starting at character `i` are `edges[first_edge[i]..first_edge[i+1]]`, shortest
    /// first.
    fn graph(
        &self,
        run: &str,
        chars: &[(usize, char)],
        edges: &mut Vec<(usize, u64)>,
        first_edge: &mut Vec<usize>,
    ) {
        edges.clear();
        first_edge.clear();
        let bytes = run.as_bytes();
        for start in 0..chars.len() {
            first_edge.push(edges.len());
            let mut node = self.words.root();
            let mut out = Output::zero();
            let mut end = start;
            let first = chars[start].1 as u32;
            if MAIN_BLOCK.contains(&first) {
                let Some((addr, prefix)) = self.first_char[(first - MAIN_BLOCK.start()) as usize]
                else {
                    continue;
                };
                node = self.words.node(addr as CompiledAddr);
                out = Output::new(u64::from(prefix));
                end += 1;
                if node.is_final() {
                    edges.push((end, out.cat(node.final_output()).value()));
                }
            }
            'walk: while end < chars.len() {
                let (from, c) = chars[end];
                for &b in &bytes[from..from + c.len_utf8()] {
                    let Some(i) = node.find_input(b) else {
                        break 'walk;
                    };
                    let transition = node.transition(i);
                    out = out.cat(transition.out);
                    node = self.words.node(transition.addr);
                }
                end += 1;
                if node.is_final() {
                    edges.push((end, out.cat(node.final_output()).value()));
                }
            }
        }
        first_edge.push(edges.len());
    }

    /// jieba's route: from the last character back, each character's best next step — the
    /// word from it that makes the rest most probable (the longer one on a tie), or the
    /// character alone when no word starts there.
    fn best_path(
        &self,
        chars: &[(usize, char)],
        edges: &[(usize, u64)],
        first_edge: &[usize],
        route: &mut Vec<Step>,
    ) {
        let n = chars.len();
        route.clear();
        route.resize(n + 1, Step { end: n, prob: 0.0 });
        let alone = 0.0 - self.log_total;
        for i in (0..n).rev() {
            let mut best: Option<Step> = None;
            for &(end, freq) in &edges[first_edge[i]..first_edge[i + 1]] {
                let prob = (freq as f64).ln() - self.log_total + route[end].prob;
                if best.is_none_or(|b| prob > b.prob || (prob == b.prob && end > b.end)) {
                    best = Some(Step { end, prob });
                }
            }
            route[i] = best.unwrap_or(Step {
                end: i + 1,
                prob: alone + route[i + 1].prob,
            });
        }
    }

    /// Emits the words of `run` (at byte `base` of the text) along `route`. Characters the
    /// route leaves alone in a row are held back and emitted together: with `hmm`, one by
    /// one if together they are a dictionary word, through the model if not; without, only
    /// ASCII letters and digits are held back, and come out as one word.
    fn cut_run<'a>(
        &self,
        run: &'a str,
        base: usize,
        chars: &[(usize, char)],
        route: &[Step],
        hmm: bool,
        emit: &mut impl FnMut(Word<'a>),
    ) {
        let mut held: Option<usize> = None;
        let mut i = 0;
        while i < chars.len() {
            let end = route[i].end;
            if end - i == 1 && (hmm || chars[i].1.is_ascii_alphanumeric()) {
                held.get_or_insert(i);
            } else {
                if let Some(from) = held.take() {
                    self.release(run, base, chars, from..i, hmm, emit);
                }
                emit(span(run, base, chars, i..end));
            }
            i = end;
        }
        if let Some(from) = held {
            self.release(run, base, chars, from..chars.len(), hmm, emit);
        }
    }

    /// Emits the characters `held` of `run` that the route left alone (see
    /// [`Self::cut_run`]).
    fn release<'a>(
        &self,
        run: &'a str,
        base: usize,
        chars: &[(usize, char)],
        held: Range<usize>,
        hmm: bool,
        emit: &mut impl FnMut(Word<'a>),
    ) {
        if !hmm || held.len() == 1 {
            return emit(span(run, base, chars, held));
        }
        let whole = span(run, base, chars, held.clone());
        if self.has_word(whole.word) {
            for i in held {
                emit(span(run, base, chars, i..i + 1));
            }
            return;
        }
        for word in HMM.cut(whole.word, true) {
            emit(Word {
                word: word.word,
                byte_start: whole.byte_start + word.byte_start,
                byte_end: whole.byte_start + word.byte_end,
            });
        }
    }
}

/// Characters `range` of `run` (at byte `base` of the text) as a word.
fn span<'a>(run: &'a str, base: usize, chars: &[(usize, char)], range: Range<usize>) -> Word<'a> {
    let byte = |i: usize| chars.get(i).map_or(run.len(), |&(at, _)| at);
    let (start, end) = (byte(range.start), byte(range.end));
    Word {
        word: &run[start..end],
        byte_start: base + start,
        byte_end: base + end,
    }
}

/// Characters of a run jieba segments with its dictionary: Han (the CJK unified ideographs
/// and their extensions) and ASCII letters, digits and `+#&._%-`.
fn is_run_char(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphanumeric() || matches!(c, '+' | '#' | '&' | '.' | '_' | '%' | '-')
    } else {
        matches!(c,
            '\u{4E00}'..='\u{9FFF}'
            | '\u{3400}'..='\u{4DBF}'
            | '\u{F900}'..='\u{FAFF}'
            | '\u{20000}'..='\u{2A6DF}'
            | '\u{2A700}'..='\u{2B73F}'
            | '\u{2B740}'..='\u{2B81F}'
            | '\u{2B820}'..='\u{2CEAF}'
            | '\u{2CEB0}'..='\u{2EBEF}'
            | '\u{2F800}'..='\u{2FA1F}')
    }
}

/// Bytes that join the parts of an identifier.
fn is_connector(b: u8) -> bool {
    matches!(b, b'.' | b'_' | b'-')
}

#[cfg(test)]
mod tests;
