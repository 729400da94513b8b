//! The double-entry ledger: accounts holding integer fen, immutable entries, and postings —
//! balanced sets of entries (their amounts sum to 0) written in the caller's transaction
//! together with the balances they change.
//!
//! A posting is identified by its business event (`biz`, `biz_id`): the entries are unique by
//! (biz, biz_id, account), so posting the same event again — a repeated notification, a
//! redelivered event, a retry after a crash — writes nothing and reports
//! [`Posted::AlreadyPosted`]. Balances are changed in account-id order, so concurrent postings
//! that touch the same accounts queue on their rows instead of deadlocking (PostgreSQL), and a
//! balance is always the sum of its account's entries.

use sqlx::{Any, Transaction};

/// What an account is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccountKind {
    /// A user's balance (owner: the user id).
    User,
    /// The platform's share of rewards (owner 0).
    PlatformRevenue,
    /// Where incoming payments land before they are split (owner 0); negative while money
    /// received from the payment provider has been credited onwards.
    Clearing,
}

impl AccountKind {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::PlatformRevenue => "platform_revenue",
            Self::Clearing => "clearing",
        }
    }
}

/// The stored spelling read back.
impl TryFrom<&str> for AccountKind {
    type Error = String;

    fn try_from(text: &str) -> Result<Self, Self::Error> {
        match text {
            "user" => Ok(Self::User),
            "platform_revenue" => Ok(Self::PlatformRevenue),
            "clearing" => Ok(Self::Clearing),
            other => Err(format!("unknown account kind {other:?}")),
        }
    }
}

/// An account named by kind and owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccountRef {
    /// What it is for.
    pub kind: AccountKind,
    /// The user id for [`AccountKind::User`], 0 otherwise.
    pub owner: i64,
}

impl AccountRef {
    /// User `uid`'s account.
    pub fn user(uid: i64) -> Self {
        Self {
            kind: AccountKind::User,
            owner: uid,
        }
    }

    /// The platform's revenue account.
    pub fn platform_revenue() -> Self {
        Self {
            kind: AccountKind::PlatformRevenue,
            owner: 0,
        }
    }

    /// The clearing account of incoming payments.
    pub fn clearing() -> Self {
        Self {
            kind: AccountKind::Clearing,
            owner: 0,
        }
    }
}

/// One entry of a posting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Whose money moves.
    pub account: AccountRef,
    /// Fen; positive credits the account, negative debits it. Never 0.
    pub amt: i64,
    /// Shown to the account's owner.
    pub memo: String,
}

/// A balanced set of entries for one business event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posting {
    /// The kind of event (e.g. `reward`).
    pub biz: &'static str,
    /// The event's id (e.g. the reward id).
    pub biz_id: i64,
    /// At least two lines on distinct accounts, summing to 0.
    pub lines: Vec<Line>,
}

/// Why a posting was refused before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unbalanced {
    /// Fewer than two lines.
    #[error("a posting needs at least two lines")]
    TooFewLines,
    /// A line of 0 fen.
    #[error("a posting's line moves 0 fen")]
    ZeroLine,
    /// Two lines on one account.
    #[error("a posting names an account twice")]
    RepeatedAccount,
    /// The amounts do not sum to 0 (or overflow).
    #[error("a posting's lines sum to {0} fen, not 0")]
    NotZero(i128),
}

impl Posting {
    /// Checks the posting is balanced.
    pub fn check(&self) -> Result<(), Unbalanced> {
        if self.lines.len() < 2 {
            return Err(Unbalanced::TooFewLines);
        }
        if self.lines.iter().any(|line| line.amt == 0) {
            return Err(Unbalanced::ZeroLine);
        }
        let mut accounts: Vec<AccountRef> = self.lines.iter().map(|line| line.account).collect();
        accounts.sort_unstable();
        accounts.dedup();
        if accounts.len() != self.lines.len() {
            return Err(Unbalanced::RepeatedAccount);
        }
        let sum: i128 = self.lines.iter().map(|line| i128::from(line.amt)).sum();
        if sum != 0 {
            return Err(Unbalanced::NotZero(sum));
        }
        Ok(())
    }
}

/// What a posting did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    /// Its entries were written and the balances changed.
    Posted,
    /// This event was posted before: nothing was written.
    AlreadyPosted,
}

