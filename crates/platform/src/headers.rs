//! The names of the headers the HTTP contract defines beside the standard ones: the tokens a
//! login or refresh answers with, which CORS exposes to the browser. A leaf, so that both the
//! middleware ([`crate::http`]) and the CORS policy ([`crate::cors`]) can name them.

/// Response header carrying a new access token (login, refresh).
pub const ACCESS_TOKEN_HEADER: &str = "x-jwt-token";
/// Response header carrying a new refresh token (login, refresh).
pub const REFRESH_TOKEN_HEADER: &str = "x-refresh-token";
