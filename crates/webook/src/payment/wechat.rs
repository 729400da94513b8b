//! The real WeChat Pay API v3 client for Native payments: [`WechatPay`] implements
//! [`PaymentProvider`] against the configured endpoint (`https://api.mch.weixin.qq.com`).
//!
//! How a call flows: the request (method, path with query, JSON body) is signed with the
//! merchant key ([`super::crypto::SigningKey::authorization`]) and sent with the configured
//! timeout; the answer is read whole (bounded) and its `Wechatpay-*` signature is checked against
//! the platform keys before anything in it is believed (a serial the keyring does not know makes
//! it look for that key first — in certificate mode a download of the platform certificates,
//! [`super::certificates`], at most once a minute — and check once more):
//!
//! - 2xx and verified: the body is used. 2xx not verified: [`ProviderError::Untrusted`] — WeChat
//!   signs every answer to a request it authenticated, so an unsigned success is forged.
//! - 4xx and verified: [`ProviderError::Refused`] with WeChat's `code` and `message`. The two
//!   codes that are answers rather than failures are only ever read from verified refusals:
//!   `ORDER_NOT_EXIST` (a query finds no order) and `NO_STATEMENT_EXIST` (no bill: no trades).
//! - 4xx not verified: [`ProviderError::Untrusted`] naming the status and code. WeChat does not
//!   sign its answer to a request it could not authenticate (401 `SIGN_ERROR`: our merchant key
//!   or serial is wrong), and nothing about an order may be concluded from an unsigned answer.
//! - 5xx, signed or not, and requests that got no answer: [`ProviderError::Unavailable`]; no
//!   answer within the timeout: [`ProviderError::Timeout`].
//!
//! A refund is `POST /v3/refund/domestic/refunds` (idempotent by `out_refund_no`), queried by
//! `GET /v3/refund/domestic/refunds/{out_refund_no}` (`RESOURCE_NOT_EXISTS`: no such refund); its
//! notification (`REFUND.*`) comes to the same `notify_url` as payments'.
//!
//! A day's trade bill takes two requests: a signed JSON answer names the file's SHA1 and its
//! download URL; the download is a signed request too, but WeChat does not sign the file, so its
//! SHA1 is compared with the one in the verified answer instead. [`parse_trade_bill`] reads
//! WeChat's CSV; [`write_trade_bill`] writes it (the fake provider serves its bills with it).
//!
//! Errors and logs carry HTTP statuses, WeChat's codes and messages, and trade numbers: never a
//! key, an `Authorization` header, a download URL (its token) or a body.

use std::sync::Arc;

use anyhow::{bail, Context};
use async_trait::async_trait;
use aws_lc_rs::digest::{digest, SHA1_FOR_LEGACY_USE_ONLY};
use chrono::{DateTime, FixedOffset, NaiveDate, Utc};
use reqwest::{header, Method, StatusCode};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use url::Url;

use super::certificates::PlatformCertificates;
use super::crypto::{random_nonce, CryptoError, SignedHeaders};
use super::provider::{
    BillRow, NotificationKeys, Order, PaymentProvider, ProviderError, RefundOrder, RefundResult,
    Transaction,
};
use super::settings::{PlatformMode, WechatPayConfig};

/// The largest JSON answer read (WeChat's are a few kilobytes).
const MAX_ANSWER_BYTES: usize = 1 << 20;
/// The largest trade bill read (a line is ~300 bytes: some 200,000 trades a day).
const MAX_BILL_BYTES: usize = 64 << 20;
/// China Standard Time, the zone of `time_expire` and of the bills.
const CHINA_OFFSET_SECS: i32 = 8 * 3600;
/// The longest error message kept from an answer.
const MAX_MESSAGE_CHARS: usize = 200;

/// The columns of a trade bill of type `ALL`, in WeChat's order.
const BILL_COLUMNS: [&str; 27] = [
    "交易时间",
    "公众账号ID",
    "商户号",
    "特约商户号",
    "设备号",
    "微信订单号",
    "商户订单号",
    "用户标识",
    "交易类型",
    "交易状态",
    "付款银行",
    "货币种类",
    "应结订单金额",
    "代金券金额",
    "微信退款单号",
    "商户退款单号",
    "退款金额",
    "充值券退款金额",
    "退款类型",
    "退款状态",
    "商品名称",
    "商户数据包",
    "手续费",
    "费率",
    "订单金额",
    "申请退款金额",
    "费率备注",
];

/// The columns of a trade bill's summary line.
const SUMMARY_COLUMNS: [&str; 7] = [
    "总交易单数",
    "应结订单总金额",
    "退款总金额",
    "充值券退款总金额",
    "手续费总金额",
    "订单总金额",
    "申请退款总金额",
];

/// WeChat Pay API v3, Native payments, for one merchant and app.
#[derive(Debug)]
pub struct WechatPay {
    http: reqwest::Client,
    endpoint: Url,
    config: WechatPayConfig,
    notification_keys: NotificationKeys,
    /// The platform certificate downloader, in certificate mode.
    certificates: Option<Arc<PlatformCertificates>>,
}

