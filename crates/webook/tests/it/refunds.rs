//! Money you can stand behind (issue 48), on the four setups ({SQLite, PostgreSQL} × {embedded,
//! Redis}), against the loopback WeChat Pay stand-in (which verifies our signatures with its own
//! code) or the embedded fake provider:
//!
//! - the payer who is entering their password when the sweep closes the order (`202
//!   USER_PAYING`) ends paid and credited, never charged and uncredited;
//! - a refund end to end: asked once however often the admin asks, the provider's notification
//!   verified and applied once, the credit reversed, the reward `RewardStatusRefunded`, the
//!   day's bill (a payment line and a refund line) reconciling clean;
//! - a refund that would take the author's balance below 0 is refused unless allowed;
//! - reconciliation from the ledger's side: a posting for a failed payment and a fen moved
//!   between two accounts of a reward are both found, though the ledger still balances;
//! - a payment that arrived after we failed it is credited, or refunded, with one action each,
//!   audited and idempotent;
//! - a pending payment the provider reports refunded is parked and no longer polled;
//! - ten concurrent refund requests and ten concurrent notifications refund and reverse once;
//! - a refund whose answer and notification are lost, one WeChat cannot pay back at first
//!   (`ABNORMAL`, then handled at WeChat), and a server killed with SIGKILL while WeChat holds
//!   its refund (real processes): each ends refunded once;
//! - an amount mismatch refunded for the provider's amount; two admins acting on one
//!   discrepancy at once: exactly one acts;
//! - a status poll asks the provider once for a lost notification; the `webook payments` CLI.
//!
//! Every test ends with the ledger summing to 0 and, where it reconciles, a clean audit.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use futures_util::FutureExt as _;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::{
    common::{
        fake_wechatpay::FakeWechatPay, get, member, post, process::Server, publish, Member, Setup,
    },
    rewards::{
        app, assert_ledger_sound, author_and_reader, await_status, balance, confirm, deliver,
        payment_status, platform_revenue, reward,
    },
};
use webook::{
    account::{AccountRef, Ledger, Line, Posting},
    payment::{
        notify::SealedNotification, reconcile_day, sweep, PaymentService, PaymentStatus,
        SweepReport,
    },
    testing::TestApp,
};

/// An app on the WeChat Pay stand-in whose first user is an admin.
async fn wechat_app(setup: Setup, wechat: &FakeWechatPay) -> TestApp {
    let settings = wechat.settings();
    setup
        .spawn(|config| {
            *config.settings_mut::<webook::payment::PaymentSettings>() = settings;
            config
                .settings_mut::<webook::auth::settings::AuthSettings>()
                .admins = vec![1];
            config
                .settings_mut::<webook::reward::RewardSettings>()
                .reward_long_poll = Duration::from_secs(3);
        })
        .await
}

