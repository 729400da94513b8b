//! The platform every webook feature stands on, held apart by the compiler: this crate names no
//! feature, and features depend on it, never the other way round.
//!
//! - storage: the SQL pool, dialects and migration runner ([`db`]), the platform's own tables
//!   ([`schema`]), Redis ([`redis`]), the
//!   two-level versioned cache ([`cache`]);
//! - events: the stream (in-process or Redis Streams), the transactional outbox that feeds it
//!   and the consumers' deduplication ([`events`]);
//! - HTTP conventions: the `{code, msg, data}` envelope and [`error::AppError`], the middleware
//!   stack with its `Observe` layer ([`http`]), who is calling ([`caller`]: anonymous, user,
//!   writer, admin, resolved through the one resolver sign-in installs), `Idempotency-Key`
//!   ([`idempotency`]), [`cors`] and the contract's header names ([`headers`]), client IPs
//!   ([`client_ip`]), rate
//!   limits ([`rate_limit`]), the server with its connection limits ([`serve`]), answers
//!   whose constant part is serialised and gzipped once ([`prerendered`]), answers served from
//!   memory ahead of the middleware ([`fast_path`]);
//! - operations: logging and metrics ([`telemetry`]), distributed tracing over OTLP
//!   ([`tracing_otlp`]), periodic jobs ([`jobs`]), writes that
//!   outlive their request ([`detached`]), one embedded server per database
//!   ([`instance_lock`]), CPU-bound work off the async workers ([`cpu`]), the rules of
//!   free-text fields ([`text`]), what features report on `/readyz` ([`status`]), the health
//!   gauges of the readiness probes and the data directory's free space ([`health`]);
//! - the configuration core ([`config`]): layering, one-line errors, secrets, and the
//!   [`config::Settings`] sections features bring;
//! - `testing` (feature `test-support`): fresh databases per backend, private Redis servers,
//!   TCP proxies, the backend matrix macro.
//!
//! Data flows one way: the application loads the [`config::Config`], opens these backends and
//! hands them to each feature's install; features use them and give back routes, jobs and
//! consumers.

#![allow(
    rustdoc::private_intra_doc_links,
    reason = "module docs are for the maintainers and link the private items they describe; \
              read them with `cargo doc --document-private-items`"
)]

pub mod cache;
pub mod caller;
pub mod client_ip;
pub mod config;
pub mod cors;
pub mod cpu;
pub mod db;
pub mod detached;
pub mod error;
pub mod events;
pub mod fast_path;
pub mod feature;
pub mod headers;
pub mod health;
pub mod http;
pub mod idempotency;
pub mod instance_lock;
pub mod jobs;
pub mod live;
pub mod openapi;
pub mod ops;
pub mod page;
pub mod prerendered;
pub mod rate_limit;
pub mod redis;
pub mod redis_probe;
pub mod schema;
pub mod serve;
pub mod status;
pub mod telemetry;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod text;
pub mod tracing_otlp;

pub use scheduler::sql::host_name;

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
