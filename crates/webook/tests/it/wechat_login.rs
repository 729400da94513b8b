//! Signing in with WeChat on {SQLite, PostgreSQL} × {embedded, Redis}, against the fake WeChat
//! of `common::fake_wechat`: `authurl` answers the QR-connect URL and sets the signed state
//! cookie; a callback without its browser's state (no cookie, another state, a tampered or
//! expired cookie) is refused before WeChat is called or anything is written; a first login
//! makes one account (also when two callbacks race), later ones find it (by union id, else open
//! id, learning a union id that arrives later); the tokens it hands out work; a code WeChat
//! refuses or a WeChat that never answers creates nothing; without an app both routes say so.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use common::{
    fake_wechat::{FakeWechat, APP_ID, FRONTEND_URL, REDIRECT_URI},
    get, Setup, UA,
};
use platform::testing::wait_until;
use reqwest::{header, StatusCode};
use serde_json::Value;
use webook::{
    testing::TestApp,
    wechat_login::{WechatSettings, STATE_COOKIE},
};

/// An app whose WeChat login talks to `wechat`, after `adjust` changed its WeChat settings;
/// sign-in attempts are not limited (tests make many from one IP).
async fn app_with(
    setup: Setup,
    wechat: &FakeWechat,
    adjust: impl FnOnce(&mut WechatSettings),
) -> TestApp {
    setup
        .spawn(|config| {
            config
                .settings_mut::<webook::auth::settings::AuthSettings>()
                .auth_rate_limit = 1_000_000;
            wechat.configure(config);
            adjust(config.settings_mut::<WechatSettings>());
        })
        .await
}

async fn app(setup: Setup, wechat: &FakeWechat) -> TestApp {
    app_with(setup, wechat, |_| {}).await
}

/// A client that shows redirects instead of following them and keeps no cookies: each test
/// hands the state cookie back (or not) itself.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A begun login: the `authurl` answer's URL, its state, and the `Set-Cookie` line.
struct Begun {
    url: url::Url,
    state: String,
    set_cookie: String,
}

impl Begun {
    /// The `Cookie` header a browser sends back to the callback.
    fn cookie(&self) -> String {
        self.set_cookie.split(';').next().unwrap().to_owned()
    }

    /// The signed state (the cookie's value).
    fn signed_state(&self) -> String {
        self.cookie()
            .strip_prefix(&format!("{STATE_COOKIE}="))
            .unwrap()
            .to_owned()
    }
}

/// `GET /oauth2/wechat/authurl`.
async fn begin(app: &TestApp) -> Begun {
    let response = browser()
        .get(app.url("/oauth2/wechat/authurl"))
        .header(header::USER_AGENT, UA)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let set_cookie = response
        .headers()
        .get(header::SET_COOKIE)
        .expect("authurl sets the state cookie")
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], 0, "{body}");
    let url = url::Url::parse(body["data"].as_str().unwrap()).unwrap();
    let state = url
        .query_pairs()
        .find(|(name, _)| name == "state")
        .map(|(_, value)| value.into_owned())
        .expect("a state parameter");
    Begun {
        url,
        state,
        set_cookie,
    }
}

/// `GET /oauth2/wechat/callback` with `cookie` (a whole `Cookie` header) and the query
/// parameters given.
async fn callback(
    app: &TestApp,
    cookie: Option<&str>,
    code: Option<&str>,
    state: Option<&str>,
) -> reqwest::Response {
    let mut url = url::Url::parse(&app.url("/oauth2/wechat/callback")).unwrap();
    for (name, value) in [("code", code), ("state", state)] {
        if let Some(value) = value {
            url.query_pairs_mut().append_pair(name, value);
        }
    }
    let mut request = browser().get(url).header(header::USER_AGENT, UA);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    request.send().await.unwrap()
}

/// A whole login of the WeChat account `open_id` / `union_id`: authurl, then the callback with
/// a fresh code; the access token of the 302.
async fn sign_in(
    app: &TestApp,
    wechat: &FakeWechat,
    open_id: &str,
    union_id: Option<&str>,
) -> String {
    let begun = begin(app).await;
    let code = wechat.issue_code(open_id, union_id);
    let response = callback(app, Some(&begun.cookie()), Some(&code), Some(&begun.state)).await;
    assert_eq!(response.status(), StatusCode::FOUND);
    header_of(&response, "x-jwt-token")
}

