//! Large values on demand, as the API refers to them. A value over the engine's inline
//! limit is kept in the artifact store; the run view and the timeline show a
//! [`ValueRef`] in its place (its digest, size and media type, and where to fetch it:
//! [`value_path`]), and `GET /runs/{id}/values/{sha256}` serves its bytes to the run's
//! own tenant. Every path segment the API's paths carry is encoded by [`path_segment`],
//! the server's links and the client's requests alike.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The key under which a large value's reference stands in for it:
/// `{"value_ref": {"sha256", "size", "media_type", "href"}}`.
pub const VALUE_REF: &str = "value_ref";

/// A large value kept in the artifact store, in place of the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ValueRef {
    /// Lower-case hex SHA-256 of the value's bytes.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its media type (`application/json` for values).
    pub media_type: String,
    /// Where to fetch it: `/runs/{id}/values/{sha256}`.
    pub href: String,
}

impl ValueRef {
    /// `{"value_ref": {...}}`, as the API shows it in place of the value.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ VALUE_REF: self })
    }
}

/// The path a run's large value is served at.
pub fn value_path(run_id: &str, sha256: &str) -> String {
    format!("/runs/{}/values/{sha256}", path_segment(run_id))
}

/// What a path segment keeps as it is: RFC 3986's unreserved characters. Everything
/// else (`/`, `#`, `?`, `%`, spaces...) is percent-encoded, so a position such as
/// `3#1/2` or a caller's own run id (an idempotent start keeps it as given) stays one
/// segment.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `segment` percent-encoded as one path segment of an API path (the server's links,
/// the client's requests).
pub fn path_segment(segment: &str) -> String {
    percent_encoding::utf8_percent_encode(segment, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_segment_keeps_unreserved_characters_and_encodes_the_rest() {
        assert_eq!(path_segment("run-1_a.b~c"), "run-1_a.b~c");
        assert_eq!(path_segment("3#1/2"), "3%231%2F2");
        assert_eq!(path_segment("a b%?é"), "a%20b%25%3F%C3%A9");
        assert_eq!(value_path("run 1", "ab"), "/runs/run%201/values/ab");
    }
}
