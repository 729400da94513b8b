//! A stand-in for WeChat Pay API v3 (Native) on loopback: axum on `127.0.0.1:0`, on a tokio
//! task, for the real client (`webook::payment::WechatPay`) to talk to.
//!
//! It holds its own platform key and only the merchant's PUBLIC key. A request's way through
//! it: counted and kept ([`FakeWechatPay::calls`], [`FakeWechatPay::last_request`]); its
//! `Authorization` checked with this file's own reading of the signature scheme (scheme, mchid,
//! merchant serial, a timestamp within 5 minutes, `SHA256withRSA` over
//! `METHOD\nPATH?QUERY\nTIMESTAMP\nNONCE\nBODY\n` against the merchant's public key) — a
//! failure is answered 401 `SIGN_ERROR` unsigned, as WeChat does, and counted in
//! [`FakeWechatPay::signature_failures`]; then the [`Mode`] may answer 500 or never; then the
//! API answers from the orders it keeps in memory:
//!
//! - `POST /v3/pay/transactions/native`: checks appid/mchid and the fields; creates the order
//!   (`NOTPAY`) and answers its `code_url` — again for the same trade number and amount, 400
//!   `INVALID_REQUEST` for another amount.
//! - `GET /v3/pay/transactions/out-trade-no/{no}?mchid=`: the transaction, or 404
//!   `ORDER_NOT_EXIST`. A test pays ([`FakeWechatPay::pay`]) or fails ([`FakeWechatPay::fail`])
//!   an order, or has every order paid as it is created ([`FakeWechatPay::set_pay_on_create`]).
//! - `POST …/{no}/close`: 204 (the order is `CLOSED`); 400 `ORDERPAID` for a paid order.
//! - `GET /v3/bill/tradebill?bill_date=&bill_type=ALL`: the SHA1 and download URL of the bill of
//!   the orders paid that day (China Standard Time), written by this file (not the client's
//!   writer); 400 `NO_STATEMENT_EXIST` for a day without payments; 400 `STATEMENT_CREATING`
//!   (the bill is still being generated) for the day [`FakeWechatPay::set_bill_not_ready`]
//!   names.
//!   `GET /v3/billdownload/file?token=` serves the file, unsigned like WeChat's.
//!
//! Every other answer is signed with the platform key (`Wechatpay-*` headers), unless
//! [`FakeWechatPay::set_signing`] says to tamper with the body after signing, sign with a key
//! the client does not know, or not sign; [`FakeWechatPay::tamper_bills`] alters bill files
//! after their hash was given. [`FakeWechatPay::config`] builds the client's configuration
//! through `PaymentSettings::wechat()`, as webook reads it: PEM keys, the fake's endpoint.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, OnceLock},
    time::Duration,
};

use aws_lc_rs::{
    digest::{digest, SHA1_FOR_LEGACY_USE_ONLY},
    signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256},
};
use axum::{
    body::Body,
    extract::{Request, State},
    http::{header, HeaderValue, StatusCode},
    response::Response,
    Router,
};
use base64::{engine::general_purpose::STANDARD as BASE64, Engine as _};
use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, Utc};
use platform::config::Secret;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::{net::TcpListener, task::JoinHandle};
use webook::payment::{
    crypto::{random_nonce, ApiV3Key, SigningKey},
    notify::{RefundNotice, SealedNotification},
    provider::{
        RefundAmount, RefundResult, RefundState, TradeState, Transaction, TransactionAmount,
    },
    settings::{PaymentSettings, PlatformMode, ProviderName, WechatPayConfig},
};

/// The merchant id the fake serves.
pub const MCHID: &str = "1900000109";
/// The app id of the merchant.
pub const APPID: &str = "wxd678efh567hg6787";
/// The merchant certificate's serial (`serial_no` of signed requests).
pub const MERCHANT_SERIAL: &str = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1";
/// The serial of the fake's platform key.
pub const PLATFORM_SERIAL: &str = "PUB_KEY_ID_0119000001092024060100000001";
/// The serial of the key answers are signed with under [`Signing::UnknownSerial`].
pub const UNKNOWN_SERIAL: &str = "PUB_KEY_ID_0119000001092099010100000099";
/// `notify_url` of the configurations [`FakeWechatPay::config`] builds.
pub const NOTIFY_URL: &str = "https://webook.test/pay/wechat/notify";

/// How the fake answers requests whose signature it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// As WeChat Pay.
    #[default]
    Normal,
    /// HTTP 500 `SYSTEM_ERROR`.
    ServerError,
    /// Never (the request waits until the client gives up).
    Hang,
}

/// How the fake signs its JSON answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Signing {
    /// With its platform key, as WeChat Pay.
    #[default]
    Valid,
    /// Correctly, then the body is changed (`NOTPAY` becomes `SUCCESS`, else a space is added;
    /// an empty body's `Wechatpay-Timestamp` is moved instead).
    Tampered,
    /// With a key of [`UNKNOWN_SERIAL`], which the client's configuration does not hold.
    UnknownSerial,
    /// Not at all: no `Wechatpay-*` headers.
    Unsigned,
}

/// A request as the fake received it.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub method: String,
    /// E.g. `/v3/pay/transactions/out-trade-no/T1?mchid=1900000109`.
    pub path_and_query: String,
    /// Names lower-case, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawRequest {
    /// The value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// An order the fake keeps.
#[derive(Debug, Clone)]
pub struct FakeOrder {
    /// The prepay request's JSON, as received.
    pub request: Value,
    /// The code URL it answered.
    pub code_url: String,
    /// Its transaction, as a query answers it.
    pub transaction: Transaction,
    /// What it sells (`商品名称` in the bill).
    description: String,
    /// When it was paid, China Standard Time.
    paid_at: Option<NaiveDateTime>,
    /// Its refund, once asked for.
    pub refund: Option<FakeRefund>,
}

/// A refund the fake keeps.
#[derive(Debug, Clone)]
pub struct FakeRefund {
    /// The refund request's JSON, as received.
    pub request: Value,
    /// As a refund query answers it.
    pub result: RefundResult,
    /// When it succeeded, China Standard Time.
    done_at: Option<NaiveDateTime>,
}

