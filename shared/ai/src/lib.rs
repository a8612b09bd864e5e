//! Durable model calls for Siesta workflows.
//!
//! A [`Conversation`] asks a [`Model`] for its next message; each call is one
//! journaled operation (a step labelled `ModelCall` in the timeline) recording the
//! reply, its token usage, finish reason, model and latency, and what the call was
//! asked. A reply once journaled is never asked for again — no re-billing after a
//! crash — and a 429 or 5xx is retried by the step's policy after the `Retry-After`
//! the endpoint gave.
//!
//! ```ignore
//! let model: Arc<dyn Model> = Arc::new(OpenAiCompatible::from_env().expect("set OPENAI_BASE_URL"));
//! let mut chat = Conversation::new("llm", "gpt-4o-mini").system("You are a support agent.");
//! chat.push(Message::user(input.message));
//! let call = chat.ask(&ctx, &model).await?;
//! ```
//!
//! An [`Agent`] runs the loop: model calls, typed [`Tool`]s (each call a journaled
//! `tool_call`, behind a person's [`Approval`] where needed; a refusal goes back to
//! the model), a turn budget and a token budget.
//!
//! Models: [`OpenAiCompatible`] for any OpenAI-compatible endpoint (`OPENAI_BASE_URL`,
//! `OPENAI_API_KEY`: OpenAI, vLLM, Ollama…), [`ScriptedModel`] for tests and demos.

mod agent;
mod call;
mod message;
mod model;
mod openai;
mod scripted;
mod tool;

pub use agent::{
    APPROVAL_EVENT, APPROVAL_TIMEOUT, Agent, AgentAnswer, Approval, BUDGET_SPENT, ToolCallOutcome,
};
pub use call::{Asked, Conversation, ModelCall, prompts};
pub use message::{Message, Role, ToolCallRequest, ToolSpec, Usage};
pub use model::{Model, ModelError, ModelReply, ModelRequest, TokenSink};
pub use openai::{OPENAI_BASE_URL, OpenAiCompatible};
pub use scripted::{ScriptedModel, text_reply, tool_reply};
pub use tool::Tool;
