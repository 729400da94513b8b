//! Payment notifications as WeChat Pay v3 sends them, both ways: [`open`] checks one (known
//! platform key serial, timestamp within 5 minutes, signature over the exact body) and decrypts
//! its resource into a [`Transaction`] or a refund ([`Opened`]); [`receive`] does the same, but
//! first looks for the key of a serial it does not know (a rotated platform key, certificate
//! mode); [`seal`] / [`seal_refund`] build one (the fake provider, tests). Every notification —
//! WeChat's, and the fake provider's — goes through [`receive`].
//!
//! A refusal is answered as WeChat expects — a 4xx/5xx status with `{"code": "FAIL",
//! "message": …}` — so that WeChat sends the notification again later ([`NotifyError`]).

use axum::{
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::{Deserialize, Serialize};

use super::{
    crypto::{ApiV3Key, CryptoError, SignedHeaders, SigningKey},
    provider::{NotificationKeys, RefundResult, RefundState, TradeState, Transaction},
};

/// What a verified notification says: a payment's transaction (`TRANSACTION.*`) or a refund
/// (`REFUND.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// A payment's transaction.
    Transaction(Transaction),
    /// A refund.
    Refund(RefundNotice),
}

/// A refund notification's decrypted resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundNotice {
    /// The merchant: another merchant's refund is refused.
    pub mchid: String,
    /// The refund.
    #[serde(flatten)]
    pub refund: RefundResult,
}

/// The only resource algorithm WeChat Pay v3 uses.
pub const ALGORITHM: &str = "AEAD_AES_256_GCM";

/// A notification's encrypted resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    /// `transaction`.
    pub original_type: String,
    /// [`ALGORITHM`].
    pub algorithm: String,
    /// Base64 of ciphertext + tag.
    pub ciphertext: String,
    /// Additional authenticated data.
    #[serde(default)]
    pub associated_data: String,
    /// 12-character nonce.
    pub nonce: String,
}

/// A notification's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// Notification id.
    pub id: String,
    /// When it was created (RFC 3339).
    pub create_time: String,
    /// `TRANSACTION.SUCCESS` (WeChat); the fake provider also sends `TRANSACTION.PAYERROR`.
    pub event_type: String,
    /// `encrypt-resource`.
    pub resource_type: String,
    /// Human summary.
    #[serde(default)]
    pub summary: String,
    /// The encrypted transaction.
    pub resource: Resource,
}

/// Why a notification was refused.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// Headers, timestamp, serial or signature wrong: not from the provider.
    #[error("notification refused: {0}")]
    Unverified(#[from] CryptoError),
    /// Verified, but not a notification we can read.
    #[error("malformed notification: {0}")]
    Malformed(String),
    /// Verified and read, but it does not match our payment (merchant, app, trade, amount).
    #[error("notification does not match our payment: {0}")]
    Mismatch(String),
    /// Our side failed (database): WeChat should send it again.
    #[error("notification not processed: {0:#}")]
    Internal(anyhow::Error),
}

impl NotifyError {
    /// The `outcome` label of `payment_notifications_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::Unverified(_) => "unverified",
            Self::Malformed(_) => "malformed",
            Self::Mismatch(_) => "mismatch",
            Self::Internal(_) => "failed",
        }
    }
}

