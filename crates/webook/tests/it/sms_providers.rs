//! The Tencent Cloud and Alibaba Cloud SMS clients against the loopback fakes
//! (`common::fake_sms`), which verify the real signatures: a message arrives with its phone,
//! sign name, template and parameters; each of the fake's modes is the right `SendError`
//! (a provider error, a frequency limit, a 500, no answer within the configured timeout); a
//! wrong secret is refused; and a request altered after signing is refused — the proof that the
//! fakes really verify. No PostgreSQL or Redis needed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::{Duration, Instant};

use crate::common::fake_sms::{FakeSms, Mode, Provider, RawRequest};
use platform::{config::Secret, testing::wait_until};
use serde_json::Value;
use webook::sms::{
    aliyun::AliyunSms, tencent::TencentSms, AliyunConfig, SendError, SmsMessage, SmsProvider,
    TencentConfig,
};

const PHONE: &str = "13812345678";
const CODE: &str = "493817";
const KEY_ID: &str = "AKIDwebookTest0001";
const SECRET: &str = "webook-test-secret-key";

fn login_code() -> SmsMessage {
    SmsMessage {
        phone: PHONE.to_owned(),
        params: vec![("code", CODE.to_owned()), ("minutes", "5".to_owned())],
    }
}

fn tencent(fake: &FakeSms, secret: &str, timeout: Duration) -> TencentSms {
    TencentSms::new(
        TencentConfig {
            endpoint: fake.endpoint(),
            region: "ap-guangzhou".to_owned(),
            secret_id: KEY_ID.to_owned(),
            secret_key: Secret::new(secret),
            sdk_app_id: "1400006666".to_owned(),
            sign_name: "腾讯云".to_owned(),
            template_id: "1234".to_owned(),
            timeout,
        },
        reqwest::Client::new(),
    )
}

fn aliyun(fake: &FakeSms, secret: &str, timeout: Duration) -> AliyunSms {
    AliyunSms::new(
        AliyunConfig {
            endpoint: fake.endpoint(),
            access_key_id: KEY_ID.to_owned(),
            access_key_secret: Secret::new(secret),
            sign_name: "阿里云短信测试".to_owned(),
            template_code: "SMS_154950909".to_owned(),
            timeout,
        },
        reqwest::Client::new(),
    )
}

/// The client of the fake's provider.
fn client(fake: &FakeSms, secret: &str, timeout: Duration) -> Box<dyn SmsProvider> {
    match fake.provider() {
        Provider::Tencent => Box::new(tencent(fake, secret, timeout)),
        Provider::Aliyun => Box::new(aliyun(fake, secret, timeout)),
    }
}

/// An error's text never holds the login code nor the phone number.
fn assert_discreet(error: &SendError) {
    let text = error.to_string();
    assert!(
        !text.contains(CODE) && !text.contains(&PHONE[3..]),
        "{text}"
    );
}

