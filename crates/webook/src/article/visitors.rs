//! Reads by visitors without an account ([`platform::caller::Reader`]): each counts once per
//! visitor and article within `anonymous_read_window`, and never for a known crawler — a read
//! count stays a count of people, not of requests.
//!
//! A visitor is known by a first-party cookie, [`COOKIE`]. A request without it — a first
//! visit, or a client that keeps no cookies — is known by its address (an IPv4 address, or the
//! IPv6 network of `client_ipv6_prefix` bits) and User-Agent, hashed; and the answer sets the
//! cookie to that same id, so the second visit of a browser is the same visitor as its first.
//! Why not the address alone: a school or an office behind one NAT is many readers; why not the
//! cookie alone: a client that keeps none would count on every request.
//!
//! "Once per window" is a rate limit of one per (visitor, article) key
//! ([`platform::rate_limit`]): in-process when embedded, a Redis sliding window shared by every
//! instance in cluster mode (each instance on its own while Redis is unreachable, counted in
//! `rate_limit_fallback_total{limiter="anonymous_reads"}`). A repeated view is counted in
//! `rate_limited_total{limiter="anonymous_reads"}`.

use std::{net::IpAddr, time::Duration};

use axum::http::{HeaderMap, HeaderValue};
use platform::{error::AppError, rate_limit::RateLimiter, redis::Redis};
use sha2::{Digest, Sha256};

/// The visitor cookie's name.
pub const COOKIE: &str = "webook_visitor";
/// How long a browser keeps the visitor cookie: a year.
const COOKIE_MAX_AGE_SECS: u64 = 365 * 24 * 3600;

/// Substrings (lower-case) of the User-Agents of crawlers and link previewers, whose reads are
/// not counted: search engines, social and chat link previews, SEO and AI crawlers, and the
/// generic marks most others carry.
const CRAWLER_MARKS: &[&str] = &[
    "googlebot",
    "adsbot-google",
    "mediapartners-google",
    "google-inspectiontool",
    "bingbot",
    "bingpreview",
    "baiduspider",
    "yandex",
    "duckduckbot",
    "sogou",
    "360spider",
    "yisouspider",
    "bytespider",
    "petalbot",
    "applebot",
    "slurp",
    "facebookexternalhit",
    "facebot",
    "twitterbot",
    "linkedinbot",
    "slackbot",
    "discordbot",
    "telegrambot",
    "whatsapp",
    "embedly",
    "ahrefsbot",
    "semrushbot",
    "mj12bot",
    "dotbot",
    "gptbot",
    "chatgpt-user",
    "ccbot",
    "claudebot",
    "amazonbot",
    "headlesschrome",
    "spider",
    "crawler",
    "bot/",
    "bot;",
    "+http",
];

/// Whether `user_agent` is a known crawler's (or empty: no browser sends none).
pub fn is_crawler(user_agent: &str) -> bool {
    let agent = user_agent.to_ascii_lowercase();
    agent.trim().is_empty() || CRAWLER_MARKS.iter().any(|mark| agent.contains(mark))
}

/// The visitor of a request from `client` (the address [`platform::client_ip::ClientIp`]
/// finds): the cookie's id when it carries a well-formed one, otherwise the id of its address
/// and User-Agent; and whether the answer must set the cookie.
pub fn identify(headers: &HeaderMap, client: IpAddr) -> (String, bool) {
    if let Some(id) = cookie(headers) {
        return (id.to_owned(), false);
    }
    let mut hash = Sha256::new();
    hash.update(b"webook visitor\0");
    hash.update(client.to_string().as_bytes());
    hash.update(b"\0");
    hash.update(platform::caller::user_agent(headers).as_bytes());
    (hex::encode(&hash.finalize()[..16]), true)
}

/// The visitor id of the request's cookie, if it is one this module set (32 hex digits).
fn cookie(headers: &HeaderMap) -> Option<&str> {
    platform::http::cookie_values(headers, COOKIE)
        .into_iter()
        .find(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value that keeps visitor `id`: first-party, not for scripts, sent on
/// top-level navigations from other sites (a shared link) but not on their sub-requests.
pub fn set_cookie(id: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; Path=/; Max-Age={COOKIE_MAX_AGE_SECS}; HttpOnly; SameSite=Lax"
    ))
    .ok()
}

/// Which visitors' reads count: the first per visitor and article in each window.
#[derive(Clone)]
pub struct Visitors {
    reads: RateLimiter,
}

impl Visitors {
    /// Reads counted once per `window`, shared through `redis` (with its key prefix) in
    /// cluster mode. `window` must be above zero.
    pub fn new(redis: Option<(&Redis, &str)>, window: Duration) -> anyhow::Result<Self> {
        Ok(Self {
            reads: RateLimiter::of_mode("anonymous_reads", redis, 1, window)?,
        })
    }

    /// Whether visitor `visitor`'s read of article `id` counts: the first in its window.
    pub async fn counts(&self, visitor: &str, id: i64) -> bool {
        match self.reads.check(&format!("{visitor}:{id}")).await {
            Ok(()) => true,
            Err(AppError::RateLimited { .. }) => false,
            Err(err) => {
                // Not expected (the limiter falls back in-process): counted, not lost.
                tracing::warn!(%err, "visitor read check failed; counted");
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::header;

    use super::*;

    #[test]
    fn crawlers_are_told_from_browsers() {
        for crawler in [
            "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
            "Mozilla/5.0 (compatible; Baiduspider/2.0; +http://www.baidu.com/search/spider.html)",
            "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
            "Twitterbot/1.0",
            "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.1)",
            "Sogou web spider/4.0(+http://www.sogou.com/docs/help/webmasters.htm#07)",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 HeadlessChrome/120.0 Safari/537.36",
            "",
        ] {
            assert!(is_crawler(crawler), "{crawler:?}");
        }
        for browser in [
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 MicroMessenger/8.0.42",
            "Mozilla/5.0 (Linux; Android 13; CUBOT P60) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0 Mobile Safari/537.36",
        ] {
            assert!(!is_crawler(browser), "{browser:?}");
        }
    }

    #[test]
    fn a_visitor_is_its_cookie_or_else_its_address_and_browser() {
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::USER_AGENT, HeaderValue::from_static("Firefox"));
        let (first, set) = identify(&headers, ip);
        assert!(set);
        assert_eq!(identify(&headers, ip), (first.clone(), true));
        // Another browser at the same address is another visitor.
        let mut other = headers.clone();
        other.insert(header::USER_AGENT, HeaderValue::from_static("Safari"));
        assert_ne!(identify(&other, ip).0, first);
        // With the cookie the answer set, the same visitor from anywhere.
        let cookie = set_cookie(&first).unwrap();
        let pair = cookie
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {pair}")).unwrap(),
        );
        assert_eq!(
            identify(&headers, "198.51.100.1".parse().unwrap()),
            (first, false)
        );
        // A cookie this module did not set is ignored.
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("webook_visitor=forged"),
        );
        assert!(identify(&headers, ip).1);
    }
}
