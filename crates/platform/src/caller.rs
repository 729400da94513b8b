//! Who is calling: a platform fact, resolved once per request for every feature.
//!
//! One feature (auth) knows how a token becomes a user and who is an admin; it installs that
//! knowledge as a [`ResolvesCallers`] trait object ([`crate::feature::Registry::resolve_callers`]),
//! and the registry puts the resulting [`Callers`] handle in every request's extensions. Handlers
//! of any feature then take an extractor from here, whatever their route state:
//!
//! - [`Caller`]: anyone — [`Caller::Anonymous`] without an `Authorization` header, else the user
//!   the token names (a token that does not check out is refused, 401, so a client with a stale
//!   token learns to refresh rather than silently reading as a stranger);
//! - [`AuthUser`]: a signed-in user (401 without a valid token, 403001 from another User-Agent);
//! - [`Writer`]: a signed-in user within the per-user write limit (429001 beyond it) whom
//!   every installed [`GatesWrites`] lets write (a suspended account is refused there, by the
//!   moderation feature);
//! - [`Admin`]: a signed-in user with admin rights (403002 otherwise, naming the [`AdminArea`]
//!   the routes layered in), checked before any other extractor so a non-admin learns nothing
//!   about ids or bodies.
//!
//! A request whose routes were built without a resolver (a composition error the app refuses at
//! start-up) is answered 500 rather than let through.

use std::sync::Arc;

use async_trait::async_trait;
use axum::{
    extract::{FromRequestParts, OptionalFromRequestParts},
    http::{header, request::Parts, HeaderMap},
};

use crate::{
    error::{AppError, Msg},
    http::bearer_token,
};

/// A signed-in caller: their user id and the session their token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthUser {
    /// User id.
    pub uid: i64,
    /// Session id.
    pub ssid: String,
}

/// A signed-in caller about to write (publish, like, edit a profile, …): an [`AuthUser`] within
/// the per-user write rate limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer(pub AuthUser);

/// A signed-in caller with admin rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admin {
    /// The admin's user id.
    pub uid: i64,
}

/// The caller of a route anyone may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No `Authorization` header.
    Anonymous,
    /// A signed-in user.
    User(AuthUser),
}

impl Caller {
    /// The signed-in user's id, if any.
    pub fn uid(&self) -> Option<i64> {
        match self {
            Self::Anonymous => None,
            Self::User(user) => Some(user.uid),
        }
    }
}

/// The caller of a route that reads the community's public content (lists of published
/// articles, author pages, comments, a tag's articles): anyone when the operator lets visitors
/// read without an account ([`ResolvesCallers::anonymous_reading`]), a signed-in user
/// otherwise (401001 without a token, as [`AuthUser`]). A token that does not check out is
/// refused either way: a visitor is one who sent none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader(pub Caller);

/// What a set of admin routes guards: the refusal (403002) a non-admin gets names it. A router
/// layers its area (`router.layer(axum::Extension(AREA))`); without one the refusal is generic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminArea {
    english: &'static str,
    chinese: &'static str,
}

impl AdminArea {
    /// The area whose refusal says `english` ("only admins may …") and `chinese`.
    pub const fn new(english: &'static str, chinese: &'static str) -> Self {
        Self { english, chinese }
    }

    /// Routes that name no area.
    pub const ANY: Self = Self::new("only admins may do this", "只有管理员可以执行此操作");

    /// The 403002 a non-admin gets from this area's routes.
    pub fn refusal(self) -> AppError {
        AppError::Forbidden(Msg::new(self.english, self.chinese))
    }
}

/// How callers are resolved: installed by the feature that owns sign-in.
#[async_trait]
pub trait ResolvesCallers: Send + Sync + 'static {
    /// The caller of a request carrying `access_token` from `user_agent` (401 when the token
    /// does not check out, 403001 when it was issued to another User-Agent).
    async fn authenticate(
        &self,
        access_token: &str,
        user_agent: &str,
    ) -> Result<AuthUser, AppError>;

    /// Counts one write by `uid` (429001 over the write limit).
    async fn check_write_rate(&self, uid: i64) -> Result<(), AppError>;

    /// Whether user `uid` has admin rights.
    async fn is_admin(&self, uid: i64) -> Result<bool, AppError>;

    /// Whether a caller without a token may read the community's public content (see
    /// [`Reader`]); the operator's choice.
    fn anonymous_reading(&self) -> bool {
        false
    }
}