/// Why a posting failed.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// Not balanced: nothing written.
    #[error(transparent)]
    Unbalanced(#[from] Unbalanced),
    /// The event was posted before with other lines: nothing written (a bug, or tampering).
    #[error("{biz} {biz_id} was posted before with different lines")]
    Conflicting {
        /// The event kind.
        biz: &'static str,
        /// The event id.
        biz_id: i64,
    },
    /// The database.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The id of `account`, created (balance 0) when it does not exist yet.
pub async fn account_id(
    tx: &mut Transaction<'static, Any>,
    account: AccountRef,
    now: i64,
) -> sqlx::Result<i64> {
    sqlx::query(
        "INSERT INTO accounts (kind, owner_id, ctime, utime) VALUES ($1, $2, $3, $3) \
         ON CONFLICT (kind, owner_id) DO NOTHING",
    )
    .bind(account.kind.as_str())
    .bind(account.owner)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    sqlx::query_scalar("SELECT id FROM accounts WHERE kind = $1 AND owner_id = $2")
        .bind(account.kind.as_str())
        .bind(account.owner)
        .fetch_one(&mut **tx)
        .await
}

/// Posts `posting` in `tx` (the caller commits): its entries and the balances they change, or
/// nothing when the event was posted before with the same lines.
pub async fn post(
    tx: &mut Transaction<'static, Any>,
    posting: &Posting,
    now: i64,
) -> Result<Posted, PostError> {
    posting.check()?;
    let mut lines = Vec::with_capacity(posting.lines.len());
    for line in &posting.lines {
        lines.push((account_id(tx, line.account, now).await?, line));
    }
    // Balances change in account-id order: concurrent postings lock rows in one order.
    lines.sort_by_key(|(id, _)| *id);
    let existing = existing_entries(tx, posting).await?;
    if !existing.is_empty() {
        let same = existing.len() == lines.len()
            && lines
                .iter()
                .all(|(id, line)| existing.contains(&(*id, line.amt)));
        if same {
            return Ok(Posted::AlreadyPosted);
        }
        return Err(PostError::Conflicting {
            biz: posting.biz,
            biz_id: posting.biz_id,
        });
    }
    for (id, line) in &lines {
        // The unique key is the arbiter under concurrency: a second poster of this event
        // waits on the first's row and then conflicts (its transaction is rolled back).
        sqlx::query(
            "INSERT INTO account_entries (account_id, biz, biz_id, amt, memo, ctime) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(posting.biz)
        .bind(posting.biz_id)
        .bind(line.amt)
        .bind(&line.memo)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        sqlx::query("UPDATE accounts SET balance = balance + $1, utime = $2 WHERE id = $3")
            .bind(line.amt)
            .bind(now)
            .bind(id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(Posted::Posted)
}

/// `(account_id, amt)` of the entries already posted for the posting's event.
async fn existing_entries(
    tx: &mut Transaction<'static, Any>,
    posting: &Posting,
) -> sqlx::Result<Vec<(i64, i64)>> {
    sqlx::query_as("SELECT account_id, amt FROM account_entries WHERE biz = $1 AND biz_id = $2")
        .bind(posting.biz)
        .bind(posting.biz_id)
        .fetch_all(&mut **tx)
        .await
}

/// The lines posted for event (`biz`, `biz_id`), by account id (empty when none were).
pub async fn lines_of(
    tx: &mut Transaction<'static, Any>,
    biz: &str,
    biz_id: i64,
) -> sqlx::Result<Vec<Line>> {
    let rows: Vec<(String, i64, i64, String)> = sqlx::query_as(
        "SELECT a.kind, a.owner_id, e.amt, e.memo FROM account_entries e \
         JOIN accounts a ON a.id = e.account_id WHERE e.biz = $1 AND e.biz_id = $2 \
         ORDER BY e.account_id",
    )
    .bind(biz)
    .bind(biz_id)
    .fetch_all(&mut **tx)
    .await?;
    rows.into_iter()
        .map(|(kind, owner, amt, memo)| line_of_row(&kind, owner, amt, memo))
        .collect()
}

/// A line as an entry row joined with its account reads: (`accounts.kind`, owner, amt, memo).
pub(super) fn line_of_row(kind: &str, owner: i64, amt: i64, memo: String) -> sqlx::Result<Line> {
    Ok(Line {
        account: AccountRef {
            kind: AccountKind::try_from(kind).map_err(|err| sqlx::Error::Decode(err.into()))?,
            owner,
        },
        amt,
        memo,
    })
}

/// Whether `err` is the unique key refusing a concurrent second posting of one event.
pub fn is_duplicate_posting(err: &PostError) -> bool {
    matches!(err, PostError::Db(sqlx::Error::Database(db)) if db.is_unique_violation())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(account: AccountRef, amt: i64) -> Line {
        Line {
            account,
            amt,
            memo: String::new(),
        }
    }

    #[test]
    fn only_balanced_postings_on_distinct_accounts_pass() {
        let posting = |lines| Posting {
            biz: "reward",
            biz_id: 1,
            lines,
        };
        let (a, b, c) = (
            AccountRef::user(1),
            AccountRef::platform_revenue(),
            AccountRef::clearing(),
        );
        assert_eq!(
            posting(vec![line(c, -100), line(a, 90), line(b, 10)]).check(),
            Ok(())
        );
        assert_eq!(
            posting(vec![line(a, 1)]).check(),
            Err(Unbalanced::TooFewLines)
        );
        assert_eq!(
            posting(vec![line(a, 0), line(b, 0)]).check(),
            Err(Unbalanced::ZeroLine)
        );
        assert_eq!(
            posting(vec![line(a, 5), line(a, -5)]).check(),
            Err(Unbalanced::RepeatedAccount)
        );
        assert_eq!(
            posting(vec![line(c, -100), line(a, 91), line(b, 10)]).check(),
            Err(Unbalanced::NotZero(1))
        );
        assert_eq!(
            posting(vec![line(c, i64::MAX), line(a, i64::MAX)]).check(),
            Err(Unbalanced::NotZero(2 * i128::from(i64::MAX)))
        );
    }
}
