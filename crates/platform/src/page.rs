//! Keyset paging, shared by every list the API serves: the page size a request may ask for, the
//! page it gets back, and the opaque cursor that says where the next page starts.
//!
//! A cursor is the sort key of the last item of a page — one or more integers, such as
//! `(time, id)` or just `id` — spelled as URL-safe base64 of the integers joined by `.`. Lists
//! continue strictly after it, so no item is repeated or skipped whatever is inserted meanwhile,
//! and no list ever scans past what it skips (no `OFFSET`). Clients treat it as opaque; anything
//! that is not a cursor of the expected shape is code 4 naming the field `cursor`.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use serde::Serialize;

use crate::error::{AppError, Msg};

/// Default page size.
pub const DEFAULT_LIMIT: usize = 20;
/// Largest page size (API.md: `limit` ≤ 100).
pub const MAX_LIMIT: usize = 100;

/// `limit` checked against 1..=[`MAX_LIMIT`], [`DEFAULT_LIMIT`] when absent.
pub fn page_limit(limit: Option<i64>) -> Result<usize, AppError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(limit) if (1..=MAX_LIMIT as i64).contains(&limit) => Ok(limit as usize),
        Some(_) => Err(AppError::InvalidInput(Msg::field(
            "limit",
            format!("must be 1-{MAX_LIMIT}"),
            format!("须在 1 到 {MAX_LIMIT} 之间"),
        ))),
    }
}

/// A page of a list, and where the next one starts (absent at the end).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// The cursor of the next page: opaque, absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next: Option<String>,
}

impl<T> Page<T> {
    /// The page of `limit` items from `items`, which a keyset query fetched with `LIMIT
    /// limit + 1`: the one extra row says whether there is a next page, whose cursor is the
    /// sort key of the page's last item (`key`).
    pub fn from_overfetched(mut items: Vec<T>, limit: usize, key: impl Fn(&T) -> Vec<i64>) -> Self {
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|last| encode_cursor(&key(last)))
        } else {
            None
        };
        Self { items, next }
    }
}

/// What a keyset query asks for to fill a page of `limit` ([`Page::from_overfetched`]).
pub fn overfetch(limit: usize) -> i64 {
    i64::try_from(limit + 1).unwrap_or(i64::MAX)
}

/// The opaque spelling of a sort key.
pub fn encode_cursor(key: &[i64]) -> String {
    let text: Vec<String> = key.iter().map(i64::to_string).collect();
    URL_SAFE_NO_PAD.encode(text.join("."))
}

/// The answer to a `cursor` this list did not give (code 4 naming `cursor`).
pub fn invalid_cursor() -> AppError {
    AppError::InvalidInput(Msg::field(
        "cursor",
        "is not a cursor this list gave",
        "不是本列表给出的游标",
    ))
}

/// The sort key of `N` integers that [`encode_cursor`] spelled as `value`; anything else is
/// invalid input naming `cursor`.
pub fn decode_cursor<const N: usize>(value: &str) -> Result<[i64; N], AppError> {
    let invalid = invalid_cursor;
    let bytes = URL_SAFE_NO_PAD.decode(value).map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let mut key = [0; N];
    let mut parts = text.split('.');
    for slot in &mut key {
        *slot = parts
            .next()
            .and_then(|part| part.parse().ok())
            .ok_or_else(invalid)?;
    }
    if parts.next().is_some() {
        return Err(invalid());
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let key = [1_732_900_000_123, 42];
        assert_eq!(decode_cursor::<2>(&encode_cursor(&key)).unwrap(), key);
        assert_eq!(decode_cursor::<1>(&encode_cursor(&[7])).unwrap(), [7]);
        assert_eq!(decode_cursor::<1>(&encode_cursor(&[-3])).unwrap(), [-3]);
        let wrong_shape = encode_cursor(&[1, 2]);
        for bad in [
            "",
            "abc",
            "!!",
            &URL_SAFE_NO_PAD.encode("1.x"),
            &wrong_shape,
        ] {
            assert!(
                matches!(decode_cursor::<1>(bad), Err(AppError::InvalidInput(_))),
                "{bad:?}"
            );
        }
        assert!(decode_cursor::<2>(&encode_cursor(&[1])).is_err());
    }

    #[test]
    fn limits_default_and_stay_within_bounds() {
        assert_eq!(page_limit(None).unwrap(), DEFAULT_LIMIT);
        assert_eq!(page_limit(Some(100)).unwrap(), 100);
        assert!(page_limit(Some(0)).is_err());
        assert!(page_limit(Some(101)).is_err());
    }
}
