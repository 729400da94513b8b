//! Moderation's routes (API.md → Moderation):
//! - `POST /moderation/reports` `{kind, id, reason, note?}` — a signed-in reader reports an
//!   article, a comment or a user (a write: rate-limited, refused to a suspended account);
//! - `GET /moderation/me` — the caller's own suspension, if any;
//! - admins only ([`Admin`]: 401 without a token, 403002 without admin rights):
//!   `GET /admin/moderation/queue?sort=count|newest&offset&limit` (open reports grouped by
//!   target), `GET /admin/moderation/reports?kind&id` (every report of one target),
//!   `POST /admin/moderation/act` `{kind, id, action, reason, until?, hideContent?}` (with an
//!   `Idempotency-Key`, a repeat answers as the first did) and
//!   `GET /admin/moderation/log?kind&id&before&limit` (the audit log).

use std::sync::Arc;

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use platform::{
    caller::{Admin, AdminArea, AuthUser, Writer},
    error::{positive_id, ApiJson, ApiQuery, ApiResult, AppError, Msg, Reply},
    idempotency::Idempotency,
    openapi::Envelope,
};

use crate::moderation::{
    model::{
        Acted, Action, HeldArticle, HeldComment, Kind, LogEntry, Order, QueueItem, Reason,
        ReportView, Suspension,
    },
    service::ModerationService,
};

/// What these routes guard: the admins' moderation routes; a non-admin's refusal names it.
const ADMIN_AREA: AdminArea = AdminArea::new(
    "only admins may moderate",
    "只有管理员可以处理举报和管理内容",
);

/// Most queue items or log entries one request lists.
const MAX_LIMIT: i64 = 200;
/// Deepest queue offset.
const MAX_OFFSET: i64 = 10_000;

/// The routes.
pub fn router(moderation: Arc<ModerationService>, idempotency: Arc<Idempotency>) -> Router {
    let idempotent =
        || axum::middleware::from_fn_with_state(idempotency.clone(), platform::idempotency::layer);
    let admin = Router::new()
        .route("/admin/moderation/queue", get(queue))
        .route("/admin/moderation/reports", get(reports))
        .route("/admin/moderation/held", get(held))
        .route("/admin/moderation/held-comments", get(held_comments))
        .route("/admin/moderation/act", post(act).route_layer(idempotent()))
        .route("/admin/moderation/log", get(log))
        .layer(axum::Extension(ADMIN_AREA));
    Router::new()
        .route(
            "/moderation/reports",
            post(report).route_layer(idempotent()),
        )
        .route("/moderation/me", get(me))
        .merge(admin)
        .with_state(moderation)
}

fn invalid(field: &str, en: &str, zh: &str) -> AppError {
    AppError::InvalidInput(Msg::field(field, en, zh))
}

fn kind(name: &str) -> Result<Kind, AppError> {
    Kind::parse(name).ok_or_else(|| {
        invalid(
            "kind",
            "must be article, comment or user",
            "须为 article、comment 或 user",
        )
    })
}

/// A report.
#[derive(Deserialize, ToSchema)]
#[schema(as = NewReport)]
struct ReportRequest {
    /// article, comment or user.
    kind: String,
    /// The target's id.
    id: i64,
    /// spam, abuse, illegal or other.
    reason: String,
    /// What is wrong (≤ 500 characters; required for other).
    #[serde(default)]
    note: String,
}

/// Reports an article, a comment or a user to the moderators.
#[utoipa::path(
    post,
    path = "/moderation/reports",
    security(("access_token" = [])),
    request_body = ReportRequest,
    responses((status = 200, description = "`data`: the report's id. Code 4: an invalid kind, \
               reason or note, or your own content; 404001: no such object (or not visible); \
               409001: your earlier report of it is still open; 403003: your account is \
               suspended; 429001: too many reports.", body = Envelope<i64>))
)]
async fn report(
    Writer(user): Writer,
    State(moderation): State<Arc<ModerationService>>,
    ApiJson(body): ApiJson<ReportRequest>,
) -> ApiResult<i64> {
    let kind = kind(&body.kind)?;
    let id = positive_id("id", body.id)?;
    let reason = match body.reason.as_str() {
        "spam" => Reason::Spam,
        "abuse" => Reason::Abuse,
        "illegal" => Reason::Illegal,
        "other" => Reason::Other,
        _ => {
            return Err(invalid(
                "reason",
                "must be spam, abuse, illegal or other",
                "须为 spam、abuse、illegal 或 other",
            ))
        }
    };
    Ok(Reply(
        moderation
            .report(user.uid, kind, id, reason, &body.note)
            .await?,
    ))
}

