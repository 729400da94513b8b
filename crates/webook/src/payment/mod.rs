//! Payments: orders at a payment provider for what a feature sells (rewards today), the
//! provider's notifications, and the jobs that reconcile our books with the provider's.
//!
//! Data flow: a seller records a pending payment in its own transaction
//! ([`PaymentService::record_order`]) and asks for the code URL ([`PaymentService::prepay`]: the
//! provider's order). The provider's notification (`POST /pay/wechat/notify`; the fake provider's
//! page hands its notification to the same handler) is verified and decrypted ([`notify`]), checked
//! against our payment and applied ([`PaymentService::apply_transaction`]): the payment's status
//! changes once, with its `payment_succeeded` / `payment_failed` event in the same transaction
//! ([`store`], the outbox). The seller consumes the events and posts to the ledger under the
//! payment's (biz, biz_id). The sweep settles payments whose notification never came, and the daily
//! reconciliation compares the provider's bill with payments and ledger ([`reconcile`]).
//! Young pending payments are queried at the provider at set ages, settling a lost notification
//! within minutes ([`mod@watch`]); reconciliation keeps a record per bill day and catches up the days
//! not ready, failed or missed ([`mod@catch_up`]). An admin refunds a paid payment ([`refund`]: the
//! provider's refund, its `REFUND.*` notification, and the reversal in the refund's transaction,
//! with a `payment_refunded` event for the seller) and fixes each discrepancy with its action —
//! credit, refund, resolve ([`actions`]; the same over HTTP, [`http`], and the command line,
//! [`cli`]). Sellers tell reconciliation what their postings must be ([`Seller`]); the protocol
//! is model-checked in `protocol` (tests only).
//!
//! Providers ([`provider::PaymentProvider`]): [`WechatPay`] (WeChat Pay API v3, Native) and
//! [`FakePay`] (the embedded default), chosen by `pay_provider` ([`settings`]). The WeChat Pay
//! cryptography is in [`crypto`]; WeChat's platform keys are a shared keyring
//! ([`crypto::PlatformKeys`]) of configured public keys and, in certificate mode, of platform
//! certificates downloaded on start, periodically and on an unknown serial ([`certificates`]).

pub mod actions;
pub mod catch_up;
pub mod certificates;
pub mod cli;
pub mod crypto;
pub mod fake;
pub mod http;
pub mod issuing_ca;
pub mod model;
pub mod notify;
#[cfg(test)]
mod protocol;
pub mod provider;
pub mod reconcile;
pub mod refund;
pub mod service;
pub mod settings;
pub mod store;
pub mod watch;
pub mod wechat;

pub use catch_up::{
    catch_up, latest_bill_day, CatchUpReport, DayStatus, PAYMENT_RECONCILE_DAYS_BEHIND,
};
pub use crypto::random_nonce;
pub use fake::FakePay;
pub use model::{
    NewPayment, NewRefund, Payment, PaymentEvent, PaymentStatus, Refund, RefundStatus, REFUND_BIZ,
    TOPIC_PAYMENT_FAILED, TOPIC_PAYMENT_REFUNDED, TOPIC_PAYMENT_SUCCEEDED,
};
pub use provider::{PaymentProvider, TradeState, Transaction};
pub use reconcile::{reconcile_day, sweep, ReconcileReport, SweepReport};
pub use service::{Applied, PaymentService, Seller};
pub use settings::{PaymentSettings, PlatformMode, ProviderName};
pub use store::PaymentStore;
pub use watch::{watch, WatchReport, PAYMENT_ACTIVE_QUERIES_TOTAL};
pub use wechat::WechatPay;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, FixedOffset, NaiveDate, Offset, TimeZone, Utc};

use platform::{
    config::SettingsSpec,
    db::Migration,
    feature::{CliCommands, Feature, Platform, Registry, Service},
    telemetry::MetricsSpec,
};

use crate::account::Ledger;

/// Counter: payment notifications by `outcome` (settled, duplicate, open, recorded,
/// unverified, malformed, mismatch, failed).
pub const PAYMENT_NOTIFICATIONS_TOTAL: &str = "payment_notifications_total";
/// Counter: discrepancies recorded, by `kind`.
pub const PAYMENT_DISCREPANCIES_TOTAL: &str = "payment_discrepancies_total";
/// Gauge: discrepancies waiting for a person, after the last reconciliation.
pub const PAYMENT_DISCREPANCIES_OPEN: &str = "payment_discrepancies_open";

