//! `/articles/*` routes (API.md → Articles): thin handlers over [`ArticleService`]. Every route
//! needs a logged-in caller.

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use serde::{Deserialize, Serialize};

use crate::{
    app::AppState,
    article::{
        model::{Article, ArticleStatus, ListItem},
        service::existing_id,
    },
    error::{ApiJson, ApiPath, ApiResult, AppError, Reply},
    user::AuthUser,
};

/// The `/articles` routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/articles/edit", post(edit))
        .route("/articles/publish", post(publish))
        .route("/articles/withdraw", post(withdraw))
        .route("/articles/list", post(list))
        .route("/articles/detail/{id}", get(detail))
        .route("/articles/pub/{id}", get(reader_view))
}

#[derive(Deserialize)]
struct EditRequest {
    id: Option<i64>,
    title: String,
    content: String,
}

async fn edit(
    State(state): State<AppState>,
    user: AuthUser,
    ApiJson(request): ApiJson<EditRequest>,
) -> ApiResult<i64> {
    let id = existing_id(request.id)?;
    Ok(Reply(
        state
            .articles
            .save_draft(user.uid, id, &request.title, &request.content)
            .await?,
    ))
}

async fn publish(
    State(state): State<AppState>,
    user: AuthUser,
    ApiJson(request): ApiJson<EditRequest>,
) -> ApiResult<i64> {
    let id = existing_id(request.id)?;
    Ok(Reply(
        state
            .articles
            .publish(user.uid, id, &request.title, &request.content)
            .await?,
    ))
}

#[derive(Deserialize)]
struct WithdrawRequest {
    id: i64,
}

async fn withdraw(
    State(state): State<AppState>,
    user: AuthUser,
    ApiJson(request): ApiJson<WithdrawRequest>,
) -> ApiResult<()> {
    let id = existing_id(Some(request.id))?
        .ok_or_else(|| AppError::InvalidInput("id: required".into()))?;
    state.articles.withdraw(user.uid, id).await?;
    Ok(Reply(()))
}

#[derive(Deserialize)]
struct ListRequest {
    #[serde(default)]
    offset: i64,
    limit: i64,
}

async fn list(
    State(state): State<AppState>,
    user: AuthUser,
    ApiJson(request): ApiJson<ListRequest>,
) -> ApiResult<Vec<ListItem>> {
    Ok(Reply(
        state
            .articles
            .list(user.uid, request.offset, request.limit)
            .await?,
    ))
}

async fn detail(
    State(state): State<AppState>,
    user: AuthUser,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Article> {
    let id = positive(id)?;
    Ok(Reply(state.articles.author_detail(user.uid, id).await?))
}

#[derive(Serialize)]
struct Author {
    id: i64,
    name: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReaderView {
    id: i64,
    title: String,
    content: String,
    #[serde(rename = "abstract")]
    abstract_text: String,
    author: Author,
    status: ArticleStatus,
    read_cnt: i64,
    like_cnt: i64,
    collect_cnt: i64,
    liked: bool,
    collected: bool,
    ctime: i64,
    utime: i64,
}

async fn reader_view(
    State(state): State<AppState>,
    _user: AuthUser,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<ReaderView> {
    let id = positive(id)?;
    let article = state.articles.reader_view(id).await?;
    Ok(Reply(ReaderView {
        id: article.id,
        title: article.title,
        content: article.content,
        abstract_text: article.abstract_text,
        author: Author {
            id: article.author_id,
            name: article.author_name,
        },
        status: article.status,
        // Counts and the caller's flags arrive with the interactive feature.
        read_cnt: 0,
        like_cnt: 0,
        collect_cnt: 0,
        liked: false,
        collected: false,
        ctime: article.ctime,
        utime: article.utime,
    }))
}

fn positive(id: i64) -> Result<i64, AppError> {
    if id > 0 {
        Ok(id)
    } else {
        Err(AppError::InvalidInput(
            "id: must be a positive integer".into(),
        ))
    }
}
