//! The tags' vocabulary: what a valid tag name is and the key that makes two spellings one tag
//! ([`TagName`], [`tag_key`]), the limits of the routes, the `tags_changed` event the search
//! feature will index ([`TagsEvent`]), the opaque cursors of the owner's list and of a tag's
//! article list, and the shapes the routes answer with.
//!
//! **Names and keys.** A name is taken in Unicode NFKC (compatibility forms fold: full-width
//! `Ｒｕｓｔ` is `Rust`, a decomposed `ü` is the composed one), trimmed, and its runs of spaces
//! collapse to one; that is the name stored and shown. It is refused (code 4) when
//! it holds a control or bidi character, or an invisible format character — zero-width spaces,
//! the soft hyphen, the BOM, word joiners, fillers, tag characters — rather than stripped
//! silently: a name that renders like another must not be a different tag, and a name that
//! looks like nothing is no name. Emoji keep working: a variation selector (U+FE0E, U+FE0F)
//! right after a visible character and a zero-width joiner between two visible characters are
//! allowed. The key ([`tag_key`]) is the name lower-cased (Unicode), with every invisible format
//! character dropped, in NFKC again: what makes two names one tag of their owner.

use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

use crate::{biz::Biz, user::Person};
use platform::{
    error::{AppError, Msg},
    text::{self, Lines},
};

/// Topic of tag replacements, recorded in the replace's transaction: the object's tags as they
/// are after it, for the search feature to index.
pub const TOPIC_TAGS_CHANGED: &str = "tags_changed";
/// Longest tag name, in characters (not bytes), after normalising.
pub const MAX_TAG_NAME_CHARS: usize = 32;
/// Most tags on one object, after duplicates collapse.
pub const MAX_TAGS_PER_OBJECT: usize = 20;
/// The version of [`tag_key`]'s rules that stored keys follow (the start-up re-key records it).
pub const TAG_KEY_RULES: &str = "nfkc-1";

/// `text` with its white space runs collapsed to one space and trimmed.
fn collapse_spaces(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The key under which an owner's tag names are unique (module docs): NFKC, invisible format
/// characters dropped, white space collapsed and trimmed, lower-cased, NFKC again. So
/// `" Rust "`, `"rust"`, `"RUST"`, `"Ｒｕｓｔ"` and `"a  b"`/`"a b"` each name one tag. Total: it
/// keys any stored name, also one written before these rules (the start-up re-key).
pub fn tag_key(name: &str) -> String {
    let visible: String = name
        .nfkc()
        .filter(|c| !text::is_invisible_format(*c))
        .collect();
    collapse_spaces(&visible).to_lowercase().nfkc().collect()
}

/// A tag name a caller may create (module docs): normalised, 1–[`MAX_TAG_NAME_CHARS`]
/// characters, one line, no control, bidi or invisible format characters, few combining marks
/// on a character, something visible; with its [`tag_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagName {
    /// Normalised (NFKC, white space collapsed, trimmed): what lists show.
    pub name: String,
    /// Its [`tag_key`]: what makes it unique per owner.
    pub key: String,
}

impl TagName {
    /// Checks `raw` (field `name`); code 4 naming the field otherwise.
    pub fn parse(raw: &str) -> Result<Self, AppError> {
        // Surrounding white space goes first (tabs and line breaks included, as ever); inside,
        // only spaces are white space a single-line name may hold.
        let normal: String = raw.trim().nfkc().collect();
        text::check("name", &normal, Lines::Single)?;
        refuse_invisible_format(&normal)?;
        let name = collapse_spaces(&normal);
        if name.is_empty() {
            return Err(AppError::InvalidInput(Msg::field(
                "name",
                "must not be empty",
                "不能为空",
            )));
        }
        if name.chars().count() > MAX_TAG_NAME_CHARS {
            return Err(AppError::InvalidInput(Msg::field(
                "name",
                format!("at most {MAX_TAG_NAME_CHARS} characters"),
                format!("最多 {MAX_TAG_NAME_CHARS} 个字符"),
            )));
        }
        text::require_visible("name", &name)?;
        text::limit_combining_marks("name", &name)?;
        let key = tag_key(&name);
        Ok(Self { name, key })
    }
}

