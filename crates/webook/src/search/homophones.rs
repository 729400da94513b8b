//! Characters that sound alike: what a pinyin input method offers for the same syllable, and
//! so the usual slip when Chinese is typed ("微服物" for "微服务": 物 and 务 are both `wu`).
//! Built once, on first use, from the readings of the basic CJK block (about 21 000
//! characters, each under its most common reading, tones ignored).

use std::{collections::HashMap, sync::LazyLock};

use pinyin::ToPinyin;

static BY_SOUND: LazyLock<HashMap<&'static str, Vec<char>>> = LazyLock::new(|| {
    let mut by_sound: HashMap<&'static str, Vec<char>> = HashMap::new();
    for c in ('\u{4E00}'..='\u{9FFF}').filter_map(|c| c.to_pinyin().map(|p| (c, p))) {
        by_sound.entry(c.1.plain()).or_default().push(c.0);
    }
    by_sound
});

/// The characters read like `c`, `c` excluded (none for a character without a reading).
pub fn of(c: char) -> impl Iterator<Item = char> {
    c.to_pinyin()
        .and_then(|reading| BY_SOUND.get(reading.plain()))
        .into_iter()
        .flatten()
        .copied()
        .filter(move |other| *other != c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_of_one_syllable_sound_alike() {
        let wu: Vec<char> = of('物').collect();
        assert!(wu.contains(&'务') && wu.contains(&'无'), "{wu:?}");
        assert!(!wu.contains(&'物'));
        assert!(!of('前').any(|c| c == '后'));
        assert_eq!(of('a').count(), 0);
    }
}
