//! The rules of signing in with WeChat, no HTTP and no SQL text.
//!
//! [`WechatLoginService::start`] makes a login's `state` — 128 random bits from the OS — and
//! the authorize URL carrying it, plus the state signed and short-lived
//! ([`AuthService::sign_state`]) for the browser to keep in a cookie.
//! [`WechatLoginService::finish`] takes what the browser brings back to the callback: it
//! refuses (before anything else happens) a state that is missing, unsigned, expired or not
//! the one its cookie carries (compared in constant time), and one already used: a state signs
//! in once ([`UsedStates::consume`], in the database, so on every instance; it is used up
//! before WeChat is called, so two callbacks racing with one state cannot both go on, and a
//! callback that then fails needs a new login); then it trades the code with WeChat
//! ([`WechatClient`]), finds or creates the account of that WeChat identity (by `unionid`, else
//! `openid`: [`UserStore::find_or_create_by_wechat`], one transaction) and opens a session
//! ([`AuthService::open_session`]). Callbacks count against the sign-in limit per client IP.

use std::sync::Arc;

use anyhow::anyhow;
use subtle::ConstantTimeEq;
use tracing::Instrument;
use url::Url;

use crate::{
    auth::{AuthService, TokenPair},
    user::UserStore,
    wechat_login::{
        client::{ExchangeError, WechatClient},
        settings::WechatApp,
        store::UsedStates,
    },
};
use platform::{db::now_millis, error::AppError};

/// The purpose a login's state is signed for (it can pass for nothing else).
pub const STATE_PURPOSE: &str = "wechat_login";
/// Random bytes in a state: 128 bits.
const STATE_BYTES: usize = 16;

fn count(event: &'static str) {
    metrics::counter!(crate::auth::AUTH_EVENTS_TOTAL, "event" => event).increment(1);
}

/// Why a WeChat login did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WechatLoginError {
    /// `wechat_app_id` / `wechat_app_secret` are not set.
    #[error("WeChat login is not configured")]
    NotConfigured,
    /// The callback's `state` is missing, or no valid, unexpired state cookie carries it, or
    /// a callback used it already.
    #[error("missing, expired, foreign or used state")]
    BadState,
    /// The callback has no `code` (the person cancelled or refused in WeChat).
    #[error("no code")]
    NoCode,
    /// WeChat refused the code (invalid, expired, already used).
    #[error("WeChat refused the code")]
    CodeRefused,
    /// Anything else: rate limited, WeChat unavailable, our application refused, the database.
    #[error(transparent)]
    App(#[from] AppError),
}

/// A login begun: where to send the browser, and the signed state for its cookie.
#[derive(Debug, Clone)]
pub struct LoginStart {
    /// The QR-connect URL: `…?appid&redirect_uri&response_type=code&scope=snsapi_login&state
    /// #wechat_redirect`.
    pub authorize_url: String,
    /// The state, signed and short-lived ([`AuthService::sign_state`]).
    pub signed_state: String,
}

/// What the browser brought back to the callback.
#[derive(Debug, Clone, Copy)]
pub struct Callback<'a> {
    /// The client IP (the sign-in rate limit's key).
    pub client: &'a str,
    /// Every state cookie the browser sent (normally one).
    pub signed_states: &'a [&'a str],
    /// The query's `state`.
    pub state: Option<&'a str>,
    /// The query's `code`.
    pub code: Option<&'a str>,
    /// The User-Agent the new session is bound to.
    pub user_agent: &'a str,
}

/// A person signed in with WeChat.
#[derive(Debug, Clone)]
pub struct SignedIn {
    /// Their new session's tokens.
    pub tokens: TokenPair,
    /// Their account.
    pub uid: i64,
    /// Whether the account was made by this login.
    pub created: bool,
}

/// Signing in with WeChat; cheap to clone. Without a configured application every call
/// answers [`WechatLoginError::NotConfigured`].
#[derive(Debug, Clone)]
pub struct WechatLoginService {
    configured: Option<Arc<Configured>>,
}

#[derive(Debug)]
struct Configured {
    app: WechatApp,
    wechat: WechatClient,
    users: UserStore,
    used_states: UsedStates,
    auth: AuthService,
}

impl WechatLoginService {
    /// The service for `app` (`None`: WeChat login is off), recording used states in
    /// `used_states`.
    pub fn new(
        app: Option<WechatApp>,
        users: UserStore,
        used_states: UsedStates,
        auth: AuthService,
    ) -> anyhow::Result<Self> {
        let configured = app
            .map(|app| {
                anyhow::Ok(Arc::new(Configured {
                    wechat: WechatClient::new(&app)?,
                    app,
                    users,
                    used_states,
                    auth,
                }))
            })
            .transpose()?;
        Ok(Self { configured })
    }

    /// The configured application, if any.
    pub fn app(&self) -> Option<&WechatApp> {
        self.configured.as_deref().map(|configured| &configured.app)
    }

    fn configured(&self) -> Result<&Configured, WechatLoginError> {
        self.configured
            .as_deref()
            .ok_or(WechatLoginError::NotConfigured)
    }

