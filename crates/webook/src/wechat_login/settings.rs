//! The settings of signing in with WeChat (website QR-connect OAuth2): the open-platform
//! application's id and secret, our callback URL as registered with WeChat, where a signed-in
//! browser is sent, WeChat's endpoints (tests point them at a fake), how long a login may take
//! between `authurl` and `callback`, and the timeout of the call to WeChat. Loaded by the
//! configuration core ([`platform::config`]); documented in `docs/CONFIG.md`.
//!
//! WeChat login is off unless both `wechat_app_id` and `wechat_app_secret` are set; its routes
//! then answer "not configured" and the server starts as usual. [`WechatSettings::app`] turns
//! the keys into a checked [`WechatApp`], which is all the feature reads.

use std::time::Duration;

use anyhow::{bail, Context};
use platform::config::{Config, Secret, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};
use url::Url;

/// How [`WechatSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<WechatSettings>();

/// The longest `wechat_state_ttl` accepted: WeChat's codes live 10 minutes, a login that takes
/// longer than an hour between the QR code and the callback is not one worth keeping open.
pub const MAX_STATE_TTL: Duration = Duration::from_secs(3600);

/// WeChat login settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct WechatSettings {
    /// The open-platform website application's `AppID`; with `wechat_app_secret`, turns WeChat
    /// login on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wechat_app_id: Option<String>,
    /// The application's `AppSecret`, sent only to `wechat_api_url`; never logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wechat_app_secret: Option<Secret>,
    /// Our callback URL as registered with WeChat (`https://HOST/oauth2/wechat/callback`);
    /// required when WeChat login is on. Its path is also the state cookie's path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wechat_redirect_uri: Option<String>,
    /// Where the callback redirects a signed-in browser (the web frontend).
    pub wechat_frontend_url: String,
    /// WeChat's QR-connect page, which `authurl` points the browser at.
    pub wechat_authorize_url: String,
    /// WeChat's API base, where codes are exchanged (`/sns/oauth2/access_token`).
    pub wechat_api_url: String,
    /// How long the signed `state` of one login stays valid (cookie and token).
    #[serde(with = "humantime_serde")]
    pub wechat_state_ttl: Duration,
    /// The whole exchange call to WeChat (connect, send, answer) must finish within this.
    #[serde(with = "humantime_serde")]
    pub wechat_timeout: Duration,
}

impl Default for WechatSettings {
    fn default() -> Self {
        Self {
            wechat_app_id: None,
            wechat_app_secret: None,
            wechat_redirect_uri: None,
            wechat_frontend_url: "http://localhost:3000/".to_owned(),
            wechat_authorize_url: "https://open.weixin.qq.com/connect/qrconnect".to_owned(),
            wechat_api_url: "https://api.weixin.qq.com".to_owned(),
            wechat_state_ttl: Duration::from_secs(10 * 60),
            wechat_timeout: Duration::from_secs(5),
        }
    }
}

/// A configured WeChat application: the settings, checked and parsed.
#[derive(Debug, Clone)]
pub struct WechatApp {
    /// `appid`.
    pub app_id: String,
    /// `secret`.
    pub app_secret: Secret,
    /// `redirect_uri`: our callback as WeChat knows it.
    pub redirect_uri: Url,
    /// Where a signed-in browser goes.
    pub frontend_url: Url,
    /// The QR-connect page.
    pub authorize_url: Url,
    /// The API base.
    pub api_url: Url,
    /// Lifetime of a login's state.
    pub state_ttl: Duration,
    /// Bound of the exchange call.
    pub timeout: Duration,
}

impl WechatSettings {
    /// The configured application; `None` when WeChat login is off (neither id nor secret).
    /// An error names the key that is wrong, as [`Settings::validate`] reports it.
    pub fn app(&self) -> anyhow::Result<Option<WechatApp>> {
        let app_id = self.wechat_app_id.as_deref().map(str::trim).unwrap_or("");
        let app_secret = self
            .wechat_app_secret
            .as_ref()
            .filter(|secret| !secret.expose().is_empty());
        let frontend_url = web_url("wechat_frontend_url", &self.wechat_frontend_url)?;
        let authorize_url = web_url("wechat_authorize_url", &self.wechat_authorize_url)?;
        if authorize_url.fragment().is_some() {
            bail!(
                "invalid wechat_authorize_url (WEBOOK_WECHAT_AUTHORIZE_URL): no #fragment (the \
                 login URL ends with #wechat_redirect)"
            );
        }
        let api_url = web_url("wechat_api_url", &self.wechat_api_url)?;
        if api_url.query().is_some() || api_url.fragment().is_some() {
            bail!("invalid wechat_api_url (WEBOOK_WECHAT_API_URL): a base URL, without ?query or #fragment");
        }
        let redirect_uri = self
            .wechat_redirect_uri
            .as_deref()
            .map(str::trim)
            .filter(|uri| !uri.is_empty())
            .map(|uri| web_url("wechat_redirect_uri", uri))
            .transpose()?;
        if redirect_uri
            .as_ref()
            .is_some_and(|uri| uri.fragment().is_some() || uri.path().contains(';'))
        {
            // The path is also the state cookie's Path attribute.
            bail!(
                "invalid wechat_redirect_uri (WEBOOK_WECHAT_REDIRECT_URI): no #fragment, no ';' \
                 in the path"
            );
        }
        if self.wechat_state_ttl < Duration::from_secs(1) || self.wechat_state_ttl > MAX_STATE_TTL {
            bail!("invalid wechat_state_ttl (WEBOOK_WECHAT_STATE_TTL): from 1s to 1h");
        }
        if self.wechat_timeout.is_zero() {
            bail!("invalid wechat_timeout (WEBOOK_WECHAT_TIMEOUT): must be above 0");
        }
        let app_secret = match (app_id.is_empty(), app_secret) {
            (true, None) => return Ok(None),
            (false, Some(secret)) => secret.clone(),
            _ => bail!(
                "set both wechat_app_id and wechat_app_secret (WEBOOK_WECHAT_APP_ID, \
                 WEBOOK_WECHAT_APP_SECRET) to turn WeChat login on, or neither to leave it off"
            ),
        };
        let Some(redirect_uri) = redirect_uri else {
            bail!(
                "wechat_redirect_uri (WEBOOK_WECHAT_REDIRECT_URI) is required when WeChat login \
                 is on: our callback URL as registered with WeChat, e.g. \
                 https://example.com/oauth2/wechat/callback"
            );
        };
        Ok(Some(WechatApp {
            app_id: app_id.to_owned(),
            app_secret,
            redirect_uri,
            frontend_url,
            authorize_url,
            api_url,
            state_ttl: self.wechat_state_ttl,
            timeout: self.wechat_timeout,
        }))
    }
}

