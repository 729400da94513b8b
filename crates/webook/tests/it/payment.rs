//! The WeChat Pay API v3 client (`webook::payment::WechatPay`) against the loopback fake
//! (`common::fake_wechatpay`), which checks request signatures against the merchant's public key
//! with its own code and signs its answers with its platform key: the prepay request is the
//! documented JSON and is signed; a request signed with another key is refused by the fake (the
//! proof that it checks); query, close and the trade bill behave as WeChat's API does; and no
//! answer is believed unless its signature (or, for the bill file, its SHA1) verifies. Each
//! failure of the provider is the right `ProviderError`. No database needed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate};
use serde_json::json;
use webook::payment::{
    crypto::SigningKey,
    provider::{Order, PaymentProvider, ProviderError, TradeState},
    WechatPay,
};

use crate::common::fake_wechatpay::{
    FakeWechatPay, Mode, Signing, APPID, MCHID, MERCHANT_SERIAL, NOTIFY_URL,
};

/// 2100-01-01T00:00:00Z: far enough ahead that no order expires during a test.
const EXPIRES_AT_MS: i64 = 4_102_444_800_000;

fn order(trade_no: &str, amt: i64) -> Order {
    Order {
        trade_no: trade_no.to_owned(),
        description: "打赏, 文章 42".to_owned(),
        amt,
        expires_at: EXPIRES_AT_MS,
    }
}

fn client(fake: &FakeWechatPay) -> WechatPay {
    WechatPay::new(fake.config()).unwrap()
}

fn assert_untrusted<T: std::fmt::Debug>(outcome: Result<T, ProviderError>, what: &str) -> String {
    match outcome {
        Err(ProviderError::Untrusted(why)) => why,
        other => panic!("{what}: expected Untrusted, got {other:?}"),
    }
}

