//! `/tags*` (API.md → Tags): thin handlers over [`TagService`]. Every route needs a logged-in
//! caller; the writes (`POST /tags`, `POST /tags/attach`) go through the write rate limit, and
//! creating a tag honours `Idempotency-Key`.

use platform::caller::{AuthUser, Reader, Writer};
use platform::idempotency::Idempotency;
use std::sync::Arc;

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::{
    biz::Biz,
    tag::{
        model::{Tag, TaggedArticle},
        service::Topic,
        TagService, TopicOrder,
    },
};
use platform::{
    error::{ApiJson, ApiPath, ApiQuery, ApiResult, Reply},
    openapi::{Envelope, Null},
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
        .route("/topics/{name}", get(topic))
        .with_state(Arc::new(routes))
}

/// A tag's name.
#[derive(Deserialize, ToSchema)]
#[schema(as = NewTag)]
struct CreateRequest {
    /// Normalised (NFKC, trimmed, spaces collapsed); at most 32 characters.
    name: String,
}

/// Creates a tag of the caller's, or finds the one with the same name (compared normalised).
#[utoipa::path(
    post,
    path = "/tags",
    security(("access_token" = [])),
    params(platform::idempotency::IdempotencyKey),
    request_body = CreateRequest,
    responses((status = 200, description = "`data`: the tag's id. Code 4: an invalid name, or \
               a new name beyond `tag_max_per_user`.", body = Envelope<i64>))
)]
async fn create(
    State(state): State<Arc<TagRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<CreateRequest>,
) -> ApiResult<i64> {
    Ok(Reply(state.tags.create(user.uid, &request.name).await?))
}

/// The caller's tags, by id.
#[utoipa::path(
    get,
    path = "/tags",
    security(("access_token" = [])),
    params(PageQuery),
    responses((status = 200, description = "A page.", body = Envelope<Page<Tag>>))
)]
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

/// The caller's tags an object is to carry.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct AttachRequest {
    /// The kind of object.
    biz: Biz,
    /// The object.
    biz_id: i64,
    /// At most 20 of the caller's tags; empty clears them.
    tids: Vec<i64>,
}

/// Replaces the caller's tags on an object, all or nothing.
#[utoipa::path(
    post,
    path = "/tags/attach",
    security(("access_token" = [])),
    request_body = AttachRequest,
    responses((status = 200, description = "Replaced. Code 4: a non-positive id, more than 20 \
               tags, an unknown `biz`; 404001: no such object; 403002: the object or a tag is \
               not the caller's.", body = Envelope<Null>))
)]
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

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct ObjectQuery {
    /// The kind of object (`article`).
    biz: String,
    /// The object.
    biz_id: i64,
    /// Only this user's tags.
    uid: Option<i64>,
}

/// The tags on an object, by id.
#[utoipa::path(
    get,
    path = "/tags/biz",
    security((), ("access_token" = [])),
    params(ObjectQuery),
    responses((status = 200, description = "The tags. 404001: no such object, or it is not \
               published and not the caller's.", body = Envelope<Vec<Tag>>))
)]
async fn object_tags(
    State(state): State<Arc<TagRoutes>>,
    Reader(caller): Reader,
    ApiQuery(query): ApiQuery<ObjectQuery>,
) -> ApiResult<Vec<Tag>> {
    let biz = Biz::parse(&query.biz)?;
    Ok(Reply(
        state
            .tags
            .on_object(caller.uid(), biz, query.biz_id, query.uid)
            .await?,
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PageQuery {
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// Published articles carrying a tag (anyone's), newest article first.
#[utoipa::path(
    get,
    path = "/tags/{id}/articles",
    security((), ("access_token" = [])),
    params(("id" = i64, Path, description = "The tag."), PageQuery),
    responses((status = 200, description = "A page. 404001: no such tag.",
               body = Envelope<Page<TaggedArticle>>))
)]
async fn articles(
    State(state): State<Arc<TagRoutes>>,
    _reader: Reader,
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

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct TopicQuery {
    /// `new` (default): newest first; `hot`: most liked first.
    sort: Option<String>,
    /// The `next` of the previous page (of the same `sort`).
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// `GET /topics/{name}` **(webook)**: a topic — every owner's tags of that name, compared
/// normalised — with a page of its published articles, newest first.
#[utoipa::path(
    get,
    path = "/topics/{name}",
    security((), ("access_token" = [])),
    params(("name" = String, Path, description = "Any spelling of the topic's name \
            (`Rust`, `rust`, `ｒｕｓｔ`)."), TopicQuery),
    responses((status = 200, description = "The topic and a page of its articles. Code 4: a \
               name no tag could have; 404001: no tag of that name.", body = Envelope<Topic>))
)]
async fn topic(
    State(state): State<Arc<TagRoutes>>,
    _reader: Reader,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<TopicQuery>,
) -> ApiResult<Topic> {
    let limit = page_limit(query.limit)?;
    let order = TopicOrder::parse(query.sort.as_deref())?;
    Ok(Reply(
        state
            .tags
            .topic(&name, order, query.cursor.as_deref(), limit)
            .await?,
    ))
}

/// The tag routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(create, owned_tags, attach, object_tags, articles, topic))]
pub struct TagsApi;
