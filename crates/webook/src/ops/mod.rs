//! Operations endpoints: liveness (`/healthz`), readiness (`/readyz`: the database and, in
//! cluster mode, Redis answer) and Prometheus metrics (`/metrics`). With `debug_endpoints` on,
//! also `/debug/sleep` and `/debug/panic`, which the process tests use to observe graceful
//! shutdown and panic handling in a real binary.

mod http;

pub use http::router;
