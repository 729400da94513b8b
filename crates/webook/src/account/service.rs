//! The ledger as the rest of the crate uses it ([`Ledger`]): postings in a transaction of the
//! ledger's own ([`Ledger::post_once`], over [`super::ledger::post`]), a user's balance and
//! entries for `GET /account` ([`Ledger::user_account`]), and the checks reconciliation and
//! tests make ([`Ledger::posted`], [`Ledger::audit`]).

use serde::Serialize;

use platform::{
    db::{now_millis, Db},
    error::AppError,
    page::{decode_cursor, overfetch, Page},
};

use super::ledger::{self, AccountKind, Line, PostError, Posted, Posting};

/// An entry as its account's owner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    /// Entry id.
    pub id: i64,
    /// Fen: positive in, negative out.
    pub amt: i64,
    /// The business event.
    pub biz: String,
    /// Its id.
    pub biz_id: i64,
    /// What it was.
    pub memo: String,
    /// When (ms).
    pub ctime: i64,
}

/// A user's account: balance and a page of entries, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AccountView {
    /// Fen.
    pub balance: i64,
    /// Always `CNY`.
    #[schema(value_type = String, example = "CNY")]
    pub currency: &'static str,
    /// Newest first.
    pub entries: Page<EntryView>,
}

/// What [`Ledger::audit`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    /// The sum of every balance (0 in a sound ledger).
    pub total_balance: i64,
    /// The sum of every entry (0 in a sound ledger).
    pub total_entries: i64,
    /// Accounts whose balance is not the sum of their entries: `(account id, balance, sum)`.
    pub mismatched: Vec<(i64, i64, i64)>,
}

/// The ledger; cheap to clone.
#[derive(Debug, Clone)]
pub struct Ledger {
    db: Db,
}

impl Ledger {
    /// The ledger in `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Posts `posting` in a transaction of its own; a concurrent posting of the same event that
    /// won the race makes this one [`Posted::AlreadyPosted`].
    pub async fn post_once(&self, posting: &Posting) -> Result<Posted, PostError> {
        match self.post_in_own_transaction(posting).await {
            // The other posting committed first: a second try sees its entries.
            Err(err) if ledger::is_duplicate_posting(&err) => {
                self.post_in_own_transaction(posting).await
            }
            outcome => outcome,
        }
    }

    async fn post_in_own_transaction(&self, posting: &Posting) -> Result<Posted, PostError> {
        let mut tx = self.db.writer().begin().await?;
        let posted = ledger::post(&mut tx, posting, now_millis()).await?;
        tx.commit().await?;
        Ok(posted)
    }