/// `value` as an absolute `http`/`https` URL, or an error naming `key`.
fn web_url(key: &str, value: &str) -> anyhow::Result<Url> {
    let env = format!("WEBOOK_{}", key.to_uppercase());
    let url = Url::parse(value).with_context(|| format!("invalid {key} ({env}): not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        bail!("invalid {key} ({env}): must be an http:// or https:// URL with a host");
    }
    Ok(url)
}

impl Settings for WechatSettings {
    const KEYS: &'static [&'static str] = &[
        "wechat_app_id",
        "wechat_app_secret",
        "wechat_redirect_uri",
        "wechat_frontend_url",
        "wechat_authorize_url",
        "wechat_api_url",
        "wechat_state_ttl",
        "wechat_timeout",
    ];

    fn validate(&self, config: &Config) -> anyhow::Result<()> {
        let enabled = self.app()?.is_some();
        if enabled && self.wechat_timeout >= config.request_timeout {
            bail!(
                "invalid wechat_timeout (WEBOOK_WECHAT_TIMEOUT): must be shorter than \
                 request_timeout, so a callback waiting for WeChat still gets its own answer"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured() -> WechatSettings {
        WechatSettings {
            wechat_app_id: Some("wx0123456789abcdef".to_owned()),
            wechat_app_secret: Some(Secret::new("s3cret")),
            wechat_redirect_uri: Some("https://example.com/oauth2/wechat/callback".to_owned()),
            ..WechatSettings::default()
        }
    }

    #[test]
    fn login_is_off_by_default_and_on_with_id_secret_and_redirect() {
        assert!(WechatSettings::default().app().unwrap().is_none());
        let app = configured().app().unwrap().unwrap();
        assert_eq!(app.app_id, "wx0123456789abcdef");
        assert_eq!(app.redirect_uri.path(), "/oauth2/wechat/callback");
        assert_eq!(app.state_ttl, Duration::from_secs(600));
    }

    #[test]
    fn half_configurations_and_bad_urls_are_refused_naming_the_key() {
        let refused = |settings: WechatSettings, expected: &str| {
            let err = settings.app().unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
            assert!(!err.contains("s3cret"), "the secret leaked: {err}");
        };
        refused(
            WechatSettings {
                wechat_app_secret: None,
                ..configured()
            },
            "set both wechat_app_id and wechat_app_secret",
        );
        refused(
            WechatSettings {
                wechat_app_id: Some(" ".to_owned()),
                ..configured()
            },
            "set both",
        );
        refused(
            WechatSettings {
                wechat_redirect_uri: None,
                ..configured()
            },
            "wechat_redirect_uri (WEBOOK_WECHAT_REDIRECT_URI) is required",
        );
        refused(
            WechatSettings {
                wechat_redirect_uri: Some("/oauth2/wechat/callback".to_owned()),
                ..configured()
            },
            "invalid wechat_redirect_uri",
        );
        refused(
            WechatSettings {
                wechat_frontend_url: "javascript:alert(1)".to_owned(),
                ..configured()
            },
            "invalid wechat_frontend_url",
        );
        refused(
            WechatSettings {
                wechat_authorize_url: "https://open.weixin.qq.com/connect/qrconnect#x".to_owned(),
                ..configured()
            },
            "invalid wechat_authorize_url",
        );
        refused(
            WechatSettings {
                wechat_api_url: "not a url".to_owned(),
                ..configured()
            },
            "invalid wechat_api_url",
        );
        refused(
            WechatSettings {
                wechat_state_ttl: Duration::from_millis(500),
                ..configured()
            },
            "invalid wechat_state_ttl",
        );
        refused(
            WechatSettings {
                wechat_timeout: Duration::ZERO,
                ..configured()
            },
            "invalid wechat_timeout",
        );
        // Bad URLs are refused even while login is off: they would bite when it is turned on.
        refused(
            WechatSettings {
                wechat_api_url: "ftp://x".to_owned(),
                ..WechatSettings::default()
            },
            "invalid wechat_api_url",
        );
    }
}
