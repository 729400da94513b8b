//! Executors: what a row of `jobs` runs — the [`Executor`] trait and the [`Executors`] registry
//! an instance looks them up in. The `http` executor is in `sql/http.rs`.

use std::{collections::BTreeMap, sync::Arc};

use async_trait::async_trait;

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
///
/// A job names its executor and carries its configuration (`cfg`, JSON); the instance looks the
/// executor up in this registry. An instance only claims jobs whose executor it has, so a worker
/// without the `report` executor leaves report jobs to the ones that do.
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
