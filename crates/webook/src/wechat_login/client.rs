//! The one call to WeChat that signing in needs: trading the authorization `code` the browser
//! brought back for the identity of the WeChat account (`openid`, and `unionid` when the
//! application belongs to an open-platform account) —
//! `GET <wechat_api_url>/sns/oauth2/access_token?appid&secret&code&grant_type=authorization_code`.
//!
//! WeChat's access and refresh tokens in the answer are dropped: webook only signs the person
//! in and never calls WeChat on their behalf. The URL carries the app secret and the code, so
//! no error that leaves this module carries the URL (`reqwest::Error::without_url`), and the
//! answer's `errmsg` is logged with the code blanked out.

use std::time::Duration;

use anyhow::anyhow;
use serde::Deserialize;
use url::Url;

use crate::user::WechatIdentity;
use crate::wechat_login::settings::WechatApp;
use platform::config::Secret;

/// The largest answer read from WeChat (a real one is a few hundred bytes).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Why a code did not give an identity.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// WeChat refused the code (invalid, expired, already used, …): the person must start
    /// again.
    #[error("WeChat refused the code: errcode {errcode}: {errmsg}")]
    CodeRefused {
        /// WeChat's `errcode`.
        errcode: i64,
        /// WeChat's `errmsg`, with the code blanked out.
        errmsg: String,
    },
    /// WeChat refused our application (wrong app id or secret, server IP not allowed, quota):
    /// a configuration problem on our side, not the person's.
    #[error("WeChat refused our application: errcode {errcode}: {errmsg}")]
    AppRefused {
        /// WeChat's `errcode`.
        errcode: i64,
        /// WeChat's `errmsg`, with the code blanked out.
        errmsg: String,
    },
    /// WeChat could not be reached in time, was busy, or answered something that is not an
    /// identity.
    #[error("WeChat is unavailable: {0:#}")]
    Unavailable(anyhow::Error),
}

/// Calls WeChat's OAuth API for one application; cheap to clone.
#[derive(Debug, Clone)]
pub struct WechatClient {
    http: reqwest::Client,
    access_token_url: Url,
    app_id: String,
    app_secret: Secret,
    timeout: Duration,
}

/// `/sns/oauth2/access_token`'s answer: an identity, or `errcode` + `errmsg`. The tokens it
/// also carries are not read.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AccessTokenAnswer {
    errcode: i64,
    errmsg: String,
    openid: String,
    unionid: String,
}

/// WeChat's system-busy errcode: worth a retry, so the caller is told "unavailable".
const ERRCODE_BUSY: i64 = -1;

/// Errcodes that mean WeChat refused our application rather than the code: invalid
/// credential (40001), invalid appid (40013), invalid appsecret (40125), server IP not in the
/// allow-list (40164, 61004), appid or secret missing (41002, 41004), API not authorised
/// (48001), call quota reached (45009, 45011). Any other errcode is the code's fault (40029
/// invalid, 40163 already used, 42003 expired, …).
const APP_ERRCODES: &[i64] = &[
    40001, 40013, 40125, 40164, 61004, 41002, 41004, 48001, 45009, 45011,
];

