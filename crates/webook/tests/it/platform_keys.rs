//! WeChat Pay platform keys that rotate (issue 48), against the loopback stand-in
//! (`common::fake_wechatpay`) with real HTTP and real cryptography: the client
//! (`webook::payment::WechatPay`) and the notification check (`notify::receive`) share one
//! keyring; in certificate mode it is filled from `GET /v3/certificates` — on start, and again
//! when a signature names an unknown serial (at most once a minute) — and nothing from an answer
//! that cannot be trusted is added; in public-key mode several configured keys verify at once.
//! Configuration errors are one line naming the setting. The end-to-end rotation through a
//! running webook is `rewards::a_rotated_platform_key_is_accepted_without_restart`. No
//! database needed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeMap;

use chrono::Utc;
use webook::payment::{
    certificates::STATUS_NAME,
    crypto::CryptoError,
    notify::{self, NotifyError, Opened, SealedNotification},
    provider::{Order, PaymentProvider, Transaction},
    settings::{PaymentSettings, PlatformMode},
    WechatPay,
};

use crate::common::fake_wechatpay::{FakeWechatPay, OddCertificate, Signing, PLATFORM_SERIAL};

fn order(trade_no: &str) -> Order {
    Order {
        trade_no: trade_no.to_owned(),
        description: "打赏".to_owned(),
        amt: 100,
        // 2100-01-01: no order expires during a test.
        expires_at: 4_102_444_800_000,
    }
}

/// A paid transaction of the fake (an order made and paid through it).
async fn paid(fake: &FakeWechatPay, client: &WechatPay, trade_no: &str) -> Transaction {
    client.prepay(&order(trade_no)).await.unwrap();
    fake.pay(trade_no)
}

async fn receive(
    client: &WechatPay,
    sealed: &SealedNotification,
) -> Result<Transaction, NotifyError> {
    let opened = notify::receive(
        client.notification_keys(),
        &sealed.header_map(),
        &sealed.body,
        Utc::now().timestamp(),
    )
    .await?;
    match opened {
        Opened::Transaction(transaction) => Ok(transaction),
        other => panic!("not a transaction: {other:?}"),
    }
}

fn certificate_client(fake: &FakeWechatPay) -> WechatPay {
    WechatPay::new(fake.certificate_settings().wechat().unwrap()).unwrap()
}

#[tokio::test]
async fn certificate_mode_starts_without_a_key_and_follows_a_rotation() {
    let fake = FakeWechatPay::start_with_certificates().await;
    let client = certificate_client(&fake);
    let keys = client.notification_keys().platform_keys.clone();
    assert!(keys.serials().is_empty(), "no key configured");
    let old = fake.current_serial();

    // The first download is verified with the certificate the answer names.
    let report = client.certificates().unwrap().refresh().await.unwrap();
    assert_eq!(report.added, std::slice::from_ref(&old));
    assert_eq!(report.valid, 1);
    let first = paid(&fake, &client, "T20240601000101").await;
    assert_eq!(
        receive(&client, &fake.notification(&first)).await.unwrap(),
        first
    );

    // Rotation: the new key signs; its serial is unknown, so the notification check
    // downloads the certificates once more and checks again.
    let new = fake.rotate();
    let second = paid(&fake, &client, "T20240601000102").await;
    let downloads = fake.certificate_downloads();
    // The prepay answer above was signed by the new key: the client downloaded already.
    assert_eq!(downloads, 2);
    assert_eq!(keys.serials(), {
        let mut both = vec![old.clone(), new.clone()];
        both.sort();
        both
    });
    assert_eq!(
        receive(&client, &fake.notification(&second)).await.unwrap(),
        second
    );
    // The old key verifies while its certificate is valid.
    assert_eq!(
        receive(&client, &fake.notification_signed_by(&second, &old))
            .await
            .unwrap(),
        second
    );
    assert_eq!(fake.certificate_downloads(), downloads);
    assert_eq!(fake.signature_failures(), 0);
}