#[tokio::test]
async fn tencent_delivers_a_message_with_its_template_parameters() {
    let fake = FakeSms::tencent(KEY_ID, SECRET).await;
    fake.set_template_params(&["code", "minutes"]);
    let client = tencent(&fake, SECRET, Duration::from_secs(5));
    assert_eq!(client.name(), "tencent");

    client.send(&login_code()).await.unwrap();

    let delivered = fake.wait_for_deliveries(1).await;
    assert_eq!(delivered.len(), 1);
    let message = &delivered[0];
    assert_eq!(message.phone, "+8613812345678");
    assert_eq!(message.sign_name, "腾讯云");
    assert_eq!(message.template, "1234");
    assert_eq!(message.values(), [CODE, "5"]);
    assert_eq!(message.param("minutes"), Some("5"));
    assert_eq!(fake.last_param_to(PHONE, "code").as_deref(), Some(CODE));
    assert_eq!((fake.requests(), fake.signature_failures()), (1, 0));
    let request = fake.last_request().unwrap();
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(header("x-tc-action"), Some("SendSms"));
    assert_eq!(header("x-tc-version"), Some("2021-01-11"));
    assert_eq!(header("x-tc-region"), Some("ap-guangzhou"));
    assert_eq!(
        header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert!(header("authorization")
        .unwrap()
        .starts_with("TC3-HMAC-SHA256 Credential=AKIDwebookTest0001/"));
}

#[tokio::test]
async fn aliyun_delivers_a_message_with_its_named_parameters() {
    let fake = FakeSms::aliyun(KEY_ID, SECRET).await;
    let client = aliyun(&fake, SECRET, Duration::from_secs(5));
    assert_eq!(client.name(), "aliyun");

    client.send(&login_code()).await.unwrap();

    let delivered = fake.wait_for_deliveries(1).await;
    assert_eq!(delivered.len(), 1);
    let message = &delivered[0];
    assert_eq!(message.phone, PHONE);
    assert_eq!(message.sign_name, "阿里云短信测试");
    assert_eq!(message.template, "SMS_154950909");
    assert_eq!(message.param("code"), Some(CODE));
    assert_eq!(message.param("minutes"), Some("5"));
    assert_eq!(fake.last_param_to(PHONE, "code").as_deref(), Some(CODE));
    assert_eq!((fake.requests(), fake.signature_failures()), (1, 0));
    let request = fake.last_request().unwrap();
    assert_eq!(request.method, "POST");
    assert!(request.body.is_empty());
    assert!(request
        .path_and_query
        .starts_with("/?PhoneNumbers=13812345678&SignName=%E9%98%BF"));
}

/// Each mode of `fake` is the right error; `Hang` is a timeout within a bound, and the fake
/// answers again once the mode changes.
async fn modes_map_to_send_errors(fake: FakeSms, rate_limit_code: &str, fail_code: &str) {
    let sms = client(&fake, SECRET, Duration::from_secs(5));
    let message = login_code();

    fake.set_mode(Mode::RateLimit);
    let error = sms.send(&message).await.unwrap_err();
    assert!(
        matches!(&error, SendError::RateLimited(text) if text.contains(rate_limit_code)),
        "{error:?}"
    );
    assert_discreet(&error);

    fake.set_mode(Mode::Fail);
    let error = sms.send(&message).await.unwrap_err();
    assert!(
        matches!(&error, SendError::Failed(text) if text.contains(fail_code)),
        "{error:?}"
    );
    assert_discreet(&error);

    fake.set_mode(Mode::ServerError);
    let error = sms.send(&message).await.unwrap_err();
    assert!(
        matches!(&error, SendError::Failed(text) if text.contains("500")),
        "{error:?}"
    );
    assert_discreet(&error);

    fake.set_mode(Mode::Hang);
    let impatient = client(&fake, SECRET, Duration::from_millis(300));
    let started = Instant::now();
    let error = impatient.send(&message).await.unwrap_err();
    let waited = started.elapsed();
    assert_eq!(error, SendError::Timeout);
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(3),
        "{waited:?}"
    );

    // The request the client gave up on may still wait in the fake: answer it (not delivered)
    // before accepting messages again.
    fake.set_mode(Mode::Fail);
    wait_until("the hung request answered", || async {
        fake.hanging() == 0
    })
    .await;

    fake.set_mode(Mode::Ok);
    sms.send(&message).await.unwrap();
    assert_eq!(
        fake.delivered().len(),
        1,
        "only the message sent in Mode::Ok"
    );
    assert_eq!((fake.requests(), fake.signature_failures()), (5, 0));
}

#[tokio::test]
async fn tencent_answers_map_to_send_errors() {
    modes_map_to_send_errors(
        FakeSms::tencent(KEY_ID, SECRET).await,
        "LimitExceeded.PhoneNumberThirtySecondLimit",
        "FailedOperation.TemplateIncorrectOrUnapproved",
    )
    .await;
}

#[tokio::test]
async fn aliyun_answers_map_to_send_errors() {
    modes_map_to_send_errors(
        FakeSms::aliyun(KEY_ID, SECRET).await,
        "isv.BUSINESS_LIMIT_CONTROL",
        "isv.SMS_TEMPLATE_ILLEGAL",
    )
    .await;
}

/// A client with the wrong secret is refused; nothing is delivered; the error says why
/// without the secret.
async fn a_wrong_secret_is_refused(fake: FakeSms, refusal: &str) {
    let wrong = "not-the-secret";
    let error = client(&fake, wrong, Duration::from_secs(5))
        .send(&login_code())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, SendError::Failed(text) if text.contains(refusal) && !text.contains(wrong)),
        "{error:?}"
    );
    assert_discreet(&error);
    assert_eq!((fake.requests(), fake.signature_failures()), (1, 1));
    assert!(fake.delivered().is_empty());
}

#[tokio::test]
async fn tencent_refuses_a_wrong_secret() {
    a_wrong_secret_is_refused(
        FakeSms::tencent(KEY_ID, SECRET).await,
        "AuthFailure.SignatureFailure",
    )
    .await;
}

#[tokio::test]
async fn aliyun_refuses_a_wrong_secret() {
    a_wrong_secret_is_refused(
        FakeSms::aliyun(KEY_ID, SECRET).await,
        "SignatureDoesNotMatch",
    )
    .await;
}