/// The running fake; the server stops when it is dropped.
pub struct FakeWechatPay {
    /// Its base URL (`http://127.0.0.1:PORT`), the client's endpoint.
    pub base_url: String,
    /// The merchant's key, PKCS#8 DER: only to hand to the client's configuration.
    merchant_key: Vec<u8>,
    api_v3_key: ApiV3Key,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

struct Shared {
    base_url: String,
    /// The platform keys, the one signing now, and their certificates (key rotation).
    platform: Mutex<PlatformSide>,
    /// Encrypts the listed certificates, as WeChat does.
    api_v3_key: ApiV3Key,
    /// Generated on first use: only tests of [`Signing::UnknownSerial`] need it.
    unknown_key: OnceLock<SigningKey>,
    /// SubjectPublicKeyInfo DER of the merchant's key: what request signatures are checked with.
    merchant_public_key: Vec<u8>,
    state: Mutex<FakeState>,
}

#[derive(Default)]
struct FakeState {
    orders: HashMap<String, FakeOrder>,
    /// Bill files by download token.
    files: HashMap<String, Vec<u8>>,
    mode: Mode,
    signing: Signing,
    tamper_bills: bool,
    bill_not_ready: Option<NaiveDate>,
    pay_on_create: bool,
    calls: usize,
    signature_failures: usize,
    requests: Vec<RawRequest>,
    transactions: u64,
    /// Close answers 202 `USER_PAYING` and leaves the order `USERPAYING` (the payer is
    /// entering their password as we close).
    user_paying_on_close: bool,
    /// Requests whose path holds this are carried out, and their answer never sent.
    lose_answers_to: Option<String>,
}

fn china() -> FixedOffset {
    FixedOffset::east_opt(8 * 3600).unwrap()
}

fn pem(label: &str, der: &[u8]) -> String {
    let base64 = BASE64.encode(der);
    let lines: Vec<&str> = base64
        .as_bytes()
        .chunks(64)
        .map(|chunk| std::str::from_utf8(chunk).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

impl FakeWechatPay {
    /// Starts the fake on a free loopback port, with a new platform key and a new merchant key
    /// (WeChat Pay public key mode: the key is [`PLATFORM_SERIAL`], no certificate is listed).
    pub async fn start() -> Self {
        Self::start_with(PlatformSide::public_key_mode()).await
    }

    /// Starts the fake in platform certificate mode: its platform key has a certificate, issued
    /// by the fake's own CA and listed by `GET /v3/certificates`.
    pub async fn start_with_certificates() -> Self {
        Self::start_with(PlatformSide::certificate_mode()).await
    }

    async fn start_with(platform: PlatformSide) -> Self {
        let merchant = SigningKey::generate(MERCHANT_SERIAL).unwrap();
        let api_v3_key = ApiV3Key::generate();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared {
            base_url: base_url.clone(),
            platform: Mutex::new(platform),
            api_v3_key: api_v3_key.clone(),
            unknown_key: OnceLock::new(),
            merchant_public_key: merchant.public_key_der().unwrap(),
            state: Mutex::new(FakeState::default()),
        });
        let router = Router::new().fallback(handle).with_state(shared.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Self {
            base_url,
            merchant_key: merchant.pkcs8_der().unwrap(),
            api_v3_key,
            shared,
            server,
        }
    }

    /// Payment settings of a `wechat` provider pointed at this fake: the merchant's key and the
    /// platform's public key as PEM, a 5-second timeout.
    pub fn settings(&self) -> PaymentSettings {
        PaymentSettings {
            pay_provider: Some(ProviderName::Wechat),
            wechatpay_endpoint: self.base_url.clone(),
            wechatpay_mchid: MCHID.to_owned(),
            wechatpay_appid: APPID.to_owned(),
            wechatpay_merchant_serial: MERCHANT_SERIAL.to_owned(),
            wechatpay_merchant_key: Secret::new(pem("PRIVATE KEY", &self.merchant_key)),
            wechatpay_api_v3_key: Secret::new(self.api_v3_key.as_text()),
            // Empty in certificate mode, whose keys have certificate serials (see
            // `certificate_settings`, which configures no key).
            wechatpay_platform_serial: PLATFORM_SERIAL.to_owned(),
            wechatpay_platform_public_key: self.public_key_pem(PLATFORM_SERIAL),
            wechatpay_notify_url: NOTIFY_URL.to_owned(),
            wechatpay_timeout: Duration::from_secs(5),
            ..PaymentSettings::default()
        }
    }

    /// The client configuration of [`FakeWechatPay::settings`].
    pub fn config(&self) -> WechatPayConfig {
        self.settings().wechat().unwrap()
    }

    /// [`FakeWechatPay::config`] with another per-request timeout.
    pub fn config_with_timeout(&self, timeout: Duration) -> WechatPayConfig {
        let mut settings = self.settings();
        settings.wechatpay_timeout = timeout;
        settings.wechat().unwrap()
    }

    /// [`FakeWechatPay::config`] whose requests are signed by `key` rather than the merchant's.
    pub fn config_signed_by(&self, key: &SigningKey) -> WechatPayConfig {
        let mut settings = self.settings();
        settings.wechatpay_merchant_key =
            Secret::new(pem("PRIVATE KEY", &key.pkcs8_der().unwrap()));
        settings.wechat().unwrap()
    }

    /// The payer pays the order `trade_no` (which must be `NOTPAY`): it becomes `SUCCESS` with
    /// a transaction id and a success time of now. Returns the transaction as a query shows it.
    pub fn pay(&self, trade_no: &str) -> Transaction {
        pay_order(&mut self.state(), trade_no)
    }

    /// While `instantly`, every order is paid as soon as it is created (the payer scanned the
    /// code at once); no notification is sent, as none ever is by this fake.
    pub fn set_pay_on_create(&self, instantly: bool) {
        self.state().pay_on_create = instantly;
    }

    /// The payment of order `trade_no` (which must be `NOTPAY`) fails: it becomes `PAYERROR`.
    pub fn fail(&self, trade_no: &str) -> Transaction {
        let mut state = self.state();
        let order = state.orders.get_mut(trade_no).expect("an order to fail");
        assert_eq!(order.transaction.trade_state, TradeState::Notpay);
        order.transaction.trade_state = TradeState::Payerror;
        order.transaction.trade_state_desc = "支付失败，请重新下单支付".to_owned();
        order.transaction.clone()
    }

    /// The notification WeChat sends for `transaction`: encrypted under the APIv3 key, signed
    /// with the platform key, now.
    pub fn notification(
        &self,
        transaction: &Transaction,
    ) -> webook::payment::notify::SealedNotification {
        webook::payment::notify::seal(
            &self.api_v3_key,
            &self.platform().current,
            transaction,
            Utc::now().timestamp(),
        )
        .unwrap()
    }

    /// The payer starts paying order `trade_no` (`NOTPAY`): it becomes `USERPAYING`.
    pub fn start_paying(&self, trade_no: &str) {
        let mut state = self.state();
        let order = state.orders.get_mut(trade_no).expect("an order to pay");
        assert_eq!(order.transaction.trade_state, TradeState::Notpay);
        order.transaction.trade_state = TradeState::Userpaying;
        order.transaction.trade_state_desc = "用户支付中".to_owned();
    }

    /// From now on, requests whose path holds `fragment` (e.g. `/v3/refund/`) are carried out
    /// but never answered; `None` answers them again.
    pub fn lose_answers_to(&self, fragment: Option<&str>) {
        self.state().lose_answers_to = fragment.map(str::to_owned);
    }

    /// From now on, closing an order the payer is paying answers 202 `USER_PAYING` and leaves
    /// it `USERPAYING`, as WeChat documents.
    pub fn user_paying_on_close(&self) {
        self.state().user_paying_on_close = true;
    }

    /// The refund of order `trade_no` (asked as `PROCESSING`) finishes: `SUCCESS` (the money is
    /// back) or `ABNORMAL`. Returns the refund as its notification carries it.
    pub fn finish_refund(&self, trade_no: &str, success: bool) -> RefundNotice {
        let mut state = self.state();
        let order = state
            .orders
            .get_mut(trade_no)
            .expect("an order with a refund");
        let refund = order.refund.as_mut().expect("a refund to finish");
        assert_eq!(refund.result.status, RefundState::Processing);
        let now = Utc::now().with_timezone(&china());
        if success {
            refund.result.status = RefundState::Success;
            refund.result.success_time = Some(now.format("%Y-%m-%dT%H:%M:%S%:z").to_string());
            refund.done_at = Some(now.naive_local());
            order.transaction.trade_state = TradeState::Refund;
            order.transaction.trade_state_desc = "转入退款".to_owned();
        } else {
            refund.result.status = RefundState::Abnormal;
        }
        RefundNotice {
            mchid: MCHID.to_owned(),
            refund: refund.result.clone(),
        }
    }

    /// The `ABNORMAL` refund of order `trade_no` is handled at WeChat Pay (the merchant's
    /// console): it becomes `SUCCESS`, the money back with the payer.
    pub fn settle_abnormal_refund(&self, trade_no: &str) {
        let mut state = self.state();
        let order = state
            .orders
            .get_mut(trade_no)
            .expect("an order with a refund");
        let refund = order.refund.as_mut().expect("a refund to settle");
        assert_eq!(refund.result.status, RefundState::Abnormal);
        let now = Utc::now().with_timezone(&china());
        refund.result.status = RefundState::Success;
        refund.result.success_time = Some(now.format("%Y-%m-%dT%H:%M:%S%:z").to_string());
        refund.done_at = Some(now.naive_local());
        order.transaction.trade_state = TradeState::Refund;
    }

    /// The notification WeChat sends for refund `notice`, signed now.
    pub fn refund_notification(&self, notice: &RefundNotice) -> SealedNotification {
        webook::payment::notify::seal_refund(
            &self.api_v3_key,
            &self.platform().current,
            notice,
            Utc::now().timestamp(),
        )
        .unwrap()
    }

    /// Refunds order `trade_no` on WeChat's side only (the merchant's console, not our API):
    /// `SUCCESS` at once, under refund number `refund_no`.
    pub fn refund_outside(&self, trade_no: &str, refund_no: &str) {
        let mut state = self.state();
        let order = state.orders.get_mut(trade_no).expect("an order to refund");
        let total = order.transaction.amount.total;
        let now = Utc::now().with_timezone(&china());
        order.transaction.trade_state = TradeState::Refund;
        order.refund = Some(FakeRefund {
            request: Value::Null,
            result: RefundResult {
                out_refund_no: refund_no.to_owned(),
                out_trade_no: trade_no.to_owned(),
                refund_id: Some(format!("50300{refund_no}")),
                status: RefundState::Success,
                success_time: Some(now.format("%Y-%m-%dT%H:%M:%S%:z").to_string()),
                amount: RefundAmount {
                    refund: total,
                    total,
                },
            },
            done_at: Some(now.naive_local()),
        });
    }

    /// The order `trade_no`, if it was created.
    pub fn order(&self, trade_no: &str) -> Option<FakeOrder> {
        self.state().orders.get(trade_no).cloned()
    }

    /// How many orders were created.
    pub fn order_count(&self) -> usize {
        self.state().orders.len()
    }

    /// How the following requests are answered.
    pub fn set_mode(&self, mode: Mode) {
        self.state().mode = mode;
    }

    /// How the following JSON answers are signed.
    pub fn set_signing(&self, signing: Signing) {
        self.state().signing = signing;
    }

    /// From now on, bill files are altered (a `SUCCESS` becomes `REFUND`) after their hash was
    /// given: still a well-formed bill, but not the one WeChat vouched for.
    pub fn tamper_bills(&self) {
        self.state().tamper_bills = true;
    }

    /// From now on the trade bill of `date` (none: of no day) is answered 400
    /// `STATEMENT_CREATING`, as WeChat answers while it generates a day's bill.
    pub fn set_bill_not_ready(&self, date: Option<NaiveDate>) {
        self.state().bill_not_ready = date;
    }

    /// The trade bill requests received (`GET /v3/bill/tradebill`), by `bill_date`, oldest first.
    pub fn bill_requests(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter_map(|request| {
                let query = request.path_and_query.strip_prefix("/v3/bill/tradebill?")?;
                url::form_urlencoded::parse(query.as_bytes())
                    .find(|(name, _)| name == "bill_date")
                    .map(|(_, date)| date.into_owned())
            })
            .collect()
    }

    /// How many queries of order `trade_no` were received.
    pub fn queries_of(&self, trade_no: &str) -> usize {
        let path = format!("/v3/pay/transactions/out-trade-no/{trade_no}?");
        self.requests()
            .iter()
            .filter(|request| request.method == "GET" && request.path_and_query.starts_with(&path))
            .count()
    }

    /// Every request received, whatever became of it.
    pub fn calls(&self) -> usize {
        self.state().calls
    }

    /// Requests refused 401 `SIGN_ERROR`.
    pub fn signature_failures(&self) -> usize {
        self.state().signature_failures
    }

    /// Every request received, oldest first.
    pub fn requests(&self) -> Vec<RawRequest> {
        self.state().requests.clone()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<RawRequest> {
        self.state().requests.last().cloned()
    }

    fn state(&self) -> MutexGuard<'_, FakeState> {
        self.shared.state.lock().expect("fake WeChat Pay state")
    }
}

impl Drop for FakeWechatPay {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// What a route answers.
enum Reply {
    /// JSON, signed per [`Signing`].
    Json(StatusCode, Value),
    /// 204, signed per [`Signing`].
    NoContent,
    /// A bill file, unsigned.
    File(Vec<u8>),
}

fn refusal(status: StatusCode, code: &str, message: &str) -> Reply {
    Reply::Json(status, json!({ "code": code, "message": message }))
}

fn param_error(message: &str) -> Reply {
    refusal(StatusCode::BAD_REQUEST, "PARAM_ERROR", message)
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let raw = RawRequest {
        method: parts.method.to_string(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), ToString::to_string),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
    };
    let mode = {
        let mut state = shared.state.lock().unwrap();
        state.calls += 1;
        state.requests.push(raw.clone());
        state.mode
    };
    if let Err(why) = authenticate(&shared, &raw) {
        shared.state.lock().unwrap().signature_failures += 1;
        // WeChat does not sign its answer to a request it could not authenticate.
        let body = json!({ "code": "SIGN_ERROR", "message": format!("签名错误: {why}") });
        return response(StatusCode::UNAUTHORIZED, body.to_string().into_bytes(), &[]);
    }
    let reply = match mode {
        Mode::Hang => return std::future::pending::<Response>().await,
        Mode::ServerError => refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "SYSTEM_ERROR",
            "系统错误",
        ),
        Mode::Normal => route(&shared, &raw),
    };
    let lost = shared
        .state
        .lock()
        .unwrap()
        .lose_answers_to
        .as_ref()
        .is_some_and(|fragment| raw.path_and_query.contains(fragment.as_str()));
    if lost {
        // Carried out; the answer never leaves (the client times out).
        return std::future::pending::<Response>().await;
    }
    let (status, body) = match reply {
        Reply::File(mut file) => {
            if shared.state.lock().unwrap().tamper_bills {
                file = String::from_utf8(file)
                    .unwrap()
                    .replacen("`SUCCESS", "`REFUND", 1)
                    .into_bytes();
            }
            return response(StatusCode::OK, file, &[]);
        }
        Reply::NoContent => (StatusCode::NO_CONTENT, Vec::new()),
        Reply::Json(status, value) => (status, value.to_string().into_bytes()),
    };
    let signing = shared.state.lock().unwrap().signing;
    let timestamp = Utc::now().timestamp().to_string();
    let nonce = random_nonce();
    let message = |body: &[u8]| {
        let mut message = format!("{timestamp}\n{nonce}\n").into_bytes();
        message.extend_from_slice(body);
        message.push(b'\n');
        message
    };
    let current = shared.platform.lock().unwrap().current.clone();
    let key: &SigningKey = match signing {
        Signing::UnknownSerial => shared
            .unknown_key
            .get_or_init(|| SigningKey::generate(UNKNOWN_SERIAL).unwrap()),
        _ => &current,
    };
    let serial = key.serial();
    let signature = key.sign(&message(&body)).unwrap();
    let headers = [
        ("wechatpay-timestamp", timestamp.as_str()),
        ("wechatpay-nonce", nonce.as_str()),
        ("wechatpay-signature", signature.as_str()),
        ("wechatpay-serial", serial),
    ];
    match signing {
        Signing::Unsigned => response(status, body, &[]),
        Signing::Tampered if body.is_empty() => {
            // A 204 has no body to change: its timestamp is changed instead.
            let later = (Utc::now().timestamp() + 1).to_string();
            let mut headers = headers;
            headers[0].1 = later.as_str();
            response(status, body, &headers)
        }
        Signing::Tampered => {
            let text = String::from_utf8(body).unwrap();
            let tampered = if text.contains("NOTPAY") {
                text.replace("NOTPAY", "SUCCESS")
            } else {
                format!("{text} ")
            };
            response(status, tampered.into_bytes(), &headers)
        }
        Signing::Valid | Signing::UnknownSerial => response(status, body, &headers),
    }
}

/// Order `trade_no` (which must be `NOTPAY`) is paid now: `SUCCESS`, with a transaction id and a
/// success time; returns the transaction as a query shows it.
fn pay_order(state: &mut FakeState, trade_no: &str) -> Transaction {
    state.transactions += 1;
    let transaction_id = format!("42000{:023}", state.transactions);
    let now = Utc::now().with_timezone(&china());
    let order = state.orders.get_mut(trade_no).expect("an order to pay");
    assert!(matches!(
        order.transaction.trade_state,
        TradeState::Notpay | TradeState::Userpaying
    ));
    let transaction = &mut order.transaction;
    transaction.trade_state = TradeState::Success;
    transaction.trade_state_desc = "支付成功".to_owned();
    transaction.trade_type = "NATIVE".to_owned();
    transaction.transaction_id = Some(transaction_id);
    transaction.success_time = Some(now.format("%Y-%m-%dT%H:%M:%S%:z").to_string());
    transaction.amount.payer_total = Some(transaction.amount.total);
    transaction.amount.payer_currency = Some("CNY".to_owned());
    order.paid_at = Some(now.naive_local());
    order.transaction.clone()
}

fn response(status: StatusCode, body: Vec<u8>, headers: &[(&'static str, &str)]) -> Response {
    let content_type = if status == StatusCode::OK && !body.starts_with(b"{") {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in headers {
        response
            .headers_mut()
            .insert(*name, HeaderValue::from_str(value).unwrap());
    }
    response
}

/// Checks the request's `Authorization` as WeChat Pay does; why not, when it fails.
fn authenticate(shared: &Shared, raw: &RawRequest) -> Result<(), &'static str> {
    let authorization = raw
        .header("authorization")
        .ok_or("no Authorization header")?;
    let fields = authorization
        .strip_prefix("WECHATPAY2-SHA256-RSA2048 ")
        .ok_or("not WECHATPAY2-SHA256-RSA2048")?;
    let fields: HashMap<&str, &str> = fields
        .split(',')
        .filter_map(|field| {
            let (name, value) = field.trim().split_once('=')?;
            Some((name, value.strip_prefix('"')?.strip_suffix('"')?))
        })
        .collect();
    let field = |name: &str| fields.get(name).copied().ok_or("a field is missing");
    if field("mchid")? != MCHID {
        return Err("mchid is not this merchant");
    }
    if field("serial_no")? != MERCHANT_SERIAL {
        return Err("serial_no is not the merchant certificate's");
    }
    let timestamp = field("timestamp")?;
    let seconds: i64 = timestamp.parse().map_err(|_| "timestamp is not a number")?;
    if (Utc::now().timestamp() - seconds).abs() > 300 {
        return Err("timestamp is not within 5 minutes");
    }
    let nonce = field("nonce_str")?;
    if nonce.is_empty() {
        return Err("nonce_str is empty");
    }
    let signature = BASE64
        .decode(field("signature")?)
        .map_err(|_| "signature is not base64")?;
    let mut message = format!(
        "{}\n{}\n{timestamp}\n{nonce}\n",
        raw.method, raw.path_and_query
    )
    .into_bytes();
    message.extend_from_slice(&raw.body);
    message.push(b'\n');
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &shared.merchant_public_key)
        .verify(&message, &signature)
        .map_err(|_| "the signature does not verify with the merchant's key")
}

fn route(shared: &Shared, raw: &RawRequest) -> Reply {
    let (path, query) = raw
        .path_and_query
        .split_once('?')
        .unwrap_or((raw.path_and_query.as_str(), ""));
    let query: HashMap<String, String> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    if raw.method == "POST"
        && !raw
            .header("content-type")
            .is_some_and(|value| value.starts_with("application/json"))
    {
        return param_error("Content-Type 应为 application/json");
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut state = shared.state.lock().unwrap();
    match (raw.method.as_str(), segments.as_slice()) {
        ("POST", ["v3", "pay", "transactions", "native"]) => prepay(&mut state, &raw.body),
        ("GET", ["v3", "pay", "transactions", "out-trade-no", trade_no]) => {
            if query.get("mchid").map(String::as_str) != Some(MCHID) {
                return param_error("mchid 与请求的商户号不一致");
            }
            match state.orders.get(*trade_no) {
                Some(order) => Reply::Json(
                    StatusCode::OK,
                    serde_json::to_value(&order.transaction).unwrap(),
                ),
                None => order_not_exist(),
            }
        }
        ("POST", ["v3", "pay", "transactions", "out-trade-no", trade_no, "close"]) => {
            close(&mut state, trade_no, &raw.body)
        }
        ("GET", ["v3", "certificates"]) => certificates(shared),
        ("POST", ["v3", "refund", "domestic", "refunds"]) => refund(&mut state, &raw.body),
        ("GET", ["v3", "refund", "domestic", "refunds", refund_no]) => {
            match state
                .orders
                .values()
                .filter_map(|order| order.refund.as_ref())
                .find(|refund| refund.result.out_refund_no == *refund_no)
            {
                Some(refund) => Reply::Json(
                    StatusCode::OK,
                    serde_json::to_value(&refund.result).unwrap(),
                ),
                None => refusal(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS", "退款单不存在"),
            }
        }
        ("GET", ["v3", "bill", "tradebill"]) => trade_bill(shared, &mut state, &query),
        ("GET", ["v3", "billdownload", "file"]) => {
            match query.get("token").and_then(|token| state.files.get(token)) {
                Some(file) => Reply::File(file.clone()),
                None => param_error("token 无效"),
            }
        }
        _ => refusal(StatusCode::NOT_FOUND, "NOT_FOUND", "请求的资源不存在"),
    }
}

fn order_not_exist() -> Reply {
    refusal(StatusCode::NOT_FOUND, "ORDER_NOT_EXIST", "订单不存在")
}

#[derive(Deserialize)]
struct PrepayBody {
    appid: String,
    mchid: String,
    description: String,
    out_trade_no: String,
    time_expire: Option<String>,
    notify_url: String,
    amount: PrepayAmount,
}

#[derive(Deserialize)]
struct PrepayAmount {
    total: i64,
    currency: Option<String>,
}

fn prepay(state: &mut FakeState, body: &[u8]) -> Reply {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return param_error("请求体不是 JSON");
    };
    let Ok(prepay) = serde_json::from_value::<PrepayBody>(request.clone()) else {
        return param_error("缺少必填参数");
    };
    if prepay.appid != APPID || prepay.mchid != MCHID {
        return refusal(
            StatusCode::BAD_REQUEST,
            "APPID_MCHID_NOT_MATCH",
            "appid和mch_id不匹配",
        );
    }
    let trade_no_ok = (6..=32).contains(&prepay.out_trade_no.len())
        && prepay
            .out_trade_no
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"_-|*".contains(&byte));
    if !trade_no_ok {
        return param_error("out_trade_no 应为 6-32 位数字、字母、_-|*");
    }
    if prepay.description.is_empty() || prepay.description.len() > 127 {
        return param_error("description 长度应为 1-127 字节");
    }
    if prepay
        .time_expire
        .as_deref()
        .is_some_and(|time| DateTime::parse_from_rfc3339(time).is_err())
    {
        return param_error("time_expire 应为 RFC 3339 格式");
    }
    if !prepay.notify_url.starts_with("https://") {
        return param_error("notify_url 应为 https 地址");
    }
    if prepay.amount.total < 1 || prepay.amount.currency.as_deref().unwrap_or("CNY") != "CNY" {
        return param_error("amount 无效");
    }
    if let Some(order) = state.orders.get(&prepay.out_trade_no) {
        if order.transaction.amount.total != prepay.amount.total {
            return refusal(
                StatusCode::BAD_REQUEST,
                "INVALID_REQUEST",
                "201 商户订单号重复",
            );
        }
        return Reply::Json(StatusCode::OK, json!({ "code_url": order.code_url }));
    }
    let code_url = format!("weixin://wxpay/bizpayurl?pr={}", &random_nonce()[..10]);
    let trade_no = prepay.out_trade_no.clone();
    state.orders.insert(
        prepay.out_trade_no.clone(),
        FakeOrder {
            request,
            code_url: code_url.clone(),
            transaction: Transaction {
                appid: prepay.appid,
                mchid: prepay.mchid,
                out_trade_no: prepay.out_trade_no,
                transaction_id: None,
                trade_type: String::new(),
                trade_state: TradeState::Notpay,
                trade_state_desc: "订单未支付".to_owned(),
                success_time: None,
                amount: TransactionAmount {
                    total: prepay.amount.total,
                    payer_total: None,
                    currency: "CNY".to_owned(),
                    payer_currency: None,
                },
            },
            description: prepay.description,
            paid_at: None,
            refund: None,
        },
    );
    if state.pay_on_create {
        pay_order(state, &trade_no);
    }
    Reply::Json(StatusCode::OK, json!({ "code_url": code_url }))
}

#[derive(Deserialize)]
struct RefundBody {
    out_trade_no: String,
    out_refund_no: String,
    reason: Option<String>,
    notify_url: Option<String>,
    amount: RefundBodyAmount,
}

#[derive(Deserialize)]
struct RefundBodyAmount {
    refund: i64,
    total: i64,
    currency: String,
}

/// `POST /v3/refund/domestic/refunds`: checks the fields as WeChat documents them; the same
/// `out_refund_no` again answers the refund as it stands; a new refund of a paid order is
/// `PROCESSING` until a test finishes it ([`FakeWechatPay::finish_refund`]).
fn refund(state: &mut FakeState, body: &[u8]) -> Reply {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return param_error("请求体不是 JSON");
    };
    let Ok(asked) = serde_json::from_value::<RefundBody>(request.clone()) else {
        return param_error("缺少必填参数");
    };
    let refund_no_ok = (1..=64).contains(&asked.out_refund_no.len())
        && asked
            .out_refund_no
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"_-|*@".contains(&byte));
    if !refund_no_ok {
        return param_error("out_refund_no 应为 1-64 位数字、字母、_-|*@");
    }
    if asked
        .reason
        .as_deref()
        .is_some_and(|reason| reason.chars().count() > 80)
    {
        return param_error("reason 最多 80 个字符");
    }
    if asked
        .notify_url
        .as_deref()
        .is_some_and(|url| !url.starts_with("https://"))
    {
        return param_error("notify_url 应为 https 地址");
    }
    if asked.amount.currency != "CNY" || asked.amount.refund < 1 {
        return param_error("amount 无效");
    }
    state.transactions += 1;
    let refund_id = format!("50300{:024}", state.transactions);
    let Some(order) = state.orders.get_mut(&asked.out_trade_no) else {
        return refusal(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS", "订单不存在");
    };
    if let Some(existing) = &order.refund {
        if existing.result.out_refund_no == asked.out_refund_no {
            return Reply::Json(
                StatusCode::OK,
                serde_json::to_value(&existing.result).unwrap(),
            );
        }
        return refusal(StatusCode::BAD_REQUEST, "INVALID_REQUEST", "订单已全额退款");
    }
    if order.transaction.trade_state != TradeState::Success {
        return refusal(StatusCode::BAD_REQUEST, "INVALID_REQUEST", "订单未支付");
    }
    let total = order.transaction.amount.total;
    if asked.amount.total != total || asked.amount.refund > total {
        return param_error("amount.total 与订单金额不一致，或退款金额大于订单金额");
    }
    let result = RefundResult {
        out_refund_no: asked.out_refund_no.clone(),
        out_trade_no: asked.out_trade_no.clone(),
        refund_id: Some(refund_id),
        status: RefundState::Processing,
        success_time: None,
        amount: RefundAmount {
            refund: asked.amount.refund,
            total,
        },
    };
    order.refund = Some(FakeRefund {
        request,
        result: result.clone(),
        done_at: None,
    });
    Reply::Json(StatusCode::OK, serde_json::to_value(&result).unwrap())
}

fn close(state: &mut FakeState, trade_no: &str, body: &[u8]) -> Reply {
    let mchid = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|body| body.get("mchid").and_then(Value::as_str).map(str::to_owned));
    if mchid.as_deref() != Some(MCHID) {
        return param_error("mchid 与请求的商户号不一致");
    }
    let user_paying_on_close = state.user_paying_on_close;
    let Some(order) = state.orders.get_mut(trade_no) else {
        return order_not_exist();
    };
    match order.transaction.trade_state {
        TradeState::Success | TradeState::Refund => {
            refusal(StatusCode::BAD_REQUEST, "ORDERPAID", "订单已支付")
        }
        TradeState::Userpaying if user_paying_on_close => Reply::Json(
            StatusCode::ACCEPTED,
            json!({ "code": "USER_PAYING", "message": "用户支付中" }),
        ),
        _ => {
            order.transaction.trade_state = TradeState::Closed;
            order.transaction.trade_state_desc = "订单已关闭".to_owned();
            Reply::NoContent
        }
    }
}

fn trade_bill(shared: &Shared, state: &mut FakeState, query: &HashMap<String, String>) -> Reply {
    let Some(date) = query
        .get("bill_date")
        .and_then(|date| NaiveDate::parse_from_str(date, "%Y-%m-%d").ok())
    else {
        return param_error("bill_date 应为 YYYY-MM-DD");
    };
    if query.get("bill_type").is_some_and(|kind| kind != "ALL") {
        return param_error("本模拟只提供 bill_type=ALL");
    }
    if state.bill_not_ready == Some(date) {
        return refusal(
            StatusCode::BAD_REQUEST,
            "STATEMENT_CREATING",
            "对账单生成中，请稍后再试",
        );
    }
    let mut paid: Vec<&FakeOrder> = state
        .orders
        .values()
        .filter(|order| order.paid_at.is_some_and(|at| at.date() == date))
        .collect();
    let mut refunded: Vec<&FakeOrder> = state
        .orders
        .values()
        .filter(|order| {
            order
                .refund
                .as_ref()
                .and_then(|refund| refund.done_at)
                .is_some_and(|at| at.date() == date)
        })
        .collect();
    if paid.is_empty() && refunded.is_empty() {
        return refusal(
            StatusCode::BAD_REQUEST,
            "NO_STATEMENT_EXIST",
            "当前商户号没有已成交的订单，不生成对账单",
        );
    }
    paid.sort_by_key(|order| order.paid_at);
    refunded.sort_by_key(|order| order.refund.as_ref().and_then(|refund| refund.done_at));
    let file = bill(&paid, &refunded).into_bytes();
    let hash = hex::encode(digest(&SHA1_FOR_LEGACY_USE_ONLY, &file));
    let token = random_nonce();
    state.files.insert(token.clone(), file);
    Reply::Json(
        StatusCode::OK,
        json!({
            "hash_type": "SHA1",
            "hash_value": hash,
            "download_url": format!("{}/v3/billdownload/file?token={token}", shared.base_url),
        }),
    )
}

/// The trade bill of `paid` orders and `refunded` ones as WeChat Pay writes one
/// (`bill_type=ALL`): a `SUCCESS` line per payment of the day, a `REFUND` line per refund.
fn bill(paid: &[&FakeOrder], refunded: &[&FakeOrder]) -> String {
    let yuan = |fen: i64| format!("{}.{:02}", fen / 100, fen % 100);
    let mut bill = String::from(
        "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,\
         交易状态,付款银行,货币种类,应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,\
         充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,\
         费率备注\r\n",
    );
    let (mut total, mut refund_total) = (0, 0);
    let lines = paid
        .iter()
        .map(|order| (*order, false))
        .chain(refunded.iter().map(|order| (*order, true)));
    for (order, is_refund) in lines {
        let transaction = &order.transaction;
        let amount = yuan(transaction.amount.total);
        let refund = order.refund.as_ref().filter(|_| is_refund);
        let (time, state, settled, refund_id, refund_no, refund_amt, kind, refund_state) =
            match refund {
                Some(refund) => {
                    refund_total += refund.result.amount.refund;
                    (
                        refund.done_at.unwrap(),
                        "REFUND",
                        "0.00".to_owned(),
                        refund.result.refund_id.clone().unwrap_or_default(),
                        refund.result.out_refund_no.clone(),
                        yuan(refund.result.amount.refund),
                        "ORIGINAL",
                        "SUCCESS",
                    )
                }
                None => {
                    total += transaction.amount.total;
                    (
                        order.paid_at.unwrap(),
                        "SUCCESS",
                        amount.clone(),
                        "0".to_owned(),
                        "0".to_owned(),
                        "0.00".to_owned(),
                        "",
                        "",
                    )
                }
            };
        let fields = [
            time.format("%Y-%m-%d %H:%M:%S").to_string(),
            transaction.appid.clone(),
            transaction.mchid.clone(),
            "0".to_owned(),
            String::new(),
            transaction.transaction_id.clone().unwrap(),
            transaction.out_trade_no.clone(),
            "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o".to_owned(),
            "NATIVE".to_owned(),
            state.to_owned(),
            "OTHERS".to_owned(),
            "CNY".to_owned(),
            settled,
            "0.00".to_owned(),
            refund_id,
            refund_no,
            refund_amt.clone(),
            "0.00".to_owned(),
            kind.to_owned(),
            refund_state.to_owned(),
            order.description.clone(),
            String::new(),
            "0.00000".to_owned(),
            "0.60%".to_owned(),
            amount,
            refund_amt,
            String::new(),
        ];
        let line: Vec<String> = fields.iter().map(|field| format!("`{field}")).collect();
        bill.push_str(&line.join(","));
        bill.push_str("\r\n");
    }
    bill.push_str(
        "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额\r\n",
    );
    bill.push_str(&format!(
        "`{},`{},`{},`0.00,`0.00000,`{},`{}\r\n",
        paid.len() + refunded.len(),
        yuan(total),
        yuan(refund_total),
        yuan(total),
        yuan(refund_total)
    ));
    bill
}

// ---- Platform keys and certificates: rotation, `GET /v3/certificates` ----

/// A certificate the fake lists, as `GET /v3/certificates` answers it.
#[derive(Clone)]
struct Listed {
    /// `serial_no` as listed (normally the certificate's serial).
    serial_no: String,
    /// The certificate, PEM.
    pem: String,
    not_before: i64,
    not_after: i64,
}

/// The fake's side of the platform keys: every key it has signed with, the one signing now,
/// its CA and the certificates it lists.
struct PlatformSide {
    current: Arc<SigningKey>,
    by_serial: HashMap<String, Arc<SigningKey>>,
    /// The fake's CA (certificate mode): issues the platform certificates.
    ca: Option<FakeCa>,
    listed: Vec<Listed>,
    rotations: u32,
}

struct FakeCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

/// An RSA key of ours as rcgen's.
fn rcgen_key(key: &SigningKey) -> rcgen::KeyPair {
    let der = key.pkcs8_der().unwrap();
    rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&der.as_slice().into(), &rcgen::PKCS_RSA_SHA256)
        .unwrap()
}