/// Rewards `article` with `amt` fen through WeChat Pay: (rid, trade number).
async fn wechat_reward(app: &TestApp, reader: &Member, article: i64, amt: i64) -> (i64, String) {
    let answer = post(
        app,
        "/articles/pub/reward",
        Some(&reader.token),
        json!({"id": article, "amt": amt}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    let rid = answer.json()["data"]["rid"].as_i64().unwrap();
    let trade_no: String = sqlx::query_scalar("SELECT trade_no FROM rewards WHERE id = $1")
        .bind(rid)
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap();
    (rid, trade_no)
}

/// Waits until reward `rid` reads `expected` to its payer (a change after `payed` is not
/// long-polled: the poll returns at once for a reward that left `init`).
async fn await_reward(app: &TestApp, payer: &Member, rid: i64, expected: &str) {
    platform::testing::wait_until(&format!("reward {rid} {expected}"), || async {
        post(
            app,
            "/reward/detail",
            Some(&payer.token),
            json!({ "rid": rid }),
        )
        .await
        .json()["data"]
            == expected
    })
    .await;
}

/// A WeChat Pay app whose reward of `amt` fen is paid, notified and credited (the author has
/// 90 % of it).
struct Paid {
    app: TestApp,
    wechat: FakeWechatPay,
    admin: Member,
    author: Member,
    reader: Member,
    rid: i64,
    trade_no: String,
}

async fn paid_reward(setup: Setup, amt: i64) -> Paid {
    let wechat = FakeWechatPay::start().await;
    let app = wechat_app(setup, &wechat).await;
    let admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = wechat_reward(&app, &reader, article, amt).await;
    let paid = wechat.pay(&trade_no);
    let (status, body) = deliver(&app, &wechat.notification(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    platform::testing::wait_until("the author credited", || async {
        balance(&app, &author).await == amt * 9 / 10
    })
    .await;
    Paid {
        app,
        wechat,
        admin,
        author,
        reader,
        rid,
        trade_no,
    }
}

/// Reconciles today and returns what it found, sorted.
async fn reconcile_today(app: &TestApp) -> (webook::payment::ReconcileReport, Vec<(String, u64)>) {
    let today = webook::payment::china_today(chrono::Utc::now());
    let report = reconcile_day(
        &app.service::<PaymentService>(),
        &app.service::<Ledger>(),
        today,
        platform::db::now_millis(),
    )
    .await
    .unwrap();
    let mut found: Vec<(String, u64)> = report
        .found
        .iter()
        .map(|(kind, count)| ((*kind).to_owned(), *count))
        .collect();
    found.sort_unstable();
    (report, found)
}

/// The discrepancies as the admin route lists them (status `all`).
async fn discrepancies(app: &TestApp, admin: &Member) -> Vec<Value> {
    let answer = get(app, "/payments/discrepancies?limit=100", Some(&admin.token)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"]["items"].as_array().unwrap().clone()
}

async fn the_payer_entering_their_password_at_close_ends_paid_and_credited(setup: Setup) {
    let wechat = FakeWechatPay::start().await;
    let app = wechat_app(setup, &wechat).await;
    let _admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = wechat_reward(&app, &reader, article, 1000).await;
    let payments: PaymentService = app.service();
    // The payer scanned and is entering their password as the order expires.
    wechat.start_paying(&trade_no);
    wechat.user_paying_on_close();

    let later = platform::db::now_millis() + 32 * 60 * 1000;
    let report = sweep(&payments, later, || true).await.unwrap();
    // Closed (202 USER_PAYING), asked again: still being paid, so nothing is failed.
    assert_eq!(
        (
            report.failed,
            report.succeeded,
            report.unchanged,
            report.errors
        ),
        (0, 0, 1, 0),
        "{report:?}"
    );
    assert_eq!(
        payment_status(&app, &trade_no).await,
        PaymentStatus::Pending
    );
    let closes = wechat
        .requests()
        .iter()
        .filter(|request| request.path_and_query.ends_with("/close"))
        .count();
    assert_eq!(closes, 1);

    // The payer finishes; WeChat's notification is lost. The next sweep settles it as paid.
    wechat.pay(&trade_no);
    let report = sweep(&payments, later + 60_000, || true).await.unwrap();
    assert_eq!((report.succeeded, report.failed), (1, 0), "{report:?}");
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    assert_eq!(balance(&app, &author).await, 900);
    let (_, found) = reconcile_today(&app).await;
    assert!(found.is_empty(), "{found:?}");
    assert_ledger_sound(&app).await;
}

async fn a_refund_is_asked_once_applied_once_reversed_and_reconciled(setup: Setup) {
    let wechat = FakeWechatPay::start().await;
    let app = wechat_app(setup, &wechat).await;
    let admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = wechat_reward(&app, &reader, article, 2500).await;
    let paid = wechat.pay(&trade_no);
    let (status, body) = deliver(&app, &wechat.notification(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    assert_eq!(balance(&app, &author).await, 2250);
    assert_eq!(platform_revenue(&app).await, 250);

    // Only an admin refunds; a reason is required.
    let body = json!({"tradeNo": trade_no, "reason": "打赏误操作，退回"});
    let refused = post(&app, "/payments/refunds", Some(&reader.token), body.clone()).await;
    assert_eq!(refused.code(), 403002, "{}", refused.raw);
    let no_reason = post(
        &app,
        "/payments/refunds",
        Some(&admin.token),
        json!({"tradeNo": trade_no, "reason": " "}),
    )
    .await;
    assert_eq!(no_reason.code(), 4, "{}", no_reason.raw);

    // Asked three times (a double click, a retry): one refund at WeChat Pay.
    let mut refund_nos = Vec::new();
    for _ in 0..3 {
        let answer = post(&app, "/payments/refunds", Some(&admin.token), body.clone()).await;
        assert_eq!(answer.code(), 0, "{}", answer.raw);
        let refund = answer.json()["data"].clone();
        assert_eq!(refund["status"], "processing", "{refund}");
        assert_eq!(refund["amt"], 2500);
        assert_eq!(refund["requestedBy"], admin.uid);
        refund_nos.push(refund["refundNo"].as_str().unwrap().to_owned());
    }
    refund_nos.dedup();
    assert_eq!(refund_nos.len(), 1, "{refund_nos:?}");
    let order = wechat.order(&trade_no).unwrap();
    let asked = order
        .refund
        .as_ref()
        .expect("the refund reached WeChat Pay");
    assert_eq!(asked.request["out_refund_no"], refund_nos[0].as_str());
    assert_eq!(asked.request["amount"]["refund"], 2500);
    assert_eq!(asked.request["amount"]["total"], 2500);
    assert_eq!(wechat.signature_failures(), 0);
    // Nothing is reversed while the money is on its way.
    assert_eq!(balance(&app, &author).await, 2250);

    // A refund notification for a refund we never asked for is refused and recorded.
    let mut stranger = wechat.finish_refund(&trade_no, true);
    let genuine = stranger.clone();
    stranger.refund.out_refund_no = "rfnotours000000000000001".to_owned();
    let (status, _) = deliver(&app, &wechat.refund_notification(&stranger)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // WeChat's notification, twice: applied once.
    for _ in 0..2 {
        let (status, body) = deliver(&app, &wechat.refund_notification(&genuine)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_eq!(
        payment_status(&app, &trade_no).await,
        PaymentStatus::Refunded
    );
    await_reward(&app, &reader, rid, "RewardStatusRefunded").await;
    assert_eq!(balance(&app, &author).await, 0);
    assert_eq!(platform_revenue(&app).await, 0);
    let reversal: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM account_entries WHERE biz = 'refund'")
            .fetch_one(app.platform.db.pool())
            .await
            .unwrap();
    assert_eq!(
        reversal, 3,
        "clearing, author and platform lines reversed once"
    );
    let listed = get(
        &app,
        "/payments/refunds?status=succeeded",
        Some(&admin.token),
    )
    .await;
    assert_eq!(
        listed.json()["data"]["items"][0]["refundNo"],
        refund_nos[0].as_str()
    );
    // The author's account shows the reversal.
    let account = get(&app, "/account", Some(&author.token)).await.json();
    assert_eq!(
        account["data"]["entries"]["items"][0]["biz"], "refund",
        "{account}"
    );
    assert_eq!(
        account["data"]["entries"]["items"][0]["amt"], -2250,
        "{account}"
    );

    // Asking again after it succeeded refunds nothing more.
    let again = post(&app, "/payments/refunds", Some(&admin.token), body).await;
    assert_eq!(again.code(), 0, "{}", again.raw);
    assert_eq!(again.json()["data"]["status"], "succeeded");

    // Today's bill: the payment line and the refund line, both matching our books.
    let (report, found) = reconcile_today(&app).await;
    assert_eq!(
        (report.bill_rows, report.payments, report.refunds),
        (2, 1, 1),
        "{report:?}"
    );
    assert!(found.is_empty(), "{found:?}");
    let kinds: Vec<String> = discrepancies(&app, &admin)
        .await
        .iter()
        .map(|found| found["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        ["unknown_refund"],
        "the stranger's refund is on record"
    );
    assert_ledger_sound(&app).await;
}

async fn a_refund_that_would_overdraw_the_author_is_refused_unless_allowed(setup: Setup) {
    let app = app(setup).await;
    let admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = reward(&app, &reader, article, 1000).await;
    confirm(&app, &trade_no, "success").await;
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    // The author's money went elsewhere (as a withdrawal would take it).
    app.service::<Ledger>()
        .post_once(&Posting {
            biz: "withdrawal",
            biz_id: 1,
            lines: vec![
                Line {
                    account: AccountRef::user(author.uid),
                    amt: -600,
                    memo: "withdrawn".to_owned(),
                },
                Line {
                    account: AccountRef::clearing(),
                    amt: 600,
                    memo: "withdrawn".to_owned(),
                },
            ],
        })
        .await
        .unwrap();
    assert_eq!(balance(&app, &author).await, 300);

    let body = json!({"tradeNo": trade_no, "reason": "duplicate reward"});
    let refused = post(&app, "/payments/refunds", Some(&admin.token), body).await;
    assert_eq!(refused.code(), 4, "{}", refused.raw);
    let message = refused.json()["msg"].as_str().unwrap().to_owned();
    assert!(message.contains("allowNegative"), "{message}");
    assert_eq!(
        payment_status(&app, &trade_no).await,
        PaymentStatus::Succeeded
    );

    let allowed = post(
        &app,
        "/payments/refunds",
        Some(&admin.token),
        json!({"tradeNo": trade_no, "reason": "duplicate reward", "allowNegative": true}),
    )
    .await;
    assert_eq!(allowed.code(), 0, "{}", allowed.raw);
    // The fake provider refunds at once.
    assert_eq!(
        allowed.json()["data"]["status"],
        "succeeded",
        "{}",
        allowed.raw
    );
    assert_eq!(allowed.json()["data"]["allowNegative"], true);
    await_reward(&app, &reader, rid, "RewardStatusRefunded").await;
    assert_eq!(balance(&app, &author).await, -600, "shown as it is");
    let (_, found) = reconcile_today(&app).await;
    assert!(found.is_empty(), "{found:?}");
    assert_ledger_sound(&app).await;
}

async fn reconciliation_finds_a_ledger_only_posting_and_a_shifted_fen(setup: Setup) {
    let app = app(setup).await;
    let _admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let db = app.platform.db.clone();
    let (paid_rid, paid_trade) = reward(&app, &reader, article, 1000).await;
    confirm(&app, &paid_trade, "success").await;
    await_status(&app, &reader, paid_rid, "RewardStatusPayed").await;
    let (failed_rid, failed_trade) = reward(&app, &reader, article, 300).await;
    confirm(&app, &failed_trade, "fail").await;
    await_status(&app, &reader, failed_rid, "RewardStatusFailed").await;
    let (clean_report, clean) = reconcile_today(&app).await;
    assert!(clean.is_empty(), "{clean:?} {clean_report:?}");

    // A 4 500-fen posting for the failed reward, balanced.
    app.service::<Ledger>()
        .post_once(&Posting {
            biz: "reward",
            biz_id: failed_rid,
            lines: vec![
                Line {
                    account: AccountRef::clearing(),
                    amt: -4500,
                    memo: String::new(),
                },
                Line {
                    account: AccountRef::user(author.uid),
                    amt: 4500,
                    memo: String::new(),
                },
            ],
        })
        .await
        .unwrap();
    // One fen of the paid reward moved from the platform's line to the author's, with the
    // balances moved too: the ledger still sums to 0 and every balance is its entries' sum.
    for (kind, delta) in [("user", 1), ("platform_revenue", -1)] {
        sqlx::query(
            "UPDATE account_entries SET amt = amt + $1 WHERE biz = 'reward' AND biz_id = $2 \
             AND account_id = (SELECT id FROM accounts WHERE kind = $3)",
        )
        .bind(delta)
        .bind(paid_rid)
        .bind(kind)
        .execute(db.writer())
        .await
        .unwrap();
        sqlx::query("UPDATE accounts SET balance = balance + $1 WHERE kind = $2")
            .bind(delta)
            .bind(kind)
            .execute(db.writer())
            .await
            .unwrap();
    }
    assert_ledger_sound(&app).await;

    let (report, found) = reconcile_today(&app).await;
    assert_eq!(
        found,
        [
            ("posting_mismatch".to_owned(), 1),
            ("posting_without_payment".to_owned(), 1)
        ],
        "{report:?}"
    );
    assert!(report.postings >= 2, "{report:?}");
    // Re-run: nothing recorded twice.
    reconcile_today(&app).await;
    let open: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM payment_discrepancies WHERE status = 'open'")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(open, 2);
    assert_eq!(platform_revenue(&app).await, 99);
}

async fn a_payment_that_arrived_after_failure_is_credited_or_refunded_with_one_action(
    setup: Setup,
) {
    let app = app(setup).await;
    let admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let payments: PaymentService = app.service();
    let db = app.platform.db.clone();
    let (credit_rid, credit_trade) = reward(&app, &reader, article, 1000).await;
    let (refund_rid, refund_trade) = reward(&app, &reader, article, 500).await;
    // Both expire unpaid: closed at the provider and failed.
    let later = platform::db::now_millis() + 32 * 60 * 1000;
    let report = sweep(&payments, later, || true).await.unwrap();
    assert_eq!((report.failed, report.errors), (2, 0), "{report:?}");
    await_status(&app, &reader, credit_rid, "RewardStatusFailed").await;
    // …and yet the provider was paid for both (what a close racing a payer could leave).
    for trade_no in [&credit_trade, &refund_trade] {
        sqlx::query(
            "UPDATE fake_pay_orders SET state = 'SUCCESS', transaction_id = $1, paid_at = $2 \
             WHERE trade_no = $3",
        )
        .bind(format!("late{trade_no}"))
        .bind(platform::db::now_millis())
        .bind(trade_no)
        .execute(db.writer())
        .await
        .unwrap();
    }
    let (_, found) = reconcile_today(&app).await;
    assert_eq!(found, [("paid_after_failure".to_owned(), 2)], "{found:?}");
    let listed = discrepancies(&app, &admin).await;
    let id_of = |trade_no: &str| {
        let found = listed
            .iter()
            .find(|found| found["tradeNo"] == trade_no)
            .unwrap();
        assert_eq!(
            found["actions"],
            json!(["credit", "refund", "resolve"]),
            "{found}"
        );
        found["id"].as_i64().unwrap()
    };
    let (credit_id, refund_id) = (id_of(&credit_trade), id_of(&refund_trade));

    // Only admins act; an action the kind does not offer is refused; a note is required.
    let token = admin.token.clone();
    let act = |id: i64, action: &str, body: Value| {
        let (app, token) = (&app, &token);
        let path = format!("/payments/discrepancies/{id}/{action}");
        async move { post(app, &path, Some(token), body).await }
    };
    let by_reader = post(
        &app,
        &format!("/payments/discrepancies/{credit_id}/credit"),
        Some(&reader.token),
        json!({"note": "x"}),
    )
    .await;
    assert_eq!(by_reader.code(), 403002);
    assert_eq!(
        act(credit_id, "credit", json!({"note": ""})).await.code(),
        4
    );
    assert_eq!(
        act(credit_id, "pay", json!({"note": "x"})).await.code(),
        404001
    );

    // Credit: the reward is paid and the author credited.
    let credited = act(
        credit_id,
        "credit",
        json!({"note": "the payer finished at close"}),
    )
    .await;
    assert_eq!(credited.code(), 0, "{}", credited.raw);
    let closed = credited.json()["data"].clone();
    assert_eq!(closed["status"], "resolved", "{closed}");
    assert_eq!(closed["action"], "credit");
    assert_eq!(closed["actedBy"], admin.uid);
    assert_eq!(closed["actions"], json!([]));
    await_reward(&app, &reader, credit_rid, "RewardStatusPayed").await;
    assert_eq!(balance(&app, &author).await, 900);
    // The same action again answers the same; another action on it is refused.
    let again = act(credit_id, "credit", json!({"note": "double click"})).await;
    assert_eq!(again.code(), 0, "{}", again.raw);
    assert_eq!(again.json()["data"]["note"], "the payer finished at close");
    assert_eq!(
        act(credit_id, "refund", json!({"note": "x"})).await.code(),
        404001
    );
    assert_eq!(balance(&app, &author).await, 900, "credited once");

    // Refund: the payer has the money back; nothing was ever credited, nothing is reversed.
    let refunded = act(
        refund_id,
        "refund",
        json!({"note": "the payer asked for it back"}),
    )
    .await;
    assert_eq!(refunded.code(), 0, "{}", refunded.raw);
    assert_eq!(refunded.json()["data"]["action"], "refund");
    assert_eq!(
        payment_status(&app, &refund_trade).await,
        PaymentStatus::Refunded
    );
    await_reward(&app, &reader, refund_rid, "RewardStatusRefunded").await;
    assert_eq!(balance(&app, &author).await, 900);

    // The day reconciles: both payments and the refund are in the bill and the books.
    let (report, found) = reconcile_today(&app).await;
    assert_eq!(report.refunds, 1, "{report:?}");
    assert!(found.is_empty(), "{found:?}");
    assert_ledger_sound(&app).await;
}

async fn a_pending_payment_the_provider_reports_refunded_is_parked_not_polled(setup: Setup) {
    let wechat = FakeWechatPay::start().await;
    let app = wechat_app(setup, &wechat).await;
    let admin = member(&app, "admin").await;
    let reader = member(&app, "reader").await;
    let author = member(&app, "author").await;
    let article = publish(&app, &author, "退款的订单").await;
    let (_rid, trade_no) = wechat_reward(&app, &reader, article, 800).await;
    wechat.pay(&trade_no);
    wechat.refund_outside(&trade_no, "merchantconsole0001");
    let payments: PaymentService = app.service();
    let later = platform::db::now_millis() + 32 * 60 * 1000;
    let report = sweep(&payments, later, || true).await.unwrap();
    assert_eq!((report.unchanged, report.errors), (1, 0), "{report:?}");
    let kinds: Vec<Value> = discrepancies(&app, &admin)
        .await
        .iter()
        .map(|found| found["kind"].clone())
        .collect();
    assert_eq!(kinds, [json!("refunded")]);
    // Parked: the next sweeps leave it alone (no more queries at WeChat Pay).
    let calls = wechat.calls();
    assert_eq!(
        sweep(&payments, later + 60_000, || true).await.unwrap(),
        SweepReport::default()
    );
    assert_eq!(wechat.calls(), calls);
    assert_eq!(
        payment_status(&app, &trade_no).await,
        PaymentStatus::Pending
    );
    assert_ledger_sound(&app).await;
}

async fn a_refund_whose_answer_and_notification_are_lost_is_completed_by_the_sweep(setup: Setup) {
    let wechat = FakeWechatPay::start().await;
    let mut settings = wechat.settings();
    settings.wechatpay_timeout = Duration::from_secs(2);
    let app = setup
        .spawn(|config| {
            *config.settings_mut::<webook::payment::PaymentSettings>() = settings;
            config
                .settings_mut::<webook::auth::settings::AuthSettings>()
                .admins = vec![1];
        })
        .await;
    let admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (_rid, trade_no) = wechat_reward(&app, &reader, article, 1200).await;
    let paid = wechat.pay(&trade_no);
    deliver(&app, &wechat.notification(&paid)).await;
    platform::testing::wait_until("the author credited", || async {
        balance(&app, &author).await == 1080
    })
    .await;

    // WeChat Pay takes the refund but its answer never arrives.
    let asked = |body: Value| {
        let (app, token) = (&app, admin.token.clone());
        async move { post(app, "/payments/refunds", Some(&token), body).await }
    };
    wechat.lose_answers_to(Some("/v3/refund/"));
    let answer = asked(json!({"tradeNo": trade_no, "reason": "lost answer"})).await;
    wechat.lose_answers_to(None);
    // WeChat Pay has the refund; we timed out: recorded, outcome unknown.
    assert!(wechat.order(&trade_no).unwrap().refund.is_some());
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    assert_eq!(
        answer.json()["data"]["status"],
        "requested",
        "{}",
        answer.raw
    );
    let refund_no = answer.json()["data"]["refundNo"]
        .as_str()
        .unwrap()
        .to_owned();

    // The sweep asks again with the same refund number: WeChat Pay has one refund.
    let payments: PaymentService = app.service();
    let now = platform::db::now_millis();
    let report = sweep(&payments, now, || true).await.unwrap();
    assert_eq!((report.unchanged, report.errors), (1, 0), "{report:?}");
    let order = wechat.order(&trade_no).unwrap();
    assert_eq!(
        order.refund.as_ref().unwrap().result.out_refund_no,
        refund_no
    );
    // The money is back; the notification is lost. The next sweep's query completes it.
    wechat.finish_refund(&trade_no, true);
    let report = sweep(&payments, now + 60_000, || true).await.unwrap();
    assert_eq!((report.refunded, report.errors), (1, 0), "{report:?}");
    assert_eq!(
        payment_status(&app, &trade_no).await,
        PaymentStatus::Refunded
    );
    assert_eq!(balance(&app, &author).await, 0);
    let refund_requests = wechat
        .requests()
        .iter()
        .filter(|request| request.method == "POST" && request.path_and_query.contains("/refund/"))
        .count();
    // Asked at least twice (the app's own sweep job may ask too), always under one number:
    // one refund at WeChat Pay, one in our books.
    assert!(refund_requests >= 2, "asked again: {refund_requests}");
    let refunds: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM payment_refunds")
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap();
    assert_eq!(refunds, 1);
    let (_, found) = reconcile_today(&app).await;
    assert!(found.is_empty(), "{found:?}");
    assert_ledger_sound(&app).await;
}

async fn a_refund_the_provider_cannot_pay_back_waits_and_completes_when_it_succeeds(setup: Setup) {
    let Paid {
        app,
        wechat,
        admin,
        author,
        reader: _,
        rid: _,
        trade_no,
    } = paid_reward(setup, 600).await;
    let body = json!({"tradeNo": trade_no, "reason": "card closed?"});
    let first = post(&app, "/payments/refunds", Some(&admin.token), body).await;
    assert_eq!(
        first.json()["data"]["status"],
        "processing",
        "{}",
        first.raw
    );
    // The payer's card is closed: ABNORMAL.
    let notice = wechat.finish_refund(&trade_no, false);
    let (status, body) = deliver(&app, &wechat.refund_notification(&notice)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let refunds = get(
        &app,
        "/payments/refunds?status=abnormal",
        Some(&admin.token),
    )
    .await
    .json();
    assert!(
        refunds["data"]["items"][0]["detail"]
            .as_str()
            .unwrap()
            .starts_with("abnormal"),
        "{refunds}"
    );
    assert_eq!(
        payment_status(&app, &trade_no).await,
        PaymentStatus::Succeeded
    );
    assert_eq!(balance(&app, &author).await, 540, "nothing reversed yet");
    let found = discrepancies(&app, &admin).await;
    assert_eq!(found[0]["kind"], "refund_abnormal", "{found:?}");
    assert_eq!(found[0]["actions"], json!(["resolve"]));
    // Still under way: no second refund may be asked meanwhile (WeChat would refuse it too).
    let again = post(
        &app,
        "/payments/refunds",
        Some(&admin.token),
        json!({"tradeNo": trade_no, "reason": "again"}),
    )
    .await;
    assert_eq!(again.json()["data"]["status"], "abnormal", "{}", again.raw);

    // The merchant handles it at WeChat Pay; the notification of its success is lost. The
    // sweep keeps asking about the abnormal refund and completes it.
    wechat.settle_abnormal_refund(&trade_no);
    let payments: PaymentService = app.service();
    let report = sweep(&payments, platform::db::now_millis(), || true)
        .await
        .unwrap();
    assert_eq!((report.refunded, report.errors), (1, 0), "{report:?}");
    assert_eq!(
        payment_status(&app, &trade_no).await,
        PaymentStatus::Refunded
    );
    assert_eq!(
        balance(&app, &author).await,
        0,
        "the credit reversed once it succeeded"
    );
    let (_, found) = reconcile_today(&app).await;
    assert!(found.is_empty(), "{found:?}");
    assert_ledger_sound(&app).await;
}

async fn an_amount_mismatch_is_refunded_for_the_providers_amount(setup: Setup) {
    let app = app(setup).await;
    let admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = reward(&app, &reader, article, 200).await;
    confirm(&app, &trade_no, "success").await;
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    // The provider's books say 5 fen more than ours.
    sqlx::query("UPDATE fake_pay_orders SET amt = amt + 5 WHERE trade_no = $1")
        .bind(&trade_no)
        .execute(app.platform.db.writer())
        .await
        .unwrap();
    let (_, found) = reconcile_today(&app).await;
    assert_eq!(found, [("amount_mismatch".to_owned(), 1)], "{found:?}");
    let id = discrepancies(&app, &admin).await[0]["id"].as_i64().unwrap();
    let refunded = post(
        &app,
        &format!("/payments/discrepancies/{id}/refund"),
        Some(&admin.token),
        json!({"note": "the provider charged another amount: give it all back"}),
    )
    .await;
    assert_eq!(refunded.code(), 0, "{}", refunded.raw);
    let refunds = get(&app, "/payments/refunds", Some(&admin.token))
        .await
        .json();
    assert_eq!(refunds["data"]["items"][0]["amt"], 205, "{refunds}");
    assert_eq!(
        refunds["data"]["items"][0]["status"], "succeeded",
        "{refunds}"
    );
    await_reward(&app, &reader, rid, "RewardStatusRefunded").await;
    assert_eq!(
        balance(&app, &author).await,
        0,
        "the 180-fen credit reversed"
    );
    assert_ledger_sound(&app).await;
}

async fn two_people_acting_on_one_discrepancy_cannot_both_act(setup: Setup) {
    let app = app(setup).await;
    let admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let payments: PaymentService = app.service();
    let (rid, trade_no) = reward(&app, &reader, article, 1000).await;
    let later = platform::db::now_millis() + 32 * 60 * 1000;
    sweep(&payments, later, || true).await.unwrap();
    await_status(&app, &reader, rid, "RewardStatusFailed").await;
    sqlx::query(
        "UPDATE fake_pay_orders SET state = 'SUCCESS', transaction_id = 'lateone', paid_at = $1 \
         WHERE trade_no = $2",
    )
    .bind(platform::db::now_millis())
    .bind(&trade_no)
    .execute(app.platform.db.writer())
    .await
    .unwrap();
    reconcile_today(&app).await;
    let id = discrepancies(&app, &admin).await[0]["id"].as_i64().unwrap();
    // One admin credits, another refunds, at the same moment.
    let (credit_path, refund_path) = (
        format!("/payments/discrepancies/{id}/credit"),
        format!("/payments/discrepancies/{id}/refund"),
    );
    let (credit, refund) = tokio::join!(
        post(
            &app,
            &credit_path,
            Some(&admin.token),
            json!({"note": "credit it"}),
        ),
        post(
            &app,
            &refund_path,
            Some(&admin.token),
            json!({"note": "refund it"}),
        ),
    );
    let codes = [credit.code(), refund.code()];
    assert_eq!(
        codes.iter().filter(|code| **code == 0).count(),
        1,
        "exactly one acted: {} / {}",
        credit.raw,
        refund.raw
    );
    assert!(
        codes.iter().any(|code| *code == 409001 || *code == 404001),
        "{codes:?}"
    );
    let winner = if credit.code() == 0 {
        "credit"
    } else {
        "refund"
    };
    let found = discrepancies(&app, &admin).await;
    assert_eq!(found[0]["action"], winner, "{found:?}");
    if winner == "credit" {
        await_reward(&app, &reader, rid, "RewardStatusPayed").await;
        assert_eq!(balance(&app, &author).await, 900);
        assert_eq!(
            payment_status(&app, &trade_no).await,
            PaymentStatus::Succeeded
        );
    } else {
        await_reward(&app, &reader, rid, "RewardStatusRefunded").await;
        assert_eq!(balance(&app, &author).await, 0);
    }
    assert_ledger_sound(&app).await;
}

async fn a_status_poll_asks_the_provider_once_when_the_notification_is_lost(setup: Setup) {
    let wechat = FakeWechatPay::start().await;
    let app = wechat_app(setup, &wechat).await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (paid_rid, paid_trade) = wechat_reward(&app, &reader, article, 700).await;
    let (open_rid, open_trade) = wechat_reward(&app, &reader, article, 300).await;
    wechat.pay(&paid_trade);
    // Both orders were made a minute ago: old enough for the payer to have paid.
    sqlx::query("UPDATE rewards SET ctime = ctime - 60000")
        .execute(app.platform.db.writer())
        .await
        .unwrap();
    let queries = |trade_no: &str| {
        wechat
            .requests()
            .iter()
            .filter(|request| {
                request.method == "GET"
                    && request
                        .path_and_query
                        .contains(&format!("out-trade-no/{trade_no}"))
            })
            .count()
    };
    await_reward(&app, &reader, paid_rid, "RewardStatusPayed").await;
    assert_eq!(queries(&paid_trade), 1);
    platform::testing::wait_until("the author credited", || async {
        balance(&app, &author).await == 630
    })
    .await;
    // An unpaid one: two polls in a row ask once (each poll waits its 3 s out).
    for _ in 0..2 {
        let status = post(
            &app,
            "/reward/detail",
            Some(&reader.token),
            json!({"rid": open_rid}),
        )
        .await
        .json();
        assert_eq!(status["data"], "RewardStatusInit", "{status}");
    }
    assert_eq!(queries(&open_trade), 1);
    assert_ledger_sound(&app).await;
}

async fn the_command_line_refunds_lists_and_acts(setup: Setup) {
    use webook::payment::cli::{execute, PaymentsCommand};
    let app = app(setup).await;
    let _admin = member(&app, "admin").await;
    let (author, reader, article) = author_and_reader(&app).await;
    let (rid, trade_no) = reward(&app, &reader, article, 400).await;
    confirm(&app, &trade_no, "success").await;
    await_status(&app, &reader, rid, "RewardStatusPayed").await;
    let payments: PaymentService = app.service();

    let printed = execute(
        &payments,
        PaymentsCommand::Refund {
            trade_no: trade_no.clone(),
            reason: "asked by support".to_owned(),
            allow_negative: false,
        },
        "cli:test@host",
    )
    .await
    .unwrap();
    assert!(printed.contains("succeeded"), "{printed}");
    assert!(printed.contains(&trade_no), "{printed}");
    await_reward(&app, &reader, rid, "RewardStatusRefunded").await;
    assert_eq!(balance(&app, &author).await, 0);
    let listed = execute(
        &payments,
        PaymentsCommand::Refunds {
            status: Some("succeeded".to_owned()),
            limit: 10,
        },
        "cli:test@host",
    )
    .await
    .unwrap();
    assert_eq!(listed.lines().count(), 2, "{listed}");

    // A refund of what is already refunded is one line saying why.
    let again = execute(
        &payments,
        PaymentsCommand::Refund {
            trade_no: "rwnosuchtrade000000000001".to_owned(),
            reason: "x".to_owned(),
            allow_negative: false,
        },
        "cli:test@host",
    )
    .await
    .unwrap_err();
    assert_eq!(again.to_string(), "no such payment");

    // A discrepancy is resolved, with the operator in the note.
    payments
        .record(
            &webook::payment::model::NewDiscrepancy {
                bill_date: String::new(),
                kind: "payment_not_in_bill",
                trade_no: trade_no.clone(),
                provider_amt: None,
                our_amt: Some(400),
                detail: "injected".to_owned(),
                status: "open",
            },
            platform::db::now_millis(),
        )
        .await
        .unwrap();
    let open = execute(
        &payments,
        PaymentsCommand::Discrepancies {
            status: "open".to_owned(),
            limit: 10,
        },
        "cli:test@host",
    )
    .await
    .unwrap();
    assert!(
        open.contains("payment_not_in_bill") && open.contains("resolve"),
        "{open}"
    );
    let id: i64 = open
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let refused = execute(
        &payments,
        PaymentsCommand::Act {
            id,
            action: "credit".to_owned(),
            note: "x".to_owned(),
            allow_negative: false,
        },
        "cli:test@host",
    )
    .await
    .unwrap_err();
    assert!(
        refused.to_string().contains("cannot be fixed with credit"),
        "{refused}"
    );
    let done = execute(
        &payments,
        PaymentsCommand::Act {
            id,
            action: "resolve".to_owned(),
            note: "the bill came late".to_owned(),
            allow_negative: false,
        },
        "cli:test@host",
    )
    .await
    .unwrap();
    assert!(done.contains("cli:test@host"), "{done}");
    assert!(done.contains("the bill came late"), "{done}");
    assert!(
        !done.contains("[cli:"),
        "the operator is not written into the note: {done}"
    );
    assert!(done.contains("resolved"), "{done}");
    assert_ledger_sound(&app).await;
}

async fn concurrent_refund_requests_and_notifications_refund_and_reverse_once(setup: Setup) {
    let Paid {
        app,
        wechat,
        admin,
        author,
        reader,
        rid,
        trade_no,
    } = paid_reward(setup, 3000).await;

    // Ten admins' clicks at once.
    let body = json!({"tradeNo": trade_no, "reason": "concurrent"});
    let answers = futures_util::future::join_all(
        (0..10).map(|_| post(&app, "/payments/refunds", Some(&admin.token), body.clone())),
    )
    .await;
    let mut refund_nos: Vec<String> = answers
        .iter()
        .map(|answer| {
            assert_eq!(answer.code(), 0, "{}", answer.raw);
            answer.json()["data"]["refundNo"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    refund_nos.dedup();
    assert_eq!(refund_nos.len(), 1, "one refund: {refund_nos:?}");
    let refunds: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM payment_refunds")
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap();
    assert_eq!(refunds, 1);

    // WeChat's success notification, ten times at once.
    let notice = wechat.finish_refund(&trade_no, true);
    let sealed: Vec<_> = (0..10)
        .map(|_| wechat.refund_notification(&notice))
        .collect();
    let delivered =
        futures_util::future::join_all(sealed.iter().map(|sealed| deliver(&app, sealed))).await;
    for (status, body) in &delivered {
        assert_eq!(*status, StatusCode::OK, "{body}");
    }
    await_reward(&app, &reader, rid, "RewardStatusRefunded").await;
    let reversal: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM account_entries WHERE biz = 'refund'")
            .fetch_one(app.platform.db.pool())
            .await
            .unwrap();
    assert_eq!(reversal, 3, "reversed once");
    assert_eq!(balance(&app, &author).await, 0);
    assert_eq!(platform_revenue(&app).await, 0);
    let (_, found) = reconcile_today(&app).await;
    assert!(found.is_empty(), "{found:?}");
    assert_ledger_sound(&app).await;
}

crate::setup_tests!(
    concurrent_refund_requests_and_notifications_refund_and_reverse_once,
    a_refund_whose_answer_and_notification_are_lost_is_completed_by_the_sweep,
    a_refund_the_provider_cannot_pay_back_waits_and_completes_when_it_succeeds,
    an_amount_mismatch_is_refunded_for_the_providers_amount,
    two_people_acting_on_one_discrepancy_cannot_both_act,
    a_status_poll_asks_the_provider_once_when_the_notification_is_lost,
    the_command_line_refunds_lists_and_acts,
    the_payer_entering_their_password_at_close_ends_paid_and_credited,
    a_refund_is_asked_once_applied_once_reversed_and_reconciled,
    a_refund_that_would_overdraw_the_author_is_refused_unless_allowed,
    reconciliation_finds_a_ledger_only_posting_and_a_shifted_fen,
    a_payment_that_arrived_after_failure_is_credited_or_refunded_with_one_action,
    a_pending_payment_the_provider_reports_refunded_is_parked_not_polled,
);

/// A POST to a real server with `token`: the answer's JSON.
async fn server_post(server: &Server, token: &str, path: &str, body: Value) -> Value {
    reqwest::Client::new()
        .post(server.url(path))
        .header("Authorization", format!("Bearer {token}"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A GET from a real server with `token`: the answer's JSON.
async fn server_get(server: &Server, token: &str, path: &str) -> Value {
    reqwest::Client::new()
        .get(server.url(path))
        .header("Authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Starts the release binary on `dir` (embedded SQLite) against the WeChat Pay stand-in, the
/// sweep every second, user 1 an admin.
fn server_on(dir: &std::path::Path, wechat: &FakeWechatPay) -> Server {
    let settings = wechat.settings();
    let mut command = crate::common::process::webook(dir);
    command
        .env("WEBOOK_ADMINS", "[1]")
        .env("WEBOOK_AUTH_RATE_LIMIT", "1000")
        .env("WEBOOK_JOB_POLL_MAX", "200ms")
        .env("WEBOOK_PAY_SWEEP_SCHEDULE", "@every 1s")
        .env("WEBOOK_PAY_PROVIDER", "wechat")
        .env("WEBOOK_WECHATPAY_ENDPOINT", &settings.wechatpay_endpoint)
        .env("WEBOOK_WECHATPAY_MCHID", &settings.wechatpay_mchid)
        .env("WEBOOK_WECHATPAY_APPID", &settings.wechatpay_appid)
        .env(
            "WEBOOK_WECHATPAY_MERCHANT_SERIAL",
            &settings.wechatpay_merchant_serial,
        )
        .env(
            "WEBOOK_WECHATPAY_MERCHANT_KEY",
            settings.wechatpay_merchant_key.expose(),
        )
        .env(
            "WEBOOK_WECHATPAY_API_V3_KEY",
            settings.wechatpay_api_v3_key.expose(),
        )
        .env(
            "WEBOOK_WECHATPAY_PLATFORM_SERIAL",
            &settings.wechatpay_platform_serial,
        )
        .env(
            "WEBOOK_WECHATPAY_PLATFORM_PUBLIC_KEY",
            &settings.wechatpay_platform_public_key,
        )
        .env(
            "WEBOOK_WECHATPAY_NOTIFY_URL",
            &settings.wechatpay_notify_url,
        )
        .env("WEBOOK_WECHATPAY_TIMEOUT", "3s");
    Server::start(command)
}

/// Delivers `notification` to a real server's `/pay/wechat/notify`: its status.
async fn server_deliver(server: &Server, notification: &SealedNotification) -> StatusCode {
    reqwest::Client::new()
        .post(server.url("/pay/wechat/notify"))
        .headers(notification.header_map())
        .body(notification.body.clone())
        .send()
        .await
        .unwrap()
        .status()
}

/// A server killed with SIGKILL while WeChat Pay holds the refund it asked for (the answer never
/// came back): the next process's sweep asks again under the same refund number, WeChat's
/// notification completes it, and the credit is reversed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_refund_completes_it_after_restart() {
    let wechat = FakeWechatPay::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = server_on(dir.path(), &wechat);
    let admin = server
        .sign_up_and_log_in("admin@example.com", "hello#world123")
        .await;
    let author = server
        .sign_up_and_log_in("author@example.com", "hello#world123")
        .await;
    let reader = server
        .sign_up_and_log_in("reader@example.com", "hello#world123")
        .await;
    let article = server_post(
        &server,
        &author,
        "/articles/publish",
        json!({"title": "kill -9", "content": "<p>refund</p>"}),
    )
    .await["data"]
        .as_i64()
        .unwrap();
    let rewarded = server_post(
        &server,
        &reader,
        "/articles/pub/reward",
        json!({"id": article, "amt": 1500}),
    )
    .await;
    assert_eq!(rewarded["code"], 0, "{rewarded}");
    let trade_no = wechat.requests()[0].body.clone();
    let trade_no: String = serde_json::from_slice::<Value>(&trade_no).unwrap()["out_trade_no"]
        .as_str()
        .unwrap()
        .to_owned();
    let paid = wechat.pay(&trade_no);
    assert_eq!(
        server_deliver(&server, &wechat.notification(&paid)).await,
        StatusCode::OK
    );
    let balance = |server: &Server, token: String| {
        let server_url = server.url("/account");
        async move {
            reqwest::Client::new()
                .get(server_url)
                .header("Authorization", format!("Bearer {token}"))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()["data"]["balance"]
                .as_i64()
                .unwrap()
        }
    };
    platform::testing::wait_until("the author credited", || {
        { balance(&server, author.clone()) }.then(|balance| async move { balance == 1350 })
    })
    .await;

    // The refund reaches WeChat Pay; its answer never comes back; the server dies.
    wechat.lose_answers_to(Some("/v3/refund/"));
    let asking = {
        let (url, token, trade_no) = (
            server.url("/payments/refunds"),
            admin.clone(),
            trade_no.clone(),
        );
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(url)
                .header("Authorization", format!("Bearer {token}"))
                .json(&json!({"tradeNo": trade_no, "reason": "killed mid-refund"}))
                .send()
                .await
        })
    };
    platform::testing::wait_until("WeChat Pay has the refund", || async {
        wechat.order(&trade_no).unwrap().refund.is_some()
    })
    .await;
    let mut server = server;
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    assert!(
        asking.await.unwrap().is_err(),
        "no answer from a killed server"
    );
    wechat.lose_answers_to(None);
    let refund_no = wechat
        .order(&trade_no)
        .unwrap()
        .refund
        .unwrap()
        .result
        .out_refund_no;

    // The next process: its sweep asks WeChat Pay again with the same number.
    let server = server_on(dir.path(), &wechat);
    let admin = server.log_in("admin@example.com", "hello#world123").await;
    platform::testing::wait_until("the refund processing after restart", || async {
        let refunds = server_get(&server, &admin, "/payments/refunds").await;
        refunds["data"]["items"][0]["status"] == "processing"
    })
    .await;
    let refunds = server_get(&server, &admin, "/payments/refunds").await;
    assert_eq!(
        refunds["data"]["items"].as_array().unwrap().len(),
        1,
        "{refunds}"
    );
    assert_eq!(refunds["data"]["items"][0]["refundNo"], refund_no.as_str());
    let notice = wechat.finish_refund(&trade_no, true);
    assert_eq!(
        server_deliver(&server, &wechat.refund_notification(&notice)).await,
        StatusCode::OK
    );
    let author = server.log_in("author@example.com", "hello#world123").await;
    platform::testing::wait_until("the credit reversed", || {
        { balance(&server, author.clone()) }.then(|balance| async move { balance == 0 })
    })
    .await;
    let refund_posts = wechat
        .requests()
        .iter()
        .filter(|request| request.method == "POST" && request.path_and_query.contains("/refund/"))
        .count();
    assert!(refund_posts >= 2, "asked again after the restart");
    let status = server_post(
        &server,
        &reader_token(&server).await,
        "/reward/detail",
        json!({"rid": rewarded["data"]["rid"]}),
    )
    .await;
    assert_eq!(status["data"], "RewardStatusRefunded", "{status}");
    sqlx::any::install_default_drivers();
    let db = sqlx::AnyPool::connect(&format!(
        "sqlite://{}",
        dir.path().join("data/webook.db").display()
    ))
    .await
    .unwrap();
    let total: i64 =
        sqlx::query_scalar("SELECT CAST(COALESCE(SUM(amt), 0) AS BIGINT) FROM account_entries")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(total, 0, "the ledger sums to 0");
    let reversal: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM account_entries WHERE biz = 'refund'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(reversal, 3, "reversed once");
}

async fn reader_token(server: &Server) -> String {
    server.log_in("reader@example.com", "hello#world123").await
}