impl WechatPay {
    /// A client of `config`'s merchant, with its own HTTP client: `config.timeout` per request,
    /// no redirects, user agent `webook/<version>`.
    pub fn new(config: WechatPayConfig) -> anyhow::Result<Self> {
        let endpoint = Url::parse(&config.endpoint).context("invalid wechatpay_endpoint")?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.cannot_be_a_base() {
            bail!("invalid wechatpay_endpoint: an absolute http(s) URL");
        }
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("webook/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("building the WeChat Pay HTTP client")?;
        let notification_keys = NotificationKeys {
            mchid: config.mchid.clone(),
            appid: config.appid.clone(),
            api_v3_key: config.api_v3_key.clone(),
            platform_keys: config.platform_keys.clone(),
        };
        let certificates = (config.platform_mode == PlatformMode::Certificate)
            .then(|| PlatformCertificates::new(http.clone(), &endpoint, &config));
        Ok(Self {
            http,
            endpoint,
            config,
            notification_keys,
            certificates,
        })
    }

    /// The platform certificate downloader (certificate mode): the feature downloads on start
    /// and runs it in the background.
    pub fn certificates(&self) -> Option<&Arc<PlatformCertificates>> {
        self.certificates.as_ref()
    }

    /// The endpoint with `segments` appended to its path (each percent-encoded as needed).
    fn url(&self, segments: &[&str]) -> Result<Url, ProviderError> {
        let mut url = self.endpoint.clone();
        url.path_segments_mut()
            .map_err(|()| unavailable("the endpoint cannot be a base URL"))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// Sends a signed request and returns the body of its 2xx answer. `call` names the request
    /// in errors and logs; `limit` bounds the answer; `signed_success` says whether a 2xx answer
    /// must carry a valid platform signature (all do but the bill file).
    async fn exchange(
        &self,
        call: &'static str,
        method: Method,
        url: Url,
        body: Option<String>,
        limit: usize,
        signed_success: bool,
    ) -> Result<Vec<u8>, ProviderError> {
        let outcome = self
            .send(method, url, body, limit, signed_success)
            .await
            .map_err(|error| match error {
                ProviderError::Untrusted(what) => {
                    ProviderError::Untrusted(format!("{call}: {what}"))
                }
                ProviderError::Unavailable(what) => {
                    ProviderError::Unavailable(format!("{call}: {what}"))
                }
                other => other,
            });
        match &outcome {
            Ok(body) => tracing::debug!(call, bytes = body.len(), "WeChat Pay answered"),
            Err(error @ ProviderError::Untrusted(_)) => {
                tracing::warn!(call, %error, "WeChat Pay's answer is not trusted")
            }
            Err(error) => tracing::debug!(call, %error, "WeChat Pay call failed"),
        }
        outcome
    }

    async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<String>,
        limit: usize,
        signed_success: bool,
    ) -> Result<Vec<u8>, ProviderError> {
        let path_and_query = &url[url::Position::BeforePath..url::Position::AfterQuery];
        let authorization = self
            .config
            .merchant_key
            .authorization(
                &self.config.mchid,
                method.as_str(),
                path_and_query,
                Utc::now().timestamp(),
                &random_nonce(),
                body.as_deref().unwrap_or(""),
            )
            .map_err(|err| unavailable(&format!("signing the request failed: {err}")))?;
        let mut request = self
            .http
            .request(method, url)
            .header(header::AUTHORIZATION, authorization)
            .header(header::ACCEPT, "application/json");
        if let Some(body) = body {
            request = request
                .header(header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let mut response = crate::outside_http::send(request)
            .await
            .map_err(transport_error)?;
        let status = response.status();
        let headers = response.headers().clone();
        let mut answer = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
            if answer.len() + chunk.len() > limit {
                return Err(ProviderError::Untrusted(format!(
                    "the answer is larger than {limit} bytes"
                )));
            }
            answer.extend_from_slice(&chunk);
        }
        let verified = if status.is_success() && !signed_success {
            Ok(())
        } else {
            match SignedHeaders::from_headers(&headers) {
                // An unknown serial may be a new platform key: certificate mode downloads it.
                Ok(signed) => {
                    self.config
                        .platform_keys
                        .verify_or_refresh(&signed, &answer, Utc::now().timestamp())
                        .await
                }
                Err(err) => Err(err),
            }
        };
        judge(status, &answer, verified)?;
        Ok(answer)
    }
}

/// What an answer of `status` and `body`, whose signature check gave `verified`, means (see the
/// module documentation): `Ok` for a verified success.
fn judge(
    status: StatusCode,
    body: &[u8],
    verified: Result<(), CryptoError>,
) -> Result<(), ProviderError> {
    let status_code = status.as_u16();
    if status.is_success() {
        return verified.map_err(|err| {
            ProviderError::Untrusted(format!(
                "HTTP {status_code} answer without a valid signature: {err}"
            ))
        });
    }
    let error = serde_json::from_slice::<ErrorAnswer>(body).ok();
    let code = error
        .as_ref()
        .map(|error| format!(" {}", printable_code(&error.code)))
        .unwrap_or_default();
    if !status.is_client_error() {
        return Err(unavailable(&format!("HTTP {status_code}{code}")));
    }
    match (error, verified) {
        (Some(error), Ok(())) => Err(ProviderError::Refused {
            code: error.code,
            message: error.message.chars().take(MAX_MESSAGE_CHARS).collect(),
        }),
        (None, Ok(())) => Err(ProviderError::Untrusted(format!(
            "HTTP {status_code} answer is not an error of WeChat Pay's"
        ))),
        (_, Err(err)) => Err(ProviderError::Untrusted(format!(
            "HTTP {status_code}{code} answer without a valid signature: {err}"
        ))),
    }
}

/// WeChat's error answer.
#[derive(Debug, Deserialize)]
struct ErrorAnswer {
    code: String,
    #[serde(default)]
    message: String,
}

/// An error code fit for a log line: WeChat's are `A-Z_`, anything else is cut off.
fn printable_code(code: &str) -> String {
    code.chars()
        .take(64)
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect()
}

fn unavailable(what: &str) -> ProviderError {
    ProviderError::Unavailable(what.to_owned())
}

fn untrusted(what: impl Into<String>) -> ProviderError {
    ProviderError::Untrusted(what.into())
}

/// The [`ProviderError`] of a request that got no (whole) answer: a timeout, or why not with
/// its causes — never the URL, whose query may hold a bill's download token.
fn transport_error(error: reqwest::Error) -> ProviderError {
    if error.is_timeout() {
        return ProviderError::Timeout;
    }
    ProviderError::Unavailable(crate::outside_http::describe_failure(error))
}

/// `body` as `T`, or [`ProviderError::Untrusted`] naming `what`.
fn parse_json<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ProviderError> {
    serde_json::from_slice(body)
        .map_err(|err| untrusted(format!("{what} is not as documented: {err}")))
}

/// `at_ms` (ms since the epoch) as `time_expire` wants it: RFC 3339 in China Standard Time,
/// `2018-06-08T10:34:56+08:00`.
fn time_expire(at_ms: i64) -> Option<String> {
    let china = FixedOffset::east_opt(CHINA_OFFSET_SECS)?;
    let at = DateTime::<Utc>::from_timestamp_millis(at_ms)?;
    Some(
        at.with_timezone(&china)
            .format("%Y-%m-%dT%H:%M:%S%:z")
            .to_string(),
    )
}

/// `POST /v3/pay/transactions/native`'s body.
#[derive(Serialize)]
struct PrepayRequest<'a> {
    appid: &'a str,
    mchid: &'a str,
    description: &'a str,
    out_trade_no: &'a str,
    time_expire: String,
    notify_url: &'a str,
    amount: PrepayAmount,
}

#[derive(Serialize)]
struct PrepayAmount {
    total: i64,
    currency: &'static str,
}

#[derive(Deserialize)]
struct PrepayAnswer {
    code_url: String,
}

#[derive(Serialize)]
struct CloseRequest<'a> {
    mchid: &'a str,
}