impl IntoResponse for NotifyError {
    fn into_response(self) -> Response {
        let status = match &self {
            Self::Unverified(_) => StatusCode::UNAUTHORIZED,
            Self::Malformed(_) | Self::Mismatch(_) => StatusCode::BAD_REQUEST,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        // Our reasons, never our internals: the cause of an internal error stays in our log.
        let message = match &self {
            Self::Internal(_) => "internal error, please retry".to_owned(),
            other => other.to_string(),
        };
        (
            status,
            Json(serde_json::json!({ "code": "FAIL", "message": message })),
        )
            .into_response()
    }
}

/// Verifies the notification `body` with `headers` against `keys` at `now_secs` and decrypts
/// its transaction.
pub fn open(
    keys: &NotificationKeys,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: i64,
) -> Result<Opened, NotifyError> {
    let signed = SignedHeaders::from_headers(headers)?;
    keys.platform_keys.verify(&signed, body, now_secs)?;
    let notification: Notification = serde_json::from_slice(body)
        .map_err(|err| NotifyError::Malformed(format!("not a notification: {err}")))?;
    let resource = &notification.resource;
    if resource.algorithm != ALGORITHM {
        return Err(NotifyError::Malformed(format!(
            "unknown algorithm {:?}",
            resource.algorithm
        )));
    }
    let plain = keys.api_v3_key.decrypt(
        &resource.nonce,
        &resource.associated_data,
        &resource.ciphertext,
    )?;
    if notification.event_type.starts_with("REFUND.") {
        let notice: RefundNotice = serde_json::from_slice(&plain)
            .map_err(|err| NotifyError::Malformed(format!("not a refund: {err}")))?;
        if notice.mchid != keys.mchid {
            return Err(NotifyError::Mismatch(
                "another merchant's refund".to_owned(),
            ));
        }
        return Ok(Opened::Refund(notice));
    }
    serde_json::from_slice(&plain)
        .map(Opened::Transaction)
        .map_err(|err| NotifyError::Malformed(format!("not a transaction: {err}")))
}

/// [`open`], except that a notification signed by a serial the keyring does not know makes it
/// look for that key first ([`super::crypto::PlatformKeys::verify_or_refresh`]: in certificate
/// mode the platform certificates are downloaded, at most once a minute) — how a rotated
/// platform key is accepted without a restart. What `/pay/wechat/notify` uses.
pub async fn receive(
    keys: &NotificationKeys,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: i64,
) -> Result<Opened, NotifyError> {
    let signed = SignedHeaders::from_headers(headers)?;
    keys.platform_keys
        .verify_or_refresh(&signed, body, now_secs)
        .await?;
    open(keys, headers, body, now_secs)
}

/// A notification ready to send: its headers and body.
#[derive(Debug, Clone)]
pub struct SealedNotification {
    /// The `Wechatpay-*` headers.
    pub headers: SignedHeaders,
    /// The JSON body.
    pub body: Vec<u8>,
}

impl SealedNotification {
    /// The headers as a [`HeaderMap`] (with `Content-Type: application/json`).
    pub fn header_map(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in self.headers.pairs() {
            if let Ok(value) = value.parse() {
                map.insert(name, value);
            }
        }
        map.insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        );
        map
    }
}

/// Builds the notification of `transaction` as WeChat does: the transaction encrypted under
/// `api_v3_key`, the body signed by `platform_key` at `timestamp_secs`.
pub fn seal(
    api_v3_key: &ApiV3Key,
    platform_key: &SigningKey,
    transaction: &Transaction,
    timestamp_secs: i64,
) -> Result<SealedNotification, CryptoError> {
    let plain = serde_json::to_vec(transaction)
        .map_err(|err| CryptoError::InvalidKey(format!("transaction to JSON: {err}")))?;
    let (event_type, summary) = match transaction.trade_state {
        TradeState::Success => ("TRANSACTION.SUCCESS", "支付成功"),
        _ => ("TRANSACTION.PAYERROR", "支付失败"),
    };
    sealed(
        api_v3_key,
        platform_key,
        ("transaction", event_type, summary),
        &plain,
        timestamp_secs,
    )
}

/// Builds the notification of `notice` as WeChat does (`REFUND.SUCCESS`, `REFUND.ABNORMAL`,
/// `REFUND.CLOSED`).
pub fn seal_refund(
    api_v3_key: &ApiV3Key,
    platform_key: &SigningKey,
    notice: &RefundNotice,
    timestamp_secs: i64,
) -> Result<SealedNotification, CryptoError> {
    let plain = serde_json::to_vec(notice)
        .map_err(|err| CryptoError::InvalidKey(format!("refund to JSON: {err}")))?;
    let event_type = match notice.refund.status {
        RefundState::Success => "REFUND.SUCCESS",
        RefundState::Abnormal => "REFUND.ABNORMAL",
        RefundState::Closed | RefundState::Processing => "REFUND.CLOSED",
    };
    sealed(
        api_v3_key,
        platform_key,
        ("refund", event_type, "退款结果"),
        &plain,
        timestamp_secs,
    )
}

/// The notification of resource `plain`, of (`original_type`, `event_type`, `summary`).
fn sealed(
    api_v3_key: &ApiV3Key,
    platform_key: &SigningKey,
    (original_type, event_type, summary): (&str, &str, &str),
    plain: &[u8],
    timestamp_secs: i64,
) -> Result<SealedNotification, CryptoError> {
    let associated_data = original_type;
    let (nonce, ciphertext) = api_v3_key.encrypt(associated_data, plain)?;
    let notification = Notification {
        id: uuid::Uuid::new_v4().to_string(),
        create_time: super::china_time(timestamp_secs * 1000),
        event_type: event_type.to_owned(),
        resource_type: "encrypt-resource".to_owned(),
        summary: summary.to_owned(),
        resource: Resource {
            original_type: original_type.to_owned(),
            algorithm: ALGORITHM.to_owned(),
            ciphertext,
            associated_data: associated_data.to_owned(),
            nonce,
        },
    };
    let body = serde_json::to_vec(&notification)
        .map_err(|err| CryptoError::InvalidKey(format!("notification to JSON: {err}")))?;
    Ok(SealedNotification {
        headers: SignedHeaders::sign(platform_key, timestamp_secs, &body)?,
        body,
    })
}
