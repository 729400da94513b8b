//! The money path on embedded SQLite (a database file in a temp dir, with the app's pool: 16 read
//! connections and the single writer), through the services' own code, without HTTP:
//! [`PaymentService`] with the fake provider ([`FakePay`], the embedded default) and
//! [`RewardService`] over an [`ArticleService`] with its in-process cache.
//!
//! - `notification/verify_decrypt`: [`notify::open`] of one genuine notification sealed by the
//!   fake provider — the `Wechatpay-*` headers read, the RSA-2048 (SHA256withRSA) signature
//!   checked, the body parsed, the AES-256-GCM resource decrypted and the transaction parsed:
//!   pure CPU. Baseline in the same group, `notification/rsa_verify_baseline`:
//!   [`webook::payment::crypto::PlatformKeys::verify`] of the same signature alone, so the
//!   ratio is what reading the headers, decrypting and parsing add to the signature check.
//! - `notification/accept_new`: [`PaymentService::accept_notification`] of a notification of a
//!   fresh paid order each iteration: open, read our payment, settle it (a write transaction: the
//!   payment's `UPDATE`, its re-read and its `payment_succeeded` event in the outbox). The orders
//!   are made untimed before each sample — rewards created through [`RewardService::create`], paid
//!   at the fake ([`FakePay::decide`], which seals the notification) — so that every timed call
//!   settles a different payment (criterion's `iter_custom`; only the accepts are timed; on SQLite
//!   the setup ends with a WAL checkpoint, so the timed calls do not pay for checkpointing the
//!   setup's writes). `notification/accept_duplicate`: the same notification again, its payment
//!   already settled: open, read, and a settle transaction on the writer whose `UPDATE` matches no
//!   row, rolled back.
//! - `reward/create`: [`RewardService::create`] — validation, the article's reader copy (cached),
//!   the open-order look-up, the reward and its pending payment in one transaction, the fake's
//!   order (`INSERT`), the code URL (`UPDATE`) — each call with a (payer, amount) pair of its own,
//!   so an open order is never reused. Baseline, `reward/bare_insert_baseline`: one `INSERT` of a
//!   rewards row in its own transaction, the smallest durable write of the same row.
//! - `reward/credit`: [`RewardService::apply_paid`] (what the `payment_succeeded` consumer does) of
//!   a different reward each iteration, whose payment succeeded through `accept_notification`: the
//!   reward marked paid and its split posted to the ledger (3 lines: clearing, author, platform
//!   share) in one transaction. Rewards settled by the runs above are credited first; more are made
//!   and settled (untimed, then checkpointed as above) when they run out.
//! - `refund/full`: [`PaymentService::refund`] of a paid and credited reward (made, paid, accepted
//!   and credited untimed before each sample, then checkpointed) through the fake, which refunds
//!   at once: the checks, the provider's query, the refund row, the provider's refund and
//!   `complete_refund` (refund, payment, 3-line reversal and `payment_refunded` event in one
//!   transaction). Baseline in the same group, `refund/credit_baseline`: `reward/credit` again.
//! - `reconcile/day`: [`reconcile_day`] of a China-Standard-Time day holding [`DAY_PAYMENTS`]
//!   paid and credited rewards, every [`REFUND_EVERY`]th refunded (see [`prepare_day`]), against
//!   the fake's bill (written in WeChat's format and parsed back); each call asserts the day
//!   clean. Baseline, `reconcile/paid_between_baseline`: the day's payments read as reconciliation
//!   reads them ([`PaymentStore::paid_between`], keyset batches). `reconcile/part_*` time parts
//!   of it alone: the bill, the [`Seller::expected_postings`] reads (one per batch of 200, as reconciliation reads them), the ledger audit.
//!
//! After the criterion runs a log subscriber is installed that counts the statements sqlx runs
//! (`sqlx::query` events), and the statements of one refund and of one day's reconciliation are
//! printed by statement, with sqlx's timing of them.
//!
//! The dataset: 2 000 users and 200 articles (181 of them published) from the seeder
//! ([`webook::seed::seed`]). Amounts are 100 fen and up, so every reward's posting has its
//! platform-share line (`reward_share_bps` = 1 000). Payments expire after 30 minutes, as by
//! default. No metrics recorder or log subscriber is installed (the app has both; their cost is
//! not counted).
//!
//! The calls that reach the database are timed in a task on the runtime's workers, as the app's
//! handlers and consumers run (see `timed_in_task`), not on the thread criterion blocks on.
//!
//! Besides criterion's estimates the bench prints to stderr rates (per second) and latency
//! percentiles of each operation, one task and 16 concurrent tasks where it writes — among them
//! 2 000 timed `accept_notification` calls of fresh orders. At the end it audits the ledger
//! ([`Ledger::audit`]: every balance and every entry sums to 0, each balance equals its
//! entries) and checks that each credited reward and each refund's reversal posted exactly its
//! 3 lines, with one event per settled and per refunded payment; a run that corrupts the books
//! panics.
//!
//! Run: `cargo bench -p webook --bench payments` (about 2 minutes before the refund and
//! reconcile groups; `-- 'refund|reconcile'` runs those alone, with their baselines, in about
//! 1½ minutes; figures in docs/PERFORMANCE.md → Payments). With `WEBOOK_BENCH_DATABASE_URL` set to an empty
//! PostgreSQL database the same runs there, e.g. `scripts/with-services.sh bash -c
//! 'WEBOOK_BENCH_DATABASE_URL=$WEBOOK_TEST_DATABASE_URL cargo bench -p webook --bench payments'`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::{
    collections::HashMap,
    future::Future,
    hint::black_box,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use axum::http::HeaderMap;
