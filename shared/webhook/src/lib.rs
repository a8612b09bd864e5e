//! Webhook signature verification for Siesta: Standard Webhooks, Stripe and GitHub.
//!
//! A webhook receiver calls [`Verifier::verify`] with the request's headers and its
//! **raw body bytes**, before parsing or storing anything; only an `Ok` body may be
//! parsed. The crate is pure — no I/O, no HTTP server, no clock: the current time is a
//! parameter, so tests and replays choose it.
//!
//! # Invariants
//! - **Raw bytes.** The signature covers the body exactly as received; re-serialising
//!   parsed JSON would change it, so nothing here takes parsed input.
//! - **Constant-time comparison** of every candidate signature (`hmac`'s
//!   `verify_slice`), so timing tells a forger nothing.
//! - **Rotation.** A [`Verifier`] holds every active secret; any one matching any
//!   signature in the headers verifies. Roll by configuring old and new, then drop old.
//! - **Replay window.** A signed timestamp further than the tolerance (default
//!   [`DEFAULT_TOLERANCE`], 5 minutes) from now, in the past *or* the future, is
//!   refused. The signature is checked first, so
//!   [`SignatureError::TimestampOutOfTolerance`] only ever describes a genuine but
//!   stale (or clock-skewed) delivery and never answers a forgery. GitHub signs no
//!   timestamp: deduplicate its deliveries on [`Verified::delivery_id`].
//! - **Secrets never leak**: [`Secret`]'s `Debug` is redacted and no error carries a
//!   secret or a signature.
//!
//! # Example
//! ```
//! use siesta_webhook::{Scheme, Secret, Verified, Verifier, sign};
//!
//! // Configuration: every active secret of the source (here, during a rotation).
//! let verifier = Verifier::from_config(
//!     Scheme::StandardWebhooks,
//!     ["whsec_b2xkLXNlY3JldA==", "whsec_bmV3LXNlY3JldA=="],
//! )?;
//!
//! // A sender (a test, or `siesta demo`'s fake provider) signs with the new secret.
//! let now = 1_767_225_600;
//! let body = br#"{"status":"COMPLETED","transaction_id":"tx_1"}"#;
//! let secret = Secret::parse(Scheme::StandardWebhooks, "whsec_bmV3LXNlY3JldA==")?;
//! let headers = sign(Scheme::StandardWebhooks, &secret, "msg_1", now, body);
//!
//! // The receiver verifies the raw body before parsing it.
//! let verified = verifier.verify(&headers, body, now + 2)?;
//! assert_eq!(
//!     verified,
//!     Verified { delivery_id: Some("msg_1".into()), timestamp: Some(now) }
//! );
//!
//! // One flipped byte, and it is refused.
//! let tampered = br#"{"status":"COMPLETED","transaction_id":"tx_2"}"#;
//! assert!(verifier.verify(&headers, tampered, now + 2).is_err());
//! # Ok::<(), siesta_webhook::SignatureError>(())
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

mod error;
pub mod github;
mod headers;
mod secret;
pub mod standard_webhooks;
pub mod stripe;

pub use error::SignatureError;
pub use headers::Headers;
pub use secret::Secret;

/// How far a signed timestamp may be from now, either way, unless configured
/// otherwise: 5 minutes, as Standard Webhooks and Stripe recommend.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// How a provider signs its webhooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>` over
    /// `{id}.{timestamp}.{body}`; secrets `whsec_<base64>`. See [`standard_webhooks`].
    StandardWebhooks,
    /// `Stripe-Signature: t=<unix>,v1=<hex>` over `{t}.{body}`. See [`stripe`].
    Stripe,
    /// `X-Hub-Signature-256: sha256=<hex>` over the body; no timestamp. See [`github`].
    GitHub,
}

impl Scheme {
    /// The configuration name: `standard-webhooks`, `stripe` or `github`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Stripe => "stripe",
            Scheme::GitHub => "github",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scheme name in configuration that is none of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signature scheme {0:?} (expected standard-webhooks, stripe or github)")]
pub struct UnknownScheme(pub String);

impl FromStr for Scheme {
    type Err = UnknownScheme;

    /// Parses `standard-webhooks` (also `standard_webhooks`, `standardwebhooks`),
    /// `stripe` or `github`, in any ASCII case.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name.trim().to_ascii_lowercase().as_str() {
            "standard-webhooks" | "standard_webhooks" | "standardwebhooks" => {
                Ok(Scheme::StandardWebhooks)
            }
            "stripe" => Ok(Scheme::Stripe),
            "github" => Ok(Scheme::GitHub),
            _ => Err(UnknownScheme(name.to_owned())),
        }
    }
}

