//! The cryptography of WeChat Pay API v3, shared by the real client ([`super::wechat`]), the
//! notification check ([`super::notify`]) and the fake provider ([`super::fake`]), which signs
//! and encrypts exactly as WeChat does so that both go through the same verification.
//!
//! - Requests to WeChat are signed with the merchant's RSA key: `SHA256withRSA` (PKCS#1 v1.5)
//!   over `METHOD\nPATH?QUERY\nTIMESTAMP\nNONCE\nBODY\n`, sent as `Authorization:
//!   WECHATPAY2-SHA256-RSA2048 mchid="…",nonce_str="…",signature="…",timestamp="…",serial_no="…"`.
//! - WeChat's answers and notifications are signed with its platform key over
//!   `TIMESTAMP\nNONCE\nBODY\n` (headers `Wechatpay-Timestamp`, `-Nonce`, `-Signature`,
//!   `-Serial`); the serial names the platform key (a certificate serial or a `PUB_KEY_ID_…`).
//! - A notification's `resource` is AES-256-GCM under the merchant's APIv3 key, with its nonce
//!   and `associated_data`; the ciphertext is base64 of the encrypted bytes followed by the tag.
//!   Downloaded platform certificates are encrypted the same way.
//! - The platform keys are one shared keyring ([`PlatformKeys`]): configured keys, and in
//!   certificate mode downloaded certificate keys (each until its certificate expires). Clones
//!   share it, so the client and the notification check see a key added at run time; a serial it
//!   does not know may be looked for once ([`PlatformKeys::verify_or_refresh`], [`RefreshKeys`]).
//!
//! Built on aws-lc-rs: it is already in the binary as rustls' provider (nothing new to audit or
//! compile), it is maintained by AWS with a FIPS-validated core, and unlike `ring` it generates
//! RSA keys — which the fake provider and the tests need, so no key is ever committed.

use std::{
    collections::HashMap,
    sync::{Arc, PoisonError, RwLock, Weak},
};

use aws_lc_rs::{
    aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN},
    encoding::AsDer,
    rand::{SecureRandom, SystemRandom},
    rsa::KeySize,
    signature::{self, KeyPair, RsaKeyPair, UnparsedPublicKey},
};
use base64::{engine::general_purpose::STANDARD as BASE64, Engine as _};
use rustls_pki_types::{pem::PemObject, PrivatePkcs8KeyDer, SubjectPublicKeyInfoDer};

/// The `Authorization` scheme of signed requests.
pub const AUTH_SCHEME: &str = "WECHATPAY2-SHA256-RSA2048";
/// Longest a signed answer or notification's timestamp may differ from our clock.
pub const MAX_CLOCK_SKEW_SECS: i64 = 5 * 60;

/// Why a signature, a key or a ciphertext was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// A `Wechatpay-*` header is missing or not text.
    #[error("missing or unreadable header {0}")]
    MissingHeader(&'static str),
    /// The timestamp is not a number or too far from our clock.
    #[error("timestamp {0} is not within 5 minutes of now")]
    StaleTimestamp(String),
    /// No platform key of that serial is configured.
    #[error("unknown platform key serial {0}")]
    UnknownSerial(String),
    /// The signature does not verify.
    #[error("signature does not verify")]
    BadSignature,
    /// The resource does not decrypt (wrong key, nonce, associated data or tampered bytes).
    #[error("resource does not decrypt")]
    Undecryptable,
    /// A key could not be read.
    #[error("invalid key: {0}")]
    InvalidKey(String),
}

/// The signing message WeChat defines: every part followed by `\n`.
pub fn signing_message(parts: &[&str]) -> String {
    let mut message = String::with_capacity(parts.iter().map(|part| part.len() + 1).sum());
    for part in parts {
        message.push_str(part);
        message.push('\n');
    }
    message
}

/// 32 random hex characters, for `nonce_str` and notification nonces.
pub fn random_nonce() -> String {
    let mut bytes = [0u8; 16];
    // SystemRandom reads the OS generator; it only fails when the OS has none.
    if SystemRandom::new().fill(&mut bytes).is_err() {
        return uuid::Uuid::new_v4().simple().to_string();
    }
    hex::encode(bytes)
}