#[tokio::test]
async fn prepay_sends_the_documented_signed_request_and_returns_the_code_url() {
    let fake = FakeWechatPay::start().await;
    let client = client(&fake);
    assert_eq!(client.name(), "wechat");

    let code_url = client
        .prepay(&order("T20240601000001", 1999))
        .await
        .unwrap();

    let created = fake
        .order("T20240601000001")
        .expect("the fake has the order");
    assert_eq!(code_url, created.code_url);
    assert!(
        code_url.starts_with("weixin://wxpay/bizpayurl?pr="),
        "{code_url}"
    );
    assert_eq!(
        created.request,
        json!({
            "appid": APPID,
            "mchid": MCHID,
            "description": "打赏, 文章 42",
            "out_trade_no": "T20240601000001",
            "time_expire": "2100-01-01T08:00:00+08:00",
            "notify_url": NOTIFY_URL,
            "amount": { "total": 1999, "currency": "CNY" },
        })
    );
    assert_eq!((fake.calls(), fake.signature_failures()), (1, 0));
    let request = fake.last_request().unwrap();
    assert_eq!(request.method, "POST");
    assert_eq!(request.path_and_query, "/v3/pay/transactions/native");
    let authorization = request.header("authorization").unwrap();
    assert!(
        authorization.starts_with(&format!("WECHATPAY2-SHA256-RSA2048 mchid=\"{MCHID}\","))
            && authorization.contains(&format!("serial_no=\"{MERCHANT_SERIAL}\"")),
        "{authorization}"
    );
    assert_eq!(request.header("accept"), Some("application/json"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert!(request
        .header("user-agent")
        .is_some_and(|agent| agent.starts_with("webook/")));

    // The same order again (a retry after a timeout): the same code URL, still one order.
    let again = client
        .prepay(&order("T20240601000001", 1999))
        .await
        .unwrap();
    assert_eq!(again, code_url);
    assert_eq!(fake.order_count(), 1);
    // Another amount under the same trade number: WeChat's refusal, with its code.
    match client.prepay(&order("T20240601000001", 2999)).await {
        Err(ProviderError::Refused { code, .. }) => assert_eq!(code, "INVALID_REQUEST"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fake.order("T20240601000001")
            .unwrap()
            .transaction
            .amount
            .total,
        1999
    );
}

#[tokio::test]
async fn a_request_signed_with_another_merchant_key_is_refused() {
    let fake = FakeWechatPay::start().await;
    // The merchant's serial, but not its key.
    let impostor = SigningKey::generate(MERCHANT_SERIAL).unwrap();
    let forged = WechatPay::new(fake.config_signed_by(&impostor)).unwrap();

    let why = assert_untrusted(
        forged.prepay(&order("T20240601000002", 100)).await,
        "a refused signature",
    );
    // WeChat answers SIGN_ERROR unsigned: the client names it but concludes nothing from it.
    assert!(why.contains("401 SIGN_ERROR"), "{why}");
    assert_eq!(fake.signature_failures(), 1);
    assert_eq!(fake.order("T20240601000002").map(|o| o.code_url), None);
    assert_untrusted(forged.query("T20240601000002").await, "a refused query");
    assert_eq!(fake.signature_failures(), 2);

    // The merchant's own key goes through.
    client(&fake)
        .prepay(&order("T20240601000002", 100))
        .await
        .unwrap();
    assert!(fake.order("T20240601000002").is_some());
    assert_eq!(fake.signature_failures(), 2);
}

#[tokio::test]
async fn a_query_follows_the_order_from_notpay_to_success() {
    let fake = FakeWechatPay::start().await;
    let client = client(&fake);
    client.prepay(&order("T20240601000003", 1)).await.unwrap();

    let unpaid = client.query("T20240601000003").await.unwrap().unwrap();
    assert_eq!(unpaid.trade_state, TradeState::Notpay);
    assert_eq!(unpaid.transaction_id, None);
    assert_eq!(
        (
            unpaid.out_trade_no.as_str(),
            unpaid.mchid.as_str(),
            unpaid.appid.as_str()
        ),
        ("T20240601000003", MCHID, APPID)
    );
    assert_eq!(unpaid.amount.total, 1);

    let paid = fake.pay("T20240601000003");
    let queried = client.query("T20240601000003").await.unwrap().unwrap();
    assert_eq!(queried, paid);
    assert_eq!(queried.trade_state, TradeState::Success);
    assert!(queried.transaction_id.is_some());
    assert_eq!(queried.amount.payer_total, Some(1));

    client.prepay(&order("T20240601000004", 5)).await.unwrap();
    fake.fail("T20240601000004");
    let failed = client.query("T20240601000004").await.unwrap().unwrap();
    assert_eq!(failed.trade_state, TradeState::Payerror);
}

#[tokio::test]
async fn an_order_wechat_pay_does_not_know_is_none() {
    let fake = FakeWechatPay::start().await;
    assert_eq!(client(&fake).query("T20240601999999").await, Ok(None));
    // It was asked, with the merchant id in the query.
    let request = fake.last_request().unwrap();
    assert_eq!(
        request.path_and_query,
        format!("/v3/pay/transactions/out-trade-no/T20240601999999?mchid={MCHID}")
    );
    assert_eq!((fake.calls(), fake.signature_failures()), (1, 0));
}

#[tokio::test]
async fn close_closes_an_unpaid_order_and_is_refused_for_a_paid_one() {
    let fake = FakeWechatPay::start().await;
    let client = client(&fake);
    client.prepay(&order("T20240601000005", 100)).await.unwrap();

    client.close("T20240601000005").await.unwrap();
    let request = fake.last_request().unwrap();
    assert_eq!(
        request.path_and_query,
        "/v3/pay/transactions/out-trade-no/T20240601000005/close"
    );
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&request.body).unwrap(),
        json!({ "mchid": MCHID })
    );
    let closed = client.query("T20240601000005").await.unwrap().unwrap();
    assert_eq!(closed.trade_state, TradeState::Closed);
    // Closing a closed order succeeds.
    client.close("T20240601000005").await.unwrap();

    client.prepay(&order("T20240601000006", 100)).await.unwrap();
    fake.pay("T20240601000006");
    match client.close("T20240601000006").await {
        Err(ProviderError::Refused { code, .. }) => assert_eq!(code, "ORDERPAID"),
        other => panic!("{other:?}"),
    }
    let still = client.query("T20240601000006").await.unwrap().unwrap();
    assert_eq!(still.trade_state, TradeState::Success);
    assert_eq!(fake.signature_failures(), 0);
}

#[tokio::test]
async fn answers_whose_signature_does_not_verify_are_untrusted() {
    let fake = FakeWechatPay::start().await;
    let client = client(&fake);
    client.prepay(&order("T20240601000007", 100)).await.unwrap();

    for signing in [Signing::Tampered, Signing::UnknownSerial, Signing::Unsigned] {
        fake.set_signing(signing);
        // A tampered answer says SUCCESS for an order that is not paid.
        assert_untrusted(client.query("T20240601000007").await, "query");
        assert_untrusted(client.prepay(&order("T20240601000008", 1)).await, "prepay");
        // A refusal saying there is no such order is not believed either.
        assert_untrusted(client.query("T20240601999998").await, "ORDER_NOT_EXIST");
        assert_untrusted(client.close("T20240601000007").await, "close (204)");
    }
    fake.set_signing(Signing::UnknownSerial);
    let why = assert_untrusted(client.query("T20240601000007").await, "unknown serial");
    assert!(why.contains("unknown platform key serial"), "{why}");

    fake.set_signing(Signing::Valid);
    let order = client.query("T20240601000007").await.unwrap().unwrap();
    assert_eq!(
        order.trade_state,
        TradeState::Closed,
        "the close went through"
    );
}

#[tokio::test]
async fn a_failing_wechat_pay_is_unavailable() {
    let fake = FakeWechatPay::start().await;
    let client = client(&fake);
    fake.set_mode(Mode::ServerError);
    match client.prepay(&order("T20240601000009", 100)).await {
        Err(ProviderError::Unavailable(why)) => assert!(why.contains("500 SYSTEM_ERROR"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client.query("T20240601000009").await,
        Err(ProviderError::Unavailable(_))
    ));
    assert_eq!(fake.calls(), 2);

    // Nothing listening: a port that was just free.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut config = fake.config();
    config.endpoint = format!("http://127.0.0.1:{port}");
    let unreachable = WechatPay::new(config).unwrap();
    assert!(matches!(
        unreachable.query("T20240601000009").await,
        Err(ProviderError::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_wechat_pay_that_never_answers_times_out() {
    let fake = FakeWechatPay::start().await;
    let client = WechatPay::new(fake.config_with_timeout(Duration::from_millis(300))).unwrap();
    fake.set_mode(Mode::Hang);
    let started = Instant::now();
    assert_eq!(
        client.prepay(&order("T20240601000010", 100)).await,
        Err(ProviderError::Timeout)
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn the_trade_bill_is_downloaded_checked_and_parsed() {
    let fake = FakeWechatPay::start().await;
    let client = client(&fake);
    for (trade_no, amt) in [
        ("T20240601000011", 1),
        ("T20240601000012", 123_450),
        ("T20240601000013", 500),
    ] {
        client.prepay(&order(trade_no, amt)).await.unwrap();
    }
    let first = fake.pay("T20240601000011");
    let second = fake.pay("T20240601000012");
    // The day of the payments in China Standard Time, as the fake recorded it.
    let day = DateTime::parse_from_rfc3339(first.success_time.as_deref().unwrap())
        .unwrap()
        .date_naive();
    let calls = fake.calls();

    let rows = client.trade_bill(day).await.unwrap();

    let mut rows: Vec<_> = rows
        .into_iter()
        .map(|row| (row.trade_no, row.transaction_id, row.trade_state, row.amt))
        .collect();
    rows.sort();
    let mut expected = vec![
        (
            first.out_trade_no.clone(),
            first.transaction_id.clone().unwrap(),
            "SUCCESS".to_owned(),
            1,
        ),
        (
            second.out_trade_no.clone(),
            second.transaction_id.clone().unwrap(),
            "SUCCESS".to_owned(),
            123_450,
        ),
    ];
    if DateTime::parse_from_rfc3339(second.success_time.as_deref().unwrap())
        .unwrap()
        .date_naive()
        != day
    {
        // Paid across midnight: the second payment is on the next day's bill.
        expected.pop();
    }
    assert_eq!(rows, expected);
    // Two signed requests: the bill's answer, then the file.
    let requests = fake.requests();
    let [bill, download] = &requests[calls..] else {
        panic!("{:?}", &requests[calls..]);
    };
    assert_eq!(
        bill.path_and_query,
        format!("/v3/bill/tradebill?bill_date={day}&bill_type=ALL")
    );
    assert!(download
        .path_and_query
        .starts_with("/v3/billdownload/file?token="));
    assert!(download.header("authorization").is_some());
    assert_eq!(fake.signature_failures(), 0);

    // A day without payments has no bill: WeChat's NO_STATEMENT_EXIST is an empty bill.
    let quiet = NaiveDate::from_ymd_opt(2000, 1, 1).unwrap();
    assert_eq!(client.trade_bill(quiet).await, Ok(vec![]));
}

#[tokio::test]
async fn a_bill_that_is_not_the_one_wechat_pay_hashed_is_untrusted() {
    let fake = FakeWechatPay::start().await;
    let client = client(&fake);
    client.prepay(&order("T20240601000014", 100)).await.unwrap();
    let paid = fake.pay("T20240601000014");
    let day = DateTime::parse_from_rfc3339(paid.success_time.as_deref().unwrap())
        .unwrap()
        .date_naive();
    assert_eq!(client.trade_bill(day).await.unwrap().len(), 1);

    fake.tamper_bills();
    let why = assert_untrusted(client.trade_bill(day).await, "a tampered bill");
    assert!(why.contains("SHA1"), "{why}");

    // A bill answer with a bad signature is not followed to its download.
    fake.set_signing(Signing::Tampered);
    let calls = fake.calls();
    assert_untrusted(client.trade_bill(day).await, "a tampered bill answer");
    assert_eq!(fake.calls(), calls + 1);
}
