//! JSON Web Tokens: short-lived access tokens and long-lived refresh tokens (HS256).
//!
//! The two kinds are signed with different secrets *and* carry a `kind` claim, so one can never
//! be used as the other even if an operator configured the same secret twice. Access tokens are
//! bound to a hash of the client's User-Agent (`ua`); refresh tokens carry the session's
//! refresh generation (`gen`), which rotation advances (see [`super::session`]).
//! Expiry is checked with no leeway.

use std::time::Duration;

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::settings::JwtSecrets;

/// Which token a claim set belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenKind {
    /// Authenticates requests.
    Access,
    /// Buys a new token pair.
    Refresh,
    /// Carries state a client hands back (see [`Tokens::issue_state`]); never authenticates.
    State,
}

/// Claims of a state token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateClaims {
    /// What the state is for (e.g. `wechat_login`).
    pub purpose: String,
    /// The state itself.
    pub value: String,
    /// Always [`TokenKind::State`].
    pub kind: TokenKind,
    /// Issued at (s).
    pub iat: u64,
    /// Expires at (s).
    pub exp: u64,
}

/// Claims of an access token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessClaims {
    /// User id.
    pub uid: i64,
    /// Session id.
    pub ssid: String,
    /// Hash of the User-Agent the token was issued to.
    pub ua: String,
    /// Always [`TokenKind::Access`].
    pub kind: TokenKind,
    /// Issued at (s).
    pub iat: u64,
    /// Expires at (s).
    pub exp: u64,
}

/// Claims of a refresh token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshClaims {
    /// User id.
    pub uid: i64,
    /// Session id.
    pub ssid: String,
    /// Refresh generation this token was issued at.
    pub gen: u64,
    /// Always [`TokenKind::Refresh`].
    pub kind: TokenKind,
    /// Issued at (s).
    pub iat: u64,
    /// Expires at (s).
    pub exp: u64,
}

/// Why a token was refused (callers answer 401 either way; the reason is for logs).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Bad signature, malformed, expired, wrong algorithm.
    #[error("invalid token: {0}")]
    Invalid(#[from] jsonwebtoken::errors::Error),
    /// A valid token of the other kind.
    #[error("wrong kind of token")]
    WrongKind,
}

/// Issues and verifies both kinds of token.
#[derive(Clone)]
pub struct Tokens {
    access_encoding: EncodingKey,
    access_decoding: DecodingKey,
    refresh_encoding: EncodingKey,
    refresh_decoding: DecodingKey,
    validation: Validation,
    access_ttl: Duration,
    refresh_ttl: Duration,
    /// Key of [`Tokens::keyed_digest`]: the access secret.
    digest_key: std::sync::Arc<[u8]>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("access_ttl", &self.access_ttl)
            .field("refresh_ttl", &self.refresh_ttl)
            .finish_non_exhaustive()
    }
}

