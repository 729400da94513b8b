//! What the clients of outside providers (SMS, WeChat, WeChat Pay) share: [`send`], which sends
//! a request as a traced outgoing call (a client span, the `traceparent` header), and how HTTP
//! failures are told: a request that got no whole answer described with its causes — but never
//! with its URL, whose query may hold a secret (Alibaba's SMS query holds the login code, a
//! WeChat Pay bill's download URL its token); the span names the host only, for the same
//! reason.

use tracing::Instrument;

/// Sends `request`. When traces are exported ([`platform::tracing_otlp`]) the call is a client
/// span under the current one, named by its method and host, and the request carries its
/// `traceparent`; otherwise it is a plain `send`.
pub async fn send(request: reqwest::RequestBuilder) -> reqwest::Result<reqwest::Response> {
    if !platform::tracing_otlp::enabled() {
        return request.send().await;
    }
    let (client, request) = request.build_split();
    let mut request = request?;
    let host = request.url().host_str().unwrap_or_default().to_owned();
    let span = platform::tracing_otlp::http_client_span(request.method().as_str(), &host);
    platform::tracing_otlp::inject(&span, request.headers_mut());
    let response = client.execute(request).instrument(span.clone()).await;
    if let Ok(response) = &response {
        span.record("http.response.status_code", response.status().as_u16());
    }
    response
}

/// Why `error` left no (whole) answer: connecting, a cut-short answer, or the request itself,
/// followed by the chain of causes; the URL left out. Callers check
/// [`reqwest::Error::is_timeout`] first: a timeout is theirs to name.
pub fn describe_failure(error: reqwest::Error) -> String {
    let what = if error.is_connect() {
        "could not connect"
    } else if error.is_body() || error.is_decode() {
        "the answer was cut short"
    } else {
        "the request failed"
    };
    let error = error.without_url();
    let mut text = format!("{what}: {error}");
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
