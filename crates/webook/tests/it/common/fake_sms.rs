//! Loopback fakes of Tencent Cloud SMS (API v3 `SendSms`) and Alibaba Cloud SMS (`dysmsapi`
//! `SendSms`, V3 signature) for tests: an axum server on `127.0.0.1:0`, on a tokio task, that
//! verifies each request's real signature from the raw request — method, path, query, headers,
//! body — with an implementation of its own (not the clients' code), refuses stale timestamps
//! (and, for Aliyun, reused nonces), and answers in the provider's JSON format.
//!
//! A request's way through a fake: counted and kept ([`FakeSms::requests`],
//! [`FakeSms::last_request`]); authentication checked — a refusal is counted in
//! [`FakeSms::signature_failures`] and answered as the provider does (Tencent
//! `AuthFailure.SignatureFailure`, Aliyun `SignatureDoesNotMatch`, …); the parameters read; then
//! the [`Mode`] decides: [`Mode::Ok`] records a [`Delivered`] and answers success, the others
//! answer an error, a 500, or nothing until the mode changes.
//!
//! ```text
//! let fake = FakeSms::tencent("AKIDtest", "secret").await;
//! fake.set_template_params(&["code"]);           // Tencent's parameters are positional
//! // … configure the client with fake.endpoint() and send …
//! fake.wait_for_deliveries(1).await;
//! let code = fake.last_param_to("13812345678", "code");
//! ```

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard},
};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Router,
};
use chrono::{NaiveDateTime, Utc};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::{sync::watch, task::JoinHandle};

/// How a fake answers requests that pass its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Accepts the message (a [`Delivered`]) and answers the provider's success.
    Ok,
    /// The provider's error answer for a message it will not send (a template not approved).
    Fail,
    /// HTTP 500 with a non-JSON body.
    ServerError,
    /// The provider's frequency-limit error for the number.
    RateLimit,
    /// No answer until the mode changes (then the new mode answers).
    Hang,
}

/// Which provider a fake plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Tencent,
    Aliyun,
}

/// A message a fake accepted (with a valid signature, in [`Mode::Ok`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// As sent: `+8613812345678` to Tencent, `13812345678` to Aliyun.
    pub phone: String,
    pub sign_name: String,
    /// Tencent's `TemplateId`, Aliyun's `TemplateCode`.
    pub template: String,
    /// Name and value of each parameter. Aliyun: the `TemplateParam` object's keys. Tencent:
    /// `TemplateParamSet` in order, named by [`FakeSms::set_template_params`], else by position
    /// (`"1"`, `"2"`, … as the template's `{1}`, `{2}`).
    pub params: Vec<(String, String)>,
}

impl Delivered {
    /// The value of the parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The parameters' values, in order.
    pub fn values(&self) -> Vec<&str> {
        self.params
            .iter()
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// The phone without `+86`.
    pub fn national_phone(&self) -> &str {
        self.phone.strip_prefix("+86").unwrap_or(&self.phone)
    }
}

/// A request as the fake received it, to replay (altered) in tests.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub method: String,
    /// E.g. `/` or `/?PhoneNumbers=…`.
    pub path_and_query: String,
    /// Names lower-case, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A running fake provider; the server stops when it is dropped.
pub struct FakeSms {
    provider: Provider,
    address: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

struct Shared {
    provider: Provider,
    key_id: String,
    secret: String,
    mode: watch::Sender<Mode>,
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    requests: usize,
    signature_failures: usize,
    delivered: Vec<Delivered>,
    last_request: Option<RawRequest>,
    nonces: HashSet<String>,
    template_params: Vec<String>,
    hanging: usize,
}

/// Tencent: how far `X-TC-Timestamp` may be from now.
const TENCENT_MAX_SKEW_SECS: i64 = 300;
/// Aliyun: how far `x-acs-date` may be from now.
const ALIYUN_MAX_SKEW_SECS: i64 = 900;

impl FakeSms {
    /// A fake Tencent Cloud SMS that knows one API key.
    pub async fn tencent(secret_id: &str, secret_key: &str) -> Self {
        Self::start(Provider::Tencent, secret_id, secret_key).await
    }

