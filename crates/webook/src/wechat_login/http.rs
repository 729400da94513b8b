//! `/oauth2/wechat/*` (API.md → Users → Other ways to sign in): thin handlers over
//! [`WechatLoginService`], and the state cookie that ties a callback to the browser that began
//! the login.
//!
//! - `GET /oauth2/wechat/authurl`: `{code: 0, data: <QR-connect URL>}`, and the signed state in
//!   the cookie [`STATE_COOKIE`] (`HttpOnly; SameSite=Lax`, only sent to the callback's path,
//!   `Secure` when the callback is https, living `wechat_state_ttl`).
//! - `GET /oauth2/wechat/callback?code&state`: on success 302 to `wechat_frontend_url` with the
//!   token headers, the state cookie cleared; a bad state or code answers `{code: 4}`.
//!
//! Both answer HTTP 200, code 5, "WeChat login is not enabled on this site" while it is off (a
//! fact about the site, not an outage: nothing should retry it, and the course's frontend shows
//! the message).

use std::{sync::Arc, time::Duration};

use axum::{
    body::Body,
    extract::State,
    http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::{
    auth::TokenPair,
    wechat_login::{
        service::{Callback, WechatLoginError, WechatLoginService},
        settings::WechatApp,
    },
};
use platform::{
    client_ip::{ClientIp, KnowsProxies, TrustedProxies},
    error::{ApiQuery, AppError, Msg, Reply},
    http::{ACCESS_TOKEN_HEADER, REFRESH_TOKEN_HEADER},
    openapi::{Envelope, Null},
};

/// The cookie holding a login's signed state between `authurl` and `callback`.
pub const STATE_COOKIE: &str = "webook_wechat_state";

/// What the WeChat login handlers reach.
pub struct WechatRoutes {
    /// Signing in with WeChat.
    pub login: WechatLoginService,
    /// Proxies whose `X-Forwarded-For` is believed (callbacks are limited per client IP).
    pub trusted_proxies: TrustedProxies,
}

impl KnowsProxies for WechatRoutes {
    fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trusted_proxies
    }
}

/// The routes.
pub fn router(routes: WechatRoutes) -> Router {
    Router::new()
        .route("/oauth2/wechat/authurl", get(authurl))
        .route("/oauth2/wechat/callback", get(callback))
        .with_state(Arc::new(routes))
        .layer(platform::http::course_answers())
}

/// The WeChat QR-connect URL to send the person to (the course frontend redirects to `data`).
#[utoipa::path(
    get,
    path = "/oauth2/wechat/authurl",
    responses((status = 200, description = "`data`: the URL. Sets the short-lived signed \
               `webook_wechat_state` cookie (HttpOnly, SameSite=Lax, path of the callback). \
               Code 5 when WeChat sign-in is not enabled.", body = Envelope<String>,
               headers(("Set-Cookie" = String, description = "The signed state.")))))]
async fn authurl(State(routes): State<Arc<WechatRoutes>>) -> Result<Response, WechatLoginError> {
    let app = routes.login.app().ok_or(WechatLoginError::NotConfigured)?;
    let start = routes.login.start()?;
    let cookie = state_cookie(app, &start.signed_state, app.state_ttl)?;
    Ok((
        [
            (header::SET_COOKIE, cookie),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        Reply(start.authorize_url),
    )
        .into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct CallbackQuery {
    /// WeChat's login code (absent: the person cancelled).
    code: Option<String>,
    /// The state of `/oauth2/wechat/authurl`, checked against its cookie.
    state: Option<String>,
}

/// WeChat's redirect after a sign-in: checks the state, exchanges the code, finds or creates
/// the user, and issues the tokens.
#[utoipa::path(
    get,
    path = "/oauth2/wechat/callback",
    params(CallbackQuery),
    responses(
        (status = 302, description = "Signed in: redirected to the configured frontend, with \
         the tokens in the headers and the state cookie cleared.",
         headers(
             ("Location" = String, description = "The frontend."),
             ("x-jwt-token" = String, description = "The access token."),
             ("x-refresh-token" = String, description = "The refresh token."),
         )),
        (status = 200, description = "**(webook)** To a caller sending `Accept: \
         application/json`: signed in, the tokens in the headers. Otherwise (any caller) \
         code 4 for a missing, expired, forged or used state or a missing or refused code, \
         nothing created; code 5 when WeChat sign-in is not enabled.", body = Envelope<Null>,
         headers(
             ("x-jwt-token" = String, description = "The access token (success only)."),
             ("x-refresh-token" = String, description = "The refresh token (success only)."),
         )),
    )
)]
async fn callback(
    State(routes): State<Arc<WechatRoutes>>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<CallbackQuery>,
) -> Result<Response, WechatLoginError> {
    let app = routes.login.app().ok_or(WechatLoginError::NotConfigured)?;
    let signed_states = platform::http::cookie_values(&headers, STATE_COOKIE);
    let signed_in = routes
        .login
        .finish(Callback {
            client: &ip.to_string(),
            signed_states: &signed_states,
            state: query.state.as_deref(),
            code: query.code.as_deref(),
            user_agent: platform::caller::user_agent(&headers),
        })
        .await?;
    if wants_json(&headers) {
        return Ok(answer_signed_in(app, &signed_in.tokens)?);
    }
    Ok(redirect_signed_in(app, &signed_in.tokens)?)
}

/// Whether the caller is a script (`Accept: application/json`, as axios sends) rather than a
/// browser navigating: a script following a redirect could not read the token headers of the
/// 302, so it gets them on a 200 instead (the course frontend's callback page calls this route
/// with axios).
fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.to_ascii_lowercase().contains("application/json"))
}

