//! [`RewardService`]: create a reward and its payment, answer its status by long poll, list them,
//! and apply payment events — the split posted to the ledger in the transaction that marks the
//! reward paid.
//!
//! Rules:
//! - A reward is for a published article of someone else, 1–500 000 fen. Asking again for the
//!   same article and amount while an earlier order can still be paid (a minute or more left)
//!   returns that order's code URL and rid instead of a new order; another amount is another
//!   order (the course keyed its cached QR code without the amount).
//! - The reward and its payment are one transaction; the provider's order follows. If that
//!   fails the caller gets code 5 and may ask again (the same pending payment is sent again);
//!   an order never created is settled as failed by the payment sweep after expiry.
//! - Paid: `init → payed` and the posting `clearing −amt, author +(amt − share), platform
//!   +share` (share = amt × share_bps / 10 000 rounded down; no platform line when it is 0), in
//!   one transaction, under (`reward`, rid): a repeated event posts nothing. The author's
//!   share goes to the author (the course credited the payer). Config validation keeps
//!   `share_bps` at most [`MAX_SHARE_BPS`], so the author's line is at least 1 fen of any
//!   reward: the ledger refuses an empty line.
//! - Status by long poll: `POST /reward/detail` waits up to `reward_long_poll` for the reward
//!   to leave `init` — woken at once by this process's consumer, and re-reading the row once a
//!   second for changes another instance applied. It never spins. A poll of an order at least
//!   10 s old asks the provider once (at most once per reward per 10 s in a process), so a payer
//!   whose notification was lost sees `payed` while still on the page.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use serde::Serialize;
use tokio::sync::Notify;

use platform::{
    db::{duration_millis, now_millis},
    error::{AppError, Msg},
    events::{Event, EventStream, Subscription},
    page::{decode_cursor, overfetch, Page},
};
use tokio_util::sync::CancellationToken;

use super::{
    model::{NewReward, Reward, RewardStatus, Role},
    store::RewardStore,
};
use crate::{
    account::{self, AccountRef, Line, PostError, Posted, Posting},
    article::ArticleService,
    payment::{
        random_nonce as crypto_nonce, NewPayment, PaymentEvent, PaymentService, Seller,
        TOPIC_PAYMENT_FAILED, TOPIC_PAYMENT_REFUNDED, TOPIC_PAYMENT_SUCCEEDED,
    },
};

/// The `biz` of rewards in payments and the ledger.
pub const REWARD_BIZ: &str = "reward";
/// Smallest reward, fen.
pub const MIN_AMT: i64 = 1;
/// Largest reward, fen.
pub const MAX_AMT: i64 = 500_000;
/// Largest platform share (`reward_share_bps`) that still leaves the author at least 1 fen of
/// every reward the API accepts, so no split has an empty author line (which the ledger refuses,
/// and the `rewards` consumer would retry forever). The author's line, `amt` less
/// [`platform_share`], never shrinks as `amt` grows, so the smallest reward, [`MIN_AMT`], decides.
pub const MAX_SHARE_BPS: i64 = max_share_bps();
/// Consumer group of the payment events.
const GROUP: &str = "rewards";
/// How often a long poll re-reads its reward for changes made by another instance.
const RECHECK: Duration = Duration::from_secs(1);
/// A status poll asks the provider about an order at least this old…
const QUERY_AFTER: Duration = Duration::from_secs(10);
/// …and about one reward at most this often.
const QUERY_EVERY: Duration = Duration::from_secs(10);
/// An open reward is offered again only with at least this long left to pay it.
const REUSE_MARGIN: Duration = Duration::from_secs(60);

/// What `POST /articles/pub/reward` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RewardCreated {
    /// What the payer scans (or, with the fake provider, opens).
    #[serde(rename = "codeURL")]
    pub code_url: String,
    /// The reward's id.
    pub rid: i64,
}