fn header_of(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
        .to_owned()
}

/// The status and envelope of a refused callback.
async fn refusal(response: reqwest::Response) -> (StatusCode, i64, String) {
    let status = response.status();
    assert!(
        response.headers().get("x-jwt-token").is_none(),
        "signed in instead of refused ({status})"
    );
    let body: Value = response.json().await.unwrap();
    (
        status,
        body["code"].as_i64().unwrap(),
        body["msg"].as_str().unwrap().to_owned(),
    )
}

/// The account id behind an access token.
async fn uid_of(app: &TestApp, token: &str) -> i64 {
    let profile = get(app, "/users/profile", Some(token)).await;
    assert_eq!(profile.status, StatusCode::OK, "{}", profile.raw);
    profile.json()["Id"].as_i64().unwrap()
}

async fn user_count(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM users")
        .fetch_one(app.platform.db.writer())
        .await
        .unwrap()
}

async fn union_id_of(app: &TestApp, uid: i64) -> Option<String> {
    sqlx::query_scalar("SELECT wechat_union_id FROM users WHERE id = $1")
        .bind(uid)
        .fetch_one(app.platform.db.writer())
        .await
        .unwrap()
}

async fn authurl_points_at_wechat_and_sets_the_state_cookie(setup: Setup) {
    let wechat = FakeWechat::start().await;
    let app = app(setup, &wechat).await;
    let begun = begin(&app).await;

    let url = &begun.url;
    assert_eq!(
        format!(
            "{}://{}{}",
            url.scheme(),
            url.host_str().unwrap(),
            url.path()
        ),
        "https://open.weixin.qq.com/connect/qrconnect"
    );
    assert_eq!(url.fragment(), Some("wechat_redirect"));
    let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    let names: Vec<&str> = pairs.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["appid", "redirect_uri", "response_type", "scope", "state"]
    );
    assert_eq!(pairs[0].1, APP_ID);
    assert_eq!(pairs[1].1, REDIRECT_URI);
    assert!(
        url.as_str()
            .contains("redirect_uri=http%3A%2F%2Flocalhost%3A8080%2Foauth2%2Fwechat%2Fcallback"),
        "the redirect URI is URL-encoded: {url}"
    );
    assert_eq!(pairs[2].1, "code");
    assert_eq!(pairs[3].1, "snsapi_login");
    assert_eq!(begun.state.len(), 32, "128 bits in hex");
    assert!(begun.state.chars().all(|c| c.is_ascii_hexdigit()));

    let attributes: Vec<&str> = begun.set_cookie.split("; ").skip(1).collect();
    assert_eq!(
        attributes,
        [
            "Max-Age=600",
            "Path=/oauth2/wechat/callback",
            "HttpOnly",
            "SameSite=Lax"
        ],
        "{}",
        begun.set_cookie
    );
    assert!(
        !begun.signed_state().contains(&begun.state),
        "signed, not the bare state"
    );

    let again = begin(&app).await;
    assert_ne!(
        again.state, begun.state,
        "every login has a state of its own"
    );
    assert_eq!(wechat.calls(), 0);
}