/// A check every [`Writer`] passes after the write limit, installed by a feature other than
/// sign-in (moderation: a suspended account may read but not write; new accounts write less).
#[async_trait]
pub trait GatesWrites: Send + Sync + 'static {
    /// Whether user `uid` may write now (the refusal otherwise).
    async fn check_write(&self, uid: i64) -> Result<(), AppError>;
}

/// The installed resolver and write gates, as requests carry them in their extensions; cheap
/// to clone.
#[derive(Clone)]
pub struct Callers(Arc<dyn ResolvesCallers>, Arc<[Arc<dyn GatesWrites>]>);

impl Callers {
    /// Wraps `resolver`, with no write gates.
    pub fn new(resolver: Arc<dyn ResolvesCallers>) -> Self {
        Self(resolver, Arc::new([]))
    }

    /// The same resolver with `gates` checked on every write, in order.
    #[must_use]
    pub fn with_gates(self, gates: Vec<Arc<dyn GatesWrites>>) -> Self {
        Self(self.0, gates.into())
    }

    /// The resolver of the request in `parts` (500 when the routes were built without one).
    fn of(parts: &Parts) -> Result<Self, AppError> {
        parts.extensions.get::<Self>().cloned().ok_or_else(|| {
            AppError::Internal(anyhow::anyhow!(
                "no caller resolver: the routes were built without the sign-in feature"
            ))
        })
    }
}

impl std::fmt::Debug for Callers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Callers")
    }
}

