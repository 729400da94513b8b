//! Tencent Cloud SMS: [`TencentSms`] sends one message through API v3's `SendSms` (version
//! `2021-01-11`), signed with TC3-HMAC-SHA256.
//!
//! How a request flows: [`TencentSms::send`] builds the JSON body (the phone in E.164 —
//! `+86…` —, the app id, sign name, template id and the template's parameter values in order),
//! signs it with [`authorization`] (canonical request → string to sign → a key derived from the
//! secret through the date, the service and `tc3_request` → hex HMAC), POSTs it to the configured
//! endpoint with the `X-TC-*` headers and the configured timeout, and reads the answer with
//! [`interpret`]: `Response.Error` or a number's `Code` other than `Ok` is a refusal — the
//! frequency and quota codes are [`SendError::RateLimited`], the others [`SendError::Failed`].
//!
//! Errors and logs carry the provider's code, its request id and the masked phone only: never
//! the parameters (login codes), the secret, or the provider's free-text message.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hmac::{digest::InvalidLength, Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::provider::{exchange, SendError, SmsMessage, SmsProvider, TencentConfig};

/// The service in the credential scope.
const SERVICE: &str = "sms";
const ACTION: &str = "SendSms";
const VERSION: &str = "2021-01-11";
const ALGORITHM: &str = "TC3-HMAC-SHA256";
const CONTENT_TYPE: &str = "application/json; charset=utf-8";

/// Tencent Cloud SMS, API v3.
#[derive(Debug)]
pub struct TencentSms {
    config: TencentConfig,
    http: reqwest::Client,
}

impl TencentSms {
    /// A client of `config`'s account and template, sending through `http`.
    pub fn new(config: TencentConfig, http: reqwest::Client) -> Self {
        Self { config, http }
    }
}

#[async_trait]
impl SmsProvider for TencentSms {
    fn name(&self) -> &str {
        "tencent"
    }

    async fn send(&self, message: &SmsMessage) -> Result<(), SendError> {
        let url = reqwest::Url::parse(&self.config.endpoint)
            .map_err(|_| failed("the endpoint is not a URL"))?;
        let host = host_header(&url).ok_or_else(|| failed("the endpoint has no host"))?;
        let body = request_body(&self.config, message)
            .map_err(|_| failed("could not encode the request"))?;
        let timestamp = Utc::now().timestamp();
        let authorization = authorization(&Signing {
            secret_id: &self.config.secret_id,
            secret_key: self.config.secret_key.expose(),
            service: SERVICE,
            host: &host,
            timestamp,
            payload: &body,
        })
        .ok_or_else(|| failed("could not sign the request"))?;

        let request = self
            .http
            .post(url)
            .timeout(self.config.timeout)
            .header(reqwest::header::AUTHORIZATION, authorization)
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .header("X-TC-Action", ACTION)
            .header("X-TC-Timestamp", timestamp.to_string())
            .header("X-TC-Version", VERSION)
            .header("X-TC-Region", &self.config.region)
            .body(body);
        exchange("tencent", request, &message.phone, interpret).await
    }
}

/// The JSON body of `SendSms` for `message`.
fn request_body(config: &TencentConfig, message: &SmsMessage) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&SendSmsBody {
        phone_number_set: [format!("+86{}", message.phone)],
        sms_sdk_app_id: &config.sdk_app_id,
        sign_name: &config.sign_name,
        template_id: &config.template_id,
        template_param_set: message.params.iter().map(|(_, value)| value).collect(),
    })
}

/// `SendSms`'s body, in the API's field names.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct SendSmsBody<'a> {
    phone_number_set: [String; 1],
    sms_sdk_app_id: &'a str,
    sign_name: &'a str,
    template_id: &'a str,
    template_param_set: Vec<&'a String>,
}

/// What TC3-HMAC-SHA256 covers of a request: `POST /`, no query, the headers `content-type`
/// (always [`CONTENT_TYPE`]) and `host`, the body, and the timestamp.
struct Signing<'a> {
    secret_id: &'a str,
    secret_key: &'a str,
    service: &'a str,
    host: &'a str,
    /// Unix seconds, sent as `X-TC-Timestamp`; its UTC date is the credential scope's.
    timestamp: i64,
    payload: &'a [u8],
}

