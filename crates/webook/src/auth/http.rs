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
use utoipa::ToSchema;

use std::sync::Arc;

use crate::auth::service::{AuthService, TokenPair};
use platform::{
    caller::{user_agent, AuthUser},
    client_ip::{ClientIp, KnowsProxies, TrustedProxies},
    error::{ApiJson, AppError, Msg, ReplyWithMsg},
    http::{bearer_token, ACCESS_TOKEN_HEADER, REFRESH_TOKEN_HEADER},
    openapi::{Envelope, Null},
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

/// A new account.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct SignupRequest {
    /// Trimmed and lower-cased before it is stored or compared.
    email: String,
    /// At least 8 characters with a letter, a digit and a symbol; at most 256 bytes.
    password: String,
    /// The same password again.
    confirm_password: String,
}

/// Signs up with an email and a password (`msg`: `signed up`).
#[utoipa::path(
    post,
    path = "/users/signup",
    request_body = SignupRequest,
    responses((status = 200, description = "Signed up. Code 4: an invalid email, passwords \
               that differ, a weak password; 409001: the email is taken; 429001: the sign-in \
               limit per client.", body = Envelope<Null>))
)]
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

/// An email and its password.
#[derive(Deserialize, ToSchema)]
#[schema(as = EmailLogin)]
struct LoginRequest {
    email: String,
    password: String,
}

/// Signs in with an email and a password (`msg`: `logged in`).
#[utoipa::path(
    post,
    path = "/users/login",
    request_body = LoginRequest,
    responses((status = 200, description = "Signed in: the tokens are in the headers. Code \
               401002: wrong email or password (the same answer for both); 429001: the \
               sign-in limit per client.", body = Envelope<Null>,
               headers(
                   ("x-jwt-token" = String, description = "The access token."),
                   ("x-refresh-token" = String, description = "The refresh token."),
               )))
)]
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

/// New tokens for the refresh token presented as the bearer (`msg`: `tokens refreshed`).
#[utoipa::path(
    post,
    path = "/users/refresh_token",
    security(("refresh_token" = [])),
    responses(
        (status = 200, description = "Both tokens anew (rotation: reusing an old refresh \
         token revokes the session; the one just used, presented again within \
         `refresh_retry_window` of that refresh because its answer was lost, gets tokens of \
         the current generation).", body = Envelope<Null>,
         headers(
             ("x-jwt-token" = String, description = "The new access token."),
             ("x-refresh-token" = String, description = "The new refresh token."),
         )),
        (status = 401, description = "A missing, invalid, expired, revoked or already used \
         refresh token (code 401001).", body = platform::openapi::ErrorEnvelope),
    )
)]
async fn refresh_token(
    State(state): State<Arc<SignInRoutes>>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let token = bearer_token(&headers).ok_or(AppError::Unauthorized)?;
    let tokens = state.auth.refresh(token, user_agent(&headers)).await?;
    tokens_reply(&tokens, Msg::new("tokens refreshed", "登录已续期"))
}

/// Revokes the session: both of its tokens stop working at once (`msg`: `logged out`).
#[utoipa::path(
    post,
    path = "/users/logout",
    security(("access_token" = [])),
    responses((status = 200, description = "Logged out; both token headers are sent empty.",
               body = Envelope<Null>,
               headers(
                   ("x-jwt-token" = String, description = "Empty."),
                   ("x-refresh-token" = String, description = "Empty."),
               )))
)]
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

/// The sign-in routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(signup, login, refresh_token, logout))]
pub struct SignInApi;

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