use chrono::{Days, NaiveDate, Utc};
use common::{ms, summary};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::{stream, StreamExt};
use indicatif::ProgressBar;
use platform::{
    config::DatabaseKind,
    db::{now_millis, placeholders, Db},
    events::{outbox::Outbox, EventStream},
};
use tokio::runtime::Runtime;
use tracing_subscriber::{layer::SubscriberExt, Layer};
use webook::{
    account::Ledger,
    article::{cache::ArticleCache, store::ArticleStore, ArticleService},
    payment::{
        china_day_bounds, china_today, crypto::SignedHeaders, notify, reconcile_day, store::BATCH,
        Applied, FakePay, NewRefund, PaymentProvider, PaymentService, PaymentStatus, PaymentStore,
        ReconcileReport, Refund, RefundStatus, Seller, REFUND_BIZ,
    },
    reward::{RewardService, RewardStore, REWARD_BIZ},
    seed::{seed, Plan},
};

/// The app's default pool size (`database_max_connections`).
const POOL: u32 = 16;
/// The app's default `reward_share_bps`.
const SHARE_BPS: i64 = 1_000;
/// Timed calls of each stderr measurement.
const CALLS: usize = 2_000;
/// Calls of the stderr measurements of the heavier writes (creation, credit).
const WRITE_CALLS: usize = 1_000;
const CONCURRENT_TASKS: usize = 16;

struct World {
    _dir: tempfile::TempDir,
    db: Db,
    fake: FakePay,
    payments: PaymentService,
    rewards: RewardService,
    reward_store: RewardStore,
    ledger: Ledger,
    /// Published articles: (id, author).
    articles: Vec<(i64, i64)>,
    /// The seeded users' ids, first and last.
    users: (i64, i64),
    /// The next (payer, amount) pair to draw.
    next_order: AtomicUsize,
    /// The next bare row's number.
    next_bare: AtomicUsize,
}

/// A notification as the handler receives it.
#[derive(Clone)]
struct Delivery {
    headers: HeaderMap,
    body: Vec<u8>,
}

async fn build() -> World {
    let started = Instant::now();
    let (dir, db, url) = common::bench_db(POOL).await;
    let plan = Plan {
        users: 2_000,
        articles: 200,
        likes: 0,
        collects: 0,
        reads: 0,
        comments: 0,
        tags_per_author: 0,
        ..Plan::default()
    };
    let report = seed(&db, &plan, &ProgressBar::hidden()).await.unwrap();
    let articles: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT id, author_id FROM published_articles WHERE status = 2 AND id >= $1 ORDER BY id",
    )
    .bind(report.first_article_id)
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert!(articles.len() > 10, "the seeder published too few articles");
    let users = (
        report.first_user_id,
        report.first_user_id + i64::try_from(report.users).unwrap() - 1,
    );

    let outbox = Outbox::new(db.clone(), EventStream::in_process());
    let fake = FakePay::new(db.clone(), "").unwrap();
    let payments = PaymentService::new(
        PaymentStore::new(db.clone()),
        (Arc::new(fake.clone()), Vec::new()),
        outbox.clone(),
        webook::account::Ledger::new(db.clone()),
        Duration::from_secs(1800),
    );
    let article_service = ArticleService::new(
        ArticleStore::new(db.clone()),
        ArticleCache::new(None, 32 << 20),
        outbox,
    );
    let rewards = RewardService::new(
        RewardStore::new(db.clone()),
        payments.clone(),
        article_service,
        SHARE_BPS,
        Duration::from_secs(10),
    );
    // As the app installs rewards: reconciliation checks their postings through it.
    payments.register_seller(REWARD_BIZ, Arc::new(rewards.clone()));
    eprintln!(
        "{}: seeded {} users and {} published articles in {:.1} s",
        platform::redact_url(&url),
        report.users,
        articles.len(),
        started.elapsed().as_secs_f64()
    );
    World {
        _dir: dir,
        reward_store: RewardStore::new(db.clone()),
        ledger: Ledger::new(db.clone()),
        db,
        fake,
        payments,
        rewards,
        articles,
        users,
        next_order: AtomicUsize::new(0),
        next_bare: AtomicUsize::new(0),
    }
}

impl World {
    /// The `n`th (payer, article, amount): payers cycle through the users and the amount grows
    /// by a fen each cycle, so no two draws ask for the same order (no open order is reused).
    fn order(&self, n: usize) -> (i64, i64, i64) {
        let users = usize::try_from(self.users.1 - self.users.0 + 1).unwrap();
        let payer = self.users.0 + i64::try_from(n % users).unwrap();
        let amt = 100 + i64::try_from(n / users).unwrap();
        let mut index = n % self.articles.len();
        while self.articles[index].1 == payer {
            index = (index + 1) % self.articles.len();
        }
        (payer, self.articles[index].0, amt)
    }