/// An RSA private key that signs with `SHA256withRSA`, and the serial that names it.
pub struct SigningKey {
    serial: String,
    key: RsaKeyPair,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("serial", &self.serial)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A key from a PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, WeChat's `apiclient_key.pem`).
    pub fn from_pem(serial: &str, pem: &str) -> Result<Self, CryptoError> {
        let der = PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|err| CryptoError::InvalidKey(format!("not a PKCS#8 PEM key: {err}")))?;
        Self::from_pkcs8_der(serial, der.secret_pkcs8_der())
    }

    /// A key from PKCS#8 DER.
    pub fn from_pkcs8_der(serial: &str, der: &[u8]) -> Result<Self, CryptoError> {
        let key = RsaKeyPair::from_pkcs8(der)
            .map_err(|err| CryptoError::InvalidKey(format!("not an RSA key: {err}")))?;
        Ok(Self {
            serial: serial.to_owned(),
            key,
        })
    }

    /// A new 2048-bit key (the fake provider's platform key; tests' merchant keys).
    pub fn generate(serial: &str) -> Result<Self, CryptoError> {
        let key = RsaKeyPair::generate(KeySize::Rsa2048)
            .map_err(|_| CryptoError::InvalidKey("RSA key generation failed".to_owned()))?;
        Ok(Self {
            serial: serial.to_owned(),
            key,
        })
    }

    /// The serial that names this key.
    pub fn serial(&self) -> &str {
        &self.serial
    }

    /// The public half as SubjectPublicKeyInfo DER (what a PEM `PUBLIC KEY` holds).
    pub fn public_key_der(&self) -> Result<Vec<u8>, CryptoError> {
        self.key
            .public_key()
            .as_der()
            .map(|der| der.as_ref().to_vec())
            .map_err(|_| CryptoError::InvalidKey("cannot encode the public key".to_owned()))
    }

    /// The private key as PKCS#8 DER (to hand a generated key to another process in tests).
    pub fn pkcs8_der(&self) -> Result<Vec<u8>, CryptoError> {
        self.key
            .as_der()
            .map(|der| der.as_ref().to_vec())
            .map_err(|_| CryptoError::InvalidKey("cannot encode the private key".to_owned()))
    }

    /// Base64 of the `SHA256withRSA` signature of `message`.
    pub fn sign(&self, message: &[u8]) -> Result<String, CryptoError> {
        let mut signature = vec![0u8; self.key.public_modulus_len()];
        self.key
            .sign(
                &signature::RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                message,
                &mut signature,
            )
            .map_err(|_| CryptoError::InvalidKey("signing failed".to_owned()))?;
        Ok(BASE64.encode(signature))
    }

    /// The `Authorization` header of a merchant request (`mchid` the merchant's id).
    pub fn authorization(
        &self,
        mchid: &str,
        method: &str,
        path_and_query: &str,
        timestamp: i64,
        nonce: &str,
        body: &str,
    ) -> Result<String, CryptoError> {
        let timestamp = timestamp.to_string();
        let message = signing_message(&[method, path_and_query, &timestamp, nonce, body]);
        let signature = self.sign(message.as_bytes())?;
        Ok(format!(
            "{AUTH_SCHEME} mchid=\"{mchid}\",nonce_str=\"{nonce}\",signature=\"{signature}\",\
             timestamp=\"{timestamp}\",serial_no=\"{}\"",
            self.serial
        ))
    }
}

/// The `Wechatpay-*` headers of a signed answer or notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `Wechatpay-Timestamp` (seconds).
    pub timestamp: String,
    /// `Wechatpay-Nonce`.
    pub nonce: String,
    /// `Wechatpay-Signature` (base64).
    pub signature: String,
    /// `Wechatpay-Serial`.
    pub serial: String,
}

