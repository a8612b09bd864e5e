//! Signing secrets and the HMAC-SHA256 computed with them.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{Scheme, SignatureError};

type HmacSha256 = Hmac<Sha256>;

/// One HMAC key. Its `Debug` never shows the key, and there is no `Display`.
#[derive(Clone)]
pub struct Secret {
    key: Vec<u8>,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    /// A secret from a configuration string, read the way `scheme`'s providers mean it.
    ///
    /// Surrounding whitespace (a trailing newline from a file) is dropped.
    /// - Standard Webhooks: `whsec_<base64>` is the base64-decoded key; a string
    ///   without the prefix is used as raw bytes.
    /// - Stripe and GitHub: the whole string, as UTF-8 bytes. Stripe's secrets also
    ///   start with `whsec_`, but Stripe keys its HMAC with the full string — decoding
    ///   it would make every genuine Stripe delivery fail.
    ///
    /// Fails with [`SignatureError::BadSecret`] when the string is empty or a
    /// `whsec_` key is not valid base64 or decodes to nothing.
    pub fn parse(scheme: Scheme, config: &str) -> Result<Secret, SignatureError> {
        let config = config.trim();
        let key = match (scheme, config.strip_prefix("whsec_")) {
            (Scheme::StandardWebhooks, Some(encoded)) => BASE64
                .decode(encoded)
                .map_err(|_| SignatureError::BadSecret("whsec_ key is not valid base64"))?,
            _ => config.as_bytes().to_vec(),
        };
        Secret::from_bytes(key)
    }

    /// A secret from the raw key bytes; fails with [`SignatureError::BadSecret`] when
    /// they are empty.
    pub fn from_bytes(key: impl Into<Vec<u8>>) -> Result<Secret, SignatureError> {
        let key = key.into();
        if key.is_empty() {
            return Err(SignatureError::BadSecret("empty key"));
        }
        Ok(Secret { key })
    }

    /// HMAC-SHA256 of the concatenation of `parts`, keyed with this secret.
    #[allow(clippy::expect_used, reason = "HMAC accepts a key of any length")]
    pub(crate) fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts any key length");
        for part in parts {
            mac.update(part);
        }
        mac
    }

    /// The 32-byte signature of the concatenation of `parts`.
    pub(crate) fn sign(&self, parts: &[&[u8]]) -> [u8; 32] {
        self.mac(parts).finalize().into_bytes().into()
    }
}

/// Whether any of `candidates` is the signature of `parts` under any of `secrets`.
///
/// Each comparison is constant-time (`verify_slice`), so timing reveals nothing about
/// how much of a forged signature was right. Which secret or candidate matched may
/// leak through timing; that is not secret.
pub(crate) fn any_matches(secrets: &[Secret], parts: &[&[u8]], candidates: &[Vec<u8>]) -> bool {
    secrets.iter().any(|secret| {
        let mac = secret.mac(parts);
        candidates
            .iter()
            .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standard_webhooks_whsec_secret_is_base64_decoded() {
        let secret = Secret::parse(Scheme::StandardWebhooks, "whsec_aGVsbG8=").unwrap();
        assert_eq!(secret.key, b"hello");
    }

    #[test]
    fn a_standard_webhooks_secret_without_the_prefix_is_raw_bytes() {
        let secret = Secret::parse(Scheme::StandardWebhooks, "  plain-secret\n").unwrap();
        assert_eq!(secret.key, b"plain-secret");
    }

    #[test]
    fn a_stripe_whsec_secret_is_used_whole_as_stripe_does() {
        let secret = Secret::parse(Scheme::Stripe, "whsec_aGVsbG8=").unwrap();
        assert_eq!(secret.key, b"whsec_aGVsbG8=");
        let secret = Secret::parse(Scheme::GitHub, "whsec_aGVsbG8=").unwrap();
        assert_eq!(secret.key, b"whsec_aGVsbG8=");
    }

    #[test]
    fn unusable_secrets_are_bad_secrets() {
        for (scheme, config) in [
            (Scheme::StandardWebhooks, "whsec_***"),
            (Scheme::StandardWebhooks, "whsec_"),
            (Scheme::StandardWebhooks, ""),
            (Scheme::Stripe, "   "),
            (Scheme::GitHub, ""),
        ] {
            assert!(
                matches!(
                    Secret::parse(scheme, config),
                    Err(SignatureError::BadSecret(_))
                ),
                "{scheme:?} {config:?}"
            );
        }
        assert!(matches!(
            Secret::from_bytes(Vec::new()),
            Err(SignatureError::BadSecret(_))
        ));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let secret = Secret::parse(Scheme::GitHub, "hunter2").unwrap();
        let shown = format!("{secret:?} {:?} {secret:#?}", vec![secret.clone()]);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("104"), "{shown}"); // b'h' as a number
    }

    #[test]
    fn hmac_matches_rfc_4231_test_case_2() {
        // RFC 4231 §4.3: key "Jefe", data "what do ya want for nothing?".
        let secret = Secret::from_bytes(&b"Jefe"[..]).unwrap();
        assert_eq!(
            hex::encode(secret.sign(&[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