impl WechatClient {
    /// A client for `app`, bounded by `app.timeout`, never following redirects.
    pub fn new(app: &WechatApp) -> anyhow::Result<Self> {
        let mut access_token_url = app.api_url.clone();
        access_token_url
            .path_segments_mut()
            .map_err(|()| anyhow!("wechat_api_url cannot be a base URL"))?
            .pop_if_empty()
            .extend(["sns", "oauth2", "access_token"]);
        let http = reqwest::Client::builder()
            .timeout(app.timeout)
            .connect_timeout(app.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("webook/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| anyhow!("building the WeChat HTTP client: {err}"))?;
        Ok(Self {
            http,
            access_token_url,
            app_id: app.app_id.clone(),
            app_secret: app.app_secret.clone(),
            timeout: app.timeout,
        })
    }

    /// The WeChat account that `code` was issued for. WeChat's codes work once.
    pub async fn identity_for_code(&self, code: &str) -> Result<WechatIdentity, ExchangeError> {
        let mut url = self.access_token_url.clone();
        url.query_pairs_mut()
            .append_pair("appid", &self.app_id)
            .append_pair("secret", self.app_secret.expose())
            .append_pair("code", code)
            .append_pair("grant_type", "authorization_code");
        let body = self
            .fetch(url)
            .await
            .map_err(|err| ExchangeError::Unavailable(self.describe(err)))?;
        let answer: AccessTokenAnswer = serde_json::from_slice(&body).map_err(|err| {
            ExchangeError::Unavailable(anyhow!("WeChat's answer is not the expected JSON: {err}"))
        })?;
        if answer.errcode != 0 {
            let errmsg = blank_out(&answer.errmsg, code);
            return Err(match answer.errcode {
                ERRCODE_BUSY => ExchangeError::Unavailable(anyhow!(
                    "WeChat is busy: errcode {}: {errmsg}",
                    answer.errcode
                )),
                errcode if APP_ERRCODES.contains(&errcode) => {
                    ExchangeError::AppRefused { errcode, errmsg }
                }
                errcode => ExchangeError::CodeRefused { errcode, errmsg },
            });
        }
        let open_id = answer.openid.trim();
        if open_id.is_empty() {
            return Err(ExchangeError::Unavailable(anyhow!(
                "WeChat's answer has no openid and no errcode"
            )));
        }
        let union_id = Some(answer.unionid.trim()).filter(|union_id| !union_id.is_empty());
        Ok(WechatIdentity {
            open_id: open_id.to_owned(),
            union_id: union_id.map(str::to_owned),
        })
    }

    /// GET `url`; the body of a 2xx answer, at most [`MAX_ANSWER_BYTES`].
    async fn fetch(&self, url: Url) -> Result<Vec<u8>, reqwest::Error> {
        let mut response = crate::outside_http::send(self.http.get(url))
            .await?
            .error_for_status()?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_ANSWER_BYTES {
                body.truncate(MAX_ANSWER_BYTES);
                break;
            }
        }
        Ok(body)
    }

    /// A reqwest failure without its URL (which holds the secret and the code).
    fn describe(&self, err: reqwest::Error) -> anyhow::Error {
        if err.is_timeout() {
            anyhow!("WeChat did not answer within {:?}", self.timeout)
        } else {
            anyhow!(
                "calling WeChat: {:#}",
                anyhow::Error::from(err.without_url())
            )
        }
    }
}

/// `text` with every occurrence of `code` replaced, so a log line never carries the code.
fn blank_out(text: &str, code: &str) -> String {
    let text: String = text.chars().take(200).collect();
    if code.is_empty() {
        text
    } else {
        text.replace(code, "<code>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(api_url: &str) -> WechatApp {
        WechatApp {
            app_id: "wxid".to_owned(),
            app_secret: Secret::new("s3cret"),
            redirect_uri: Url::parse("https://example.com/oauth2/wechat/callback").unwrap(),
            frontend_url: Url::parse("http://localhost:3000/").unwrap(),
            authorize_url: Url::parse("https://open.weixin.qq.com/connect/qrconnect").unwrap(),
            api_url: Url::parse(api_url).unwrap(),
            state_ttl: Duration::from_secs(600),
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn the_access_token_url_keeps_the_base_path() {
        for (base, expected) in [
            (
                "https://api.weixin.qq.com",
                "https://api.weixin.qq.com/sns/oauth2/access_token",
            ),
            (
                "http://127.0.0.1:9/",
                "http://127.0.0.1:9/sns/oauth2/access_token",
            ),
            (
                "http://proxy.internal/wechat",
                "http://proxy.internal/wechat/sns/oauth2/access_token",
            ),
        ] {
            let client = WechatClient::new(&app(base)).unwrap();
            assert_eq!(client.access_token_url.as_str(), expected);
        }
    }

    #[tokio::test]
    async fn an_unreachable_wechat_is_unavailable_and_the_error_hides_the_secret_and_code() {
        // Port 9 (discard) on loopback: nothing listens, the connection is refused.
        let client = WechatClient::new(&app("http://127.0.0.1:9")).unwrap();
        let err = client.identity_for_code("the-code").await.unwrap_err();
        let text = format!("{err} {err:?}");
        assert!(matches!(err, ExchangeError::Unavailable(_)), "{text}");
        assert!(
            !text.contains("s3cret") && !text.contains("the-code"),
            "{text}"
        );
    }

    #[test]
    fn errmsg_never_carries_the_code() {
        assert_eq!(
            blank_out("invalid code abc, rid: 1", "abc"),
            "invalid code <code>, rid: 1"
        );
        assert_eq!(blank_out("x", ""), "x");
    }
}
