//! Case-insensitive header lookup over whatever the caller holds.

/// Read access to request headers, looked up by name without regard to ASCII case.
///
/// Implemented for [`http::HeaderMap`] and for lists of `(name, value)` pairs
/// (`[(K, V)]`, `[(K, V); N]`, `Vec<(K, V)>` with `K: AsRef<str>`, `V: AsRef<[u8]>`,
/// so `(String, String)` and `(&str, &str)` both work). When a name occurs more than
/// once, the first occurrence wins.
pub trait Headers {
    /// The raw value of the first header called `name` (any ASCII case), if any.
    fn header(&self, name: &str) -> Option<&[u8]>;
}

impl<H: Headers + ?Sized> Headers for &H {
    fn header(&self, name: &str) -> Option<&[u8]> {
        (**self).header(name)
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>> Headers for [(K, V)] {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(k, _)| k.as_ref().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>, const N: usize> Headers for [(K, V); N] {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.as_slice().header(name)
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>> Headers for Vec<(K, V)> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.as_slice().header(name)
    }
}

impl Headers for http::HeaderMap {
    fn header(&self, name: &str) -> Option<&[u8]> {
        // `HeaderMap` stores names lowercased; `get` with a `&str` lowercases the key.
        self.get(name).map(http::HeaderValue::as_bytes)
    }
}

/// The value of a required header as text, trimmed of surrounding whitespace.
pub(crate) fn required<'h, H: Headers + ?Sized>(
    headers: &'h H,
    name: &'static str,
) -> Result<&'h str, crate::SignatureError> {
    optional(headers, name)?.ok_or(crate::SignatureError::MissingHeader(name))
}

/// The value of an optional header as text, trimmed; present but not UTF-8 is malformed.
pub(crate) fn optional<'h, H: Headers + ?Sized>(
    headers: &'h H,
    name: &'static str,
) -> Result<Option<&'h str>, crate::SignatureError> {
    headers
        .header(name)
        .map(|raw| {
            std::str::from_utf8(raw)
                .map(str::trim)
                .map_err(|_| crate::SignatureError::Malformed("header value (not UTF-8)"))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_looked_up_without_regard_to_case_and_the_first_wins() {
        // GIVEN headers spelled in mixed case, one name twice
        let headers = vec![
            ("Webhook-ID".to_owned(), "a".to_owned()),
            ("webhook-id".to_owned(), "b".to_owned()),
        ];
        // WHEN / THEN
        assert_eq!(headers.header("webhook-id"), Some(&b"a"[..]));
        assert_eq!(headers.header("WEBHOOK-ID"), Some(&b"a"[..]));
        assert_eq!(headers.header("webhook-timestamp"), None);
        assert_eq!([("X-A", "1")].header("x-a"), Some(&b"1"[..]));
    }

    #[test]
    fn a_header_map_is_looked_up_without_regard_to_case() {
        let mut map = http::HeaderMap::new();
        map.insert("X-Hub-Signature-256", "sha256=00".parse().unwrap());
        assert_eq!(map.header("x-hub-signature-256"), Some(&b"sha256=00"[..]));
        assert_eq!(map.header("X-HUB-SIGNATURE-256"), Some(&b"sha256=00"[..]));
    }

    #[test]
    fn a_value_that_is_not_utf8_is_malformed_and_an_absent_one_is_missing() {
        let headers: [(&str, &[u8]); 1] = [("webhook-id", &[0xff, 0xfe])];
        assert!(matches!(
            required(&headers, "webhook-id"),
            Err(crate::SignatureError::Malformed(_))
        ));
        assert_eq!(
            required(&headers, "webhook-timestamp"),
            Err(crate::SignatureError::MissingHeader("webhook-timestamp"))
        );
    }
}