/// The article of a listed reward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RewardedArticle {
    /// Id.
    pub id: i64,
    /// Title when rewarded.
    pub title: String,
}

/// A reward in a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RewardView {
    /// Id.
    pub rid: i64,
    /// The article.
    pub article: RewardedArticle,
    /// Fen.
    pub amt: i64,
    /// Where it stands.
    pub status: RewardStatus,
    /// Created (ms).
    pub ctime: i64,
}

/// Long-poll waiters by reward id; entries go when their last waiter does.
#[derive(Debug, Default, Clone)]
struct Waiters(Arc<Mutex<HashMap<i64, Weak<Notify>>>>);

impl Waiters {
    fn register(&self, rid: i64) -> Arc<Notify> {
        let mut waiters = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(notify) = waiters.get(&rid).and_then(Weak::upgrade) {
            return notify;
        }
        if waiters.len() >= 1024 {
            waiters.retain(|_, waiter| waiter.strong_count() > 0);
        }
        let notify = Arc::new(Notify::new());
        waiters.insert(rid, Arc::downgrade(&notify));
        notify
    }

    fn wake(&self, rid: i64) {
        let waiter = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&rid)
            .and_then(Weak::upgrade);
        if let Some(notify) = waiter {
            notify.notify_waiters();
        }
    }
}

/// The rewards service; cheap to clone.
#[derive(Debug, Clone)]
pub struct RewardService {
    store: RewardStore,
    payments: PaymentService,
    articles: ArticleService,
    waiters: Waiters,
    /// When a status poll last asked the provider about a reward (this process).
    asked: Arc<Mutex<HashMap<i64, std::time::Instant>>>,
    share_bps: i64,
    long_poll: Duration,
}

fn invalid(en: &'static str, zh: &'static str) -> AppError {
    AppError::InvalidInput(Msg::new(en, zh))
}

impl RewardService {
    /// Rewards in `store`, paid through `payments`, for `articles`; the platform keeps
    /// `share_bps` / 10 000 of each; a status request waits up to `long_poll`.
    pub fn new(
        store: RewardStore,
        payments: PaymentService,
        articles: ArticleService,
        share_bps: i64,
        long_poll: Duration,
    ) -> Self {
        Self {
            store,
            payments,
            articles,
            waiters: Waiters::default(),
            asked: Arc::default(),
            share_bps,
            long_poll,
        }
    }

    /// `payer` rewards article `article_id` with `amt` fen.
    pub async fn create(
        &self,
        payer: i64,
        article_id: i64,
        amt: i64,
    ) -> Result<RewardCreated, AppError> {
        if !(MIN_AMT..=MAX_AMT).contains(&amt) {
            return Err(invalid(
                "amt: a reward is 1 to 500000 fen",
                "amt：打赏金额为 1 到 500000 分",
            ));
        }
        let article = match self.articles.reader_view(article_id).await {
            Ok(article) => article,
            Err(AppError::NotFound(_)) => {
                return Err(invalid(
                    "only a published article can be rewarded",
                    "只能打赏已发表的文章",
                ))
            }
            Err(err) => return Err(err),
        };
        if article.author_id == payer {
            return Err(invalid(
                "you cannot reward your own article",
                "不能打赏自己的文章",
            ));
        }
        let now = now_millis();
        let reusable = match self
            .store
            .open_reward(payer, article_id, amt, now + duration_millis(REUSE_MARGIN))
            .await?
        {
            // Its payment may have settled (or been parked) before its event reached this
            // reward: then its code must not be shown again — a new order is made instead.
            Some(reward) if self.payments.payable(&reward.trade_no).await? => Some(reward),
            _ => None,
        };
        let reward_id_and_trade = match reusable {
            Some(reward) => (reward.id, reward.trade_no),
            None => {
                let trade_no = format!("rw{}", &crypto_nonce()[..24]);
                let expires_at = now + duration_millis(self.payments.expiry());
                let mut tx = self.store.db().writer().begin().await?;
                let rid = RewardStore::insert(
                    &mut tx,
                    &NewReward {
                        payer_id: payer,
                        author_id: article.author_id,
                        article_id,
                        article_title: &article.title,
                        amt,
                        trade_no: &trade_no,
                        expires_at,
                        share_bps: self.share_bps,
                    },
                    now,
                )
                .await?;
                self.payments
                    .record_order(
                        &mut tx,
                        &NewPayment {
                            trade_no: trade_no.clone(),
                            biz: REWARD_BIZ,
                            biz_id: rid,
                            amt,
                            description: description(&article.title),
                            expires_at,
                        },
                        now,
                    )
                    .await?;
                tx.commit().await?;
                (rid, trade_no)
            }
        };
        let (rid, trade_no) = reward_id_and_trade;
        let code_url = self.payments.prepay(&trade_no).await?;
        Ok(RewardCreated { code_url, rid })
    }