const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_counter!(
        PAYMENT_NOTIFICATIONS_TOTAL,
        "Payment notifications, by outcome (settled, duplicate, open, recorded, unverified, \
         malformed, mismatch, failed)"
    );
    metrics::describe_counter!(
        PAYMENT_DISCREPANCIES_TOTAL,
        "Payment discrepancies recorded, by kind"
    );
    metrics::describe_gauge!(
        PAYMENT_DISCREPANCIES_OPEN,
        "Payment discrepancies waiting for a person"
    );
    metrics::describe_counter!(
        PAYMENT_ACTIVE_QUERIES_TOTAL,
        "Active queries of young pending payments, by outcome (settled, open, already_settled, \
         recorded, not_found, mismatch, error)"
    );
    metrics::describe_gauge!(
        PAYMENT_RECONCILE_DAYS_BEHIND,
        "Bill days of the reconciliation look-back window not yet reconciled"
    );
    metrics::describe_gauge!(
        certificates::PAYMENT_PLATFORM_KEYS,
        "WeChat Pay platform keys usable now (configured and downloaded)"
    );
    metrics::describe_counter!(
        certificates::PAYMENT_PLATFORM_KEY_REFRESHES_TOTAL,
        "WeChat Pay platform certificate downloads, by outcome (updated, unchanged, failed)"
    );
}

/// The payments feature: provides [`PaymentService`] (and [`FakePay`] when it is the provider).
pub struct Payments;