fn offset_time(secs: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(secs).unwrap()
}

impl FakeCa {
    /// A new self-signed CA named `name`.
    fn new(name: &str) -> Self {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "webook test stand-in");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen_key(&SigningKey::generate("ca").unwrap());
        let certificate = params.self_signed(&key).unwrap();
        Self {
            pem: certificate.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// The certificate of `key` (serial `key.serial()`, hex), valid over the given seconds.
    fn issue(&self, key: &SigningKey, not_before: i64, not_after: i64) -> String {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "webook test stand-in");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Tenpay.com sign");
        params.serial_number = Some(rcgen::SerialNumber::from_slice(
            &hex::decode(key.serial()).unwrap(),
        ));
        params.not_before = offset_time(not_before);
        params.not_after = offset_time(not_after);
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params
            .signed_by(&rcgen_key(key), &self.issuer)
            .unwrap()
            .pem()
    }
}

/// A certificate serial as WeChat writes them: 40 upper-case hex digits (the first byte below
/// 0x80, so the DER integer needs no sign byte).
fn certificate_serial() -> String {
    let mut serial = random_nonce() + &random_nonce()[..8];
    serial.replace_range(0..1, "1");
    serial.to_uppercase()
}

/// How long the fake's certificates are valid: from an hour ago for five years, as WeChat's.
const CERTIFICATE_LIFETIME_SECS: i64 = 5 * 365 * 24 * 3600;

