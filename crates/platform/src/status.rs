//! What features report about themselves on `/readyz`, kept apart from the endpoints that serve
//! it ([`crate::ops`]) so the event stream and the feature registry can write to it without
//! depending on the operations routes.

use std::{collections::BTreeMap, sync::Arc};

/// What features report about themselves on `/readyz` (`data.details`), by name — e.g. the
/// search index being rebuilt: the process is ready and serves everything else meanwhile.
/// Cheap to clone; a short lock, never held across an await.
#[derive(Debug, Clone, Default)]
pub struct StatusBoard(Arc<std::sync::Mutex<BTreeMap<&'static str, String>>>);

impl StatusBoard {
    /// Sets what `name` reports.
    pub fn set(&self, name: &'static str, status: impl Into<String>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name, status.into());
    }

    /// Stops reporting `name` (it has nothing to say any more).
    pub fn remove(&self, name: &'static str) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(name);
    }

    /// Everything reported, by name.
    pub fn snapshot(&self) -> BTreeMap<&'static str, String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