/// `POST /v3/refund/domestic/refunds`'s body.
#[derive(Serialize)]
struct RefundRequest<'a> {
    out_trade_no: &'a str,
    out_refund_no: &'a str,
    reason: &'a str,
    notify_url: &'a str,
    amount: RefundRequestAmount,
}

#[derive(Serialize)]
struct RefundRequestAmount {
    refund: i64,
    total: i64,
    currency: &'static str,
}

/// `GET /v3/bill/tradebill`'s answer.
#[derive(Deserialize)]
struct BillAnswer {
    hash_type: String,
    hash_value: String,
    download_url: String,
}

#[async_trait]
impl PaymentProvider for WechatPay {
    fn name(&self) -> &'static str {
        "wechat"
    }

    async fn prepay(&self, order: &Order) -> Result<String, ProviderError> {
        // WeChat refuses an unreadable time_expire with PARAM_ERROR; chrono's range spans
        // ±262,000 years, so only a nonsensical expires_at gets here.
        let time_expire = time_expire(order.expires_at).ok_or_else(|| ProviderError::Refused {
            code: "PARAM_ERROR".to_owned(),
            message: "expires_at is not a time (refused before sending)".to_owned(),
        })?;
        let body = serde_json::to_string(&PrepayRequest {
            appid: &self.config.appid,
            mchid: &self.config.mchid,
            description: &order.description,
            out_trade_no: &order.trade_no,
            time_expire,
            notify_url: &self.config.notify_url,
            amount: PrepayAmount {
                total: order.amt,
                currency: "CNY",
            },
        })
        .map_err(|err| unavailable(&format!("encoding the order: {err}")))?;
        let url = self.url(&["v3", "pay", "transactions", "native"])?;
        let answer = self
            .exchange(
                "prepay",
                Method::POST,
                url,
                Some(body),
                MAX_ANSWER_BYTES,
                true,
            )
            .await?;
        let answer: PrepayAnswer = parse_json(&answer, "the prepay answer")?;
        if answer.code_url.trim().is_empty() {
            return Err(untrusted("prepay: the answer has no code_url"));
        }
        Ok(answer.code_url)
    }

    async fn query(&self, trade_no: &str) -> Result<Option<Transaction>, ProviderError> {
        let mut url = self.url(&["v3", "pay", "transactions", "out-trade-no", trade_no])?;
        url.query_pairs_mut()
            .append_pair("mchid", &self.config.mchid);
        let answer = match self
            .exchange("query", Method::GET, url, None, MAX_ANSWER_BYTES, true)
            .await
        {
            Ok(answer) => answer,
            Err(ProviderError::Refused { code, .. }) if code == "ORDER_NOT_EXIST" => {
                return Ok(None)
            }
            Err(error) => return Err(error),
        };
        let transaction: Transaction = parse_json(&answer, "the transaction")?;
        if transaction.out_trade_no != trade_no
            || transaction.mchid != self.config.mchid
            || transaction.appid != self.config.appid
        {
            return Err(untrusted(format!(
                "query: the answer is about another order, merchant or app than {trade_no}"
            )));
        }
        Ok(Some(transaction))
    }

    async fn close(&self, trade_no: &str) -> Result<(), ProviderError> {
        let url = self.url(&[
            "v3",
            "pay",
            "transactions",
            "out-trade-no",
            trade_no,
            "close",
        ])?;
        let body = serde_json::to_string(&CloseRequest {
            mchid: &self.config.mchid,
        })
        .map_err(|err| unavailable(&format!("encoding the request: {err}")))?;
        self.exchange(
            "close",
            Method::POST,
            url,
            Some(body),
            MAX_ANSWER_BYTES,
            true,
        )
        .await
        .map(drop)
    }

    async fn trade_bill(&self, date: NaiveDate) -> Result<Vec<BillRow>, ProviderError> {
        let mut url = self.url(&["v3", "bill", "tradebill"])?;
        url.query_pairs_mut()
            .append_pair("bill_date", &date.format("%Y-%m-%d").to_string())
            .append_pair("bill_type", "ALL");
        let answer = match self
            .exchange("trade bill", Method::GET, url, None, MAX_ANSWER_BYTES, true)
            .await
        {
            Ok(answer) => answer,
            Err(ProviderError::Refused { code, .. }) if code == "NO_STATEMENT_EXIST" => {
                return Ok(Vec::new())
            }
            Err(error) => return Err(error),
        };
        let answer: BillAnswer = parse_json(&answer, "the trade bill answer")?;
        if !answer.hash_type.eq_ignore_ascii_case("SHA1") {
            return Err(untrusted(format!(
                "trade bill: hash_type {} is not SHA1",
                printable_code(&answer.hash_type)
            )));
        }
        let download = Url::parse(&answer.download_url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| untrusted("trade bill: download_url is not an http(s) URL"))?;
        let file = self
            .exchange(
                "trade bill download",
                Method::GET,
                download,
                None,
                MAX_BILL_BYTES,
                false,
            )
            .await?;
        let sha1 = hex::encode(digest(&SHA1_FOR_LEGACY_USE_ONLY, &file));
        if !sha1.eq_ignore_ascii_case(answer.hash_value.trim()) {
            return Err(untrusted(
                "trade bill: the file's SHA1 is not the hash_value WeChat Pay signed",
            ));
        }
        let text = std::str::from_utf8(&file)
            .map_err(|_| untrusted("trade bill: the file is not UTF-8"))?;
        parse_trade_bill(text)
    }

    async fn refund(&self, refund: &RefundOrder) -> Result<RefundResult, ProviderError> {
        let body = serde_json::to_string(&RefundRequest {
            out_trade_no: &refund.trade_no,
            out_refund_no: &refund.refund_no,
            reason: &refund.reason,
            notify_url: &self.config.notify_url,
            amount: RefundRequestAmount {
                refund: refund.amt,
                total: refund.total,
                currency: "CNY",
            },
        })
        .map_err(|err| unavailable(&format!("encoding the refund: {err}")))?;
        let url = self.url(&["v3", "refund", "domestic", "refunds"])?;
        let answer = self
            .exchange(
                "refund",
                Method::POST,
                url,
                Some(body),
                MAX_ANSWER_BYTES,
                true,
            )
            .await?;
        let result: RefundResult = parse_json(&answer, "the refund answer")?;
        if result.out_refund_no != refund.refund_no || result.out_trade_no != refund.trade_no {
            return Err(untrusted(format!(
                "refund: the answer is about another refund than {}",
                refund.refund_no
            )));
        }
        Ok(result)
    }

    async fn query_refund(&self, refund_no: &str) -> Result<Option<RefundResult>, ProviderError> {
        let url = self.url(&["v3", "refund", "domestic", "refunds", refund_no])?;
        let answer = match self
            .exchange(
                "refund query",
                Method::GET,
                url,
                None,
                MAX_ANSWER_BYTES,
                true,
            )
            .await
        {
            Ok(answer) => answer,
            Err(ProviderError::Refused { code, .. }) if code == "RESOURCE_NOT_EXISTS" => {
                return Ok(None)
            }
            Err(error) => return Err(error),
        };
        let result: RefundResult = parse_json(&answer, "the refund")?;
        if result.out_refund_no != refund_no {
            return Err(untrusted(format!(
                "refund query: the answer is about another refund than {refund_no}"
            )));
        }
        Ok(Some(result))
    }

    fn notification_keys(&self) -> &NotificationKeys {
        &self.notification_keys
    }
}

