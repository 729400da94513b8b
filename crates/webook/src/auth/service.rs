//! The rules of signing in: sign-up, login, token refresh with rotation, logout, authentication
//! of requests, the sign-in and write rate limits. No HTTP, no SQL text; accounts are the users
//! feature's table ([`UserStore`]).

use crate::{
    auth::{
        password::PasswordHasher,
        session::{Rotation, SessionStore},
        token::{user_agent_hash, Tokens},
    },
    user::{check_password_strength, normalize_email, InsertError, UserStore},
};
use platform::{
    caller::AuthUser,
    db::now_millis,
    error::{AppError, Msg},
    live::LiveRateLimiter,
};

/// Counter: authentication events by `event`.
pub const AUTH_EVENTS_TOTAL: &str = "auth_events_total";

/// A new access token and refresh token.
#[derive(Debug, Clone)]
pub struct TokenPair {
    /// Goes in `x-jwt-token`.
    pub access: String,
    /// Goes in `x-refresh-token`.
    pub refresh: String,
}

/// The rate limits of sign-in and writes.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Sign-up and login attempts, per client IP (live: `auth_rate_limit`).
    pub auth: LiveRateLimiter,
    /// Writes (publishing, likes, profile edits, …), per user; off at 0 (live:
    /// `write_rate_limit`).
    pub writes: LiveRateLimiter,
}

/// Sign-in and sessions; cheap to clone.
#[derive(Debug, Clone)]
pub struct AuthService {
    store: UserStore,
    hasher: PasswordHasher,
    tokens: Tokens,
    sessions: SessionStore,
    limits: Limits,
}

fn count(event: &'static str) {
    metrics::counter!(AUTH_EVENTS_TOTAL, "event" => event).increment(1);
}

impl AuthService {
    /// Assembles the service from its parts.
    pub fn new(
        store: UserStore,
        hasher: PasswordHasher,
        tokens: Tokens,
        sessions: SessionStore,
        limits: Limits,
    ) -> Self {
        Self {
            store,
            hasher,
            tokens,
            sessions,
            limits,
        }
    }

    /// Counts one sign-up or login attempt from `client`; `RateLimited` when over the limit.
    pub async fn check_auth_rate(&self, client: &str) -> Result<(), AppError> {
        self.limits.auth.check(client).await
    }

    /// Counts one write by `uid`; `RateLimited` when over `write_rate_limit`.
    pub async fn check_write_rate(&self, uid: i64) -> Result<(), AppError> {
        self.limits.writes.check(&uid.to_string()).await
    }

    /// Registers an account; returns its id. 409001 when the email is taken (decided by the
    /// database's unique constraint, so concurrent sign-ups of one email yield one account).
    pub async fn signup(
        &self,
        email: &str,
        password: String,
        confirm: &str,
    ) -> Result<i64, AppError> {
        let email = normalize_email(email)?;
        if password != confirm {
            return Err(AppError::InvalidInput(Msg::field(
                "confirmPassword",
                "the two passwords differ",
                "两次输入的密码不一致",
            )));
        }
        check_password_strength(&password)?;
        let hash = self.hasher.hash(password).await?;
        match self.store.insert(&email, &hash, now_millis()).await {
            Ok(id) => {
                count("signup");
                Ok(id)
            }
            Err(InsertError::Duplicate) => Err(AppError::Conflict(Msg::new(
                "email already registered",
                "该邮箱已注册",
            ))),
            Err(InsertError::Db(err)) => Err(err.into()),
        }
    }

    /// Checks the credentials and opens a session bound to `user_agent`. Unknown email and wrong
    /// password give the same answer after the same work.
    pub async fn login(
        &self,
        email: &str,
        password: String,
        user_agent: &str,
    ) -> Result<TokenPair, AppError> {
        // A malformed email cannot match an account; still do the hashing work.
        let email = normalize_email(email).unwrap_or_default();
        let account = if email.is_empty() {
            None
        } else {
            self.store.find_credentials(&email).await?
        };
        // An account without a password (made by SMS or WeChat) cannot log in with one.
        let (uid, hash) = match account {
            Some((uid, hash)) => (Some(uid), hash),
            None => (None, None),
        };
        let verified = self.hasher.verify(password, hash).await?;
        let Some(uid) = uid.filter(|_| verified) else {
            count("login_failed");
            return Err(AppError::WrongCredentials);
        };
        count("login");
        self.open_session(uid, user_agent)
    }

