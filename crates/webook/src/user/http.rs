//! The profile routes under `/users/*` (API.md → Users: profile, edit, and the public profile
//! `GET /users/:id` others see): thin handlers that parse, call [`UserService`] and answer.

use platform::caller::{AuthUser, Writer};
use std::sync::Arc;

use axum::{
    extract::State,
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use serde::{Deserialize, Serialize};

use crate::user::{model::ProfileEdit, UserService};
use platform::error::{
    positive_id, ApiJson, ApiPath, ApiResult, AppError, Msg, Reply, ReplyWithMsg,
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
async fn profile(
    State(state): State<Arc<UserRoutes>>,
    user: AuthUser,
) -> Result<Response, AppError> {
    Ok(Json(state.users.profile(user.uid).await?).into_response())
}

#[derive(Deserialize)]
struct EditRequest {
    nickname: Option<String>,
    birthday: Option<String>,
    #[serde(rename = "aboutMe", alias = "about_me")]
    about_me: Option<String>,
}

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
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PublicProfile {
    id: i64,
    nickname: String,
    about_me: String,
    /// The display name: the nickname, or `user<id>` when none is set.
    name: String,
}

async fn public_profile(
    State(state): State<Arc<UserRoutes>>,
    _user: AuthUser,
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
