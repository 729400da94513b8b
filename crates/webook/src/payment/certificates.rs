//! WeChat Pay platform certificates (certificate mode, `wechatpay_platform_mode =
//! "certificate"`): downloaded from `GET /v3/certificates`, checked, and added to the shared
//! keyring ([`PlatformKeys`]) that the client and the notification check verify with, so that a
//! rotation of WeChat's platform key needs no restart and no operator.
//!
//! How a download flows ([`PlatformCertificates::refresh`]): a signed `GET /v3/certificates`
//! (the merchant key signs it like every request); the answer lists the platform certificates,
//! each `{serial_no, effective_time, expire_time, encrypt_certificate: {algorithm, nonce,
//! associated_data, ciphertext}}`. [`read_download`] then, for each entry: decrypts the PEM
//! certificate with the APIv3 key (AES-256-GCM), parses it (X.509), requires its serial to be
//! `serial_no`, and, when `wechatpay_platform_ca` is set, requires it to be issued by that CA
//! (issuer name and `sha256WithRSAEncryption` signature). One bad entry refuses the whole
//! answer. Then the answer's own `Wechatpay-*` signature is verified: with a key already
//! trusted when it names one, otherwise with the certificate of that serial in the answer itself
//! — what WeChat's official SDKs do, and what makes the first download (no key yet) and a
//! rotation (the answer signed by the new key) possible. Only then are the certificates within
//! their validity added; expired (or not yet valid) ones are skipped.
//!
//! What the trust rests on: the certificates arrive encrypted and authenticated (GCM) under the
//! APIv3 key, which only WeChat Pay and the merchant hold, so a party without it cannot make one
//! we accept; the signature check with the answer's own certificate only confirms consistency.
//! webook does not ship the Tenpay.com Root CA that issues WeChat's platform certificates, so
//! the issuer is checked only when the operator configures that CA (`wechatpay_platform_ca`,
//! PEM); without it the issuer is not checked.
//!
//! When: on start (awaited by the feature's install, a failure only logged), every
//! `wechatpay_certificate_refresh` (12 h) in a background task that stops on shutdown (a failure
//! is retried after a minute), and on demand when an answer or a notification names a serial
//! the keyring does not know ([`RefreshKeys`]) — at most once a minute, after which the check is
//! retried once. Expired certificate keys are dropped at each refresh; a key is never dropped
//! while valid, even when a later download no longer lists it.
//!
//! Metrics: [`PAYMENT_PLATFORM_KEYS`] (keys usable now) and
//! [`PAYMENT_PLATFORM_KEY_REFRESHES_TOTAL`] by `outcome` (`updated`, `unchanged`, `failed`); a
//! failing refresh logs a warning, and `/readyz` details say when no key is valid.

