//! Operations endpoints: liveness (`/healthz`), readiness (`/readyz`: the database answers and
//! takes a write, and, in cluster mode, Redis answers) and Prometheus metrics (`/metrics`, on
//! `ops_listen` instead of the API port when that is set). With `debug_endpoints` on,
//! also `/debug/sleep` and `/debug/panic`, which the process tests use to observe graceful
//! shutdown and panic handling in a real binary.

mod http;

pub use http::{router, Endpoints};
