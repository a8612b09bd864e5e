//! [Standard Webhooks](https://www.standardwebhooks.com/): `webhook-id`,
//! `webhook-timestamp` (unix seconds) and `webhook-signature` (space-separated
//! `v1,<base64 HMAC-SHA256>` entries) over `{id}.{timestamp}.{body}`.
//!
//! Entries of other versions (`v1a,` asymmetric signatures and any future one) are
//! skipped, so a sender may add them without breaking us; but at least one `v1` entry
//! must be present.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::headers::{self, Headers};
use crate::{Secret, SignatureError, Verified, Verifier};

/// The header carrying the message id, which is also the delivery id.
pub const ID: &str = "webhook-id";
/// The header carrying the unix time of signing, in seconds.
pub const TIMESTAMP: &str = "webhook-timestamp";
/// The header carrying the signatures.
pub const SIGNATURE: &str = "webhook-signature";

/// The `webhook-signature` value that `secret` gives to message `id` sent at
/// `timestamp` with `body`: `v1,<base64>`.
pub fn signature(secret: &Secret, id: &str, timestamp: i64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    let mac = secret.sign(&[id.as_bytes(), b".", timestamp.as_bytes(), b".", body]);
    format!("v1,{}", BASE64.encode(mac))
}

pub(crate) fn verify<H: Headers + ?Sized>(
    verifier: &Verifier,
    headers: &H,
    body: &[u8],
    now_unix_secs: i64,
) -> Result<Verified, SignatureError> {
    let id = headers::required(headers, ID)?;
    if id.is_empty() {
        return Err(SignatureError::Malformed("webhook-id (empty)"));
    }
    let timestamp_text = headers::required(headers, TIMESTAMP)?;
    let timestamp = crate::parse_unix_secs(timestamp_text, "webhook-timestamp (not unix seconds)")?;
    let candidates = parse_signatures(headers::required(headers, SIGNATURE)?)?;
    // The sender signed the timestamp exactly as it wrote it in the header.
    let signed = [id.as_bytes(), b".", timestamp_text.as_bytes(), b".", body];
    verifier.check(&signed, &candidates, timestamp, now_unix_secs)?;
    Ok(Verified {
        delivery_id: Some(id.to_owned()),
        timestamp: Some(timestamp),
    })
}

