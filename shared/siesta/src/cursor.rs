//! Opaque list cursors.
//!
//! A store pages by its own position (the embedded store by creation time and id, the
//! DynamoDB one by the index's sort key, which contains `#`). Handed to a client as
//! is, such a position is neither opaque nor safe in a URL: a raw `#` starts the
//! fragment, so the next request silently loses the cursor. Every backend therefore
//! hands out the same form — the position hex-encoded, only `[0-9a-f]` — which a
//! client can put into a query string without escaping and must not interpret.

use crate::ports::StoreError;

/// The cursor a client is given for a store's `position`.
pub fn encode(position: &str) -> String {
    hex::encode(position.as_bytes())
}

/// The store position a client's `cursor` stands for; [`StoreError::Invalid`] when it
/// is not one this module made.
pub fn decode(cursor: &str) -> Result<String, StoreError> {
    hex::decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| StoreError::Invalid("malformed cursor".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_position_survives_the_round_trip_and_needs_no_url_escaping(position in ".*") {
            let cursor = encode(&position);
            prop_assert!(cursor.bytes().all(|b| b.is_ascii_hexdigit()), "{cursor}");
            prop_assert_eq!(decode(&cursor).unwrap(), position);
        }
    }

    #[test]
    fn a_cursor_that_was_not_made_here_is_malformed() {
        for bad in ["xyz", "abc", "ff", "1700000000000:run#1"] {
            assert!(matches!(decode(bad), Err(StoreError::Invalid(_))), "{bad}");
        }
    }
}
