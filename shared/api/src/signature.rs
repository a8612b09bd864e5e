//! Webhook signature verification, over the raw body bytes and before anything is
//! parsed: Standard Webhooks, Stripe and GitHub schemes, several active secrets at
//! once (rotation), constant-time comparison, and a timestamp tolerance against replay.
//! Pure: the current time is a parameter.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How a provider signs its webhooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>` over
    /// `id.timestamp.body`; secrets `whsec_<base64>`.
    StandardWebhooks,
    /// `Stripe-Signature: t=<unix>,v1=<hex>` over `t.body`.
    Stripe,
    /// `X-Hub-Signature-256: sha256=<hex>` over the body; no timestamp.
    GitHub,
}

impl Scheme {
    /// Parse `standard-webhooks`, `stripe` or `github`.
    pub fn parse(s: &str) -> Result<Scheme, SignatureError> {
        match s.to_ascii_lowercase().as_str() {
            "standard-webhooks" | "standard_webhooks" | "standardwebhooks" => {
                Ok(Scheme::StandardWebhooks)
            }
            "stripe" => Ok(Scheme::Stripe),
            "github" => Ok(Scheme::GitHub),
            other => Err(SignatureError::Malformed(format!(
                "unknown signature scheme '{other}'"
            ))),
        }
    }
}

/// Why a webhook was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A required header is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header or secret does not have the expected form.
    #[error("malformed: {0}")]
    Malformed(String),
    /// The timestamp is too old or too far in the future.
    #[error("timestamp outside the tolerance")]
    TimestampOutOfTolerance,
    /// No signature matched any active secret.
    #[error("no signature matches")]
    NoMatchingSignature,
}

/// A signing secret; its `Debug` never shows it.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// A secret from configuration: `whsec_<base64>` is decoded, anything else is used
    /// as raw bytes.
    pub fn parse(s: &str) -> Result<Secret, SignatureError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(SignatureError::Malformed("empty secret".into()));
        }
        match s.strip_prefix("whsec_") {
            Some(b64) => BASE64
                .decode(b64)
                .map(Secret)
                .map_err(|_| SignatureError::Malformed("whsec_ secret is not base64".into())),
            None => Ok(Secret(s.as_bytes().to_vec())),
        }
    }

    fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        for p in parts {
            mac.update(p);
        }
        mac
    }
}

/// What a verified webhook says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The sender's delivery id, when the scheme carries one.
    pub delivery_id: Option<String>,
    /// The signed timestamp, when the scheme carries one.
    pub timestamp: Option<i64>,
}

/// Verifies one provider's webhooks.
#[derive(Debug, Clone)]
pub struct Verifier {
    /// The scheme.
    pub scheme: Scheme,
    /// Every active secret; any one matching verifies.
    pub secrets: Vec<Secret>,
    /// How far the signed timestamp may be from now.
    pub tolerance: Duration,
}

fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, SignatureError> {
    headers
        .get(name)
        .ok_or(SignatureError::MissingHeader(name))?
        .to_str()
        .map_err(|_| SignatureError::Malformed(format!("{name} is not text")))
}

impl Verifier {
    /// A verifier with the default 5-minute tolerance.
    pub fn new(scheme: Scheme, secrets: Vec<Secret>) -> Self {
        Verifier {
            scheme,
            secrets,
            tolerance: Duration::from_secs(300),
        }
    }

    fn check_time(&self, ts: i64, now: i64) -> Result<(), SignatureError> {
        if (now - ts).unsigned_abs() > self.tolerance.as_secs() {
            return Err(SignatureError::TimestampOutOfTolerance);
        }
        Ok(())
    }