/// Refuses an invisible format character in a name, except the two emoji need: a variation
/// selector right after a visible character, a zero-width joiner between two visible ones.
fn refuse_invisible_format(name: &str) -> Result<(), AppError> {
    let chars: Vec<char> = name.chars().collect();
    let visible_at = |index: Option<usize>| {
        index
            .and_then(|index| chars.get(index))
            .is_some_and(|c| text::is_visible(*c))
    };
    for (index, &c) in chars.iter().enumerate() {
        if !text::is_invisible_format(c) {
            continue;
        }
        let before = visible_at(index.checked_sub(1));
        let allowed = match c {
            '\u{FE0E}' | '\u{FE0F}' => before,
            '\u{200D}' => before && visible_at(index.checked_add(1)),
            _ => false,
        };
        if !allowed {
            return Err(AppError::InvalidInput(Msg::field(
                "name",
                "must not contain invisible characters (zero-width spaces, soft hyphens, …)",
                "不能包含不可见字符（零宽空格、软连字符等）",
            )));
        }
    }
    Ok(())
}

/// Tag ids a replace may put on an object: each positive, duplicates collapsed (sorted), at
/// most [`MAX_TAGS_PER_OBJECT`] of them; code 4 naming `tids` otherwise.
pub fn distinct_tag_ids(tids: &[i64]) -> Result<Vec<i64>, AppError> {
    if tids.iter().any(|&tid| tid <= 0) {
        return Err(AppError::InvalidInput(Msg::field(
            "tids",
            "every id must be a positive integer",
            "每个 id 须为正整数",
        )));
    }
    let mut distinct = tids.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() > MAX_TAGS_PER_OBJECT {
        return Err(AppError::InvalidInput(Msg::field(
            "tids",
            format!("at most {MAX_TAGS_PER_OBJECT} tags on an object"),
            format!("一个对象最多 {MAX_TAGS_PER_OBJECT} 个标签"),
        )));
    }
    Ok(distinct)
}

/// A tag as the routes show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema, sqlx::FromRow)]
pub struct Tag {
    /// Tag id.
    pub id: i64,
    /// Its name as first written, trimmed.
    pub name: String,
}

/// An object's tags were replaced (`tags_changed`): the owner's tags on it now, for the search
/// feature to index. Keyed `biz:bizId`, so one object's events keep their order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TagsEvent {
    /// The owner who tagged it.
    pub uid: i64,
    /// Kind of object.
    pub biz: Biz,
    /// The object.
    pub biz_id: i64,
    /// The names of its tags now, by tag id (empty: cleared).
    pub tags: Vec<String>,
    /// When (ms).
    pub time: i64,
}

/// A position in an owner's tag list (`GET /tags`): the last tag of a page, by id (lists go on
/// strictly above it). Sent to clients as an opaque string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagCursor {
    /// The last tag id served.
    pub tag_id: i64,
}

impl TagCursor {
    /// The opaque spelling ([`platform::page`]).
    pub fn encode(self) -> String {
        platform::page::encode_cursor(&[self.tag_id])
    }

    /// Parses what [`TagCursor::encode`] wrote; anything else is invalid input naming `cursor`.
    pub fn decode(value: &str) -> Result<Self, AppError> {
        let [tag_id] = platform::page::decode_cursor(value)?;
        if tag_id <= 0 {
            return Err(platform::page::invalid_cursor());
        }
        Ok(Self { tag_id })
    }
}

/// A position in a tag's article list: the last article of a page (lists go on strictly below
/// its id, so a page is never repeated or skipped, whatever is published meanwhile). Sent to
/// clients as an opaque string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArticleCursor {
    /// The last article id served.
    pub article_id: i64,
}

impl ArticleCursor {
    /// Before every article: the first page.
    pub const START: Self = Self {
        article_id: i64::MAX,
    };

    /// The opaque spelling ([`platform::page`]).
    pub fn encode(self) -> String {
        platform::page::encode_cursor(&[self.article_id])
    }

    /// Parses what [`ArticleCursor::encode`] wrote; anything else is invalid input naming
    /// `cursor`.
    pub fn decode(value: &str) -> Result<Self, AppError> {
        let [article_id] = platform::page::decode_cursor(value)?;
        if article_id <= 0 {
            return Err(AppError::InvalidInput(Msg::field(
                "cursor",
                "is not a cursor this list gave",
                "不是本列表给出的游标",
            )));
        }
        Ok(Self { article_id })
    }
}

/// The order of a topic's articles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopicOrder {
    /// Newest article (by id) first; paging never repeats or skips one.
    #[default]
    Newest,
    /// Most liked first (ties: newest first), by the likes when each page is read: a like
    /// between two pages can move an article across the cut.
    Hottest,
}

