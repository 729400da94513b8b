//! The scheduling of payments against the loopback WeChat Pay (`common::fake_wechatpay`), on
//! SQLite and PostgreSQL: young pending payments are queried actively (`payment_watch`) — a
//! payment whose notification is lost is settled at its first step by the durable job; an unpaid
//! one is queried once per step however often the watch runs, even by two runs at once, with a
//! back-off while the provider is down — and reconciliation catches up (`payment_reconcile`): a
//! bill not ready yet is reconciled by a later run, days no run reached are reconciled by the
//! next, a done day is not fetched again, a given day is re-run on demand, and failing days are
//! reported on `/readyz`. The runs are called directly with chosen clocks, or triggered on the
//! SQL scheduler and awaited by condition.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use chrono::{Days, NaiveDate};
use platform::{db::now_millis, testing::wait_until};
use scheduler::sql::{Misfire, NewJob, OverlapPolicy, SqlJobStore};
use serde_json::json;
use webook::{
    account::Ledger,
    payment::{
        catch_up, china_day_bounds, china_today, watch, DayStatus, Payment, PaymentService,
        PaymentSettings, PaymentStatus,
    },
    testing::TestApp,
};

use crate::common::{
    fake_wechatpay::{FakeWechatPay, Mode},
    get, member, post, publish, Member, Setup,
};

macro_rules! both_databases {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Setup {
                        db: platform::config::DatabaseKind::Sqlite,
                        cluster: false,
                    })
                    .await
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Setup {
                        db: platform::config::DatabaseKind::Postgres,
                        cluster: false,
                    })
                    .await
                }
            )+
        }
    };
}

both_databases!(
    a_lost_notification_is_settled_by_the_watch_at_its_first_step,
    an_unpaid_order_is_queried_once_per_step_and_backs_off_while_the_provider_is_down,
    a_bill_not_ready_is_reconciled_by_a_later_run_and_a_done_day_is_not_fetched_again,
    days_no_run_reached_are_reconciled_by_the_next_run,
    days_that_fail_are_retried_after_a_back_off_and_reported_on_readyz,
);

/// An app paying through `wechat`, its payment jobs quiet unless `adjust` says otherwise.
async fn app(
    setup: Setup,
    wechat: &FakeWechatPay,
    adjust: impl FnOnce(&mut PaymentSettings),
) -> TestApp {
    let mut settings = wechat.settings();
    settings.pay_sweep_schedule = "@yearly".to_owned();
    settings.pay_reconcile_schedule = "@yearly".to_owned();
    settings.pay_watch_schedule = "@yearly".to_owned();
    adjust(&mut settings);
    setup
        .spawn(|config| {
            *config.settings_mut::<PaymentSettings>() = settings;
            // Each reward signs up two members from one address.
            config
                .settings_mut::<webook::auth::settings::AuthSettings>()
                .auth_rate_limit = 1_000;
            config
                .settings_mut::<webook::jobs::settings::JobSettings>()
                .job_poll_max = Duration::from_millis(100);
        })
        .await
}