    /// Opens a new session for `uid`, whom the caller has just authenticated (a password, an
    /// SMS code, a WeChat login), bound to `user_agent`: its first token pair.
    pub fn open_session(&self, uid: i64, user_agent: &str) -> Result<TokenPair, AppError> {
        let ssid = uuid::Uuid::new_v4().simple().to_string();
        Ok(TokenPair {
            access: self.tokens.issue_access(uid, &ssid, user_agent)?,
            refresh: self.tokens.issue_refresh(uid, &ssid, 0)?,
        })
    }

    /// A keyed digest of a small secret such as a login code (see [`Tokens::keyed_digest`]):
    /// what is stored instead of the secret.
    pub fn keyed_digest(&self, purpose: &str, data: &str) -> String {
        self.tokens.keyed_digest(purpose, data)
    }

    /// A signed token carrying `value` for `purpose`, valid for `ttl`: for state a client must
    /// hand back unchanged (the WeChat login's `state` cookie). Signed with the access-token
    /// secret but of its own kind, so it can never pass as a session token, nor one purpose's
    /// as another's.
    pub fn sign_state(
        &self,
        purpose: &str,
        value: &str,
        ttl: std::time::Duration,
    ) -> Result<String, AppError> {
        Ok(self.tokens.issue_state(purpose, value, ttl)?)
    }

    /// The value of a [`Self::sign_state`] token of `purpose`; `None` when forged, expired or of
    /// another purpose.
    pub fn verify_state(&self, purpose: &str, token: &str) -> Option<String> {
        self.tokens
            .verify_state(purpose, token)
            .map_err(|err| tracing::debug!(%err, purpose, "state token refused"))
            .ok()
    }

    /// Trades a refresh token for a new pair. A refresh token works once; presenting a used one
    /// revokes the session (reuse detection) — unless it is the one just used, again within
    /// `refresh_retry_window` of that refresh (its answer was lost): that gets a pair of the
    /// current generation ([`Rotation::Repeated`]).
    pub async fn refresh(
        &self,
        refresh_token: &str,
        user_agent: &str,
    ) -> Result<TokenPair, AppError> {
        let claims = self.tokens.verify_refresh(refresh_token).map_err(|err| {
            tracing::debug!(%err, "refresh refused");
            AppError::Unauthorized
        })?;
        let rotation = self
            .sessions
            .rotate(&claims.ssid, claims.uid, claims.gen)
            .await
            .map_err(AppError::Unavailable)?;
        let generation = match rotation {
            Rotation::Rotated { generation } => {
                count("refresh");
                generation
            }
            Rotation::Repeated { generation } => {
                count("refresh_repeat");
                tracing::info!(uid = claims.uid, ssid = %claims.ssid, "refresh token presented again within the retry window (its first answer was lost)");
                generation
            }
            Rotation::Reused => {
                count("refresh_reuse");
                tracing::warn!(uid = claims.uid, ssid = %claims.ssid, "refresh token reused; session revoked");
                return Err(AppError::Unauthorized);
            }
            Rotation::Revoked => return Err(AppError::Unauthorized),
        };
        Ok(TokenPair {
            access: self
                .tokens
                .issue_access(claims.uid, &claims.ssid, user_agent)?,
            refresh: self
                .tokens
                .issue_refresh(claims.uid, &claims.ssid, generation)?,
        })
    }

    /// Drops the state of fully expired sessions (see [`SessionStore::purge_expired`]).
    pub async fn purge_expired_sessions(&self) -> anyhow::Result<u64> {
        self.sessions.purge_expired().await
    }

    /// Revokes the caller's session.
    pub async fn logout(&self, user: &AuthUser) -> Result<(), AppError> {
        self.sessions
            .revoke(&user.ssid, user.uid)
            .await
            .map_err(AppError::Unavailable)?;
        count("logout");
        Ok(())
    }

    /// The caller of a request carrying `access_token` from `user_agent`: the signature, expiry,
    /// User-Agent binding and session are all checked.
    pub async fn authenticate(
        &self,
        access_token: &str,
        user_agent: &str,
    ) -> Result<AuthUser, AppError> {
        let claims = self.tokens.verify_access(access_token).map_err(|err| {
            tracing::debug!(%err, "access token refused");
            AppError::Unauthorized
        })?;
        if claims.ua != user_agent_hash(user_agent) {
            return Err(AppError::WrongClient);
        }
        let revoked = self
            .sessions
            .is_revoked(&claims.ssid)
            .await
            .map_err(AppError::Unavailable)?;
        if revoked {
            return Err(AppError::Unauthorized);
        }
        Ok(AuthUser {
            uid: claims.uid,
            ssid: claims.ssid,
        })
    }
}
