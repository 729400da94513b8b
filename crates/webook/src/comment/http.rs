//! `/comments` (API.md → Comments): thin handlers over [`CommentService`]. Every route needs a
//! logged-in caller; writing honours `Idempotency-Key`.

use platform::caller::{Reader, Writer};
use platform::idempotency::Idempotency;
use std::sync::Arc;

use axum::{
    extract::State,
    routing::{delete, get, post},
    Router,
};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::{
    biz::Biz,
    comment::{
        model::{CommentView, NewComment, ThreadPage},
        CommentService,
    },
};
use platform::{
    error::{
        positive_id, ApiJson, ApiPath, ApiQuery, ApiResult, AppError, Msg, Reply, ReplyWithMsg,
    },
    openapi::{Envelope, Null},
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

/// A new comment.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = NewCommentRequest)]
struct CreateRequest {
    /// The kind of object.
    biz: Biz,
    /// The object (a published article's id).
    biz_id: i64,
    /// Plain text, 1–2 000 characters with something visible; line breaks and tabs allowed.
    content: String,
    /// The comment answered, on the same object and not deleted (absent, `null` or 0: a
    /// top-level comment).
    parent_id: Option<i64>,
}

/// Comments on an object, or answers a comment.
#[utoipa::path(
    post,
    path = "/comments",
    security(("access_token" = [])),
    params(platform::idempotency::IdempotencyKey),
    request_body = CreateRequest,
    responses((status = 200, description = "`data`: the new comment's id. Code 4 names an \
               invalid field (or a word the site refuses); 404001: no such object, not \
               published, or no such parent; 429001 (HTTP 429) beyond `comment_rate_limit`. \
               A comment the word lists hold for review is written but shows only once a \
               moderator approves it: `msg` then says so and why.", body = Envelope<i64>))
)]
async fn create(
    State(state): State<Arc<CommentRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<CreateRequest>,
) -> Result<ReplyWithMsg<i64>, AppError> {
    let comment = NewComment::new(
        user.uid,
        request.biz,
        request.biz_id,
        request.parent_id,
        request.content,
    )?;
    let posted = state.comments.post(comment).await?;
    let msg = match posted.held {
        Some(reason) => Msg::owned(
            format!("held for review ({reason}): it shows once a moderator approves it"),
            format!("待审核（{reason}）：管理员通过后显示"),
        ),
        None => Msg::new("ok", "ok"),
    };
    Ok(ReplyWithMsg(msg, posted.id))
}

/// Deletes a comment (its author, or the author of the object commented on).
#[utoipa::path(
    delete,
    path = "/comments/{id}",
    security(("access_token" = [])),
    params(("id" = i64, Path, description = "The comment.")),
    responses((status = 200, description = "Deleted: a tombstone when it has replies. \
               403002: anyone else; 404001: no such comment.", body = Envelope<Null>))
)]
async fn remove(
    State(state): State<Arc<CommentRoutes>>,
    Writer(user): Writer,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<()> {
    let id = positive_id("id", id)?;
    state.comments.delete(user.uid, id).await?;
    Ok(Reply(()))
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct ThreadQuery {
    /// The kind of object.
    biz: Biz,
    /// The object.
    biz_id: i64,
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// An object's top-level comments, newest first, each with its first 3 replies.
#[utoipa::path(
    get,
    path = "/comments",
    security((), ("access_token" = [])),
    params(ThreadQuery),
    responses((status = 200, description = "A page, with `total`: the object's comments at \
               every level, not deleted. 404001 when the object is not published.",
               body = Envelope<ThreadPage>))
)]
async fn thread_page(
    State(state): State<Arc<CommentRoutes>>,
    _reader: Reader,
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

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RepliesQuery {
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// Every reply in the thread of a top-level comment, oldest first.
#[utoipa::path(
    get,
    path = "/comments/{id}/replies",
    security((), ("access_token" = [])),
    params(("id" = i64, Path, description = "The top-level comment."), RepliesQuery),
    responses((status = 200, description = "A page. 404001 when `id` is not a top-level \
               comment or its object is not published.", body = Envelope<Page<CommentView>>))
)]
async fn replies(
    State(state): State<Arc<CommentRoutes>>,
    _reader: Reader,
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

/// The comment routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(create, remove, thread_page, replies))]
pub struct CommentsApi;