/// What a verified webhook says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The sender's id for this delivery, for deduplication: `webhook-id` (Standard
    /// Webhooks), `X-GitHub-Delivery` when present (GitHub); `None` for Stripe, whose
    /// event id is in the body.
    pub delivery_id: Option<String>,
    /// The signed unix time in seconds, when the scheme signs one (not GitHub).
    pub timestamp: Option<i64>,
}

/// Verifies one source's webhooks: a scheme, its active secrets, a tolerance.
#[derive(Debug, Clone)]
pub struct Verifier {
    scheme: Scheme,
    secrets: Vec<Secret>,
    tolerance: Duration,
}

impl Verifier {
    /// A verifier accepting signatures made with any of `secrets`, with the
    /// [`DEFAULT_TOLERANCE`]. Fails with [`SignatureError::BadSecret`] when there is
    /// no secret: such a verifier could only ever refuse.
    pub fn new(
        scheme: Scheme,
        secrets: impl IntoIterator<Item = Secret>,
    ) -> Result<Verifier, SignatureError> {
        let secrets: Vec<Secret> = secrets.into_iter().collect();
        if secrets.is_empty() {
            return Err(SignatureError::BadSecret("no secret configured"));
        }
        Ok(Verifier {
            scheme,
            secrets,
            tolerance: DEFAULT_TOLERANCE,
        })
    }