#[async_trait]
impl Feature for Payments {
    fn name(&self) -> &'static str {
        "payments"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<PaymentService>()] }
    }

    fn needs(&self) -> &'static [Service] {
        const { &[Service::of::<Ledger>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<cli::PaymentsCli>(|matches, context| {
            Box::pin(async move {
                let cli::PaymentsCli::Payments { command } =
                    <cli::PaymentsCli as clap::FromArgMatches>::from_arg_matches(&matches)?;
                cli::run(&context.config, context.schema, command).await
            })
        }))
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[METRICS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(
                18,
                "payments",
                include_str!("../../migrations/0018_payments.sql"),
            ),
            Migration::new(
                28,
                "refunds",
                include_str!("../../migrations/0028_refunds.sql"),
            ),
            Migration::new(
                29,
                "payment schedules",
                include_str!("../../migrations/0029_payment_schedules.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::PaymentsApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let config = &platform.config;
        let settings = config.settings::<PaymentSettings>()?;
        let ledger = registry.get::<Ledger>()?;
        let (payments, fake, wechat) = service_parts(
            config,
            &platform.db,
            platform.outbox.clone(),
            ledger.clone(),
        )?;
        if let Some(wechat) = &wechat {
            start_wechat_pay(wechat, platform, registry).await;
        }
        registry.executor(reconcile::SweepJob::new(payments.clone()));
        registry.executor(catch_up::ReconcileJob::new(
            payments.clone(),
            ledger,
            settings.pay_reconcile_lookback,
            platform.status.clone(),
        ));
        registry.executor(watch::WatchJob::new(
            payments.clone(),
            settings.pay_query_after.clone(),
        ));
        if config.role.runs_work() {
            let jobs = crate::jobs::store(&platform.db);
            reconcile::ensure_job(
                &jobs,
                reconcile::SWEEP_JOB,
                &settings.pay_sweep_schedule,
                "UTC",
            )
            .await?;
            reconcile::ensure_job(
                &jobs,
                reconcile::RECONCILE_JOB,
                &settings.pay_reconcile_schedule,
                "Asia/Shanghai",
            )
            .await?;
            watch::ensure_job(&jobs, &settings.pay_watch_schedule).await?;
        }
        let counted = payments.clone();
        registry.background("payment discrepancies gauge", move |background| {
            reconcile::watch_open_discrepancies(counted, background.stop)
        });
        registry.routes(http::router(http::PaymentRoutes {
            payments: payments.clone(),
            fake: fake.clone(),
        }));
        if let Some(fake) = fake {
            registry.provide(fake);
        }
        registry.provide(payments);
        Ok(())
    }
}

/// The payment service of `config` on `db`: new orders go to the configured provider (the fake
/// one, returned too, when it is that one); payments ordered from a provider used before are
/// still queried, closed and refunded there — the fake's books are in the database, WeChat Pay
/// while it is configured. Used by the feature and by `webook payments …`.
pub fn service(
    config: &platform::config::Config,
    db: &platform::db::Db,
    outbox: platform::events::outbox::Outbox,
    ledger: Ledger,
) -> anyhow::Result<(PaymentService, Option<FakePay>)> {
    service_parts(config, db, outbox, ledger).map(|(payments, fake, _)| (payments, fake))
}

/// [`service`], and the WeChat Pay client when it is the configured provider (the feature
/// starts its platform certificate downloads).
fn service_parts(
    config: &platform::config::Config,
    db: &platform::db::Db,
    outbox: platform::events::outbox::Outbox,
    ledger: Ledger,
) -> anyhow::Result<(PaymentService, Option<FakePay>, Option<Arc<WechatPay>>)> {
    let settings = config.settings::<PaymentSettings>()?;
    let mut wechat = None;
    let (provider, fake): (Arc<dyn PaymentProvider>, Option<FakePay>) =
        match settings.provider(config) {
            None => {
                tracing::warn!(
                    "no payment provider (pay_provider unset in cluster mode): rewards answer \
                     code 5"
                );
                (Arc::new(provider::Unconfigured::default()), None)
            }
            Some(ProviderName::Fake) => {
                let fake = FakePay::new(db.clone(), &settings.pay_fake_base_url)?;
                tracing::warn!(
                    "payments use the fake provider: payments are confirmed on webook's own page \
                     and no money moves (pay_provider = \"wechat\" for real payments)"
                );
                (Arc::new(fake.clone()), Some(fake))
            }
            Some(ProviderName::Wechat) => {
                let client = Arc::new(WechatPay::new(settings.wechat()?)?);
                wechat = Some(client.clone());
                (client, None)
            }
        };
    let mut earlier: Vec<Arc<dyn PaymentProvider>> = Vec::new();
    if fake.is_none() {
        earlier.push(Arc::new(FakePay::new(
            db.clone(),
            &settings.pay_fake_base_url,
        )?));
    }
    if provider.name() != "wechat" {
        if let Ok(wechat) = settings.wechat() {
            earlier.push(Arc::new(WechatPay::new(wechat)?));
        }
    }
    let payments = PaymentService::new(
        PaymentStore::new(db.clone()),
        (provider, earlier),
        outbox,
        ledger,
        settings.pay_expiry,
    );
    Ok((payments, fake, wechat))
}

/// Starts what the WeChat Pay client needs beyond its requests: the gauge of its platform keys
/// and, in certificate mode, the platform certificates — downloaded now (a failure is logged
/// and counted, and retried in the background and on demand), then every
/// `wechatpay_certificate_refresh` in a background task until shutdown, reporting on `/readyz`.
async fn start_wechat_pay(wechat: &WechatPay, platform: &Platform, registry: &mut Registry) {
    let keys = &wechat.notification_keys().platform_keys;
    metrics::gauge!(certificates::PAYMENT_PLATFORM_KEYS)
        .set(keys.valid_count(Utc::now().timestamp()) as f64);
    if let Some(downloader) = wechat.certificates() {
        downloader.report_to(platform.status.clone());
        // Logged and counted inside; the first request or notification tries again.
        let _ = downloader.refresh().await;
        let downloader = downloader.clone();
        registry.background("wechat pay platform certificates", move |background| {
            downloader.run(background.stop)
        });
    }
}

/// China Standard Time (UTC+8, no daylight saving): the time zone of WeChat Pay's times and bills.
fn china() -> FixedOffset {
    // `east_opt` refuses only offsets of a day or more: UTC is never used.
    FixedOffset::east_opt(8 * 3600).unwrap_or_else(|| Utc.fix())
}

/// `ms` since the epoch as WeChat writes times: RFC 3339 in China Standard Time
/// (`2026-12-01T10:34:56+08:00`).
pub fn china_time(ms: i64) -> String {
    let utc = DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default();
    utc.with_timezone(&china())
        .format("%Y-%m-%dT%H:%M:%S%:z")
        .to_string()
}

/// An RFC 3339 time as ms since the epoch.
pub fn parse_time(text: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|time| time.timestamp_millis())
}

/// The first and the first-after-last ms of `date` in China Standard Time (a bill's day).
pub fn china_day_bounds(date: NaiveDate) -> (i64, i64) {
    let start = |date: NaiveDate| {
        date.and_hms_opt(0, 0, 0)
            .and_then(|midnight| china().from_local_datetime(&midnight).single())
            .map(|time| time.timestamp_millis())
            .unwrap_or_default()
    };
    (start(date), date.succ_opt().map(start).unwrap_or(i64::MAX))
}

/// Today's date in China Standard Time at `now`.
pub fn china_today(now: DateTime<Utc>) -> NaiveDate {
    now.with_timezone(&china()).date_naive()
}
