//! The client of OpenAI-compatible chat-completion endpoints (OpenAI, vLLM, Ollama,
//! LiteLLM, Groq…), on `reqwest`.
//!
//! The wire types are this file's own and lenient on purpose: servers that speak
//! "OpenAI-compatible" differ in the details (`finish_reason` of `""` or `null`, no
//! `usage`, extra fields), and a strict schema of OpenAI's newest API fails on them —
//! the reason this crate does not take `async-openai`'s types. Retries are not done
//! here: the step around the call retries durably, honouring `Retry-After`, so a
//! 429 is visible in the run's timeline instead of hidden inside a client.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::message::{Message, Role, ToolCallRequest, Usage};
use crate::model::{Model, ModelError, ModelReply, ModelRequest, TokenSink};

/// The endpoint OpenAI itself serves.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// A chat-completion endpoint that speaks OpenAI's protocol.
#[derive(Clone)]
pub struct OpenAiCompatible {
    base_url: String,
    api_key: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for OpenAiCompatible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a credential: never printed.
        f.debug_struct("OpenAiCompatible")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "…"))
            .finish()
    }
}

impl OpenAiCompatible {
    /// The endpoint at `base_url` (e.g. `http://localhost:11434/v1`), with a bearer
    /// `api_key` if it needs one.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        OpenAiCompatible {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key,
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
        }
    }

    /// The endpoint the standard variables name: `OPENAI_BASE_URL` (default OpenAI's
    /// own) and `OPENAI_API_KEY`. `None` when neither is set: no endpoint configured.
    pub fn from_env() -> Option<Self> {
        let base = std::env::var("OPENAI_BASE_URL")
            .ok()
            .filter(|v| !v.is_empty());
        let key = std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|v| !v.is_empty());
        if base.is_none() && key.is_none() {
            return None;
        }
        Some(Self::new(
            base.unwrap_or_else(|| OPENAI_BASE_URL.to_owned()),
            key,
        ))
    }

    /// The base URL calls go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    async fn send(&self, body: &Value) -> Result<reqwest::Response, ModelError> {
        let mut request = self
            .http
            .post(format!("{}/chat/completions", self.base_url))
            .json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        // Inside a model call's step, the attempt's span: the endpoint (a gateway, a
        // proxy that traces) joins the run's trace under it. Nothing when spans are
        // not exported.
        if let Some(parent) = siesta::telemetry::current_trace_parent() {
            request = request.header("traceparent", parent.to_string());
        }
        let response = request
            .send()
            .await
            .map_err(|e| ModelError::transport(format!("calling {}: {e}", self.base_url)))?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let text = response.text().await.unwrap_or_default();
        Err(ModelError::status(
            status,
            retry_after,
            format!(
                "{} answered {status}: {}",
                self.base_url,
                truncate(&text, 500)
            ),
        ))
    }
}

#[async_trait]
impl Model for OpenAiCompatible {
    async fn complete(
        &self,
        request: &ModelRequest,
        tokens: Option<TokenSink>,
    ) -> Result<ModelReply, ModelError> {
        let mut body = request_body(request);
        match tokens {
            None => {
                let response = self.send(&body).await?;
                let bytes = response
                    .bytes()
                    .await
                    .map_err(|e| ModelError::transport(format!("reading the reply: {e}")))?;
                let wire: WireCompletion = serde_json::from_slice(&bytes).map_err(|e| {
                    ModelError::invalid(format!(
                        "the reply is not a chat completion ({e}): {}",
                        truncate(&String::from_utf8_lossy(&bytes), 300)
                    ))
                })?;
                reply_of(wire, &request.model)
            }
            Some(sink) => {
                body["stream"] = json!(true);
                body["stream_options"] = json!({"include_usage": true});
                let response = self.send(&body).await?;
                let mut events = eventsource_stream::EventStream::new(response.bytes_stream());
                let mut acc = StreamedReply::default();
                while let Some(event) = events.next().await {
                    let event = event
                        .map_err(|e| ModelError::transport(format!("reading the stream: {e}")))?;
                    if event.data.trim() == "[DONE]" {
                        break;
                    }
                    let chunk: WireChunk = serde_json::from_str(&event.data).map_err(|e| {
                        ModelError::invalid(format!(
                            "a stream chunk is not a completion chunk ({e}): {}",
                            truncate(&event.data, 300)
                        ))
                    })?;
                    if let Some(text) = acc.absorb(chunk) {
                        sink(&text);
                    }
                }
                Ok(acc.finish(&request.model))
            }
        }
    }
}

/// The JSON body of a chat-completion request.
pub(crate) fn request_body(request: &ModelRequest) -> Value {
    let messages: Vec<Value> = request.messages.iter().map(wire_message).collect();
    let mut body = json!({"model": request.model, "messages": messages});
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
    }
    if let Some(max) = request.max_tokens {
        body["max_tokens"] = json!(max);
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    body
}