fn parse_signatures(value: &str) -> Result<Vec<Vec<u8>>, SignatureError> {
    let mut candidates = Vec::new();
    for entry in value.split_ascii_whitespace() {
        let (version, signature) = entry.split_once(',').ok_or(SignatureError::Malformed(
            "webhook-signature entry (expected version,signature)",
        ))?;
        if version == "v1" {
            let decoded = BASE64.decode(signature).map_err(|_| {
                SignatureError::Malformed("webhook-signature v1 entry (not base64)")
            })?;
            candidates.push(decoded);
        }
    }
    if candidates.is_empty() {
        return Err(SignatureError::Malformed("webhook-signature (no v1 entry)"));
    }
    Ok(candidates)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Scheme;

    const NOW: i64 = 1_767_225_600;
    const BODY: &[u8] = br#"{"type":"payment.succeeded","id":"pay_1"}"#;

    fn secret(config: &str) -> Secret {
        Secret::parse(Scheme::StandardWebhooks, config).unwrap()
    }

    fn verifier(configs: &[&str]) -> Verifier {
        Verifier::from_config(Scheme::StandardWebhooks, configs).unwrap()
    }

    fn signed(secret: &Secret, timestamp: i64, body: &[u8]) -> Vec<(String, String)> {
        crate::sign(Scheme::StandardWebhooks, secret, "msg_1", timestamp, body)
    }

    #[test]
    fn the_specifications_published_example_verifies() {
        // GIVEN the example of the Standard Webhooks specification and its libraries
        let verifier = verifier(&["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
        let headers = [
            ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            ("webhook-timestamp", "1614265330"),
            (
                "webhook-signature",
                "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            ),
        ];
        let body = br#"{"test": 2432232314}"#;
        // WHEN it is verified at its own time
        let verified = verifier.verify(&headers, body, 1_614_265_330);
        // THEN it is accepted, with the message id as delivery id
        assert_eq!(
            verified,
            Ok(Verified {
                delivery_id: Some("msg_p5jXN8AQM9LWM0D4loKWxJek".into()),
                timestamp: Some(1_614_265_330),
            })
        );
        // AND our signer produces the same header
        assert_eq!(
            signature(
                &secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                body
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn the_right_signature_is_accepted() {
        let key = secret("whsec_c2VjcmV0LWtleS1vbmU=");
        let verified =
            verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]).verify(&signed(&key, NOW, BODY), BODY, NOW);
        assert_eq!(
            verified,
            Ok(Verified {
                delivery_id: Some("msg_1".into()),
                timestamp: Some(NOW)
            })
        );
    }

    #[test]
    fn a_raw_secret_without_prefix_works_both_ways() {
        let headers = signed(&secret("not-base64-at-all"), NOW, BODY);
        assert!(
            verifier(&["not-base64-at-all"])
                .verify(&headers, BODY, NOW)
                .is_ok()
        );
    }

    #[test]
    fn a_wrong_secret_is_refused() {
        let headers = signed(&secret("whsec_b3RoZXI="), NOW, BODY);
        assert_eq!(
            verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]).verify(&headers, BODY, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn a_tampered_body_is_refused() {
        let headers = signed(&secret("whsec_c2VjcmV0LWtleS1vbmU="), NOW, BODY);
        let tampered = br#"{"type":"payment.succeeded","id":"pay_2"}"#;
        assert_eq!(
            verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]).verify(&headers, tampered, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn a_tampered_id_or_timestamp_is_refused() {
        let key = secret("whsec_c2VjcmV0LWtleS1vbmU=");
        let verifier = verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]);
        let mut headers = signed(&key, NOW, BODY);
        headers[0].1 = "msg_2".into();
        assert_eq!(
            verifier.verify(&headers, BODY, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
        let mut headers = signed(&key, NOW, BODY);
        headers[1].1 = (NOW + 1).to_string();
        assert_eq!(
            verifier.verify(&headers, BODY, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn timestamps_are_accepted_up_to_the_tolerance_in_both_directions() {
        let key = secret("whsec_c2VjcmV0LWtleS1vbmU=");
        let verifier = verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]);
        for skew in [-300, 300] {
            let headers = signed(&key, NOW + skew, BODY);
            assert!(verifier.verify(&headers, BODY, NOW).is_ok(), "{skew}");
        }
    }

    #[test]
    fn an_expired_timestamp_is_refused() {
        let headers = signed(&secret("whsec_c2VjcmV0LWtleS1vbmU="), NOW - 301, BODY);
        assert_eq!(
            verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]).verify(&headers, BODY, NOW),
            Err(SignatureError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn a_timestamp_too_far_in_the_future_is_refused() {
        let headers = signed(&secret("whsec_c2VjcmV0LWtleS1vbmU="), NOW + 301, BODY);
        assert_eq!(
            verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]).verify(&headers, BODY, NOW),
            Err(SignatureError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn the_tolerance_is_configurable() {
        let headers = signed(&secret("whsec_c2VjcmV0LWtleS1vbmU="), NOW - 3_600, BODY);
        let verifier = verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]);
        assert!(
            verifier
                .clone()
                .with_tolerance(Duration::from_secs(3_600))
                .verify(&headers, BODY, NOW)
                .is_ok()
        );
        assert_eq!(
            verifier.with_tolerance(Duration::from_secs(10)).verify(
                &signed(&secret("whsec_c2VjcmV0LWtleS1vbmU="), NOW - 11, BODY),
                BODY,
                NOW
            ),
            Err(SignatureError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn each_missing_header_is_named() {
        let headers = signed(&secret("whsec_c2VjcmV0LWtleS1vbmU="), NOW, BODY);
        let verifier = verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]);
        for (missing, name) in [(0, ID), (1, TIMESTAMP), (2, SIGNATURE)] {
            let mut partial = headers.clone();
            partial.remove(missing);
            assert_eq!(
                verifier.verify(&partial, BODY, NOW),
                Err(SignatureError::MissingHeader(name))
            );
        }
    }

    #[test]
    fn header_names_are_matched_without_regard_to_case() {
        let headers: Vec<(String, String)> =
            signed(&secret("whsec_c2VjcmV0LWtleS1vbmU="), NOW, BODY)
                .into_iter()
                .map(|(k, v)| (k.to_ascii_uppercase(), v))
                .collect();
        assert!(
            verifier(&["whsec_c2VjcmV0LWtleS1vbmU="])
                .verify(&headers, BODY, NOW)
                .is_ok()
        );
    }

    #[test]
    fn malformed_headers_are_refused() {
        let verifier = verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]);
        let good = signed(&secret("whsec_c2VjcmV0LWtleS1vbmU="), NOW, BODY);
        for (index, value) in [
            (0, ""),
            (1, "yesterday"),
            (1, "-5"),
            (1, "1e9"),
            (1, "99999999999999999999"),
            (2, ""),
            (2, "v1"),
            (2, "v1,not*base64"),
            (2, "v1a,c2lnbmF0dXJl"),
        ] {
            let mut headers = good.clone();
            headers[index].1 = value.into();
            assert!(
                matches!(
                    verifier.verify(&headers, BODY, NOW),
                    Err(SignatureError::Malformed(_))
                ),
                "{index} {value:?}"
            );
        }
    }

    #[test]
    fn other_versions_are_skipped_and_any_v1_entry_may_match() {
        let key = secret("whsec_c2VjcmV0LWtleS1vbmU=");
        let mut headers = signed(&key, NOW, BODY);
        headers[2].1 = format!(
            "v1a,c2lnbmF0dXJl v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= {}",
            headers[2].1
        );
        assert!(
            verifier(&["whsec_c2VjcmV0LWtleS1vbmU="])
                .verify(&headers, BODY, NOW)
                .is_ok()
        );
    }

    #[test]
    fn a_rotated_secret_accepts_signatures_made_with_either() {
        let verifier = verifier(&["whsec_b2xkLXNlY3JldA==", "whsec_bmV3LXNlY3JldA=="]);
        for config in ["whsec_b2xkLXNlY3JldA==", "whsec_bmV3LXNlY3JldA=="] {
            let headers = signed(&secret(config), NOW, BODY);
            assert!(verifier.verify(&headers, BODY, NOW).is_ok(), "{config}");
        }
        let headers = signed(&secret("whsec_cmV0aXJlZA=="), NOW, BODY);
        assert_eq!(
            verifier.verify(&headers, BODY, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn a_forgery_with_a_stale_timestamp_is_reported_as_a_bad_signature() {
        // The signature is checked first, so `TimestampOutOfTolerance` always means
        // "genuine but stale" and never helps a forger.
        let headers = signed(&secret("whsec_b3RoZXI="), NOW - 3_600, BODY);
        assert_eq!(
            verifier(&["whsec_c2VjcmV0LWtleS1vbmU="]).verify(&headers, BODY, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
    }
}