use std::{
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use chrono::Utc;
use platform::status::StatusBoard;
use reqwest::header;
use rustls_pki_types::{pem::PemObject, CertificateDer};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use url::Url;
use x509_cert::{
    der::{Decode, Encode},
    Certificate,
};

use super::crypto::{
    random_nonce, verify_with, ApiV3Key, CryptoError, PlatformKeys, RefreshKeys, SignedHeaders,
    SigningKey,
};
use super::issuing_ca::IssuingCa;
use super::notify::ALGORITHM;
use super::settings::WechatPayConfig;

/// Gauge: WeChat Pay platform keys usable now (configured and downloaded).
pub const PAYMENT_PLATFORM_KEYS: &str = "payment_platform_keys";
/// Counter: platform certificate downloads, by `outcome` (`updated`, `unchanged`, `failed`).
pub const PAYMENT_PLATFORM_KEY_REFRESHES_TOTAL: &str = "payment_platform_key_refreshes_total";
/// The `/readyz` detail of the platform keys.
pub const STATUS_NAME: &str = "wechatpay_platform_keys";

/// At most one download for an unknown serial in this time.
pub const ON_DEMAND_INTERVAL: Duration = Duration::from_secs(60);
/// How soon a failed periodic download is tried again (at most the refresh interval).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(60);
/// The largest certificates answer read (WeChat's is a few kilobytes).
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A platform certificate, read and checked: what the keyring needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformCertificate {
    /// Its serial as WeChat names it (`serial_no`, `Wechatpay-Serial`).
    pub serial: String,
    /// SubjectPublicKeyInfo DER of its key.
    pub public_key: Vec<u8>,
    /// Start of validity (seconds since the epoch).
    pub not_before: i64,
    /// End of validity (seconds since the epoch).
    pub not_after: i64,
}

impl PlatformCertificate {
    /// Whether it may be used at `now_secs`.
    pub fn is_valid_at(&self, now_secs: i64) -> bool {
        self.not_before <= now_secs && now_secs <= self.not_after
    }
}

/// The upper-case hex of a certificate serial without leading zeros (`0x00` sign bytes, or a
/// `serial_no` written with leading zeros, compare equal).
fn normal_serial(hex: &str) -> String {
    hex.trim().trim_start_matches('0').to_ascii_uppercase()
}

fn unix_secs(time: x509_cert::time::Time) -> i64 {
    i64::try_from(time.to_unix_duration().as_secs()).unwrap_or(i64::MAX)
}

/// Reads an X.509 certificate (DER) that WeChat names `serial_no`: its serial must be that.
fn read_certificate(
    der: &[u8],
    serial_no: &str,
) -> Result<(PlatformCertificate, Certificate), String> {
    let certificate =
        Certificate::from_der(der).map_err(|err| format!("not an X.509 certificate: {err}"))?;
    let tbs = certificate.tbs_certificate();
    let serial = hex::encode_upper(tbs.serial_number().as_bytes());
    if normal_serial(&serial) != normal_serial(serial_no) || serial_no.trim().is_empty() {
        return Err(format!(
            "the certificate's serial {serial} is not its serial_no {serial_no:?}"
        ));
    }
    let public_key = tbs
        .subject_public_key_info()
        .to_der()
        .map_err(|err| format!("unreadable public key: {err}"))?;
    aws_lc_rs::rsa::PublicKey::from_der(&public_key)
        .map_err(|_| "the certificate's key is not an RSA key".to_owned())?;
    let validity = tbs.validity();
    Ok((
        PlatformCertificate {
            serial: serial_no.trim().to_owned(),
            public_key,
            not_before: unix_secs(validity.not_before),
            not_after: unix_secs(validity.not_after),
        },
        certificate,
    ))
}

/// `GET /v3/certificates`' answer.
#[derive(Debug, Deserialize)]
struct CertificatesAnswer {
    data: Vec<CertificateEntry>,
}

#[derive(Debug, Deserialize)]
struct CertificateEntry {
    serial_no: String,
    encrypt_certificate: EncryptedCertificate,
}

#[derive(Debug, Deserialize)]
struct EncryptedCertificate {
    algorithm: String,
    nonce: String,
    #[serde(default)]
    associated_data: String,
    ciphertext: String,
}

/// Why a download added nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("platform certificates not updated: {0}")]
pub struct DownloadError(pub String);

fn refused(what: impl Into<String>) -> DownloadError {
    DownloadError(what.into())
}

/// What a certificates answer (`body`, signed by `signed`) holds that may be trusted, at
/// `now_secs` (see the module documentation): the certificates valid now, or why the answer is
/// refused as a whole. `trusted` is only read.
pub fn read_download(
    body: &[u8],
    signed: Result<SignedHeaders, CryptoError>,
    api_v3_key: &ApiV3Key,
    trusted: &PlatformKeys,
    ca: &[IssuingCa],
    now_secs: i64,
) -> Result<Vec<PlatformCertificate>, DownloadError> {
    let signed = signed.map_err(|err| refused(format!("the answer is not signed: {err}")))?;
    let answer: CertificatesAnswer = serde_json::from_slice(body)
        .map_err(|err| refused(format!("the answer is not as documented: {err}")))?;
    let mut certificates = Vec::with_capacity(answer.data.len());
    for entry in &answer.data {
        let encrypted = &entry.encrypt_certificate;
        let serial = &entry.serial_no;
        if encrypted.algorithm != ALGORITHM {
            return Err(refused(format!(
                "certificate {serial:?}: unknown algorithm {:?}",
                encrypted.algorithm
            )));
        }
        let pem = api_v3_key
            .decrypt(
                &encrypted.nonce,
                &encrypted.associated_data,
                &encrypted.ciphertext,
            )
            .map_err(|err| refused(format!("certificate {serial:?}: {err}")))?;
        let der = CertificateDer::from_pem_slice(&pem)
            .map_err(|err| refused(format!("certificate {serial:?}: not a PEM: {err}")))?;
        let (certificate, parsed) = read_certificate(&der, serial)
            .map_err(|why| refused(format!("certificate {serial:?}: {why}")))?;
        if !ca.is_empty() && !ca.iter().any(|ca| ca.issued(&parsed)) {
            return Err(refused(format!(
                "certificate {serial:?} is not issued by wechatpay_platform_ca"
            )));
        }
        certificates.push(certificate);
    }
    match trusted.verify(&signed, body, now_secs) {
        Ok(()) => {}
        Err(CryptoError::UnknownSerial(serial)) => {
            let own = certificates
                .iter()
                .find(|certificate| {
                    certificate.serial == serial && certificate.is_valid_at(now_secs)
                })
                .ok_or_else(|| {
                    refused(format!(
                        "the answer is signed by {serial:?}, neither a trusted key nor a valid \
                         certificate of the answer"
                    ))
                })?;
            verify_with(&own.public_key, &signed, body, now_secs)
                .map_err(|err| refused(format!("the answer's signature: {err}")))?;
        }
        Err(err) => return Err(refused(format!("the answer's signature: {err}"))),
    }
    certificates.retain(|certificate| {
        let valid = certificate.is_valid_at(now_secs);
        if !valid {
            tracing::warn!(
                serial = certificate.serial,
                "a downloaded platform certificate is not within its validity: skipped"
            );
        }
        valid
    });
    Ok(certificates)
}

/// What a download changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RefreshReport {
    /// Serials added (not known before, or known and replaced by a later certificate).
    pub added: Vec<String>,
    /// Serials of expired certificates dropped.
    pub dropped: Vec<String>,
    /// Keys usable now, after the download.
    pub valid: usize,
}

