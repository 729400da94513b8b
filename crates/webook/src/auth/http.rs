//! The sign-in routes under `/users/*` (API.md → Users: signup, login, refresh_token, logout):
//! thin handlers that parse, call [`AuthService`] and answer. (Every feature's handlers find their
//! caller through `platform::caller`, which [`super::SessionCallers`] resolves.)

use axum::{
    extract::State,
    http::{HeaderMap, HeaderName, HeaderValue},
    response::{IntoResponse, Response},
    routing::post,
    Router,
};
use serde::Deserialize;

use std::sync::Arc;

use crate::auth::service::{AuthService, TokenPair};
use platform::{
    caller::{user_agent, AuthUser},
    client_ip::{ClientIp, KnowsProxies, TrustedProxies},
    error::{ApiJson, AppError, Msg, ReplyWithMsg},
    http::{bearer_token, ACCESS_TOKEN_HEADER, REFRESH_TOKEN_HEADER},
};

/// What the sign-in handlers reach.
pub struct SignInRoutes {
    /// Sign-in and sessions.
    pub auth: AuthService,
    /// Proxies whose `X-Forwarded-For` is believed (sign-in limits are per client IP).
    pub trusted_proxies: TrustedProxies,
}

impl KnowsProxies for SignInRoutes {
    fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trusted_proxies
    }
}

/// The sign-in routes.
pub fn router(routes: SignInRoutes) -> Router {
    Router::new()
        .route("/users/signup", post(signup))
        .route("/users/login", post(login))
        .route("/users/refresh_token", post(refresh_token))
        .route("/users/logout", post(logout))
        .with_state(Arc::new(routes))
        .layer(platform::http::course_answers())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SignupRequest {
    email: String,
    password: String,
    confirm_password: String,
}

async fn signup(
    State(state): State<Arc<SignInRoutes>>,
    ClientIp(ip): ClientIp,
    ApiJson(request): ApiJson<SignupRequest>,
) -> Result<ReplyWithMsg<()>, AppError> {
    state.auth.check_auth_rate(&ip.to_string()).await?;
    state
        .auth
        .signup(&request.email, request.password, &request.confirm_password)
        .await?;
    Ok(ReplyWithMsg(Msg::new("signed up", "注册成功"), ()))
}

#[derive(Deserialize)]
struct LoginRequest {
    email: String,
    password: String,
}

async fn login(
    State(state): State<Arc<SignInRoutes>>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    ApiJson(request): ApiJson<LoginRequest>,
) -> Result<Response, AppError> {
    state.auth.check_auth_rate(&ip.to_string()).await?;
    let tokens = state
        .auth
        .login(&request.email, request.password, user_agent(&headers))
        .await?;
    with_tokens(&tokens)
}

async fn refresh_token(
    State(state): State<Arc<SignInRoutes>>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let token = bearer_token(&headers).ok_or(AppError::Unauthorized)?;
    let tokens = state.auth.refresh(token, user_agent(&headers)).await?;
    tokens_reply(&tokens, Msg::new("tokens refreshed", "登录已续期"))
}

async fn logout(
    State(state): State<Arc<SignInRoutes>>,
    user: AuthUser,
) -> Result<Response, AppError> {
    state.auth.logout(&user).await?;
    Ok((
        [
            (
                HeaderName::from_static(ACCESS_TOKEN_HEADER),
                HeaderValue::from_static(""),
            ),
            (
                HeaderName::from_static(REFRESH_TOKEN_HEADER),
                HeaderValue::from_static(""),
            ),
        ],
        ReplyWithMsg(Msg::new("logged out", "已退出登录"), ()),
    )
        .into_response())
}

/// The answer of a successful sign-in: the token pair in `x-jwt-token` / `x-refresh-token` and
/// `{code: 0, msg: "logged in"}` ("登录成功" to a Chinese caller, as the course said).
pub fn with_tokens(tokens: &TokenPair) -> Result<Response, AppError> {
    tokens_reply(tokens, Msg::new("logged in", "登录成功"))
}

/// The token pair in `x-jwt-token` / `x-refresh-token` and `{code: 0, msg}`.
fn tokens_reply(tokens: &TokenPair, msg: Msg) -> Result<Response, AppError> {
    let header = |value: &str| {
        HeaderValue::from_str(value)
            .map_err(|err| AppError::Internal(anyhow::anyhow!("token header: {err}")))
    };
    Ok((
        [
            (
                HeaderName::from_static(ACCESS_TOKEN_HEADER),
                header(&tokens.access)?,
            ),
            (
                HeaderName::from_static(REFRESH_TOKEN_HEADER),
                header(&tokens.refresh)?,
            ),
        ],
        ReplyWithMsg(msg, ()),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    #[test]
    fn bearer_tokens_are_parsed_strictly() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), None);
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc.def"),
        );
        assert_eq!(bearer_token(&headers), Some("abc.def"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  xyz "),
        );
        assert_eq!(bearer_token(&headers), Some("xyz"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&headers), None);
    }
}