/// The `Authorization` header of a request; `None` only for a timestamp out of chrono's range.
fn authorization(signing: &Signing<'_>) -> Option<String> {
    let date = DateTime::<Utc>::from_timestamp(signing.timestamp, 0)?
        .format("%Y-%m-%d")
        .to_string();
    let scope = format!("{date}/{}/tc3_request", signing.service);
    let request = canonical_request(signing.host, signing.payload);
    let to_sign = format!(
        "{ALGORITHM}\n{}\n{scope}\n{}",
        signing.timestamp,
        hex::encode(Sha256::digest(request.as_bytes()))
    );
    let signature = signature(signing.secret_key, &date, signing.service, &to_sign).ok()?;
    Some(format!(
        "{ALGORITHM} Credential={}/{scope}, SignedHeaders=content-type;host, Signature={signature}",
        signing.secret_id
    ))
}

/// Method, URI, query, the signed headers (names and values lower-cased, each line ended by
/// `\n`), their names, and the body's hex SHA-256, one per line.
fn canonical_request(host: &str, payload: &[u8]) -> String {
    format!(
        "POST\n/\n\ncontent-type:{}\nhost:{}\n\ncontent-type;host\n{}",
        CONTENT_TYPE.to_ascii_lowercase(),
        host.trim().to_ascii_lowercase(),
        hex::encode(Sha256::digest(payload))
    )
}

/// Hex HMAC of `to_sign` under the key derived from the secret: `TC3<secret>` → date → service
/// → `tc3_request`.
fn signature(
    secret_key: &str,
    date: &str,
    service: &str,
    to_sign: &str,
) -> Result<String, InvalidLength> {
    let key = hmac_sha256(format!("TC3{secret_key}").as_bytes(), date.as_bytes())?;
    let key = hmac_sha256(&key, service.as_bytes())?;
    let key = hmac_sha256(&key, b"tc3_request")?;
    Ok(hex::encode(hmac_sha256(&key, to_sign.as_bytes())?))
}

/// HMAC-SHA256 (HMAC takes keys of any length: the error never happens).
fn hmac_sha256(key: &[u8], data: &[u8]) -> Result<Vec<u8>, InvalidLength> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key)?;
    mac.update(data);
    Ok(mac.finalize().into_bytes().to_vec())
}