    /// Verify `body` (raw bytes) against `headers` at `now` (unix seconds).
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        match self.scheme {
            Scheme::StandardWebhooks => {
                let id = header(headers, "webhook-id")?;
                let ts_text = header(headers, "webhook-timestamp")?;
                let ts: i64 = ts_text
                    .trim()
                    .parse()
                    .map_err(|_| SignatureError::Malformed("webhook-timestamp".into()))?;
                let signatures = header(headers, "webhook-signature")?;
                self.check_time(ts, now)?;
                let candidates: Vec<Vec<u8>> = signatures
                    .split_whitespace()
                    .filter_map(|s| s.strip_prefix("v1,"))
                    .filter_map(|s| BASE64.decode(s).ok())
                    .collect();
                if candidates.is_empty() {
                    return Err(SignatureError::Malformed(
                        "no v1 signature in webhook-signature".into(),
                    ));
                }
                self.match_any(
                    &[id.as_bytes(), b".", ts_text.trim().as_bytes(), b".", body],
                    &candidates,
                )?;
                Ok(Verified {
                    delivery_id: Some(id.to_owned()),
                    timestamp: Some(ts),
                })
            }
            Scheme::Stripe => {
                let header_value = header(headers, "stripe-signature")?;
                let mut ts_text = None;
                let mut candidates = Vec::new();
                for part in header_value.split(',') {
                    match part.trim().split_once('=') {
                        Some(("t", v)) => ts_text = Some(v.to_owned()),
                        Some(("v1", v)) => candidates.extend(hex::decode(v).ok()),
                        _ => {}
                    }
                }
                let ts_text = ts_text.ok_or_else(|| {
                    SignatureError::Malformed("Stripe-Signature has no t=".into())
                })?;
                let ts: i64 = ts_text
                    .parse()
                    .map_err(|_| SignatureError::Malformed("Stripe-Signature t=".into()))?;
                if candidates.is_empty() {
                    return Err(SignatureError::Malformed(
                        "Stripe-Signature has no v1=".into(),
                    ));
                }
                self.check_time(ts, now)?;
                self.match_any(&[ts_text.as_bytes(), b".", body], &candidates)?;
                Ok(Verified {
                    delivery_id: None,
                    timestamp: Some(ts),
                })
            }
            Scheme::GitHub => {
                let value = header(headers, "x-hub-signature-256")?;
                let hex_sig = value.strip_prefix("sha256=").ok_or_else(|| {
                    SignatureError::Malformed("X-Hub-Signature-256 must start sha256=".into())
                })?;
                let sig = hex::decode(hex_sig).map_err(|_| {
                    SignatureError::Malformed("X-Hub-Signature-256 is not hex".into())
                })?;
                self.match_any(&[body], &[sig])?;
                let delivery_id = headers
                    .get("x-github-delivery")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                Ok(Verified {
                    delivery_id,
                    timestamp: None,
                })
            }
        }
    }

    fn match_any(&self, parts: &[&[u8]], candidates: &[Vec<u8>]) -> Result<(), SignatureError> {
        // `verify_slice` compares in constant time.
        let ok = self.secrets.iter().any(|secret| {
            candidates
                .iter()
                .any(|c| secret.mac(parts).verify_slice(c).is_ok())
        });
        if ok {
            Ok(())
        } else {
            Err(SignatureError::NoMatchingSignature)
        }
    }
}

