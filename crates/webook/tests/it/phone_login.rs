//! Signing in by SMS code on {SQLite, PostgreSQL} × {embedded, Redis}, with codes delivered
//! through the loopback Tencent and Alibaba fakes (which verify the real request signatures):
//! a code signs in once and makes one account per phone; the resend interval, three wrong tries,
//! expiry (answered like a wrong code), the daily limits and the site's budget hold, count only
//! codes that are sent, and leave a phone's owner able to get a code whatever a stranger asks
//! for (also from rotating IPv6 addresses of one /64); fifty concurrent checks of one
//! code sign in once; the code is never stored in clear; and delivery fails over to the second
//! provider, queues the message when every provider is down and delivers it when one recovers,
//! drops it once the code would have expired, and skips a provider whose circuit is open until
//! its trial succeeds.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{collections::HashSet, time::Duration};

use crate::common::{
    fake_sms::{FakeSms, Mode},
    get, post, Answer, Setup, UA,
};
use platform::{config::Config, testing::wait_until};
use serde_json::json;
use webook::{
    phone_login::{settings::PhoneLoginSettings, PhoneLoginService},
    sms::settings::SmsSettings,
    testing::TestApp,
};

const PHONE: &str = "13800138000";

/// The two fake providers and an app that sends through them (Tencent first).
struct Rig {
    app: TestApp,
    tencent: FakeSms,
    aliyun: FakeSms,
}

async fn rig(setup: Setup, configure: impl FnOnce(&mut Config)) -> Rig {
    let tencent = FakeSms::tencent("AKIDtest", "tencent-secret-key").await;
    tencent.set_template_params(&["code", "minutes"]);
    let aliyun = FakeSms::aliyun("LTAItest", "aliyun-secret").await;
    let (tencent_endpoint, aliyun_endpoint) = (tencent.endpoint(), aliyun.endpoint());
    let app = setup
        .spawn(move |config| {
            config
                .settings_mut::<webook::auth::settings::AuthSettings>()
                .auth_rate_limit = 1_000_000;
            let sms = config.settings_mut::<SmsSettings>();
            sms.sms_providers = vec!["tencent".into(), "aliyun".into()];
            sms.sms_tencent_endpoint = tencent_endpoint;
            sms.sms_tencent_secret_id = "AKIDtest".into();
            sms.sms_tencent_secret_key = platform::config::Secret::new("tencent-secret-key");
            sms.sms_tencent_sdk_app_id = "1400000000".into();
            sms.sms_tencent_sign_name = "webook".into();
            sms.sms_tencent_template_id = "100001".into();
            sms.sms_aliyun_endpoint = aliyun_endpoint;
            sms.sms_aliyun_access_key_id = "LTAItest".into();
            sms.sms_aliyun_access_key_secret = platform::config::Secret::new("aliyun-secret");
            sms.sms_aliyun_sign_name = "webook".into();
            sms.sms_aliyun_template_code = "SMS_100001".into();
            sms.sms_timeout = Duration::from_millis(500);
            sms.sms_circuit_open = Duration::from_millis(500);
            let login = config.settings_mut::<PhoneLoginSettings>();
            login.sms_retry_schedule = "@every 1s".into();
            configure(config);
        })
        .await;
    Rig {
        app,
        tencent,
        aliyun,
    }
}

async fn send(app: &TestApp, phone: &str) -> Answer {
    post(
        app,
        "/users/login_sms/code/send",
        None,
        json!({ "phone": phone }),
    )
    .await
}

async fn sign_in(app: &TestApp, phone: &str, code: &str) -> Answer {
    post(
        app,
        "/users/login_sms",
        None,
        json!({ "phone": phone, "code": code }),
    )
    .await
}

/// The code the fakes last delivered to `phone` (either provider).
fn last_code(rig: &Rig, phone: &str) -> Option<String> {
    rig.tencent
        .last_param_to(phone, "code")
        .or_else(|| rig.aliyun.last_param_to(phone, "code"))
}

fn deliveries(rig: &Rig) -> usize {
    rig.tencent.delivered().len() + rig.aliyun.delivered().len()
}