    /// A new reward (and its payment and provider order) through [`RewardService::create`].
    async fn create_reward(&self) -> i64 {
        let n = self.next_order.fetch_add(1, Ordering::Relaxed);
        let (payer, article, amt) = self.order(n);
        self.rewards.create(payer, article, amt).await.unwrap().rid
    }

    /// A new reward, paid at the fake provider: the notification it sends.
    async fn paid_order(&self) -> Delivery {
        let rid = self.create_reward().await;
        let reward = self.reward_store.by_id(rid).await.unwrap().unwrap();
        let sealed = self.fake.decide(&reward.trade_no, true).await.unwrap();
        Delivery {
            headers: sealed.header_map(),
            body: sealed.body,
        }
    }

    async fn accept(&self, delivery: &Delivery) -> Applied {
        self.payments
            .accept_notification(&delivery.headers, &delivery.body)
            .await
            .unwrap()
    }

    /// Refunds the payment of `trade_no` in full through [`PaymentService::refund`], as an admin
    /// asks (balances checked, no negative balance allowed); the fake refunds at once, so the
    /// refund comes back succeeded.
    async fn refund(&self, trade_no: String) -> Refund {
        let refund = self
            .payments
            .refund(&NewRefund {
                trade_no,
                reason: "bench: the payer asked".to_owned(),
                requested_by: self.users.0,
                requested_via: String::new(),
                allow_negative: false,
            })
            .await
            .unwrap();
        assert_eq!(refund.status, RefundStatus::Succeeded, "{refund:?}");
        refund
    }

    /// One bare rewards row in its own transaction: the floor of a durable reward. Payer 0 is
    /// no user, so these rows never match an open order of the measured path.
    async fn bare_insert(&self) {
        let n = self.next_bare.fetch_add(1, Ordering::Relaxed);
        let (_, article, amt) = self.order(n);
        let now = now_millis();
        let mut tx = self.db.writer().begin().await.unwrap();
        sqlx::query(
            "INSERT INTO rewards (payer_id, author_id, article_id, article_title, amt, status, \
             trade_no, expires_at, ctime, utime) VALUES (0, $1, $2, $3, $4, 'init', $5, $6, $7, $7)",
        )
        .bind(self.users.0)
        .bind(article)
        .bind("bare reward")
        .bind(amt)
        .bind(format!("bare{n:022}"))
        .bind(now + 1_800_000)
        .bind(now)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
}

/// Ends an untimed setup: on SQLite, its writes are checkpointed from the WAL into the database
/// file, so that the timed calls after it pay for checkpointing their own writes only.
async fn checkpoint(world: &World) {
    if world.db.kind() == DatabaseKind::Sqlite {
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(world.db.writer())
            .await
            .unwrap();
    }
}

/// `n` notifications of fresh paid orders, made `CONCURRENT_TASKS` at a time (untimed setup).
/// They are stamped now: the handler accepts them for 5 minutes.
async fn paid_orders(world: &Arc<World>, n: usize) -> Vec<Delivery> {
    let deliveries = stream::iter(0..n)
        .map(|_| {
            let world = world.clone();
            async move {
                tokio::spawn(async move { world.paid_order().await })
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(CONCURRENT_TASKS)
        .collect()
        .await;
    checkpoint(world).await;
    deliveries
}

/// `n` rewards whose payment succeeded (through `accept_notification`) and that are not
/// credited yet, oldest first; settles more paid orders when there are too few.
async fn paid_rewards(world: &Arc<World>, n: usize) -> Vec<(i64, i64)> {
    let uncredited = || async {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT r.id, r.amt FROM rewards r JOIN payments p ON p.biz = $1 AND p.biz_id = r.id \
             WHERE p.status = 'succeeded' AND r.status = 'init' ORDER BY r.id LIMIT $2",
        )
        .bind(REWARD_BIZ)
        .bind(i64::try_from(n).unwrap())
        .fetch_all(world.db.pool())
        .await
        .unwrap()
    };
    let found = uncredited().await;
    if found.len() == n {
        return found;
    }
    for delivery in paid_orders(world, n - found.len()).await {
        world.accept(&delivery).await;
    }
    checkpoint(world).await;
    let found = uncredited().await;
    assert_eq!(found.len(), n, "paid rewards to credit");
    found
}

/// `n` rewards paid and credited (untimed: [`paid_rewards`], then [`RewardService::apply_paid`]
/// of each, then a checkpoint): (reward id, amount, trade number), oldest first.
async fn credited_rewards(world: &Arc<World>, n: usize) -> Vec<(i64, i64, String)> {
    let paid = paid_rewards(world, n).await;
    for &(rid, amt) in &paid {
        world.rewards.apply_paid(rid, amt).await.unwrap();
    }
    checkpoint(world).await;
    let mut credited = Vec::with_capacity(n);
    for (rid, amt) in paid {
        let reward = world.reward_store.by_id(rid).await.unwrap().unwrap();
        credited.push((rid, amt, reward.trade_no));
    }
    credited
}

/// Runs `call(i)` for `i` in `0..calls` on `tasks` concurrent tasks; prints the rate (calls
/// per second) and the latency percentiles, labelled `label`.
async fn rate<F, Fut>(label: &str, calls: usize, tasks: usize, call: F)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (call, next) = (call.clone(), next.clone());
            tokio::spawn(async move {
                let mut samples = Vec::with_capacity(calls / tasks + 1);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        return samples;
                    }
                    let started = Instant::now();
                    call(i).await;
                    samples.push(ms(started.elapsed()));
                }
            })
        })
        .collect();
    let mut samples = Vec::with_capacity(calls);
    for handle in handles {
        samples.extend(handle.await.unwrap());
    }
    #[allow(clippy::cast_precision_loss)]
    let per_second = calls as f64 / started.elapsed().as_secs_f64();
    let tasks = if tasks == 1 {
        "1 task".to_owned()
    } else {
        format!("{tasks} tasks")
    };
    summary(&format!("{label}, {tasks}: {per_second:.0}/s"), samples);
}

