//! The recorded AWS event payloads under `tests/fixtures`, as the handlers receive them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]
#![allow(dead_code, reason = "each test crate uses what it needs")]

use lambda_http::Request;

/// The fixture `name`, as text.
pub(crate) fn fixture(name: &str) -> String {
    let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The HTTP fixture `name` with each `from` replaced by its `to`, as the request the
/// start and webhook functions receive.
pub(crate) fn http_event(name: &str, replacements: &[(&str, &str)]) -> Request {
    let mut json = fixture(name);
    for (from, to) in replacements {
        json = json.replace(from, to);
    }
    lambda_http::request::from_str(&json).expect("an HTTP API v2 / function URL event")
}
