//! The public `/hooks/*` routes: `POST /hooks/{token}` completes the callback whose
//! capability token is in the URL, `POST /hooks/sources/{source}` verifies a configured
//! provider's signature and delivers its body (see [`crate::WebhookReceiver`] for the
//! sources and the order of checks).

use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use siesta::ports::DeliverOutcome;
use siesta::*;
use siesta_webhook::SignatureError;

use crate::ApiError;
use crate::extract::{ApiPath, json, read_body};
use crate::responses::{CallbackWebhookErrors, SourceWebhookErrors};
use crate::state::AppState;
use siesta_api_types::Received;

/// A webhook as received: its headers (the signature's, the delivery's id) and its raw
/// body, within the receiver's size limit. The signature is checked over exactly these
/// bytes, and an identical retry has the same delivery id.
pub(crate) struct Hook {
    headers: HeaderMap,
    body: Bytes,
}

impl FromRequest<AppState> for Hook {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let body = read_body(body, state.hooks.max_body()).await?;
        Ok(Hook {
            headers: parts.headers,
            body,
        })
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
    Hook { headers, body }: Hook,
) -> Result<Response, ApiError> {
    let token = CallbackId::from(token.as_str());
    // The engine looks the token up (an unknown one is a 404 from there); only a body
    // that is not JSON reads it here, so that an unknown token is still named first.
    let value: serde_json::Value = match json(&body) {
        Ok(value) => value,
        Err(bad_body) => {
            let store = &app.engine.backend().store;
            if store.get_callback(&token).await?.is_none() {
                return Err(ApiError::not_found("callback"));
            }
            return Err(bad_body);
        }
    };
    let delivery = DeliveryId(format!("hook:{token}:{}", delivery_id(&headers, &body)));
    let outcome = app
        .engine
        .complete_callback(&token, None, Ok(value), Some(delivery))
        .await
        .map_err(ApiError::on_callback)?;
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
    Hook { headers, body }: Hook,
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
            .map_err(ApiError::on_callback)?;
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