/// Times `call` of each of `items`, one after the other, in one task spawned on the runtime's
/// workers, where the app's handlers and consumers run. (Criterion's `to_async(..).iter` runs
/// its loop on the thread blocked in `block_on` instead, where each database answer wakes a
/// thread outside the runtime: about twice the latency per call on the 2-core machine the
/// figures come from.)
async fn timed_in_task<T, F, Fut>(items: Vec<T>, call: F) -> Duration
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let started = Instant::now();
        for item in items {
            call(item).await;
        }
        started.elapsed()
    })
    .await
    .unwrap()
}

/// `iters` units, for [`timed_in_task`] of calls that need no item.
fn times(iters: u64) -> Vec<()> {
    vec![(); usize::try_from(iters).unwrap()]
}

fn bench_notifications(c: &mut Criterion, runtime: &Runtime, world: &Arc<World>) {
    // One genuine notification, opened at the second it was sealed (never stale).
    let delivery = runtime.block_on(world.paid_order());
    let keys = world.fake.notification_keys().clone();
    let signed = SignedHeaders::from_headers(&delivery.headers).unwrap();
    let now_secs: i64 = signed.timestamp.parse().unwrap();
    let notify::Opened::Transaction(opened) =
        notify::open(&keys, &delivery.headers, &delivery.body, now_secs).unwrap()
    else {
        panic!("a payment's notification opens as a transaction")
    };
    eprintln!(
        "\nnotifications: {} bytes of body, a {} transaction of {} fen",
        delivery.body.len(),
        opened.trade_type,
        opened.amount.total
    );

    let mut group = c.benchmark_group("notification");
    group.throughput(Throughput::Elements(1));
    group.bench_function("rsa_verify_baseline", |b| {
        b.iter(|| {
            keys.platform_keys
                .verify(black_box(&signed), black_box(&delivery.body), now_secs)
                .unwrap();
        });
    });
    group.bench_function("verify_decrypt", |b| {
        b.iter(|| {
            black_box(
                notify::open(
                    &keys,
                    black_box(&delivery.headers),
                    black_box(&delivery.body),
                    now_secs,
                )
                .unwrap(),
            )
        });
    });
    // Its payment settles as the others will, so the books end with no paid order pending.
    runtime.block_on(async {
        let applied = world.accept(&delivery).await;
        assert_eq!(applied, Applied::Settled(PaymentStatus::Succeeded));
    });
    // Each sample's orders are made (untimed) before its accepts are timed: the run takes a
    // few times the measurement time, hence a shorter one.
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(20);
    group.bench_function("accept_new", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let world = world.clone();
            async move {
                let deliveries = paid_orders(&world, usize::try_from(iters).unwrap()).await;
                timed_in_task(deliveries, move |delivery| {
                    let world = world.clone();
                    async move {
                        let applied = world.accept(&delivery).await;
                        assert_eq!(applied, Applied::Settled(PaymentStatus::Succeeded));
                    }
                })
                .await
            }
        });
    });
    group.measurement_time(Duration::from_secs(5));
    group.sample_size(50);
    // A notification made now (the handler accepts it for 5 minutes), settled once, then
    // delivered again and again.
    let duplicate = runtime.block_on(async {
        let delivery = world.paid_order().await;
        assert_eq!(
            world.accept(&delivery).await,
            Applied::Settled(PaymentStatus::Succeeded)
        );
        delivery
    });
    let duplicate = Arc::new(duplicate);
    group.bench_function("accept_duplicate", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let (world, duplicate) = (world.clone(), duplicate.clone());
            timed_in_task(times(iters), move |()| {
                let (world, duplicate) = (world.clone(), duplicate.clone());
                async move {
                    assert_eq!(world.accept(&duplicate).await, Applied::AlreadySettled);
                }
            })
        });
    });
    group.finish();

    eprintln!("\nnotifications per second and latencies:");
    runtime.block_on(async {
        let (keys, signed, body) = (Arc::new(keys), Arc::new(signed), Arc::new(delivery.body));
        {
            let (keys, signed, body) = (keys.clone(), signed.clone(), body.clone());
            rate("RSA-2048 verify alone", CALLS, 1, move |_| {
                let (keys, signed, body) = (keys.clone(), signed.clone(), body.clone());
                async move {
                    keys.platform_keys.verify(&signed, &body, now_secs).unwrap();
                }
            })
            .await;
        }
        {
            let (keys, headers, body) = (keys.clone(), Arc::new(delivery.headers), body.clone());
            rate("open: verify, decrypt, parse", CALLS, 1, move |_| {
                let (keys, headers, body) = (keys.clone(), headers.clone(), body.clone());
                async move {
                    black_box(notify::open(&keys, &headers, &body, now_secs).unwrap());
                }
            })
            .await;
        }
        let prepared = Instant::now();
        let deliveries = Arc::new(paid_orders(world, 2 * CALLS).await);
        eprintln!(
            "  ({} paid orders made in {:.1} s, untimed)",
            2 * CALLS,
            prepared.elapsed().as_secs_f64()
        );
        for (tasks, offset) in [(1, 0), (CONCURRENT_TASKS, CALLS)] {
            let (world, deliveries) = (world.clone(), deliveries.clone());
            rate("accept, new order", CALLS, tasks, move |i| {
                let (world, deliveries) = (world.clone(), deliveries.clone());
                async move {
                    let applied = world.accept(&deliveries[offset + i]).await;
                    assert_eq!(applied, Applied::Settled(PaymentStatus::Succeeded));
                }
            })
            .await;
        }
        for tasks in [1, CONCURRENT_TASKS] {
            let (world, deliveries) = (world.clone(), deliveries.clone());
            rate("accept, duplicate", CALLS, tasks, move |i| {
                let (world, deliveries) = (world.clone(), deliveries.clone());
                async move {
                    let applied = world.accept(&deliveries[i]).await;
                    assert_eq!(applied, Applied::AlreadySettled);
                }
            })
            .await;
        }
    });
}

