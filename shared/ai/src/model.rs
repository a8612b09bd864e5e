//! What a language model is to Siesta: something that answers a request with a reply,
//! or an error that says whether and when to try again.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::message::{Message, ToolSpec, Usage};

/// What is sent to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The model's name (`gpt-4o-mini`, `llama3.1`…).
    pub model: String,
    /// The whole conversation so far.
    pub messages: Vec<Message>,
    /// The tools it may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// The most tokens the reply may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
}

/// What a model answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelReply {
    /// The assistant's message: text, tool calls, or both.
    pub message: Message,
    /// Why it stopped (`stop`, `tool_calls`, `length`…; empty when not said).
    pub finish_reason: String,
    /// Tokens used.
    pub usage: Usage,
    /// The model that answered, as it named itself.
    pub model: String,
}

/// Receives the reply's text as the model produces it (token by token, when the model
/// streams). Called only while the call is live, never on replay.
pub type TokenSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    /// The HTTP status, when the endpoint answered with one.
    pub status: Option<u16>,
    /// Whether another attempt may succeed (429, 408, 5xx, a transport error).
    pub retryable: bool,
    /// How long the endpoint asked to wait before the next attempt (`Retry-After`).
    pub retry_after: Option<Duration>,
    /// What happened.
    pub message: String,
}

impl ModelError {
    /// An error of the endpoint's `status`: 408, 429 and 5xx are retryable.
    pub fn status(status: u16, retry_after: Option<Duration>, message: impl Into<String>) -> Self {
        ModelError {
            status: Some(status),
            retryable: status == 408 || status == 429 || (500..600).contains(&status),
            retry_after,
            message: message.into(),
        }
    }

    /// A failure to reach the endpoint or to read its answer: retryable.
    pub fn transport(message: impl Into<String>) -> Self {
        ModelError {
            status: None,
            retryable: true,
            retry_after: None,
            message: message.into(),
        }
    }

    /// An answer that cannot be used (no choice, undecodable): not retried.
    pub fn invalid(message: impl Into<String>) -> Self {
        ModelError {
            status: None,
            retryable: false,
            retry_after: None,
            message: message.into(),
        }
    }

    /// The step error a call's attempt fails with: its kind names the status
    /// (`http_429`, `model_transport`, `model_invalid`), and a `Retry-After` sets the
    /// next attempt's delay.
    pub fn into_step_error(self) -> siesta::StepError {
        let kind = match (self.status, self.retryable) {
            (Some(status), _) => format!("http_{status}"),
            (None, true) => "model_transport".to_owned(),
            (None, false) => "model_invalid".to_owned(),
        };
        let error = siesta::StepError::new(kind, self.message, self.retryable);
        match self.retry_after {
            Some(delay) => error.retry_after(delay),
            None => error,
        }
    }
}

/// A language model: the OpenAI-compatible client ([`crate::OpenAiCompatible`]), the
/// scripted fake ([`crate::ScriptedModel`]), or one of your own.
#[async_trait]
pub trait Model: Send + Sync {
    /// Answer `request`; when `tokens` is given, hand it the reply's text as it comes.
    async fn complete(
        &self,
        request: &ModelRequest,
        tokens: Option<TokenSink>,
    ) -> Result<ModelReply, ModelError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_and_server_errors_are_retried_others_not() {
        assert!(ModelError::status(429, None, "slow down").retryable);
        assert!(ModelError::status(503, None, "busy").retryable);
        assert!(!ModelError::status(400, None, "bad request").retryable);
        assert!(!ModelError::status(401, None, "no key").retryable);
    }

    #[test]
    fn a_retry_after_becomes_the_next_attempts_delay() {
        let e =
            ModelError::status(429, Some(Duration::from_secs(7)), "slow down").into_step_error();
        assert_eq!(e.kind(), "http_429");
        assert!(e.is_retryable());
        assert_eq!(e.retry_after_hint(), Some(Duration::from_secs(7)));
    }
}