impl SignedHeaders {
    /// Reads them from `headers`.
    pub fn from_headers(headers: &axum::http::HeaderMap) -> Result<Self, CryptoError> {
        let read = |name: &'static str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
                .ok_or(CryptoError::MissingHeader(name))
        };
        Ok(Self {
            timestamp: read("wechatpay-timestamp")?,
            nonce: read("wechatpay-nonce")?,
            signature: read("wechatpay-signature")?,
            serial: read("wechatpay-serial")?,
        })
    }

    /// Signs `body` with `key` at `timestamp` (seconds): what WeChat (or the fake) sends.
    pub fn sign(key: &SigningKey, timestamp: i64, body: &[u8]) -> Result<Self, CryptoError> {
        let timestamp = timestamp.to_string();
        let nonce = random_nonce();
        let mut message = signing_message(&[&timestamp, &nonce]).into_bytes();
        message.extend_from_slice(body);
        message.push(b'\n');
        Ok(Self {
            signature: key.sign(&message)?,
            timestamp,
            nonce,
            serial: key.serial().to_owned(),
        })
    }

    /// The headers as (name, value) pairs.
    pub fn pairs(&self) -> [(&'static str, &str); 4] {
        [
            ("Wechatpay-Timestamp", &self.timestamp),
            ("Wechatpay-Nonce", &self.nonce),
            ("Wechatpay-Signature", &self.signature),
            ("Wechatpay-Serial", &self.serial),
        ]
    }
}

/// One platform key: SubjectPublicKeyInfo (or PKCS#1) DER, and until when it may be used.
#[derive(Debug, Clone)]
struct PlatformKey {
    der: Vec<u8>,
    /// The end of a platform certificate's validity (seconds); `None` for a configured key,
    /// which is used until the configuration changes.
    not_after: Option<i64>,
}

/// Asked for keys when a signature names a serial the keyring does not know (platform
/// certificate mode: [`super::certificates::PlatformCertificates`] downloads them).
#[async_trait::async_trait]
pub trait RefreshKeys: Send + Sync {
    /// Looks for the key of `serial` (rate-limited by the implementation); whether the
    /// keyring may have changed since.
    async fn refresh_for(&self, serial: &str) -> bool;
}

#[derive(Default)]
struct Keyring {
    by_serial: RwLock<HashMap<String, PlatformKey>>,
    /// Set once by the refresher; weak so that the keyring does not keep it alive.
    refresher: RwLock<Option<Weak<dyn RefreshKeys>>>,
}

/// The platform's public keys by serial: what answers and notifications are checked against.
///
/// A shared keyring: clones share the same keys, so a key added at run time (a downloaded
/// platform certificate) is used at once by the client and by the notification check that
/// hold clones. Several keys are known at once — both sides of a rotation. A platform
/// certificate's key is used only within its validity; [`PlatformKeys::prune_expired`] drops
/// it afterwards. The locks are short and never held across an await.
#[derive(Clone, Default)]
pub struct PlatformKeys {
    ring: Arc<Keyring>,
}

impl std::fmt::Debug for PlatformKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlatformKeys")
            .field("serials", &self.serials())
            .finish_non_exhaustive()
    }
}