async fn callbacks_without_their_browsers_state_change_nothing(setup: Setup) {
    let wechat = FakeWechat::start().await;
    let app = app(setup, &wechat).await;
    let users_before = user_count(&app).await;
    let first = begin(&app).await;
    let second = begin(&app).await;
    // A valid code, which each refused callback below would spend if it reached WeChat.
    let code = wechat.issue_code("open-victim", Some("union-victim"));

    let tampered = {
        // The first cookie's header and signature around the second's claims.
        let first_parts: Vec<String> = first.signed_state().split('.').map(str::to_owned).collect();
        let second_parts: Vec<String> = second
            .signed_state()
            .split('.')
            .map(str::to_owned)
            .collect();
        format!(
            "{STATE_COOKIE}={}.{}.{}",
            first_parts[0], second_parts[1], first_parts[2]
        )
    };
    let forged_value = {
        // The first cookie's claims re-encoded with the second's state, signature kept.
        let signed = first.signed_state();
        let parts: Vec<&str> = signed.split('.').collect();
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut claims: Value = serde_json::from_slice(&engine.decode(parts[1]).unwrap()).unwrap();
        claims["value"] = Value::String(second.state.clone());
        format!(
            "{STATE_COOKIE}={}.{}.{}",
            parts[0],
            engine.encode(claims.to_string()),
            parts[2]
        )
    };
    let cases: Vec<(&str, Option<String>, Option<&str>)> = vec![
        ("no cookie", None, Some(&first.state)),
        (
            "another login's state",
            Some(first.cookie()),
            Some(&second.state),
        ),
        ("no state", Some(first.cookie()), None),
        ("an empty state", Some(first.cookie()), Some("")),
        ("a spliced cookie", Some(tampered), Some(&second.state)),
        ("re-signed claims", Some(forged_value), Some(&second.state)),
        (
            "the state as the cookie",
            Some(format!("{STATE_COOKIE}={}", first.state)),
            Some(&first.state),
        ),
        (
            "a cookie of another name",
            Some(format!("other={}", first.signed_state())),
            Some(&first.state),
        ),
    ];
    for (case, cookie, state) in cases {
        eprintln!("case: {case}");
        let answer = refusal(callback(&app, cookie.as_deref(), Some(&code), state).await).await;
        assert_eq!(
            (answer.0, answer.1),
            (StatusCode::OK, 4),
            "{case}: {answer:?}"
        );
        assert!(answer.2.starts_with("state:"), "{case}: {answer:?}");
    }
    assert_eq!(
        wechat.calls(),
        0,
        "WeChat is never asked without the right state"
    );
    assert_eq!(user_count(&app).await, users_before, "nothing was created");

    // The code was never spent: with its browser's state, the same callback signs in.
    let response = callback(&app, Some(&first.cookie()), Some(&code), Some(&first.state)).await;
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(wechat.calls(), 1);
}