    /// A verifier from configuration strings, each read by [`Secret::parse`] for
    /// `scheme`.
    pub fn from_config<S: AsRef<str>>(
        scheme: Scheme,
        secrets: impl IntoIterator<Item = S>,
    ) -> Result<Verifier, SignatureError> {
        let secrets = secrets
            .into_iter()
            .map(|config| Secret::parse(scheme, config.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Verifier::new(scheme, secrets)
    }

    /// The same verifier with another timestamp tolerance (whole seconds count).
    #[must_use]
    pub fn with_tolerance(mut self, tolerance: Duration) -> Verifier {
        self.tolerance = tolerance;
        self
    }

    /// The scheme this verifier expects.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// How far a signed timestamp may be from now, either way.
    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    /// Verifies `body`, the raw request body, against `headers` at `now_unix_secs`.
    ///
    /// Checks, in order: the headers are present and well formed
    /// ([`MissingHeader`](SignatureError::MissingHeader),
    /// [`Malformed`](SignatureError::Malformed)); some signature matches some secret
    /// ([`NoMatchingSignature`](SignatureError::NoMatchingSignature)); the signed
    /// timestamp is within the tolerance
    /// ([`TimestampOutOfTolerance`](SignatureError::TimestampOutOfTolerance)).
    pub fn verify<H: Headers + ?Sized>(
        &self,
        headers: &H,
        body: &[u8],
        now_unix_secs: i64,
    ) -> Result<Verified, SignatureError> {
        match self.scheme {
            Scheme::StandardWebhooks => {
                standard_webhooks::verify(self, headers, body, now_unix_secs)
            }
            Scheme::Stripe => stripe::verify(self, headers, body, now_unix_secs),
            Scheme::GitHub => github::verify(self, headers, body),
        }
    }

    /// Signature first, then the timestamp (see the crate docs for why).
    fn check(
        &self,
        signed: &[&[u8]],
        candidates: &[Vec<u8>],
        timestamp: i64,
        now_unix_secs: i64,
    ) -> Result<(), SignatureError> {
        self.check_untimed(signed, candidates)?;
        if timestamp.abs_diff(now_unix_secs) > self.tolerance.as_secs() {
            return Err(SignatureError::TimestampOutOfTolerance);
        }
        Ok(())
    }

    fn check_untimed(
        &self,
        signed: &[&[u8]],
        candidates: &[Vec<u8>],
    ) -> Result<(), SignatureError> {
        if secret::any_matches(&self.secrets, signed, candidates) {
            Ok(())
        } else {
            Err(SignatureError::NoMatchingSignature)
        }
    }
}

/// The headers a sender using `scheme` and `secret` attaches to `body`, as
/// `(lowercase name, value)` pairs ready for an HTTP client or for
/// [`Verifier::verify`].
///
/// `id` becomes `webhook-id` (Standard Webhooks) or `X-GitHub-Delivery` (GitHub) and is
/// unused by Stripe; `timestamp` (unix seconds) is unused by GitHub. For one header
/// value alone, see [`standard_webhooks::signature`], [`stripe::signature`] and
/// [`github::signature`].
pub fn sign(
    scheme: Scheme,
    secret: &Secret,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Vec<(String, String)> {
    match scheme {
        Scheme::StandardWebhooks => vec![
            (standard_webhooks::ID.to_owned(), id.to_owned()),
            (
                standard_webhooks::TIMESTAMP.to_owned(),
                timestamp.to_string(),
            ),
            (
                standard_webhooks::SIGNATURE.to_owned(),
                standard_webhooks::signature(secret, id, timestamp, body),
            ),
        ],
        Scheme::Stripe => vec![(
            stripe::SIGNATURE.to_owned(),
            stripe::signature(secret, timestamp, body),
        )],
        Scheme::GitHub => vec![
            (
                github::SIGNATURE.to_owned(),
                github::signature(secret, body),
            ),
            (github::DELIVERY.to_owned(), id.to_owned()),
        ],
    }
}

/// A unix time in seconds as providers write it: ASCII digits only (no sign, no
/// spaces), fitting an `i64`.
fn parse_unix_secs(text: &str, what: &'static str) -> Result<i64, SignatureError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SignatureError::Malformed(what));
    }
    text.parse().map_err(|_| SignatureError::Malformed(what))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const NOW: i64 = 1_767_225_600;
    const SCHEMES: [Scheme; 3] = [Scheme::StandardWebhooks, Scheme::Stripe, Scheme::GitHub];

    #[test]
    fn scheme_names_round_trip_and_unknown_ones_are_refused() {
        for scheme in SCHEMES {
            assert_eq!(scheme.to_string().parse::<Scheme>(), Ok(scheme));
        }
        assert_eq!("GitHub".parse::<Scheme>(), Ok(Scheme::GitHub));
        assert_eq!(
            "standard_webhooks".parse::<Scheme>(),
            Ok(Scheme::StandardWebhooks)
        );
        assert_eq!(
            "svix".parse::<Scheme>(),
            Err(UnknownScheme("svix".to_owned()))
        );
    }

    #[test]
    fn a_verifier_needs_a_secret() {
        for scheme in SCHEMES {
            assert!(matches!(
                Verifier::new(scheme, []),
                Err(SignatureError::BadSecret(_))
            ));
            assert!(matches!(
                Verifier::from_config(scheme, [""]),
                Err(SignatureError::BadSecret(_))
            ));
        }
    }

    #[test]
    fn the_default_tolerance_is_five_minutes_and_configurable() {
        let verifier = Verifier::from_config(Scheme::Stripe, ["s"]).unwrap();
        assert_eq!(verifier.tolerance(), Duration::from_secs(300));
        assert_eq!(verifier.scheme(), Scheme::Stripe);
        let verifier = verifier.with_tolerance(Duration::from_secs(30));
        assert_eq!(verifier.tolerance(), Duration::from_secs(30));
    }

    #[test]
    fn a_verifier_debug_shows_no_secret() {
        let verifier = Verifier::from_config(Scheme::GitHub, ["hunter2"]).unwrap();
        assert!(!format!("{verifier:?}").contains("hunter2"));
    }

    #[test]
    fn extreme_timestamps_do_not_overflow() {
        let secret = Secret::parse(Scheme::Stripe, "s").unwrap();
        let verifier = Verifier::new(Scheme::Stripe, [secret.clone()]).unwrap();
        let headers = sign(Scheme::Stripe, &secret, "", i64::MAX, b"{}");
        assert_eq!(
            verifier.verify(&headers, b"{}", i64::MIN),
            Err(SignatureError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn a_header_map_works_as_headers() {
        let secret = Secret::parse(Scheme::StandardWebhooks, "whsec_c2VjcmV0").unwrap();
        let verifier = Verifier::new(Scheme::StandardWebhooks, [secret.clone()]).unwrap();
        let mut map = http::HeaderMap::new();
        for (name, value) in sign(Scheme::StandardWebhooks, &secret, "msg_1", NOW, b"{}") {
            map.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        assert!(verifier.verify(&map, b"{}", NOW).is_ok());
    }

    fn scheme() -> impl Strategy<Value = Scheme> {
        prop::sample::select(SCHEMES.to_vec())
    }

    proptest! {
        #[test]
        fn sign_then_verify_always_succeeds_within_the_tolerance(
            scheme in scheme(),
            key in prop::collection::vec(any::<u8>(), 1..80),
            id in "[A-Za-z0-9_-]{1,40}",
            body in prop::collection::vec(any::<u8>(), 0..1024),
            now in 0i64..4_000_000_000,
            tolerance in 0u64..86_400,
            skew_fraction in -1.0f64..=1.0,
        ) {
            // GIVEN a delivery signed within the tolerance of now
            let skew = (tolerance as f64 * skew_fraction) as i64;
            let secret = Secret::from_bytes(key).unwrap();
            let verifier = Verifier::new(scheme, [secret.clone()])
                .unwrap()
                .with_tolerance(Duration::from_secs(tolerance));
            let headers = sign(scheme, &secret, &id, now + skew, &body);
            // WHEN it is verified THEN it is accepted, with what the scheme carries
            let verified = verifier.verify(&headers, &body, now).unwrap();
            match scheme {
                Scheme::StandardWebhooks => {
                    prop_assert_eq!(verified.delivery_id, Some(id));
                    prop_assert_eq!(verified.timestamp, Some(now + skew));
                }
                Scheme::Stripe => {
                    prop_assert_eq!(verified.delivery_id, None);
                    prop_assert_eq!(verified.timestamp, Some(now + skew));
                }
                Scheme::GitHub => {
                    prop_assert_eq!(verified.delivery_id, Some(id));
                    prop_assert_eq!(verified.timestamp, None);
                }
            }
        }

        #[test]
        fn any_single_byte_change_of_the_body_fails(
            scheme in scheme(),
            key in prop::collection::vec(any::<u8>(), 1..80),
            body in prop::collection::vec(any::<u8>(), 1..1024),
            index in any::<prop::sample::Index>(),
            delta in 1u8..=255,
        ) {
            let secret = Secret::from_bytes(key).unwrap();
            let verifier = Verifier::new(scheme, [secret.clone()]).unwrap();
            let headers = sign(scheme, &secret, "msg_1", NOW, &body);
            let mut tampered = body.clone();
            let i = index.index(tampered.len());
            tampered[i] = tampered[i].wrapping_add(delta);
            prop_assert_eq!(
                verifier.verify(&headers, &tampered, NOW),
                Err(SignatureError::NoMatchingSignature)
            );
        }

        #[test]
        fn appending_or_removing_a_byte_fails(
            scheme in scheme(),
            body in prop::collection::vec(any::<u8>(), 1..256),
            extra in any::<u8>(),
        ) {
            let secret = Secret::from_bytes(&b"key"[..]).unwrap();
            let verifier = Verifier::new(scheme, [secret.clone()]).unwrap();
            let headers = sign(scheme, &secret, "msg_1", NOW, &body);
            let mut longer = body.clone();
            longer.push(extra);
            prop_assert!(verifier.verify(&headers, &longer, NOW).is_err());
            prop_assert!(verifier.verify(&headers, &body[..body.len() - 1], NOW).is_err());
        }

        #[test]
        fn outside_the_tolerance_is_always_refused(
            scheme in prop::sample::select(vec![Scheme::StandardWebhooks, Scheme::Stripe]),
            tolerance in 0u64..86_400,
            beyond in 1i64..1_000_000,
            future in any::<bool>(),
        ) {
            let secret = Secret::from_bytes(&b"key"[..]).unwrap();
            let verifier = Verifier::new(scheme, [secret.clone()])
                .unwrap()
                .with_tolerance(Duration::from_secs(tolerance));
            let skew = tolerance as i64 + beyond;
            let signed_at = if future { NOW + skew } else { NOW - skew };
            let headers = sign(scheme, &secret, "msg_1", signed_at, b"{}");
            prop_assert_eq!(
                verifier.verify(&headers, b"{}", NOW),
                Err(SignatureError::TimestampOutOfTolerance)
            );
        }

        #[test]
        fn arbitrary_header_values_never_panic_nor_verify(
            scheme in scheme(),
            values in prop::collection::vec(".{0,120}", 4),
            body in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let verifier = Verifier::from_config(scheme, ["key"]).unwrap();
            let headers: Vec<(&str, &str)> = [
                standard_webhooks::ID,
                standard_webhooks::TIMESTAMP,
                standard_webhooks::SIGNATURE,
                stripe::SIGNATURE,
            ]
            .into_iter()
            .zip(values.iter().map(String::as_str))
            .chain([(github::SIGNATURE, values[3].as_str())])
            .collect();
            prop_assert!(verifier.verify(&headers, &body, NOW).is_err());
        }
    }
}
