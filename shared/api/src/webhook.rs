//! The public webhook receiver: `POST /hooks/{token}`, addressed by a callback's
//! capability token (no API key: the token is the credential), and
//! `POST /hooks/sources/{source}` for configured providers that cannot carry our URL:
//! their signature is verified over the raw body first, then a correlation id read from
//! the body (a JSON pointer) names the run, and the webhook is delivered to it as a named
//! event — kept if the run is not waiting for it yet. A source configured with a
//! `callback` pointer instead reads a callback's token from the body and completes that
//! callback with the verified body, as `/hooks/{token}` would (for a provider that is
//! handed the token as metadata and signs what it sends back).
//!
//! Order of checks, so that bad input changes nothing: size (413), route and token (404),
//! JSON (400), then one durable write (the delivery, deduplicated by its id), then 2xx,
//! then the wake-up. A delivery after the callback closed (completed, timed out) is 410.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use siesta::ports::DeliverOutcome;
use siesta::*;

use crate::ApiError;
use crate::extract::{ApiPath, json, read_body};
use crate::responses::{CallbackWebhookErrors, SourceWebhookErrors};
use crate::routes::AppState;
use crate::view::Received;
use siesta_webhook::{Scheme, SignatureError, Verifier};

/// A configured webhook source, as written in configuration (JSON).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The `{source}` in `/hooks/sources/{source}`.
    pub name: String,
    /// The tenant whose runs it addresses (default `default`).
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// `standard-webhooks`, `stripe` or `github`.
    pub scheme: String,
    /// Active secrets (several during a rotation).
    pub secrets: Vec<String>,
    /// JSON pointer to the run id in the body, e.g. `/data/metadata/run_id`.
    /// Required unless `callback` is given.
    #[serde(default)]
    pub correlation: String,
    /// JSON pointer to a callback's token (id) in the body, e.g.
    /// `/data/metadata/callback_id`: the verified body completes that callback (of this
    /// source's tenant) instead of being delivered to a run as an event. Exclusive with
    /// `correlation` and `event`.
    #[serde(default)]
    pub callback: Option<String>,
    /// The event name delivered to the run (default: the source's name).
    #[serde(default)]
    pub event: Option<String>,
    /// Timestamp tolerance in seconds (default 300).
    #[serde(default)]
    pub tolerance_secs: Option<u64>,
}

fn default_tenant() -> String {
    "default".to_owned()
}

/// A webhook source ready to verify and route deliveries.
#[derive(Debug, Clone)]
pub struct WebhookSource {
    name: String,
    tenant: TenantId,
    verifier: Verifier,
    correlation: String,
    event: String,
    callback: Option<String>,
}

impl WebhookSource {
    /// The source's name: the `{source}` of `/hooks/sources/{source}`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tenant whose runs and callbacks the source addresses.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Build a source from its configuration.
    pub fn from_config(c: SourceConfig) -> Result<Self, String> {
        let scheme: Scheme = c
            .scheme
            .parse()
            .map_err(|e| format!("source {}: {e}", c.name))?;
        match (&c.callback, c.correlation.is_empty()) {
            (None, _) if !c.correlation.starts_with('/') => {
                return Err(format!(
                    "source {}: correlation must be a JSON pointer like /data/run_id",
                    c.name
                ));
            }
            (Some(pointer), _) if !pointer.starts_with('/') => {
                return Err(format!(
                    "source {}: callback must be a JSON pointer like /data/callback_id",
                    c.name
                ));
            }
            (Some(_), false) => {
                return Err(format!(
                    "source {}: give either correlation (deliver an event to a run) or \
                     callback (complete a callback), not both",
                    c.name
                ));
            }
            (Some(_), true) if c.event.is_some() => {
                return Err(format!(
                    "source {}: event names the event delivered to a run; a callback \
                     source completes a callback and takes none",
                    c.name
                ));
            }
            _ => {}
        }
        let mut verifier = Verifier::from_config(scheme, &c.secrets)
            .map_err(|e| format!("source {}: {e}", c.name))?;
        if let Some(t) = c.tolerance_secs {
            verifier = verifier.with_tolerance(Duration::from_secs(t));
        }
        Ok(WebhookSource {
            event: c.event.unwrap_or_else(|| c.name.clone()),
            tenant: TenantId(c.tenant),
            name: c.name,
            verifier,
            correlation: c.correlation,
            callback: c.callback,
        })
    }