/// Sends `request` to `fake` again, as it was received but for `change`.
async fn replay(
    fake: &FakeSms,
    request: &RawRequest,
    change: impl FnOnce(&mut RawRequest),
) -> (u16, Value) {
    let mut request = request.clone();
    change(&mut request);
    let mut builder = reqwest::Client::new()
        .request(
            request.method.parse().unwrap(),
            format!("{}{}", fake.endpoint(), request.path_and_query),
        )
        .body(request.body);
    for (name, value) in &request.headers {
        // reqwest writes these itself, from the URL and the body.
        if name != "host" && name != "content-length" {
            builder = builder.header(name, value);
        }
    }
    let answer = builder.send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

fn set_header(request: &mut RawRequest, name: &str, value: &str) {
    let header = request
        .headers
        .iter_mut()
        .find(|(key, _)| key == name)
        .unwrap();
    header.1 = value.to_owned();
}

#[tokio::test]
async fn tencent_refuses_a_request_altered_after_signing() {
    let fake = FakeSms::tencent(KEY_ID, SECRET).await;
    tencent(&fake, SECRET, Duration::from_secs(5))
        .send(&login_code())
        .await
        .unwrap();
    let signed = fake.last_request().unwrap();
    let tencent_code = |answer: &Value| {
        let response = &answer["Response"];
        response["Error"]["Code"]
            .as_str()
            .or(response["SendStatusSet"][0]["Code"].as_str())
            .unwrap()
            .to_owned()
    };

    // Control: the request replayed as it was is accepted (Tencent has no nonce), so what
    // follows is refused for the change alone.
    let (_, answer) = replay(&fake, &signed, |_| {}).await;
    assert_eq!(tencent_code(&answer), "Ok");
    assert_eq!(fake.delivered().len(), 2);

    // Another code in the body, the old Authorization.
    let (_, answer) = replay(&fake, &signed, |request| {
        let body = String::from_utf8(request.body.clone()).unwrap();
        assert!(body.contains(CODE));
        request.body = body.replace(CODE, "000000").into_bytes();
    })
    .await;
    assert_eq!(tencent_code(&answer), "AuthFailure.SignatureFailure");

    // The timestamp is signed too: one second later is another signature…
    let timestamp: i64 = signed
        .headers
        .iter()
        .find(|(name, _)| name == "x-tc-timestamp")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let (_, answer) = replay(&fake, &signed, |request| {
        set_header(request, "x-tc-timestamp", &(timestamp + 1).to_string());
    })
    .await;
    assert_eq!(tencent_code(&answer), "AuthFailure.SignatureFailure");
    // … and an hour earlier is expired before anything else.
    let (_, answer) = replay(&fake, &signed, |request| {
        set_header(request, "x-tc-timestamp", &(timestamp - 3600).to_string());
    })
    .await;
    assert_eq!(tencent_code(&answer), "AuthFailure.SignatureExpire");

    assert_eq!(fake.delivered().len(), 2);
    assert_eq!((fake.requests(), fake.signature_failures()), (5, 3));
}

#[tokio::test]
async fn aliyun_refuses_a_request_altered_after_signing() {
    let fake = FakeSms::aliyun(KEY_ID, SECRET).await;
    aliyun(&fake, SECRET, Duration::from_secs(5))
        .send(&login_code())
        .await
        .unwrap();
    let signed = fake.last_request().unwrap();

    // Another phone in the query, the old Authorization.
    let (status, answer) = replay(&fake, &signed, |request| {
        assert!(request.path_and_query.contains(PHONE));
        request.path_and_query = request.path_and_query.replace(PHONE, "13900000000");
    })
    .await;
    assert_eq!(
        (status, answer["Code"].as_str()),
        (400, Some("SignatureDoesNotMatch"))
    );

    // A fresh nonce is not enough: the nonce is signed.
    let (status, answer) = replay(&fake, &signed, |request| {
        set_header(
            request,
            "x-acs-signature-nonce",
            "0123456789abcdef0123456789abcdef",
        );
    })
    .await;
    assert_eq!(
        (status, answer["Code"].as_str()),
        (400, Some("SignatureDoesNotMatch"))
    );

    // Control: the request as it was passes the signature check and is refused as a replay
    // only (the fake checks nonces after signatures).
    let (status, answer) = replay(&fake, &signed, |_| {}).await;
    assert_eq!(
        (status, answer["Code"].as_str()),
        (400, Some("SignatureNonceUsed"))
    );

    assert_eq!(fake.delivered().len(), 1);
    assert_eq!((fake.requests(), fake.signature_failures()), (4, 3));
}