    /// A fake Alibaba Cloud SMS that knows one AccessKey.
    pub async fn aliyun(access_key_id: &str, access_key_secret: &str) -> Self {
        Self::start(Provider::Aliyun, access_key_id, access_key_secret).await
    }

    async fn start(provider: Provider, key_id: &str, secret: &str) -> Self {
        let (mode, _) = watch::channel(Mode::Ok);
        let shared = Arc::new(Shared {
            provider,
            key_id: key_id.to_owned(),
            secret: secret.to_owned(),
            mode,
            log: Mutex::new(Log::default()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake SMS provider");
        let address = listener.local_addr().expect("its address");
        let router = Router::new().fallback(handle).with_state(shared.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .await
                .expect("the fake SMS provider serves");
        });
        Self {
            provider,
            address,
            shared,
            server,
        }
    }

    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The base URL to configure the client with, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// How the following requests — and those hanging now — are answered.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.mode.send_replace(mode);
    }

    /// Names for the Tencent template's positional parameters, in order (e.g. `["code"]`), so
    /// that [`Delivered::param`] and [`FakeSms::last_param_to`] find them by name.
    pub fn set_template_params(&self, names: &[&str]) {
        self.log().template_params = names.iter().map(|name| (*name).to_owned()).collect();
    }

    /// The messages accepted so far, oldest first.
    pub fn delivered(&self) -> Vec<Delivered> {
        self.log().delivered.clone()
    }

    /// Every request received, whatever became of it.
    pub fn requests(&self) -> usize {
        self.log().requests
    }

    /// Requests refused for their authentication: signature, key id, timestamp, nonce.
    pub fn signature_failures(&self) -> usize {
        self.log().signature_failures
    }

    /// Requests waiting in [`Mode::Hang`] now (a request whose client gave up may still wait:
    /// after a mode change it is answered, and in [`Mode::Ok`] delivered).
    pub fn hanging(&self) -> usize {
        self.log().hanging
    }

    /// The last request received, as received.
    pub fn last_request(&self) -> Option<RawRequest> {
        self.log().last_request.clone()
    }

    /// Waits until `n` messages have been accepted (panics after the tests' wait limit);
    /// returns them all.
    pub async fn wait_for_deliveries(&self, n: usize) -> Vec<Delivered> {
        platform::testing::wait_until(&format!("{n} SMS deliveries"), || async {
            self.log().delivered.len() >= n
        })
        .await;
        self.delivered()
    }

    /// The last message accepted for `phone` (11 digits, without `+86`).
    pub fn last_delivery_to(&self, phone: &str) -> Option<Delivered> {
        self.log()
            .delivered
            .iter()
            .rev()
            .find(|delivered| delivered.national_phone() == phone)
            .cloned()
    }

    /// The parameter `name` (e.g. `"code"`) of the last message accepted for `phone`.
    pub fn last_param_to(&self, phone: &str, name: &str) -> Option<String> {
        self.last_delivery_to(phone)?.param(name).map(str::to_owned)
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.shared.log.lock().expect("fake SMS log")
    }
}

impl Drop for FakeSms {
    fn drop(&mut self) {
        self.server.abort();
        // Requests hanging on open connections get an answer rather than living on.
        self.shared.mode.send_replace(Mode::ServerError);
    }
}

/// Why a request was refused: the provider's error code and message, and the HTTP status
/// Aliyun uses for it (Tencent answers 200).
struct Refusal {
    code: &'static str,
    message: &'static str,
    status: StatusCode,
    /// An authentication failure (counted in `signature_failures`).
    auth: bool,
}

fn auth_refusal(code: &'static str, message: &'static str, status: StatusCode) -> Refusal {
    Refusal {
        code,
        message,
        status,
        auth: true,
    }
}

fn bad_request(code: &'static str, message: &'static str) -> Refusal {
    Refusal {
        code,
        message,
        status: StatusCode::BAD_REQUEST,
        auth: false,
    }
}

/// What a valid request asks to send.
struct Message {
    phone: String,
    sign_name: String,
    template: String,
    params: Vec<(String, String)>,
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "too large").into_response();
    };
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
    {
        let mut log = shared.log.lock().expect("fake SMS log");
        log.requests += 1;
        log.last_request = Some(raw.clone());
    }