/// Sends a code that must arrive; returns it.
async fn code_for(rig: &Rig, phone: &str) -> String {
    let before = deliveries(rig);
    let answer = send(&rig.app, phone).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    assert_eq!(answer.json()["data"]["delivery"], "sent");
    assert_eq!(deliveries(rig), before + 1, "sent means delivered");
    last_code(rig, phone.trim_start_matches("+86")).unwrap()
}

fn wrong(code: &str) -> String {
    let last = (code.as_bytes()[5] - b'0' + 1) % 10;
    format!("{}{last}", &code[..5])
}

async fn profile_phone(app: &TestApp, answer: &Answer) -> (i64, String) {
    let token = answer.header("x-jwt-token");
    let profile = get(app, "/users/profile", Some(&token)).await.json();
    (
        profile["Id"].as_i64().unwrap(),
        profile["Phone"].as_str().unwrap().to_owned(),
    )
}

async fn accounts_of(app: &TestApp, phone: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE phone = $1")
        .bind(phone)
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap()
}

async fn a_code_signs_in_once_and_the_phone_keeps_one_account(setup: Setup) {
    let rig = rig(setup, |config| {
        config
            .settings_mut::<PhoneLoginSettings>()
            .sms_code_resend_interval = Duration::from_secs(1);
    })
    .await;
    let app = &rig.app;
    let code = code_for(&rig, &format!("+86{PHONE}")).await;
    let delivered = rig.tencent.delivered();
    assert_eq!(delivered.len(), 1, "the first provider took it");
    assert_eq!(rig.aliyun.delivered().len(), 0);

    let refused = sign_in(app, PHONE, &wrong(&code)).await;
    assert_eq!(refused.code(), 4);
    assert!(refused.headers.get("x-jwt-token").is_none());
    let signed_in = sign_in(app, PHONE, &code).await;
    assert_eq!(signed_in.code(), 0, "{}", signed_in.raw);
    let (uid, phone) = profile_phone(app, &signed_in).await;
    assert_eq!(phone, PHONE);
    assert_eq!(accounts_of(app, PHONE).await, 1);
    // A used code is dead.
    assert_eq!(sign_in(app, PHONE, &code).await.code(), 4);

    // The next code, once the resend interval has passed, signs in to the same account.
    let early = send(app, PHONE).await;
    assert_eq!(early.code(), 429001, "{}", early.raw);
    let retry_after: u64 = early.header("retry-after").parse().unwrap();
    assert_eq!(retry_after, 1, "whole seconds, rounded up");
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let next = code_for(&rig, PHONE).await;
    assert_ne!(next, code);
    let again = sign_in(app, PHONE, &next).await;
    assert_eq!(again.code(), 0);
    assert_eq!(profile_phone(app, &again).await.0, uid);
    assert_eq!(accounts_of(app, PHONE).await, 1);
    // The account has no password: nothing to log in with by email either.
    let (has_password,): (bool,) = (sqlx::query_scalar::<_, Option<String>>(
        "SELECT password FROM users WHERE id = $1",
    )
    .bind(uid)
    .fetch_one(app.platform.db.pool())
    .await
    .unwrap()
    .is_some(),);
    assert!(!has_password);
}