    /// The status of reward `rid` for its payer, once it leaves `init` or after the long poll.
    pub async fn status(&self, payer: i64, rid: i64) -> Result<RewardStatus, AppError> {
        let deadline = tokio::time::Instant::now() + self.long_poll;
        let mut asked = false;
        loop {
            let notify = self.waiters.register(rid);
            let woken = notify.notified();
            tokio::pin!(woken);
            // Registered before the read: a change committed after it wakes this poll.
            woken.as_mut().enable();
            let reward = self
                .store
                .by_id(rid)
                .await?
                .filter(|reward| reward.payer_id == payer)
                .ok_or_else(|| AppError::NotFound(Msg::new("no such reward", "打赏记录不存在")))?;
            let now = tokio::time::Instant::now();
            if reward.status != RewardStatus::Init || now >= deadline {
                return Ok(reward.status);
            }
            if !asked && self.may_ask_provider(&reward) {
                // The payer may have paid and the notification be late or lost: ask once. A
                // settlement wakes this poll through the consumer like a notification's.
                asked = true;
                if let Err(err) = self.payments.query_now(&reward.trade_no).await {
                    tracing::debug!(rid, %err, "asking the provider during a status poll failed");
                }
            }
            let recheck = RECHECK.min(deadline - now);
            tokio::select! {
                () = &mut woken => {}
                () = tokio::time::sleep(recheck) => {}
            }
        }
    }

    /// Whether a status poll of `reward` may ask the provider now: the order is old enough for
    /// the payer to have paid, and no poll in this process asked about it recently (a client
    /// polling in a loop asks the provider at most once per [`QUERY_EVERY`]).
    fn may_ask_provider(&self, reward: &Reward) -> bool {
        if now_millis() - reward.ctime < duration_millis(QUERY_AFTER) {
            return false;
        }
        let now = std::time::Instant::now();
        let mut asked = self
            .asked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if asked.len() >= 4096 {
            asked.retain(|_, at| now.duration_since(*at) < QUERY_EVERY);
        }
        match asked.get(&reward.id) {
            Some(at) if now.duration_since(*at) < QUERY_EVERY => false,
            _ => {
                asked.insert(reward.id, now);
                true
            }
        }
    }

