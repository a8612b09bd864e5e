//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…][,v0=<hex>]`, HMAC-SHA256
//! over `{t}.{body}`, keyed with the whole `whsec_…` string.
//!
//! During a secret roll Stripe sends one `v1` per active secret; any may match.
//! Other schemes (`v0`, test-mode signatures) are skipped. Stripe puts no delivery id
//! in the headers — the event id is in the body — so [`Verified::delivery_id`] is
//! `None`.

use crate::headers::{self, Headers};
use crate::{Secret, SignatureError, Verified, Verifier};

/// The header carrying the timestamp and signatures.
pub const SIGNATURE: &str = "stripe-signature";

/// The `Stripe-Signature` value that `secret` gives to `body` sent at `timestamp`:
/// `t=<timestamp>,v1=<hex>`.
pub fn signature(secret: &Secret, timestamp: i64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    let mac = secret.sign(&[timestamp.as_bytes(), b".", body]);
    format!("t={timestamp},v1={}", hex::encode(mac))
}

pub(crate) fn verify<H: Headers + ?Sized>(
    verifier: &Verifier,
    headers: &H,
    body: &[u8],
    now_unix_secs: i64,
) -> Result<Verified, SignatureError> {
    let value = headers::required(headers, SIGNATURE)?;
    let mut timestamp_text = None;
    let mut candidates = Vec::new();
    for element in value.split(',') {
        let (key, item) = element
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed(
                "stripe-signature element (expected key=value)",
            ))?;
        match key {
            "t" if timestamp_text.is_some() => {
                return Err(SignatureError::Malformed("stripe-signature (t= twice)"));
            }
            "t" => timestamp_text = Some(item),
            "v1" => candidates.push(
                hex::decode(item)
                    .map_err(|_| SignatureError::Malformed("stripe-signature v1= (not hex)"))?,
            ),
            _ => {}
        }
    }
    let timestamp_text =
        timestamp_text.ok_or(SignatureError::Malformed("stripe-signature (no t=)"))?;
    let timestamp =
        crate::parse_unix_secs(timestamp_text, "stripe-signature t= (not unix seconds)")?;
    if candidates.is_empty() {
        return Err(SignatureError::Malformed("stripe-signature (no v1=)"));
    }
    verifier.check(
        &[timestamp_text.as_bytes(), b".", body],
        &candidates,
        timestamp,
        now_unix_secs,
    )?;
    Ok(Verified {
        delivery_id: None,
        timestamp: Some(timestamp),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scheme;

    const NOW: i64 = 1_700_000_000;
    const BODY: &[u8] = br#"{"id":"evt_1","object":"event"}"#;
    const KEY: &str = "whsec_test_secret";

    fn secret(config: &str) -> Secret {
        Secret::parse(Scheme::Stripe, config).unwrap()
    }

    fn verifier(configs: &[&str]) -> Verifier {
        Verifier::from_config(Scheme::Stripe, configs).unwrap()
    }

    fn header(value: impl Into<String>) -> Vec<(String, String)> {
        vec![("Stripe-Signature".to_owned(), value.into())]
    }

    #[test]
    fn a_known_signature_verifies() {
        // Computed independently: HMAC-SHA256(key = "whsec_test_secret" as UTF-8,
        // "1700000000." + body), hex — the key used whole, as Stripe's libraries do.
        let value = "t=1700000000,\
                     v1=0c8670ed117751cc551a20e35839447075c42800ea3cf3e8a2fbda99cd1e6edd";
        assert_eq!(signature(&secret(KEY), NOW, BODY), value);
        assert_eq!(
            verifier(&[KEY]).verify(&header(value), BODY, NOW),
            Ok(Verified {
                delivery_id: None,
                timestamp: Some(NOW)
            })
        );
    }

    #[test]
    fn the_right_signature_is_accepted_among_other_schemes_and_spaces() {
        let mac = signature(&secret(KEY), NOW, BODY);
        let v1 = mac.split_once(",v1=").unwrap().1;
        let value = format!("t={NOW}, v1={}, v1={v1}, v0=deadbeef", "00".repeat(32));
        assert!(verifier(&[KEY]).verify(&header(value), BODY, NOW).is_ok());
    }

    #[test]
    fn a_wrong_secret_is_refused() {
        let value = signature(&secret("whsec_another"), NOW, BODY);
        assert_eq!(
            verifier(&[KEY]).verify(&header(value), BODY, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn a_tampered_body_is_refused() {
        let value = signature(&secret(KEY), NOW, BODY);
        assert_eq!(
            verifier(&[KEY]).verify(&header(value), br#"{"id":"evt_2","object":"event"}"#, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn a_tampered_timestamp_is_refused() {
        let value = signature(&secret(KEY), NOW, BODY).replace("t=1700000000", "t=1700000001");
        assert_eq!(
            verifier(&[KEY]).verify(&header(value), BODY, NOW),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn an_expired_timestamp_is_refused() {
        let value = signature(&secret(KEY), NOW - 301, BODY);
        assert_eq!(
            verifier(&[KEY]).verify(&header(value), BODY, NOW),
            Err(SignatureError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn a_timestamp_too_far_in_the_future_is_refused() {
        let value = signature(&secret(KEY), NOW + 301, BODY);
        assert_eq!(
            verifier(&[KEY]).verify(&header(value), BODY, NOW),
            Err(SignatureError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn a_missing_header_is_named() {
        assert_eq!(
            verifier(&[KEY]).verify(&[("webhook-signature", "v1,AAAA")], BODY, NOW),
            Err(SignatureError::MissingHeader(SIGNATURE))
        );
    }

    #[test]
    fn malformed_headers_are_refused() {
        let good_v1 = "0c8670ed117751cc551a20e35839447075c42800ea3cf3e8a2fbda99cd1e6edd";
        for value in [
            String::new(),
            "garbage".to_owned(),
            format!("v1={good_v1}"),
            format!("t=,v1={good_v1}"),
            format!("t=soon,v1={good_v1}"),
            format!("t={NOW},t={NOW},v1={good_v1}"),
            format!("t={NOW}"),
            format!("t={NOW},v0={good_v1}"),
            format!("t={NOW},v1=xyz"),
        ] {
            assert!(
                matches!(
                    verifier(&[KEY]).verify(&header(value.clone()), BODY, NOW),
                    Err(SignatureError::Malformed(_))
                ),
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_rotated_secret_accepts_signatures_made_with_either() {
        let verifier = verifier(&["whsec_old", "whsec_new"]);
        for config in ["whsec_old", "whsec_new"] {
            let value = signature(&secret(config), NOW, BODY);
            assert!(
                verifier.verify(&header(value), BODY, NOW).is_ok(),
                "{config}"
            );
        }
        // AND what Stripe itself sends during a roll: one v1 per secret
        let both = format!(
            "{},v1={}",
            signature(&secret("whsec_retired"), NOW, BODY),
            signature(&secret("whsec_new"), NOW, BODY)
                .split_once(",v1=")
                .unwrap()
                .1
        );
        assert!(verifier.verify(&header(both), BODY, NOW).is_ok());
    }
}
