//! `/admin/events/…` (API.md → Events (admin)), admins only ([`Admin`]: 401 when not logged in,
//! 403002 without admin rights):
//! - `GET /admin/events/groups`: this instance's live groups and the database's view of every
//!   group;
//! - `GET /admin/events/parked?group=&topic=&state=&limit=`: parked events, newest first;
//! - `POST /admin/events/replay` `{ids?, group?, topic?, all?}`: marks open parked events for
//!   replay; `{count}`;
//! - `POST /admin/events/discard` `{ids?, group?, topic?, reason}`: discards them, recording the
//!   admin and the reason; `{count}`.

use platform::caller::{Admin, AdminArea};
use std::sync::Arc;

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use platform::{
    db::Db,
    error::{ApiJson, ApiQuery, ApiResult, AppError, Msg, Reply},
    events::{
        parked::{self, Parked, StoredGroup},
        EventStream, GroupStatus,
    },
    openapi::Envelope,
};

/// What the handlers reach.
pub struct EventRoutes {
    pub db: Db,
    pub events: EventStream,
}

/// What these routes guard: Event consumer groups and parked events (`/admin/events/…`); a non-admin's refusal names it.
const ADMIN_AREA: AdminArea = AdminArea::new(
    "only admins may manage event consumer groups",
    "只有管理员可以管理事件消费组",
);

/// The routes.
pub fn router(routes: EventRoutes) -> Router {
    Router::new()
        .route("/admin/events/groups", get(groups))
        .route("/admin/events/parked", get(list))
        .route("/admin/events/replay", post(replay))
        .route("/admin/events/discard", post(discard))
        .with_state(Arc::new(routes))
        .layer(axum::Extension(ADMIN_AREA))
}

/// Most parked events one request lists.
const MAX_LIMIT: i64 = 500;

/// The consumer groups, live and stored.
#[derive(Serialize, ToSchema)]
struct Groups {
    /// This instance's consumer groups, live.
    live: Vec<GroupStatus>,
    /// Every group the database knows of.
    stored: Vec<StoredGroup>,
}

/// This instance's live consumer groups and every group the database knows **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/events/groups",
    security(("access_token" = [])),
    responses((status = 200, description = "The groups; 403002 for anyone but an admin.",
               body = Envelope<Groups>))
)]
async fn groups(_admin: Admin, State(state): State<Arc<EventRoutes>>) -> ApiResult<Groups> {
    Ok(Reply(Groups {
        live: state.events.groups(),
        stored: parked::stored_groups(&state.db).await?,
    }))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only this group's.
    group: Option<String>,
    /// Only this topic's.
    topic: Option<String>,
    /// `parked`, `replay`, `replaying`, `replayed` or `discarded`.
    #[param(pattern = "^(parked|replay|replaying|replayed|discarded)$")]
    state: Option<String>,
    /// 1–500 (default 100).
    limit: Option<i64>,
}

const STATES: [&str; 5] = [
    parked::PARKED,
    parked::REPLAY,
    parked::REPLAYING,
    parked::REPLAYED,
    parked::DISCARDED,
];

/// Parked events, newest first **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/events/parked",
    security(("access_token" = [])),
    params(ListQuery),
    responses((status = 200, description = "The events; code 4 for an invalid state or \
               limit.", body = Envelope<Vec<Parked>>))
)]
async fn list(
    _admin: Admin,
    State(state): State<Arc<EventRoutes>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Vec<Parked>> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(invalid("limit must be 1 to 500", "limit 须为 1 到 500"));
    }
    if let Some(wanted) = &query.state {
        if !STATES.contains(&wanted.as_str()) {
            return Err(invalid(
                "state must be parked, replay, replaying, replayed or discarded",
                "state 须为 parked、replay、replaying、replayed 或 discarded",
            ));
        }
    }
    let filter = parked::Filter {
        group: query.group,
        topic: query.topic,
        state: query.state,
        ..parked::Filter::default()
    };
    Ok(Reply(parked::list(&state.db, &filter, limit).await?))
}

fn invalid(en: &'static str, zh: &'static str) -> AppError {
    AppError::InvalidInput(Msg::new(en, zh))
}

/// Which parked events: by id (at most 500), a group (and topic), or all of them.
#[derive(Deserialize, ToSchema)]
struct Selection {
    #[serde(default)]
    ids: Vec<i64>,
    group: Option<String>,
    topic: Option<String>,
    /// Replay only: every parked event.
    #[serde(default)]
    all: bool,
    /// Discard only, required: why (1–500 characters).
    reason: Option<String>,
}

/// How many events it applied to.
#[derive(Serialize, ToSchema)]
struct Count {
    count: u64,
}

fn selection(body: &Selection) -> Result<parked::Filter, AppError> {
    if body.ids.len() > MAX_LIMIT as usize {
        return Err(invalid("at most 500 ids at a time", "一次最多 500 个 id"));
    }
    super::filter(
        body.ids.clone(),
        body.group.clone(),
        body.topic.clone(),
        body.all,
    )
    .map_err(|_| {
        invalid(
            "name the parked events: ids, a group (and topic), or all",
            "请指定要处理的事件：id、消费组（及主题）或 all",
        )
    })
}

/// Marks the matching parked events for replay **(admins)**: their group's consumers apply
/// each within a few seconds.
#[utoipa::path(
    post,
    path = "/admin/events/replay",
    security(("access_token" = [])),
    request_body = Selection,
    responses((status = 200, description = "How many; code 4 when nothing names the events or \
               for more than 500 ids.", body = Envelope<Count>))
)]
async fn replay(
    admin: Admin,
    State(state): State<Arc<EventRoutes>>,
    ApiJson(body): ApiJson<Selection>,
) -> ApiResult<Count> {
    let filter = selection(&body)?;
    let count = parked::replay(&state.db, &filter, &format!("admin:{}", admin.uid)).await?;
    Ok(Reply(Count { count }))
}

/// Discards the matching parked events **(admins)**: never applied, kept with the reason.
#[utoipa::path(
    post,
    path = "/admin/events/discard",
    security(("access_token" = [])),
    request_body = Selection,
    responses((status = 200, description = "How many; code 4 without a reason or for `all`.",
               body = Envelope<Count>))
)]
async fn discard(
    admin: Admin,
    State(state): State<Arc<EventRoutes>>,
    ApiJson(body): ApiJson<Selection>,
) -> ApiResult<Count> {
    if body.all {
        return Err(invalid(
            "discard takes ids or a group, never all",
            "丢弃须指定 id 或消费组，不能全部丢弃",
        ));
    }
    let filter = selection(&body)?;
    let reason = body.reason.as_deref().map(str::trim).unwrap_or_default();
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(invalid(
            "say why (reason, 1 to 500 characters)",
            "请填写原因（1 到 500 个字符）",
        ));
    }
    let count =
        parked::discard(&state.db, &filter, &format!("admin:{}", admin.uid), reason).await?;
    Ok(Reply(Count { count }))
}

/// The `/admin/events` routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(groups, list, replay, discard))]
pub struct EventsAdminApi;
