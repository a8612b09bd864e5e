//! The public webhook receiver: `POST /hooks/{token}`, addressed by a callback's
//! capability token (no API key: the token is the credential).
//!
//! Order of checks, so that bad input changes nothing: size (413), route and token (404),
//! JSON (400), then one durable write (the delivery, deduplicated by its id), then 2xx,
//! then the wake-up. A delivery after the callback closed (completed, timed out) is 410.

use http::{HeaderMap, Method, StatusCode};
use sha2::{Digest, Sha256};
use siesta::ports::DeliverOutcome;
use siesta::*;

use crate::{ApiError, ApiRequest, ApiResponse};

/// The default largest body accepted: 1 MiB.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// Receives webhooks and turns them into callback outcomes.
#[derive(Clone)]
pub struct WebhookReceiver {
    engine: Engine,
    max_body: usize,
}

impl WebhookReceiver {
    /// A receiver over `engine` accepting bodies up to `max_body` bytes.
    pub fn new(engine: Engine, max_body: usize) -> Self {
        WebhookReceiver { engine, max_body }
    }

    /// Answer one webhook request.
    pub async fn handle(&self, req: ApiRequest) -> ApiResponse {
        match self.route(&req).await {
            Ok(r) => r,
            Err(e) => e.into(),
        }
    }

    async fn route(&self, req: &ApiRequest) -> Result<ApiResponse, ApiError> {
        if req.body.len() > self.max_body {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!(
                    "the body is {} bytes; the limit is {}",
                    req.body.len(),
                    self.max_body
                ),
            ));
        }
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        match (&req.method, segments.as_slice()) {
            (&Method::POST, ["hooks", token]) if !token.is_empty() => {
                self.by_token(&CallbackId::from(*token), req).await
            }
            (_, ["hooks", ..]) => Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "webhooks are POST",
            )),
            _ => Err(ApiError::not_found("route")),
        }
    }

    async fn by_token(
        &self,
        token: &CallbackId,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        let record = self
            .engine
            .backend()
            .store
            .get_callback(token)
            .await
            .map_err(EngineError::from)?;
        if record.is_none() {
            return Err(ApiError::not_found("callback"));
        }
        let value: serde_json::Value = serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?;
        let delivery = DeliveryId(format!(
            "hook:{token}:{}",
            delivery_id(&req.headers, &req.body)
        ));
        let outcome = self
            .engine
            .complete_callback(token, None, Ok(value), Some(delivery))
            .await
            .map_err(|e| match e {
                EngineError::NotFound => ApiError::not_found("callback"),
                other => other.into(),
            })?;
        Ok(acknowledged(outcome))
    }
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

pub(crate) fn acknowledged(outcome: DeliverOutcome) -> ApiResponse {
    let duplicate = outcome == DeliverOutcome::Duplicate;
    ApiResponse {
        status: StatusCode::OK,
        headers: HeaderMap::new(),
        body: serde_json::json!({"received": true, "duplicate": duplicate}),
    }
}