/// The order lines of a WeChat Pay trade bill (`bill_type=ALL`), as the file is: a header line
/// naming the columns, one line per trade or refund whose every field starts with a backtick,
/// a summary header (`总交易单数,…`) and one summary line. Columns are found by name; amounts
/// are read as decimal yuan into fen, exactly. A UTF-8 byte order mark, `\r\n` line ends and
/// blank lines are accepted.
///
/// [`ProviderError::Untrusted`] when the text is not such a bill: a column missing, a line with
/// another number of fields than the header, an amount that is not yuan, no summary, text after
/// it, or a summary whose `总交易单数` is not the number of lines read.
pub fn parse_trade_bill(text: &str) -> Result<Vec<BillRow>, ProviderError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line))
        .filter(|(_, line)| !line.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| untrusted("the bill is empty"))?;
    let columns = header_fields(header);
    let column = |name: &str| {
        columns
            .iter()
            .position(|column| *column == name)
            .ok_or_else(|| untrusted(format!("the bill has no column {name}")))
    };
    let time_at = column("交易时间")?;
    let transaction_id_at = column("微信订单号")?;
    let trade_no_at = column("商户订单号")?;
    let state_at = column("交易状态")?;
    let amount_at = column("订单金额")?;
    let refund_no_at = column("商户退款单号")?;
    let refund_amt_at = column("退款金额")?;
    let refund_status_at = column("退款状态")?;

    let mut rows = Vec::new();
    while let Some((number, line)) = lines.next() {
        if !line.starts_with('`') {
            check_summary(line, &mut lines, rows.len())?;
            return Ok(rows);
        }
        let fields = data_fields(line);
        if fields.len() != columns.len() {
            return Err(untrusted(format!(
                "bill line {number} has {} fields, its header {}",
                fields.len(),
                columns.len()
            )));
        }
        let amt = yuan_to_fen(fields[amount_at]).ok_or_else(|| {
            untrusted(format!(
                "bill line {number}: 订单金额 is not an amount in yuan"
            ))
        })?;
        let refund_amt = yuan_to_fen(fields[refund_amt_at]).ok_or_else(|| {
            untrusted(format!(
                "bill line {number}: 退款金额 is not an amount in yuan"
            ))
        })?;
        let refund_no = match fields[refund_no_at] {
            // WeChat writes 0 in a payment line's refund columns.
            "0" => String::new(),
            refund_no => refund_no.to_owned(),
        };
        let row = BillRow {
            trade_no: fields[trade_no_at].to_owned(),
            transaction_id: fields[transaction_id_at].to_owned(),
            trade_state: fields[state_at].to_owned(),
            amt,
            trade_time: fields[time_at].to_owned(),
            refund_no,
            refund_amt,
            refund_status: fields[refund_status_at].to_owned(),
        };
        if row.trade_state == "REFUND" && row.refund_no.is_empty() {
            return Err(untrusted(format!(
                "bill line {number} is a refund without 商户退款单号"
            )));
        }
        if row.trade_no.is_empty() || row.transaction_id.is_empty() || row.trade_state.is_empty() {
            return Err(untrusted(format!(
                "bill line {number} lacks 商户订单号, 微信订单号 or 交易状态"
            )));
        }
        rows.push(row);
    }
    Err(untrusted("the bill has no summary"))
}

