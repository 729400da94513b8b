//! The `http` executor ([`HttpExecutor`], feature `http`): calls a URL per run, announcing the
//! run in headers, refusing internal addresses unless a [`TargetPolicy`] allows them.

use std::{net::IpAddr, sync::Arc, time::Duration};

use anyhow::{bail, Context};
use async_trait::async_trait;
use serde::Deserialize;

use crate::{
    job::JobContext,
    sql::{executor::Executor, model::JobRow, target::TargetPolicy},
};

/// Configuration of an `http` job.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpCfg {
    url: String,
    #[serde(default = "default_method")]
    method: String,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn default_method() -> String {
    "POST".to_owned()
}

fn default_timeout_ms() -> u64 {
    5000
}

impl HttpCfg {
    /// Parses and checks `cfg`, including that a literal IP in the URL is allowed by `policy`.
    fn parse(cfg: &serde_json::Value, policy: &TargetPolicy) -> Result<Self, String> {
        let parsed: HttpCfg = serde_json::from_value(cfg.clone())
            .map_err(|err| format!("invalid http cfg: {err}"))?;
        let url = reqwest::Url::parse(&parsed.url)
            .map_err(|err| format!("invalid http cfg: url {:?}: {err}", parsed.url))?;
        if url.scheme() != "http" {
            return Err(format!(
                "invalid http cfg: url {:?}: only http:// is supported (this build has no TLS; \
                 put a TLS-terminating proxy in front)",
                parsed.url
            ));
        }
        if !matches!(parsed.method.as_str(), "GET" | "POST" | "PUT") {
            return Err(format!(
                "invalid http cfg: method {:?}: use GET, POST or PUT",
                parsed.method
            ));
        }
        if parsed.timeout_ms == 0 || parsed.timeout_ms > 3_600_000 {
            return Err("invalid http cfg: timeout_ms must be 1..=3600000".to_owned());
        }
        if let Some(ip) = literal_ip(&url) {
            policy
                .check(&parsed.url, ip)
                .map_err(|why| format!("invalid http cfg: url {why}"))?;
        }
        Ok(parsed)
    }
}

/// The IP a URL names literally, if it does (no resolver is asked for those).
fn literal_ip(url: &reqwest::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(_) => None,
    }
}

/// Resolves host names with the system resolver and refuses any whose addresses the policy
/// does not allow (all of them must be allowed: the client may try any).
struct GuardedResolver {
    policy: Arc<TargetPolicy>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for address in &addresses {
                policy.check(&host, address.ip())?;
            }
            let addresses: reqwest::dns::Addrs = Box::new(addresses.into_iter());
            Ok(addresses)
        })
    }
}

/// The `http` executor: scheduling as calling an endpoint.
///
/// It sends one request per run with headers `<prefix>job`, `<prefix>scheduled-at` (ms) and
/// `<prefix>token` — the prefix is the caller's, e.g. `x-myapp-` — so the receiver can
/// deduplicate by fire time and refuse stale holders by token. A non-2xx answer (redirects are
/// not followed) or a timeout fails the run. Internal addresses are refused unless allowed
/// ([`TargetPolicy`]): literal IPs when the job is created and when it runs, every address a host
/// name resolves to at each call.
///
/// A job's `cfg` is `{"url": "http://…", "method": "POST", "timeout_ms": 5000}`; `method` (`GET`,
/// `POST` or `PUT`) and `timeout_ms` (at most an hour) are optional, and only `http://` URLs are
/// supported.
#[derive(Debug, Clone)]
pub struct HttpExecutor {
    client: reqwest::Client,
    policy: Arc<TargetPolicy>,
    headers: RunHeaders,
    /// Adds headers of the run's context to each call (a trace context), if set.
    propagate: Option<fn(&mut reqwest::header::HeaderMap)>,
}

/// The names of the headers a run is announced with.
#[derive(Debug, Clone)]
struct RunHeaders {
    job: reqwest::header::HeaderName,
    scheduled_at: reqwest::header::HeaderName,
    token: reqwest::header::HeaderName,
}