/// `{code: 0}` with the token headers, the state cookie cleared: the sign-in answer for scripts.
fn answer_signed_in(app: &WechatApp, tokens: &TokenPair) -> Result<Response, AppError> {
    let mut response = crate::auth::with_tokens(tokens)?;
    let headers = response.headers_mut();
    headers.insert(header::SET_COOKIE, state_cookie(app, "", Duration::ZERO)?);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// 302 to the frontend with the token headers, the state cookie cleared: the sign-in answer
/// for a browser that WeChat sent here.
fn redirect_signed_in(app: &WechatApp, tokens: &TokenPair) -> Result<Response, AppError> {
    let value = |text: &str| {
        HeaderValue::from_str(text)
            .map_err(|err| AppError::Internal(anyhow::anyhow!("header value: {err}")))
    };
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::FOUND;
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, value(app.frontend_url.as_str())?);
    headers.insert(
        HeaderName::from_static(ACCESS_TOKEN_HEADER),
        value(&tokens.access)?,
    );
    headers.insert(
        HeaderName::from_static(REFRESH_TOKEN_HEADER),
        value(&tokens.refresh)?,
    );
    headers.insert(header::SET_COOKIE, state_cookie(app, "", Duration::ZERO)?);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `Set-Cookie` of the state cookie holding `value` for `max_age` (0 and "" clear it): sent
/// only to the callback's path, never to scripts, along with top-level navigations from other
/// sites (WeChat's redirect back), over https only when the callback is https.
fn state_cookie(app: &WechatApp, value: &str, max_age: Duration) -> Result<HeaderValue, AppError> {
    let secure = if app.redirect_uri.scheme() == "https" {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{STATE_COOKIE}={value}; Max-Age={}; Path={}; HttpOnly; SameSite=Lax{secure}",
        max_age.as_secs(),
        app.redirect_uri.path(),
    ))
    .map_err(|err| AppError::Internal(anyhow::anyhow!("state cookie: {err}")))
}

impl IntoResponse for WechatLoginError {
    fn into_response(self) -> Response {
        match self {
            Self::NotConfigured => AppError::Disabled(Msg::new(
                "WeChat login is not enabled on this site",
                "本站未开启微信登录",
            ))
            .into_response(),
            Self::BadState => AppError::InvalidInput(Msg::field(
                "state",
                "missing, expired, already used or not this browser's; sign in with WeChat again",
                "缺失、已过期、已使用或不属于此浏览器，请重新用微信登录",
            ))
            .into_response(),
            Self::NoCode => AppError::InvalidInput(Msg::field(
                "code",
                "missing: the WeChat login was cancelled",
                "缺失：微信登录已取消",
            ))
            .into_response(),
            Self::CodeRefused => AppError::InvalidInput(Msg::new(
                "WeChat refused the login code; sign in with WeChat again",
                "微信拒绝了此登录授权码，请重新用微信登录",
            ))
            .into_response(),
            Self::App(err) => err.into_response(),
        }
    }
}

/// The WeChat sign-in routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(authurl, callback))]
pub struct WechatLoginApi;

#[cfg(test)]
mod tests {
    use super::*;
    use platform::config::Secret;
    use url::Url;

    fn app(redirect_uri: &str) -> WechatApp {
        WechatApp {
            app_id: "wx0123".to_owned(),
            app_secret: Secret::new("s3cret"),
            redirect_uri: Url::parse(redirect_uri).unwrap(),
            frontend_url: Url::parse("http://localhost:3000/").unwrap(),
            authorize_url: Url::parse("https://open.weixin.qq.com/connect/qrconnect").unwrap(),
            api_url: Url::parse("https://api.weixin.qq.com").unwrap(),
            state_ttl: Duration::from_secs(600),
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn the_state_cookie_goes_to_the_callback_path_only_and_over_https_when_it_is_https() {
        let cookie = state_cookie(
            &app("https://example.com/api/oauth2/wechat/callback"),
            "tok",
            Duration::from_secs(600),
        )
        .unwrap();
        assert_eq!(
            cookie,
            "webook_wechat_state=tok; Max-Age=600; Path=/api/oauth2/wechat/callback; HttpOnly; \
             SameSite=Lax; Secure"
        );
        let cleared = state_cookie(
            &app("http://localhost:8080/oauth2/wechat/callback"),
            "",
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(
            cleared,
            "webook_wechat_state=; Max-Age=0; Path=/oauth2/wechat/callback; HttpOnly; SameSite=Lax"
        );
    }

    #[test]
    fn state_cookies_are_found_among_others() {
        let mut headers = HeaderMap::new();
        assert!(platform::http::cookie_values(&headers, STATE_COOKIE).is_empty());
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; webook_wechat_state=tok.en.sig ;b=2"),
        );
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("webook_wechat_state=\"other\"; webook_wechat_state="),
        );
        assert_eq!(
            platform::http::cookie_values(&headers, STATE_COOKIE),
            ["tok.en.sig", "other"]
        );
    }
}