fn bench_rewards(c: &mut Criterion, runtime: &Runtime, world: &Arc<World>) {
    let mut group = c.benchmark_group("reward");
    group.throughput(Throughput::Elements(1));
    group.bench_function("bare_insert_baseline", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let world = world.clone();
            timed_in_task(times(iters), move |()| {
                let world = world.clone();
                async move { world.bare_insert().await }
            })
        });
    });
    group.bench_function("create", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let world = world.clone();
            timed_in_task(times(iters), move |()| {
                let world = world.clone();
                async move {
                    world.create_reward().await;
                }
            })
        });
    });
    group.bench_function("credit", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let world = world.clone();
            async move {
                let paid = paid_rewards(&world, usize::try_from(iters).unwrap()).await;
                timed_in_task(paid, move |(rid, amt)| {
                    let world = world.clone();
                    async move { world.rewards.apply_paid(rid, amt).await.unwrap() }
                })
                .await
            }
        });
    });
    group.finish();

    eprintln!("\nrewards created / credited per second and latencies:");
    runtime.block_on(async {
        for tasks in [1, CONCURRENT_TASKS] {
            let world = world.clone();
            rate("bare INSERT (baseline)", WRITE_CALLS, tasks, move |_| {
                let world = world.clone();
                async move { world.bare_insert().await }
            })
            .await;
        }
        for tasks in [1, CONCURRENT_TASKS] {
            let world = world.clone();
            rate("RewardService::create", WRITE_CALLS, tasks, move |_| {
                let world = world.clone();
                async move {
                    world.create_reward().await;
                }
            })
            .await;
        }
        let prepared = Instant::now();
        let paid = Arc::new(paid_rewards(world, WRITE_CALLS).await);
        eprintln!(
            "  ({WRITE_CALLS} paid rewards ready in {:.1} s, untimed)",
            prepared.elapsed().as_secs_f64()
        );
        let world = world.clone();
        rate("RewardService::apply_paid", WRITE_CALLS, 1, move |i| {
            let (world, paid) = (world.clone(), paid.clone());
            async move {
                let (rid, amt) = paid[i];
                world.rewards.apply_paid(rid, amt).await.unwrap();
            }
        })
        .await;
    });
}

fn bench_refunds(c: &mut Criterion, runtime: &Runtime, world: &Arc<World>) {
    let mut group = c.benchmark_group("refund");
    group.throughput(Throughput::Elements(1));
    // Each sample's rewards are made, paid and credited (untimed) before its calls are timed:
    // the run takes a few times the measurement time.
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(10);
    // The baseline, in this group so that a filtered run (`-- refund`) has it: `reward/credit`
    // again, the transaction a refund's completion mirrors.
    group.bench_function("credit_baseline", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let world = world.clone();
            async move {
                let paid = paid_rewards(&world, usize::try_from(iters).unwrap()).await;
                timed_in_task(paid, move |(rid, amt)| {
                    let world = world.clone();
                    async move { world.rewards.apply_paid(rid, amt).await.unwrap() }
                })
                .await
            }
        });
    });
    group.bench_function("full", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let world = world.clone();
            async move {
                let credited = credited_rewards(&world, usize::try_from(iters).unwrap()).await;
                timed_in_task(credited, move |(_, _, trade_no)| {
                    let world = world.clone();
                    async move {
                        world.refund(trade_no).await;
                    }
                })
                .await
            }
        });
    });
    group.finish();
}

/// Paid (and credited) rewards on the reconciled day.
const DAY_PAYMENTS: usize = 1_000;
/// Every this many of them is refunded the same day.
const REFUND_EVERY: usize = 10;

/// The reconciled day: a past China-Standard-Time day holding exactly the day's payments.
struct ReconciledDay {
    date: NaiveDate,
    bounds: (i64, i64),
    /// (reward id, amount) of its payments.
    rewards: Vec<(i64, i64)>,
    refunds: usize,
}