/// `Host` as reqwest sends it for `url`: the host, and the port when not the scheme's default.
fn host_header(url: &reqwest::Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

#[derive(Deserialize)]
struct Answer {
    #[serde(rename = "Response")]
    response: AnswerBody,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AnswerBody {
    error: Option<CodeOnly>,
    #[serde(default)]
    send_status_set: Vec<CodeOnly>,
    request_id: Option<String>,
}

/// An error or a number's status; the free-text `Message` is not read (see the module docs).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CodeOnly {
    code: String,
}

/// What an answer of HTTP `status` with `body` means: a 5xx or an unparseable body is a
/// failure; `Response.Error` is a refusal; otherwise the one number's `Code` must be `Ok`.
fn interpret(status: u16, body: &[u8]) -> Result<(), SendError> {
    if status >= 500 {
        return Err(failed(&format!("HTTP {status}")));
    }
    let Ok(Answer { response }) = serde_json::from_slice::<Answer>(body) else {
        return Err(failed(&format!("unparseable answer (HTTP {status})")));
    };
    let request = response.request_id.as_deref().unwrap_or("-");
    if let Some(error) = response.error {
        return Err(refusal(&error.code, request));
    }
    if !(200..300).contains(&status) {
        return Err(failed(&format!("HTTP {status} (request {request})")));
    }
    match response.send_status_set.as_slice() {
        [one] if one.code == "Ok" => Ok(()),
        [one] => Err(refusal(&one.code, request)),
        set => Err(failed(&format!(
            "{} statuses for one number (request {request})",
            set.len()
        ))),
    }
}

/// A refusal with Tencent's `code`: the frequency and quota codes are rate limits.
fn refusal(code: &str, request: &str) -> SendError {
    let what = format!("tencent: {code} (request {request})");
    if is_rate_limit(code) {
        SendError::RateLimited(what)
    } else {
        SendError::Failed(what)
    }
}

/// The API's own frequency limit (`RequestLimitExceeded`, `.UinLimitExceeded`, …) and SMS's
/// `LimitExceeded.*Limit` codes: `DeliveryFrequencyLimit`, `PhoneNumberThirtySecondLimit`,
/// `PhoneNumberOneHourLimit`, `PhoneNumberDailyLimit`, `PhoneNumberSameContentDailyLimit`,
/// `AppDailyLimit`, `DailyLimit` (and the newer `App…DailyLimit`s) — except
/// `PhoneNumberCountLimit`, which says a request held too many numbers.
fn is_rate_limit(code: &str) -> bool {
    code.starts_with("RequestLimitExceeded")
        || (code.starts_with("LimitExceeded.")
            && code.ends_with("Limit")
            && code != "LimitExceeded.PhoneNumberCountLimit")
}

fn failed(what: &str) -> SendError {
    SendError::Failed(format!("tencent: {what}"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use platform::config::Secret;

    use super::*;

    /// The example of Tencent Cloud's "Signature v3" page (API 3.0 docs, e.g.
    /// cloud.tencent.com/document/api/213/30654; the same in TencentCloud/signature-process-demo):
    /// CVM `DescribeInstances` at 1551113065. The page shows its key as
    /// `Gu5t9xGARNpq86cd98joQYCN3*******`, and that literal string is the key its published
    /// hashes and signature were computed with (checked with an independent Python
    /// hmac/hashlib implementation).
    #[test]
    fn the_documented_example_signs_as_published() {
        let payload = br#"{"Limit": 1, "Filters": [{"Values": ["\u672a\u547d\u540d"], "Name": "instance-name"}]}"#;
        assert_eq!(
            hex::encode(Sha256::digest(payload)),
            "35e9c5b0e3ae67532d3c9f17ead6c90222632e5b1ff7f6e89887f1398934f064"
        );
        let request = canonical_request("cvm.tencentcloudapi.com", payload);
        assert_eq!(
            request,
            "POST\n/\n\ncontent-type:application/json; charset=utf-8\nhost:cvm.tencentcloudapi.com\n\n\
             content-type;host\n35e9c5b0e3ae67532d3c9f17ead6c90222632e5b1ff7f6e89887f1398934f064"
        );
        assert_eq!(
            hex::encode(Sha256::digest(request.as_bytes())),
            "5ffe6a04c0664d6b969fab9a13bdab201d63ee709638e2749d62a09ca18d7031"
        );
        let header = authorization(&Signing {
            secret_id: "AKIDz8krbsJ5yKBZQpn74WFkmLPx3*******",
            secret_key: "Gu5t9xGARNpq86cd98joQYCN3*******",
            service: "cvm",
            host: "cvm.tencentcloudapi.com",
            timestamp: 1_551_113_065,
            payload,
        });
        assert_eq!(
            header.as_deref(),
            Some(
                "TC3-HMAC-SHA256 Credential=AKIDz8krbsJ5yKBZQpn74WFkmLPx3*******/2019-02-25/cvm/tc3_request, \
                 SignedHeaders=content-type;host, \
                 Signature=2230eefd229f582d8b1b891af7107b91597240707d778ab3738f756258d7652c"
            )
        );
    }

    fn config() -> TencentConfig {
        TencentConfig {
            endpoint: "https://sms.tencentcloudapi.com".to_owned(),
            region: "ap-guangzhou".to_owned(),
            secret_id: "AKIDwebookTest0001".to_owned(),
            secret_key: Secret::new("webook-test-secret-key"),
            sdk_app_id: "1400006666".to_owned(),
            sign_name: "腾讯云".to_owned(),
            template_id: "1234".to_owned(),
            timeout: Duration::from_secs(5),
        }
    }

    /// A `SendSms` as webook sends it (non-ASCII sign name, two parameters). The expected
    /// header was computed once with an independent Python implementation (hmac, hashlib; the
    /// script's steps are the docs' canonical request, string to sign and key chain) from this
    /// exact body, key and timestamp 1700000000 (2023-11-14 UTC).
    #[test]
    fn a_send_sms_request_has_the_api_body_and_signature() {
        let message = SmsMessage {
            phone: "13812345678".to_owned(),
            params: vec![("code", "493817".to_owned()), ("minutes", "5".to_owned())],
        };
        let config = config();
        let body = request_body(&config, &message).unwrap();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            r#"{"PhoneNumberSet":["+8613812345678"],"SmsSdkAppId":"1400006666","SignName":"腾讯云","TemplateId":"1234","TemplateParamSet":["493817","5"]}"#
        );
        let header = authorization(&Signing {
            secret_id: &config.secret_id,
            secret_key: config.secret_key.expose(),
            service: SERVICE,
            host: "sms.tencentcloudapi.com",
            timestamp: 1_700_000_000,
            payload: &body,
        });
        assert_eq!(
            header.as_deref(),
            Some(
                "TC3-HMAC-SHA256 Credential=AKIDwebookTest0001/2023-11-14/sms/tc3_request, \
                 SignedHeaders=content-type;host, \
                 Signature=0f90144804c0e1aba108b50e6c65ba540a4714e907d986251a56eae12cc6162f"
            )
        );
    }

    #[test]
    fn host_headers_carry_only_non_default_ports() {
        let host = |url: &str| host_header(&reqwest::Url::parse(url).unwrap());
        assert_eq!(
            host("https://sms.tencentcloudapi.com").as_deref(),
            Some("sms.tencentcloudapi.com")
        );
        assert_eq!(
            host("https://sms.tencentcloudapi.com:443/").as_deref(),
            Some("sms.tencentcloudapi.com")
        );
        assert_eq!(
            host("http://127.0.0.1:8123").as_deref(),
            Some("127.0.0.1:8123")
        );
    }

    fn answer(json: &str) -> Result<(), SendError> {
        interpret(200, json.as_bytes())
    }

    #[test]
    fn answers_map_to_outcomes() {
        assert_eq!(
            answer(
                r#"{"Response":{"SendStatusSet":[{"SerialNo":"5000:1045710669157053657849499619","PhoneNumber":"+8613812345678","Fee":1,"SessionContext":"","Code":"Ok","Message":"send success","IsoCode":"CN"}],"RequestId":"a0aabda6-cf91-4f3e-a81f-9198114a2279"}}"#
            ),
            Ok(())
        );
        // A number's frequency limit, as SendStatusSet reports it.
        assert_eq!(
            answer(
                r#"{"Response":{"SendStatusSet":[{"PhoneNumber":"+8613812345678","Code":"LimitExceeded.PhoneNumberThirtySecondLimit","Message":"the number 13812345678 got code 493817 already"}],"RequestId":"r-1"}}"#
            ),
            Err(SendError::RateLimited(
                "tencent: LimitExceeded.PhoneNumberThirtySecondLimit (request r-1)".to_owned()
            ))
        );
        // The API's own frequency limit, as Response.Error.
        assert_eq!(
            answer(
                r#"{"Response":{"Error":{"Code":"RequestLimitExceeded","Message":"Your current request times equals to `21` in a second"},"RequestId":"r-2"}}"#
            ),
            Err(SendError::RateLimited(
                "tencent: RequestLimitExceeded (request r-2)".to_owned()
            ))
        );
        for code in [
            "LimitExceeded.DeliveryFrequencyLimit",
            "LimitExceeded.AppDailyLimit",
            "LimitExceeded.PhoneNumberDailyLimit",
        ] {
            assert!(
                matches!(
                    answer(&format!(
                        r#"{{"Response":{{"Error":{{"Code":"{code}","Message":"m"}},"RequestId":"r"}}}}"#
                    )),
                    Err(SendError::RateLimited(_))
                ),
                "{code}"
            );
        }
        for code in [
            "AuthFailure.SignatureFailure",
            "FailedOperation.TemplateIncorrectOrUnapproved",
            "LimitExceeded.PhoneNumberCountLimit",
            "InvalidParameterValue.IncorrectPhoneNumber",
        ] {
            assert_eq!(
                answer(&format!(
                    r#"{{"Response":{{"Error":{{"Code":"{code}","Message":"m"}},"RequestId":"r"}}}}"#
                )),
                Err(SendError::Failed(format!("tencent: {code} (request r)"))),
            );
        }
        assert_eq!(
            answer(
                r#"{"Response":{"SendStatusSet":[{"Code":"FailedOperation.PhoneNumberInBlacklist","Message":"m"}],"RequestId":"r-3"}}"#
            ),
            Err(SendError::Failed(
                "tencent: FailedOperation.PhoneNumberInBlacklist (request r-3)".to_owned()
            ))
        );
        assert!(matches!(
            answer(r#"{"Response":{"SendStatusSet":[],"RequestId":"r"}}"#),
            Err(SendError::Failed(_))
        ));
        assert!(matches!(
            answer("<html>bad gateway</html>"),
            Err(SendError::Failed(_))
        ));
        assert!(matches!(
            answer(r#"{"Response":{"RequestId":"r"}}"#),
            Err(SendError::Failed(_))
        ));
        assert_eq!(
            interpret(
                500,
                br#"{"Response":{"SendStatusSet":[{"Code":"Ok"}],"RequestId":"r"}}"#
            ),
            Err(SendError::Failed("tencent: HTTP 500".to_owned()))
        );
        assert_eq!(
            interpret(404, b"not here"),
            Err(SendError::Failed(
                "tencent: unparseable answer (HTTP 404)".to_owned()
            ))
        );
    }
}
