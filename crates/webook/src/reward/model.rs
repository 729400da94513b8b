//! The reward domain: a reward row ([`Reward`]) and where it stands ([`RewardStatus`]), what a
//! new reward records ([`NewReward`]) and which side of rewards a list shows ([`Role`]).
//! [`super::store`] reads and writes them; [`super::service`] decides with them.

use serde::Serialize;

/// Where a reward stands; spelled on the wire as the course frontend compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
pub enum RewardStatus {
    /// Waiting for payment.
    #[serde(rename = "RewardStatusInit")]
    Init,
    /// Paid and credited to the author.
    #[serde(rename = "RewardStatusPayed")]
    Payed,
    /// Will not be paid.
    #[serde(rename = "RewardStatusFailed")]
    Failed,
    /// Paid, then refunded to the payer: the author's credit is reversed.
    #[serde(rename = "RewardStatusRefunded")]
    Refunded,
}

impl RewardStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Init => "init",
            Self::Payed => "payed",
            Self::Failed => "failed",
            Self::Refunded => "refunded",
        }
    }
}

/// The stored spelling read back (how rows decode the `status` column).
impl TryFrom<String> for RewardStatus {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        match text.as_str() {
            "init" => Ok(Self::Init),
            "payed" => Ok(Self::Payed),
            "failed" => Ok(Self::Failed),
            "refunded" => Ok(Self::Refunded),
            other => Err(format!("unknown reward status {other:?}")),
        }
    }
}

/// A reward row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Reward {
    /// Id (`rid`).
    pub id: i64,
    /// Who pays.
    pub payer_id: i64,
    /// Who is paid.
    pub author_id: i64,
    /// The article.
    pub article_id: i64,
    /// Its title when it was rewarded.
    pub article_title: String,
    /// Fen.
    pub amt: i64,
    /// Where it stands.
    #[sqlx(try_from = "String")]
    pub status: RewardStatus,
    /// Its payment's trade number.
    pub trade_no: String,
    /// When its payment stops accepting payment (ms).
    pub expires_at: i64,
    /// Created (ms).
    pub ctime: i64,
    /// The platform's share (basis points) when it was made; `None` for rewards made before it
    /// was kept (the share in force applies).
    pub share_bps: Option<i64>,
}

/// A reward to record.
#[derive(Debug, Clone)]
pub struct NewReward<'a> {
    /// Who pays.
    pub payer_id: i64,
    /// Who is paid.
    pub author_id: i64,
    /// The article.
    pub article_id: i64,
    /// Its title.
    pub article_title: &'a str,
    /// Fen.
    pub amt: i64,
    /// Its payment's trade number.
    pub trade_no: &'a str,
    /// When its payment stops accepting payment (ms).
    pub expires_at: i64,
    /// The platform's share (basis points) now: its split.
    pub share_bps: i64,
}

/// Which side of rewards a list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The caller paid them.
    Sent,
    /// The caller's articles received them.
    Received,
}
