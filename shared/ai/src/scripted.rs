//! A model for tests and demos: scripted replies, no network, no key.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;

use crate::message::{Message, Role, ToolCallRequest, Usage};
use crate::model::{Model, ModelError, ModelReply, ModelRequest, TokenSink};

/// A fake model whose reply to a request is the script's entry for that turn — the
/// number of assistant messages already in the request — so a replayed or repeated
/// call gets the same answer as the first. Failures can be injected by call number.
pub struct ScriptedModel {
    turns: Vec<ModelReply>,
    failures: Mutex<BTreeMap<u32, ModelError>>,
    calls: AtomicU32,
    requests: Mutex<Vec<ModelRequest>>,
}

impl ScriptedModel {
    /// A model answering turn *k* with `turns[k]` (and the last one after the end).
    pub fn new(turns: Vec<ModelReply>) -> Self {
        ScriptedModel {
            turns,
            failures: Mutex::default(),
            calls: AtomicU32::new(0),
            requests: Mutex::default(),
        }
    }

    /// Call number `call` (from 1, counted over all calls) fails with `error`.
    pub fn fail_call(self, call: u32, error: ModelError) -> Self {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(call, error);
        self
    }

    /// How many times the model was called (what a real endpoint would bill).
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Every request the model was sent, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A reply of text only.
pub fn text_reply(content: impl Into<String>) -> ModelReply {
    reply(Message::assistant(content), "stop")
}

/// A reply that says `preamble` and calls the tool `name` with `arguments`.
pub fn tool_reply(
    preamble: impl Into<String>,
    id: impl Into<String>,
    name: impl Into<String>,
    arguments: serde_json::Value,
) -> ModelReply {
    let mut message = Message::assistant(preamble);
    message.tool_calls.push(ToolCallRequest {
        id: id.into(),
        name: name.into(),
        arguments,
    });
    reply(message, "tool_calls")
}

fn reply(message: Message, finish_reason: &str) -> ModelReply {
    ModelReply {
        message,
        finish_reason: finish_reason.to_owned(),
        usage: Usage::default(),
        model: "scripted".to_owned(),
    }
}

/// Roughly four characters a token, as tokenizers of English text average.
fn tokens_of(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

#[async_trait]
impl Model for ScriptedModel {
    async fn complete(
        &self,
        request: &ModelRequest,
        tokens: Option<TokenSink>,
    ) -> Result<ModelReply, ModelError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request.clone());
        if let Some(error) = self
            .failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&call)
        {
            return Err(error);
        }
        let turn = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let Some(mut reply) = self.turns.get(turn).or(self.turns.last()).cloned() else {
            return Err(ModelError::invalid("the scripted model has no replies"));
        };
        if let Some(sink) = tokens {
            // Word by word, spaces kept, as a real model streams.
            for word in reply.message.content.split_inclusive(' ') {
                sink(word);
            }
        }
        reply.usage = Usage {
            input_tokens: request.messages.iter().map(|m| tokens_of(&m.content)).sum(),
            output_tokens: tokens_of(&reply.message.content).max(1),
        };
        reply.model = request.model.clone();
        Ok(reply)
    }
}