#[tokio::test]
async fn a_notification_under_a_new_key_triggers_one_download_a_minute() {
    let fake = FakeWechatPay::start_with_certificates().await;
    let client = certificate_client(&fake);
    client.certificates().unwrap().refresh().await.unwrap();
    let transaction = paid(&fake, &client, "T20240601000111").await;

    let new = fake.rotate();
    // The notification comes before any answer under the new key: the check downloads.
    let sealed = fake.notification(&transaction);
    assert_eq!(sealed.headers.serial, new);
    assert_eq!(receive(&client, &sealed).await.unwrap(), transaction);
    assert_eq!(fake.certificate_downloads(), 2);

    // Another new key within the minute: refused, and no download for it.
    fake.rotate();
    match receive(&client, &fake.notification(&transaction)).await {
        Err(NotifyError::Unverified(CryptoError::UnknownSerial(_))) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.certificate_downloads(), 2, "rate-limited");
    // A forced refresh (the periodic one) still brings it.
    let report = client.certificates().unwrap().refresh().await.unwrap();
    assert_eq!(report.added.len(), 1, "{report:?}");
    assert_eq!(
        receive(&client, &fake.notification(&transaction))
            .await
            .unwrap(),
        transaction
    );
}

#[tokio::test]
async fn public_key_mode_with_two_configured_keys_accepts_both() {
    let fake = FakeWechatPay::start().await;
    let old = PLATFORM_SERIAL.to_owned();
    let new = fake.rotate();
    assert!(new.starts_with("PUB_KEY_ID_"), "{new}");
    // The old key as before (back-compat), the new one beside it in the map.
    let mut settings = fake.settings();
    settings.wechatpay_platform_keys = BTreeMap::from([(new.clone(), fake.public_key_pem(&new))]);
    let client = WechatPay::new(settings.wechat().unwrap()).unwrap();
    assert!(
        client.certificates().is_none(),
        "no download in public-key mode"
    );
    let transaction = paid(&fake, &client, "T20240601000121").await;
    for serial in [&old, &new] {
        let sealed = fake.notification_signed_by(&transaction, serial);
        assert_eq!(
            receive(&client, &sealed).await.unwrap(),
            transaction,
            "{serial}"
        );
    }
    // Both in the map alone, no single key: the same.
    let mut settings = fake.settings();
    settings.wechatpay_platform_serial.clear();
    settings.wechatpay_platform_public_key.clear();
    settings.wechatpay_platform_keys = BTreeMap::from([
        (old.clone(), fake.public_key_pem(&old)),
        (new.clone(), fake.public_key_pem(&new)),
    ]);
    let client = WechatPay::new(settings.wechat().unwrap()).unwrap();
    for serial in [&old, &new] {
        let sealed = fake.notification_signed_by(&transaction, serial);
        assert_eq!(
            receive(&client, &sealed).await.unwrap(),
            transaction,
            "{serial}"
        );
    }
    // A third key is not known, and nothing is downloaded for it.
    let third = fake.rotate();
    match receive(&client, &fake.notification_signed_by(&transaction, &third)).await {
        Err(NotifyError::Unverified(CryptoError::UnknownSerial(serial))) => {
            assert_eq!(serial, third)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.certificate_downloads(), 0);
}

#[tokio::test]
async fn a_certificates_answer_that_cannot_be_trusted_adds_nothing() {
    enum Fault {
        Signing(Signing),
        Odd(OddCertificate),
    }
    for (fault, why) in [
        (Fault::Signing(Signing::Tampered), "signature"),
        (
            Fault::Signing(Signing::UnknownSerial),
            "neither a trusted key",
        ),
        (Fault::Signing(Signing::Unsigned), "not signed"),
        (
            Fault::Odd(OddCertificate::WrongSerial),
            "is not its serial_no",
        ),
        (Fault::Odd(OddCertificate::ForeignIssuer), "not issued by"),
    ] {
        let fake = FakeWechatPay::start_with_certificates().await;
        let client = certificate_client(&fake);
        match fault {
            Fault::Signing(signing) => fake.set_signing(signing),
            Fault::Odd(odd) => {
                fake.list_odd_certificate(odd);
            }
        }
        let error = client.certificates().unwrap().refresh().await.unwrap_err();
        assert!(error.0.contains(why), "{why}: {error}");
        assert!(
            client
                .notification_keys()
                .platform_keys
                .serials()
                .is_empty(),
            "{why}: nothing added"
        );
    }

    // An expired certificate beside a valid one: the valid one is added, the expired not.
    let fake = FakeWechatPay::start_with_certificates().await;
    let expired = fake.list_odd_certificate(OddCertificate::Expired);
    let client = certificate_client(&fake);
    let report = client.certificates().unwrap().refresh().await.unwrap();
    assert_eq!(report.added, [fake.current_serial()]);
    let keys = client.notification_keys().platform_keys.clone();
    assert!(!keys.knows(&expired));
    assert_eq!(keys.serials(), [fake.current_serial()]);

    // Without wechatpay_platform_ca, a certificate of another CA is not refused for it.
    let fake = FakeWechatPay::start_with_certificates().await;
    let foreign = fake.list_odd_certificate(OddCertificate::ForeignIssuer);
    let mut settings = fake.certificate_settings();
    settings.wechatpay_platform_ca.clear();
    let client = WechatPay::new(settings.wechat().unwrap()).unwrap();
    client.certificates().unwrap().refresh().await.unwrap();
    assert!(client.notification_keys().platform_keys.knows(&foreign));
}

#[tokio::test]
async fn a_download_that_fails_leaves_the_keys_and_the_next_one_adds() {
    let fake = FakeWechatPay::start_with_certificates().await;
    let client = certificate_client(&fake);
    let downloader = client.certificates().unwrap();
    downloader.refresh().await.unwrap();
    let status = platform::status::StatusBoard::default();
    downloader.report_to(status.clone());
    assert_eq!(status.snapshot()[STATUS_NAME], "1 platform keys");
    fake.set_mode(crate::common::fake_wechatpay::Mode::ServerError);
    let error = downloader.refresh().await.unwrap_err();
    assert!(error.0.contains("HTTP 500"), "{error}");
    // Still known: a failed download removes nothing.
    assert_eq!(downloader.keys().serials(), [fake.current_serial()]);
    assert!(
        status.snapshot()[STATUS_NAME].starts_with("1 platform keys; the last download failed"),
        "{:?}",
        status.snapshot()
    );
    fake.set_mode(crate::common::fake_wechatpay::Mode::Normal);
    let report = downloader.refresh().await.unwrap();
    assert!(
        report.added.is_empty() && report.dropped.is_empty(),
        "{report:?}"
    );
    assert_eq!(status.snapshot()[STATUS_NAME], "1 platform keys");

    // A merchant whose first download fails has no valid key, and `/readyz` says so.
    let fake = FakeWechatPay::start_with_certificates().await;
    fake.set_mode(crate::common::fake_wechatpay::Mode::ServerError);
    let client = certificate_client(&fake);
    let downloader = client.certificates().unwrap();
    downloader.report_to(status.clone());
    downloader.refresh().await.unwrap_err();
    assert!(
        status.snapshot()[STATUS_NAME].starts_with("no valid platform key: "),
        "{:?}",
        status.snapshot()
    );
}

#[tokio::test]
async fn the_periodic_download_stops_on_shutdown() {
    let fake = FakeWechatPay::start_with_certificates().await;
    let client = certificate_client(&fake);
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(client.certificates().unwrap().clone().run(stop.clone()));
    stop.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .expect("the task ends when stopped")
        .unwrap();
    // The first periodic download is 12 h away: none happened.
    assert_eq!(fake.certificate_downloads(), 0);
}

fn error_of(settings: &PaymentSettings) -> String {
    format!("{:#}", settings.wechat().unwrap_err())
}

#[tokio::test]
async fn bad_platform_key_settings_are_one_line_errors_naming_the_setting() {
    let fake = FakeWechatPay::start().await;
    let good_pem = fake.public_key_pem(PLATFORM_SERIAL);
    let cases: Vec<(PaymentSettings, &str)> = vec![
        (
            PaymentSettings {
                wechatpay_platform_keys: BTreeMap::from([(
                    "PUB_KEY_ID_2".to_owned(),
                    "-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n".to_owned(),
                )]),
                ..fake.settings()
            },
            "invalid wechatpay_platform_keys (WEBOOK_WECHATPAY_PLATFORM_KEYS) entry \"PUB_KEY_ID_2\"",
        ),
        (
            PaymentSettings {
                wechatpay_platform_keys: BTreeMap::from([(" ".to_owned(), good_pem.clone())]),
                ..fake.settings()
            },
            "invalid wechatpay_platform_keys",
        ),
        (
            PaymentSettings {
                wechatpay_platform_public_key: "not a key".to_owned(),
                ..fake.settings()
            },
            "invalid wechatpay_platform_public_key",
        ),
        (
            PaymentSettings {
                wechatpay_platform_public_key: String::new(),
                ..fake.settings()
            },
            "wechatpay_platform_serial is set without wechatpay_platform_public_key",
        ),
        (
            PaymentSettings {
                wechatpay_platform_serial: String::new(),
                wechatpay_platform_public_key: String::new(),
                ..fake.settings()
            },
            "needs a platform key: wechatpay_platform_keys",
        ),
        (
            PaymentSettings {
                wechatpay_platform_mode: PlatformMode::Certificate,
                wechatpay_platform_ca: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
                    .to_owned(),
                ..fake.settings()
            },
            "invalid wechatpay_platform_ca (WEBOOK_WECHATPAY_PLATFORM_CA)",
        ),
        (
            PaymentSettings {
                wechatpay_platform_mode: PlatformMode::Certificate,
                wechatpay_certificate_refresh: std::time::Duration::from_secs(10),
                ..fake.settings()
            },
            "invalid wechatpay_certificate_refresh",
        ),
    ];
    for (settings, expected) in cases {
        let error = error_of(&settings);
        assert!(
            error.starts_with(expected) || error.contains(expected),
            "{expected}: {error}"
        );
        assert!(!error.contains('\n'), "one line: {error}");
    }
    // Certificate mode needs no configured key.
    let mut settings = fake.settings();
    settings.wechatpay_platform_mode = PlatformMode::Certificate;
    settings.wechatpay_platform_serial.clear();
    settings.wechatpay_platform_public_key.clear();
    assert!(settings.wechat().is_ok());
}

#[test]
fn the_keys_setting_reads_a_table_or_serial_equals_pem_entries() {
    let table: PaymentSettings = toml::from_str(
        "[wechatpay_platform_keys]\nPUB_KEY_ID_1 = \"pem one\"\nPUB_KEY_ID_2 = \"pem two\"\n",
    )
    .unwrap();
    let text: PaymentSettings = toml::from_str(
        "wechatpay_platform_keys = \"PUB_KEY_ID_1=pem one, PUB_KEY_ID_2 = pem two,\"",
    )
    .unwrap();
    let expected = BTreeMap::from([
        ("PUB_KEY_ID_1".to_owned(), "pem one".to_owned()),
        ("PUB_KEY_ID_2".to_owned(), "pem two".to_owned()),
    ]);
    assert_eq!(table.wechatpay_platform_keys, expected);
    assert_eq!(text.wechatpay_platform_keys, expected);
    let error = toml::from_str::<PaymentSettings>("wechatpay_platform_keys = \"PUB_KEY_ID_1\"")
        .unwrap_err()
        .to_string();
    assert!(error.contains("entry 1 is not SERIAL=PEM"), "{error}");
    let error = toml::from_str::<PaymentSettings>("wechatpay_platform_keys = \"A=x,A=y\"")
        .unwrap_err()
        .to_string();
    assert!(error.contains("given twice"), "{error}");
}
