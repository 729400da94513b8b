//! The SMS sign-in routes (API.md → Users → Other ways to sign in): thin handlers that parse,
//! call [`PhoneLoginService`] and answer.

use std::sync::Arc;

use axum::{extract::State, http::HeaderMap, response::Response, routing::post, Router};
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use super::service::{Delivery, PhoneLoginService};
use crate::auth::{with_tokens, AuthService};
use platform::caller::user_agent;
use platform::{
    client_ip::{ClientIp, KnowsProxies, TrustedProxies},
    error::{ApiJson, AppError, Msg, ReplyWithMsg},
    openapi::{Envelope, Null},
};

/// What the handlers reach.
pub struct PhoneLoginRoutes {
    /// Codes and sign-in.
    pub service: PhoneLoginService,
    /// The sign-in rate limit per client IP (shared with password login).
    pub auth: AuthService,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: TrustedProxies,
}

impl KnowsProxies for PhoneLoginRoutes {
    fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trusted_proxies
    }
}

/// The routes.
pub fn router(routes: PhoneLoginRoutes) -> Router {
    Router::new()
        .route("/users/login_sms/code/send", post(send_code))
        .route("/users/login_sms", post(login))
        .with_state(Arc::new(routes))
        .layer(platform::http::course_answers())
}

/// Where to send a sign-in code.
#[derive(Deserialize, ToSchema)]
struct SendCodeRequest {
    /// A mainland mobile number, `1[3-9]` and 9 digits (a `+86` prefix is accepted).
    phone: String,
}

/// How a code went out.
#[derive(ToSchema)]
#[allow(dead_code)] // describes the answer; never built
struct CodeDelivery {
    delivery: DeliveryKind,
}

/// `sent`: a provider accepted the message; `queued`: none could take it now, and it is
/// retried until the code would expire (`msg` says which).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)] // describes the answer; never built
enum DeliveryKind {
    Sent,
    Queued,
}

/// Sends a sign-in code by SMS (`msg`: `code sent`, or that it will arrive shortly).
#[utoipa::path(
    post,
    path = "/users/login_sms/code/send",
    request_body = SendCodeRequest,
    responses((status = 200, description = "Sent or queued. Code 4: an invalid phone; \
               429001: a code was sent to it less than 60 s ago, or a daily limit or the \
               site's budget is reached (`Retry-After`); code 5: SMS sign-in is not enabled.",
               body = Envelope<CodeDelivery>))
)]
async fn send_code(
    State(state): State<Arc<PhoneLoginRoutes>>,
    ClientIp(ip): ClientIp,
    ApiJson(request): ApiJson<SendCodeRequest>,
) -> Result<ReplyWithMsg<serde_json::Value>, AppError> {
    let delivery = state
        .service
        .send_code(&request.phone, &ip.to_string())
        .await?;
    Ok(match delivery {
        Delivery::Sent => ReplyWithMsg(
            Msg::new("code sent", "验证码已发送"),
            json!({ "delivery": "sent" }),
        ),
        Delivery::Queued => ReplyWithMsg(
            Msg::new(
                "the SMS service is busy: the code will arrive shortly",
                "短信服务繁忙，验证码将稍后送达",
            ),
            json!({ "delivery": "queued" }),
        ),
    })
}

/// A phone and the code sent to it.
#[derive(Deserialize, ToSchema)]
#[schema(as = SmsLogin)]
struct LoginRequest {
    phone: String,
    /// The 6 digits sent.
    code: String,
}

/// Signs in with an SMS code, creating the user on the first sign-in (`msg`: `logged in`).
#[utoipa::path(
    post,
    path = "/users/login_sms",
    request_body = LoginRequest,
    responses((status = 200, description = "Signed in: the tokens are in the headers. Code 4: \
               a wrong or expired code (the same answer for both; after 3 wrong tries the \
               code is dead); 429001: the sign-in limit per client.", body = Envelope<Null>,
               headers(
                   ("x-jwt-token" = String, description = "The access token."),
                   ("x-refresh-token" = String, description = "The refresh token."),
               )))
)]
async fn login(
    State(state): State<Arc<PhoneLoginRoutes>>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    ApiJson(request): ApiJson<LoginRequest>,
) -> Result<Response, AppError> {
    state.auth.check_auth_rate(&ip.to_string()).await?;
    let tokens = state
        .service
        .login(&request.phone, &request.code, user_agent(&headers))
        .await?;
    with_tokens(&tokens)
}

/// The SMS sign-in routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(send_code, login))]
pub struct PhoneLoginApi;