    /// Parse a JSON array of [`SourceConfig`]s (the `SIESTA_WEBHOOK_SOURCES` format).
    pub fn parse_all(json: &str) -> Result<Vec<WebhookSource>, String> {
        if json.trim().is_empty() {
            return Ok(Vec::new());
        }
        let configs: Vec<SourceConfig> =
            serde_json::from_str(json).map_err(|e| format!("webhook sources: {e}"))?;
        configs
            .into_iter()
            .map(WebhookSource::from_config)
            .collect()
    }
}

/// The default largest webhook body accepted: 1 MiB.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// Receives webhooks and turns them into callback outcomes and events: the state of the
/// `/hooks/*` routes. Its sources can be replaced while it serves (a rotated secret).
#[derive(Clone)]
pub struct WebhookReceiver {
    max_body: usize,
    sources: Arc<RwLock<Arc<HashMap<String, WebhookSource>>>>,
}

impl WebhookReceiver {
    /// A receiver accepting bodies up to `max_body` bytes (413 over it).
    pub fn new(max_body: usize) -> Self {
        WebhookReceiver {
            max_body,
            sources: Arc::default(),
        }
    }

    /// With these configured sources.
    pub fn with_sources(self, sources: Vec<WebhookSource>) -> Self {
        self.set_sources(sources);
        self
    }

    /// Serve these sources from now on, in place of the ones before (every clone of
    /// this receiver sees them).
    pub fn set_sources(&self, sources: Vec<WebhookSource>) {
        let map = Arc::new(sources.into_iter().map(|s| (s.name.clone(), s)).collect());
        *self.sources.write().unwrap_or_else(PoisonError::into_inner) = map;
    }

    /// The source named `name`, if configured.
    pub fn source(&self, name: &str) -> Option<WebhookSource> {
        self.sources
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// The largest body accepted.
    pub fn max_body(&self) -> usize {
        self.max_body
    }
}

/// The raw body of a webhook, within the receiver's size limit: the signature is
/// checked over exactly these bytes.
pub(crate) struct HookBody(Bytes);

impl FromRequest<AppState> for HookBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        read_body(req.into_body(), state.hooks.max_body)
            .await
            .map(HookBody)
    }
}

/// Complete the callback whose capability token is in the URL with the body (JSON). No
/// API key: the token is the credential.
#[utoipa::path(
    post, path = "/hooks/{token}", operation_id = "callbackWebhook", tag = "webhooks",
    params(
        ("token" = String, Path, description = "The callback's token (its id), from its URL"),
        ("webhook-id" = Option<String>, Header, description = "The delivery's id (also `X-GitHub-Delivery` or `Idempotency-Key`); default: a hash of the body"),
    ),
    request_body(content = serde_json::Value, content_type = "application/json", description = "The callback's result (any JSON)"),
    responses(
        (status = 200, description = "Recorded (or a duplicate)", body = Received),
        CallbackWebhookErrors,
    )
)]
pub(crate) async fn callback_webhook(
    State(app): State<AppState>,
    ApiPath(token): ApiPath<String>,
    headers: HeaderMap,
    HookBody(body): HookBody,
) -> Result<Response, ApiError> {
    let token = CallbackId::from(token.as_str());
    let record = app.engine.backend().store.get_callback(&token).await?;
    if record.is_none() {
        return Err(ApiError::not_found("callback"));
    }
    let value: serde_json::Value = json(&body)?;
    let delivery = DeliveryId(format!("hook:{token}:{}", delivery_id(&headers, &body)));
    let outcome = app
        .engine
        .complete_callback(&token, None, Ok(value), Some(delivery))
        .await
        .map_err(|e| match e {
            EngineError::NotFound => ApiError::not_found("callback"),
            other => other.into(),
        })?;
    Ok(acknowledged(outcome))
}

