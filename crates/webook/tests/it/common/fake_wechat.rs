//! A stand-in for WeChat's OAuth API on loopback (axum on `127.0.0.1:0`, a tokio task), serving
//! the one call sign-in makes: `GET /sns/oauth2/access_token?appid&secret&code&grant_type`.
//!
//! Like WeChat it checks the application's id and secret and `grant_type=authorization_code`,
//! accepts only codes it issued, each once, and answers JSON as `text/plain`. A test issues
//! codes for a WeChat account ([`FakeWechat::issue_code`]: what WeChat would give the browser
//! after a scan), can make it answer an errcode to everything ([`FakeWechat::refuse_with`]) or
//! never answer ([`FakeWechat::hang`]), and reads how often it was called
//! ([`FakeWechat::calls`]). [`FakeWechat::configure`] points an app's WeChat settings at it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    extract::{Query, State},
    http::header,
    response::IntoResponse,
    routing::get,
    Router,
};
use platform::config::{Config, Secret};
use serde_json::json;
use tokio::{net::TcpListener, task::JoinHandle};
use webook::wechat_login::WechatSettings;

/// The application id the fake expects.
pub const APP_ID: &str = "wxfake0123456789ab";
/// The application secret the fake expects.
pub const APP_SECRET: &str = "fake-wechat-app-secret-0123456789";
/// Our callback as "registered with WeChat" in the apps [`FakeWechat::configure`] sets up.
pub const REDIRECT_URI: &str = "http://localhost:8080/oauth2/wechat/callback";
/// Where those apps send a signed-in browser.
pub const FRONTEND_URL: &str = "http://frontend.test/after-wechat";

/// How the fake answers.
#[derive(Debug, Clone, Default)]
enum Behaviour {
    /// Like WeChat.
    #[default]
    Answer,
    /// This errcode and errmsg to every call.
    Refuse { errcode: i64, errmsg: String },
    /// Never.
    Hang,
}

/// A WeChat account a code was issued for, and whether the code was used.
#[derive(Debug)]
struct Grant {
    open_id: String,
    union_id: Option<String>,
    used: bool,
}

#[derive(Debug, Default)]
struct Fake {
    grants: HashMap<String, Grant>,
    behaviour: Behaviour,
    calls: usize,
}

/// The running fake; stops when dropped.
pub struct FakeWechat {
    /// Its base URL (`http://127.0.0.1:PORT`), the app's `wechat_api_url`.
    pub base_url: String,
    fake: Arc<Mutex<Fake>>,
    server: JoinHandle<()>,
}

impl FakeWechat {
    /// Starts the fake on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let fake = Arc::new(Mutex::new(Fake::default()));
        let router = Router::new()
            .route("/sns/oauth2/access_token", get(access_token))
            .with_state(fake.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Self {
            base_url,
            fake,
            server,
        }
    }

    /// Points `config`'s WeChat login at this fake, with [`APP_ID`], [`APP_SECRET`],
    /// [`REDIRECT_URI`] and [`FRONTEND_URL`].
    pub fn configure(&self, config: &mut Config) {
        let wechat = config.settings_mut::<WechatSettings>();
        wechat.wechat_app_id = Some(APP_ID.to_owned());
        wechat.wechat_app_secret = Some(Secret::new(APP_SECRET));
        wechat.wechat_redirect_uri = Some(REDIRECT_URI.to_owned());
        wechat.wechat_frontend_url = FRONTEND_URL.to_owned();
        wechat.wechat_api_url = self.base_url.clone();
    }

    /// A new code for the account `open_id` (with `union_id`, when the application has one):
    /// what WeChat hands the browser after a scan. It works once.
    pub fn issue_code(&self, open_id: &str, union_id: Option<&str>) -> String {
        let code = format!("code-{}", uuid::Uuid::new_v4().simple());
        self.fake.lock().unwrap().grants.insert(
            code.clone(),
            Grant {
                open_id: open_id.to_owned(),
                union_id: union_id.map(str::to_owned),
                used: false,
            },
        );
        code
    }

    /// From now on, answer every call with `errcode` and `errmsg`.
    pub fn refuse_with(&self, errcode: i64, errmsg: &str) {
        self.fake.lock().unwrap().behaviour = Behaviour::Refuse {
            errcode,
            errmsg: errmsg.to_owned(),
        };
    }

    /// From now on, never answer (the connection stays open until the caller gives up).
    pub fn hang(&self) {
        self.fake.lock().unwrap().behaviour = Behaviour::Hang;
    }

    /// How many calls reached the fake.
    pub fn calls(&self) -> usize {
        self.fake.lock().unwrap().calls
    }
}

impl Drop for FakeWechat {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn access_token(
    State(fake): State<Arc<Mutex<Fake>>>,
    Query(query): Query<HashMap<String, String>>,
) -> impl IntoResponse {
    let answer = {
        let mut fake = fake.lock().unwrap();
        fake.calls += 1;
        match fake.behaviour.clone() {
            Behaviour::Hang => None,
            Behaviour::Refuse { errcode, errmsg } => Some(refusal(errcode, &errmsg)),
            Behaviour::Answer => Some(answer(&mut fake, &query)),
        }
    };
    let Some(answer) = answer else {
        std::future::pending::<()>().await;
        unreachable!("a pending future never completes");
    };
    // WeChat answers JSON labelled as plain text.
    ([(header::CONTENT_TYPE, "text/plain")], answer.to_string())
}

/// What WeChat would answer `query`.
fn answer(fake: &mut Fake, query: &HashMap<String, String>) -> serde_json::Value {
    let param = |name: &str| query.get(name).map(String::as_str).unwrap_or("");
    if param("appid") != APP_ID {
        return refusal(40013, "invalid appid");
    }
    if param("secret") != APP_SECRET {
        return refusal(40125, "invalid appsecret");
    }
    if param("grant_type") != "authorization_code" {
        return refusal(40002, "invalid grant_type");
    }
    let Some(grant) = fake.grants.get_mut(param("code")) else {
        return refusal(40029, "invalid code");
    };
    if grant.used {
        return refusal(40163, "code been used");
    }
    grant.used = true;
    let mut answer = json!({
        "access_token": format!("access-{}", uuid::Uuid::new_v4().simple()),
        "expires_in": 7200,
        "refresh_token": format!("refresh-{}", uuid::Uuid::new_v4().simple()),
        "openid": grant.open_id,
        "scope": "snsapi_login",
    });
    if let Some(union_id) = &grant.union_id {
        answer["unionid"] = json!(union_id);
    }
    answer
}

fn refusal(errcode: i64, errmsg: &str) -> serde_json::Value {
    json!({ "errcode": errcode, "errmsg": format!("{errmsg}, rid: fake") })
}
