//! `/tags*` (API.md → Tags): thin handlers over [`TagService`]. Every route needs a logged-in
//! caller; the writes (`POST /tags`, `POST /tags/attach`) go through the write rate limit, and
//! creating a tag honours `Idempotency-Key`.

use platform::caller::{AuthUser, Writer};
use platform::idempotency::Idempotency;
use std::sync::Arc;

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use serde::Deserialize;

use crate::{
    biz::Biz,
    tag::{
        model::{Tag, TaggedArticle},
        TagService,
    },
};
use platform::{
    error::{ApiJson, ApiPath, ApiQuery, ApiResult, Reply},
    page::{page_limit, Page},
};

/// What the tag handlers reach.
pub struct TagRoutes {
    /// Tags.
    pub tags: TagService,
}

/// The routes.
pub fn router(routes: TagRoutes, idempotency: Arc<Idempotency>) -> Router {
    let idempotent =
        axum::middleware::from_fn_with_state(idempotency, platform::idempotency::layer);
    Router::new()
        // The idempotency layer wraps the POST only: it is added before the GET.
        .route(
            "/tags",
            post(create).route_layer(idempotent).get(owned_tags),
        )
        .route("/tags/attach", post(attach))
        .route("/tags/biz", get(object_tags))
        .route("/tags/{id}/articles", get(articles))
        .with_state(Arc::new(routes))
}

#[derive(Deserialize)]
struct CreateRequest {
    name: String,
}

async fn create(
    State(state): State<Arc<TagRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<CreateRequest>,
) -> ApiResult<i64> {
    Ok(Reply(state.tags.create(user.uid, &request.name).await?))
}

async fn owned_tags(
    State(state): State<Arc<TagRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Page<Tag>> {
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        state
            .tags
            .owned_by(user.uid, query.cursor.as_deref(), limit)
            .await?,
    ))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttachRequest {
    biz: Biz,
    biz_id: i64,
    tids: Vec<i64>,
}

async fn attach(
    State(state): State<Arc<TagRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<AttachRequest>,
) -> ApiResult<()> {
    state
        .tags
        .replace(user.uid, request.biz, request.biz_id, &request.tids)
        .await?;
    Ok(Reply(()))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectQuery {
    biz: String,
    biz_id: i64,
    uid: Option<i64>,
}

async fn object_tags(
    State(state): State<Arc<TagRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<ObjectQuery>,
) -> ApiResult<Vec<Tag>> {
    let biz = Biz::parse(&query.biz)?;
    Ok(Reply(
        state
            .tags
            .on_object(user.uid, biz, query.biz_id, query.uid)
            .await?,
    ))
}

#[derive(Deserialize)]
struct PageQuery {
    cursor: Option<String>,
    limit: Option<i64>,
}

async fn articles(
    State(state): State<Arc<TagRoutes>>,
    _user: AuthUser,
    ApiPath(tid): ApiPath<i64>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Page<TaggedArticle>> {
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        state
            .tags
            .articles(tid, query.cursor.as_deref(), limit)
            .await?,
    ))
}