/// Downloads the platform certificates of one merchant into its keyring (see the module
/// documentation): on demand through [`RefreshKeys`], periodically through
/// [`PlatformCertificates::run`].
pub struct PlatformCertificates {
    http: reqwest::Client,
    url: Url,
    mchid: String,
    merchant_key: Arc<SigningKey>,
    api_v3_key: ApiV3Key,
    keys: PlatformKeys,
    ca: Vec<IssuingCa>,
    refresh_every: Duration,
    /// Serialises downloads; when the last one asked for by an unknown serial began.
    last_on_demand: tokio::sync::Mutex<Option<Instant>>,
    /// Where `/readyz` details are reported, once the feature says.
    status: OnceLock<StatusBoard>,
}

impl std::fmt::Debug for PlatformCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlatformCertificates")
            .field("keys", &self.keys)
            .field("refresh_every", &self.refresh_every)
            .finish_non_exhaustive()
    }
}

impl PlatformCertificates {
    /// The downloader of `config`'s merchant from `endpoint`, with the client's `http`; it
    /// becomes the refresher of `config.platform_keys`.
    pub fn new(http: reqwest::Client, endpoint: &Url, config: &WechatPayConfig) -> Arc<Self> {
        let mut url = endpoint.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(["v3", "certificates"]);
        }
        let certificates = Arc::new(Self {
            http,
            url,
            mchid: config.mchid.clone(),
            merchant_key: config.merchant_key.clone(),
            api_v3_key: config.api_v3_key.clone(),
            keys: config.platform_keys.clone(),
            ca: config.platform_ca.clone(),
            refresh_every: config.certificate_refresh,
            last_on_demand: tokio::sync::Mutex::new(None),
            status: OnceLock::new(),
        });
        let refresher: Arc<dyn RefreshKeys> = certificates.clone();
        config
            .platform_keys
            .set_refresher(Arc::downgrade(&refresher));
        certificates
    }

    /// The keyring it fills.
    pub fn keys(&self) -> &PlatformKeys {
        &self.keys
    }

    /// Reports on `/readyz` (`details.wechatpay_platform_keys`) from now on.
    pub fn report_to(&self, status: StatusBoard) {
        let _ = self.status.set(status);
        self.publish(None);
    }

    /// Downloads the certificates now (waiting for a download under way to finish first).
    pub async fn refresh(&self) -> Result<RefreshReport, DownloadError> {
        let _serial = self.last_on_demand.lock().await;
        self.download_and_add().await
    }

    async fn download_and_add(&self) -> Result<RefreshReport, DownloadError> {
        let outcome = self.download().await.and_then(|(signed, body)| {
            let now = Utc::now().timestamp();
            let certificates =
                read_download(&body, signed, &self.api_v3_key, &self.keys, &self.ca, now)?;
            let mut report = RefreshReport::default();
            for certificate in certificates {
                let fresh = !self.keys.has_valid(&certificate.serial, now);
                self.keys
                    .add_certificate_key(
                        &certificate.serial,
                        &certificate.public_key,
                        certificate.not_after,
                    )
                    .map_err(|err| refused(format!("{}: {err}", certificate.serial)))?;
                if fresh {
                    report.added.push(certificate.serial);
                }
            }
            report.dropped = self.keys.prune_expired(now);
            report.valid = self.keys.valid_count(now);
            Ok(report)
        });
        let label = match &outcome {
            Ok(report) if report.added.is_empty() && report.dropped.is_empty() => "unchanged",
            Ok(_) => "updated",
            Err(_) => "failed",
        };
        metrics::counter!(PAYMENT_PLATFORM_KEY_REFRESHES_TOTAL, "outcome" => label).increment(1);
        match &outcome {
            Ok(report) => tracing::info!(
                added = ?report.added,
                dropped = ?report.dropped,
                valid = report.valid,
                "WeChat Pay platform certificates downloaded"
            ),
            Err(error) => tracing::warn!(%error, "WeChat Pay platform certificates"),
        }
        self.publish(outcome.as_ref().err());
        outcome
    }

    /// Sets the gauge and the `/readyz` detail.
    fn publish(&self, failure: Option<&DownloadError>) {
        let valid = self.keys.valid_count(Utc::now().timestamp());
        metrics::gauge!(PAYMENT_PLATFORM_KEYS).set(valid as f64);
        if let Some(status) = self.status.get() {
            let detail = match (valid, failure) {
                (0, Some(failure)) => format!("no valid platform key: {failure}"),
                (0, None) => "no valid platform key".to_owned(),
                (valid, Some(failure)) => {
                    format!("{valid} platform keys; the last download failed: {failure}")
                }
                (valid, None) => format!("{valid} platform keys"),
            };
            status.set(STATUS_NAME, detail);
        }
    }

    /// The signed `GET /v3/certificates`: the answer's signature headers and body.
    async fn download(
        &self,
    ) -> Result<(Result<SignedHeaders, CryptoError>, Vec<u8>), DownloadError> {
        let path_and_query = &self.url[url::Position::BeforePath..url::Position::AfterQuery];
        let authorization = self
            .merchant_key
            .authorization(
                &self.mchid,
                "GET",
                path_and_query,
                Utc::now().timestamp(),
                &random_nonce(),
                "",
            )
            .map_err(|err| refused(format!("signing the request failed: {err}")))?;
        let request = self
            .http
            .get(self.url.clone())
            .header(header::AUTHORIZATION, authorization)
            .header(header::ACCEPT, "application/json");
        let mut response = crate::outside_http::send(request)
            .await
            .map_err(transport_error)?;
        let status = response.status();
        let signed = SignedHeaders::from_headers(response.headers());
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(refused(format!(
                    "the answer is larger than {MAX_ANSWER_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            #[derive(Deserialize)]
            struct ErrorAnswer {
                code: String,
            }
            let code: String = serde_json::from_slice::<ErrorAnswer>(&body)
                .map(|answer| answer.code)
                .unwrap_or_default()
                .chars()
                .take(64)
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            return Err(refused(format!("HTTP {} {code}", status.as_u16())));
        }
        Ok((signed, body))
    }

    /// Downloads every `wechatpay_certificate_refresh` until `stop` (a failure is retried after
    /// a minute).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut wait = self.refresh_every;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            wait = match self.refresh().await {
                Ok(_) => self.refresh_every,
                Err(_) => RETRY_AFTER_FAILURE.min(self.refresh_every),
            };
        }
    }
}

#[async_trait]
impl RefreshKeys for PlatformCertificates {
    async fn refresh_for(&self, serial: &str) -> bool {
        let mut last = self.last_on_demand.lock().await;
        // A download that finished while this one waited may have brought the key.
        if self.keys.has_valid(serial, Utc::now().timestamp()) {
            return true;
        }
        if last.is_some_and(|at| at.elapsed() < ON_DEMAND_INTERVAL) {
            tracing::warn!(
                serial,
                "unknown WeChat Pay platform key serial: the last download was less than a \
                 minute ago"
            );
            return false;
        }
        *last = Some(Instant::now());
        tracing::info!(
            serial,
            "unknown WeChat Pay platform key serial: downloading the platform certificates"
        );
        self.download_and_add().await.is_ok()
    }
}

/// A request that got no (whole) answer: a timeout, or why not — never the URL.
fn transport_error(error: reqwest::Error) -> DownloadError {
    if error.is_timeout() {
        return refused("WeChat Pay did not answer in time");
    }
    refused(crate::outside_http::describe_failure(error))
}
