//! The API's error type and the `{code, msg, data}` envelope, in one place.
//!
//! Handlers return [`ApiResult<T>`]: `Ok(Reply(data))` becomes `{"code":0,"msg":"ok","data":…}`;
//! an [`AppError`] becomes the HTTP status and business code `API.md` assigns to it. Business
//! outcomes (invalid input, wrong password, not the author, …) answer HTTP 200 with a non-zero
//! `code`; protocol failures use HTTP statuses. Internal errors are logged once here with their
//! cause chain, and the client only ever sees a stable code and a safe message.
//!
//! [`ApiJson`] is the JSON body extractor every handler uses, so a malformed, mistyped or
//! oversized body answers 400 with code 4 and a message saying what was wrong; [`ApiPath`] and
//! [`ApiQuery`] do the same for path parameters and query strings.
//!
//! **Language.** Every message exists in English and Chinese ([`Msg`]); `msg` is answered in the
//! language the request's `Accept-Language` prefers ([`Lang::negotiate`], English by default).
//! The HTTP layer ([`crate::http::Observe`]) runs each request inside [`Lang::scope`], and
//! rendering an error reads [`Lang::current`]. Codes never depend on the language. Field names in
//! messages (`title:`, `aboutMe:`) stay as the API spells them in both languages.
//!
//! A failure of the database itself (unreachable, disk full) is a dependency being down: it is
//! answered 503 so that clients and load balancers retry, never 500 ([`AppError::from`]).

use std::{borrow::Cow, fmt, future::Future, time::Duration};

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection, QueryRejection},
        FromRequest, FromRequestParts, Path, Query, Request,
    },
    http::{header, request::Parts, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Serialize;

/// Business code: success.
pub const CODE_OK: i32 = 0;
/// Business code: invalid input (msg says which field and why).
pub const CODE_INVALID_INPUT: i32 = 4;
/// Business code: system error.
pub const CODE_SYSTEM: i32 = 5;
/// Business code: not logged in (missing, invalid, expired or revoked token).
pub const CODE_UNAUTHORIZED: i32 = 401001;
/// Business code: wrong email or password.
pub const CODE_WRONG_CREDENTIALS: i32 = 401002;
/// Business code: token used from another client.
pub const CODE_WRONG_CLIENT: i32 = 403001;
/// Business code: not allowed (not the author, not an admin).
pub const CODE_FORBIDDEN: i32 = 403002;
/// The caller's account is suspended: it may sign in and read, not write.
pub const CODE_SUSPENDED: i32 = 403003;
/// Business code: no such object (or route).
pub const CODE_NOT_FOUND: i32 = 404001;
/// Business code: already exists.
pub const CODE_CONFLICT: i32 = 409001;
/// Business code: too many requests.
pub const CODE_RATE_LIMITED: i32 = 429001;

/// A language `msg` can be answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    /// English, the default.
    #[default]
    En,
    /// Simplified Chinese.
    Zh,
}

tokio::task_local! {
    static LANG: Lang;
}

impl Lang {
    /// The language an `Accept-Language` header prefers among those we speak: the highest
    /// `q` wins, ties go to the earlier entry, `q=0` excludes; English when nothing matches.
    pub fn negotiate(accept_language: Option<&str>) -> Self {
        let Some(header) = accept_language else {
            return Self::En;
        };
        let mut best: Option<(f32, Self)> = None;
        for entry in header.split(',') {
            let mut parts = entry.split(';');
            let tag = parts.next().unwrap_or("").trim();
            let quality = parts
                .find_map(|param| {
                    let (name, value) = param.split_once('=')?;
                    (name.trim() == "q").then(|| value.trim().parse::<f32>().ok())?
                })
                .unwrap_or(1.0);
            let primary = tag.split('-').next().unwrap_or("");
            let lang = if primary.eq_ignore_ascii_case("zh") {
                Self::Zh
            } else if primary.eq_ignore_ascii_case("en") {
                Self::En
            } else {
                continue;
            };
            if quality > 0.0 && best.is_none_or(|(best_quality, _)| quality > best_quality) {
                best = Some((quality, lang));
            }
        }
        best.map_or(Self::En, |(_, lang)| lang)
    }

    /// Runs `future` with `self` as the language of the errors it renders.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        LANG.scope(self, future).await
    }

    /// The language of the request being handled (English outside a request).
    pub fn current() -> Self {
        LANG.try_with(|lang| *lang).unwrap_or_default()
    }
}