/// The request's User-Agent ("" when absent), which sessions are bound to.
pub fn user_agent(headers: &HeaderMap) -> &str {
    headers
        .get(header::USER_AGENT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

/// The resolver of the request in `parts` and the signed-in user it finds there.
async fn signed_in(parts: &Parts) -> Result<(Callers, AuthUser), AppError> {
    let callers = Callers::of(parts)?;
    let token = bearer_token(&parts.headers).ok_or(AppError::Unauthorized)?;
    let user = callers
        .0
        .authenticate(token, user_agent(&parts.headers))
        .await?;
    Ok((callers, user))
}

impl<S: Send + Sync> FromRequestParts<S> for AuthUser {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(signed_in(parts).await?.1)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for AuthUser {
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        match Caller::from_request_parts(parts, state).await? {
            Caller::Anonymous => Ok(None),
            Caller::User(user) => Ok(Some(user)),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        if !parts.headers.contains_key(header::AUTHORIZATION) {
            return Ok(Self::Anonymous);
        }
        Ok(Self::User(signed_in(parts).await?.1))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Reader {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        if !parts.headers.contains_key(header::AUTHORIZATION) {
            return if Callers::of(parts)?.0.anonymous_reading() {
                Ok(Self(Caller::Anonymous))
            } else {
                Err(AppError::Unauthorized)
            };
        }
        Ok(Self(Caller::User(signed_in(parts).await?.1)))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Writer {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let (callers, user) = signed_in(parts).await?;
        callers.0.check_write_rate(user.uid).await?;
        for gate in callers.1.iter() {
            gate.check_write(user.uid).await?;
        }
        Ok(Self(user))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Admin {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let (callers, user) = signed_in(parts).await?;
        if callers.0.is_admin(user.uid).await? {
            Ok(Self { uid: user.uid })
        } else {
            let area = parts
                .extensions
                .get::<AdminArea>()
                .copied()
                .unwrap_or(AdminArea::ANY);
            Err(area.refusal())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::http::{HeaderValue, Request};

    use super::*;

    /// Token "good" is user 7 (an admin); "other" is user 8; anything else is refused.
    struct Fixed;

    #[async_trait]
    impl ResolvesCallers for Fixed {
        async fn authenticate(&self, token: &str, _: &str) -> Result<AuthUser, AppError> {
            match token {
                "good" => Ok(AuthUser {
                    uid: 7,
                    ssid: "s".into(),
                }),
                "other" => Ok(AuthUser {
                    uid: 8,
                    ssid: "t".into(),
                }),
                _ => Err(AppError::Unauthorized),
            }
        }

        async fn check_write_rate(&self, uid: i64) -> Result<(), AppError> {
            if uid == 8 {
                Err(AppError::Forbidden(Msg::new("limited", "limited")))
            } else {
                Ok(())
            }
        }

        async fn is_admin(&self, uid: i64) -> Result<bool, AppError> {
            Ok(uid == 7)
        }
    }

    fn parts(token: Option<&str>, resolver: bool) -> Parts {
        let mut request = Request::new(());
        if let Some(token) = token {
            request.headers_mut().insert(
                header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
            );
        }
        if resolver {
            request
                .extensions_mut()
                .insert(Callers::new(Arc::new(Fixed)));
        }
        request.into_parts().0
    }

    async fn extract<T: FromRequestParts<(), Rejection = AppError>>(
        token: Option<&str>,
    ) -> Result<T, AppError> {
        T::from_request_parts(&mut parts(token, true), &()).await
    }

    #[tokio::test]
    async fn each_extractor_lets_through_exactly_its_callers() {
        assert_eq!(extract::<Caller>(None).await.unwrap(), Caller::Anonymous);
        assert_eq!(
            extract::<Caller>(Some("good")).await.unwrap().uid(),
            Some(7)
        );
        assert!(matches!(
            extract::<Caller>(Some("stale")).await,
            Err(AppError::Unauthorized)
        ));
        assert!(matches!(
            extract::<AuthUser>(None).await,
            Err(AppError::Unauthorized)
        ));
        assert_eq!(extract::<AuthUser>(Some("other")).await.unwrap().uid, 8);
        assert_eq!(extract::<Writer>(Some("good")).await.unwrap().0.uid, 7);
        assert!(extract::<Writer>(Some("other")).await.is_err());
        assert_eq!(
            extract::<Admin>(Some("good")).await.unwrap(),
            Admin { uid: 7 }
        );
    }

    /// [`Fixed`], letting visitors read.
    struct Open;

    #[async_trait]
    impl ResolvesCallers for Open {
        async fn authenticate(&self, token: &str, agent: &str) -> Result<AuthUser, AppError> {
            Fixed.authenticate(token, agent).await
        }
        async fn check_write_rate(&self, uid: i64) -> Result<(), AppError> {
            Fixed.check_write_rate(uid).await
        }
        async fn is_admin(&self, uid: i64) -> Result<bool, AppError> {
            Fixed.is_admin(uid).await
        }
        fn anonymous_reading(&self) -> bool {
            true
        }
    }

    #[tokio::test]
    async fn a_reader_without_a_token_gets_through_only_where_visitors_may_read() {
        // Visitors may not read (the course's rule): a login is needed.
        assert!(matches!(
            extract::<Reader>(None).await,
            Err(AppError::Unauthorized)
        ));
        assert_eq!(
            extract::<Reader>(Some("good")).await.unwrap().0.uid(),
            Some(7)
        );
        // Visitors may read: without a token, anonymous; a bad token is still refused.
        let open = |token: Option<&str>| {
            let mut request = parts(token, false);
            request.extensions.insert(Callers::new(Arc::new(Open)));
            request
        };
        let reader = |token| async move { Reader::from_request_parts(&mut open(token), &()).await };
        assert_eq!(reader(None).await.unwrap(), Reader(Caller::Anonymous));
        assert_eq!(reader(Some("other")).await.unwrap().0.uid(), Some(8));
        assert!(matches!(
            reader(Some("stale")).await,
            Err(AppError::Unauthorized)
        ));
        // Writing still needs a login.
        assert!(matches!(
            Writer::from_request_parts(&mut open(None), &()).await,
            Err(AppError::Unauthorized)
        ));
    }

    #[tokio::test]
    async fn a_non_admin_is_refused_with_the_area_the_routes_name() {
        let area = AdminArea::new("only admins may manage jobs", "只有管理员可以管理任务");
        let mut request = parts(Some("other"), true);
        request.extensions.insert(area);
        let refused = Admin::from_request_parts(&mut request, &()).await;
        assert_eq!(refused.unwrap_err().to_string(), area.refusal().to_string());
        let generic = extract::<Admin>(Some("other")).await.unwrap_err();
        assert_eq!(generic.to_string(), AdminArea::ANY.refusal().to_string());
    }

    #[tokio::test]
    async fn without_a_resolver_nobody_gets_through() {
        let refused = <AuthUser as FromRequestParts<()>>::from_request_parts(
            &mut parts(Some("good"), false),
            &(),
        )
        .await;
        assert!(matches!(refused, Err(AppError::Internal(_))));
        // Anonymous callers need no resolver.
        let anyone = Caller::from_request_parts(&mut parts(None, false), &()).await;
        assert_eq!(anyone.unwrap(), Caller::Anonymous);
    }
}
