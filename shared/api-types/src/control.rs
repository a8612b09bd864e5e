//! Control of a run by its operator: what `POST /runs/{id}/operations/{position}/resolve`
//! takes (cancel, resume and upgrade take no body and answer the run view).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of a resolution: `{"outcome": "succeeded", "value": ...}`,
/// `{"outcome": "failed", "error": {"code", "message"}}` or `{"outcome": "retry"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Resolution {
    /// The call happened and returned `value`; the workflow gets it.
    Succeeded {
        /// What the call returned (any JSON; `null` when left out).
        #[serde(default)]
        value: serde_json::Value,
    },
    /// The call failed (or must not be made): the workflow gets this as the tool
    /// call's failure.
    Failed {
        /// The failure: `{"code", "message"}` or just a message.
        error: ResolvedError,
    },
    /// Make the call again; the operator takes the risk that it already happened.
    Retry,
}

/// A failure given by the operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged, try_from = "serde_json::Value")]
pub enum ResolvedError {
    /// Only what happened.
    Message(String),
    /// Its kind and what happened.
    Detailed {
        /// Its kind (default `ResolvedAsFailed`; `kind` is read too).
        #[serde(default, alias = "kind", skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        /// What happened.
        message: String,
    },
}

impl TryFrom<serde_json::Value> for ResolvedError {
    type Error = String;

    /// Read by hand so that a wrong shape is named plainly (serde's untagged enums say
    /// only "did not match any variant").
    fn try_from(value: serde_json::Value) -> Result<Self, String> {
        const SHAPE: &str =
            "'error' must be a message or {\"code\": \"...\", \"message\": \"...\"}";
        match value {
            serde_json::Value::String(message) => Ok(ResolvedError::Message(message)),
            serde_json::Value::Object(fields) => {
                let text = |name: &str| match fields.get(name) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(format!("{SHAPE}: '{name}' is not text")),
                };
                let code = match text("code")? {
                    Some(code) => Some(code),
                    None => text("kind")?,
                };
                let message =
                    text("message")?.ok_or_else(|| format!("{SHAPE}: it has no 'message'"))?;
                Ok(ResolvedError::Detailed { code, message })
            }
            _ => Err(SHAPE.into()),
        }
    }
}