/// A reader rewards an author's new article with `amt` fen: (reader, reward id, its payment).
async fn reward(app: &TestApp, amt: i64) -> (Member, i64, Payment) {
    let author = member(app, &format!("author{amt}")).await;
    let reader = member(app, &format!("reader{amt}")).await;
    let article = publish(app, &author, "定时任务与对账").await;
    let answer = post(
        app,
        "/articles/pub/reward",
        Some(&reader.token),
        json!({"id": article, "amt": amt}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    let rid = answer.json()["data"]["rid"].as_i64().unwrap();
    let payments: PaymentService = app.service();
    let trade_no: String = sqlx::query_scalar("SELECT trade_no FROM rewards WHERE id = $1")
        .bind(rid)
        .fetch_one(payments.store().db().pool())
        .await
        .unwrap();
    let payment = payments
        .store()
        .by_trade_no(&trade_no)
        .await
        .unwrap()
        .unwrap();
    (author, rid, payment)
}

async fn status_of(app: &TestApp, trade_no: &str) -> PaymentStatus {
    app.service::<PaymentService>()
        .store()
        .by_trade_no(trade_no)
        .await
        .unwrap()
        .unwrap()
        .status
}

async fn queries_done(app: &TestApp, trade_no: &str) -> i64 {
    sqlx::query_scalar("SELECT queries_done FROM payments WHERE trade_no = $1")
        .bind(trade_no)
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap()
}

/// `date`'s row of `payment_reconcile_days`: (status, attempts).
async fn day_row(app: &TestApp, date: NaiveDate) -> Option<(String, i64)> {
    sqlx::query_as("SELECT status, attempts FROM payment_reconcile_days WHERE bill_date = $1")
        .bind(date.format("%Y-%m-%d").to_string())
        .fetch_optional(app.platform.db.pool())
        .await
        .unwrap()
}

/// `hour`:30 China Standard Time on `date`, in ms.
fn china_half_past(date: NaiveDate, hour: i64) -> i64 {
    china_day_bounds(date).0 + (hour * 60 + 30) * 60 * 1000
}

fn days_after(date: NaiveDate, days: i64) -> NaiveDate {
    if days >= 0 {
        date.checked_add_days(Days::new(days as u64)).unwrap()
    } else {
        date.checked_sub_days(Days::new(days.unsigned_abs()))
            .unwrap()
    }
}

fn text(date: NaiveDate) -> String {
    date.format("%Y-%m-%d").to_string()
}

async fn balance(app: &TestApp, member: &Member) -> i64 {
    get(app, "/account", Some(&member.token)).await.json()["data"]["balance"]
        .as_i64()
        .unwrap()
}

async fn a_lost_notification_is_settled_by_the_watch_at_its_first_step(setup: Setup) {
    let wechat = FakeWechatPay::start().await;
    // The payer pays at once; WeChat's notification never arrives (this stand-in sends none).
    wechat.set_pay_on_create(true);
    let app = app(setup, &wechat, |settings| {
        settings.pay_watch_schedule = "@every 1s".to_owned();
        settings.pay_query_after = vec![Duration::from_secs(1), Duration::from_secs(60)];
    })
    .await;
    let (author, _rid, payment) = reward(&app, 2000).await;
    let job = app
        .service::<SqlJobStore>()
        .find("payment_watch")
        .await
        .unwrap()
        .expect("the watch job is created at start-up");
    assert_eq!(
        (job.cron.as_str(), job.executor.as_str()),
        ("@every 1s", "payment_watch")
    );

    wait_until("the watch to settle the paid order", || async {
        status_of(&app, &payment.trade_no).await == PaymentStatus::Succeeded
    })
    .await;
    // One query, at the first step; the seller credited the author (2000 less 10 %).
    assert_eq!(wechat.queries_of(&payment.trade_no), 1);
    assert_eq!(queries_done(&app, &payment.trade_no).await, 1);
    wait_until("the author to be credited", || async {
        balance(&app, &author).await == 1800
    })
    .await;
}

async fn an_unpaid_order_is_queried_once_per_step_and_backs_off_while_the_provider_is_down(
    setup: Setup,
) {
    let wechat = FakeWechatPay::start().await;
    let app = app(setup, &wechat, |_| {}).await;
    let payments: PaymentService = app.service();
    let steps = [
        Duration::from_secs(60),
        Duration::from_secs(5 * 60),
        Duration::from_secs(15 * 60),
    ];
    let (_, _, young) = reward(&app, 300).await;
    let trade_no = young.trade_no.as_str();
    let at = |secs: i64| young.ctime + secs * 1000;
    let queries = || wechat.queries_of(trade_no);

    // Before its first step: not queried.
    let report = watch(&payments, &steps, at(30), || true).await.unwrap();
    assert_eq!((report.queried, queries()), (0, 0), "{report:?}");
    // At its first step, by two runs at once: one query; NOTPAY leaves it pending.
    let (first, second) = tokio::join!(
        watch(&payments, &steps, at(61), || true),
        watch(&payments, &steps, at(61), || true),
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.queried + second.queried, 1, "{first:?} {second:?}");
    assert_eq!(first.open + second.open, 1, "{first:?} {second:?}");
    assert_eq!(queries(), 1);
    assert_eq!(status_of(&app, trade_no).await, PaymentStatus::Pending);
    // Runs later in the same step ask nothing.
    for secs in [62, 120, 299] {
        let report = watch(&payments, &steps, at(secs), || true).await.unwrap();
        assert_eq!(report.queried, 0, "{report:?}");
    }
    assert_eq!(queries(), 1);
    // The second step: once.
    watch(&payments, &steps, at(301), || true).await.unwrap();
    watch(&payments, &steps, at(302), || true).await.unwrap();
    assert_eq!((queries(), queries_done(&app, trade_no).await), (2, 2));

    // The provider is down at the third step: the step is given back, the payment backs off
    // (15 s) and the run stops asking.
    wechat.set_mode(Mode::ServerError);
    let report = watch(&payments, &steps, at(901), || true).await.unwrap();
    assert_eq!((report.queried, report.errors), (1, 1), "{report:?}");
    assert_eq!((queries(), queries_done(&app, trade_no).await), (3, 2));
    let report = watch(&payments, &steps, at(910), || true).await.unwrap();
    assert_eq!(report.queried, 0, "backing off: {report:?}");
    assert_eq!(queries(), 3);
    // Back up after the back-off: the step is taken, once.
    wechat.set_mode(Mode::Normal);
    let report = watch(&payments, &steps, at(917), || true).await.unwrap();
    assert_eq!((report.queried, report.open), (1, 1), "{report:?}");
    watch(&payments, &steps, at(1000), || true).await.unwrap();
    assert_eq!((queries(), queries_done(&app, trade_no).await), (4, 3));

    // An order whose steps are all overdue (the deployment was down): one query takes them all.
    let (_, _, late) = reward(&app, 400).await;
    let report = watch(&payments, &steps, late.ctime + 20 * 60 * 1000, || true)
        .await
        .unwrap();
    assert_eq!(report.queried, 1, "{report:?}");
    assert_eq!(wechat.queries_of(&late.trade_no), 1);
    assert_eq!(queries_done(&app, &late.trade_no).await, 3);
    // Past its expiry a payment is the sweep's, not the watch's.
    let (_, _, expired) = reward(&app, 500).await;
    let report = watch(&payments, &steps, expired.expires_at + 1, || true)
        .await
        .unwrap();
    assert_eq!(report.queried, 0, "{report:?}");
    assert_eq!(wechat.queries_of(&expired.trade_no), 0);
}

async fn a_bill_not_ready_is_reconciled_by_a_later_run_and_a_done_day_is_not_fetched_again(
    setup: Setup,
) {
    let wechat = FakeWechatPay::start().await;
    let app = app(setup, &wechat, |_| {}).await;
    let (payments, ledger): (PaymentService, Ledger) = (app.service(), app.service());
    // Paid today at the provider; the notification was lost.
    let (_, _, payment) = reward(&app, 700).await;
    wechat.pay(&payment.trade_no);
    let today = china_today(chrono::Utc::now());

    // Tomorrow 10:30: today's bill is still being generated; the six days before have no
    // trades (no bill: nothing to compare, done).
    wechat.set_bill_not_ready(Some(today));
    let first_run = china_half_past(days_after(today, 1), 10);
    let report = catch_up(&payments, &ledger, 7, first_run, || true)
        .await
        .unwrap();
    let fetched: Vec<String> = (-6..=0).map(|back| text(days_after(today, back))).collect();
    assert_eq!(wechat.bill_requests(), fetched);
    assert_eq!(report.behind, [(today, "not_ready")], "{report:?}");
    assert!(report.failed().is_empty(), "{report:?}");
    assert_eq!(
        report
            .days
            .iter()
            .filter(|day| day.status == DayStatus::Done)
            .count(),
        6
    );
    assert_eq!(
        day_row(&app, today).await,
        Some(("not_ready".to_owned(), 1))
    );
    assert_eq!(
        status_of(&app, &payment.trade_no).await,
        PaymentStatus::Pending
    );

    // An hour later the bill is there: only today is fetched, and the payment is settled.
    wechat.set_bill_not_ready(None);
    let report = catch_up(&payments, &ledger, 7, first_run + 3_600_000, || true)
        .await
        .unwrap();
    assert_eq!(wechat.bill_requests()[7..], [text(today)]);
    assert!(report.behind.is_empty(), "{report:?}");
    let reconciled = report.days[0].report.as_ref().unwrap();
    assert_eq!(
        reconciled.found.get("unsettled_payment"),
        Some(&1),
        "{reconciled:?}"
    );
    assert_eq!(day_row(&app, today).await, Some(("done".to_owned(), 2)));
    assert_eq!(
        status_of(&app, &payment.trade_no).await,
        PaymentStatus::Succeeded
    );

    // Every day is done: the next run fetches nothing.
    let report = catch_up(&payments, &ledger, 7, first_run + 7_200_000, || true)
        .await
        .unwrap();
    assert!(report.days.is_empty(), "{report:?}");
    assert_eq!(wechat.bill_requests().len(), 8);

    // A job with cfg {"date": …} re-runs that day, done or not.
    let jobs: SqlJobStore = app.service();
    let id = jobs
        .create(&NewJob {
            name: "reconcile-one-day".to_owned(),
            cron: "@yearly".to_owned(),
            timezone: "UTC".to_owned(),
            executor: "payment_reconcile".to_owned(),
            cfg: json!({ "date": text(today) }).to_string(),
            misfire: Misfire::Skip,
            overlap: OverlapPolicy::Forbid,
            timeout_ms: 60_000,
        })
        .await
        .unwrap();
    jobs.trigger(id).await.unwrap();
    wait_until("the given day to be reconciled again", || async {
        day_row(&app, today).await == Some(("done".to_owned(), 3))
    })
    .await;
    assert_eq!(wechat.bill_requests()[8..], [text(today)]);
}

async fn days_no_run_reached_are_reconciled_by_the_next_run(setup: Setup) {
    let wechat = FakeWechatPay::start().await;
    let app = app(setup, &wechat, |_| {}).await;
    let (payments, ledger): (PaymentService, Ledger) = (app.service(), app.service());
    let today = china_today(chrono::Utc::now());
    // Today 10:30: the week before is reconciled.
    let report = catch_up(&payments, &ledger, 7, china_half_past(today, 10), || true)
        .await
        .unwrap();
    assert_eq!(report.days.len(), 7, "{report:?}");
    assert!(report.behind.is_empty(), "{report:?}");
    // Paid today, notification lost; then no run for two days (the deployment was down).
    let (_, _, payment) = reward(&app, 900).await;
    wechat.pay(&payment.trade_no);

    let report = catch_up(
        &payments,
        &ledger,
        7,
        china_half_past(days_after(today, 2), 10),
        || true,
    )
    .await
    .unwrap();
    // Both missed days, and only they, oldest first.
    assert_eq!(
        wechat.bill_requests()[7..],
        [text(today), text(days_after(today, 1))]
    );
    assert_eq!(
        report
            .days
            .iter()
            .map(|day| (day.date, day.status))
            .collect::<Vec<_>>(),
        [
            (today, DayStatus::Done),
            (days_after(today, 1), DayStatus::Done)
        ]
    );
    assert!(report.behind.is_empty(), "{report:?}");
    assert_eq!(
        day_row(&app, days_after(today, 1)).await,
        Some(("done".to_owned(), 1))
    );
    assert_eq!(
        status_of(&app, &payment.trade_no).await,
        PaymentStatus::Succeeded
    );
}

async fn days_that_fail_are_retried_after_a_back_off_and_reported_on_readyz(setup: Setup) {
    let wechat = FakeWechatPay::start().await;
    let app = app(setup, &wechat, |_| {}).await;
    let (payments, ledger): (PaymentService, Ledger) = (app.service(), app.service());
    wechat.set_mode(Mode::ServerError);
    let now = now_millis();
    let report = catch_up(&payments, &ledger, 7, now, || true).await.unwrap();
    // Each day failed, none stopped the others; each waits for its back-off.
    assert_eq!(report.failed().len(), 7, "{report:?}");
    assert_eq!(report.behind.len(), 7, "{report:?}");
    let report = catch_up(&payments, &ledger, 7, now + 60_000, || true)
        .await
        .unwrap();
    assert!(report.days.is_empty(), "backing off: {report:?}");
    assert_eq!(report.behind.len(), 7, "{report:?}");
    let report = catch_up(&payments, &ledger, 7, now + 16 * 60_000, || true)
        .await
        .unwrap();
    assert_eq!(report.failed().len(), 7, "after the back-off: {report:?}");
    let (_, attempts) = day_row(&app, report.days[0].date).await.unwrap();
    assert_eq!(attempts, 2);

    // The scheduled run finds the same (its clock is now: the days are still backing off) and
    // says so on /readyz; a day more than two days old is stale.
    let jobs: SqlJobStore = app.service();
    let job = jobs.find("payment_reconcile").await.unwrap().unwrap();
    jobs.trigger(job.id).await.unwrap();
    wait_until("/readyz to report the days behind", || async {
        let details = app.get_json("/readyz").await.1["data"]["details"].clone();
        details["payments"]
            .as_str()
            .is_some_and(|text| text.starts_with("reconciliation behind: "))
    })
    .await;
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let oldest = text(report.days[0].date);
    let details = body["data"]["details"]["payments"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(details.contains(&format!("{oldest} failed")), "{details}");
}
