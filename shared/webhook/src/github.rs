//! GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256>` over the body, keyed with
//! the secret as UTF-8; the delivery id is `X-GitHub-Delivery`.
//!
//! GitHub signs no timestamp, so the tolerance does not apply and a captured delivery
//! can be replayed verbatim: deduplicate on the delivery id.

use crate::headers::{self, Headers};
use crate::{Secret, SignatureError, Verified, Verifier};

/// The header carrying the signature.
pub const SIGNATURE: &str = "x-hub-signature-256";
/// The header carrying the delivery id (a GUID); optional for verification.
pub const DELIVERY: &str = "x-github-delivery";

/// The `X-Hub-Signature-256` value that `secret` gives to `body`: `sha256=<hex>`.
pub fn signature(secret: &Secret, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(secret.sign(&[body])))
}

pub(crate) fn verify<H: Headers + ?Sized>(
    verifier: &Verifier,
    headers: &H,
    body: &[u8],
) -> Result<Verified, SignatureError> {
    let value = headers::required(headers, SIGNATURE)?;
    let hex_signature = value
        .strip_prefix("sha256=")
        .ok_or(SignatureError::Malformed(
            "x-hub-signature-256 (expected sha256=<hex>)",
        ))?;
    let candidate = hex::decode(hex_signature)
        .map_err(|_| SignatureError::Malformed("x-hub-signature-256 (not hex)"))?;
    verifier.check_untimed(&[body], &[candidate])?;
    let delivery_id = headers::optional(headers, DELIVERY)?
        .filter(|id| !id.is_empty())
        .map(str::to_owned);
    Ok(Verified {
        delivery_id,
        timestamp: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scheme;

    const NOW: i64 = 1_767_225_600;
    const BODY: &[u8] = br#"{"action":"opened","number":1}"#;
    const KEY: &str = "It's a Secret to Everybody";

    fn secret(config: &str) -> Secret {
        Secret::parse(Scheme::GitHub, config).unwrap()
    }

    fn verifier(configs: &[&str]) -> Verifier {
        Verifier::from_config(Scheme::GitHub, configs).unwrap()
    }

    fn headers(signature: String) -> Vec<(String, String)> {
        vec![
            ("X-Hub-Signature-256".to_owned(), signature),
            (
                "X-GitHub-Delivery".to_owned(),
                "72d3162e-cc78-11e3-81ab-4c9367dc0958".to_owned(),
            ),
        ]
    }

    #[test]
    fn githubs_documented_example_verifies() {
        // GitHub docs, "Validating webhook deliveries": this secret and payload give
        // this signature.
        let value =
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".to_owned();
        assert_eq!(signature(&secret(KEY), b"Hello, World!"), value);
        assert_eq!(
            verifier(&[KEY]).verify(&headers(value), b"Hello, World!", NOW),
            Ok(Verified {
                delivery_id: Some("72d3162e-cc78-11e3-81ab-4c9367dc0958".into()),
                timestamp: None,
            })
        );
    }

    #[test]
    fn the_right_signature_is_accepted_at_any_time_and_without_a_delivery_id() {
        let value = signature(&secret(KEY), BODY);
        let only_signature = [("x-hub-signature-256", value.as_str())];
        assert_eq!(
            verifier(&[KEY]).verify(&only_signature, BODY, i64::MAX),
            Ok(Verified {
                delivery_id: None,
                timestamp: None
            })
        );
    }

    #[test]
    fn a_wrong_secret_is_refused() {
        assert_eq!(
            verifier(&[KEY]).verify(&headers(signature(&secret("other"), BODY)), BODY, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn a_tampered_body_is_refused() {
        assert_eq!(
            verifier(&[KEY]).verify(
                &headers(signature(&secret(KEY), BODY)),
                br#"{"action":"closed","number":1}"#,
                NOW
            ),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn a_missing_header_is_named() {
        let only_delivery = [("X-GitHub-Delivery", "72d3162e")];
        assert_eq!(
            verifier(&[KEY]).verify(&only_delivery, BODY, NOW),
            Err(SignatureError::MissingHeader(SIGNATURE))
        );
    }

    #[test]
    fn malformed_headers_are_refused() {
        let hex = signature(&secret(KEY), BODY).replace("sha256=", "");
        for value in [
            String::new(),
            hex.clone(),
            format!("sha1={hex}"),
            "sha256=not-hex".to_owned(),
        ] {
            assert!(
                matches!(
                    verifier(&[KEY]).verify(&headers(value.clone()), BODY, NOW),
                    Err(SignatureError::Malformed(_))
                ),
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_rotated_secret_accepts_signatures_made_with_either() {
        let verifier = verifier(&["old-secret", "new-secret"]);
        for config in ["old-secret", "new-secret"] {
            let value = signature(&secret(config), BODY);
            assert!(
                verifier.verify(&headers(value), BODY, NOW).is_ok(),
                "{config}"
            );
        }
    }
}