/// `value` when it is a positive id, else invalid input naming `field`.
pub fn positive_id(field: &str, value: i64) -> Result<i64, AppError> {
    if value > 0 {
        Ok(value)
    } else {
        Err(AppError::InvalidInput(Msg::field(
            field,
            "must be a positive integer",
            "须为正整数",
        )))
    }
}

/// A message in both languages of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    en: Cow<'static, str>,
    zh: Cow<'static, str>,
}

impl Msg {
    /// A fixed message.
    pub const fn new(en: &'static str, zh: &'static str) -> Self {
        Self {
            en: Cow::Borrowed(en),
            zh: Cow::Borrowed(zh),
        }
    }

    /// A message built at run time.
    pub fn owned(en: String, zh: String) -> Self {
        Self {
            en: Cow::Owned(en),
            zh: Cow::Owned(zh),
        }
    }

    /// `field: why` in both languages, the form of every validation message.
    pub fn field(field: &str, en: impl fmt::Display, zh: impl fmt::Display) -> Self {
        Self::owned(format!("{field}: {en}"), format!("{field}：{zh}"))
    }

    /// The text in `lang`.
    pub fn text(&self, lang: Lang) -> &str {
        match lang {
            Lang::En => &self.en,
            Lang::Zh => &self.zh,
        }
    }
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.en)
    }
}

/// The response envelope of every JSON answer.
#[derive(Debug, Serialize)]
pub struct Envelope<'a, T: Serialize> {
    /// 0 on success, otherwise one of the `CODE_*` constants.
    pub code: i32,
    /// A human-readable message, safe to show.
    pub msg: &'a str,
    /// The payload, `null` when there is none.
    pub data: Option<T>,
}

/// A successful answer carrying `data`.
#[derive(Debug)]
pub struct Reply<T>(pub T);

impl<T: Serialize> IntoResponse for Reply<T> {
    fn into_response(self) -> Response {
        Json(Envelope {
            code: CODE_OK,
            msg: "ok",
            data: Some(self.0),
        })
        .into_response()
    }
}

/// A successful answer carrying `data` and a message for the person (e.g. "code sent"), in the
/// request's language.
#[derive(Debug)]
pub struct ReplyWithMsg<T>(pub Msg, pub T);

impl<T: Serialize> IntoResponse for ReplyWithMsg<T> {
    fn into_response(self) -> Response {
        Json(Envelope {
            code: CODE_OK,
            msg: self.0.text(Lang::current()),
            data: Some(self.1),
        })
        .into_response()
    }
}

/// What every handler returns.
pub type ApiResult<T> = Result<Reply<T>, AppError>;

/// Every way a request can fail, mapped to a status and a business code by [`AppError::status`]
/// and [`AppError::code`], and to a message in the request's language by [`AppError::msg`].
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A field failed validation (HTTP 200, code 4).
    #[error("{0}")]
    InvalidInput(Msg),
    /// The body is not valid JSON for the route, or too large (HTTP 400, code 4).
    #[error("{0}")]
    BadRequest(Msg),
    /// Missing, invalid, expired or revoked token (HTTP 401).
    #[error("not logged in")]
    Unauthorized,
    /// Wrong email or password, the same answer for both (HTTP 200).
    #[error("wrong email or password")]
    WrongCredentials,
    /// A token used from another User-Agent (HTTP 403).
    #[error("token used from another client")]
    WrongClient,
    /// The caller may not do this (HTTP 200, code 403002).
    #[error("{0}")]
    Forbidden(Msg),
    /// The caller's account is suspended by a moderator: reads work, writes do not (HTTP 200,
    /// code 403003); the message says until when and why.
    #[error("{0}")]
    Suspended(Msg),
    /// No such object (HTTP 200, code 404001).
    #[error("{0}")]
    NotFound(Msg),
    /// No route for this path and method (HTTP 404).
    #[error("no such route")]
    NoRoute,
    /// The route exists, the method does not (HTTP 405).
    #[error("method not allowed for this route")]
    MethodNotAllowed,
    /// Already exists, e.g. email taken (HTTP 200, code 409001).
    #[error("{0}")]
    Conflict(Msg),
    /// Rate limited; the client may retry after the given time (HTTP 429).
    #[error("too many requests")]
    RateLimited {
        /// When the client may try again.
        retry_after: Duration,
    },
    /// A capability this site has not turned on, e.g. WeChat sign-in without an app (HTTP 200,
    /// code 5): a fact about the site, not a dependency being down, so nothing should retry it.
    #[error("{0}")]
    Disabled(Msg),
    /// A dependency is down and nothing safe can be served (HTTP 503).
    #[error("service unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// The request ran past the configured request timeout (HTTP 503).
    #[error("request timed out")]
    Timeout,
    /// A handler panicked (HTTP 500).
    #[error("system error")]
    Panic(String),
    /// Anything else (HTTP 500); the cause is logged, never sent.
    #[error("system error")]
    Internal(anyhow::Error),
}

