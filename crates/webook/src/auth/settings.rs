//! The settings of accounts and sign-in: token secrets and lifetimes, the sign-in and write rate
//! limits, the configured administrators. Keys, defaults and validation as documented in
//! `docs/CONFIG.md`; the configuration core ([`platform::config`]) loads them with the rest.
//!
//! In cluster mode the token secrets must be configured (every instance signs with the same
//! ones); in embedded mode they are generated once into the data dir by [`JwtSecrets::resolve`].
//! Token lifetimes are at most [`MAX_TOKEN_TTL`], so every expiry derived from them fits where
//! it is stored.

use std::{io::Write, path::Path, time::Duration};

use anyhow::{bail, Context};
use platform::config::{Config, Secret, Settings, SettingsSpec};
use serde::{Deserialize, Deserializer, Serialize};

/// File in the data dir holding the generated JWT secrets (embedded mode), mode 0600.
pub const SECRETS_FILE: &str = "jwt-secrets.toml";
/// Shortest JWT secret accepted, in bytes (HS256 wants at least its 256-bit output size).
pub const MIN_SECRET_LEN: usize = 32;

/// How [`AuthSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<AuthSettings>();

/// Years in [`MAX_TOKEN_TTL`] (of 365.25 days, as a duration such as `100years` counts them).
pub const MAX_TOKEN_TTL_YEARS: u64 = 100;
/// Longest `refresh_token_ttl` (and so `access_token_ttl`): far beyond any session, and far
/// within what expiries computed from it can hold — a token's `exp` (seconds since 1970), and
/// the session's revoked flag in Redis, whose expiry (milliseconds since 1970 in a signed 64-bit
/// number) it refuses beyond about 292 million years, so a revocation would be retried forever.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(MAX_TOKEN_TTL_YEARS * 31_557_600);
/// Longest `refresh_retry_window`: the time a stolen, just-used refresh token could still be
/// traded is kept short.
pub const MAX_REFRESH_RETRY_WINDOW: Duration = Duration::from_secs(5 * 60);

/// Accounts and sign-in settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct AuthSettings {
    /// HS256 secret for access tokens (required in cluster mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt_access_secret: Option<Secret>,
    /// HS256 secret for refresh tokens (required in cluster mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt_refresh_secret: Option<Secret>,
    /// User ids of administrators (a list, or comma-separated in the environment). Admin rights
    /// are also granted with `webook admin grant`; never by email, which anyone can sign up with.
    #[serde(deserialize_with = "user_ids")]
    pub admins: Vec<i64>,
    /// Lifetime of access tokens.
    #[serde(with = "humantime_serde")]
    pub access_token_ttl: Duration,
    /// Lifetime of refresh tokens (and of a session that is never refreshed).
    #[serde(with = "humantime_serde")]
    pub refresh_token_ttl: Duration,
    /// How long after a refresh the refresh token it used may be presented once more and get a
    /// token of the same new generation: the answer of the first was lost (a tab closed or
    /// reloaded mid-refresh, a dropped connection). Any other second use, and this one after
    /// the window, is a reuse and revokes the session. 0: every second use revokes.
    #[serde(with = "humantime_serde")]
    pub refresh_retry_window: Duration,
    /// Sign-up and login attempts allowed per client IP within `auth_rate_window`.
    pub auth_rate_limit: u32,
    /// The window of `auth_rate_limit`.
    #[serde(with = "humantime_serde")]
    pub auth_rate_window: Duration,
    /// Writes (publish, save, withdraw, like, collect, profile edits) allowed per user within
    /// `write_rate_window`; beyond it, 429001. 0 turns the limit off (load tests).
    pub write_rate_limit: u32,
    /// The window of `write_rate_limit`.
    #[serde(with = "humantime_serde")]
    pub write_rate_window: Duration,
    /// Whether visitors without an account may read the community's public content (lists of
    /// published articles, author pages, comments, a tag's articles); `false`: a login is
    /// needed, as in the course's backend.
    pub anonymous_reading: bool,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            jwt_access_secret: None,
            jwt_refresh_secret: None,
            admins: Vec::new(),
            access_token_ttl: Duration::from_secs(30 * 60),
            refresh_token_ttl: Duration::from_secs(7 * 24 * 3600),
            refresh_retry_window: Duration::from_secs(30),
            auth_rate_limit: 10,
            auth_rate_window: Duration::from_secs(60),
            write_rate_limit: 120,
            write_rate_window: Duration::from_secs(60),
            anonymous_reading: true,
        }
    }
}