    /// Begins a login: a fresh state, the authorize URL carrying it, the state signed.
    pub fn start(&self) -> Result<LoginStart, WechatLoginError> {
        let configured = self.configured()?;
        let app = &configured.app;
        let state = random_state()?;
        let signed_state = configured
            .auth
            .sign_state(STATE_PURPOSE, &state, app.state_ttl)?;
        Ok(LoginStart {
            authorize_url: authorize_url(app, &state),
            signed_state,
        })
    }

    /// Ends a login (see the module docs): the new session of the WeChat account.
    pub async fn finish(&self, callback: Callback<'_>) -> Result<SignedIn, WechatLoginError> {
        let configured = self.configured()?;
        let span = tracing::info_span!(
            "wechat_login",
            uid = tracing::field::Empty,
            created = tracing::field::Empty
        );
        configured.finish(callback).instrument(span).await
    }
}

impl Configured {
    async fn finish(&self, callback: Callback<'_>) -> Result<SignedIn, WechatLoginError> {
        self.auth.check_auth_rate(callback.client).await?;
        let state = callback
            .state
            .filter(|state| !state.is_empty())
            .ok_or(WechatLoginError::BadState)?;
        if !callback
            .signed_states
            .iter()
            .any(|signed| self.carries(signed, state))
        {
            return Err(WechatLoginError::BadState);
        }
        let code = callback
            .code
            .filter(|code| !code.is_empty())
            .ok_or(WechatLoginError::NoCode)?;
        let now = now_millis();
        let expires_at =
            now.saturating_add(i64::try_from(self.app.state_ttl.as_millis()).unwrap_or(i64::MAX));
        if !self
            .used_states
            .consume(state, expires_at, now)
            .await
            .map_err(AppError::from)?
        {
            count("wechat_state_reused");
            tracing::info!("a WeChat login state was presented again");
            return Err(WechatLoginError::BadState);
        }
        let identity = self
            .wechat
            .identity_for_code(code)
            .await
            .map_err(|err| match err {
                ExchangeError::CodeRefused { errcode, errmsg } => {
                    count("wechat_refused");
                    tracing::info!(errcode, %errmsg, "WeChat refused a login code");
                    WechatLoginError::CodeRefused
                }
                refused @ ExchangeError::AppRefused { .. } => {
                    count("wechat_refused");
                    AppError::Internal(anyhow!(refused)).into()
                }
                ExchangeError::Unavailable(cause) => AppError::Unavailable(cause).into(),
            })?;
        let (uid, created) = self
            .users
            .find_or_create_by_wechat(&identity, now_millis())
            .await
            .map_err(AppError::from)?;
        let tokens = self.auth.open_session(uid, callback.user_agent)?;
        count(if created {
            "wechat_signup"
        } else {
            "wechat_login"
        });
        let span = tracing::Span::current();
        span.record("uid", uid);
        span.record("created", created);
        tracing::info!("signed in with WeChat");
        Ok(SignedIn {
            tokens,
            uid,
            created,
        })
    }

    /// Whether `signed` is a valid, unexpired state token of ours whose value is `state`.
    fn carries(&self, signed: &str, state: &str) -> bool {
        self.auth
            .verify_state(STATE_PURPOSE, signed)
            .is_some_and(|value| bool::from(value.as_bytes().ct_eq(state.as_bytes())))
    }
}

/// 128 random bits from the OS, in hex (WeChat allows `[a-zA-Z0-9]`, at most 128 characters).
fn random_state() -> Result<String, AppError> {
    let mut bytes = [0u8; STATE_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|err| AppError::Internal(anyhow!("no OS randomness: {err}")))?;
    Ok(hex::encode(bytes))
}

/// The QR-connect URL of `app` for `state`, its parameters in WeChat's documented order.
fn authorize_url(app: &WechatApp, state: &str) -> String {
    let mut url: Url = app.authorize_url.clone();
    url.query_pairs_mut()
        .append_pair("appid", &app.app_id)
        .append_pair("redirect_uri", app.redirect_uri.as_str())
        .append_pair("response_type", "code")
        .append_pair("scope", "snsapi_login")
        .append_pair("state", state);
    url.set_fragment(Some("wechat_redirect"));
    url.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform::config::Secret;
    use std::time::Duration;

    #[test]
    fn the_authorize_url_carries_every_parameter_in_order_with_the_redirect_encoded() {
        let app = WechatApp {
            app_id: "wx0123".to_owned(),
            app_secret: Secret::new("s3cret"),
            redirect_uri: Url::parse("https://example.com/oauth2/wechat/callback").unwrap(),
            frontend_url: Url::parse("http://localhost:3000/").unwrap(),
            authorize_url: Url::parse("https://open.weixin.qq.com/connect/qrconnect").unwrap(),
            api_url: Url::parse("https://api.weixin.qq.com").unwrap(),
            state_ttl: Duration::from_secs(600),
            timeout: Duration::from_secs(5),
        };
        assert_eq!(
            authorize_url(&app, "abc123"),
            "https://open.weixin.qq.com/connect/qrconnect?appid=wx0123\
             &redirect_uri=https%3A%2F%2Fexample.com%2Foauth2%2Fwechat%2Fcallback\
             &response_type=code&scope=snsapi_login&state=abc123#wechat_redirect"
        );
    }

    #[test]
    fn states_are_128_random_bits_in_hex() {
        let first = random_state().unwrap();
        assert_eq!(first.len(), 32);
        assert!(first.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(first, random_state().unwrap());
    }
}
