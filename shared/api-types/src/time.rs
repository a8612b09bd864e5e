//! Times at the API's edge. The engine keeps instants as milliseconds since the epoch
//! ([`Timestamp`]); the API shows every one of them as RFC 3339 in UTC to the
//! millisecond (`2027-01-15T08:00:00.123Z`) — run and wait views, timeline events and
//! the times in their details, dead letters — through [`Rfc3339`], whose OpenAPI schema
//! is a `date-time` string. Durations stay numbers with their unit in their name
//! (`HeartbeatTimeoutMs`, `NextAttemptDelayMs`).
//!
//! Read back ([`Rfc3339`]'s `Deserialize` and `FromStr`), a time is RFC 3339 with any
//! offset and precision (kept to the millisecond), or an integer of milliseconds since
//! the epoch, the form the API showed before; anything else is refused with a message
//! that names both forms.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use siesta::Timestamp;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::{PartialSchema, ToSchema};

/// The earliest instant RFC 3339 can write (its years have four digits):
/// `0000-01-01T00:00:00.000Z`.
const EARLIEST_MS: i64 = -62_167_219_200_000;
/// The latest: `9999-12-31T23:59:59.999Z`.
const LATEST_MS: i64 = 253_402_300_799_999;

/// An instant as the API shows it: RFC 3339 in UTC to the millisecond,
/// `2027-01-15T08:00:00.123Z`. One past what RFC 3339 can write (a timer set a
/// `Duration::MAX` away) is shown as its last instant, `9999-12-31T23:59:59.999Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rfc3339(pub Timestamp);

impl Rfc3339 {
    /// Milliseconds since the epoch.
    pub fn millis(self) -> i64 {
        self.0.millis()
    }
}

impl From<Timestamp> for Rfc3339 {
    fn from(t: Timestamp) -> Self {
        Rfc3339(t)
    }
}

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.millis().clamp(EARLIEST_MS, LATEST_MS);
        match DateTime::<Utc>::from_timestamp_millis(ms) {
            Some(t) => f.write_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true)),
            None => Err(fmt::Error),
        }
    }
}

/// A text that is not a time the API reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a time: give RFC 3339 (2027-01-15T08:00:00.123Z) or milliseconds since the epoch"
)]
pub struct NotATime(String);

impl FromStr for Rfc3339 {
    type Err = NotATime;

    /// RFC 3339 with any offset, or an integer of milliseconds since the epoch.
    fn from_str(text: &str) -> Result<Self, NotATime> {
        if let Ok(t) = DateTime::parse_from_rfc3339(text) {
            return Ok(Rfc3339(Timestamp(t.timestamp_millis())));
        }
        match text.parse::<i64>() {
            Ok(ms) => Ok(Rfc3339(Timestamp(ms))),
            Err(_) => Err(NotATime(text.to_owned())),
        }
    }
}

impl Serialize for Rfc3339 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rfc3339 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Rfc3339;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 time or milliseconds since the epoch")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Rfc3339, E> {
                text.parse().map_err(E::custom)
            }

            fn visit_i64<E: serde::de::Error>(self, ms: i64) -> Result<Rfc3339, E> {
                Ok(Rfc3339(Timestamp(ms)))
            }

            fn visit_u64<E: serde::de::Error>(self, ms: u64) -> Result<Rfc3339, E> {
                i64::try_from(ms)
                    .map(|ms| Rfc3339(Timestamp(ms)))
                    .map_err(|_| E::custom(NotATime(ms.to_string())))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl PartialSchema for Rfc3339 {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some("RFC 3339 in UTC, to the millisecond"))
            .examples(["2027-01-15T08:00:00.123Z"])
            .into()
    }
}

impl ToSchema for Rfc3339 {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn shown(ms: i64) -> String {
        Rfc3339(Timestamp(ms)).to_string()
    }

    #[test]
    fn times_are_rfc_3339_in_utc_to_the_millisecond() {
        assert_eq!(shown(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(shown(1_800_000_000_123), "2027-01-15T08:00:00.123Z");
        assert_eq!(shown(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            serde_json::to_value(Rfc3339(Timestamp(1_800_000_000_123))).unwrap(),
            json!("2027-01-15T08:00:00.123Z")
        );
    }

    #[test]
    fn an_instant_past_what_rfc_3339_can_write_is_shown_as_its_last_or_first() {
        assert_eq!(shown(i64::MAX), "9999-12-31T23:59:59.999Z");
        assert_eq!(shown(LATEST_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(shown(i64::MIN), "0000-01-01T00:00:00.000Z");
    }

    #[test]
    fn a_time_is_read_as_rfc_3339_with_any_offset_or_as_milliseconds() {
        let read = |v: serde_json::Value| serde_json::from_value::<Rfc3339>(v).unwrap().millis();
        assert_eq!(read(json!("2027-01-15T08:00:00.123Z")), 1_800_000_000_123);
        assert_eq!(
            read(json!("2027-01-15T09:00:00.123+01:00")),
            1_800_000_000_123
        );
        assert_eq!(read(json!("2027-01-15T08:00:00Z")), 1_800_000_000_000);
        assert_eq!(
            read(json!("2027-01-15T08:00:00.123987Z")),
            1_800_000_000_123
        );
        assert_eq!(read(json!(1_800_000_000_123_i64)), 1_800_000_000_123);
        assert_eq!(
            "1800000000123".parse::<Rfc3339>().unwrap().millis(),
            1_800_000_000_123
        );
    }

    #[test]
    fn anything_else_is_refused_naming_both_forms() {
        for bad in [
            json!("yesterday"),
            json!("2027-01-15"),
            json!("2027-01-15 08:00:00"),
            json!(1.5),
            json!(true),
            json!(null),
            json!(u64::MAX),
        ] {
            let e = serde_json::from_value::<Rfc3339>(bad.clone()).unwrap_err();
            assert!(
                e.to_string().contains("RFC 3339") && e.to_string().contains("milliseconds"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_schema_is_a_date_time_string() {
        let schema = serde_json::to_value(Rfc3339::schema()).unwrap();
        assert_eq!(schema["type"], "string");
        assert_eq!(schema["format"], "date-time");
    }

    proptest! {
        /// What the API shows reads back as the same instant, for every instant RFC
        /// 3339 can write.
        #[test]
        fn a_shown_time_reads_back_as_the_same_instant(ms in EARLIEST_MS..=LATEST_MS) {
            let shown = Rfc3339(Timestamp(ms)).to_string();
            prop_assert_eq!(shown.len(), 24);
            prop_assert!(shown.ends_with('Z'));
            prop_assert_eq!(shown.parse::<Rfc3339>().unwrap().millis(), ms);
        }
    }
}
