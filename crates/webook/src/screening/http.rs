//! The word lists, for admins (API.md → Moderation → Word lists): `GET
//! /admin/moderation/word-lists`, `PUT /admin/moderation/word-lists/{name}` `{action, words}`
//! and `DELETE /admin/moderation/word-lists/{name}`. 401 without a token, 403002 without admin
//! rights.

use axum::{extract::State, routing::get, Router};
use serde::Deserialize;
use utoipa::ToSchema;

use platform::{
    caller::{Admin, AdminArea},
    error::{ApiJson, ApiPath, ApiResult, AppError, Msg, Reply},
    openapi::{Envelope, Null},
};

use crate::screening::{
    matcher::{normalise_word, Action},
    service::Screening,
    store::StoredList,
};

/// The same area as the rest of moderation.
const ADMIN_AREA: AdminArea = AdminArea::new(
    "only admins may moderate",
    "只有管理员可以处理举报和管理内容",
);

/// Longest list name, in characters.
const MAX_NAME_CHARS: usize = 64;
/// Most words in one list.
pub const MAX_WORDS: usize = 20_000;
/// Longest word, in characters.
const MAX_WORD_CHARS: usize = 64;

/// The routes.
pub fn router(screening: Screening) -> Router {
    Router::new()
        .route("/admin/moderation/word-lists", get(lists))
        .route(
            "/admin/moderation/word-lists/{name}",
            axum::routing::put(put).delete(remove),
        )
        .with_state(screening)
        .layer(axum::Extension(ADMIN_AREA))
}

/// Every word list **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/moderation/word-lists",
    security(("access_token" = [])),
    responses((status = 200, description = "The lists, by name.", body = Envelope<Vec<StoredList>>))
)]
async fn lists(_admin: Admin, State(screening): State<Screening>) -> ApiResult<Vec<StoredList>> {
    Ok(Reply(screening.lists().await?))
}

/// A list's new content.
#[derive(Deserialize, ToSchema)]
#[schema(as = WordListRequest)]
struct PutRequest {
    /// `refuse` (the write is refused with a message naming the list) or `hold` (published
    /// only once a moderator approves it).
    action: String,
    /// Its words (Chinese or English; compared after NFKC, lower case and without
    /// punctuation or spaces), at most 20 000 of at most 64 characters.
    words: Vec<String>,
}

fn invalid(field: &str, en: &str, zh: &str) -> AppError {
    AppError::InvalidInput(Msg::field(field, en, zh))
}

/// Creates or replaces a word list **(admins)**: every instance applies it within seconds.
#[utoipa::path(
    put,
    path = "/admin/moderation/word-lists/{name}",
    security(("access_token" = [])),
    params(("name" = String, Path, description = "The list's name (1–64 characters).")),
    request_body = PutRequest,
    responses((status = 200, description = "Saved. Code 4: an invalid name, action or word.",
               body = Envelope<Null>))
)]
async fn put(
    admin: Admin,
    State(screening): State<Screening>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<PutRequest>,
) -> ApiResult<()> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(invalid("name", "1 to 64 characters", "1 到 64 个字符"));
    }
    let action = Action::parse(&body.action)
        .ok_or_else(|| invalid("action", "must be refuse or hold", "须为 refuse 或 hold"))?;
    if body.words.len() > MAX_WORDS {
        return Err(invalid("words", "at most 20000 words", "最多 20000 个词"));
    }
    let mut words = Vec::with_capacity(body.words.len());
    for word in &body.words {
        let word = word.trim();
        if word.chars().count() > MAX_WORD_CHARS || word.contains('\n') {
            return Err(invalid(
                "words",
                "each word at most 64 characters, on one line",
                "每个词最多 64 个字符且不能换行",
            ));
        }
        if normalise_word(word).is_empty() {
            return Err(AppError::InvalidInput(Msg::owned(
                format!("words: \u{ab}{word}\u{bb} has no letter or digit"),
                format!("words：\u{ab}{word}\u{bb} 不含文字或数字"),
            )));
        }
        words.push(word.to_owned());
    }
    screening.put(admin.uid, name, action, &words).await?;
    Ok(Reply(()))
}

/// Deletes a word list **(admins)**.
#[utoipa::path(
    delete,
    path = "/admin/moderation/word-lists/{name}",
    security(("access_token" = [])),
    params(("name" = String, Path, description = "The list's name.")),
    responses((status = 200, description = "Deleted; 404001: no such list.",
               body = Envelope<Null>))
)]
async fn remove(
    _admin: Admin,
    State(screening): State<Screening>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<()> {
    if screening.delete(name.trim()).await? {
        Ok(Reply(()))
    } else {
        Err(AppError::NotFound(Msg::new(
            "no such word list",
            "词表不存在",
        )))
    }
}

/// The routes' OpenAPI description.
#[derive(utoipa::OpenApi)]
#[openapi(paths(lists, put, remove))]
pub struct ScreeningApi;