    let verified = match shared.provider {
        Provider::Tencent => verify_tencent(&shared, &parts.headers, &raw),
        Provider::Aliyun => verify_aliyun(&shared, &parts.headers, &raw),
    };
    let message = match verified {
        Ok(message) => message,
        Err(refusal) => {
            if refusal.auth {
                shared.log.lock().expect("fake SMS log").signature_failures += 1;
            }
            return error_answer(shared.provider, &refusal);
        }
    };

    let mut mode = shared.mode.subscribe();
    let mut hanging = None;
    let current = loop {
        let current = *mode.borrow_and_update();
        if current != Mode::Hang {
            break current;
        }
        if hanging.is_none() {
            hanging = Some(Hanging::new(&shared));
        }
        if mode.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    drop(hanging);
    match (shared.provider, current) {
        (_, Mode::ServerError) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
        }
        (Provider::Tencent, Mode::RateLimit) => json_answer(
            StatusCode::OK,
            json!({"Response": {
                "SendStatusSet": [{
                    "SerialNo": "",
                    "PhoneNumber": message.phone,
                    "Fee": 0,
                    "SessionContext": "",
                    "Code": "LimitExceeded.PhoneNumberThirtySecondLimit",
                    "Message": "the number of SMS messages sent from a single mobile number within 30 seconds exceeds the upper limit",
                    "IsoCode": "CN",
                }],
                "RequestId": request_id(),
            }}),
        ),
        (Provider::Tencent, Mode::Fail) => tencent_error(
            "FailedOperation.TemplateIncorrectOrUnapproved",
            "the template is not approved or the request does not match the approved template",
        ),
        (Provider::Aliyun, Mode::RateLimit) => aliyun_error(
            StatusCode::OK,
            "isv.BUSINESS_LIMIT_CONTROL",
            "触发分钟级流控Permits:1",
        ),
        (Provider::Aliyun, Mode::Fail) => aliyun_error(
            StatusCode::OK,
            "isv.SMS_TEMPLATE_ILLEGAL",
            "该账号下找不到对应模板",
        ),
        (provider, Mode::Ok | Mode::Hang) => {
            let phone = message.phone.clone();
            let mut log = shared.log.lock().expect("fake SMS log");
            let mut params = message.params;
            if provider == Provider::Tencent {
                for (index, (name, _)) in params.iter_mut().enumerate() {
                    if let Some(given) = log.template_params.get(index) {
                        name.clone_from(given);
                    }
                }
            }
            log.delivered.push(Delivered {
                phone: message.phone,
                sign_name: message.sign_name,
                template: message.template,
                params,
            });
            drop(log);
            match provider {
                Provider::Tencent => json_answer(
                    StatusCode::OK,
                    json!({"Response": {
                        "SendStatusSet": [{
                            "SerialNo": format!("5000:{}", uuid::Uuid::new_v4().as_u128() % 10_u128.pow(30)),
                            "PhoneNumber": phone,
                            "Fee": 1,
                            "SessionContext": "",
                            "Code": "Ok",
                            "Message": "send success",
                            "IsoCode": "CN",
                        }],
                        "RequestId": request_id(),
                    }}),
                ),
                Provider::Aliyun => json_answer(
                    StatusCode::OK,
                    json!({
                        "Code": "OK",
                        "Message": "OK",
                        "BizId": format!("{}^0", uuid::Uuid::new_v4().as_u128() % 10_u128.pow(18)),
                        "RequestId": request_id().to_uppercase(),
                    }),
                ),
            }
        }
    }
}

/// A request in [`Mode::Hang`], counted while it lives (also when its future is dropped).
struct Hanging(Arc<Shared>);

impl Hanging {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.log.lock().expect("fake SMS log").hanging += 1;
        Self(shared.clone())
    }
}

impl Drop for Hanging {
    fn drop(&mut self) {
        if let Ok(mut log) = self.0.log.lock() {
            log.hanging -= 1;
        }
    }
}

fn request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn json_answer(status: StatusCode, body: Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
}