async fn a_second_code_within_a_minute_is_refused_with_retry_after(setup: Setup) {
    let rig = rig(setup, |_| {}).await;
    let first = code_for(&rig, PHONE).await;
    let again = send(&rig.app, PHONE).await;
    assert_eq!(again.status_and_code(), (reqwest::StatusCode::OK, 429001));
    let retry_after: u64 = again.header("retry-after").parse().unwrap();
    assert!(
        (55..=60).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    assert_eq!(deliveries(&rig), 1, "nothing sent");
    // The first code still works.
    assert_eq!(sign_in(&rig.app, PHONE, &first).await.code(), 0);
}

async fn three_wrong_tries_kill_the_code(setup: Setup) {
    let rig = rig(setup, |_| {}).await;
    let code = code_for(&rig, PHONE).await;
    let mut messages = HashSet::new();
    for _ in 0..3 {
        let answer = sign_in(&rig.app, PHONE, &wrong(&code)).await;
        assert_eq!(answer.code(), 4);
        messages.insert(answer.json()["msg"].as_str().unwrap().to_owned());
    }
    let after = sign_in(&rig.app, PHONE, &code).await;
    assert_eq!(after.code(), 4, "the right code after three wrong tries");
    messages.insert(after.json()["msg"].as_str().unwrap().to_owned());
    assert_eq!(
        messages.len(),
        1,
        "one answer for wrong and dead: {messages:?}"
    );
    assert_eq!(accounts_of(&rig.app, PHONE).await, 0);
}

async fn an_expired_code_gets_the_answer_of_a_wrong_one(setup: Setup) {
    let rig = rig(setup, |config| {
        let login = config.settings_mut::<PhoneLoginSettings>();
        login.sms_code_ttl = Duration::from_secs(1);
        login.sms_code_resend_interval = Duration::from_millis(500);
    })
    .await;
    let code = code_for(&rig, PHONE).await;
    let wrong_answer = sign_in(&rig.app, PHONE, &wrong(&code)).await.json();
    // The code's lifetime is the behaviour under test: wait it out.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let expired = sign_in(&rig.app, PHONE, &code).await.json();
    assert_eq!(expired["code"], 4);
    assert_eq!(expired["msg"], wrong_answer["msg"]);
    assert_eq!(accounts_of(&rig.app, PHONE).await, 0);
    // Unknown phone, no code ever sent: the same answer.
    let never = sign_in(&rig.app, "13900000000", &code).await.json();
    assert_eq!(never["msg"], wrong_answer["msg"]);
}

async fn fifty_concurrent_checks_of_one_code_sign_in_once(setup: Setup) {
    let rig = rig(setup, |_| {}).await;
    let code = code_for(&rig, PHONE).await;
    let attempts = (0..50).map(|_| {
        let (client, url, code) = (
            rig.app.client.clone(),
            rig.app.url("/users/login_sms"),
            code.clone(),
        );
        tokio::spawn(async move {
            let response = client
                .post(url)
                .header("user-agent", UA)
                .json(&json!({ "phone": PHONE, "code": code }))
                .send()
                .await
                .unwrap();
            let body: serde_json::Value = response.json().await.unwrap();
            body["code"].as_i64().unwrap()
        })
    });
    let codes: Vec<i64> = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(codes.iter().filter(|&&c| c == 0).count(), 1, "{codes:?}");
    assert!(codes.iter().all(|&c| c == 0 || c == 4), "{codes:?}");
    assert_eq!(accounts_of(&rig.app, PHONE).await, 1);
}

async fn codes_are_stored_only_as_keyed_digests(setup: Setup) {
    let rig = rig(setup, |_| {}).await;
    let code = code_for(&rig, PHONE).await;
    let stored: Vec<String> = if setup.cluster {
        let prefix = &rig.app.platform.config.redis_prefix;
        let mut connection = rig.app.platform.redis.as_ref().unwrap().connection();
        let fields: Vec<String> = redis::cmd("HVALS")
            .arg(format!("{prefix}:sms_code:login:{PHONE}"))
            .query_async(&mut connection)
            .await
            .unwrap();
        fields
    } else {
        let row: (String, String) =
            sqlx::query_as("SELECT code_hash, generation FROM sms_codes WHERE phone = $1")
                .bind(PHONE)
                .fetch_one(rig.app.platform.db.pool())
                .await
                .unwrap();
        vec![row.0, row.1]
    };
    assert!(!stored.is_empty());
    for value in &stored {
        assert!(
            !value.contains(&code),
            "code {code} stored in clear: {value}"
        );
    }
    let plain = sha256_hex(&format!("{PHONE}:{code}"));
    assert!(
        !stored.contains(&plain),
        "an unkeyed digest is a million guesses away"
    );
    assert!(!stored.contains(&sha256_hex(&code)));
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

async fn daily_limits_hold_per_phone_and_per_client(setup: Setup) {
    let rig = rig(setup, |config| {
        let login = config.settings_mut::<PhoneLoginSettings>();
        login.sms_code_resend_interval = Duration::from_millis(1);
        login.sms_code_daily_limit_per_phone = 2;
        login.sms_code_daily_limit_per_ip_phone = 2;
        login.sms_code_daily_limit_per_ip = 3;
    })
    .await;
    code_for(&rig, PHONE).await;
    code_for(&rig, PHONE).await;
    let third = send(&rig.app, PHONE).await;
    assert_eq!(third.status_and_code(), (reqwest::StatusCode::OK, 429001));
    // That refusal sent nothing and cost the client nothing: one more phone, then the client
    // is done.
    code_for(&rig, "13900139000").await;
    let fourth = send(&rig.app, "13900139001").await;
    assert_eq!(fourth.status_and_code(), (reqwest::StatusCode::OK, 429001));
    assert_eq!(deliveries(&rig), 3);
}

/// Sends a code to `phone` as asked for by `client` (in `X-Forwarded-For`, believed from the
/// tests' address when `trusted_proxies` lists it).
async fn send_from(app: &TestApp, client: &str, phone: &str) -> Answer {
    let response = app
        .client
        .post(app.url("/users/login_sms/code/send"))
        .header("user-agent", UA)
        .header("x-forwarded-for", client)
        .json(&json!({ "phone": phone }))
        .send()
        .await
        .unwrap();
    Answer {
        status: response.status(),
        headers: response.headers().clone(),
        raw: response.text().await.unwrap(),
    }
}

fn believing_the_tests(config: &mut Config, resend_interval: Duration) {
    config.trusted_proxies = vec!["127.0.0.1/32".into()];
    config
        .settings_mut::<PhoneLoginSettings>()
        .sms_code_resend_interval = resend_interval;
}

/// Issue 46, item 2: ten quick requests from a stranger used to spend the phone's whole daily
/// limit (one code sent, nine refused as too soon, all ten counted), locking the owner of a
/// password-less account out. Now only sends count, and one client may use only
/// `sms_code_daily_limit_per_ip_phone` (3) of the phone's 10 — also when it rotates through the
/// addresses of its IPv6 /64 (item 3).
async fn a_strangers_requests_leave_the_owner_able_to_get_a_code(setup: Setup) {
    let resend = Duration::from_secs(1);
    let rig = rig(setup, |config| believing_the_tests(config, resend)).await;
    let mut address = 0;
    let mut stranger = || {
        address += 1;
        format!("2001:db8:bad:1::{address:x}")
    };
    let mut sent = 0;
    for round in 0..5 {
        for _ in 0..10 {
            let answer = send_from(&rig.app, &stranger(), PHONE).await;
            match answer.code() {
                0 => sent += 1,
                429001 => assert_eq!(answer.status, reqwest::StatusCode::OK),
                other => panic!("round {round}: code {other}: {}", answer.raw),
            }
        }
        // The resend interval is the behaviour here: wait it out.
        tokio::time::sleep(resend + Duration::from_millis(50)).await;
    }
    assert!(sent <= 3, "one client's share of the phone's codes: {sent}");

    let answer = send_from(&rig.app, "198.51.100.20", PHONE).await;
    assert_eq!(answer.code(), 0, "the owner is locked out: {}", answer.raw);
    assert_eq!(answer.json()["data"]["delivery"], "sent");
    let code = last_code(&rig, PHONE).unwrap();
    assert_eq!(sign_in(&rig.app, PHONE, &code).await.code(), 0);
    // The stranger did get its whole share: the limits refused only what was beyond it.
    assert_eq!(sent, 3);
    assert_eq!(deliveries(&rig), 4);
}

/// A request refused because the last code went out less than the resend interval ago sends
/// nothing, so it counts against no limit.
async fn a_request_refused_as_too_soon_is_not_charged(setup: Setup) {
    let resend = Duration::from_secs(1);
    let rig = rig(setup, |config| {
        believing_the_tests(config, resend);
        let login = config.settings_mut::<PhoneLoginSettings>();
        login.sms_code_daily_limit_per_phone = 2;
        login.sms_code_daily_limit_per_ip_phone = 2;
        login.sms_code_daily_limit_per_ip = 2;
        login.sms_code_budget = 2;
    })
    .await;
    let client = "198.51.100.30";
    assert_eq!(send_from(&rig.app, client, PHONE).await.code(), 0);
    for _ in 0..5 {
        let early = send_from(&rig.app, client, PHONE).await;
        assert_eq!(early.code(), 429001, "{}", early.raw);
        let retry_after: u64 = early.header("retry-after").parse().unwrap();
        assert_eq!(retry_after, 1, "refused as too soon, not by a daily limit");
    }
    tokio::time::sleep(resend + Duration::from_millis(50)).await;
    let second = send_from(&rig.app, client, PHONE).await;
    assert_eq!(second.code(), 0, "{}", second.raw);
    assert_eq!(deliveries(&rig), 2);
    // Two sends were all the limits allowed: now they refuse, for the day.
    tokio::time::sleep(resend + Duration::from_millis(50)).await;
    let third = send_from(&rig.app, client, PHONE).await;
    assert_eq!(third.code(), 429001, "{}", third.raw);
    let retry_after: u64 = third.header("retry-after").parse().unwrap();
    assert!(retry_after > 3600, "Retry-After {retry_after}");
    assert_eq!(deliveries(&rig), 2);
}

/// The site's budget of codes (`sms_code_budget` per `sms_code_budget_window`) refuses codes
/// beyond it, whoever asks, and counts the refusals for alerts; a refusal by one limit costs
/// the others nothing.
async fn the_sites_budget_refuses_codes_beyond_it_and_counts_them(setup: Setup) {
    let rig = rig(setup, |config| {
        believing_the_tests(config, Duration::from_secs(1));
        let login = config.settings_mut::<PhoneLoginSettings>();
        login.sms_code_budget = 3;
        login.sms_code_budget_window = Duration::from_secs(3600);
    })
    .await;
    let mut refused = 0;
    for i in 0..6 {
        let answer = send_from(
            &rig.app,
            &format!("198.51.100.{i}"),
            &format!("1390000000{i}"),
        )
        .await;
        match answer.code() {
            0 => {}
            429001 => {
                refused += 1;
                assert_eq!(answer.status, reqwest::StatusCode::OK);
                let retry_after: u64 = answer.header("retry-after").parse().unwrap();
                assert!(retry_after >= 1, "Retry-After {retry_after}");
            }
            other => panic!("code {other}: {}", answer.raw),
        }
    }
    assert_eq!((deliveries(&rig), refused), (3, 3));
    let metrics = rig.app.metrics_text().await;
    assert!(
        metrics.contains("sms_login_events_total{event=\"over_budget\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rate_limited_total{limiter=\"sms_code_budget\"}"),
        "{metrics}"
    );
}

async fn invalid_phones_are_refused_and_nothing_is_sent(setup: Setup) {
    let rig = rig(setup, |_| {}).await;
    for phone in ["", "12345", "1380013800", "+1 4155550100", "23800138000"] {
        let answer = send(&rig.app, phone).await;
        assert_eq!(answer.code(), 4, "{phone:?}: {}", answer.raw);
        assert!(answer.json()["msg"].as_str().unwrap().starts_with("phone"));
    }
    assert_eq!(rig.tencent.requests() + rig.aliyun.requests(), 0);
}

async fn delivery_fails_over_to_the_second_provider(setup: Setup) {
    let rig = rig(setup, |_| {}).await;
    for mode in [Mode::Fail, Mode::ServerError, Mode::RateLimit, Mode::Hang] {
        rig.tencent.set_mode(mode);
        let phone = format!("1390013900{}", deliveries(&rig));
        let code = code_for(&rig, &phone).await;
        assert_eq!(
            rig.aliyun.last_param_to(&phone, "code"),
            Some(code.clone()),
            "{mode:?}"
        );
        assert_eq!(sign_in(&rig.app, &phone, &code).await.code(), 0);
    }
    assert_eq!(rig.tencent.delivered().len(), 0);
}

async fn when_every_provider_is_down_the_code_is_queued_and_delivered_on_recovery(setup: Setup) {
    let rig = rig(setup, |_| {}).await;
    rig.tencent.set_mode(Mode::ServerError);
    rig.aliyun.set_mode(Mode::Fail);
    let answer = send(&rig.app, PHONE).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    assert_eq!(answer.json()["data"]["delivery"], "queued");
    let service: PhoneLoginService = rig.app.service();
    assert_eq!(service.queued().await.unwrap().len(), 1);
    assert_eq!(deliveries(&rig), 0);

    rig.aliyun.set_mode(Mode::Ok);
    wait_until("the queued code to be delivered", || async {
        deliveries(&rig) == 1
    })
    .await;
    wait_until("the queue to empty", || async {
        service.queued().await.unwrap().is_empty()
    })
    .await;
    let code = rig.aliyun.last_param_to(PHONE, "code").unwrap();
    let signed_in = sign_in(&rig.app, PHONE, &code).await;
    assert_eq!(
        signed_in.code(),
        0,
        "the retried code signs in: {}",
        signed_in.raw
    );
}

async fn a_queued_code_is_dropped_once_it_would_have_expired(setup: Setup) {
    let rig = rig(setup, |config| {
        let login = config.settings_mut::<PhoneLoginSettings>();
        login.sms_code_ttl = Duration::from_secs(3);
        login.sms_code_resend_interval = Duration::from_secs(1);
    })
    .await;
    rig.tencent.set_mode(Mode::Fail);
    rig.aliyun.set_mode(Mode::Fail);
    assert_eq!(
        send(&rig.app, PHONE).await.json()["data"]["delivery"],
        "queued"
    );
    let service: PhoneLoginService = rig.app.service();
    wait_until("the expired send to leave the queue", || async {
        service.queued().await.unwrap().is_empty()
    })
    .await;
    // It was dropped, not delivered: recovering providers receive nothing for it.
    rig.tencent.set_mode(Mode::Ok);
    rig.aliyun.set_mode(Mode::Ok);
    assert_eq!(deliveries(&rig), 0);
    let dropped = rig.app.metrics_text().await;
    assert!(
        dropped.contains("sms_login_events_total{event=\"dropped_expired\"}"),
        "{dropped}"
    );
}

async fn a_failing_provider_is_skipped_while_its_circuit_is_open(setup: Setup) {
    let rig = rig(setup, |config| {
        let sms = config.settings_mut::<SmsSettings>();
        sms.sms_circuit_failures = 2;
        sms.sms_circuit_open = Duration::from_millis(800);
        config
            .settings_mut::<PhoneLoginSettings>()
            .sms_code_resend_interval = Duration::from_millis(1);
    })
    .await;
    rig.tencent.set_mode(Mode::ServerError);
    code_for(&rig, "13900000001").await;
    code_for(&rig, "13900000002").await;
    let asked = rig.tencent.requests();
    assert_eq!(asked, 2);
    // Open: Tencent is not asked at all.
    code_for(&rig, "13900000003").await;
    assert_eq!(rig.tencent.requests(), asked);
    assert_eq!(rig.aliyun.delivered().len(), 3);
    // Recovered: after the open time, the trial message goes to Tencent and closes it.
    rig.tencent.set_mode(Mode::Ok);
    let mut phone = 13_900_000_010_u64;
    wait_until("a trial message to reach tencent again", || {
        phone += 1;
        let phone = phone.to_string();
        let rig = &rig;
        async move {
            code_for(rig, &phone).await;
            rig.tencent.delivered().len() == 1
        }
    })
    .await;
    code_for(&rig, "13900000099").await;
    assert_eq!(
        rig.tencent.delivered().len(),
        2,
        "closed again: tencent first"
    );
}

crate::setup_tests!(
    a_code_signs_in_once_and_the_phone_keeps_one_account,
    a_second_code_within_a_minute_is_refused_with_retry_after,
    three_wrong_tries_kill_the_code,
    an_expired_code_gets_the_answer_of_a_wrong_one,
    fifty_concurrent_checks_of_one_code_sign_in_once,
    codes_are_stored_only_as_keyed_digests,
    daily_limits_hold_per_phone_and_per_client,
    a_strangers_requests_leave_the_owner_able_to_get_a_code,
    a_request_refused_as_too_soon_is_not_charged,
    the_sites_budget_refuses_codes_beyond_it_and_counts_them,
    invalid_phones_are_refused_and_nothing_is_sent,
    delivery_fails_over_to_the_second_provider,
    when_every_provider_is_down_the_code_is_queued_and_delivered_on_recovery,
    a_queued_code_is_dropped_once_it_would_have_expired,
    a_failing_provider_is_skipped_while_its_circuit_is_open,
);
