//! The one error type of this crate.

/// Why a webhook was refused, or why a secret could not be used.
///
/// Every variant except [`BadSecret`](SignatureError::BadSecret) describes the request
/// and means "answer 401 and change nothing". `BadSecret` describes the configuration
/// (it comes from [`Secret::parse`](crate::Secret::parse) and
/// [`Verifier::new`](crate::Verifier::new), never from `verify`) and means "fix the
/// deployment". No variant ever carries a secret or a signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header the scheme requires is absent; carries its (lowercase) name.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header is present but not in the scheme's form; says what is wrong.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// The signed timestamp is further from now than the tolerance, in either
    /// direction: a replay, or a sender whose clock is badly off. Only reported for a
    /// signature that matched, so it never answers a forgery.
    #[error("timestamp outside the tolerance")]
    TimestampOutOfTolerance,
    /// The headers are well formed but no signature matches any active secret: a
    /// wrong secret, a tampered body, or a forgery.
    #[error("no signature matches an active secret")]
    NoMatchingSignature,
    /// A configured secret is unusable (empty, bad base64) or none is configured;
    /// says what is wrong, never the secret.
    #[error("bad secret: {0}")]
    BadSecret(&'static str),
}