impl TopicOrder {
    /// `new` (or absent) or `hot`; code 4 naming `sort` otherwise.
    pub fn parse(sort: Option<&str>) -> Result<Self, AppError> {
        match sort {
            None | Some("new") => Ok(Self::Newest),
            Some("hot") => Ok(Self::Hottest),
            Some(_) => Err(AppError::InvalidInput(Msg::field(
                "sort",
                "must be new or hot",
                "须为 new 或 hot",
            ))),
        }
    }
}

/// Where a page of a topic's articles starts: after the last one served (its likes count only
/// in [`TopicOrder::Hottest`]). Sent to clients as an opaque string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicCursor {
    /// The last article's likes when it was served.
    pub likes: i64,
    /// The last article id served.
    pub article_id: i64,
}

impl TopicCursor {
    /// The first page.
    pub const START: Self = Self {
        likes: i64::MAX,
        article_id: i64::MAX,
    };

    /// The opaque spelling of the cursor after `last` in `order`.
    pub fn after(order: TopicOrder, last: &TaggedArticle) -> String {
        match order {
            TopicOrder::Newest => ArticleCursor {
                article_id: last.id,
            }
            .encode(),
            TopicOrder::Hottest => platform::page::encode_cursor(&[last.like_cnt, last.id]),
        }
    }

    /// Parses what [`TopicCursor::after`] wrote for `order`; anything else is invalid input
    /// naming `cursor`.
    pub fn decode(order: TopicOrder, value: &str) -> Result<Self, AppError> {
        match order {
            TopicOrder::Newest => Ok(Self {
                likes: i64::MAX,
                article_id: ArticleCursor::decode(value)?.article_id,
            }),
            TopicOrder::Hottest => {
                let [likes, article_id] = platform::page::decode_cursor(value)?;
                if likes < 0 || article_id <= 0 {
                    return Err(AppError::InvalidInput(Msg::field(
                        "cursor",
                        "is not a cursor this list gave",
                        "不是本列表给出的游标",
                    )));
                }
                Ok(Self { likes, article_id })
            }
        }
    }
}

