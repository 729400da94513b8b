//! Users and sessions: sign-up, login, token refresh with rotation, logout, profile.
//!
//! Data flow: [`http`] parses requests (rate-limiting sign-up and login per client IP) and calls
//! [`UserService`], which validates input ([`model`]), hashes passwords off the async runtime
//! ([`password`]), reads and writes `users` ([`store`]), signs tokens ([`token`]) and keeps
//! session state — revocation and refresh generations — in the [`session`] store (in-process +
//! SQL when embedded, Redis in cluster mode).
//!
//! Other features authenticate requests by taking an [`AuthUser`] argument in their handlers, and
//! admin-only routes an [`admin::Admin`] (rights by user id: config `admins` or
//! `webook admin grant`).

pub mod admin;
mod http;
pub mod jobs;
pub mod model;
pub mod password;
pub mod service;
pub mod session;
pub mod settings;
pub mod store;
pub mod token;

pub use http::{router, Writer};
pub use jobs::PurgeExpiredSessions;
pub use service::{AuthUser, UserService};
