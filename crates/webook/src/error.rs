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

use std::time::Duration;

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
/// Business code: no such object (or route).
pub const CODE_NOT_FOUND: i32 = 404001;
/// Business code: already exists.
pub const CODE_CONFLICT: i32 = 409001;
/// Business code: too many requests.
pub const CODE_RATE_LIMITED: i32 = 429001;

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

/// What every handler returns.
pub type ApiResult<T> = Result<Reply<T>, AppError>;

/// Every way a request can fail, mapped to a status and a business code by [`AppError::status`]
/// and [`AppError::code`].
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A field failed validation (HTTP 200, code 4).
    #[error("{0}")]
    InvalidInput(String),
    /// The body is not valid JSON for the route, or too large (HTTP 400, code 4).
    #[error("{0}")]
    BadRequest(String),
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
    Forbidden(&'static str),
    /// No such object (HTTP 200, code 404001).
    #[error("{0}")]
    NotFound(&'static str),
    /// No route for this path and method (HTTP 404).
    #[error("no such route")]
    NoRoute,
    /// The route exists, the method does not (HTTP 405).
    #[error("method not allowed for this route")]
    MethodNotAllowed,
    /// Already exists, e.g. email taken (HTTP 200, code 409001).
    #[error("{0}")]
    Conflict(&'static str),
    /// Rate limited; the client may retry after the given time (HTTP 429).
    #[error("too many requests")]
    RateLimited {
        /// When the client may try again.
        retry_after: Duration,
    },
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
    Internal(#[from] anyhow::Error),
}

impl AppError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidInput(_)
            | Self::WrongCredentials
            | Self::Forbidden(_)
            | Self::NotFound(_)
            | Self::Conflict(_) => StatusCode::OK,
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
            Self::NotFound(_) | Self::NoRoute => CODE_NOT_FOUND,
            Self::Conflict(_) => CODE_CONFLICT,
            Self::RateLimited { .. } => CODE_RATE_LIMITED,
            Self::Unavailable(_) | Self::Timeout | Self::Panic(_) | Self::Internal(_) => {
                CODE_SYSTEM
            }
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match &self {
            Self::Internal(cause) | Self::Unavailable(cause) => {
                tracing::error!(error = format!("{cause:#}"), "request failed");
            }
            Self::Panic(message) => tracing::error!(panic = %message, "handler panicked"),
            _ => {}
        }
        let msg = self.to_string();
        let mut response = (
            self.status(),
            Json(Envelope::<()> {
                code: self.code(),
                msg: &msg,
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
}

impl From<sqlx::Error> for AppError {
    fn from(err: sqlx::Error) -> Self {
        Self::Internal(err.into())
    }
}

impl From<JsonRejection> for AppError {
    fn from(rejection: JsonRejection) -> Self {
        let msg = match &rejection {
            JsonRejection::JsonSyntaxError(_) => "request body is not valid JSON".to_owned(),
            JsonRejection::JsonDataError(err) => {
                format!("request body does not fit this route: {}", err.body_text())
            }
            JsonRejection::MissingJsonContentType(_) => {
                "expected a request body with Content-Type: application/json".to_owned()
            }
            JsonRejection::BytesRejection(err) if err.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                "request body is too large".to_owned()
            }
            other => format!("cannot read the request body: {}", other.body_text()),
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
            Err(rejection) => Err(AppError::BadRequest(format!(
                "invalid path parameter: {}",
                rejection.body_text()
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
            Err(rejection) => Err(AppError::BadRequest(format!(
                "invalid query string: {}",
                rejection.body_text()
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
                AppError::InvalidInput("email: invalid".into()),
                StatusCode::OK,
                4,
            ),
            (
                AppError::BadRequest("bad json".into()),
                StatusCode::BAD_REQUEST,
                4,
            ),
            (AppError::Unauthorized, StatusCode::UNAUTHORIZED, 401001),
            (AppError::WrongCredentials, StatusCode::OK, 401002),
            (AppError::WrongClient, StatusCode::FORBIDDEN, 403001),
            (
                AppError::Forbidden("not the author"),
                StatusCode::OK,
                403002,
            ),
            (
                AppError::NotFound("no such article"),
                StatusCode::OK,
                404001,
            ),
            (AppError::NoRoute, StatusCode::NOT_FOUND, 404001),
            (AppError::Conflict("email taken"), StatusCode::OK, 409001),
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