impl RunHeaders {
    fn with_prefix(prefix: &str) -> anyhow::Result<Self> {
        let name = |suffix: &str| {
            reqwest::header::HeaderName::from_bytes(format!("{prefix}{suffix}").as_bytes())
                .with_context(|| format!("{prefix:?} is not a valid header name prefix"))
        };
        Ok(Self {
            job: name("job")?,
            scheduled_at: name("scheduled-at")?,
            token: name("token")?,
        })
    }
}

impl HttpExecutor {
    /// An executor with its own connection pool, calling public addresses and the internal
    /// ones `policy` allows, announcing each run in headers named `header_prefix` + `job`,
    /// `scheduled-at` and `token` (an error if that makes an invalid header name).
    pub fn new(policy: TargetPolicy, header_prefix: &str) -> anyhow::Result<Self> {
        let headers = RunHeaders::with_prefix(header_prefix)?;
        let policy = Arc::new(policy);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver {
                policy: policy.clone(),
            }))
            .build()
            .context("building the http executor's client")?;
        Ok(Self {
            client,
            policy,
            headers,
            propagate: None,
        })
    }

    /// Has `propagate` add headers to every call, inside the run's span: the application's
    /// trace context (`traceparent`), so the called service continues the run's trace.
    pub fn with_propagation(mut self, propagate: fn(&mut reqwest::header::HeaderMap)) -> Self {
        self.propagate = Some(propagate);
        self
    }
}

#[async_trait]
impl Executor for HttpExecutor {
    fn name(&self) -> &str {
        "http"
    }

    fn check_cfg(&self, cfg: &serde_json::Value) -> Result<(), String> {
        HttpCfg::parse(cfg, &self.policy).map(|_| ())
    }

    async fn execute(&self, job: &JobRow, ctx: JobContext) -> anyhow::Result<()> {
        let cfg: serde_json::Value = serde_json::from_str(&job.cfg).context("job cfg")?;
        let cfg = HttpCfg::parse(&cfg, &self.policy).map_err(anyhow::Error::msg)?;
        let method = reqwest::Method::from_bytes(cfg.method.as_bytes())?;
        let scheduled_at = ctx.scheduled_at().timestamp_millis();
        let mut request = self
            .client
            .request(method, &cfg.url)
            .timeout(Duration::from_millis(cfg.timeout_ms))
            .header(&self.headers.job, &job.name)
            .header(&self.headers.scheduled_at, scheduled_at.to_string())
            .header(&self.headers.token, ctx.fencing_token().to_string());
        if let Some(propagate) = self.propagate {
            let mut headers = reqwest::header::HeaderMap::new();
            propagate(&mut headers);
            request = request.headers(headers);
        }
        let request = request.send();
        // Errors are recorded (the run's row, the log, a trace): never with the query.
        let url = shown(&cfg.url);
        let response = tokio::select! {
            // `{:#}` keeps the resolver's refusal, which reqwest wraps in its own error.
            response = request => response.map_err(|err| anyhow::anyhow!("calling {url}: {:#}", anyhow::Error::from(err.without_url())))?,
            () = ctx.cancelled() => bail!("cancelled before {url} answered"),
        };
        let status = response.status();
        if !status.is_success() {
            bail!("{url} answered {status}");
        }
        Ok(())
    }
}