/// Checks the summary: `header` (the summary's header line), then its one line of values whose
/// `总交易单数` must be `count`, then nothing.
fn check_summary<'a>(
    header: &str,
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
    count: usize,
) -> Result<(), ProviderError> {
    let columns = header_fields(header);
    let count_at = columns
        .iter()
        .position(|column| *column == SUMMARY_COLUMNS[0])
        .ok_or_else(|| untrusted("the bill's summary has no column 总交易单数"))?;
    let (number, line) = lines
        .next()
        .ok_or_else(|| untrusted("the bill's summary has no values"))?;
    if !line.starts_with('`') {
        return Err(untrusted(format!(
            "bill line {number}: the summary's values do not start with a backtick"
        )));
    }
    let values = data_fields(line);
    if values.len() != columns.len() {
        return Err(untrusted(format!(
            "bill line {number} has {} summary values, the summary's header {}",
            values.len(),
            columns.len()
        )));
    }
    let counted: usize = values[count_at]
        .parse()
        .map_err(|_| untrusted(format!("bill line {number}: 总交易单数 is not a number")))?;
    if counted != count {
        return Err(untrusted(format!(
            "the bill's summary counts {counted} trades, its lines {count}"
        )));
    }
    if let Some((number, _)) = lines.next() {
        return Err(untrusted(format!(
            "bill line {number}: text after the summary"
        )));
    }
    Ok(())
}