impl PlatformSide {
    fn with_key(key: SigningKey, ca: Option<FakeCa>) -> Self {
        let current = Arc::new(key);
        let mut side = Self {
            by_serial: HashMap::from([(current.serial().to_owned(), current.clone())]),
            current,
            ca,
            listed: Vec::new(),
            rotations: 0,
        };
        side.list_current();
        side
    }

    fn public_key_mode() -> Self {
        Self::with_key(SigningKey::generate(PLATFORM_SERIAL).unwrap(), None)
    }

    fn certificate_mode() -> Self {
        Self::with_key(
            SigningKey::generate(&certificate_serial()).unwrap(),
            Some(FakeCa::new("webook test platform CA")),
        )
    }

    /// Lists the current key's certificate (certificate mode).
    fn list_current(&mut self) {
        let now = Utc::now().timestamp();
        if let Some(ca) = &self.ca {
            let (not_before, not_after) = (now - 3600, now + CERTIFICATE_LIFETIME_SECS);
            self.listed.push(Listed {
                serial_no: self.current.serial().to_owned(),
                pem: ca.issue(&self.current, not_before, not_after),
                not_before,
                not_after,
            });
        }
    }
}

/// A certificate the fake lists beside its own: what a client must not add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OddCertificate {
    /// Issued by the fake's CA, but expired yesterday.
    Expired,
    /// Listed under another `serial_no` than its own serial.
    WrongSerial,
    /// Valid, but issued by another CA than the fake's.
    ForeignIssuer,
}

