//! Rewards paid through the fake payment provider, on the four setups ({SQLite, PostgreSQL} ×
//! {embedded, Redis}): the whole flow the course frontend drives (reward → payment page →
//! `RewardStatusPayed` → the author's account), notifications signed and encrypted exactly as
//! WeChat's — repeated, out of order, forged, stale, of an unknown serial, tampered — a lost
//! notification settled by the sweep, a credit interrupted after the payment's commit completed
//! by the next process, concurrent rewards to one author, and a reconciliation run over injected
//! discrepancies. Every test ends with the ledger summing to 0.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{get, member, members, post, publish, Member, Setup};
use webook::{
    account::Ledger,
    payment::{
        crypto::SigningKey,
        fake::FAKE_SERIAL,
        notify::{seal, SealedNotification},
        reconcile_day, sweep, Applied, FakePay, PaymentProvider, PaymentService, PaymentStatus,
        TradeState,
    },
    testing::TestApp,
};

/// An app whose first user (id 1) is an admin, whose status polls wait at most 3 s, and that
/// lets one address sign up a crowd.
pub(crate) async fn app(setup: Setup) -> TestApp {
    setup
        .spawn(|config| {
            let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
            auth.admins = vec![1];
            auth.auth_rate_limit = 1_000;
            config
                .settings_mut::<webook::reward::RewardSettings>()
                .reward_long_poll = Duration::from_secs(3);
        })
        .await
}