/// The caller's own suspension: `null` when they may write.
#[utoipa::path(
    get,
    path = "/moderation/me",
    security(("access_token" = [])),
    responses((status = 200, description = "`data`: the suspension, or null.",
               body = Envelope<Option<Suspension>>))
)]
async fn me(
    user: AuthUser,
    State(moderation): State<Arc<ModerationService>>,
) -> ApiResult<Option<Suspension>> {
    Ok(Reply(moderation.suspension(user.uid).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct QueueQuery {
    /// `count` (most reported first, the default) or `newest` (newest report first).
    sort: Option<String>,
    /// Targets to skip (0–10 000).
    offset: Option<i64>,
    /// 1–200 (default 50).
    limit: Option<i64>,
}

fn offset(offset: Option<i64>) -> Result<i64, AppError> {
    let offset = offset.unwrap_or(0);
    if (0..=MAX_OFFSET).contains(&offset) {
        Ok(offset)
    } else {
        Err(invalid("offset", "must be 0 to 10000", "须为 0 到 10000"))
    }
}

fn limit(limit: Option<i64>, default: i64) -> Result<i64, AppError> {
    let limit = limit.unwrap_or(default);
    if (1..=MAX_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(invalid("limit", "must be 1 to 200", "须为 1 到 200"))
    }
}

/// Open reports grouped by target, each with the target's content as it was reported
/// **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/moderation/queue",
    security(("access_token" = [])),
    params(QueueQuery),
    responses((status = 200, description = "The queue; code 4 for an invalid sort, offset or \
               limit.", body = Envelope<Vec<QueueItem>>))
)]
async fn queue(
    _admin: Admin,
    State(moderation): State<Arc<ModerationService>>,
    ApiQuery(query): ApiQuery<QueueQuery>,
) -> ApiResult<Vec<QueueItem>> {
    let by_count = match query.sort.as_deref() {
        None | Some("count") => true,
        Some("newest") => false,
        Some(_) => {
            return Err(invalid(
                "sort",
                "must be count or newest",
                "须为 count 或 newest",
            ))
        }
    };
    let offset = offset(query.offset)?;
    Ok(Reply(
        moderation
            .queue(by_count, offset, limit(query.limit, 50)?)
            .await?,
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PageQuery {
    /// Items to skip (0–10 000).
    offset: Option<i64>,
    /// 1–200 (default 50).
    limit: Option<i64>,
}

/// Articles the word lists hold for review, the longest waiting first **(admins)**: approve
/// one with the action `restore`, reject it with `delete`.
#[utoipa::path(
    get,
    path = "/admin/moderation/held",
    security(("access_token" = [])),
    params(PageQuery),
    responses((status = 200, description = "The held articles; code 4 for an invalid offset or \
               limit.", body = Envelope<Vec<HeldArticle>>))
)]
async fn held(
    _admin: Admin,
    State(moderation): State<Arc<ModerationService>>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Vec<HeldArticle>> {
    let offset = offset(query.offset)?;
    Ok(Reply(
        moderation.held(offset, limit(query.limit, 50)?).await?,
    ))
}

/// Comments the word lists hold for review, the longest waiting first **(admins)**: approve
/// one with the action `restore`, reject it with `delete`.
#[utoipa::path(
    get,
    path = "/admin/moderation/held-comments",
    security(("access_token" = [])),
    params(PageQuery),
    responses((status = 200, description = "The held comments; code 4 for an invalid offset or \
               limit.", body = Envelope<Vec<HeldComment>>))
)]
async fn held_comments(
    _admin: Admin,
    State(moderation): State<Arc<ModerationService>>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Vec<HeldComment>> {
    let offset = offset(query.offset)?;
    Ok(Reply(
        moderation
            .held_comments(offset, limit(query.limit, 50)?)
            .await?,
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct TargetQuery {
    /// article, comment or user.
    kind: String,
    /// The target's id.
    id: i64,
}

/// Every report of one target, newest first (open and closed) **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/moderation/reports",
    security(("access_token" = [])),
    params(TargetQuery),
    responses((status = 200, description = "The reports; code 4 for an invalid kind or id.",
               body = Envelope<Vec<ReportView>>))
)]
async fn reports(
    _admin: Admin,
    State(moderation): State<Arc<ModerationService>>,
    ApiQuery(query): ApiQuery<TargetQuery>,
) -> ApiResult<Vec<ReportView>> {
    let kind = kind(&query.kind)?;
    let id = positive_id("id", query.id)?;
    Ok(Reply(moderation.reports(kind, id).await?))
}

/// An admin's action on a target.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = ModerationAction)]
struct ActRequest {
    /// article, comment or user.
    kind: String,
    /// The target's id.
    id: i64,
    /// dismiss, hide, restore, delete (articles and comments), suspend, lift (users).
    action: String,
    /// Why (1–500 characters): the log keeps it and a hidden article's author sees it.
    reason: String,
    /// Suspend only: until when (ms); absent: for good.
    until: Option<i64>,
    /// Suspend only: also hide the user's published articles and comments.
    #[serde(default)]
    hide_content: bool,
}

/// Acts on a target: its open reports are closed and the action is logged **(admins)**.
#[utoipa::path(
    post,
    path = "/admin/moderation/act",
    security(("access_token" = [])),
    request_body = ActRequest,
    responses((status = 200, description = "What changed (`changed: false` for a repeat: the \
               action is idempotent). Code 4: an invalid kind, action, reason or until, or an \
               action that does not apply to the kind; 404001: no such object.",
               body = Envelope<Acted>))
)]
async fn act(
    admin: Admin,
    State(moderation): State<Arc<ModerationService>>,
    ApiJson(body): ApiJson<ActRequest>,
) -> ApiResult<Acted> {
    let kind = kind(&body.kind)?;
    let id = positive_id("id", body.id)?;
    let action = match body.action.as_str() {
        "dismiss" => Action::Dismiss,
        "hide" => Action::Hide,
        "restore" => Action::Restore,
        "delete" => Action::Delete,
        "suspend" => Action::Suspend,
        "lift" => Action::Lift,
        _ => {
            return Err(invalid(
                "action",
                "must be dismiss, hide, restore, delete, suspend or lift",
                "须为 dismiss、hide、restore、delete、suspend 或 lift",
            ))
        }
    };
    if action == Action::Suspend && kind == Kind::User && id == admin.uid {
        return Err(invalid(
            "id",
            "you cannot suspend yourself",
            "不能暂停自己的账号",
        ));
    }
    Ok(Reply(
        moderation
            .act(
                admin.uid,
                Order {
                    action,
                    kind,
                    id,
                    reason: body.reason,
                    until: body.until,
                    hide_content: body.hide_content,
                },
            )
            .await?,
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct LogQuery {
    /// Only this kind of target's (with `id`).
    kind: Option<String>,
    /// Only this target's (with `kind`).
    id: Option<i64>,
    /// Entries before this id (the last id of the previous page).
    before: Option<i64>,
    /// 1–200 (default 50).
    limit: Option<i64>,
}

/// The audit log of moderators' actions, newest first **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/moderation/log",
    security(("access_token" = [])),
    params(LogQuery),
    responses((status = 200, description = "The entries; code 4 for an invalid filter or \
               limit.", body = Envelope<Vec<LogEntry>>))
)]
async fn log(
    _admin: Admin,
    State(moderation): State<Arc<ModerationService>>,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> ApiResult<Vec<LogEntry>> {
    let target = match (query.kind, query.id) {
        (Some(name), Some(id)) => Some((kind(&name)?, positive_id("id", id)?)),
        (None, None) => None,
        _ => {
            return Err(invalid(
                "kind",
                "give kind and id together",
                "kind 与 id 须同时给出",
            ))
        }
    };
    Ok(Reply(
        moderation
            .log(target, query.before, limit(query.limit, 50)?)
            .await?,
    ))
}

/// The routes' OpenAPI description.
#[derive(utoipa::OpenApi)]
#[openapi(paths(report, me, queue, held, held_comments, reports, act, log))]
pub struct ModerationApi;