impl PlatformKeys {
    /// No keys (everything is refused until one is added).
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, PlatformKey>> {
        self.ring
            .by_serial
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, PlatformKey>> {
        self.ring
            .by_serial
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds the key of `serial` from a PEM `PUBLIC KEY` (WeChat Pay's public key, or a platform
    /// certificate's key: `openssl x509 -in cert.pem -pubkey -noout`).
    pub fn add_pem(&self, serial: &str, pem: &str) -> Result<(), CryptoError> {
        let der = SubjectPublicKeyInfoDer::from_pem_slice(pem.as_bytes())
            .map_err(|err| CryptoError::InvalidKey(format!("not a PEM public key: {err}")))?;
        self.add_der(serial, der.as_ref())
    }

    /// Adds the key of `serial` from SubjectPublicKeyInfo (or PKCS#1) DER, usable until the
    /// configuration changes.
    pub fn add_der(&self, serial: &str, der: &[u8]) -> Result<(), CryptoError> {
        self.insert(serial, der, None)
    }

    /// Adds the key of a platform certificate of `serial`, usable until `not_after` (seconds).
    /// A key already known under `serial` is replaced.
    pub fn add_certificate_key(
        &self,
        serial: &str,
        der: &[u8],
        not_after: i64,
    ) -> Result<(), CryptoError> {
        self.insert(serial, der, Some(not_after))
    }

    fn insert(&self, serial: &str, der: &[u8], not_after: Option<i64>) -> Result<(), CryptoError> {
        if serial.trim().is_empty() {
            return Err(CryptoError::InvalidKey("an empty serial".to_owned()));
        }
        aws_lc_rs::rsa::PublicKey::from_der(der)
            .map_err(|err| CryptoError::InvalidKey(format!("not an RSA public key: {err}")))?;
        self.write().insert(
            serial.to_owned(),
            PlatformKey {
                der: der.to_vec(),
                not_after,
            },
        );
        Ok(())
    }

    /// Whether a key of `serial` is known (expired or not).
    pub fn knows(&self, serial: &str) -> bool {
        self.read().contains_key(serial)
    }

    /// Whether a key of `serial` may be used at `now_secs`.
    pub fn has_valid(&self, serial: &str, now_secs: i64) -> bool {
        self.read()
            .get(serial)
            .is_some_and(|key| key.not_after.is_none_or(|end| end >= now_secs))
    }

    /// The serials known, sorted.
    pub fn serials(&self) -> Vec<String> {
        let mut serials: Vec<String> = self.read().keys().cloned().collect();
        serials.sort();
        serials
    }

    /// How many keys may be used at `now_secs`.
    pub fn valid_count(&self, now_secs: i64) -> usize {
        self.read()
            .values()
            .filter(|key| key.not_after.is_none_or(|end| end >= now_secs))
            .count()
    }

    /// Drops the certificate keys expired at `now_secs`; returns their serials.
    pub fn prune_expired(&self, now_secs: i64) -> Vec<String> {
        let mut keys = self.write();
        let expired: Vec<String> = keys
            .iter()
            .filter(|(_, key)| key.not_after.is_some_and(|end| end < now_secs))
            .map(|(serial, _)| serial.clone())
            .collect();
        for serial in &expired {
            keys.remove(serial);
        }
        expired
    }

    /// Who is asked for the key of an unknown serial ([`PlatformKeys::verify_or_refresh`]).
    pub fn set_refresher(&self, refresher: Weak<dyn RefreshKeys>) {
        *self
            .ring
            .refresher
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(refresher);
    }

    /// Checks `signed` over `body`: known serial whose key is still valid, timestamp within
    /// [`MAX_CLOCK_SKEW_SECS`] of `now_secs`, and a signature that verifies.
    pub fn verify(
        &self,
        signed: &SignedHeaders,
        body: &[u8],
        now_secs: i64,
    ) -> Result<(), CryptoError> {
        let key = self
            .read()
            .get(&signed.serial)
            .filter(|key| key.not_after.is_none_or(|end| end >= now_secs))
            .map(|key| key.der.clone())
            .ok_or_else(|| CryptoError::UnknownSerial(signed.serial.clone()))?;
        verify_with(&key, signed, body, now_secs)
    }

    /// [`PlatformKeys::verify`]; when the serial is unknown and a refresher is set, asks it for
    /// the key and checks once more.
    pub async fn verify_or_refresh(
        &self,
        signed: &SignedHeaders,
        body: &[u8],
        now_secs: i64,
    ) -> Result<(), CryptoError> {
        match self.verify(signed, body, now_secs) {
            Err(CryptoError::UnknownSerial(serial)) => {
                let refresher = self
                    .ring
                    .refresher
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .as_ref()
                    .and_then(Weak::upgrade);
                match refresher {
                    Some(refresher) if refresher.refresh_for(&serial).await => {
                        self.verify(signed, body, now_secs)
                    }
                    _ => Err(CryptoError::UnknownSerial(serial)),
                }
            }
            outcome => outcome,
        }
    }
}

/// Checks `signed` over `body` against the public key `der` (SubjectPublicKeyInfo or PKCS#1):
/// timestamp within [`MAX_CLOCK_SKEW_SECS`] of `now_secs`, and a signature that verifies.
pub fn verify_with(
    der: &[u8],
    signed: &SignedHeaders,
    body: &[u8],
    now_secs: i64,
) -> Result<(), CryptoError> {
    let timestamp: i64 = signed
        .timestamp
        .parse()
        .map_err(|_| CryptoError::StaleTimestamp(signed.timestamp.clone()))?;
    if (now_secs - timestamp).abs() > MAX_CLOCK_SKEW_SECS {
        return Err(CryptoError::StaleTimestamp(signed.timestamp.clone()));
    }
    let signature = BASE64
        .decode(signed.signature.as_bytes())
        .map_err(|_| CryptoError::BadSignature)?;
    let mut message = signing_message(&[&signed.timestamp, &signed.nonce]).into_bytes();
    message.extend_from_slice(body);
    message.push(b'\n');
    UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, der)
        .verify(&message, &signature)
        .map_err(|_| CryptoError::BadSignature)
}

/// The merchant's APIv3 key: 32 bytes of AES-256-GCM key material.
#[derive(Clone)]
pub struct ApiV3Key([u8; 32]);

impl std::fmt::Debug for ApiV3Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiV3Key(..)")
    }
}