/// The column names of a header line.
fn header_fields(line: &str) -> Vec<&str> {
    line.split(',').map(str::trim).collect()
}

/// The fields of a line whose every field starts with a backtick (the caller checked the first
/// one does). Splitting on `` ,` `` rather than `,` keeps commas inside a field (a product name)
/// in it.
fn data_fields(line: &str) -> Vec<&str> {
    line.strip_prefix('`')
        .unwrap_or(line)
        .split(",`")
        .map(str::trim)
        .collect()
}

/// A non-negative decimal amount in yuan (`0.01`, `10`, `1.5`, `1234.50`: digits, then
/// optionally `.` and one or two digits) as fen; `None` for anything else or an overflow.
fn yuan_to_fen(text: &str) -> Option<i64> {
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) if !fraction.is_empty() => (whole, fraction),
        Some(_) => return None,
        None => (text, ""),
    };
    let digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || fraction.len() > 2 || !digits(fraction) {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let fen = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(2)
        .fold(0, |fen, byte| fen * 10 + i64::from(byte - b'0'));
    whole.checked_mul(100)?.checked_add(fen)
}

/// `fen` as yuan with two decimals, as the bill writes amounts (`0.01`, `-9.90`).
fn fen_to_yuan(fen: i64) -> String {
    let sign = if fen < 0 { "-" } else { "" };
    let fen = fen.unsigned_abs();
    format!("{sign}{}.{:02}", fen / 100, fen % 100)
}

