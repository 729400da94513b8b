//! The kinds of object that reads, likes, collects, comments and tags attach to: the `biz` of every `(biz, biz_id)` pair in tables, events, cache keys and
//! the API. One type instead of `"article"` spelled in each feature; the spelling on the wire
//! and in the database is [`Biz::as_str`], and a value the API receives that names no kind is
//! refused at the edge with code 4 ([`Biz::parse`], or serde when it comes in a JSON body).
//! Each kind also says where its objects live and who owns them ([`Biz::owner`],
//! [`Biz::visible_owner`]), so features that attach to objects never name another's tables.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use platform::error::{AppError, Msg};

/// A kind of object others can read, like, collect, comment on and tag.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
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

    /// SQL selecting the author (`author_id`) of object `$1` whatever its state — an article's
    /// draft included — for "is this the caller's object" checks (tags, moderating comments).
    pub const fn owner_query(self) -> &'static str {
        match self {
            Biz::Article => "SELECT author_id FROM articles WHERE id = $1",
        }
    }

    /// SQL selecting the author (`author_id`) of object `$1` if readers can see it (a published
    /// article), for actions readers take on it (comments).
    pub const fn visible_owner_query(self) -> &'static str {
        match self {
            Biz::Article => "SELECT author_id FROM published_articles WHERE id = $1 AND status = 2",
        }
    }

    /// The author of object `id` whatever its state ([`Biz::owner_query`]); `None` if there is
    /// no such object.
    pub async fn owner<'e>(
        self,
        executor: impl sqlx::Executor<'e, Database = sqlx::Any>,
        id: i64,
    ) -> sqlx::Result<Option<i64>> {
        sqlx::query_scalar(self.owner_query())
            .bind(id)
            .fetch_optional(executor)
            .await
    }

    /// The author of object `id` if readers can see it ([`Biz::visible_owner_query`]).
    pub async fn visible_owner<'e>(
        self,
        executor: impl sqlx::Executor<'e, Database = sqlx::Any>,
        id: i64,
    ) -> sqlx::Result<Option<i64>> {
        sqlx::query_scalar(self.visible_owner_query())
            .bind(id)
            .fetch_optional(executor)
            .await
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
