//! The profile routes under `/users/*` (API.md → Users: profile, edit, and the public profile
//! `GET /users/:id` others see): thin handlers that parse, call [`UserService`] and answer.

use platform::caller::{AuthUser, Reader, Writer};
use std::sync::Arc;

use axum::{
    extract::State,
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::user::{model::ProfileEdit, UserService};
use platform::{
    error::{positive_id, ApiJson, ApiPath, ApiResult, AppError, Msg, Reply, ReplyWithMsg},
    openapi::{Envelope, Null},
};

/// What the profile handlers reach.
pub struct UserRoutes {
    /// Profiles.
    pub users: UserService,
}

/// The profile routes.
pub fn router(routes: UserRoutes) -> Router {
    Router::new()
        .route("/users/profile", get(profile))
        .route("/users/edit", post(edit))
        .route("/users/{id}", get(public_profile))
        .with_state(Arc::new(routes))
        .layer(platform::http::course_answers())
}

/// The course frontend reads the profile as a bare object, not an envelope.
#[utoipa::path(
    get,
    path = "/users/profile",
    summary = "The caller's own profile, as a bare object (no envelope).",
    security(("access_token" = [])),
    responses((status = 200, description = "The profile (`\"\"` for absent fields); an \
               envelope with code 404001 instead when the user no longer exists.",
               body = crate::user::model::Profile))
)]
async fn profile(
    State(state): State<Arc<UserRoutes>>,
    user: AuthUser,
) -> Result<Response, AppError> {
    Ok(Json(state.users.profile(user.uid).await?).into_response())
}

/// A profile change: a missing field is left as it is.
#[derive(Deserialize, ToSchema)]
#[schema(as = ProfileChange)]
struct EditRequest {
    /// At most 64 characters, one line, at most 4 combining marks on one character.
    nickname: Option<String>,
    /// `YYYY-MM-DD`, a real date between 1900-01-01 and today; `""` clears it.
    birthday: Option<String>,
    /// At most 1024 characters (`about_me` is accepted too).
    #[serde(rename = "aboutMe", alias = "about_me")]
    about_me: Option<String>,
}

/// Edits the caller's profile (`msg`: `profile saved`).
#[utoipa::path(
    post,
    path = "/users/edit",
    security(("access_token" = [])),
    request_body = EditRequest,
    responses((status = 200, description = "Saved; code 4 names an invalid field.",
               body = Envelope<Null>))
)]
async fn edit(
    State(state): State<Arc<UserRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<EditRequest>,
) -> Result<ReplyWithMsg<()>, AppError> {
    let today = crate::user::model::latest_today(chrono::Utc::now());
    let edit = ProfileEdit::parse(request.nickname, request.birthday, request.about_me, today)?;
    state.users.edit_profile(user.uid, &edit).await?;
    Ok(ReplyWithMsg(Msg::new("profile saved", "资料已保存"), ()))
}

/// What anyone logged in sees of a user (`GET /users/:id`): never the email, phone or birthday.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct PublicProfile {
    id: i64,
    nickname: String,
    about_me: String,
    /// The display name: the nickname, or `user<id>` when none is set.
    name: String,
}

/// A user as others see them **(webook)**: never the email, phone or birthday.
#[utoipa::path(
    get,
    path = "/users/{id}",
    security((), ("access_token" = [])),
    params(("id" = i64, Path, description = "The user.")),
    responses((status = 200, description = "The user; 404001 when there is none, code 4 for \
               a non-positive id.", body = Envelope<PublicProfile>))
)]
async fn public_profile(
    State(state): State<Arc<UserRoutes>>,
    _reader: Reader,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<PublicProfile> {
    positive_id("id", id)?;
    let profile = state.users.profile(id).await?;
    Ok(Reply(PublicProfile {
        name: crate::user::display_name(&profile.nickname, profile.id),
        id: profile.id,
        nickname: profile.nickname,
        about_me: profile.about_me,
    }))
}

/// The profile routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(profile, edit, public_profile))]
pub struct ProfileApi;