/// The headers a sender using `scheme` and `secret` attaches to `body` (for tests, the
/// demo's fake provider, and users' own tests).
pub fn sign(
    scheme: Scheme,
    secret: &Secret,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let ts = timestamp.to_string();
    match scheme {
        Scheme::StandardWebhooks => {
            let sig = secret
                .mac(&[id.as_bytes(), b".", ts.as_bytes(), b".", body])
                .finalize()
                .into_bytes();
            vec![
                ("webhook-id", id.to_owned()),
                ("webhook-timestamp", ts),
                ("webhook-signature", format!("v1,{}", BASE64.encode(sig))),
            ]
        }
        Scheme::Stripe => {
            let sig = secret
                .mac(&[ts.as_bytes(), b".", body])
                .finalize()
                .into_bytes();
            vec![(
                "stripe-signature",
                format!("t={ts},v1={}", hex::encode(sig)),
            )]
        }
        Scheme::GitHub => {
            let sig = secret.mac(&[body]).finalize().into_bytes();
            vec![
                (
                    "x-hub-signature-256",
                    format!("sha256={}", hex::encode(sig)),
                ),
                ("x-github-delivery", id.to_owned()),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_767_225_600;
    const SCHEMES: [Scheme; 3] = [Scheme::StandardWebhooks, Scheme::Stripe, Scheme::GitHub];

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    fn secret(s: &str) -> Secret {
        Secret::parse(s).unwrap()
    }

    #[test]
    fn standard_webhooks_published_example_verifies() {
        // The example from the Standard Webhooks specification.
        let v = Verifier::new(
            Scheme::StandardWebhooks,
            vec![secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")],
        );
        let h = headers(&[
            ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek".into()),
            ("webhook-timestamp", "1614265330".into()),
            (
                "webhook-signature",
                "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=".into(),
            ),
        ]);
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            v.verify(&h, body, 1614265330)
                .unwrap()
                .delivery_id
                .as_deref(),
            Some("msg_p5jXN8AQM9LWM0D4loKWxJek")
        );
    }

    #[test]
    fn each_scheme_accepts_the_right_signature_and_rejects_wrong_secret_tampered_body_and_old_timestamps()
     {
        for scheme in SCHEMES {
            let good = secret("whsec_c2VjcmV0LWtleS1vbmU=");
            let v = Verifier::new(scheme, vec![good.clone()]);
            let body = br#"{"status":"COMPLETED"}"#;
            let signed = headers(&sign(scheme, &good, "evt_1", NOW, body));
            assert!(v.verify(&signed, body, NOW).is_ok(), "{scheme:?}");
            let wrong = headers(&sign(scheme, &secret("another"), "evt_1", NOW, body));
            assert_eq!(
                v.verify(&wrong, body, NOW),
                Err(SignatureError::NoMatchingSignature),
                "{scheme:?}"
            );
            assert_eq!(
                v.verify(&signed, br#"{"status":"FAILED"}"#, NOW),
                Err(SignatureError::NoMatchingSignature),
                "{scheme:?}"
            );
            if scheme != Scheme::GitHub {
                let old = headers(&sign(scheme, &good, "evt_1", NOW - 301, body));
                assert_eq!(
                    v.verify(&old, body, NOW),
                    Err(SignatureError::TimestampOutOfTolerance),
                    "{scheme:?}"
                );
                let future = headers(&sign(scheme, &good, "evt_1", NOW + 301, body));
                assert_eq!(
                    v.verify(&future, body, NOW),
                    Err(SignatureError::TimestampOutOfTolerance),
                    "{scheme:?}"
                );
            }
            assert!(
                matches!(
                    v.verify(&HeaderMap::new(), body, NOW),
                    Err(SignatureError::MissingHeader(_))
                ),
                "{scheme:?}"
            );
        }
    }

    #[test]
    fn a_rotated_secret_accepts_signatures_made_with_either() {
        for scheme in SCHEMES {
            let (old, new) = (secret("old-secret"), secret("new-secret"));
            let v = Verifier::new(scheme, vec![old.clone(), new.clone()]);
            for s in [&old, &new] {
                let h = headers(&sign(scheme, s, "evt", NOW, b"{}"));
                assert!(v.verify(&h, b"{}", NOW).is_ok(), "{scheme:?}");
            }
        }
    }

    #[test]
    fn malformed_headers_are_refused() {
        let v = Verifier::new(Scheme::Stripe, vec![secret("s")]);
        let h = headers(&[("stripe-signature", "garbage".into())]);
        assert!(matches!(
            v.verify(&h, b"{}", NOW),
            Err(SignatureError::Malformed(_))
        ));
        let g = Verifier::new(Scheme::GitHub, vec![secret("s")]);
        let h = headers(&[("x-hub-signature-256", "md5=abc".into())]);
        assert!(matches!(
            g.verify(&h, b"{}", NOW),
            Err(SignatureError::Malformed(_))
        ));
        assert!(Secret::parse("whsec_***").is_err());
        assert_eq!(format!("{:?}", secret("hunter2")), "Secret(…)");
    }

    proptest! {
        #[test]
        fn sign_then_verify_always_succeeds_and_any_byte_change_fails(
            body in proptest::collection::vec(any::<u8>(), 1..256),
            key in proptest::collection::vec(any::<u8>(), 1..64),
            skew in -300i64..300,
            flip in any::<usize>(),
            which in 0usize..3,
        ) {
            let scheme = SCHEMES[which];
            let s = Secret(key);
            let v = Verifier::new(scheme, vec![s.clone()]);
            let h = headers(&sign(scheme, &s, "id", NOW + skew, &body));
            prop_assert!(v.verify(&h, &body, NOW).is_ok());
            let mut tampered = body.clone();
            let i = flip % tampered.len();
            tampered[i] ^= 0x01;
            prop_assert_eq!(v.verify(&h, &tampered, NOW), Err(SignatureError::NoMatchingSignature));
        }
    }
}