fn tencent_error(code: &str, message: &str) -> Response {
    json_answer(
        StatusCode::OK,
        json!({"Response": {"Error": {"Code": code, "Message": message}, "RequestId": request_id()}}),
    )
}

fn aliyun_error(status: StatusCode, code: &str, message: &str) -> Response {
    json_answer(
        status,
        json!({
            "RequestId": request_id().to_uppercase(),
            "HostId": "dysmsapi.aliyuncs.com",
            "Code": code,
            "Message": message,
            "Recommend": "https://api.aliyun.com/troubleshoot",
        }),
    )
}

/// Tencent answers every error with HTTP 200 and `Response.Error`; Aliyun with the status.
fn error_answer(provider: Provider, refusal: &Refusal) -> Response {
    match provider {
        Provider::Tencent => tencent_error(refusal.code, refusal.message),
        Provider::Aliyun => aliyun_error(refusal.status, refusal.code, refusal.message),
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn hmac(key: &[u8], data: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(data);
    mac
}

/// `Algorithm k1=v1<sep>k2=v2…` of an `Authorization` header, as a map.
fn authorization_fields<'a>(
    headers: &'a HeaderMap,
    algorithm: &str,
) -> Option<HashMap<&'a str, &'a str>> {
    let rest = header(headers, "authorization")?.strip_prefix(algorithm)?;
    let rest = rest.strip_prefix(' ')?;
    Some(
        rest.split(',')
            .filter_map(|field| field.trim().split_once('='))
            .collect(),
    )
}

/// A `SignedHeaders` list: lower-case, sorted, no repeats, each header present, and the
/// `required` ones among them.
fn signed_header_names<'a>(
    list: &'a str,
    headers: &HeaderMap,
    required: &[&str],
) -> Option<Vec<&'a str>> {
    let names: Vec<&str> = list.split(';').collect();
    let well_formed = names.windows(2).all(|pair| pair[0] < pair[1])
        && names
            .iter()
            .all(|name| *name == name.to_ascii_lowercase() && headers.contains_key(*name));
    (well_formed && required.iter().all(|name| names.contains(name))).then_some(names)
}

// ---------------------------------------------------------------------------------------------
// Tencent Cloud: TC3-HMAC-SHA256.

