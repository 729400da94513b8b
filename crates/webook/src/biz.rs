//! The kinds of object that reads, likes and collects — and, as they land, comments, tags and
//! rewards — attach to: the `biz` of every `(biz, biz_id)` pair in tables, events, cache keys and
//! the API. One type instead of `"article"` spelled in each feature; the spelling on the wire
//! and in the database is [`Biz::as_str`], and a value the API receives that names no kind is
//! refused at the edge with code 4 ([`Biz::parse`], or serde when it comes in a JSON body).

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use platform::error::{AppError, Msg};

/// A kind of object others can read, like, collect (and later comment on, tag, reward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Biz {
    /// A published article (`published_articles.id`).
    Article,
}

impl Biz {
    /// Every kind, in declaration order.
    pub const ALL: [Biz; 1] = [Biz::Article];

    /// The spelling in the database, events, cache keys and the API.
    pub const fn as_str(self) -> &'static str {
        match self {
            Biz::Article => "article",
        }
    }

    /// `value` as a kind; code 4 naming the field `biz` if it is none.
    pub fn parse(value: &str) -> Result<Self, AppError> {
        value.parse().map_err(|UnknownBiz| {
            AppError::InvalidInput(Msg::field(
                "biz",
                format!("unknown kind of object {value:?}"),
                format!("未知的对象类型 {value:?}"),
            ))
        })
    }
}

/// A `biz` that names no [`Biz`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownBiz;

impl fmt::Display for UnknownBiz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown kind of object")
    }
}

impl std::error::Error for UnknownBiz {}

impl FromStr for Biz {
    type Err = UnknownBiz;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|biz| biz.as_str() == value)
            .ok_or(UnknownBiz)
    }
}

impl fmt::Display for Biz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_its_spelling_and_serde() {
        for biz in Biz::ALL {
            assert_eq!(biz.as_str().parse::<Biz>(), Ok(biz));
            let json = serde_json::to_string(&biz).unwrap();
            assert_eq!(json, format!("\"{}\"", biz.as_str()));
            assert_eq!(serde_json::from_str::<Biz>(&json).unwrap(), biz);
        }
    }

    #[test]
    fn an_unknown_kind_is_invalid_input_naming_the_field() {
        for value in ["", "Article", "articles", "comment", "article "] {
            let err = Biz::parse(value).unwrap_err();
            assert_eq!(err.code(), 4, "{value:?}");
            assert!(err.to_string().contains("biz"), "{value:?}: {err}");
            assert!(serde_json::from_str::<Biz>(&format!("{value:?}")).is_err());
        }
    }
}
