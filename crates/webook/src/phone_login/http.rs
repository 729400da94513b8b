//! The SMS sign-in routes (API.md → Users → Other ways to sign in): thin handlers that parse,
//! call [`PhoneLoginService`] and answer.

use std::sync::Arc;

use axum::{extract::State, http::HeaderMap, response::Response, routing::post, Router};
use serde::Deserialize;
use serde_json::json;

use super::service::{Delivery, PhoneLoginService};
use crate::auth::{with_tokens, AuthService};
use platform::caller::user_agent;
use platform::{
    client_ip::{ClientIp, KnowsProxies, TrustedProxies},
    error::{ApiJson, AppError, Msg, ReplyWithMsg},
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

#[derive(Deserialize)]
struct SendCodeRequest {
    phone: String,
}

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

#[derive(Deserialize)]
struct LoginRequest {
    phone: String,
    code: String,
}

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