fn verify_tencent(
    shared: &Shared,
    headers: &HeaderMap,
    raw: &RawRequest,
) -> Result<Message, Refusal> {
    let signature_failure = || {
        auth_refusal(
            "AuthFailure.SignatureFailure",
            "The provided credentials could not be validated. Please check your signature is correct.",
            StatusCode::OK,
        )
    };
    let fields = authorization_fields(headers, "TC3-HMAC-SHA256").ok_or_else(signature_failure)?;
    let (secret_id, scope) = fields
        .get("Credential")
        .and_then(|credential| credential.split_once('/'))
        .ok_or_else(signature_failure)?;
    if secret_id != shared.key_id {
        return Err(auth_refusal(
            "AuthFailure.SecretIdNotFound",
            "The SecretId is not found, please ensure that your SecretId is correct.",
            StatusCode::OK,
        ));
    }
    let timestamp: i64 = header(headers, "x-tc-timestamp")
        .and_then(|text| text.parse().ok())
        .ok_or_else(signature_failure)?;
    if (Utc::now().timestamp() - timestamp).abs() > TENCENT_MAX_SKEW_SECS {
        return Err(auth_refusal(
            "AuthFailure.SignatureExpire",
            "Signature expired. Timestamp and server time cannot differ by more than 5 minutes.",
            StatusCode::OK,
        ));
    }
    let day = chrono::DateTime::from_timestamp(timestamp, 0)
        .ok_or_else(signature_failure)?
        .date_naive()
        .to_string();
    let expected_scope = format!("{day}/sms/tc3_request");
    if scope != expected_scope {
        return Err(signature_failure());
    }
    let signed = fields.get("SignedHeaders").ok_or_else(signature_failure)?;
    let names = signed_header_names(signed, headers, &["content-type", "host"])
        .ok_or_else(signature_failure)?;
    let mut canonical_headers = String::new();
    for name in &names {
        let value = header(headers, name).ok_or_else(signature_failure)?;
        canonical_headers += &format!("{name}:{}\n", value.trim().to_lowercase());
    }
    let (path, query) = raw
        .path_and_query
        .split_once('?')
        .unwrap_or((raw.path_and_query.as_str(), ""));
    let canonical_request = [
        raw.method.as_str(),
        path,
        query,
        &canonical_headers,
        signed,
        &sha256_hex(&raw.body),
    ]
    .join("\n");
    let string_to_sign = [
        "TC3-HMAC-SHA256".to_owned(),
        timestamp.to_string(),
        expected_scope,
        sha256_hex(canonical_request.as_bytes()),
    ]
    .join("\n");
    let mut key = format!("TC3{}", shared.secret).into_bytes();
    for part in [day.as_str(), "sms", "tc3_request"] {
        key = hmac(&key, part.as_bytes()).finalize().into_bytes().to_vec();
    }
    let claimed = fields
        .get("Signature")
        .and_then(|text| hex::decode(text).ok())
        .ok_or_else(signature_failure)?;
    hmac(&key, string_to_sign.as_bytes())
        .verify_slice(&claimed)
        .map_err(|_| signature_failure())?;

    if header(headers, "x-tc-action") != Some("SendSms") {
        return Err(bad_request(
            "InvalidAction",
            "The action does not exist or is not supported.",
        ));
    }
    if header(headers, "x-tc-version") != Some("2021-01-11") {
        return Err(bad_request(
            "NoSuchVersion",
            "The API version is not supported.",
        ));
    }
    if header(headers, "x-tc-region").is_none_or(str::is_empty) {
        return Err(bad_request(
            "MissingParameter",
            "The request is missing a required parameter `Region`.",
        ));
    }
    if !header(headers, "content-type").is_some_and(|value| value.starts_with("application/json")) {
        return Err(bad_request(
            "InvalidParameter",
            "Content-Type must be application/json.",
        ));
    }
    let invalid = || bad_request("InvalidParameter", "The parameters are invalid.");
    let body: Value = serde_json::from_slice(&raw.body).map_err(|_| invalid())?;
    let text = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
    let phones = body
        .get("PhoneNumberSet")
        .and_then(Value::as_array)
        .ok_or_else(invalid)?;
    let [phone] = phones.as_slice() else {
        return Err(invalid());
    };
    let params = match body.get("TemplateParamSet") {
        None => Vec::new(),
        Some(values) => values
            .as_array()
            .ok_or_else(invalid)?
            .iter()
            .enumerate()
            .map(|(index, value)| {
                value
                    .as_str()
                    .map(|value| ((index + 1).to_string(), value.to_owned()))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(invalid)?,
    };
    text("SmsSdkAppId").ok_or_else(invalid)?;
    Ok(Message {
        phone: phone.as_str().ok_or_else(invalid)?.to_owned(),
        sign_name: text("SignName").ok_or_else(invalid)?,
        template: text("TemplateId").ok_or_else(invalid)?,
        params,
    })
}

// ---------------------------------------------------------------------------------------------
// Alibaba Cloud: ACS3-HMAC-SHA256.

/// RFC 3986 percent-encoding: everything but `A-Za-z0-9-_.~`, byte by byte, upper-case hex.
fn rfc3986(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// SMS's own errors come with HTTP 200.
fn invalid_json() -> Refusal {
    Refusal {
        code: "isv.INVALID_JSON_PARAM",
        message: "JSON参数不合法，只接受字符串值",
        status: StatusCode::OK,
        auth: false,
    }
}

fn verify_aliyun(
    shared: &Shared,
    headers: &HeaderMap,
    raw: &RawRequest,
) -> Result<Message, Refusal> {
    let mismatch = || {
        auth_refusal(
            "SignatureDoesNotMatch",
            "Specified signature does not match our calculation.",
            StatusCode::BAD_REQUEST,
        )
    };
    let incomplete = || {
        auth_refusal(
            "IncompleteSignature",
            "The request signature does not conform to Aliyun standards.",
            StatusCode::BAD_REQUEST,
        )
    };
    let fields = authorization_fields(headers, "ACS3-HMAC-SHA256").ok_or_else(incomplete)?;
    if fields.get("Credential") != Some(&shared.key_id.as_str()) {
        return Err(auth_refusal(
            "InvalidAccessKeyId.NotFound",
            "Specified access key is not found.",
            StatusCode::NOT_FOUND,
        ));
    }
    let date = header(headers, "x-acs-date")
        .and_then(|text| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%SZ").ok())
        .ok_or_else(|| {
            auth_refusal(
                "InvalidTimeStamp.Format",
                "Specified time stamp or date value is not well formatted.",
                StatusCode::BAD_REQUEST,
            )
        })?;
    if (Utc::now().naive_utc() - date).num_seconds().abs() > ALIYUN_MAX_SKEW_SECS {
        return Err(auth_refusal(
            "InvalidTimeStamp.Expired",
            "Specified time stamp or date value is expired.",
            StatusCode::BAD_REQUEST,
        ));
    }
    let nonce = header(headers, "x-acs-signature-nonce").ok_or_else(incomplete)?;
    // Every header that must be signed when present: host, content-type, all x-acs-*.
    let mut required: Vec<&str> = headers
        .keys()
        .map(|name| name.as_str())
        .filter(|name| name.starts_with("x-acs-") || *name == "content-type")
        .collect();
    required.extend(["host", "x-acs-action", "x-acs-version", "x-acs-date"]);
    required.extend(["x-acs-signature-nonce", "x-acs-content-sha256"]);
    let signed = fields.get("SignedHeaders").ok_or_else(incomplete)?;
    let names = signed_header_names(signed, headers, &required).ok_or_else(incomplete)?;

    let body_hash = sha256_hex(&raw.body);
    if header(headers, "x-acs-content-sha256") != Some(body_hash.as_str()) {
        return Err(mismatch());
    }
    let (path, query) = raw
        .path_and_query
        .split_once('?')
        .unwrap_or((raw.path_and_query.as_str(), ""));
    // As a server reads a query: form-decoded; then canonical again by this fake's own rules.
    let params: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect();
    let mut encoded: Vec<(String, String)> = params
        .iter()
        .map(|(name, value)| (rfc3986(name), rfc3986(value)))
        .collect();
    encoded.sort();
    let canonical_query = encoded
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for name in &names {
        let value = header(headers, name).ok_or_else(mismatch)?;
        canonical_headers += &format!("{name}:{}\n", value.trim());
    }
    let canonical_request = [
        raw.method.as_str(),
        path,
        &canonical_query,
        &canonical_headers,
        signed,
        &body_hash,
    ]
    .join("\n");
    let string_to_sign = format!(
        "ACS3-HMAC-SHA256\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    let claimed = fields
        .get("Signature")
        .and_then(|text| hex::decode(text).ok())
        .ok_or_else(mismatch)?;
    hmac(shared.secret.as_bytes(), string_to_sign.as_bytes())
        .verify_slice(&claimed)
        .map_err(|_| mismatch())?;
    // A valid signature spends its nonce: the same request again is a replay.
    if !shared
        .log
        .lock()
        .expect("fake SMS log")
        .nonces
        .insert(nonce.to_owned())
    {
        return Err(auth_refusal(
            "SignatureNonceUsed",
            "Specified signature nonce was used already.",
            StatusCode::BAD_REQUEST,
        ));
    }

    if header(headers, "x-acs-action") != Some("SendSms") {
        return Err(bad_request(
            "InvalidAction.NotFound",
            "Specified api is not found, please check your url and method.",
        ));
    }
    if header(headers, "x-acs-version") != Some("2017-05-25") {
        return Err(bad_request(
            "InvalidVersion",
            "Specified parameter Version is not valid.",
        ));
    }
    let param = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
            .ok_or_else(|| bad_request("MissingParameter", "A required parameter is missing."))
    };
    let template_param: serde_json::Map<String, Value> =
        serde_json::from_str(&param("TemplateParam")?).map_err(|_| invalid_json())?;
    let params = template_param
        .into_iter()
        .map(|(name, value)| match value {
            Value::String(value) => Ok((name, value)),
            _ => Err(invalid_json()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Message {
        phone: param("PhoneNumbers")?,
        sign_name: param("SignName")?,
        template: param("TemplateCode")?,
        params,
    })
}