impl AppError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidInput(_)
            | Self::WrongCredentials
            | Self::Forbidden(_)
            | Self::Suspended(_)
            | Self::NotFound(_)
            | Self::Conflict(_)
            | Self::Disabled(_) => StatusCode::OK,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::WrongClient => StatusCode::FORBIDDEN,
            Self::NoRoute => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) | Self::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            Self::Panic(_) | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The message of this error in `lang` (the English one is also its `Display`).
    pub fn msg(&self, lang: Lang) -> Cow<'_, str> {
        let fixed = |en: &'static str, zh: &'static str| {
            Cow::Borrowed(match lang {
                Lang::En => en,
                Lang::Zh => zh,
            })
        };
        match self {
            Self::InvalidInput(msg)
            | Self::BadRequest(msg)
            | Self::Forbidden(msg)
            | Self::Suspended(msg)
            | Self::NotFound(msg)
            | Self::Conflict(msg)
            | Self::Disabled(msg) => Cow::Borrowed(msg.text(lang)),
            Self::Unauthorized => fixed("not logged in", "未登录或登录已失效"),
            Self::WrongCredentials => fixed("wrong email or password", "邮箱或密码错误"),
            Self::WrongClient => fixed("token used from another client", "登录凭证来自其他客户端"),
            Self::NoRoute => fixed("no such route", "没有这个接口"),
            Self::MethodNotAllowed => fixed(
                "method not allowed for this route",
                "此接口不支持该请求方法",
            ),
            Self::RateLimited { .. } => fixed("too many requests", "请求过于频繁，请稍后再试"),
            Self::Unavailable(_) => fixed("service unavailable", "服务暂时不可用，请稍后再试"),
            Self::Timeout => fixed("request timed out", "请求超时"),
            Self::Panic(_) | Self::Internal(_) => fixed("system error", "系统错误"),
        }
    }

    /// The response in `lang` ([`IntoResponse`] uses the request's language). Internal errors
    /// and panics are logged here, once, with their cause chain.
    pub fn render(self, lang: Lang) -> Response {
        match &self {
            Self::Internal(cause) | Self::Unavailable(cause) => {
                tracing::error!(error = format!("{cause:#}"), "request failed");
            }
            Self::Panic(message) => tracing::error!(panic = %message, "handler panicked"),
            _ => {}
        }
        let mut response = (
            self.status(),
            Json(Envelope::<()> {
                code: self.code(),
                msg: &self.msg(lang),
                data: None,
            }),
        )
            .into_response();
        if let Self::RateLimited { retry_after } = self {
            // Retry-After is whole seconds; round up so a client never retries too early.
            let secs = retry_after.as_millis().div_ceil(1000).max(1);
            if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }

    /// The business code of this error (`API.md` → Conventions).
    pub fn code(&self) -> i32 {
        match self {
            Self::InvalidInput(_) | Self::BadRequest(_) | Self::MethodNotAllowed => {
                CODE_INVALID_INPUT
            }
            Self::Unauthorized => CODE_UNAUTHORIZED,
            Self::WrongCredentials => CODE_WRONG_CREDENTIALS,
            Self::WrongClient => CODE_WRONG_CLIENT,
            Self::Forbidden(_) => CODE_FORBIDDEN,
            Self::Suspended(_) => CODE_SUSPENDED,
            Self::NotFound(_) | Self::NoRoute => CODE_NOT_FOUND,
            Self::Conflict(_) => CODE_CONFLICT,
            Self::RateLimited { .. } => CODE_RATE_LIMITED,
            Self::Disabled(_)
            | Self::Unavailable(_)
            | Self::Timeout
            | Self::Panic(_)
            | Self::Internal(_) => CODE_SYSTEM,
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        self.render(Lang::current())
    }
}

/// A failure of the database itself (unreachable, disk full, …) is a dependency being down:
/// answered 503, so clients and load balancers retry; so is a write refused by a database
/// move's fence (the retry reaches the new authority). Anything else is a 500.
impl From<anyhow::Error> for AppError {
    fn from(err: anyhow::Error) -> Self {
        if crate::db::caused_by_unavailable_database(&err) || crate::db::caused_by_fence(&err) {
            Self::Unavailable(err)
        } else {
            Self::Internal(err)
        }
    }
}

impl From<sqlx::Error> for AppError {
    fn from(err: sqlx::Error) -> Self {
        anyhow::Error::from(err).into()
    }
}

impl From<JsonRejection> for AppError {
    fn from(rejection: JsonRejection) -> Self {
        let msg = match &rejection {
            JsonRejection::JsonSyntaxError(_) => {
                Msg::new("request body is not valid JSON", "请求体不是合法的 JSON")
            }
            JsonRejection::JsonDataError(err) => Msg::owned(
                format!("request body does not fit this route: {}", err.body_text()),
                format!("请求体与此接口不符：{}", err.body_text()),
            ),
            JsonRejection::MissingJsonContentType(_) => Msg::new(
                "expected a request body with Content-Type: application/json",
                "请求体须为 JSON（Content-Type: application/json）",
            ),
            JsonRejection::BytesRejection(err) if err.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Msg::new("request body is too large", "请求体过大")
            }
            other => Msg::owned(
                format!("cannot read the request body: {}", other.body_text()),
                format!("无法读取请求体：{}", other.body_text()),
            ),
        };
        Self::BadRequest(msg)
    }
}