async fn an_expired_state_is_refused(setup: Setup) {
    let wechat = FakeWechat::start().await;
    let app = app_with(setup, &wechat, |settings| {
        settings.wechat_state_ttl = Duration::from_secs(1);
    })
    .await;
    let begun = begin(&app).await;
    assert!(
        begun.set_cookie.contains("Max-Age=1;"),
        "{}",
        begun.set_cookie
    );
    // A browser drops the cookie after a second; one that replays it later is refused once
    // the token's expiry (whole seconds) is past.
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let claims: Value = serde_json::from_slice(
        &engine
            .decode(begun.signed_state().split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    let expiry = claims["exp"].as_u64().unwrap();
    wait_until("the state token's expiry to pass", || async {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            > expiry
    })
    .await;
    let code = wechat.issue_code("open-late", Some("union-late"));
    let answer =
        refusal(callback(&app, Some(&begun.cookie()), Some(&code), Some(&begun.state)).await).await;
    assert_eq!((answer.0, answer.1), (StatusCode::OK, 4), "{answer:?}");
    assert_eq!(wechat.calls(), 0);
    assert_eq!(user_count(&app).await, 0);
}

async fn a_first_login_creates_the_account_and_later_ones_find_it(setup: Setup) {
    let wechat = FakeWechat::start().await;
    let app = app(setup, &wechat).await;
    assert_eq!(user_count(&app).await, 0);

    let begun = begin(&app).await;
    let code = wechat.issue_code("open-alice", Some("union-alice"));
    let response = callback(&app, Some(&begun.cookie()), Some(&code), Some(&begun.state)).await;
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(header_of(&response, "location"), FRONTEND_URL);
    assert_eq!(
        header_of(&response, "set-cookie"),
        format!("{STATE_COOKIE}=; Max-Age=0; Path=/oauth2/wechat/callback; HttpOnly; SameSite=Lax"),
        "the state cookie is cleared"
    );
    let access = header_of(&response, "x-jwt-token");
    let refresh = header_of(&response, "x-refresh-token");
    let uid = uid_of(&app, &access).await;
    assert_eq!(user_count(&app).await, 1);
    assert_eq!(union_id_of(&app, uid).await.as_deref(), Some("union-alice"));
    let passwordless: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE id = $1 AND password IS NULL")
            .bind(uid)
            .fetch_one(app.platform.db.writer())
            .await
            .unwrap();
    assert_eq!(passwordless, 1, "an account made by WeChat has no password");
    let refreshed = common::refresh(&app, &refresh).await;
    assert_eq!(
        refreshed.code(),
        0,
        "the refresh token works: {}",
        refreshed.raw
    );

    // The same person again (a new code, the same ids): the same account.
    let again = sign_in(&app, &wechat, "open-alice", Some("union-alice")).await;
    assert_eq!(uid_of(&app, &again).await, uid);
    // Through another application of the same open-platform account: another open id, the
    // same union id, the same account.
    let elsewhere = sign_in(&app, &wechat, "open-alice-other-app", Some("union-alice")).await;
    assert_eq!(uid_of(&app, &elsewhere).await, uid);
    assert_eq!(user_count(&app).await, 1);
    assert_eq!(wechat.calls(), 3);

    // A frontend page calling the callback with axios (Accept: application/json) gets the
    // tokens on a 200 it can read, not on a redirect it would follow blindly.
    let begun = begin(&app).await;
    let code = wechat.issue_code("open-alice", Some("union-alice"));
    let mut url = url::Url::parse(&app.url("/oauth2/wechat/callback")).unwrap();
    url.query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &begun.state);
    let scripted = browser()
        .get(url)
        .header(header::USER_AGENT, UA)
        .header(header::ACCEPT, "application/json, text/plain, */*")
        .header(header::COOKIE, begun.cookie())
        .send()
        .await
        .unwrap();
    assert_eq!(scripted.status(), StatusCode::OK);
    let access = header_of(&scripted, "x-jwt-token");
    assert!(header_of(&scripted, "set-cookie").contains("Max-Age=0"));
    let body: serde_json::Value = scripted.json().await.unwrap();
    assert_eq!(body["code"], 0);
    assert_eq!(uid_of(&app, &access).await, uid);

    let metrics = app.metrics_text().await;
    for event in ["wechat_signup", "wechat_login"] {
        assert!(
            metrics.contains(&format!("auth_events_total{{event=\"{event}\"}}")),
            "{event} counted"
        );
    }
}

/// A state signs in once: the same cookie and state again with a fresh code — also racing the
/// first, and (cluster mode) on another instance — are refused with code 4 before WeChat is
/// called, and no session is opened.
async fn a_state_signs_in_once_on_every_instance(setup: Setup) {
    let wechat = FakeWechat::start().await;
    let db = setup.database().await;
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let configure = |config: &mut platform::config::Config| {
        config
            .settings_mut::<webook::auth::settings::AuthSettings>()
            .auth_rate_limit = 1_000_000;
        wechat.configure(config);
    };
    let app = setup.spawn_on(db.clone(), &prefix, configure).await;
    let begun = begin(&app).await;
    let first = wechat.issue_code("open-once", Some("union-once"));
    let response = callback(
        &app,
        Some(&begun.cookie()),
        Some(&first),
        Some(&begun.state),
    )
    .await;
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(wechat.calls(), 1);

    let fresh = wechat.issue_code("open-once", Some("union-once"));
    let replay = callback(
        &app,
        Some(&begun.cookie()),
        Some(&fresh),
        Some(&begun.state),
    )
    .await;
    let (status, code, msg) = refusal(replay).await;
    assert_eq!((status, code), (StatusCode::OK, 4), "{msg}");
    assert!(msg.starts_with("state"), "{msg}");
    assert_eq!(wechat.calls(), 1, "refused before WeChat is called");

    // Two callbacks with one state at once: one signs in, the other is refused.
    let begun = begin(&app).await;
    let codes = [
        wechat.issue_code("open-once", Some("union-once")),
        wechat.issue_code("open-once", Some("union-once")),
    ];
    let cookie = begun.cookie();
    let (left, right) = tokio::join!(
        callback(&app, Some(&cookie), Some(&codes[0]), Some(&begun.state)),
        callback(&app, Some(&cookie), Some(&codes[1]), Some(&begun.state)),
    );
    let mut statuses = [left.status(), right.status()];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::FOUND],
        "one of the two"
    );
    let refused = if left.status() == StatusCode::OK {
        left
    } else {
        right
    };
    assert_eq!(refusal(refused).await.1, 4);

    if setup.cluster {
        // Another instance of the same site knows the state was used.
        let other = setup.spawn_on(db, &prefix, configure).await;
        let begun = begin(&app).await;
        let code = wechat.issue_code("open-once", Some("union-once"));
        let response = callback(&app, Some(&begun.cookie()), Some(&code), Some(&begun.state)).await;
        assert_eq!(response.status(), StatusCode::FOUND);
        let fresh = wechat.issue_code("open-once", Some("union-once"));
        let replay = callback(
            &other,
            Some(&begun.cookie()),
            Some(&fresh),
            Some(&begun.state),
        )
        .await;
        assert_eq!(refusal(replay).await.1, 4, "refused on the other instance");
    }
    assert_eq!(user_count(&app).await, 1);
    assert_eq!(
        wechat.calls(),
        if setup.cluster { 3 } else { 2 },
        "WeChat is asked once per state"
    );
}