/// Rewards `article` with `amt` fen: (rid, trade number).
pub(crate) async fn reward(
    app: &TestApp,
    reader: &Member,
    article: i64,
    amt: i64,
) -> (i64, String) {
    let answer = post(
        app,
        "/articles/pub/reward",
        Some(&reader.token),
        json!({"id": article, "amt": amt}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    let data = answer.json()["data"].clone();
    let code_url = data["codeURL"].as_str().unwrap().to_owned();
    let trade_no = code_url
        .strip_prefix("/pay/fake/")
        .unwrap_or_else(|| panic!("not the fake page: {code_url}"))
        .to_owned();
    (data["rid"].as_i64().unwrap(), trade_no)
}

/// Presses "pay" or "fail" on the fake page (JSON form of the button).
pub(crate) async fn confirm(app: &TestApp, trade_no: &str, result: &str) -> Value {
    post(
        app,
        &format!("/pay/fake/{trade_no}/confirm"),
        None,
        json!({ "result": result }),
    )
    .await
    .json()
}

/// The reward's status as `/reward/detail` answers it, polled until it is `expected` (each
/// call is a long poll that returns when the status changes).
pub(crate) async fn await_status(app: &TestApp, payer: &Member, rid: i64, expected: &str) {
    let mut last = Value::Null;
    for _ in 0..10 {
        let answer = post(
            app,
            "/reward/detail",
            Some(&payer.token),
            json!({ "rid": rid }),
        )
        .await;
        last = answer.json();
        if last["data"] == expected {
            return;
        }
    }
    panic!("reward {rid} never reached {expected}: {last}");
}

pub(crate) async fn balance(app: &TestApp, member: &Member) -> i64 {
    get(app, "/account", Some(&member.token)).await.json()["data"]["balance"]
        .as_i64()
        .unwrap()
}

pub(crate) async fn platform_revenue(app: &TestApp) -> i64 {
    let db = app.service::<PaymentService>().store().db().clone();
    sqlx::query_scalar::<_, i64>(
        "SELECT COALESCE(MAX(balance), 0) FROM accounts WHERE kind = 'platform_revenue'",
    )
    .fetch_one(db.pool())
    .await
    .unwrap()
}

pub(crate) async fn entries_of(app: &TestApp, rid: i64) -> i64 {
    let db = app.service::<PaymentService>().store().db().clone();
    sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM account_entries WHERE biz = 'reward' AND biz_id = $1",
    )
    .bind(rid)
    .fetch_one(db.pool())
    .await
    .unwrap()
}

pub(crate) async fn payment_status(app: &TestApp, trade_no: &str) -> PaymentStatus {
    app.service::<PaymentService>()
        .store()
        .by_trade_no(trade_no)
        .await
        .unwrap()
        .unwrap()
        .status
}

pub(crate) async fn assert_ledger_sound(app: &TestApp) {
    let audit = app.service::<Ledger>().audit().await.unwrap();
    assert_eq!(audit.total_balance, 0, "{audit:?}");
    assert_eq!(audit.total_entries, 0, "{audit:?}");
    assert!(audit.mismatched.is_empty(), "{audit:?}");
}

/// Posts a notification to `/pay/wechat/notify` as WeChat would.
pub(crate) async fn deliver(
    app: &TestApp,
    notification: &SealedNotification,
) -> (StatusCode, String) {
    let response = app
        .client
        .post(app.url("/pay/wechat/notify"))
        .headers(notification.header_map())
        .body(notification.body.clone())
        .send()
        .await
        .unwrap();
    (response.status(), response.text().await.unwrap())
}

pub(crate) fn now_secs() -> i64 {
    platform::db::now_millis() / 1000
}

/// An author with a published article and a reader: (author, reader, article).
pub(crate) async fn author_and_reader(app: &TestApp) -> (Member, Member, i64) {
    let author = member(app, "author").await;
    let reader = member(app, "reader").await;
    let article = publish(app, &author, "缓存击穿与打赏").await;
    (author, reader, article)
}

async fn the_course_frontends_reward_flow_reaches_payed_and_credits_the_author(setup: Setup) {
    let app = app(setup).await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = reward(&app, &reader, article, 1001).await;

    // The payment page shows the order and its buttons.
    let page = app
        .client
        .get(app.url(&format!("/pay/fake/{trade_no}")))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.text().await.unwrap();
    assert!(page.contains("¥10.01"), "{page}");
    assert!(page.contains("缓存击穿与打赏"), "{page}");
    assert!(page.contains("id=\"pay\""), "{page}");

    // Still unpaid: the long poll answers Init when it runs out.
    let answer = post(
        &app,
        "/reward/detail",
        Some(&reader.token),
        json!({"rid": rid}),
    )
    .await;
    assert_eq!(answer.json()["data"], "RewardStatusInit");

    // A poll waiting while the payer pays is answered with the change.
    let waiting = {
        let (client, url, token) = (
            app.client.clone(),
            app.url("/reward/detail"),
            reader.token.clone(),
        );
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(token)
                .header("user-agent", crate::common::UA)
                .json(&json!({"rid": rid}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    let paid = confirm(&app, &trade_no, "success").await;
    assert_eq!(paid["code"], 0, "{paid}");
    assert_eq!(paid["data"]["state"], "SUCCESS");
    // Waiting up to 3 s, the poll is answered with the change (without the wake-up it would
    // answer Init in embedded mode… or find it on its next read).
    let polled = waiting.await.unwrap();
    assert_eq!(polled["data"], "RewardStatusPayed", "{polled}");

    // 1001 fen: the platform keeps 100 (10 %, rounded down), the author gets 901.
    assert_eq!(balance(&app, &author).await, 901);
    assert_eq!(balance(&app, &reader).await, 0);
    assert_eq!(platform_revenue(&app).await, 100);
    let account = get(&app, "/account", Some(&author.token)).await.json();
    let entries = account["data"]["entries"]["items"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(entries.len(), 1, "{account}");
    assert_eq!(entries[0]["biz"], "reward");
    assert_eq!(entries[0]["bizId"], rid);
    assert_eq!(entries[0]["amt"], 901);

    // Both sides list it.
    let sent = get(&app, "/rewards?role=sent", Some(&reader.token))
        .await
        .json();
    assert_eq!(sent["data"]["items"][0]["rid"], rid, "{sent}");
    assert_eq!(sent["data"]["items"][0]["status"], "RewardStatusPayed");
    assert_eq!(sent["data"]["items"][0]["article"]["id"], article);
    assert_eq!(
        sent["data"]["items"][0]["article"]["title"],
        "缓存击穿与打赏"
    );
    let received = get(&app, "/rewards?role=received", Some(&author.token))
        .await
        .json();
    assert_eq!(received["data"]["items"][0]["amt"], 1001, "{received}");
    assert!(get(&app, "/rewards?role=received", Some(&reader.token))
        .await
        .json()["data"]["items"]
        .as_array()
        .unwrap()
        .is_empty());

    // The page now shows it paid, without buttons; paying again is refused.
    let page = app
        .client
        .get(app.url(&format!("/pay/fake/{trade_no}")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("已支付") && !page.contains("id=\"pay\""),
        "{page}"
    );
    assert_eq!(confirm(&app, &trade_no, "fail").await["code"], 4);
    assert_eq!(entries_of(&app, rid).await, 3);
    assert_ledger_sound(&app).await;
}

async fn the_pages_form_buttons_pay_and_fail(setup: Setup) {
    let app = app(setup).await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (paid_rid, paid_trade) = reward(&app, &reader, article, 300).await;
    let (failed_rid, failed_trade) = reward(&app, &reader, article, 5).await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (trade_no, result) in [(&paid_trade, "success"), (&failed_trade, "fail")] {
        let response = no_redirects
            .post(app.url(&format!("/pay/fake/{trade_no}/confirm")))
            .form(&[("result", result)])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(
            response.headers()["location"].to_str().unwrap(),
            format!("/pay/fake/{trade_no}")
        );
    }
    await_status(&app, &reader, paid_rid, "RewardStatusPayed").await;
    await_status(&app, &reader, failed_rid, "RewardStatusFailed").await;
    // 300 fen → 270 to the author; 5 fen failed → nothing; no platform line for a 0 share.
    assert_eq!(balance(&app, &author).await, 270);
    assert_eq!(
        payment_status(&app, &failed_trade).await,
        PaymentStatus::Failed
    );
    assert_eq!(entries_of(&app, failed_rid).await, 0);
    assert_eq!(confirm(&app, &failed_trade, "success").await["code"], 4);
    assert_ledger_sound(&app).await;
}

async fn ten_concurrent_identical_notifications_credit_once(setup: Setup) {
    let app = app(setup).await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = reward(&app, &reader, article, 2000).await;
    let fake: FakePay = app.service();
    // The payer pays; WeChat-style, the notification is delivered ten times at once.
    let notification = fake.decide(&trade_no, true).await.unwrap();
    let deliveries = (0..10).map(|_| {
        let (app_client, url, notification) = (
            app.client.clone(),
            app.url("/pay/wechat/notify"),
            notification.clone(),
        );
        tokio::spawn(async move {
            let response = app_client
                .post(url)
                .headers(notification.header_map())
                .body(notification.body)
                .send()
                .await
                .unwrap();
            (response.status(), response.text().await.unwrap())
        })
    });
    for delivery in futures_util::future::join_all(deliveries).await {
        let (status, body) = delivery.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.is_empty(), "{body}");
    }
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    // And once more, later: still once.
    assert_eq!(deliver(&app, &notification).await.0, StatusCode::OK);
    assert_eq!(
        app.service::<PaymentService>()
            .accept_notification(&notification.header_map(), &notification.body)
            .await
            .unwrap(),
        Applied::AlreadySettled
    );
    assert_eq!(balance(&app, &author).await, 1800);
    assert_eq!(entries_of(&app, rid).await, 3);
    assert_eq!(platform_revenue(&app).await, 200);
    assert_ledger_sound(&app).await;
}

async fn a_failure_notified_after_the_success_changes_nothing(setup: Setup) {
    let app = app(setup).await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = reward(&app, &reader, article, 500).await;
    assert_eq!(confirm(&app, &trade_no, "success").await["code"], 0);
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    let fake: FakePay = app.service();
    let order = fake.order(&trade_no).await.unwrap().unwrap();
    let mut failed = fake.transaction(&order);
    failed.trade_state = TradeState::Payerror;
    failed.success_time = None;
    let late = fake.notification(&failed, now_secs()).unwrap();
    let (status, body) = deliver(&app, &late).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        payment_status(&app, &trade_no).await,
        PaymentStatus::Succeeded
    );
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    assert_eq!(balance(&app, &author).await, 450);
    assert_eq!(entries_of(&app, rid).await, 3);
    assert_ledger_sound(&app).await;
}

async fn forged_stale_foreign_and_tampered_notifications_are_refused(setup: Setup) {
    let app = app(setup).await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = reward(&app, &reader, article, 800).await;
    let fake: FakePay = app.service();
    let order = fake.order(&trade_no).await.unwrap().unwrap();
    let mut paid = fake.transaction(&order);
    paid.trade_state = TradeState::Success;
    paid.transaction_id = Some("4200000000000000000000000001".to_owned());
    paid.success_time = Some(webook::payment::china_time(platform::db::now_millis()));
    let api_v3_key = &fake.notification_keys().api_v3_key;

    // The genuine article, to be sure the refusals below are about what was changed.
    let genuine = fake.notification(&paid, now_secs()).unwrap();

    let forger = SigningKey::generate(FAKE_SERIAL).unwrap();
    let forged = seal(api_v3_key, &forger, &paid, now_secs()).unwrap();
    let stale = fake.notification(&paid, now_secs() - 6 * 60).unwrap();
    let stranger = SigningKey::generate("PUB_KEY_ID_UNKNOWN").unwrap();
    let foreign = seal(api_v3_key, &stranger, &paid, now_secs()).unwrap();
    let mut tampered_body = genuine.clone();
    let text = String::from_utf8(tampered_body.body.clone()).unwrap();
    tampered_body.body = text.replacen("支付成功", "支付成功 ", 1).into_bytes();
    let mut more = paid.clone();
    more.amount.total += 1;
    let tampered_amount = fake.notification(&more, now_secs()).unwrap();
    let mut other_merchant = paid.clone();
    other_merchant.mchid = "1900000999".to_owned();
    let foreign_merchant = fake.notification(&other_merchant, now_secs()).unwrap();

    for (name, notification, expected) in [
        ("forged signature", &forged, StatusCode::UNAUTHORIZED),
        ("stale timestamp", &stale, StatusCode::UNAUTHORIZED),
        ("unknown serial", &foreign, StatusCode::UNAUTHORIZED),
        (
            "body changed after signing",
            &tampered_body,
            StatusCode::UNAUTHORIZED,
        ),
        ("tampered amount", &tampered_amount, StatusCode::BAD_REQUEST),
        (
            "another merchant",
            &foreign_merchant,
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (status, body) = deliver(&app, notification).await;
        assert_eq!(status, expected, "{name}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["code"], "FAIL", "{name}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{name}"
        );
    }
    // No headers at all.
    let bare = app
        .client
        .post(app.url("/pay/wechat/notify"))
        .body(genuine.body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);

    // Nothing changed.
    assert_eq!(
        payment_status(&app, &trade_no).await,
        PaymentStatus::Pending
    );
    let answer = post(
        &app,
        "/reward/detail",
        Some(&reader.token),
        json!({"rid": rid}),
    )
    .await;
    assert_eq!(answer.json()["data"], "RewardStatusInit");
    assert_eq!(balance(&app, &author).await, 0);
    // The signed notification with another amount is recorded for a person.
    // (The author is user 1, this app's admin.)
    let found = get(
        &app,
        "/payments/discrepancies?status=open",
        Some(&author.token),
    )
    .await
    .json();
    let kinds: Vec<&str> = found["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["notified_amount_mismatch"], "{found}");

    // The genuine one is then accepted.
    assert_eq!(deliver(&app, &genuine).await.0, StatusCode::OK);
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    assert_eq!(balance(&app, &author).await, 720);
    assert_ledger_sound(&app).await;
}

async fn a_lost_notification_is_settled_by_the_sweep_and_an_unpaid_order_is_closed(setup: Setup) {
    let app = app(setup).await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (paid_rid, paid_trade) = reward(&app, &reader, article, 1000).await;
    let (unpaid_rid, unpaid_trade) = reward(&app, &reader, article, 700).await;
    let fake: FakePay = app.service();
    // Paid at the provider; the notification never arrives.
    fake.decide(&paid_trade, true).await.unwrap();
    let payments: PaymentService = app.service();

    // Before expiry the sweep leaves both alone.
    let report = sweep(&payments, platform::db::now_millis(), || true)
        .await
        .unwrap();
    assert_eq!(report, webook::payment::SweepReport::default());

    // After expiry (and the grace) it asks the provider.
    let later = platform::db::now_millis() + 31 * 60 * 1000 + 61 * 1000;
    let report = sweep(&payments, later, || true).await.unwrap();
    assert_eq!(
        (report.succeeded, report.failed, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    await_status(&app, &reader, paid_rid, "RewardStatusPayed").await;
    await_status(&app, &reader, unpaid_rid, "RewardStatusFailed").await;
    // The unpaid order was closed at the provider first: it cannot be paid any more.
    assert_eq!(
        fake.order(&unpaid_trade).await.unwrap().unwrap().state,
        TradeState::Closed
    );
    assert_eq!(confirm(&app, &unpaid_trade, "success").await["code"], 4);
    assert_eq!(balance(&app, &author).await, 900);
    // A second sweep finds nothing left.
    assert_eq!(
        sweep(&payments, later, || true).await.unwrap(),
        webook::payment::SweepReport::default()
    );
    assert_ledger_sound(&app).await;
}

async fn a_credit_interrupted_after_the_payment_commit_completes_in_the_next_process(setup: Setup) {
    let db = setup.database().await;
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let configure = |config: &mut platform::config::Config| {
        config
            .settings_mut::<webook::reward::RewardSettings>()
            .reward_long_poll = Duration::from_secs(3);
    };
    let first = setup.spawn_on(db.clone(), &prefix, configure).await;
    let (author, reader, article) = author_and_reader(&first).await;
    let (rid, trade_no) = reward(&first, &reader, article, 1234).await;
    let fake: FakePay = first.service();
    let notification = fake.decide(&trade_no, true).await.unwrap();
    let webook::payment::notify::Opened::Transaction(transaction) = webook::payment::notify::open(
        fake.notification_keys(),
        &notification.header_map(),
        &notification.body,
        now_secs(),
    )
    .unwrap() else {
        panic!("a payment's notification opens as a transaction")
    };
    first.stop().await.unwrap();
    let store = webook::payment::PaymentStore::new(db.db.clone());

    // What a process killed right after the notification's commit leaves behind: the payment
    // succeeded and its event in the outbox, no credit.
    let settled = store
        .settle(
            &trade_no,
            &webook::payment::model::Settlement {
                status: PaymentStatus::Succeeded,
                txn_id: transaction.transaction_id.clone(),
                paid_at: Some(platform::db::now_millis()),
            },
            platform::db::now_millis(),
        )
        .await
        .unwrap();
    assert!(
        matches!(settled, webook::payment::model::Settled::Changed(_)),
        "{settled:?}"
    );

    let second = setup.spawn_on(db, &prefix, configure).await;
    await_status(&second, &reader, rid, "RewardStatusPayed").await;
    assert_eq!(balance(&second, &author).await, 1234 - 123);
    assert_eq!(entries_of(&second, rid).await, 3);
    // The provider's notification, retried now, changes nothing.
    let retried = second
        .service::<FakePay>()
        .notification(&transaction, now_secs())
        .unwrap();
    assert_eq!(deliver(&second, &retried).await.0, StatusCode::OK);
    assert_eq!(entries_of(&second, rid).await, 3);
    assert_ledger_sound(&second).await;
}

async fn concurrent_rewards_to_one_author_keep_the_balance_the_sum_of_entries(setup: Setup) {
    let app = app(setup).await;
    let author = member(&app, "popular").await;
    let article = publish(&app, &author, "popular").await;
    // Six readers, two rewards each, of amounts that do not split evenly.
    let fans = members(&app, "fan", 6).await;
    let readers: Vec<&Member> = fans.iter().chain(&fans).collect();
    let amounts: Vec<i64> = (0..12).map(|i| 37 * i + 13).collect();
    let mut trades = Vec::new();
    for (reader, amt) in readers.iter().zip(&amounts) {
        trades.push(reward(&app, reader, article, *amt).await);
    }
    let payments = trades.iter().map(|(_, trade_no)| {
        let (client, url) = (
            app.client.clone(),
            app.url(&format!("/pay/fake/{trade_no}/confirm")),
        );
        tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({"result": "success"}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    });
    for paid in futures_util::future::join_all(payments).await {
        assert_eq!(paid.unwrap()["code"], 0);
    }
    for (reader, (rid, _)) in readers.iter().zip(&trades) {
        await_status(&app, reader, *rid, "RewardStatusPayed").await;
    }
    let expected: i64 = amounts.iter().map(|amt| amt - amt / 10).sum();
    assert_eq!(balance(&app, &author).await, expected);
    assert_eq!(
        platform_revenue(&app).await,
        amounts.iter().map(|amt| amt / 10).sum::<i64>()
    );
    assert_ledger_sound(&app).await;
}

async fn reconciliation_reports_each_injected_discrepancy_once(setup: Setup) {
    let app = app(setup).await;
    let admin = member(&app, "admin").await;
    assert_eq!(admin.uid, 1);
    let (_author, reader, article) = author_and_reader(&app).await;
    let fake: FakePay = app.service();
    let payments: PaymentService = app.service();
    let db = payments.store().db().clone();
    let now = platform::db::now_millis();

    // Healthy: paid and credited.
    let (ok_rid, ok_trade) = reward(&app, &reader, article, 100).await;
    confirm(&app, &ok_trade, "success").await;
    await_status(&app, &reader, ok_rid, "RewardStatusPayed").await;
    // Amount mismatch: the provider's books say another amount.
    let (mismatch_rid, mismatch_trade) = reward(&app, &reader, article, 200).await;
    confirm(&app, &mismatch_trade, "success").await;
    await_status(&app, &reader, mismatch_rid, "RewardStatusPayed").await;
    sqlx::query("UPDATE fake_pay_orders SET amt = amt + 5 WHERE trade_no = $1")
        .bind(&mismatch_trade)
        .execute(db.writer())
        .await
        .unwrap();
    // Unsettled: paid at the provider, notification lost.
    let (unsettled_rid, unsettled_trade) = reward(&app, &reader, article, 300).await;
    fake.decide(&unsettled_trade, true).await.unwrap();
    // Payment without credit: settled in our books without its event.
    let (uncredited_rid, uncredited_trade) = reward(&app, &reader, article, 400).await;
    fake.decide(&uncredited_trade, true).await.unwrap();
    sqlx::query("UPDATE payments SET status = 'succeeded', paid_at = $1 WHERE trade_no = $2")
        .bind(now)
        .bind(&uncredited_trade)
        .execute(db.writer())
        .await
        .unwrap();
    // Missing payment: the provider was paid for a trade we never made.
    sqlx::query(
        "INSERT INTO fake_pay_orders (trade_no, description, amt, state, transaction_id, \
         expires_at, paid_at, ctime) VALUES ('rwghost0001', 'ghost', 999, 'SUCCESS', 'fakeghost', $1, $2, $2)",
    )
    .bind(now + 60_000)
    .bind(now)
    .execute(db.writer())
    .await
    .unwrap();

    let today = webook::payment::china_today(chrono::Utc::now());
    let ledger: Ledger = app.service();
    let report = reconcile_day(&payments, &ledger, today, platform::db::now_millis())
        .await
        .unwrap();
    assert_eq!(report.bill_rows, 5, "{report:?}");
    let mut found: Vec<(&str, u64)> = report.found.iter().map(|(k, v)| (*k, *v)).collect();
    found.sort_unstable();
    assert_eq!(
        found,
        [
            ("amount_mismatch", 1),
            ("missing_payment", 1),
            ("payment_without_credit", 1),
            ("unsettled_payment", 1),
        ],
        "{report:?}"
    );
    // The safe ones were fixed: both rewards end up paid and credited.
    await_status(&app, &reader, unsettled_rid, "RewardStatusPayed").await;
    await_status(&app, &reader, uncredited_rid, "RewardStatusPayed").await;
    assert_eq!(entries_of(&app, uncredited_rid).await, 3);
    assert_eq!(
        payment_status(&app, &unsettled_trade).await,
        PaymentStatus::Succeeded
    );

    // The admin route lists them; the open ones are for a person.
    let all = get(
        &app,
        "/payments/discrepancies?status=all",
        Some(&admin.token),
    )
    .await
    .json();
    let rows = all["data"]["items"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{all}");
    let open = get(
        &app,
        "/payments/discrepancies?status=open&limit=1",
        Some(&admin.token),
    )
    .await
    .json();
    assert_eq!(open["data"]["items"].as_array().unwrap().len(), 1, "{open}");
    let next = open["data"]["next"].as_str().unwrap();
    let rest = get(
        &app,
        &format!("/payments/discrepancies?status=open&cursor={next}"),
        Some(&admin.token),
    )
    .await
    .json();
    let mut open_kinds: Vec<String> = open["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest["data"]["items"].as_array().unwrap())
        .map(|d| d["kind"].as_str().unwrap().to_owned())
        .collect();
    open_kinds.sort();
    // The republished credit stays open until a later run sees its posting.
    assert_eq!(
        open_kinds,
        [
            "amount_mismatch",
            "missing_payment",
            "payment_without_credit"
        ]
    );
    assert_eq!(
        get(&app, "/payments/discrepancies", Some(&reader.token))
            .await
            .code(),
        403002
    );

    // A person resolves one.
    let id = rest["data"]["items"][0]["id"].as_i64().unwrap();
    let resolved = post(
        &app,
        &format!("/payments/discrepancies/{id}/resolve"),
        Some(&admin.token),
        json!({"note": "refunded by hand"}),
    )
    .await;
    assert_eq!(resolved.code(), 0, "{}", resolved.raw);
    let again = post(
        &app,
        &format!("/payments/discrepancies/{id}/resolve"),
        Some(&admin.token),
        json!({"note": "twice"}),
    )
    .await;
    // The same action again (a retried request) answers what was done, unchanged.
    assert_eq!(again.code(), 0, "{}", again.raw);
    assert_eq!(again.json()["data"]["note"], "refunded by hand");
    assert_eq!(again.json()["data"]["action"], "resolve");
    assert_eq!(again.json()["data"]["actedBy"], admin.uid);

    // A second run records nothing new.
    reconcile_day(&payments, &ledger, today, platform::db::now_millis())
        .await
        .unwrap();
    let all = get(
        &app,
        "/payments/discrepancies?status=all",
        Some(&admin.token),
    )
    .await
    .json();
    let rows = all["data"]["items"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{all}");
    // …and marks the republished credit fixed now that its posting is verified.
    let uncredited = rows
        .iter()
        .find(|row| row["kind"] == "payment_without_credit")
        .unwrap();
    assert_eq!(uncredited["status"], "fixed", "{uncredited}");
    assert_eq!(uncredited["note"], "verified: the posting is in the ledger");
    let _ = ok_rid;
    assert_ledger_sound(&app).await;
}

async fn bad_rewards_are_refused_and_an_open_order_is_offered_again(setup: Setup) {
    let app = app(setup).await;
    let (author, reader, article) = author_and_reader(&app).await;
    for (body, what) in [
        (json!({"id": article, "amt": 0}), "zero"),
        (json!({"id": article, "amt": 500_001}), "too much"),
        (json!({"id": article + 1000, "amt": 100}), "no such article"),
    ] {
        let answer = post(&app, "/articles/pub/reward", Some(&reader.token), body).await;
        assert_eq!(answer.code(), 4, "{what}: {}", answer.raw);
    }
    let own = post(
        &app,
        "/articles/pub/reward",
        Some(&author.token),
        json!({"id": article, "amt": 100}),
    )
    .await;
    assert_eq!(own.code(), 4, "{}", own.raw);
    let anonymous = post(
        &app,
        "/articles/pub/reward",
        None,
        json!({"id": article, "amt": 100}),
    )
    .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    // A withdrawn article cannot be rewarded.
    let withdrawn = publish(&app, &author, "to withdraw").await;
    assert_eq!(
        post(
            &app,
            "/articles/withdraw",
            Some(&author.token),
            json!({"id": withdrawn})
        )
        .await
        .code(),
        0
    );
    assert_eq!(
        post(
            &app,
            "/articles/pub/reward",
            Some(&reader.token),
            json!({"id": withdrawn, "amt": 100})
        )
        .await
        .code(),
        4
    );

    // The same reward again: the same order; another amount: another.
    let first = reward(&app, &reader, article, 100).await;
    assert_eq!(reward(&app, &reader, article, 100).await, first);
    let other = reward(&app, &reader, article, 101).await;
    assert_ne!(other.0, first.0);
    // An order whose payment settled before its event reached the reward (here: failed at the
    // provider a moment ago) is not offered again: its code can no longer be paid.
    let settling = reward(&app, &reader, article, 102).await;
    sqlx::query("UPDATE payments SET status = 'failed' WHERE trade_no = $1")
        .bind(&settling.1)
        .execute(app.platform.db.writer())
        .await
        .unwrap();
    let fresh = reward(&app, &reader, article, 102).await;
    assert_ne!(fresh, settling, "a new order, not the settled one's code");
    // Asking for the settled order's code directly is refused too.
    let refused = app
        .service::<PaymentService>()
        .prepay(&settling.1)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, platform::error::AppError::InvalidInput(_)),
        "{refused:?}"
    );

    // Only the payer may ask about a reward.
    let detail = post(
        &app,
        "/reward/detail",
        Some(&author.token),
        json!({"rid": first.0}),
    )
    .await;
    assert_eq!(detail.code(), 404001, "{}", detail.raw);
    assert_eq!(
        get(&app, "/rewards?role=everyone", Some(&reader.token))
            .await
            .code(),
        4
    );
    let sent = get(&app, "/rewards?role=sent&limit=1", Some(&reader.token))
        .await
        .json();
    assert_eq!(sent["data"]["items"][0]["rid"], fresh.0);
    assert!(sent["data"]["next"].is_string());
    assert_ledger_sound(&app).await;
}

/// The same flow with `pay_provider = "wechat"`, against the loopback WeChat Pay: the order is
/// created with a signed request, WeChat's notification credits the author, an unpaid order is
/// closed by the sweep, and the day's bill (downloaded, hash-checked, parsed) reconciles clean.
async fn rewards_are_paid_through_wechat_pay_end_to_end(setup: Setup) {
    let wechat = crate::common::fake_wechatpay::FakeWechatPay::start().await;
    let settings = wechat.settings();
    let app = setup
        .spawn(|config| {
            *config.settings_mut::<webook::payment::PaymentSettings>() = settings;
            config
                .settings_mut::<webook::reward::RewardSettings>()
                .reward_long_poll = Duration::from_secs(3);
        })
        .await;
    let (author, reader, article) = author_and_reader(&app).await;
    let answer = post(
        &app,
        "/articles/pub/reward",
        Some(&reader.token),
        json!({"id": article, "amt": 2500}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    let rid = answer.json()["data"]["rid"].as_i64().unwrap();
    let code_url = answer.json()["data"]["codeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let payments: PaymentService = app.service();
    let trade_no: String = sqlx::query_scalar("SELECT trade_no FROM rewards WHERE id = $1")
        .bind(rid)
        .fetch_one(payments.store().db().pool())
        .await
        .unwrap();
    let order = wechat
        .order(&trade_no)
        .expect("the order reached WeChat Pay");
    assert_eq!(order.transaction.amount.total, 2500);
    assert!(code_url.starts_with("weixin://"), "{code_url}");
    assert_eq!(wechat.signature_failures(), 0);

    let paid = wechat.pay(&trade_no);
    let (status, body) = deliver(&app, &wechat.notification(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    assert_eq!(balance(&app, &author).await, 2250);

    // An order never paid: the sweep asks WeChat, closes it, fails the reward.
    let answer = post(
        &app,
        "/articles/pub/reward",
        Some(&reader.token),
        json!({"id": article, "amt": 99}),
    )
    .await;
    let unpaid_rid = answer.json()["data"]["rid"].as_i64().unwrap();
    let later = platform::db::now_millis() + 32 * 60 * 1000;
    let report = sweep(&payments, later, || true).await.unwrap();
    assert_eq!((report.failed, report.errors), (1, 0), "{report:?}");
    await_status(&app, &reader, unpaid_rid, "RewardStatusFailed").await;

    // Today's bill has the one payment, and it matches.
    let today = webook::payment::china_today(chrono::Utc::now());
    let report = reconcile_day(
        &payments,
        &app.service::<Ledger>(),
        today,
        platform::db::now_millis(),
    )
    .await
    .unwrap();
    assert_eq!((report.bill_rows, report.payments), (1, 1), "{report:?}");
    assert!(report.found.is_empty(), "{report:?}");
    assert_ledger_sound(&app).await;
}

/// Issue 48: WeChat rotates its platform key while webook runs. webook in platform certificate
/// mode with NO key configured downloads the certificates on start; a notification signed by
/// the old key is accepted; after the rotation, one signed by the new key is accepted too,
/// without a restart (the unknown serial makes it download again), and the old key still
/// verifies while its certificate is valid. `/readyz` details count the keys.
async fn a_rotated_platform_key_is_accepted_without_restart(setup: Setup) {
    let wechat = crate::common::fake_wechatpay::FakeWechatPay::start_with_certificates().await;
    let settings = wechat.certificate_settings();
    let app = setup
        .spawn(|config| *config.settings_mut::<webook::payment::PaymentSettings>() = settings)
        .await;
    assert_eq!(wechat.certificate_downloads(), 1, "downloaded on start");
    let readiness = get(&app, "/readyz", None).await.json();
    assert_eq!(
        readiness["data"]["details"]["wechatpay_platform_keys"], "1 platform keys",
        "{readiness}"
    );
    let (author, reader, article) = author_and_reader(&app).await;
    let payments: PaymentService = app.service();
    let trade_no_of = |rid: i64| {
        let db = payments.store().db().clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT trade_no FROM rewards WHERE id = $1")
                .bind(rid)
                .fetch_one(db.pool())
                .await
                .unwrap()
        }
    };
    let order = |amt: i64| {
        let (app, reader) = (&app, &reader);
        async move {
            let answer = post(
                app,
                "/articles/pub/reward",
                Some(&reader.token),
                json!({"id": article, "amt": amt}),
            )
            .await;
            assert_eq!(answer.code(), 0, "{}", answer.raw);
            answer.json()["data"]["rid"].as_i64().unwrap()
        }
    };
    let (first, second) = (order(1000).await, order(2000).await);
    let old_serial = wechat.current_serial();

    // The old key: accepted.
    let paid = wechat.pay(&trade_no_of(first).await);
    let (status, body) = deliver(&app, &wechat.notification(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    await_status(&app, &reader, first, "RewardStatusPayed").await;

    // WeChat rotates: the new key signs the next notification; webook has never seen it.
    let new_serial = wechat.rotate();
    assert_ne!(new_serial, old_serial);
    let paid = wechat.pay(&trade_no_of(second).await);
    let notification = wechat.notification(&paid);
    assert_eq!(notification.headers.serial, new_serial);
    let (status, body) = deliver(&app, &notification).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    await_status(&app, &reader, second, "RewardStatusPayed").await;
    assert_eq!(
        wechat.certificate_downloads(),
        2,
        "downloaded for the new serial"
    );

    // An order answered under the new key, paid and notified under the old one: still valid.
    let third = order(3000).await;
    let paid = wechat.pay(&trade_no_of(third).await);
    let (status, body) = deliver(&app, &wechat.notification_signed_by(&paid, &old_serial)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    await_status(&app, &reader, third, "RewardStatusPayed").await;
    assert_eq!(
        wechat.certificate_downloads(),
        2,
        "no download for known keys"
    );
    assert_eq!(balance(&app, &author).await, 5400);
    let readiness = get(&app, "/readyz", None).await.json();
    assert_eq!(
        readiness["data"]["details"]["wechatpay_platform_keys"], "2 platform keys",
        "{readiness}"
    );
    assert_eq!(wechat.signature_failures(), 0);
    // Process-wide metrics (other tests download too): the series exist and count up.
    let metrics = app.platform.metrics.render();
    assert!(
        metrics.contains("payment_platform_key_refreshes_total{outcome=\"updated\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("\npayment_platform_keys "), "{metrics}");
    assert_ledger_sound(&app).await;
}

/// Issue 46, item 4: a burst of reward orders from one user is cut at `reward_rate_limit`
/// (default 10 per minute): the rest are answered 429001 with `Retry-After`, and no reward,
/// payment or provider order is made for them (150 orders in 0.3 s all reached WeChat Pay).
async fn a_burst_of_reward_orders_from_one_user_is_cut_at_the_limit(setup: Setup) {
    let wechat = crate::common::fake_wechatpay::FakeWechatPay::start().await;
    let settings = wechat.settings();
    let app = setup
        .spawn(|config| *config.settings_mut::<webook::payment::PaymentSettings>() = settings)
        .await;
    let (_, reader, article) = author_and_reader(&app).await;
    // Another amount each: none is the same open order offered again.
    let orders = (0..40).map(|i| {
        let (client, url, token) = (
            app.client.clone(),
            app.url("/articles/pub/reward"),
            reader.token.clone(),
        );
        tokio::spawn(async move {
            let response = client
                .post(url)
                .header("user-agent", crate::common::UA)
                .bearer_auth(token)
                .json(&json!({"id": article, "amt": 100 + i}))
                .send()
                .await
                .unwrap();
            let (status, retry_after) = (
                response.status(),
                response.headers().get("retry-after").is_some(),
            );
            let body: Value = response.json().await.unwrap();
            (status, body["code"].as_i64().unwrap(), retry_after)
        })
    });
    let answers: Vec<(StatusCode, i64, bool)> = futures_util::future::join_all(orders)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let created = answers.iter().filter(|(_, code, _)| *code == 0).count();
    let refused = answers
        .iter()
        .filter(|answer| **answer == (StatusCode::OK, 429001, true))
        .count();
    assert_eq!((created, refused), (10, 30), "{answers:?}");
    assert_eq!(wechat.order_count(), 10, "provider orders");
    let rewards: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM rewards")
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap();
    assert_eq!(rewards, 10);
}

crate::setup_tests!(
    a_burst_of_reward_orders_from_one_user_is_cut_at_the_limit,
    rewards_are_paid_through_wechat_pay_end_to_end,
    a_rotated_platform_key_is_accepted_without_restart,
    the_course_frontends_reward_flow_reaches_payed_and_credits_the_author,
    the_pages_form_buttons_pay_and_fail,
    ten_concurrent_identical_notifications_credit_once,
    a_failure_notified_after_the_success_changes_nothing,
    forged_stale_foreign_and_tampered_notifications_are_refused,
    a_lost_notification_is_settled_by_the_sweep_and_an_unpaid_order_is_closed,
    a_credit_interrupted_after_the_payment_commit_completes_in_the_next_process,
    concurrent_rewards_to_one_author_keep_the_balance_the_sum_of_entries,
    reconciliation_reports_each_injected_discrepancy_once,
    bad_rewards_are_refused_and_an_open_order_is_offered_again,
);