/// JSON body extractor whose failures answer with the envelope (400, code 4).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(value) = Json::<T>::from_request(req, state).await?;
        Ok(Self(value))
    }
}

/// Path parameter extractor whose failures answer with the envelope (400, code 4).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    Path<T>: FromRequestParts<S, Rejection = PathRejection>,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Self(value)),
            Err(rejection) => Err(AppError::BadRequest(Msg::owned(
                format!("invalid path parameter: {}", rejection.body_text()),
                format!("路径参数无效：{}", rejection.body_text()),
            ))),
        }
    }
}

/// Query-string extractor whose failures answer with the envelope (400, code 4).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    Query<T>: FromRequestParts<S, Rejection = QueryRejection>,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(AppError::BadRequest(Msg::owned(
                format!("invalid query string: {}", rejection.body_text()),
                format!("查询参数无效：{}", rejection.body_text()),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    async fn render(err: AppError) -> (StatusCode, serde_json::Value, Option<String>) {
        let response = err.into_response();
        let status = response.status();
        let retry = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = to_bytes(response.into_body(), 1 << 16).await.unwrap();
        (status, serde_json::from_slice(&body).unwrap(), retry)
    }

    #[tokio::test]
    async fn every_error_maps_to_its_status_and_code() {
        let cases: Vec<(AppError, StatusCode, i32)> = vec![
            (
                AppError::InvalidInput(Msg::new("email: invalid", "email：无效")),
                StatusCode::OK,
                4,
            ),
            (
                AppError::BadRequest(Msg::new("bad json", "JSON 有误")),
                StatusCode::BAD_REQUEST,
                4,
            ),
            (AppError::Unauthorized, StatusCode::UNAUTHORIZED, 401001),
            (AppError::WrongCredentials, StatusCode::OK, 401002),
            (AppError::WrongClient, StatusCode::FORBIDDEN, 403001),
            (
                AppError::Forbidden(Msg::new("not the author", "不是作者")),
                StatusCode::OK,
                403002,
            ),
            (
                AppError::NotFound(Msg::new("no such article", "文章不存在")),
                StatusCode::OK,
                404001,
            ),
            (AppError::NoRoute, StatusCode::NOT_FOUND, 404001),
            (
                AppError::Conflict(Msg::new("email taken", "邮箱已注册")),
                StatusCode::OK,
                409001,
            ),
            (
                AppError::RateLimited {
                    retry_after: Duration::from_millis(1500),
                },
                StatusCode::TOO_MANY_REQUESTS,
                429001,
            ),
            (
                AppError::Unavailable(anyhow::anyhow!("redis down")),
                StatusCode::SERVICE_UNAVAILABLE,
                5,
            ),
            (AppError::Timeout, StatusCode::SERVICE_UNAVAILABLE, 5),
            (
                AppError::Disabled(Msg::new("WeChat login is not enabled", "未开启微信登录")),
                StatusCode::OK,
                5,
            ),
            (
                AppError::Panic("boom".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
                5,
            ),
            (
                AppError::Internal(anyhow::anyhow!("password hash $argon2id$ leaked?")),
                StatusCode::INTERNAL_SERVER_ERROR,
                5,
            ),
        ];
        for (err, status, code) in cases {
            let label = format!("{err:?}");
            let (got_status, body, _) = render(err).await;
            assert_eq!(got_status, status, "{label}");
            assert_eq!(body["code"], code, "{label}");
            assert!(body["msg"].is_string(), "{label}");
            assert!(body["data"].is_null(), "{label}");
        }
    }

    #[tokio::test]
    async fn internal_causes_never_reach_the_client() {
        let (_, body, _) = render(AppError::Internal(anyhow::anyhow!(
            "SELECT password FROM users: $argon2id$secret"
        )))
        .await;
        assert_eq!(body["msg"], "system error");
        assert!(!body.to_string().contains("argon2id"));
    }

    #[tokio::test]
    async fn rate_limited_rounds_retry_after_up_to_whole_seconds() {
        let (_, _, retry) = render(AppError::RateLimited {
            retry_after: Duration::from_millis(1500),
        })
        .await;
        assert_eq!(retry.as_deref(), Some("2"));
        let (_, _, retry) = render(AppError::RateLimited {
            retry_after: Duration::from_millis(10),
        })
        .await;
        assert_eq!(retry.as_deref(), Some("1"));
    }

    #[test]
    fn accept_language_picks_the_preferred_language_we_speak() {
        assert_eq!(Lang::negotiate(None), Lang::En);
        assert_eq!(Lang::negotiate(Some("zh-CN,zh;q=0.9,en;q=0.8")), Lang::Zh);
        assert_eq!(
            Lang::negotiate(Some("en-US,en;q=0.9,zh-CN;q=0.8")),
            Lang::En
        );
        assert_eq!(Lang::negotiate(Some("fr-FR, zh-TW;q=0.5")), Lang::Zh);
        assert_eq!(Lang::negotiate(Some("en;q=0.3, ZH;q=0.7")), Lang::Zh);
        assert_eq!(Lang::negotiate(Some("zh;q=0, en;q=0.1")), Lang::En);
        assert_eq!(Lang::negotiate(Some("de, fr")), Lang::En);
        assert_eq!(Lang::negotiate(Some(";;q=,zh;q=abc")), Lang::Zh);
    }

    #[tokio::test]
    async fn errors_answer_in_the_language_of_the_request_with_the_same_code() {
        let zh = Lang::Zh
            .scope(async { render(AppError::Unauthorized).await })
            .await;
        let en = render(AppError::Unauthorized).await;
        assert_eq!(zh.1["code"], en.1["code"]);
        assert_eq!(en.1["msg"], "not logged in");
        assert_eq!(zh.1["msg"], "未登录或登录已失效");
        let (_, body, _) = Lang::Zh
            .scope(async {
                render(AppError::InvalidInput(Msg::field(
                    "title",
                    "at most 256 characters",
                    "最多 256 个字符",
                )))
                .await
            })
            .await;
        assert_eq!(body["msg"], "title：最多 256 个字符");
    }

    #[tokio::test]
    async fn database_failures_answer_503_and_query_errors_500() {
        let full = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let (status, body, _) = render(AppError::from(full)).await;
        assert_eq!(
            (status, body["code"].as_i64()),
            (StatusCode::SERVICE_UNAVAILABLE, Some(5))
        );
        let wrapped = anyhow::Error::from(sqlx::Error::PoolTimedOut).context("loading the article");
        assert!(matches!(AppError::from(wrapped), AppError::Unavailable(_)));
        let (status, _, _) = render(AppError::from(sqlx::Error::RowNotFound)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[tokio::test]
    async fn success_is_wrapped_in_the_envelope() {
        let response = Reply(serde_json::json!({"id": 7})).into_response();
        assert_eq!(response.status(), StatusCode::OK);
        let body = to_bytes(response.into_body(), 1 << 16).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"code": 0, "msg": "ok", "data": {"id": 7}})
        );
    }
}