async fn an_open_id_account_learns_its_union_id_later(setup: Setup) {
    let wechat = FakeWechat::start().await;
    let app = app(setup, &wechat).await;
    let token = sign_in(&app, &wechat, "open-bob", None).await;
    let uid = uid_of(&app, &token).await;
    assert_eq!(
        union_id_of(&app, uid).await,
        None,
        "no union id: none stored"
    );

    let token = sign_in(&app, &wechat, "open-bob", Some("union-bob")).await;
    assert_eq!(uid_of(&app, &token).await, uid, "found by its open id");
    assert_eq!(union_id_of(&app, uid).await.as_deref(), Some("union-bob"));

    let token = sign_in(&app, &wechat, "open-bob-other-app", Some("union-bob")).await;
    assert_eq!(
        uid_of(&app, &token).await,
        uid,
        "then found by its union id"
    );
    assert_eq!(user_count(&app).await, 1);
}

async fn racing_first_logins_of_one_person_make_one_account(setup: Setup) {
    let wechat = FakeWechat::start().await;
    let app = app(setup, &wechat).await;
    for round in 0..3 {
        let (open_id, union_id) = (format!("open-race-{round}"), format!("union-race-{round}"));
        // Two browsers, each with its own state cookie and code.
        let first = begin(&app).await;
        let second = begin(&app).await;
        let first_code = wechat.issue_code(&open_id, Some(&union_id));
        let second_code = wechat.issue_code(&open_id, Some(&union_id));
        let (first_cookie, second_cookie) = (first.cookie(), second.cookie());
        let (first, second) = tokio::join!(
            callback(
                &app,
                Some(&first_cookie),
                Some(&first_code),
                Some(&first.state)
            ),
            callback(
                &app,
                Some(&second_cookie),
                Some(&second_code),
                Some(&second.state)
            ),
        );
        assert_eq!(
            (first.status(), second.status()),
            (StatusCode::FOUND, StatusCode::FOUND)
        );
        let first_uid = uid_of(&app, &header_of(&first, "x-jwt-token")).await;
        let second_uid = uid_of(&app, &header_of(&second, "x-jwt-token")).await;
        assert_eq!(first_uid, second_uid, "round {round}: one account");
        assert_eq!(user_count(&app).await, round + 1, "round {round}");
    }
}