fn wire_message(m: &Message) -> Value {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut v = json!({"role": role, "content": m.content});
    if !m.tool_calls.is_empty() {
        v["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| {
                let arguments = match &c.arguments {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": arguments}})
            })
            .collect();
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    v
}

#[derive(Deserialize)]
struct WireCompletion {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    message: WireMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireToolCall>,
}

#[derive(Deserialize, Default)]
struct WireToolCall {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: WireFunction,
}

#[derive(Deserialize, Default)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    #[serde(default)]
    delta: WireMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

fn parse_arguments(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

fn usage_of(u: Option<WireUsage>) -> Usage {
    let u = u.unwrap_or_default();
    Usage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
    }
}

fn reply_of(wire: WireCompletion, asked_model: &str) -> Result<ModelReply, ModelError> {
    let Some(choice) = wire.choices.into_iter().next() else {
        return Err(ModelError::invalid("the reply has no choice"));
    };
    let tool_calls = choice
        .message
        .tool_calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| ToolCallRequest {
            id: c.id.unwrap_or_else(|| format!("call_{i}")),
            name: c.function.name.unwrap_or_default(),
            arguments: parse_arguments(c.function.arguments.as_deref().unwrap_or("{}")),
        })
        .collect();
    Ok(ModelReply {
        message: Message {
            role: Role::Assistant,
            content: choice.message.content.unwrap_or_default(),
            tool_calls,
            tool_call_id: None,
        },
        finish_reason: choice.finish_reason.unwrap_or_default(),
        usage: usage_of(wire.usage),
        model: wire.model.unwrap_or_else(|| asked_model.to_owned()),
    })
}

/// A streamed reply put back together, chunk by chunk.
#[derive(Default)]
struct StreamedReply {
    content: String,
    /// Tool calls by their index: id, name, and the arguments' text so far.
    tool_calls: Vec<(String, String, String)>,
    finish_reason: Option<String>,
    usage: Option<WireUsage>,
    model: Option<String>,
}

impl StreamedReply {
    /// Take in one chunk; the new text, if it brought some.
    fn absorb(&mut self, chunk: WireChunk) -> Option<String> {
        if chunk.model.is_some() {
            self.model = chunk.model;
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        let mut text = None;
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish_reason = Some(reason);
            }
            if let Some(delta) = choice.delta.content.filter(|c| !c.is_empty()) {
                self.content.push_str(&delta);
                text = Some(delta);
            }
            for call in choice.delta.tool_calls {
                let i = call
                    .index
                    .unwrap_or(self.tool_calls.len().saturating_sub(1));
                while self.tool_calls.len() <= i {
                    self.tool_calls.push(Default::default());
                }
                let slot = &mut self.tool_calls[i];
                if let Some(id) = call.id {
                    slot.0 = id;
                }
                if let Some(name) = call.function.name {
                    slot.1.push_str(&name);
                }
                if let Some(args) = call.function.arguments {
                    slot.2.push_str(&args);
                }
            }
        }
        text
    }

    fn finish(self, asked_model: &str) -> ModelReply {
        ModelReply {
            message: Message {
                role: Role::Assistant,
                content: self.content,
                tool_calls: self
                    .tool_calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, (id, name, args))| ToolCallRequest {
                        id: if id.is_empty() {
                            format!("call_{i}")
                        } else {
                            id
                        },
                        name,
                        arguments: parse_arguments(if args.is_empty() { "{}" } else { &args }),
                    })
                    .collect(),
                tool_call_id: None,
            },
            finish_reason: self.finish_reason.unwrap_or_default(),
            usage: usage_of(self.usage),
            model: self.model.unwrap_or_else(|| asked_model.to_owned()),
        }
    }
}

/// The wait an answer asks for: OpenAI's `retry-after-ms`, else `Retry-After` as
/// seconds or as an HTTP date (relative to `now`).
fn retry_after(headers: &reqwest::header::HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_after_is_read_as_seconds_milliseconds_or_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after-ms", "1500"), ("retry-after", "9")]),
                now
            ),
            Some(Duration::from_millis(1500))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &later)]), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[]), now), None);
    }

    #[test]
    fn lenient_replies_from_compatible_servers_are_read() {
        // Ollama: finish_reason null, zero usage; others: "" and no usage at all.
        let wire: WireCompletion = serde_json::from_value(json!({
            "id": "x", "model": "llama3", "choices": [{"index": 0,
              "message": {"role": "assistant", "content": "hi"}, "finish_reason": null}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "system_fingerprint": "fp_ollama"
        }))
        .unwrap();
        let reply = reply_of(wire, "asked").unwrap();
        assert_eq!(reply.message.content, "hi");
        assert_eq!(reply.finish_reason, "");
        assert_eq!(reply.model, "llama3");
        let wire: WireCompletion = serde_json::from_value(json!({
            "choices": [{"message": {"content": null, "tool_calls": [{"id": "c1", "type": "function",
              "function": {"name": "lookup_order", "arguments": "{\"order\":\"A1\"}"}}]},
              "finish_reason": "tool_calls"}]
        }))
        .unwrap();
        let reply = reply_of(wire, "asked").unwrap();
        assert_eq!(reply.model, "asked");
        assert_eq!(
            reply.message.tool_calls[0].arguments,
            json!({"order": "A1"})
        );
    }

    #[test]
    fn a_streamed_reply_is_put_back_together() {
        let mut acc = StreamedReply::default();
        let chunks = [
            json!({"model": "m", "choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": ""}]}),
            json!({"choices": [{"delta": {"content": "Let me "}}]}),
            json!({"choices": [{"delta": {"content": "look."}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "lookup", "arguments": "{\"a\""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5}}),
        ];
        let texts: Vec<String> = chunks
            .into_iter()
            .filter_map(|c| acc.absorb(serde_json::from_value(c).unwrap()))
            .collect();
        assert_eq!(texts, ["Let me ", "look."]);
        let reply = acc.finish("asked");
        assert_eq!(reply.message.content, "Let me look.");
        assert_eq!(reply.message.tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(reply.finish_reason, "tool_calls");
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 5
            }
        );
        assert_eq!(reply.model, "m");
    }
}