/// Adds `shift` to a timestamp column of the rows matched by `update` — an `UPDATE … SET …
/// $1 … WHERE` ending in the key column — whose key is one of `keys`; returns how many changed.
async fn shift_rows<V>(tx: &mut sqlx::AnyConnection, update: &str, shift: i64, keys: &[V]) -> u64
where
    V: for<'q> sqlx::Encode<'q, sqlx::Any> + sqlx::Type<sqlx::Any> + Clone + Send + 'static,
{
    let mut changed = 0;
    for chunk in keys.chunks(500) {
        let sql = format!("{update} IN ({})", placeholders(2, chunk.len()));
        let mut query = sqlx::query(&sql).bind(shift);
        for key in chunk {
            query = query.bind(key.clone());
        }
        changed += query.execute(&mut *tx).await.unwrap().rows_affected();
    }
    changed
}

/// Untimed: [`DAY_PAYMENTS`] rewards paid and credited, every [`REFUND_EVERY`]th refunded, all
/// through the services; then every timestamp reconciliation reads of them — the payments' and
/// the fake's `paid_at`, the refunds' and the fake's `refunded_at`, the ledger entries' `ctime`
/// of the credits and reversals — moved by one constant into a day 30 days back, so that the day
/// holds exactly these (the other benches' payments stay on today).
async fn prepare_day(world: &Arc<World>) -> ReconciledDay {
    let started = Instant::now();
    let credited = credited_rewards(world, DAY_PAYMENTS).await;
    let mut refund_ids = Vec::new();
    for (i, (_, _, trade_no)) in credited.iter().enumerate() {
        if i % REFUND_EVERY == 0 {
            refund_ids.push(world.refund(trade_no.clone()).await.id);
        }
    }
    let rids: Vec<i64> = credited.iter().map(|(rid, _, _)| *rid).collect();
    let trade_nos: Vec<String> = credited.iter().map(|(_, _, t)| t.clone()).collect();
    let date = china_today(Utc::now()) - Days::new(30);
    let bounds = china_day_bounds(date);
    let first = world
        .payments
        .store()
        .by_trade_nos(&trade_nos)
        .await
        .unwrap()
        .iter()
        .map(|payment| payment.paid_at.unwrap())
        .min()
        .unwrap();
    // An hour into the day: the rows were written over minutes, so all land on it.
    let shift = bounds.0 + 3_600_000 - first;
    let mut tx = world.db.writer().begin().await.unwrap();
    let moved = [
        shift_rows(
            &mut tx,
            "UPDATE payments SET paid_at = paid_at + $1 WHERE trade_no",
            shift,
            &trade_nos,
        )
        .await,
        shift_rows(
            &mut tx,
            "UPDATE fake_pay_orders SET paid_at = paid_at + $1, \
             refunded_at = refunded_at + $1 WHERE trade_no",
            shift,
            &trade_nos,
        )
        .await,
        shift_rows(
            &mut tx,
            "UPDATE payment_refunds SET refunded_at = refunded_at + $1 WHERE trade_no",
            shift,
            &trade_nos,
        )
        .await,
        shift_rows(
            &mut tx,
            &format!(
                "UPDATE account_entries SET ctime = ctime + $1 WHERE biz = '{REWARD_BIZ}' \
                 AND biz_id"
            ),
            shift,
            &rids,
        )
        .await,
        shift_rows(
            &mut tx,
            &format!(
                "UPDATE account_entries SET ctime = ctime + $1 WHERE biz = '{REFUND_BIZ}' \
                 AND biz_id"
            ),
            shift,
            &refund_ids,
        )
        .await,
    ];
    tx.commit().await.unwrap();
    checkpoint(world).await;
    let (n, r) = (
        u64::try_from(DAY_PAYMENTS).unwrap(),
        u64::try_from(refund_ids.len()).unwrap(),
    );
    assert_eq!(moved, [n, n, r, 3 * n, 3 * r], "rows moved to the day");
    eprintln!(
        "\nreconciliation: {DAY_PAYMENTS} rewards paid and credited, {} of them refunded, moved to \
         {date} (China Standard Time) in {:.1} s, untimed",
        refund_ids.len(),
        started.elapsed().as_secs_f64()
    );
    ReconciledDay {
        date,
        bounds,
        rewards: credited.iter().map(|(rid, amt, _)| (*rid, *amt)).collect(),
        refunds: refund_ids.len(),
    }
}

/// The day's comparison found it healthy: every payment, refund, bill line and posting seen,
/// nothing found.
fn assert_clean(report: &ReconcileReport, day: &ReconciledDay) {
    let (n, r) = (
        u64::try_from(day.rewards.len()).unwrap(),
        u64::try_from(day.refunds).unwrap(),
    );
    assert!(report.found.is_empty(), "discrepancies: {report:?}");
    assert_eq!(
        (
            report.payments,
            report.refunds,
            report.bill_rows,
            report.postings
        ),
        (n, r, n + r, n + r),
        "{report:?}"
    );
}

