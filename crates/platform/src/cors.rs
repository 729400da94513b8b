//! CORS as `API.md` specifies it: the configured origins, credentials allowed, request headers
//! `Content-Type` and `Authorization`, the token headers exposed, preflights answered without a
//! token.
//!
//! [`crate::http::Observe`] asks [`CorsPolicy::preflight`] before routing a request on and
//! [`CorsPolicy::decorate`] on every response. Every header value is built once here, so a
//! request costs a header lookup and, for allowed origins, a few reference-counted clones (the
//! stock `tower-http` layer cloned its whole configuration per request).

use anyhow::Context;
use axum::{
    body::Body,
    http::{header, HeaderMap, HeaderValue, Method},
    response::Response,
};

use crate::headers::{ACCESS_TOKEN_HEADER, REFRESH_TOKEN_HEADER};

/// Which origins may call the API from a browser, and what they may send and read.
#[derive(Debug, Clone)]
pub struct CorsPolicy {
    origins: Vec<HeaderValue>,
    allow_methods: HeaderValue,
    allow_headers: HeaderValue,
    expose_headers: HeaderValue,
    max_age: HeaderValue,
    vary: HeaderValue,
}

impl CorsPolicy {
    /// The policy for `origins`. A wildcard is refused: browsers reject it together with
    /// credentials, so it could only ever break the frontend.
    pub fn new(origins: &[String]) -> anyhow::Result<Self> {
        let origins = origins
            .iter()
            .map(|origin| {
                anyhow::ensure!(
                    origin != "*",
                    "invalid cors_origins (WEBOOK_CORS_ORIGINS): \"*\" cannot be used with \
                     credentials; list the frontend origins"
                );
                check_origin(origin)?;
                HeaderValue::from_str(origin)
                    .with_context(|| format!("invalid cors_origins entry {origin:?}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            origins,
            allow_methods: HeaderValue::from_static("GET,POST,PUT,DELETE,OPTIONS"),
            allow_headers: HeaderValue::from_static("content-type,authorization"),
            expose_headers: HeaderValue::from_str(&format!(
                "{ACCESS_TOKEN_HEADER},{REFRESH_TOKEN_HEADER}"
            ))
            .context("CORS exposed headers")?,
            max_age: HeaderValue::from_static("600"),
            vary: HeaderValue::from_static(
                "origin, access-control-request-method, access-control-request-headers",
            ),
        })
    }

    /// The request's `Origin` when it is one of the configured origins.
    pub fn allowed_origin(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        self.origins.contains(origin).then(|| origin.clone())
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`), which never
    /// reaches a handler; `None` for any other request.
    pub fn preflight(&self, method: &Method, request_headers: &HeaderMap) -> Option<Response> {
        if method != Method::OPTIONS
            || !request_headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return None;
        }
        let mut response = Response::new(Body::empty()); // 200
        let headers = response.headers_mut();
        if self.grant(headers, self.allowed_origin(request_headers)) {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                self.allow_methods.clone(),
            );
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                self.allow_headers.clone(),
            );
            headers.insert(header::ACCESS_CONTROL_MAX_AGE, self.max_age.clone());
        }
        Some(response)
    }

    /// Adds the CORS headers of an actual request from `origin` (see [`Self::allowed_origin`])
    /// to its response.
    pub fn decorate(&self, origin: Option<HeaderValue>, response: &mut Response) {
        let headers = response.headers_mut();
        if self.grant(headers, origin) {
            headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                self.expose_headers.clone(),
            );
        }
    }

    /// The headers every answer carries: the grant to `origin` (an allowed one) with
    /// credentials, and `Vary` so caches keep answers to different origins apart. Returns
    /// whether it granted.
    fn grant(&self, headers: &mut HeaderMap, origin: Option<HeaderValue>) -> bool {
        headers.append(header::VARY, self.vary.clone());
        let Some(origin) = origin else {
            return false;
        };
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        true
    }
}

/// An origin as browsers send it: `http(s)://host[:port]`, lower case, no path or trailing
/// slash. Anything else could never match a request's `Origin` header, so it is refused at
/// start-up rather than silently blocking the frontend.
fn check_origin(origin: &str) -> anyhow::Result<()> {
    let invalid = |why: String| {
        anyhow::anyhow!("invalid cors_origins (WEBOOK_CORS_ORIGINS) entry {origin:?}: {why}")
    };
    let parsed = url::Url::parse(origin).map_err(|err| {
        invalid(format!(
            "not a URL ({err}); expected e.g. https://webook.example.com"
        ))
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(invalid(
            "expected http://HOST[:PORT] or https://HOST[:PORT]".to_owned(),
        ));
    }
    let canonical = parsed.origin().ascii_serialization();
    if canonical != origin {
        return Err(invalid(format!(
            "browsers send origins as {canonical:?} (no path, no trailing slash, lower case)"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use axum::http::{request::Parts, Request};

    use super::*;

    fn preflight(policy: &CorsPolicy, request: &Parts) -> Option<Response> {
        policy.preflight(&request.method, &request.headers)
    }

    fn policy() -> CorsPolicy {
        CorsPolicy::new(&["http://localhost:3000".to_owned()]).unwrap()
    }

    fn parts(method: Method, headers: &[(header::HeaderName, &'static str)]) -> Parts {
        let mut request = Request::builder().method(method).uri("/x");
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn origins_that_no_browser_sends_are_refused() {
        for good in [
            "http://localhost:3000",
            "https://webook.example.com",
            "http://[::1]:8080",
        ] {
            CorsPolicy::new(&[good.to_owned()]).unwrap();
        }
        for (bad, why) in [
            ("not a url", "not a URL"),
            ("ftp://example.com", "expected http"),
            ("https://example.com/", "no trailing slash"),
            ("https://example.com/app", "no path"),
            ("HTTPS://Example.com", "lower case"),
            ("*", "credentials"),
        ] {
            let err = CorsPolicy::new(&[bad.to_owned()]).unwrap_err().to_string();
            assert!(
                err.contains("cors_origins") && err.contains(why),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn only_options_with_a_requested_method_is_a_preflight() {
        let policy = policy();
        assert!(preflight(
            &policy,
            &parts(
                Method::OPTIONS,
                &[(header::ORIGIN, "http://localhost:3000")]
            )
        )
        .is_none());
        assert!(preflight(
            &policy,
            &parts(
                Method::POST,
                &[(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")]
            )
        )
        .is_none());
        let foreign = preflight(
            &policy,
            &parts(
                Method::OPTIONS,
                &[
                    (header::ORIGIN, "http://evil.example"),
                    (header::ACCESS_CONTROL_REQUEST_METHOD, "POST"),
                ],
            ),
        )
        .unwrap();
        assert!(!foreign
            .headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
        assert!(foreign.headers().contains_key(header::VARY));
    }

    #[test]
    fn responses_to_other_origins_carry_vary_but_no_grant() {
        let policy = policy();
        let mut response = Response::new(Body::empty());
        let headers = parts(Method::GET, &[(header::ORIGIN, "http://evil.example")]).headers;
        policy.decorate(policy.allowed_origin(&headers), &mut response);
        assert!(!response
            .headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
        assert_eq!(
            response.headers()[header::VARY],
            "origin, access-control-request-method, access-control-request-headers"
        );
    }

    #[test]
    fn a_wildcard_and_invalid_origins_are_refused() {
        assert!(CorsPolicy::new(&["*".to_owned()]).is_err());
        assert!(CorsPolicy::new(&["http://bad\norigin".to_owned()]).is_err());
    }
}
