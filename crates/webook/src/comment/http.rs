//! `/comments` (API.md → Comments): thin handlers over [`CommentService`]. Every route needs a
//! logged-in caller; writing honours `Idempotency-Key`.

use platform::caller::{AuthUser, Writer};
use platform::idempotency::Idempotency;
use std::sync::Arc;

use axum::{
    extract::State,
    routing::{delete, get, post},
    Router,
};
use serde::Deserialize;

use crate::{
    biz::Biz,
    comment::{
        model::{CommentView, NewComment, ThreadPage},
        CommentService,
    },
};
use platform::{
    error::{positive_id, ApiJson, ApiPath, ApiQuery, ApiResult, Reply},
    page::{page_limit, Page},
};

/// What the comment handlers reach.
pub struct CommentRoutes {
    /// Comments.
    pub comments: CommentService,
}

/// The routes.
pub fn router(routes: CommentRoutes, idempotency: Arc<Idempotency>) -> Router {
    let idempotent =
        axum::middleware::from_fn_with_state(idempotency, platform::idempotency::layer);
    Router::new()
        .route(
            "/comments",
            post(create).route_layer(idempotent).get(thread_page),
        )
        .route("/comments/{id}", delete(remove))
        .route("/comments/{id}/replies", get(replies))
        .with_state(Arc::new(routes))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateRequest {
    biz: Biz,
    biz_id: i64,
    content: String,
    parent_id: Option<i64>,
}

async fn create(
    State(state): State<Arc<CommentRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<CreateRequest>,
) -> ApiResult<i64> {
    let comment = NewComment::new(
        user.uid,
        request.biz,
        request.biz_id,
        request.parent_id,
        request.content,
    )?;
    Ok(Reply(state.comments.create(comment).await?))
}

async fn remove(
    State(state): State<Arc<CommentRoutes>>,
    Writer(user): Writer,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<()> {
    let id = positive_id("id", id)?;
    state.comments.delete(user.uid, id).await?;
    Ok(Reply(()))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThreadQuery {
    biz: Biz,
    biz_id: i64,
    cursor: Option<String>,
    limit: Option<i64>,
}

async fn thread_page(
    State(state): State<Arc<CommentRoutes>>,
    _user: AuthUser,
    ApiQuery(query): ApiQuery<ThreadQuery>,
) -> ApiResult<ThreadPage> {
    let biz_id = positive_id("bizId", query.biz_id)?;
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        state
            .comments
            .thread_page(query.biz, biz_id, query.cursor.as_deref(), limit)
            .await?,
    ))
}

#[derive(Deserialize)]
struct RepliesQuery {
    cursor: Option<String>,
    limit: Option<i64>,
}

async fn replies(
    State(state): State<Arc<CommentRoutes>>,
    _user: AuthUser,
    ApiPath(root): ApiPath<i64>,
    ApiQuery(query): ApiQuery<RepliesQuery>,
) -> ApiResult<Page<CommentView>> {
    let root = positive_id("id", root)?;
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        state
            .comments
            .replies(root, query.cursor.as_deref(), limit)
            .await?,
    ))
}