impl Tokens {
    /// Tokens signed with `secrets`, living `access_ttl` and `refresh_ttl`.
    pub fn new(
        secrets: &JwtSecrets,
        access_ttl: Duration,
        refresh_ttl: Duration,
    ) -> anyhow::Result<Self> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.validate_exp = true;
        validation.set_required_spec_claims(&["exp"]);
        let access = secrets.access.expose().as_bytes();
        let refresh = secrets.refresh.expose().as_bytes();
        Ok(Self {
            access_encoding: EncodingKey::from_secret(access)?,
            access_decoding: DecodingKey::from_secret(access)?,
            refresh_encoding: EncodingKey::from_secret(refresh)?,
            refresh_decoding: DecodingKey::from_secret(refresh)?,
            validation,
            access_ttl,
            refresh_ttl,
            digest_key: access.into(),
        })
    }

    /// Lifetime of refresh tokens (and so of session state).
    pub fn refresh_ttl(&self) -> Duration {
        self.refresh_ttl
    }

    /// A signed access token for `uid` in session `ssid`, bound to `user_agent`.
    pub fn issue_access(&self, uid: i64, ssid: &str, user_agent: &str) -> anyhow::Result<String> {
        let iat = jsonwebtoken::get_current_timestamp();
        let claims = AccessClaims {
            uid,
            ssid: ssid.to_owned(),
            ua: user_agent_hash(user_agent),
            kind: TokenKind::Access,
            iat,
            exp: iat + self.access_ttl.as_secs().max(1),
        };
        Ok(encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &self.access_encoding,
        )?)
    }

    /// A token carrying `value` for `purpose`, valid `ttl`, signed with the access secret.
    pub fn issue_state(&self, purpose: &str, value: &str, ttl: Duration) -> anyhow::Result<String> {
        let iat = jsonwebtoken::get_current_timestamp();
        let claims = StateClaims {
            purpose: purpose.to_owned(),
            value: value.to_owned(),
            kind: TokenKind::State,
            iat,
            exp: iat + ttl.as_secs().max(1),
        };
        Ok(encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &self.access_encoding,
        )?)
    }

    /// The value of a state token of `purpose`.
    pub fn verify_state(&self, purpose: &str, token: &str) -> Result<String, TokenError> {
        let claims = decode::<StateClaims>(token, &self.access_decoding, &self.validation)?.claims;
        if claims.kind != TokenKind::State || claims.purpose != purpose {
            return Err(TokenError::WrongKind);
        }
        Ok(claims.value)
    }

    /// A signed refresh token for `uid` in session `ssid` at refresh generation `gen`.
    pub fn issue_refresh(&self, uid: i64, ssid: &str, gen: u64) -> anyhow::Result<String> {
        let iat = jsonwebtoken::get_current_timestamp();
        let claims = RefreshClaims {
            uid,
            ssid: ssid.to_owned(),
            gen,
            kind: TokenKind::Refresh,
            iat,
            exp: iat + self.refresh_ttl.as_secs().max(1),
        };
        Ok(encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &self.refresh_encoding,
        )?)
    }

    /// HMAC-SHA256 of `data` for `purpose` under the access secret, hex: a digest of a secret
    /// too small to hash plainly (a 6-digit code has a million values; without the key, a
    /// leaked digest would give it away in a million tries).
    pub fn keyed_digest(&self, purpose: &str, data: &str) -> String {
        use hmac::{Mac, SimpleHmac};
        let Ok(mut mac) = SimpleHmac::<Sha256>::new_from_slice(&self.digest_key) else {
            unreachable!("HMAC takes keys of any length");
        };
        mac.update(purpose.as_bytes());
        mac.update(&[0]);
        mac.update(data.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The claims of a valid, unexpired access token.
    pub fn verify_access(&self, token: &str) -> Result<AccessClaims, TokenError> {
        let claims = decode::<AccessClaims>(token, &self.access_decoding, &self.validation)?.claims;
        if claims.kind != TokenKind::Access {
            return Err(TokenError::WrongKind);
        }
        Ok(claims)
    }

    /// The claims of a valid, unexpired refresh token.
    pub fn verify_refresh(&self, token: &str) -> Result<RefreshClaims, TokenError> {
        let claims =
            decode::<RefreshClaims>(token, &self.refresh_decoding, &self.validation)?.claims;
        if claims.kind != TokenKind::Refresh {
            return Err(TokenError::WrongKind);
        }
        Ok(claims)
    }
}

/// The hash an access token carries for its User-Agent: SHA-256, first 16 bytes, hex.
pub fn user_agent_hash(user_agent: &str) -> String {
    let digest = Sha256::digest(user_agent.as_bytes());
    hex::encode(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform::config::Secret;

    fn tokens_with(access: &str, refresh: &str) -> Tokens {
        Tokens::new(
            &JwtSecrets {
                access: Secret::new(access),
                refresh: Secret::new(refresh),
            },
            Duration::from_secs(1800),
            Duration::from_secs(7 * 86400),
        )
        .unwrap()
    }

    fn tokens() -> Tokens {
        tokens_with(&"a".repeat(32), &"r".repeat(32))
    }

    #[test]
    fn keyed_digests_depend_on_the_key_the_purpose_and_the_data() {
        let tokens = tokens();
        let digest = tokens.keyed_digest("sms_login", "13800000000:123456");
        assert_eq!(digest.len(), 64);
        assert_eq!(
            digest,
            tokens.keyed_digest("sms_login", "13800000000:123456")
        );
        assert_ne!(
            digest,
            tokens.keyed_digest("sms_login", "13800000000:123457")
        );
        assert_ne!(digest, tokens.keyed_digest("other", "13800000000:123456"));
        let other_key = tokens_with(&"b".repeat(32), &"r".repeat(32));
        assert_ne!(
            digest,
            other_key.keyed_digest("sms_login", "13800000000:123456")
        );
        assert!(!digest.contains("123456"));
    }

    #[test]
    fn state_tokens_carry_their_value_for_their_purpose_only() {
        let tokens = tokens();
        let token = tokens
            .issue_state("wechat_login", "abc", Duration::from_secs(60))
            .unwrap();
        assert_eq!(tokens.verify_state("wechat_login", &token).unwrap(), "abc");
        assert!(tokens.verify_state("other", &token).is_err());
        assert!(tokens.verify_access(&token).is_err());
        let access = tokens.issue_access(7, "s1", "ua").unwrap();
        assert!(tokens.verify_state("wechat_login", &access).is_err());
        let foreign = tokens_with(&"b".repeat(32), &"r".repeat(32))
            .issue_state("wechat_login", "abc", Duration::from_secs(60))
            .unwrap();
        assert!(tokens.verify_state("wechat_login", &foreign).is_err());
    }

    #[test]
    fn access_tokens_round_trip_with_the_user_agent_hash() {
        let tokens = tokens();
        let token = tokens.issue_access(7, "s1", "Mozilla/5.0").unwrap();
        let claims = tokens.verify_access(&token).unwrap();
        assert_eq!((claims.uid, claims.ssid.as_str()), (7, "s1"));
        assert_eq!(claims.ua, user_agent_hash("Mozilla/5.0"));
        assert_ne!(claims.ua, user_agent_hash("curl/8"));
        assert_eq!(claims.exp - claims.iat, 1800);
    }

    #[test]
    fn one_kind_never_passes_as_the_other() {
        let tokens = tokens();
        let access = tokens.issue_access(7, "s1", "ua").unwrap();
        let refresh = tokens.issue_refresh(7, "s1", 0).unwrap();
        assert!(tokens.verify_refresh(&access).is_err());
        assert!(tokens.verify_access(&refresh).is_err());

        // Even with one secret for both, the kind claim tells them apart.
        let same = tokens_with(&"s".repeat(32), &"s".repeat(32));
        let access = same.issue_access(7, "s1", "ua").unwrap();
        let refresh = same.issue_refresh(7, "s1", 0).unwrap();
        assert!(matches!(
            same.verify_refresh(&access),
            Err(TokenError::Invalid(_) | TokenError::WrongKind)
        ));
        assert!(matches!(
            same.verify_access(&refresh),
            Err(TokenError::Invalid(_) | TokenError::WrongKind)
        ));
    }

    #[test]
    fn tampered_and_foreign_tokens_are_refused() {
        let tokens = tokens();
        let token = tokens.issue_access(7, "s1", "ua").unwrap();
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        // Swap the payload for one claiming another user, keep the signature.
        let other = tokens.issue_access(8, "s1", "ua").unwrap();
        parts[1] = other.split('.').nth(1).unwrap().to_owned();
        assert!(tokens.verify_access(&parts.join(".")).is_err());
        let foreign = tokens_with(&"x".repeat(32), &"y".repeat(32))
            .issue_access(7, "s1", "ua")
            .unwrap();
        assert!(tokens.verify_access(&foreign).is_err());
        assert!(tokens.verify_access("not.a.token").is_err());
    }
}
