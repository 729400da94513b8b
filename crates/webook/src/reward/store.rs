//! The `rewards` table: who rewarded which article how much, and where its payment stands.
//! A reward is written `init` together with its payment (one transaction) and changes once —
//! to `payed` with the ledger posting of its split, or to `failed` — when its payment settles;
//! later a person may credit a failed one whose money arrived (`failed → payed`), and a refund
//! makes it `refunded`.

use sqlx::{Any, AnyConnection, Transaction};

use platform::db::Db;

use super::model::{NewReward, Reward, Role};

const COLUMNS: &str = "id, payer_id, author_id, article_id, article_title, amt, status, \
                       trade_no, expires_at, ctime, share_bps";

/// The rewards table; cheap to clone.
#[derive(Debug, Clone)]
pub struct RewardStore {
    db: Db,
}

impl RewardStore {
    /// The table in `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Records `reward` as `init` in `tx`; returns its id.
    pub async fn insert(
        tx: &mut AnyConnection,
        reward: &NewReward<'_>,
        now: i64,
    ) -> sqlx::Result<i64> {
        sqlx::query_scalar(
            "INSERT INTO rewards (payer_id, author_id, article_id, article_title, amt, status, \
             trade_no, expires_at, ctime, utime, share_bps) \
             VALUES ($1, $2, $3, $4, $5, 'init', $6, $7, $8, $8, $9) RETURNING id",
        )
        .bind(reward.payer_id)
        .bind(reward.author_id)
        .bind(reward.article_id)
        .bind(reward.article_title)
        .bind(reward.amt)
        .bind(reward.trade_no)
        .bind(reward.expires_at)
        .bind(now)
        .bind(reward.share_bps)
        .fetch_one(&mut *tx)
        .await
    }

    /// The payer's newest unpaid reward of `article_id` for `amt` that can still be paid
    /// after `usable_until` (so its code URL is shown again instead of a new order).
    pub async fn open_reward(
        &self,
        payer_id: i64,
        article_id: i64,
        amt: i64,
        usable_until: i64,
    ) -> sqlx::Result<Option<Reward>> {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM rewards WHERE payer_id = $1 AND article_id = $2 AND amt = $3 \
             AND status = 'init' AND expires_at > $4 ORDER BY id DESC LIMIT 1"
        ))
        .bind(payer_id)
        .bind(article_id)
        .bind(amt)
        .bind(usable_until)
        .fetch_optional(self.db.pool())
        .await
    }

    /// Reward `rid`.
    pub async fn by_id(&self, rid: i64) -> sqlx::Result<Option<Reward>> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM rewards WHERE id = $1"))
            .bind(rid)
            .fetch_optional(self.db.pool())
            .await
    }

    /// The rewards of `rids` (those that exist), in one query per few hundred.
    pub async fn by_ids(&self, rids: &[i64]) -> sqlx::Result<Vec<Reward>> {
        let mut found = Vec::with_capacity(rids.len());
        for chunk in rids.chunks(500) {
            let sql = format!(
                "SELECT {COLUMNS} FROM rewards WHERE id IN ({})",
                platform::db::placeholders(1, chunk.len())
            );
            let mut query = sqlx::query_as::<_, Reward>(&sql);
            for rid in chunk {
                query = query.bind(*rid);
            }
            found.extend(query.fetch_all(self.db.pool()).await?);
        }
        Ok(found)
    }

    /// Marks reward `rid` paid in `tx` — from `init`, or from `failed` when a person credits a
    /// payment that arrived after we gave up on it; returns the reward (whatever its status was).
    pub async fn mark_payed(
        tx: &mut Transaction<'static, Any>,
        rid: i64,
        now: i64,
    ) -> sqlx::Result<Option<Reward>> {
        sqlx::query(
            "UPDATE rewards SET status = 'payed', utime = $1 WHERE id = $2 \
             AND status IN ('init', 'failed')",
        )
        .bind(now)
        .bind(rid)
        .execute(&mut **tx)
        .await?;
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM rewards WHERE id = $1"))
            .bind(rid)
            .fetch_optional(&mut **tx)
            .await
    }

    /// Marks `init` reward `rid` failed; whether it changed.
    pub async fn mark_failed(&self, rid: i64, now: i64) -> sqlx::Result<bool> {
        let changed = sqlx::query(
            "UPDATE rewards SET status = 'failed', utime = $1 WHERE id = $2 AND status = 'init'",
        )
        .bind(now)
        .bind(rid)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        Ok(changed == 1)
    }

    /// Marks reward `rid` refunded (its payment was refunded; the reversal is posted); whether
    /// it changed.
    pub async fn mark_refunded(&self, rid: i64, now: i64) -> sqlx::Result<bool> {
        let changed = sqlx::query(
            "UPDATE rewards SET status = 'refunded', utime = $1 WHERE id = $2 \
             AND status <> 'refunded'",
        )
        .bind(now)
        .bind(rid)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        Ok(changed == 1)
    }

    /// Up to `limit` rewards of `uid` on `role`'s side (received: paid ones) with ids below
    /// `before`, newest first.
    pub async fn list(
        &self,
        uid: i64,
        role: Role,
        before: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<Reward>> {
        // An author sees what was paid to them, not readers' unpaid attempts.
        let filter = match role {
            Role::Sent => "payer_id = $1",
            Role::Received => "author_id = $1 AND status IN ('payed', 'refunded')",
        };
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM rewards WHERE {filter} AND id < $2 ORDER BY id DESC LIMIT $3"
        ))
        .bind(uid)
        .bind(before)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await
    }
}
