//! What the clients of outside providers (SMS, WeChat Pay) share about HTTP failures: a request
//! that got no whole answer described with its causes — but never with its URL, whose query
//! may hold a secret (Alibaba's SMS query holds the login code, a WeChat Pay bill's download
//! URL its token).

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