    /// A page of `uid`'s rewards on `role`'s side.
    pub async fn list(
        &self,
        uid: i64,
        role: Role,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<RewardView>, AppError> {
        let before = match cursor {
            Some(cursor) => decode_cursor::<1>(cursor)?[0],
            None => i64::MAX,
        };
        let rewards = self.store.list(uid, role, before, overfetch(limit)).await?;
        let page = Page::from_overfetched(rewards, limit, |last| vec![last.id]);
        let items = page
            .items
            .into_iter()
            .map(|reward| RewardView {
                rid: reward.id,
                article: RewardedArticle {
                    id: reward.article_id,
                    title: reward.article_title,
                },
                amt: reward.amt,
                status: reward.status,
                ctime: reward.ctime,
            })
            .collect();
        Ok(Page {
            items,
            next: page.next,
        })
    }

    /// The ledger posting of paid reward `reward`: split by the share in force when it was
    /// made.
    pub fn split(&self, reward: &Reward) -> Posting {
        let share = platform_share(reward.amt, reward.share_bps.unwrap_or(self.share_bps));
        let memo = format!("reward {} · {}", reward.id, reward.article_title);
        let mut lines = vec![
            Line {
                account: AccountRef::clearing(),
                amt: -reward.amt,
                memo: memo.clone(),
            },
            Line {
                account: AccountRef::user(reward.author_id),
                amt: reward.amt - share,
                memo: memo.clone(),
            },
        ];
        if share > 0 {
            lines.push(Line {
                account: AccountRef::platform_revenue(),
                amt: share,
                memo,
            });
        }
        Posting {
            biz: REWARD_BIZ,
            biz_id: reward.id,
            lines,
        }
    }

    /// Applies a succeeded payment of reward `rid`: paid, and its split posted, in one
    /// transaction (once, however often it is applied).
    pub async fn apply_paid(&self, rid: i64, amt: i64) -> anyhow::Result<()> {
        match self.apply_paid_once(rid, amt).await {
            // A concurrent delivery of the same event posted first; this try sees its entries.
            Err(err) if account::is_duplicate_posting(&err) => self
                .apply_paid_once(rid, amt)
                .await
                .map_err(posting_failure)?,
            outcome => outcome.map_err(posting_failure)?,
        }
        self.waiters.wake(rid);
        Ok(())
    }

    async fn apply_paid_once(&self, rid: i64, amt: i64) -> Result<(), PostError> {
        let now = now_millis();
        let mut tx = self.store.db().writer().begin().await?;
        let Some(reward) = RewardStore::mark_payed(&mut tx, rid, now).await? else {
            tracing::error!(rid, "a payment succeeded for a reward that does not exist");
            return Ok(());
        };
        if reward.status == RewardStatus::Refunded {
            // Refunded before its credit landed (the refund waits for a credit it can reverse,
            // so this is a late redelivery): nothing to credit.
            tracing::warn!(rid, "a payment event for a refunded reward: not credited");
            tx.commit().await?;
            return Ok(());
        }
        if reward.amt != amt {
            tracing::error!(
                rid,
                paid = amt,
                reward = reward.amt,
                "a reward's payment differs from it"
            );
        }
        match account::post(&mut tx, &self.split(&reward), now).await {
            Ok(Posted::Posted | Posted::AlreadyPosted) => {}
            // Posted before with another split (`reward_share_bps` changed in between): the
            // first posting stands.
            Err(PostError::Conflicting { .. }) => {
                tracing::warn!(
                    rid,
                    "reward posted before with another split; that one stands"
                );
            }
            Err(err) => return Err(err),
        }
        tx.commit().await?;
        Ok(())
    }

    /// Applies a failed payment of reward `rid`.
    pub async fn apply_failed(&self, rid: i64) -> anyhow::Result<()> {
        self.store.mark_failed(rid, now_millis()).await?;
        self.waiters.wake(rid);
        Ok(())
    }

    /// Applies a refunded payment of reward `rid` (the reversal was posted with the refund).
    pub async fn apply_refunded(&self, rid: i64) -> anyhow::Result<()> {
        self.store.mark_refunded(rid, now_millis()).await?;
        self.waiters.wake(rid);
        Ok(())
    }

    async fn apply(&self, topic: &str, events: &[Event]) -> anyhow::Result<()> {
        for event in events {
            let payment = event.decode::<PaymentEvent>()?;
            if payment.biz != REWARD_BIZ {
                continue;
            }
            match topic {
                TOPIC_PAYMENT_SUCCEEDED => self.apply_paid(payment.biz_id, payment.amt).await?,
                TOPIC_PAYMENT_REFUNDED => self.apply_refunded(payment.biz_id).await?,
                _ => self.apply_failed(payment.biz_id).await?,
            }
        }
        Ok(())
    }

    /// The consumers of payment events, until `stop`.
    pub fn consumers(
        &self,
        events: &EventStream,
        subscription: Subscription,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let consumers: Vec<_> = [
            TOPIC_PAYMENT_SUCCEEDED,
            TOPIC_PAYMENT_FAILED,
            TOPIC_PAYMENT_REFUNDED,
        ]
        .into_iter()
        .map(|topic| {
            let service = self.clone();
            tokio::spawn(events.subscribe(
                subscription,
                topic,
                GROUP,
                100,
                Duration::from_millis(20),
                stop.clone(),
                move |batch| {
                    let service = service.clone();
                    async move { service.apply(topic, &batch).await }
                },
            ))
        })
        .collect();
        async move {
            for consumer in consumers {
                match consumer.await {
                    Err(err) if err.is_panic() => {
                        tracing::error!(%err, "a reward consumer panicked");
                    }
                    // Cancelled with the runtime at shutdown: no failure to report.
                    _ => {}
                }
            }
        }
    }
}

/// What reconciliation checks a reward's posting against: its split by the share of its time.
#[async_trait::async_trait]
impl Seller for RewardService {
    async fn expected_postings(&self, rids: &[i64]) -> anyhow::Result<HashMap<i64, Posting>> {
        Ok(self
            .store
            .by_ids(rids)
            .await?
            .iter()
            .map(|reward| (reward.id, self.split(reward)))
            .collect())
    }
}

/// A posting the ledger refuses as unbalanced can never be applied, however often it is tried:
/// a permanent failure (the payment's event is parked for an operator, and the consumer goes
/// on). Anything else is the database's, and transient or unclassified as it says.
fn posting_failure(err: PostError) -> anyhow::Error {
    match err {
        PostError::Unbalanced(_) => platform::events::failure::permanent(err),
        other => other.into(),
    }
}

/// The platform's share of a reward of `amt` fen at `share_bps` basis points, rounded down to fen.
pub const fn platform_share(amt: i64, share_bps: i64) -> i64 {
    amt * share_bps / 10_000
}

/// The largest share in basis points (at most 10 000) that leaves the author of a [`MIN_AMT`]
/// reward at least 1 fen; see [`MAX_SHARE_BPS`].
const fn max_share_bps() -> i64 {
    let mut bps = 10_000;
    while bps > 0 && MIN_AMT - platform_share(MIN_AMT, bps) < 1 {
        bps -= 1;
    }
    bps
}

/// The longest order description, in UTF-8 bytes. WeChat documents `description` as
/// `string[1,127]`; counting bytes keeps within it however WeChat counts (a title of Chinese
/// characters is 3 bytes each).
const MAX_DESCRIPTION_BYTES: usize = 127;

/// The order's description: `打赏：` and as much of the article's title as fits in
/// [`MAX_DESCRIPTION_BYTES`], cut at a character boundary.
fn description(title: &str) -> String {
    let mut description = String::from("打赏：");
    for c in title.chars().filter(|c| !c.is_control()) {
        if description.len() + c.len_utf8() > MAX_DESCRIPTION_BYTES {
            break;
        }
        description.push(c);
    }
    description
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_fits_wechats_limit_in_bytes_and_cuts_at_a_character() {
        let chinese = "长".repeat(100);
        let cut = description(&chinese);
        assert!(cut.len() <= MAX_DESCRIPTION_BYTES, "{} bytes", cut.len());
        // 9 bytes of prefix, then 39 characters of 3 bytes: 126 bytes, the 40th would be 129.
        assert_eq!(cut, format!("打赏：{}", "长".repeat(39)));
        assert_eq!(description("Rust"), "打赏：Rust");
        let ascii = "a".repeat(200);
        assert_eq!(description(&ascii).len(), MAX_DESCRIPTION_BYTES);
        assert_eq!(description("a\nb"), "打赏：ab");
    }
}