impl Settings for AuthSettings {
    const KEYS: &'static [&'static str] = &[
        "jwt_access_secret",
        "jwt_refresh_secret",
        "admins",
        "access_token_ttl",
        "refresh_token_ttl",
        "refresh_retry_window",
        "auth_rate_limit",
        "auth_rate_window",
        "write_rate_limit",
        "write_rate_window",
        "anonymous_reading",
    ];

    const LIVE: &'static [&'static str] = &[
        "auth_rate_limit",
        "auth_rate_window",
        "write_rate_limit",
        "write_rate_window",
        "anonymous_reading",
    ];

    fn validate(&self, config: &Config) -> anyhow::Result<()> {
        if self.write_rate_window.is_zero() {
            bail!("invalid write_rate_window (WEBOOK_WRITE_RATE_WINDOW): must be above 0");
        }
        if self.auth_rate_limit == 0 || self.auth_rate_window.is_zero() {
            bail!(
                "invalid auth_rate_limit / auth_rate_window (WEBOOK_AUTH_RATE_LIMIT, \
                 WEBOOK_AUTH_RATE_WINDOW): both must be above 0"
            );
        }
        if self.access_token_ttl < Duration::from_secs(1)
            || self.refresh_token_ttl <= self.access_token_ttl
        {
            bail!(
                "invalid access_token_ttl / refresh_token_ttl (WEBOOK_ACCESS_TOKEN_TTL, \
                 WEBOOK_REFRESH_TOKEN_TTL): access tokens must live at least 1s and refresh \
                 tokens longer than access tokens"
            );
        }
        if self.refresh_token_ttl > MAX_TOKEN_TTL {
            bail!(
                "invalid refresh_token_ttl (WEBOOK_REFRESH_TOKEN_TTL): at most \
                 {MAX_TOKEN_TTL_YEARS} years"
            );
        }
        if self.refresh_retry_window > MAX_REFRESH_RETRY_WINDOW {
            bail!("invalid refresh_retry_window (WEBOOK_REFRESH_RETRY_WINDOW): at most 5m");
        }
        for (name, secret) in [
            ("jwt_access_secret", &self.jwt_access_secret),
            ("jwt_refresh_secret", &self.jwt_refresh_secret),
        ] {
            match secret {
                None if config.is_cluster() => bail!(
                    "{name} (WEBOOK_{}) is required in cluster mode (redis_url is set): every \
                     instance must sign tokens with the same secret",
                    name.to_uppercase()
                ),
                Some(secret) if secret.expose().len() < MIN_SECRET_LEN => bail!(
                    "{name} (WEBOOK_{}) is too short: use at least {MIN_SECRET_LEN} bytes",
                    name.to_uppercase()
                ),
                _ => {}
            }
        }
        if let (Some(access), Some(refresh)) = (&self.jwt_access_secret, &self.jwt_refresh_secret) {
            if access == refresh {
                bail!(
                    "invalid jwt_refresh_secret (WEBOOK_JWT_REFRESH_SECRET): it is the same as \
                     jwt_access_secret; use two different secrets, so a token of one kind can \
                     never be checked as the other"
                );
            }
        }
        Ok(())
    }

    fn mode_note(&self, config: &Config) -> Option<String> {
        (!config.is_cluster()).then(|| {
            format!(
                "JWT secrets from {}",
                if self.jwt_access_secret.is_some() {
                    "the configuration".to_owned()
                } else {
                    config.data_dir.join(SECRETS_FILE).display().to_string()
                }
            )
        })
    }
}

/// The two token-signing secrets in effect.
#[derive(Debug, Clone)]
pub struct JwtSecrets {
    /// Signs access tokens.
    pub access: Secret,
    /// Signs refresh tokens (a different key, so one kind can never pass as the other).
    pub refresh: Secret,
}

#[derive(Serialize, Deserialize)]
struct SecretsFile {
    access: String,
    refresh: String,
}

impl JwtSecrets {
    /// The configured secrets, or (embedded mode) the ones generated once into
    /// `<data_dir>/jwt-secrets.toml` with mode 0600. Concurrent first starts agree on one file.
    pub fn resolve(settings: &AuthSettings, config: &Config) -> anyhow::Result<Self> {
        match (&settings.jwt_access_secret, &settings.jwt_refresh_secret) {
            (Some(access), Some(refresh)) => Ok(Self {
                access: access.clone(),
                refresh: refresh.clone(),
            }),
            (None, None) => Self::load_or_generate(&config.data_dir),
            _ => bail!(
                "set both jwt_access_secret and jwt_refresh_secret (WEBOOK_JWT_ACCESS_SECRET, \
                 WEBOOK_JWT_REFRESH_SECRET), or neither to use generated ones"
            ),
        }
    }