impl FakeWechatPay {
    fn platform(&self) -> MutexGuard<'_, PlatformSide> {
        self.shared
            .platform
            .lock()
            .expect("fake WeChat Pay platform keys")
    }

    /// Payment settings of a `wechat` provider in platform certificate mode (the fake must
    /// have been started with [`FakeWechatPay::start_with_certificates`]): no platform key
    /// configured, the fake's CA as `wechatpay_platform_ca`.
    pub fn certificate_settings(&self) -> PaymentSettings {
        PaymentSettings {
            wechatpay_platform_mode: PlatformMode::Certificate,
            wechatpay_platform_serial: String::new(),
            wechatpay_platform_public_key: String::new(),
            wechatpay_platform_ca: self.ca_pem(),
            ..self.settings()
        }
    }

    /// The PEM of the fake's CA (certificate mode).
    pub fn ca_pem(&self) -> String {
        self.platform()
            .ca
            .as_ref()
            .expect("certificate mode")
            .pem
            .clone()
    }

    /// The serial of the key signing now.
    pub fn current_serial(&self) -> String {
        self.platform().current.serial().to_owned()
    }

    /// The public key (PEM) of the platform key `serial` the fake has signed with; empty for a
    /// serial it never had.
    pub fn public_key_pem(&self, serial: &str) -> String {
        let key = self.platform().by_serial.get(serial).cloned();
        key.map(|key| pem("PUBLIC KEY", &key.public_key_der().unwrap()))
            .unwrap_or_default()
    }

    /// WeChat rotates its platform key: a new key signs every answer and notification from now
    /// on; in certificate mode its certificate is listed beside the old ones (still valid).
    /// Returns the new key's serial (a certificate serial, or a `PUB_KEY_ID_…`).
    pub fn rotate(&self) -> String {
        let mut side = self.platform();
        side.rotations += 1;
        let serial = if side.ca.is_some() {
            certificate_serial()
        } else {
            format!("PUB_KEY_ID_01190000010920250101{:08}", side.rotations)
        };
        side.current = Arc::new(SigningKey::generate(&serial).unwrap());
        let current = side.current.clone();
        side.by_serial.insert(serial.clone(), current);
        side.list_current();
        serial
    }

    /// The notification WeChat sends for `transaction`, signed by the platform key `serial`
    /// (one the fake has signed with: the old key of a rotation, say).
    pub fn notification_signed_by(
        &self,
        transaction: &Transaction,
        serial: &str,
    ) -> webook::payment::notify::SealedNotification {
        let key = self.platform().by_serial[serial].clone();
        webook::payment::notify::seal(&self.api_v3_key, &key, transaction, Utc::now().timestamp())
            .unwrap()
    }

    /// Lists `odd` beside the fake's own certificates from now on; returns its `serial_no`.
    pub fn list_odd_certificate(&self, odd: OddCertificate) -> String {
        let mut side = self.platform();
        let key = SigningKey::generate(&certificate_serial()).unwrap();
        let now = Utc::now().timestamp();
        let (not_before, not_after) = match odd {
            OddCertificate::Expired => (now - 2 * 365 * 24 * 3600, now - 24 * 3600),
            _ => (now - 3600, now + CERTIFICATE_LIFETIME_SECS),
        };
        let pem = match odd {
            OddCertificate::ForeignIssuer => {
                FakeCa::new("another CA").issue(&key, not_before, not_after)
            }
            _ => side
                .ca
                .as_ref()
                .expect("certificate mode")
                .issue(&key, not_before, not_after),
        };
        let serial_no = match odd {
            OddCertificate::WrongSerial => certificate_serial(),
            _ => key.serial().to_owned(),
        };
        side.listed.push(Listed {
            serial_no: serial_no.clone(),
            pem,
            not_before,
            not_after,
        });
        serial_no
    }

    /// How many `GET /v3/certificates` requests were answered (signature accepted).
    pub fn certificate_downloads(&self) -> usize {
        self.state()
            .requests
            .iter()
            .filter(|request| {
                request.method == "GET" && request.path_and_query == "/v3/certificates"
            })
            .count()
    }
}

/// `GET /v3/certificates`: every listed certificate, encrypted under the APIv3 key as WeChat
/// does (`associated_data` "certificate").
fn certificates(shared: &Shared) -> Reply {
    let time = |secs: i64| {
        DateTime::from_timestamp(secs, 0)
            .unwrap()
            .with_timezone(&china())
            .format("%Y-%m-%dT%H:%M:%S%:z")
            .to_string()
    };
    let listed = shared.platform.lock().unwrap().listed.clone();
    let data: Vec<Value> = listed
        .iter()
        .map(|listed| {
            let (nonce, ciphertext) = shared
                .api_v3_key
                .encrypt("certificate", listed.pem.as_bytes())
                .unwrap();
            json!({
                "serial_no": listed.serial_no,
                "effective_time": time(listed.not_before),
                "expire_time": time(listed.not_after),
                "encrypt_certificate": {
                    "algorithm": "AEAD_AES_256_GCM",
                    "nonce": nonce,
                    "associated_data": "certificate",
                    "ciphertext": ciphertext,
                },
            })
        })
        .collect();
    Reply::Json(StatusCode::OK, json!({ "data": data }))
}
