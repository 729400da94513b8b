//! Live settings for admins (API.md → Operations → Live settings): `GET /admin/settings` (every
//! setting, its value here, its start-up value, whether it is live), `PUT
//! /admin/settings/{key}` `{value}` (every instance applies it within `live_settings_poll`),
//! `DELETE /admin/settings/{key}` (back to the start-up value) and `GET
//! /admin/settings-log?key&before&limit` (the audit trail). 401 without a token, 403002 without
//! admin rights; code 4 with the start-up error for an invalid value or a key that needs a
//! restart.

use axum::{extract::State, routing::get, Router};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use platform::{
    caller::{Admin, AdminArea},
    error::{ApiJson, ApiPath, ApiQuery, ApiResult, AppError, Msg, Reply},
    openapi::Envelope,
};

use crate::live_settings::{
    service::{LiveSettings, SettingView},
    store::LogEntry,
};

/// Who may change settings.
const ADMIN_AREA: AdminArea =
    AdminArea::new("only admins may change settings", "只有管理员可以修改设置");

/// The most log entries one page returns.
const MAX_LIMIT: i64 = 200;

/// The routes.
pub fn router(settings: LiveSettings) -> Router {
    Router::new()
        .route("/admin/settings", get(list))
        .route("/admin/settings-log", get(log))
        .route("/admin/settings/{key}", get(one).put(put).delete(remove))
        .with_state(settings)
        .layer(axum::Extension(ADMIN_AREA))
}

/// Every setting **(admins)**: the value in effect on the answering instance, the start-up
/// value, whether it changes without a restart and who set its live value.
#[utoipa::path(
    get,
    path = "/admin/settings",
    security(("access_token" = [])),
    responses((status = 200, description = "The settings, platform first, then each feature's.",
               body = Envelope<Vec<SettingView>>))
)]
async fn list(_admin: Admin, State(settings): State<LiveSettings>) -> ApiResult<Vec<SettingView>> {
    Ok(Reply(settings.list().await?))
}

/// One setting **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/settings/{key}",
    security(("access_token" = [])),
    params(("key" = String, Path, description = "The setting's key, e.g. write_rate_limit.")),
    responses((status = 200, description = "The setting; code 4: no such setting.",
               body = Envelope<SettingView>))
)]
async fn one(
    _admin: Admin,
    State(settings): State<LiveSettings>,
    ApiPath(key): ApiPath<String>,
) -> ApiResult<SettingView> {
    Ok(Reply(settings.get(&key).await?))
}

/// A live setting's new value.
#[derive(Deserialize, ToSchema)]
#[schema(as = LiveSettingRequest)]
struct PutRequest {
    /// The value, as in webook.toml: a number, a string (durations such as `30s`, rollouts
    /// such as `25%` or `10%, 1, 42`, a log filter), a boolean, or a list.
    #[schema(value_type = Object)]
    value: serde_json::Value,
}

/// Sets a live setting for every instance **(admins)**: applied on the answering instance at
/// once and on the others within `live_settings_poll`; audited.
#[utoipa::path(
    put,
    path = "/admin/settings/{key}",
    security(("access_token" = [])),
    params(("key" = String, Path, description = "The setting's key.")),
    request_body = PutRequest,
    responses((status = 200, description = "Stored and applied here. Code 4: unknown key, a key \
               that needs a restart, or an invalid value (the message is the one a start-up \
               with it would give).", body = Envelope<SettingView>))
)]
async fn put(
    admin: Admin,
    State(settings): State<LiveSettings>,
    ApiPath(key): ApiPath<String>,
    ApiJson(body): ApiJson<PutRequest>,
) -> ApiResult<SettingView> {
    if body.value.is_null() {
        return Err(AppError::InvalidInput(Msg::field(
            "value",
            "give a value; DELETE sets a key back to its start-up value",
            "须给出取值；DELETE 可恢复启动时的取值",
        )));
    }
    Ok(Reply(
        settings
            .set(&key, Some(body.value), (admin.uid, "api"))
            .await?,
    ))
}

/// Sets a live setting back to its start-up value on every instance **(admins)**; audited.
#[utoipa::path(
    delete,
    path = "/admin/settings/{key}",
    security(("access_token" = [])),
    params(("key" = String, Path, description = "The setting's key.")),
    responses((status = 200, description = "Done (also when it had no live value). Code 4: \
               unknown key or one that needs a restart.", body = Envelope<SettingView>))
)]
async fn remove(
    admin: Admin,
    State(settings): State<LiveSettings>,
    ApiPath(key): ApiPath<String>,
) -> ApiResult<SettingView> {
    Ok(Reply(settings.set(&key, None, (admin.uid, "api")).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct LogQuery {
    /// Only this setting's changes.
    key: Option<String>,
    /// Entries before this id (the last id of the previous page).
    before: Option<i64>,
    /// 1–200 (default 50).
    limit: Option<i64>,
}

/// Changes of live settings, newest first **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/settings-log",
    security(("access_token" = [])),
    params(LogQuery),
    responses((status = 200, description = "The entries; code 4 for an invalid limit.",
               body = Envelope<Vec<LogEntry>>))
)]
async fn log(
    _admin: Admin,
    State(settings): State<LiveSettings>,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> ApiResult<Vec<LogEntry>> {
    let limit = query.limit.unwrap_or(50);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(AppError::InvalidInput(Msg::field(
            "limit",
            "must be 1 to 200",
            "须为 1 到 200",
        )));
    }
    Ok(Reply(
        settings
            .log(query.key.as_deref(), query.before, limit)
            .await?,
    ))
}

/// The routes' OpenAPI description.
#[derive(utoipa::OpenApi)]
#[openapi(paths(list, one, put, remove, log))]
pub struct LiveSettingsApi;
