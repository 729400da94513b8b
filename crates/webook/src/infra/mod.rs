//! Infrastructure shared by every feature: the SQL pool and migrations ([`db`]), the Redis
//! connection of cluster mode ([`redis`]), logging and metrics ([`telemetry`]), the HTTP
//! server ([`serve`]: connection limits) and its middleware stack ([`http`], with [`cors`]), client IPs ([`client_ip`]), rate limits
//! ([`rate_limit`]), the periodic jobs ([`jobs`]), writes that outlive their request
//! ([`detached`]), one embedded server per database ([`instance_lock`]), CPU-bound work off the async workers ([`cpu`]) and the rules of free-text
//! fields ([`text`]).
//! Feature modules use these through [`crate::app::AppState`];
//! nothing here knows about articles or users.

pub mod cache;
pub mod client_ip;
pub mod cors;
pub mod cpu;
pub mod db;
pub mod detached;
pub mod events;
pub mod http;
pub mod instance_lock;
pub mod jobs;
pub mod rate_limit;
pub mod redis;
pub mod serve;
pub mod telemetry;
pub mod text;

/// Returns `url` with any password replaced by `***`, for logs, errors and `--print-config`.
/// Works on malformed URLs too (they are the ones that end up in error messages).
pub fn redact_url(url: &str) -> String {
    if let Ok(mut parsed) = url::Url::parse(url) {
        if parsed.password().is_some() && parsed.set_password(Some("***")).is_ok() {
            return parsed.to_string();
        }
        if parsed.password().is_none() {
            return url.to_owned();
        }
    }
    // Unparseable: blank everything between the first ':' of the userinfo and its '@'.
    let Some(authority_start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority = &url[authority_start..];
    let authority_end = authority.find('/').unwrap_or(authority.len());
    let Some(at) = authority[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match authority[..at].find(':') {
        Some(colon) => format!(
            "{}***{}",
            &url[..authority_start + colon + 1],
            &url[authority_start + at..]
        ),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redact_url_hides_only_the_password() {
        assert_eq!(
            redact_url("postgres://user:secret@db:5432/webook"),
            "postgres://user:***@db:5432/webook"
        );
        assert_eq!(
            redact_url("redis://:pw@127.0.0.1/"),
            "redis://:***@127.0.0.1/"
        );
        assert_eq!(
            redact_url("sqlite://./data/webook.db"),
            "sqlite://./data/webook.db"
        );
        assert_eq!(redact_url("not a url"), "not a url");
        assert_eq!(
            redact_url("postgres://u:hunter2@[bad/db"),
            "postgres://u:***@[bad/db"
        );
        assert_eq!(redact_url("redis://:p@ss@host:1/"), "redis://:***@host:1/");
    }
}
