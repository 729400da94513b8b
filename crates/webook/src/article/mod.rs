//! Articles: drafts, publishing, withdrawal, the author's views and the reader view.
//!
//! Data flow: [`http`] parses requests of logged-in users and calls [`ArticleService`], which
//! validates and sanitises input ([`model`]), writes both copies through [`store`] (one
//! transaction when both change), then keeps [`cache`] in step and emits `article_published` /
//! `article_withdrawn` events on the event stream for feed and search.

pub mod cache;
mod http;
pub mod model;
pub mod service;
pub mod store;

pub use http::router;
pub use service::ArticleService;