/// The baseline: the day's paid payments read as reconciliation reads them
/// ([`PaymentStore::paid_between`], keyset batches); returns how many.
async fn read_day(world: &World, (from, to): (i64, i64)) -> usize {
    let (mut after, mut read) = (0, 0);
    loop {
        let batch = world
            .payments
            .store()
            .paid_between(from, to, after)
            .await
            .unwrap();
        read += batch.len();
        match batch.last() {
            Some(last) if batch.len() == usize::try_from(BATCH).unwrap() => after = last.id,
            _ => return read,
        }
    }
}

fn bench_reconcile(c: &mut Criterion, runtime: &Runtime, world: &Arc<World>) -> ReconciledDay {
    let day = runtime.block_on(prepare_day(world));
    let (entries, accounts): (i64, i64) = runtime.block_on(async {
        let report = reconcile_day(&world.payments, &world.ledger, day.date, now_millis())
            .await
            .unwrap();
        assert_clean(&report, &day);
        sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM account_entries), (SELECT COUNT(*) FROM accounts)",
        )
        .fetch_one(world.db.pool())
        .await
        .unwrap()
    });
    eprintln!(
        "  the ledger it audits: {entries} entries on {accounts} accounts (all the runs so far)"
    );
    let day = Arc::new(day);
    let n = u64::try_from(day.rewards.len()).unwrap();

    let mut group = c.benchmark_group("reconcile");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.sample_size(10);
    group.throughput(Throughput::Elements(n));
    group.bench_function("paid_between_baseline", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let (world, day) = (world.clone(), day.clone());
            timed_in_task(times(iters), move |()| {
                let (world, day) = (world.clone(), day.clone());
                async move {
                    assert_eq!(read_day(&world, day.bounds).await, day.rewards.len());
                }
            })
        });
    });
    group.bench_function("day", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let (world, day) = (world.clone(), day.clone());
            timed_in_task(times(iters), move |()| {
                let (world, day) = (world.clone(), day.clone());
                async move {
                    let report =
                        reconcile_day(&world.payments, &world.ledger, day.date, now_millis())
                            .await
                            .unwrap();
                    assert_clean(&report, &day);
                }
            })
        });
    });
    // Parts of it, to see what dominates: the fake's bill (its query, WeChat's format written
    // and parsed back), the per-payment look-up of the expected split, the whole-ledger audit.
    group.bench_function("part_bill", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let (world, day) = (world.clone(), day.clone());
            timed_in_task(times(iters), move |()| {
                let (world, day) = (world.clone(), day.clone());
                async move {
                    let bill = world.fake.trade_bill(day.date).await.unwrap();
                    assert_eq!(bill.len(), day.rewards.len() + day.refunds);
                }
            })
        });
    });
    group.bench_function("part_expected_postings", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let (world, day) = (world.clone(), day.clone());
            timed_in_task(times(iters), move |()| {
                let (world, day) = (world.clone(), day.clone());
                async move {
                    let rids: Vec<i64> = day.rewards.iter().map(|&(rid, _)| rid).collect();
                    for batch in rids.chunks(200) {
                        black_box(world.rewards.expected_postings(batch).await.unwrap());
                    }
                }
            })
        });
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("part_ledger_audit", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let world = world.clone();
            timed_in_task(times(iters), move |()| {
                let world = world.clone();
                async move {
                    let audit = world.ledger.audit().await.unwrap();
                    assert!(audit.mismatched.is_empty() && audit.total_balance == 0);
                }
            })
        });
    });
    group.finish();
    Arc::into_inner(day).unwrap()
}

/// Counts the statements sqlx runs (its `sqlx::query` events), by statement, while `on`.
#[derive(Default)]
struct StatementCounter {
    on: AtomicBool,
    /// Normalised statement → (count, seconds).
    seen: Mutex<HashMap<String, (u64, f64)>>,
}

struct Counting(Arc<StatementCounter>);

#[derive(Default)]
struct StatementFields {
    summary: String,
    statement: String,
    seconds: f64,
}

impl tracing::field::Visit for StatementFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "summary" => value.clone_into(&mut self.summary),
            "db.statement" => value.clone_into(&mut self.statement),
            _ => {}
        }
    }

    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        if field.name() == "elapsed_secs" {
            self.seconds = value;
        }
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> Layer<S> for Counting {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" || !self.0.on.load(Ordering::Relaxed) {
            return;
        }
        let mut fields = StatementFields::default();
        event.record(&mut fields);
        let sql = if fields.statement.trim().is_empty() {
            fields.summary
        } else {
            fields.statement
        };
        let mut seen = self.0.seen.lock().unwrap();
        let entry = seen.entry(normalise(&sql)).or_default();
        entry.0 += 1;
        entry.1 += fields.seconds;
    }
}

/// `sql` on one line, a long column list as `…`, its `IN ($2, $3, …)` lists as `IN ($…)`, cut
/// to 110 characters.
fn normalise(sql: &str) -> String {
    let mut line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    if let (Some(rest), Some(from)) = (line.strip_prefix("SELECT "), line.find(" FROM ")) {
        if rest.len() > 40 && from > 40 && !rest.starts_with('(') {
            line = format!("SELECT …{}", &line[from..]);
        }
    }
    let mut from = 0;
    while let Some(at) = line[from..].find("IN ($") {
        let start = from + at + 4;
        let Some(len) = line[start..].find(')') else {
            break;
        };
        if line[start..start + len]
            .chars()
            .all(|c| c == '$' || c == ',' || c == ' ' || c.is_ascii_digit())
        {
            line.replace_range(start..start + len, "$…");
        }
        from = start;
    }
    line.chars().take(110).collect()
}