/// A signed webhook from a configured provider: its signature is verified over the raw
/// body, then the correlation id in the body names the run (an event is delivered to
/// it), or a callback token in the body names the callback it completes.
#[utoipa::path(
    post, path = "/hooks/sources/{source}", operation_id = "sourceWebhook", tag = "webhooks",
    params(
        ("source" = String, Path, description = "The configured source's name"),
        ("webhook-id" = Option<String>, Header, description = "Standard Webhooks: the delivery's id"),
        ("webhook-timestamp" = Option<String>, Header, description = "Standard Webhooks: seconds since the epoch"),
        ("webhook-signature" = Option<String>, Header, description = "Standard Webhooks: `v1,<base64 HMAC-SHA256>`, several during a rotation"),
        ("Stripe-Signature" = Option<String>, Header, description = "Stripe-style: `t=<ts>,v1=<hex HMAC-SHA256>`"),
        ("X-Hub-Signature-256" = Option<String>, Header, description = "GitHub-style: `sha256=<hex HMAC-SHA256>`"),
    ),
    request_body(content = serde_json::Value, content_type = "application/json", description = "The provider's payload, as signed"),
    responses(
        (status = 200, description = "Verified and recorded (or a duplicate)", body = Received),
        SourceWebhookErrors,
    )
)]
pub(crate) async fn source_webhook(
    State(app): State<AppState>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
    HookBody(body): HookBody,
) -> Result<Response, ApiError> {
    let source = app
        .hooks
        .source(&name)
        .ok_or_else(|| ApiError::not_found("webhook source"))?;
    let engine = &app.engine;
    let now = engine.clock().now().millis() / 1000;
    let verified = source.verifier.verify(&headers, &body, now).map_err(|e| {
        let code = match e {
            SignatureError::TimestampOutOfTolerance => "timestamp_out_of_tolerance",
            _ => "bad_signature",
        };
        ApiError::new(StatusCode::UNAUTHORIZED, code, e.to_string())
    })?;
    let value: serde_json::Value = json(&body)?;
    let id = verified
        .delivery_id
        .unwrap_or_else(|| delivery_id(&headers, &body));
    let delivery = DeliveryId(format!("source:{name}:{id}"));
    if let Some(pointer) = &source.callback {
        let token = match value.pointer(pointer) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => CallbackId(s.clone()),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "the body has no callback id at {pointer}"
                )));
            }
        };
        let outcome = engine
            .complete_callback(&token, Some(&source.tenant), Ok(value), Some(delivery))
            .await
            .map_err(|e| match e {
                EngineError::NotFound => ApiError::not_found("callback"),
                other => other.into(),
            })?;
        return Ok(acknowledged(outcome));
    }
    let run_id = match value.pointer(&source.correlation) {
        Some(serde_json::Value::String(s)) if !s.is_empty() => RunId(s.clone()),
        _ => {
            return Err(ApiError::bad_request(format!(
                "the body has no correlation id at {}",
                source.correlation
            )));
        }
    };
    let outcome = engine
        .deliver_event(
            &source.tenant,
            &run_id,
            &source.event,
            value,
            Some(delivery),
        )
        .await
        .map_err(|e| match e {
            EngineError::NotFound => ApiError::not_found("run"),
            other => other.into(),
        })?;
    Ok(acknowledged(outcome))
}

/// The delivery's id: the sender's (`webhook-id`, `X-GitHub-Delivery`,
/// `Idempotency-Key`), else a hash of the body, so an identical retry is a duplicate.
pub(crate) fn delivery_id(headers: &HeaderMap, body: &[u8]) -> String {
    for name in ["webhook-id", "x-github-delivery", "idempotency-key"] {
        if let Some(v) = headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
        {
            return v.to_owned();
        }
    }
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

/// 200 with [`Received`], which also rides on the response's extensions for a layer
/// that counts duplicates.
fn acknowledged(outcome: DeliverOutcome) -> Response {
    let received = Received {
        received: true,
        duplicate: outcome == DeliverOutcome::Duplicate,
    };
    let mut response = (StatusCode::OK, Json(received)).into_response();
    response.extensions_mut().insert(received);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Vec<WebhookSource>, String> {
        WebhookSource::parse_all(json)
    }

    #[test]
    fn a_source_routes_by_correlation_or_by_callback_but_not_both() {
        let by_run = parse(
            r#"[{"name": "ci", "scheme": "github", "secrets": ["s"], "correlation": "/run_id"}]"#,
        )
        .unwrap();
        assert_eq!(
            (
                by_run[0].correlation.as_str(),
                by_run[0].callback.as_deref()
            ),
            ("/run_id", None)
        );
        assert_eq!(
            by_run[0].event, "ci",
            "the event defaults to the source's name"
        );
        let by_callback = parse(
            r#"[{"name": "psp", "scheme": "stripe", "secrets": ["whsec_x"], "callback": "/data/callback_id"}]"#,
        )
        .unwrap();
        assert_eq!(
            by_callback[0].callback.as_deref(),
            Some("/data/callback_id")
        );

        for (bad, says) in [
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"]}]"#,
                "correlation must be a JSON pointer",
            ),
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"], "correlation": "run_id"}]"#,
                "correlation must be a JSON pointer",
            ),
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"], "callback": "cb"}]"#,
                "callback must be a JSON pointer",
            ),
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"], "callback": "/cb", "correlation": "/run_id"}]"#,
                "not both",
            ),
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"], "callback": "/cb", "event": "payment"}]"#,
                "takes none",
            ),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