/// `url` as errors show it: without a password, query or fragment (a query may hold a token).
fn shown(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut url) => {
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        }
        Err(_) => "the job's url".to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn errors_show_the_url_without_its_secrets() {
        assert_eq!(
            shown("https://user:pw@hooks.example/run?token=s3cret#x"),
            "https://user@hooks.example/run"
        );
        assert_eq!(shown("not a url"), "the job's url");
    }
    use crate::sql::Executors;

    #[test]
    fn http_cfg_is_checked_with_clear_messages() {
        let mut executors = Executors::new();
        executors.register(
            HttpExecutor::new(
                TargetPolicy::allowing(vec!["127.0.0.0/8".parse().unwrap()]),
                "x-test-",
            )
            .unwrap(),
        );
        assert_eq!(
            executors.check("http", r#"{"url": "http://127.0.0.1:9/hook"}"#),
            Ok(())
        );
        let refused = executors
            .check(
                "http",
                r#"{"url": "http://169.254.169.254/latest/meta-data/"}"#,
            )
            .unwrap_err();
        assert!(
            refused.contains("internal address 169.254.169.254"),
            "{refused}"
        );
        assert!(executors
            .check("http", r#"{"url": "http://[::ffff:10.0.0.1]/"}"#)
            .is_err());
        assert_eq!(
            executors.check("report", "{}"),
            Err("unknown executor \"report\"; available: http".to_owned())
        );
        assert!(executors
            .check("http", "{")
            .unwrap_err()
            .starts_with("cfg is not valid JSON"));
        assert!(executors
            .check("http", r#"{"url": "https://example.com"}"#)
            .unwrap_err()
            .contains("only http://"));
        assert!(executors
            .check("http", r#"{"url": "http://x/", "method": "DELETE"}"#)
            .unwrap_err()
            .contains("method"));
        assert!(executors
            .check("http", r#"{"url": "http://x/", "retries": 3}"#)
            .unwrap_err()
            .contains("unknown field"));
    }

    fn job(url: &str) -> JobRow {
        JobRow {
            id: 1,
            name: "hook".to_owned(),
            cron: "@every 1m".to_owned(),
            timezone: "UTC".to_owned(),
            executor: "http".to_owned(),
            cfg: serde_json::json!({ "url": url }).to_string(),
            status: crate::sql::JobStatus::Running,
            next_time: 0,
            scheduled_at: 0,
            trigger_at: 0,
            trigger_trace: String::new(),
            utime: 0,
            version: 1,
            owner: String::new(),
            misfire: crate::sql::Misfire::FireOnce,
            overlap: crate::sql::OverlapPolicy::Forbid,
            timeout_ms: 5_000,
            ctime: 0,
        }
    }

    fn context() -> JobContext {
        JobContext::new(
            chrono::Utc::now(),
            tokio_util::sync::CancellationToken::new(),
            None,
        )
    }

    #[tokio::test]
    async fn a_host_name_that_resolves_to_an_internal_address_is_refused_when_called() {
        let executor = HttpExecutor::new(TargetPolicy::public_only(), "x-test-").unwrap();
        // Passes the creation check (a name, not an IP) but resolves to loopback.
        executor
            .check_cfg(&serde_json::json!({"url": "http://localhost:9/hook"}))
            .unwrap();
        let err = executor
            .execute(&job("http://localhost:9/hook"), context())
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("internal address"), "{err:#}");
    }

    #[tokio::test]
    async fn a_run_is_announced_in_headers_under_the_callers_prefix() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (seen, request) = tokio::sync::oneshot::channel::<String>();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = vec![0u8; 4096];
            let read = socket.read(&mut buffer).await.unwrap();
            socket
                .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            seen.send(String::from_utf8_lossy(&buffer[..read]).to_lowercase())
                .unwrap();
        });
        let executor = HttpExecutor::new(
            TargetPolicy::allowing(vec!["127.0.0.1/32".parse().unwrap()]),
            "x-acme-",
        )
        .unwrap();
        executor
            .execute(&job(&format!("http://{address}/hook")), context())
            .await
            .unwrap();
        let request = request.await.unwrap();
        for header in ["x-acme-job: ", "x-acme-scheduled-at: ", "x-acme-token: "] {
            assert!(request.contains(header), "{header} missing in {request}");
        }
        let custom: Vec<&str> = request.lines().filter(|l| l.starts_with("x-")).collect();
        assert!(
            custom.len() == 3 && custom.iter().all(|l| l.starts_with("x-acme-")),
            "only the three prefixed headers are added: {request}"
        );
    }

    #[test]
    fn a_prefix_that_makes_no_header_name_is_refused() {
        let err = HttpExecutor::new(TargetPolicy::public_only(), "x bad ").unwrap_err();
        assert!(err.to_string().contains("header name prefix"), "{err:#}");
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await.unwrap();
            socket
                .write_all(b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
        });
        let executor = HttpExecutor::new(
            TargetPolicy::allowing(vec!["127.0.0.1/32".parse().unwrap()]),
            "x-test-",
        )
        .unwrap();
        let err = executor
            .execute(&job(&format!("http://{address}/hook")), context())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("302"), "{err:#}");
    }
}