/// Prints what `counter` saw (most time first) under `label`, and forgets it.
fn report_statements(counter: &StatementCounter, label: &str) {
    let seen = std::mem::take(&mut *counter.seen.lock().unwrap());
    let mut rows: Vec<_> = seen.into_iter().collect();
    rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    let (count, seconds) = rows
        .iter()
        .fold((0, 0.0), |(n, s), (_, (c, t))| (n + c, s + t));
    eprintln!(
        "\n{label}: {count} statements, {:.1} ms in them (as sqlx times them):",
        1e3 * seconds
    );
    for (sql, (n, s)) in rows.iter().take(14) {
        eprintln!("  {n:>6} × {:>8.2} ms  {sql}", 1e3 * s);
    }
}

/// Untimed, after the runs: the statements of one refund and of one day's reconciliation,
/// counted by a log subscriber installed only now.
async fn count_statements(world: &Arc<World>, day: &ReconciledDay) {
    let counter = Arc::new(StatementCounter::default());
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(Counting(counter.clone())),
    )
    .unwrap();
    let (_, _, trade_no) = credited_rewards(world, 1).await.remove(0);
    counter.on.store(true, Ordering::Relaxed);
    world.refund(trade_no).await;
    counter.on.store(false, Ordering::Relaxed);
    report_statements(&counter, "one refund (PaymentService::refund)");
    counter.on.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let report = reconcile_day(&world.payments, &world.ledger, day.date, now_millis())
        .await
        .unwrap();
    let took = started.elapsed();
    counter.on.store(false, Ordering::Relaxed);
    assert_clean(&report, day);
    report_statements(
        &counter,
        &format!(
            "one day's reconciliation ({} payments, {} refunds; {:.0} ms with the subscriber)",
            day.rewards.len(),
            day.refunds,
            ms(took)
        ),
    );
}

/// The books after the runs: the ledger sums to 0, each balance is its entries, every credited
/// reward posted its 3 lines and nothing else was posted. Panics otherwise.
async fn audit(world: &World) {
    let audit = world.ledger.audit().await.unwrap();
    let (credited, entries, posted_rewards): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM rewards WHERE status = 'payed'), \
         (SELECT COUNT(*) FROM account_entries), \
         (SELECT COUNT(DISTINCT biz_id) FROM account_entries WHERE biz = $1)",
    )
    .bind(REWARD_BIZ)
    .fetch_one(world.db.pool())
    .await
    .unwrap();
    let (settled, events, paid_pending): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM payments WHERE status IN ('succeeded', 'refunded')), \
         (SELECT COUNT(*) FROM event_outbox WHERE topic = 'payment_succeeded'), \
         (SELECT COUNT(*) FROM payments p JOIN fake_pay_orders f ON f.trade_no = p.trade_no \
          WHERE p.status = 'pending' AND f.state = 'SUCCESS')",
    )
    .fetch_one(world.db.pool())
    .await
    .unwrap();
    let (refunded, refunds, refund_events, reversals): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM payments WHERE status = 'refunded'), \
         (SELECT COUNT(*) FROM payment_refunds WHERE status = 'succeeded'), \
         (SELECT COUNT(*) FROM event_outbox WHERE topic = 'payment_refunded'), \
         (SELECT COUNT(DISTINCT biz_id) FROM account_entries WHERE biz = $1)",
    )
    .bind(REFUND_BIZ)
    .fetch_one(world.db.pool())
    .await
    .unwrap();
    eprintln!(
        "\nledger audit: total balance {}, total of entries {}, {} mismatched accounts; {credited} \
         rewards credited and {reversals} refunds reversed with {entries} entries; {settled} \
         payments succeeded with {events} events, {refunded} of them refunded with \
         {refund_events} events",
        audit.total_balance,
        audit.total_entries,
        audit.mismatched.len()
    );
    assert_eq!(
        audit.total_balance, 0,
        "the ledger's balances do not sum to 0"
    );
    assert_eq!(
        audit.total_entries, 0,
        "the ledger's entries do not sum to 0"
    );
    assert!(
        audit.mismatched.is_empty(),
        "balances differ from their entries: {:?}",
        audit.mismatched
    );
    assert_eq!(
        posted_rewards, credited,
        "credited rewards without a posting"
    );
    assert_eq!(
        entries,
        3 * credited + 3 * reversals,
        "a credited reward or a reversal without its 3 lines"
    );
    assert_eq!(events, settled, "a settled payment without its one event");
    assert_eq!(
        (refunds, reversals, refund_events),
        (refunded, refunded, refunded),
        "a refunded payment without its one refund, reversal and event"
    );
    assert_eq!(
        paid_pending, 0,
        "an order paid at the provider left pending"
    );
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let world = Arc::new(runtime.block_on(build()));
    bench_notifications(c, &runtime, &world);
    bench_rewards(c, &runtime, &world);
    bench_refunds(c, &runtime, &world);
    let day = bench_reconcile(c, &runtime, &world);
    runtime.block_on(count_statements(&world, &day));
    runtime.block_on(audit(&world));
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