    fn load_or_generate(data_dir: &Path) -> anyhow::Result<Self> {
        use std::os::unix::fs::PermissionsExt;

        platform::db::create_private_dir(data_dir)
            .with_context(|| format!("creating data_dir {}", data_dir.display()))?;
        let path = data_dir.join(SECRETS_FILE);
        if !path.exists() {
            // Write a private temp file, then hard-link it into place: the link fails if another
            // process won the race, and nobody ever reads a half-written file.
            let generated = SecretsFile {
                access: random_hex(64)?,
                refresh: random_hex(64)?,
            };
            let tmp = data_dir.join(format!(".{SECRETS_FILE}.{}", uuid::Uuid::new_v4()));
            let mut file = platform::db::create_private_new(&tmp)
                .with_context(|| format!("creating {}", tmp.display()))?;
            file.write_all(toml::to_string(&generated)?.as_bytes())?;
            file.sync_all()?;
            let linked = std::fs::hard_link(&tmp, &path);
            std::fs::remove_file(&tmp)?;
            match linked {
                Ok(()) => tracing::info!(path = %path.display(), "generated JWT secrets"),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(err).context(format!("writing {}", path.display())),
            }
        }
        let mode = std::fs::metadata(&path)?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "JWT secrets file was readable by others; set to 0600");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let stored: SecretsFile = toml::from_str(&text).with_context(|| {
            format!(
                "{} is corrupt (delete it to generate new secrets; this signs everybody out)",
                path.display()
            )
        })?;
        Ok(Self {
            access: Secret::new(stored.access),
            refresh: Secret::new(stored.refresh),
        })
    }
}

fn random_hex(bytes: usize) -> anyhow::Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|err| anyhow::anyhow!("no OS randomness: {err}"))?;
    Ok(hex::encode(buf))
}

/// User ids: `[1, 2]` (TOML) or `"1, 2"` (environment variables). An email is refused with the
/// way to grant rights by email instead: an unregistered admin email could be claimed by
/// whoever signs up with it first.
fn user_ids<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Number(i64),
        Text(String),
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IdsOrString {
        Ids(Vec<Id>),
        // An environment value of one number arrives as a number.
        One(i64),
        String(String),
    }
    let entries: Vec<Id> = match IdsOrString::deserialize(de)? {
        IdsOrString::Ids(ids) => ids,
        IdsOrString::One(id) => vec![Id::Number(id)],
        IdsOrString::String(joined) => joined
            .split(',')
            .map(|part| Id::Text(part.trim().to_owned()))
            .filter(|id| !matches!(id, Id::Text(text) if text.is_empty()))
            .collect(),
    };
    entries
        .into_iter()
        .map(|entry| {
            let id = match entry {
                Id::Number(id) => Ok(id),
                Id::Text(text) if text.contains('@') => Err(format!(
                    "{text:?} is an email: admins are user ids now (an email could be claimed by \
                     whoever signs up with it); grant rights with `webook admin grant {text}`"
                )),
                Id::Text(text) => text
                    .parse::<i64>()
                    .map_err(|_| format!("{text:?} is not a user id")),
            }?;
            if id > 0 {
                Ok(id)
            } else {
                Err(format!("{id} is not a user id (ids are positive)"))
            }
        })
        .collect::<Result<Vec<i64>, String>>()
        .map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_token_ttl_is_at_most_the_longest_token_lifetime() {
        let with_ttl = |refresh_token_ttl| AuthSettings {
            refresh_token_ttl,
            ..AuthSettings::default()
        };
        let written: AuthSettings = toml::from_str(&format!(
            "refresh_token_ttl = \"{MAX_TOKEN_TTL_YEARS}years\""
        ))
        .unwrap();
        assert_eq!(
            written.refresh_token_ttl, MAX_TOKEN_TTL,
            "the bound as written"
        );
        with_ttl(MAX_TOKEN_TTL)
            .validate(&Config::default())
            .unwrap();
        let err = with_ttl(MAX_TOKEN_TTL + Duration::from_nanos(1))
            .validate(&Config::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid refresh_token_ttl (WEBOOK_REFRESH_TOKEN_TTL)"),
            "{err}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
        // What the bound protects: the session flag's expiry in Redis (now + ttl, in signed
        // milliseconds) and a token's `exp` (now + ttl, in seconds) still fit.
        let now = Duration::from_secs(4_102_444_800); // 2100-01-01
        assert!(i64::try_from((now + MAX_TOKEN_TTL).as_millis()).is_ok());
    }

    #[test]
    fn generated_secrets_are_private_and_stable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().join("nested"),
            ..Config::default()
        };
        let settings = AuthSettings::default();
        let first = JwtSecrets::resolve(&settings, &config).unwrap();
        let second = JwtSecrets::resolve(&settings, &config).unwrap();
        assert_eq!(first.access, second.access);
        assert_ne!(first.access, first.refresh);
        assert!(first.access.expose().len() >= MIN_SECRET_LEN);
        let mode = std::fs::metadata(dir.path().join("nested").join(SECRETS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