async fn a_code_wechat_refuses_creates_nothing(setup: Setup) {
    let wechat = FakeWechat::start().await;
    let app = app(setup, &wechat).await;

    // A code already spent: WeChat's codes work once.
    let begun = begin(&app).await;
    let code = wechat.issue_code("open-carol", Some("union-carol"));
    let response = callback(&app, Some(&begun.cookie()), Some(&code), Some(&begun.state)).await;
    assert_eq!(response.status(), StatusCode::FOUND);
    let replay = begin(&app).await;
    let answer = refusal(
        callback(
            &app,
            Some(&replay.cookie()),
            Some(&code),
            Some(&replay.state),
        )
        .await,
    )
    .await;
    assert_eq!((answer.0, answer.1), (StatusCode::OK, 4), "{answer:?}");
    assert!(answer.2.contains("WeChat refused"), "{answer:?}");
    assert_eq!(user_count(&app).await, 1);

    // WeChat refusing whatever it is asked.
    wechat.refuse_with(40029, "invalid code");
    let begun = begin(&app).await;
    let code = wechat.issue_code("open-dave", Some("union-dave"));
    let answer =
        refusal(callback(&app, Some(&begun.cookie()), Some(&code), Some(&begun.state)).await).await;
    assert_eq!((answer.0, answer.1), (StatusCode::OK, 4), "{answer:?}");
    assert_eq!(wechat.calls(), 3);
    assert_eq!(user_count(&app).await, 1, "nothing created");

    // A callback without a code (the person cancelled in WeChat) does not ask WeChat.
    let begun = begin(&app).await;
    let answer =
        refusal(callback(&app, Some(&begun.cookie()), None, Some(&begun.state)).await).await;
    assert_eq!((answer.0, answer.1), (StatusCode::OK, 4), "{answer:?}");
    assert!(answer.2.starts_with("code:"), "{answer:?}");
    assert_eq!(wechat.calls(), 3);

    let metrics = app.metrics_text().await;
    assert!(metrics.contains("auth_events_total{event=\"wechat_refused\"}"));
}

async fn a_wechat_that_never_answers_is_given_up_on_in_time(setup: Setup) {
    let wechat = FakeWechat::start().await;
    let timeout = Duration::from_secs(1);
    let app = app_with(setup, &wechat, |settings| settings.wechat_timeout = timeout).await;
    wechat.hang();
    let begun = begin(&app).await;
    let code = wechat.issue_code("open-erin", Some("union-erin"));
    let started = Instant::now();
    let answer =
        refusal(callback(&app, Some(&begun.cookie()), Some(&code), Some(&begun.state)).await).await;
    let took = started.elapsed();
    assert_eq!(
        (answer.0, answer.1),
        (StatusCode::SERVICE_UNAVAILABLE, 5),
        "{answer:?}"
    );
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(3),
        "answered after {took:?}"
    );
    assert_eq!(wechat.calls(), 1);
    assert_eq!(user_count(&app).await, 0);
}

async fn without_an_app_both_routes_say_it_is_not_enabled(setup: Setup) {
    let app = setup.spawn(|_| {}).await;
    for path in [
        "/oauth2/wechat/authurl",
        "/oauth2/wechat/callback?code=c&state=s",
    ] {
        for (language, msg) in [
            ("en", "WeChat login is not enabled on this site"),
            ("zh-CN", "本站未开启微信登录"),
        ] {
            let response = browser()
                .get(app.url(path))
                .header(header::ACCEPT_LANGUAGE, language)
                .send()
                .await
                .unwrap();
            assert!(response.headers().get(header::SET_COOKIE).is_none());
            let answer = refusal(response).await;
            // HTTP 200: a fact about the site, shown by the course's frontend, not an outage.
            assert_eq!(answer, (StatusCode::OK, 5, msg.to_owned()), "{path}");
        }
    }
}

setup_tests!(
    authurl_points_at_wechat_and_sets_the_state_cookie,
    callbacks_without_their_browsers_state_change_nothing,
    an_expired_state_is_refused,
    a_first_login_creates_the_account_and_later_ones_find_it,
    an_open_id_account_learns_its_union_id_later,
    racing_first_logins_of_one_person_make_one_account,
    a_code_wechat_refuses_creates_nothing,
    a_wechat_that_never_answers_is_given_up_on_in_time,
    without_an_app_both_routes_say_it_is_not_enabled,
    a_state_signs_in_once_on_every_instance,
);
