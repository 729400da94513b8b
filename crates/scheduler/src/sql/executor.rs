//! Executors: what a row of `jobs` runs. A job names its executor and carries its configuration
//! (`cfg`, JSON); the instance looks the executor up in its [`Executors`] registry. An instance
//! only claims jobs whose executor it has, so a worker without the `ranking` executor leaves
//! ranking jobs to the ones that do.
//!
//! [`HttpExecutor`] (`http`) is the seeds' "scheduling = calling an endpoint": it sends one request
//! per run with headers `x-webook-job`, `x-webook-scheduled-at` (ms) and `x-webook-token`, so the
//! receiver can deduplicate by fire time and refuse stale holders by token. A non-2xx answer or a
//! timeout fails the run.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use anyhow::{bail, Context};
use async_trait::async_trait;
use serde::Deserialize;

use crate::{job::JobContext, sql::model::JobRow};

/// Runs jobs of one kind.
#[async_trait]
pub trait Executor: Send + Sync + 'static {
    /// The name jobs refer to it by.
    fn name(&self) -> &str;

    /// Checks a job's configuration when the job is created; the message is shown to the user.
    fn check_cfg(&self, cfg: &serde_json::Value) -> Result<(), String>;

    /// Runs `job` once for `ctx.scheduled_at()`.
    async fn execute(&self, job: &JobRow, ctx: JobContext) -> anyhow::Result<()>;
}

/// The executors this instance has, by name.
#[derive(Clone, Default)]
pub struct Executors {
    by_name: BTreeMap<String, Arc<dyn Executor>>,
}

impl std::fmt::Debug for Executors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}

impl Executors {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `executor` (replacing one of the same name).
    pub fn register(&mut self, executor: impl Executor) {
        self.by_name
            .insert(executor.name().to_owned(), Arc::new(executor));
    }

    /// The executor called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Executor>> {
        self.by_name.get(name).cloned()
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.by_name.keys().map(String::as_str).collect()
    }

    /// Checks that `executor` exists and accepts `cfg` (JSON text).
    pub fn check(&self, executor: &str, cfg: &str) -> Result<(), String> {
        let Some(found) = self.get(executor) else {
            return Err(format!(
                "unknown executor {executor:?}; available: {}",
                self.names().join(", ")
            ));
        };
        let cfg: serde_json::Value =
            serde_json::from_str(cfg).map_err(|err| format!("cfg is not valid JSON: {err}"))?;
        found.check_cfg(&cfg)
    }
}

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
    fn parse(cfg: &serde_json::Value) -> Result<Self, String> {
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
        Ok(parsed)
    }
}

/// Calls a URL per run (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct HttpExecutor {
    client: reqwest::Client,
}

impl HttpExecutor {
    /// An executor with its own connection pool.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Executor for HttpExecutor {
    fn name(&self) -> &str {
        "http"
    }

    fn check_cfg(&self, cfg: &serde_json::Value) -> Result<(), String> {
        HttpCfg::parse(cfg).map(|_| ())
    }

    async fn execute(&self, job: &JobRow, ctx: JobContext) -> anyhow::Result<()> {
        let cfg: serde_json::Value = serde_json::from_str(&job.cfg).context("job cfg")?;
        let cfg = HttpCfg::parse(&cfg).map_err(anyhow::Error::msg)?;
        let method = reqwest::Method::from_bytes(cfg.method.as_bytes())?;
        let scheduled_at = ctx.scheduled_at().timestamp_millis();
        let request = self
            .client
            .request(method, &cfg.url)
            .timeout(Duration::from_millis(cfg.timeout_ms))
            .header("x-webook-job", &job.name)
            .header("x-webook-scheduled-at", scheduled_at.to_string())
            .header("x-webook-token", ctx.fencing_token().to_string())
            .send();
        let response = tokio::select! {
            response = request => response.with_context(|| format!("calling {}", cfg.url))?,
            () = ctx.cancelled() => bail!("cancelled before {} answered", cfg.url),
        };
        let status = response.status();
        if !status.is_success() {
            bail!("{} answered {status}", cfg.url);
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn http_cfg_is_checked_with_clear_messages() {
        let mut executors = Executors::new();
        executors.register(HttpExecutor::new());
        assert_eq!(
            executors.check("http", r#"{"url": "http://127.0.0.1:9/hook"}"#),
            Ok(())
        );
        assert_eq!(
            executors.check("ranking", "{}"),
            Err("unknown executor \"ranking\"; available: http".to_owned())
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
}
