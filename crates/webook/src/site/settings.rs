//! The settings of the public site: the address its absolute links name. Loaded by the
//! configuration core ([`platform::config`]) with the rest; documented in `docs/CONFIG.md`.

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`SiteSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<SiteSettings>();

/// Site settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SiteSettings {
    /// The site's public address (`https://webook.example`), which canonical links, share
    /// cards, feeds and sitemaps name; empty: `http://` and the request's `Host` (fine on one's
    /// own machine; a public deployment sets it, so no client chooses the links).
    pub site_url: String,
}

impl Settings for SiteSettings {
    const KEYS: &'static [&'static str] = &["site_url"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if self.site_url.is_empty() {
            return Ok(());
        }
        let valid = url::Url::parse(&self.site_url).is_ok_and(|url| {
            matches!(url.scheme(), "http" | "https")
                && url.host().is_some()
                && url.path() == "/"
                && url.query().is_none()
                && url.fragment().is_none()
        });
        if !valid {
            bail!(
                "invalid site_url (WEBOOK_SITE_URL): must be an http(s) origin such as \
                 https://webook.example, without a path"
            );
        }
        Ok(())
    }
}

impl SiteSettings {
    /// The configured origin without a trailing slash; `None` when unset.
    pub fn origin(&self) -> Option<String> {
        (!self.site_url.is_empty()).then(|| self.site_url.trim_end_matches('/').to_owned())
    }
}