    /// User `uid`'s balance (0 without an account) and a page of entries after `cursor`.
    pub async fn user_account(
        &self,
        uid: i64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AccountView, AppError> {
        let before = match cursor {
            Some(cursor) => decode_cursor::<1>(cursor)?[0],
            None => i64::MAX,
        };
        let account: Option<(i64, i64)> =
            sqlx::query_as("SELECT id, balance FROM accounts WHERE kind = $1 AND owner_id = $2")
                .bind(AccountKind::User.as_str())
                .bind(uid)
                .fetch_optional(self.db.pool())
                .await?;
        let Some((id, balance)) = account else {
            return Ok(AccountView {
                balance: 0,
                currency: "CNY",
                entries: Page {
                    items: Vec::new(),
                    next: None,
                },
            });
        };
        let items: Vec<EntryView> = sqlx::query_as(
            "SELECT id, amt, biz, biz_id, memo, ctime FROM account_entries \
             WHERE account_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
        )
        .bind(id)
        .bind(before)
        .bind(overfetch(limit))
        .fetch_all(self.db.pool())
        .await?;
        Ok(AccountView {
            balance,
            currency: "CNY",
            entries: Page::from_overfetched(items, limit, |last| vec![last.id]),
        })
    }

    /// User `uid`'s balance in fen (0 without an account).
    pub async fn user_balance(&self, uid: i64) -> sqlx::Result<i64> {
        let balance: Option<i64> =
            sqlx::query_scalar("SELECT balance FROM accounts WHERE kind = $1 AND owner_id = $2")
                .bind(AccountKind::User.as_str())
                .bind(uid)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(balance.unwrap_or(0))
    }

    /// Up to `limit` ids of the `biz` postings with entries written in `[from, to)` (ms), ids
    /// above `after`, ascending (keyset).
    pub async fn posted_between(
        &self,
        biz: &str,
        (from, to): (i64, i64),
        after: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<i64>> {
        sqlx::query_scalar(
            "SELECT DISTINCT biz_id FROM account_entries WHERE biz = $1 AND ctime >= $2 \
             AND ctime < $3 AND biz_id > $4 ORDER BY biz_id LIMIT $5",
        )
        .bind(biz)
        .bind(from)
        .bind(to)
        .bind(after)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await
    }

    /// The lines of the `biz` postings of `biz_ids` (those that have one), by id.
    pub async fn lines(
        &self,
        biz: &str,
        biz_ids: &[i64],
    ) -> sqlx::Result<std::collections::HashMap<i64, Vec<Line>>> {
        let mut lines: std::collections::HashMap<i64, Vec<Line>> = Default::default();
        for chunk in biz_ids.chunks(500) {
            let sql = format!(
                "SELECT e.biz_id, a.kind, a.owner_id, e.amt, e.memo FROM account_entries e \
                 JOIN accounts a ON a.id = e.account_id WHERE e.biz = $1 AND e.biz_id IN ({}) \
                 ORDER BY e.biz_id, e.account_id",
                platform::db::placeholders(2, chunk.len())
            );
            let mut query = sqlx::query_as::<_, (i64, String, i64, i64, String)>(&sql).bind(biz);
            for id in chunk {
                query = query.bind(*id);
            }
            for (biz_id, kind, owner, amt, memo) in query.fetch_all(self.db.pool()).await? {
                lines
                    .entry(biz_id)
                    .or_default()
                    .push(ledger::line_of_row(&kind, owner, amt, memo)?);
            }
        }
        Ok(lines)
    }

    /// Which of `biz_ids` have a posting of `biz` (reconciliation: was a paid sale credited?),
    /// in one query per few hundred ids.
    pub async fn posted(
        &self,
        biz: &str,
        biz_ids: &[i64],
    ) -> sqlx::Result<std::collections::HashSet<i64>> {
        let mut posted = std::collections::HashSet::new();
        for chunk in biz_ids.chunks(500) {
            let sql = format!(
                "SELECT DISTINCT biz_id FROM account_entries WHERE biz = $1 AND biz_id IN ({})",
                platform::db::placeholders(2, chunk.len())
            );
            let mut query = sqlx::query_scalar::<_, i64>(&sql).bind(biz);
            for id in chunk {
                query = query.bind(*id);
            }
            posted.extend(query.fetch_all(self.db.pool()).await?);
        }
        Ok(posted)
    }

    /// Sums the whole ledger: every balance, every entry, and each account against its entries.
    pub async fn audit(&self) -> sqlx::Result<Audit> {
        let total_balance: Option<i64> =
            sqlx::query_scalar("SELECT CAST(SUM(balance) AS BIGINT) FROM accounts")
                .fetch_one(self.db.pool())
                .await?;
        let total_entries: Option<i64> =
            sqlx::query_scalar("SELECT CAST(SUM(amt) AS BIGINT) FROM account_entries")
                .fetch_one(self.db.pool())
                .await?;
        let mismatched: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT a.id, a.balance, CAST(COALESCE(SUM(e.amt), 0) AS BIGINT) AS total \
             FROM accounts a LEFT JOIN account_entries e ON e.account_id = a.id \
             GROUP BY a.id, a.balance HAVING a.balance <> COALESCE(SUM(e.amt), 0) ORDER BY a.id",
        )
        .fetch_all(self.db.pool())
        .await?;
        Ok(Audit {
            total_balance: total_balance.unwrap_or(0),
            total_entries: total_entries.unwrap_or(0),
            mismatched,
        })
    }
}