impl ApiV3Key {
    /// The key as WeChat hands it out: 32 ASCII characters.
    pub fn new(text: &str) -> Result<Self, CryptoError> {
        let bytes: [u8; 32] = text.as_bytes().try_into().map_err(|_| {
            CryptoError::InvalidKey("an APIv3 key is exactly 32 characters".to_owned())
        })?;
        Ok(Self(bytes))
    }

    /// A random key (the fake provider's, tests').
    pub fn generate() -> Self {
        let text = random_nonce();
        // 32 hex characters: always a valid key.
        Self(text.as_bytes().try_into().unwrap_or([b'0'; 32]))
    }

    /// The key's text (to configure another process with it in tests).
    pub fn as_text(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }

    fn sealing_key(&self) -> Result<LessSafeKey, CryptoError> {
        UnboundKey::new(&AES_256_GCM, &self.0)
            .map(LessSafeKey::new)
            .map_err(|_| CryptoError::InvalidKey("AES-256-GCM key".to_owned()))
    }

    /// Decrypts a notification resource: `ciphertext` is base64 of ciphertext + tag, `nonce`
    /// the 12-character nonce, `associated_data` the additional data.
    pub fn decrypt(
        &self,
        nonce: &str,
        associated_data: &str,
        ciphertext: &str,
    ) -> Result<Vec<u8>, CryptoError> {
        let nonce: [u8; NONCE_LEN] = nonce
            .as_bytes()
            .try_into()
            .map_err(|_| CryptoError::Undecryptable)?;
        let mut in_out = BASE64
            .decode(ciphertext.as_bytes())
            .map_err(|_| CryptoError::Undecryptable)?;
        let plain = self
            .sealing_key()?
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated_data.as_bytes()),
                &mut in_out,
            )
            .map_err(|_| CryptoError::Undecryptable)?;
        Ok(plain.to_vec())
    }

    /// Encrypts `plaintext` as WeChat does (the fake provider): returns (nonce, base64 of
    /// ciphertext + tag).
    pub fn encrypt(
        &self,
        associated_data: &str,
        plaintext: &[u8],
    ) -> Result<(String, String), CryptoError> {
        let nonce_text: String = random_nonce().chars().take(NONCE_LEN).collect();
        let nonce: [u8; NONCE_LEN] = nonce_text
            .as_bytes()
            .try_into()
            .map_err(|_| CryptoError::Undecryptable)?;
        let mut in_out = plaintext.to_vec();
        self.sealing_key()?
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated_data.as_bytes()),
                &mut in_out,
            )
            .map_err(|_| CryptoError::Undecryptable)?;
        Ok((nonce_text, BASE64.encode(in_out)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_signature_verifies_with_the_public_key_and_nothing_else() {
        let key = SigningKey::generate("serial-1").unwrap();
        let keys = PlatformKeys::new();
        keys.add_der("serial-1", &key.public_key_der().unwrap())
            .unwrap();
        let body = br#"{"id":"1"}"#;
        let signed = SignedHeaders::sign(&key, 1_700_000_000, body).unwrap();
        assert_eq!(keys.verify(&signed, body, 1_700_000_100), Ok(()));
        assert_eq!(
            keys.verify(&signed, br#"{"id":"2"}"#, 1_700_000_100),
            Err(CryptoError::BadSignature)
        );
        assert!(matches!(
            keys.verify(&signed, body, 1_700_000_000 + 301),
            Err(CryptoError::StaleTimestamp(_))
        ));
        let other = SignedHeaders {
            serial: "serial-2".to_owned(),
            ..signed.clone()
        };
        assert!(matches!(
            keys.verify(&other, body, 1_700_000_000),
            Err(CryptoError::UnknownSerial(_))
        ));
        // Another key under the known serial: refused.
        let forger = SigningKey::generate("serial-1").unwrap();
        let forged = SignedHeaders::sign(&forger, 1_700_000_000, body).unwrap();
        assert_eq!(
            keys.verify(&forged, body, 1_700_000_000),
            Err(CryptoError::BadSignature)
        );
    }

    #[test]
    fn clones_share_the_keyring_and_a_certificate_key_ends_with_its_validity() {
        let key = SigningKey::generate("CERT-1").unwrap();
        let keys = PlatformKeys::new();
        let clone = keys.clone();
        let body = b"{}";
        let signed = SignedHeaders::sign(&key, 1_700_000_000, body).unwrap();
        assert!(matches!(
            clone.verify(&signed, body, 1_700_000_000),
            Err(CryptoError::UnknownSerial(_))
        ));
        // Added to one handle, used by the other; valid until 1_700_000_100.
        keys.add_certificate_key("CERT-1", &key.public_key_der().unwrap(), 1_700_000_100)
            .unwrap();
        assert_eq!(clone.verify(&signed, body, 1_700_000_000), Ok(()));
        assert_eq!(clone.valid_count(1_700_000_100), 1);
        let later = SignedHeaders::sign(&key, 1_700_000_101, body).unwrap();
        assert!(matches!(
            clone.verify(&later, body, 1_700_000_101),
            Err(CryptoError::UnknownSerial(_))
        ));
        assert_eq!(clone.valid_count(1_700_000_101), 0);
        // A configured key does not expire; pruning drops only the expired certificate key.
        let configured = SigningKey::generate("PUB_KEY_ID_1").unwrap();
        keys.add_der("PUB_KEY_ID_1", &configured.public_key_der().unwrap())
            .unwrap();
        assert_eq!(keys.prune_expired(1_700_000_050), Vec::<String>::new());
        assert_eq!(keys.prune_expired(1_800_000_000), ["CERT-1"]);
        assert_eq!(clone.serials(), ["PUB_KEY_ID_1"]);
        assert!(keys
            .add_der("", &configured.public_key_der().unwrap())
            .is_err());
        assert!(keys.add_der("X", b"not a key").is_err());
    }

    #[test]
    fn a_resource_decrypts_under_its_key_and_associated_data_only() {
        let key = ApiV3Key::generate();
        let (nonce, ciphertext) = key.encrypt("transaction", b"{\"a\":1}").unwrap();
        assert_eq!(nonce.len(), 12);
        assert_eq!(
            key.decrypt(&nonce, "transaction", &ciphertext).unwrap(),
            b"{\"a\":1}"
        );
        assert_eq!(
            key.decrypt(&nonce, "other", &ciphertext),
            Err(CryptoError::Undecryptable)
        );
        assert_eq!(
            ApiV3Key::generate().decrypt(&nonce, "transaction", &ciphertext),
            Err(CryptoError::Undecryptable)
        );
    }

    #[test]
    fn the_signing_message_ends_every_part_with_a_newline() {
        assert_eq!(
            signing_message(&["GET", "/v3/certificates", "1554208460", "593BEC", ""]),
            "GET\n/v3/certificates\n1554208460\n593BEC\n\n"
        );
    }
}