/// A published article carrying a tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaggedArticle {
    /// Article id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Abstract (HTML-escaped text).
    #[serde(rename = "abstract")]
    pub abstract_text: String,
    /// Its author.
    pub author: Person,
    /// Likes.
    pub like_cnt: i64,
    /// Comments.
    pub comment_cnt: i64,
    /// First publication (ms).
    pub ctime: i64,
    /// Last publish (ms).
    pub utime: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_trimmed_and_keyed_case_insensitively() {
        let rust = TagName::parse("  Rust \t").unwrap();
        assert_eq!(
            TagName::parse("Ru\tst").unwrap_err().code(),
            4,
            "a tab inside"
        );
        assert_eq!((rust.name.as_str(), rust.key.as_str()), ("Rust", "rust"));
        for same in ["rust", "RUST", " rUsT "] {
            assert_eq!(TagName::parse(same).unwrap().key, rust.key, "{same:?}");
        }
        // Unicode lower-casing, not ASCII only; other scripts are kept as they are.
        assert_eq!(tag_key("ÉCOLE"), "école");
        assert_eq!(tag_key("ΑΘΗΝΑ"), "αθηνα");
        assert_eq!(TagName::parse(" 数据库 ").unwrap().key, "数据库");
        // Inner spaces are part of the name.
        assert_ne!(tag_key("machine learning"), tag_key("machinelearning"));
    }

    /// The look-alikes of issue 46: each is the same tag as its plain spelling, or refused.
    #[test]
    fn look_alikes_are_one_tag_or_refused() {
        let rust = TagName::parse("Rust").unwrap();
        // Full-width letters fold (NFKC); the name shown is the folded one.
        let wide = TagName::parse("Ｒｕｓｔ").unwrap();
        assert_eq!((wide.name.as_str(), wide.key.as_str()), ("Rust", "rust"));
        for invisible in [
            "Rust\u{200B}",
            "\u{200B}Rust",
            "Ru\u{00AD}st",
            "Ru\u{2060}st",
            "\u{FEFF}Rust",
            "Rust\u{200D}",
        ] {
            let err = TagName::parse(invisible).unwrap_err();
            assert_eq!(err.code(), 4, "{invisible:?}");
            assert!(
                err.to_string()
                    .starts_with("name: must not contain invisible"),
                "{invisible:?}: {err}"
            );
            // A name stored before the rules keys like its plain spelling (the re-key).
            assert_eq!(tag_key(invisible), rust.key, "{invisible:?}");
        }
        // Composed and decomposed: one tag, shown composed.
        let composed = TagName::parse("R\u{00FC}st").unwrap();
        let decomposed = TagName::parse("Ru\u{0308}st").unwrap();
        assert_eq!(composed, decomposed);
        assert_eq!(composed.name, "R\u{00FC}st");
        // White space runs collapse, of any kind (NFKC turns the ideographic space into one).
        let spaced = TagName::parse("a b").unwrap();
        for same in ["a  b", "a\u{3000}b", "a \u{00A0} b", "A B"] {
            assert_eq!(TagName::parse(same).unwrap().key, spaced.key, "{same:?}");
        }
        assert_eq!(TagName::parse("a  b").unwrap().name, "a b");
        // Emoji: a variation selector and a joiner between visible characters pass, and key
        // like the sequence without them.
        let heart = TagName::parse("\u{2764}\u{FE0F}").unwrap();
        assert_eq!(heart.key, TagName::parse("\u{2764}").unwrap().key);
        assert!(TagName::parse("\u{1F468}\u{200D}\u{1F4BB}").is_ok());
        assert!(TagName::parse("\u{FE0F}x").is_err());
        // Zalgo is refused (counted in NFKC: the first acute composes with the a).
        assert!(TagName::parse(&format!("a{}", "\u{0301}".repeat(5))).is_ok());
        assert!(TagName::parse(&format!("a{}", "\u{0301}".repeat(6))).is_err());
        assert!(TagName::parse("Nguye\u{0302}\u{0303}n").is_ok());
    }

    #[test]
    fn names_are_refused_when_empty_too_long_or_invisible() {
        for bad in [
            "",
            "   ",
            "\u{200B}\u{200B}",
            "\u{3164}",
            "a\u{0000}b",
            "a\nb",
            "a\u{202E}b",
            &"x".repeat(33),
        ] {
            let err = TagName::parse(bad).unwrap_err();
            assert_eq!(err.code(), 4, "{bad:?}");
            assert!(err.to_string().starts_with("name:"), "{bad:?}: {err}");
        }
        // 32 characters of 3 bytes each: counted in characters.
        assert!(TagName::parse(&"标".repeat(32)).is_ok());
        assert!(TagName::parse(&"标".repeat(33)).is_err());
        // Trimmed and collapsed before counting.
        assert!(TagName::parse(&format!("  {}  ", "x".repeat(32))).is_ok());
        assert!(TagName::parse(&format!("{}   {}", "x".repeat(15), "y".repeat(16))).is_ok());
    }

    #[test]
    fn tag_ids_collapse_and_stay_within_bounds() {
        assert_eq!(distinct_tag_ids(&[3, 1, 3, 2, 1]).unwrap(), vec![1, 2, 3]);
        assert!(distinct_tag_ids(&[]).unwrap().is_empty());
        assert_eq!(distinct_tag_ids(&[1, 0]).unwrap_err().code(), 4);
        assert_eq!(distinct_tag_ids(&[-5]).unwrap_err().code(), 4);
        let twenty: Vec<i64> = (1..=20).collect();
        assert_eq!(distinct_tag_ids(&twenty).unwrap().len(), 20);
        let many_repeats: Vec<i64> = twenty.iter().chain(&twenty).copied().collect();
        assert_eq!(distinct_tag_ids(&many_repeats).unwrap().len(), 20);
        let twenty_one: Vec<i64> = (1..=21).collect();
        assert_eq!(distinct_tag_ids(&twenty_one).unwrap_err().code(), 4);
    }

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let cursor = ArticleCursor { article_id: 42 };
        assert_eq!(ArticleCursor::decode(&cursor.encode()).unwrap(), cursor);
        let tags = TagCursor { tag_id: 7 };
        assert_eq!(TagCursor::decode(&tags.encode()).unwrap(), tags);
        assert!(TagCursor::decode(&platform::page::encode_cursor(&[0])).is_err());
        assert!(TagCursor::decode("nope").is_err());
        for bad in [
            "",
            "abc",
            "!!",
            &platform::page::encode_cursor(&[0]),
            &platform::page::encode_cursor(&[-3]),
            &platform::page::encode_cursor(&[1, 2]),
        ] {
            assert!(
                matches!(ArticleCursor::decode(bad), Err(AppError::InvalidInput(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_event_is_camel_case_with_the_biz_spelled_as_everywhere() {
        let event = TagsEvent {
            uid: 7,
            biz: Biz::Article,
            biz_id: 42,
            tags: vec!["Rust".to_owned()],
            time: 1000,
        };
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            serde_json::json!({"uid": 7, "biz": "article", "bizId": 42, "tags": ["Rust"], "time": 1000})
        );
    }
}
