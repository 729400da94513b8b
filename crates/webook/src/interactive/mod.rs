//! Reads, likes and collects of any object (`biz` + `biz_id`): exact counters under concurrency,
//! idempotent actions, and reads counted in batches from an event stream.
//!
//! Data flow: feature handlers (articles today) call [`InteractiveService`]; likes and collects
//! go straight to [`store`] in one transaction each; reads become events on the event stream,
//! which the read counter applies batch by batch. Counts are served through a versioned cache.
//! See [`service`] for the rules.

pub mod model;
pub mod service;
pub mod store;

pub use model::{Counts, UserFlags};
pub use service::InteractiveService;