/// `rows` as WeChat Pay's trade bill of merchant `mchid` and app `appid`: what
/// [`parse_trade_bill`] reads back (the fake provider serves its bills with it). A `REFUND` row
/// is written as a full refund of its amount; the columns a [`BillRow`] does not know are
/// written as WeChat fills them for a plain Native payment. Backticks and line breaks in a
/// value are dropped so that the file keeps its shape.
pub fn write_trade_bill(rows: &[BillRow], mchid: &str, appid: &str) -> String {
    fn clean(value: &str) -> String {
        value
            .chars()
            .filter(|c| !matches!(c, '`' | '\r' | '\n'))
            .collect()
    }
    fn line(fields: &[&str]) -> String {
        let mut line = fields
            .iter()
            .map(|field| format!("`{}", clean(field)))
            .collect::<Vec<_>>()
            .join(",");
        line.push_str("\r\n");
        line
    }

    let mut bill = BILL_COLUMNS.join(",");
    bill.push_str("\r\n");
    let (mut settled_total, mut refund_total, mut order_total) = (0i64, 0i64, 0i64);
    for row in rows {
        let refund = row.trade_state == "REFUND";
        let amount = fen_to_yuan(row.amt);
        let (settled, refunded) = if refund {
            ("0.00".to_owned(), fen_to_yuan(row.refund_amt))
        } else {
            (amount.clone(), "0.00".to_owned())
        };
        let refund_no = if refund { row.refund_no.as_str() } else { "0" };
        if refund {
            refund_total = refund_total.saturating_add(row.refund_amt);
        } else {
            settled_total = settled_total.saturating_add(row.amt);
        }
        order_total = order_total.saturating_add(row.amt);
        let (refund_type, refund_state) = if refund {
            ("ORIGINAL", row.refund_status.as_str())
        } else {
            ("", "")
        };
        bill.push_str(&line(&[
            &row.trade_time,
            appid,
            mchid,
            "0",
            "",
            &row.transaction_id,
            &row.trade_no,
            "",
            "NATIVE",
            &row.trade_state,
            "OTHERS",
            "CNY",
            &settled,
            "0.00",
            "0",
            refund_no,
            &refunded,
            "0.00",
            refund_type,
            refund_state,
            "",
            "",
            "0.00000",
            "0.60%",
            &amount,
            &refunded,
            "",
        ]));
    }
    bill.push_str(&SUMMARY_COLUMNS.join(","));
    bill.push_str("\r\n");
    bill.push_str(&line(&[
        &rows.len().to_string(),
        &fen_to_yuan(settled_total),
        &fen_to_yuan(refund_total),
        "0.00",
        "0.00000",
        &fen_to_yuan(order_total),
        &fen_to_yuan(refund_total),
    ]));
    bill
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bill as WeChat writes one: byte order mark, `\r\n`, every field behind a backtick, a
    /// product name with a comma, a payment of 0.01, one of 1234.50, and the refund of the
    /// first (a refund line keeps the order's 微信订单号 and 订单金额).
    const BILL: &str = "\u{feff}交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注\r\n\
`2021-01-28 15:35:18,`wx81be3101902f7cb2,`1601959334,`0,`,`4200000910202101282955148400,`S20210128153505214586,`ofyak5qR_1wYsC99CsWA6R9MJazA,`NATIVE,`SUCCESS,`OTHERS,`CNY,`0.01,`0.00,`0,`0,`0.00,`0.00,`,`,`打赏, 文章 42,`,`0.00000,`0.60%,`0.01,`0.00,`\r\n\
`2021-01-28 16:59:46,`wx81be3101902f7cb2,`1601959334,`0,`,`4200000926202101281412639609,`S20210128165824499930,`ofyak5qR_1wYsC99CsWA6R9MJazA,`NATIVE,`SUCCESS,`CMB_CREDIT,`CNY,`1234.50,`0.00,`0,`0,`0.00,`0.00,`,`,`会员,`,`7.40700,`0.60%,`1234.50,`0.00,`\r\n\
`2021-01-28 18:02:11,`wx81be3101902f7cb2,`1601959334,`0,`,`4200000910202101282955148400,`S20210128153505214586,`ofyak5qR_1wYsC99CsWA6R9MJazA,`NATIVE,`REFUND,`OTHERS,`CNY,`0.00,`0.00,`50300707062021012806132140022,`R20210128180201,`0.01,`0.00,`ORIGINAL,`SUCCESS,`打赏, 文章 42,`,`-0.00000,`0.60%,`0.01,`0.01,`\r\n\
总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额\r\n\
`3,`1234.51,`0.01,`0.00,`7.40700,`1234.52,`0.01\r\n";

    fn row(trade_no: &str, transaction_id: &str, state: &str, amt: i64, time: &str) -> BillRow {
        let refund = state == "REFUND";
        BillRow {
            trade_no: trade_no.to_owned(),
            transaction_id: transaction_id.to_owned(),
            trade_state: state.to_owned(),
            amt,
            trade_time: time.to_owned(),
            refund_no: if refund { "R20210128180201" } else { "" }.to_owned(),
            refund_amt: if refund { amt } else { 0 },
            refund_status: if refund { "SUCCESS" } else { "" }.to_owned(),
        }
    }

    #[test]
    fn a_real_bill_parses_into_its_order_lines() {
        assert_eq!(
            parse_trade_bill(BILL).unwrap(),
            [
                row(
                    "S20210128153505214586",
                    "4200000910202101282955148400",
                    "SUCCESS",
                    1,
                    "2021-01-28 15:35:18"
                ),
                row(
                    "S20210128165824499930",
                    "4200000926202101281412639609",
                    "SUCCESS",
                    123_450,
                    "2021-01-28 16:59:46"
                ),
                row(
                    "S20210128153505214586",
                    "4200000910202101282955148400",
                    "REFUND",
                    1,
                    "2021-01-28 18:02:11"
                ),
            ]
        );
        // Plain `\n` line ends and no byte order mark read the same.
        let plain = BILL.trim_start_matches('\u{feff}').replace("\r\n", "\n");
        assert_eq!(parse_trade_bill(&plain), parse_trade_bill(BILL));
    }

    #[test]
    fn columns_are_found_by_name_not_position() {
        // The same bill with its first two columns swapped in the header and every line.
        let swapped: String = BILL
            .trim_start_matches('\u{feff}')
            .lines()
            .map(|line| {
                let separator = if line.starts_with('`') { ",`" } else { "," };
                let (head, rest) = line.split_once(separator).unwrap();
                let (second, rest) = rest.split_once(separator).unwrap();
                let head = head.trim_start_matches('`');
                let lead = if line.starts_with('`') { "`" } else { "" };
                format!("{lead}{second}{separator}{head}{separator}{rest}\n")
            })
            .collect();
        assert!(swapped.starts_with("公众账号ID,交易时间,"));
        assert_eq!(parse_trade_bill(&swapped), parse_trade_bill(BILL));
    }

    #[test]
    fn a_summary_that_counts_other_lines_is_untrusted() {
        let wrong = BILL.replace("`3,`1234.51", "`2,`1234.51");
        assert!(
            matches!(parse_trade_bill(&wrong), Err(ProviderError::Untrusted(ref why)) if why.contains("counts 2")),
            "{:?}",
            parse_trade_bill(&wrong)
        );
    }

    #[test]
    fn malformed_bills_are_untrusted() {
        let without_summary: String = BILL.lines().take(4).map(|l| format!("{l}\n")).collect();
        let cases = [
            ("", "empty"),
            (
                &BILL.replace("订单金额,申请退款金额", "金额,申请退款金额"),
                "no column 订单金额",
            ),
            (
                &BILL.replace("`1234.50,`0.00,`", "`1234.5O,`0.00,`"),
                "not an amount",
            ),
            (&BILL.replace("`-0.00000,`0.60%,", "`0.60%,"), "fields"),
            (&without_summary, "no summary"),
            (&format!("{BILL}`1,`0.01\r\n"), "after the summary"),
            (&BILL.replace("`S20210128165824499930,", "`,"), "lacks"),
        ];
        for (bill, why) in cases {
            match parse_trade_bill(bill) {
                Err(ProviderError::Untrusted(text)) => assert!(text.contains(why), "{text}"),
                other => panic!("{why}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_written_bill_parses_back_into_its_rows() {
        let rows = [
            row("T1", "4200000001", "SUCCESS", 1, "2024-06-01 00:00:01"),
            row(
                "T2",
                "4200000002",
                "SUCCESS",
                123_450,
                "2024-06-01 12:30:00",
            ),
            row("T1", "4200000001", "REFUND", 1, "2024-06-01 23:59:59"),
            row("T3", "4200000003", "SUCCESS", 1000, "2024-06-01 23:59:59"),
        ];
        let bill = write_trade_bill(&rows, "1900000109", "wxd678efh567hg6787");
        assert_eq!(parse_trade_bill(&bill).unwrap(), rows);
        assert!(bill.starts_with(&BILL_COLUMNS.join(",")));
        assert!(bill.contains("`wxd678efh567hg6787,`1900000109,"), "{bill}");
        // Summary: 4 lines; settled 0.01 + 1234.50 + 10.00; refunded 0.01; ordered all four.
        assert!(
            bill.ends_with("\r\n`4,`1244.51,`0.01,`0.00,`0.00000,`1244.52,`0.01\r\n"),
            "{bill}"
        );
        assert_eq!(
            parse_trade_bill(&write_trade_bill(&[], "1900000109", "wx")).unwrap(),
            []
        );
        // A backtick or line break in a value does not break the file.
        let odd = [row("T`4", "42\r\n00", "SUCCESS", 5, "2024-06-01 01:00:00")];
        assert_eq!(
            parse_trade_bill(&write_trade_bill(&odd, "m", "a")).unwrap(),
            [row("T4", "4200", "SUCCESS", 5, "2024-06-01 01:00:00")]
        );
    }

    #[test]
    fn yuan_become_fen_exactly() {
        for (yuan, fen) in [
            ("0.01", 1),
            ("10", 1000),
            ("1.5", 150),
            ("1234.50", 123_450),
            ("0.00", 0),
            ("0", 0),
            ("19.99", 1999),
            ("92233720368547758.07", i64::MAX),
        ] {
            assert_eq!(yuan_to_fen(yuan), Some(fen), "{yuan}");
        }
        for garbage in [
            "",
            "-1.00",
            "-0.01",
            "+1.00",
            "1.",
            ".5",
            "1.234",
            "1,00",
            "1 .00",
            "abc",
            "1e3",
            "0x10",
            "１.00",
            "92233720368547758.08",
            "99999999999999999999",
        ] {
            assert_eq!(yuan_to_fen(garbage), None, "{garbage}");
        }
        for fen in [0, 1, 10, 99, 100, 150, 123_450, -990] {
            let yuan = fen_to_yuan(fen);
            if fen >= 0 {
                assert_eq!(yuan_to_fen(&yuan), Some(fen), "{yuan}");
            }
        }
        assert_eq!(fen_to_yuan(-990), "-9.90");
        assert_eq!(fen_to_yuan(5), "0.05");
    }

    #[test]
    fn time_expire_is_rfc3339_in_china_standard_time() {
        // 2100-01-01T00:00:00Z, plus 999 ms that WeChat's format has no place for.
        assert_eq!(
            time_expire(4_102_444_800_999).as_deref(),
            Some("2100-01-01T08:00:00+08:00")
        );
        assert_eq!(
            time_expire(1_528_425_296_000).as_deref(),
            Some("2018-06-08T10:34:56+08:00")
        );
        assert_eq!(time_expire(i64::MAX), None);
    }

    #[test]
    fn answers_are_trusted_only_when_verified() {
        let ok = || Ok(());
        let bad = || Err(CryptoError::BadSignature);
        let refusal = r#"{"code":"ORDER_NOT_EXIST","message":"订单不存在"}"#.as_bytes();
        assert_eq!(judge(StatusCode::OK, b"{}", ok()), Ok(()));
        assert_eq!(judge(StatusCode::NO_CONTENT, b"", ok()), Ok(()));
        assert!(matches!(
            judge(StatusCode::OK, b"{}", bad()),
            Err(ProviderError::Untrusted(_))
        ));
        assert_eq!(
            judge(StatusCode::NOT_FOUND, refusal, ok()),
            Err(ProviderError::Refused {
                code: "ORDER_NOT_EXIST".to_owned(),
                message: "订单不存在".to_owned()
            })
        );
        // An unverified refusal is not believed, but says what it claimed.
        match judge(StatusCode::NOT_FOUND, refusal, bad()) {
            Err(ProviderError::Untrusted(text)) => {
                assert!(text.contains("404 ORDER_NOT_EXIST"), "{text}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            judge(StatusCode::BAD_REQUEST, b"<html>", ok()),
            Err(ProviderError::Untrusted(_))
        ));
        for verified in [ok(), bad()] {
            assert_eq!(
                judge(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    br#"{"code":"SYSTEM_ERROR","message":"m"}"#,
                    verified
                ),
                Err(ProviderError::Unavailable(
                    "HTTP 500 SYSTEM_ERROR".to_owned()
                ))
            );
        }
        assert_eq!(
            judge(StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>", bad()),
            Err(ProviderError::Unavailable("HTTP 502".to_owned()))
        );
        assert!(matches!(
            judge(StatusCode::FOUND, b"", ok()),
            Err(ProviderError::Unavailable(_))
        ));
    }
}
