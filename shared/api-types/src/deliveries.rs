//! Deliveries to a run: what `POST /callbacks/{callback_id}/fail` takes, and what a
//! delivery (an event, a message, a callback's outcome) or a webhook answers.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of `POST /callbacks/{callback_id}/fail`: `{"error": {"code", "message"}}`
/// or `{"code", "message"}`, all optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CallbackFailure {
    /// The failure, nested (read as an object, then as a [`FailureBody`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<FailureBody>)]
    pub error: Option<serde_json::Map<String, serde_json::Value>>,
    /// Its kind (default `CallbackFailed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What happened (default "failed by the caller").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A callback's failure.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct FailureBody {
    /// Its kind (`kind` is read too).
    #[serde(default, alias = "kind", skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A delivery through the authenticated API (event, message, callback outcome) was
/// durably recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Accepted {
    /// Always `true`.
    pub accepted: bool,
    /// It had been delivered before (same delivery id); nothing changed.
    pub duplicate: bool,
}

/// A webhook was durably recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Received {
    /// Always `true`.
    pub received: bool,
    /// It had been delivered before (same delivery id); nothing changed.
    pub duplicate: bool,
}
