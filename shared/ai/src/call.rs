//! A conversation whose every model call is one journaled operation.
//!
//! Each call is a step labelled `ModelCall` in the timeline. Its journaled value is a
//! [`ModelCall`]: the reply with its usage, finish reason, model and latency, and what
//! the call was asked — but only the messages added since the conversation's previous
//! call, not the whole prompt again. The prompt of call *n* is the messages of calls
//! 0..*n* (asked and replied) followed by call *n*'s own, so a reader rebuilds it from
//! the journal while the journal grows by each turn's new messages alone: linear in the
//! conversation, where storing every prompt whole would be quadratic.
//!
//! A call whose reply was journaled is never made again: replay returns the recorded
//! reply. A crash between the reply and its journal write makes the call once more
//! (the step is at-least-once per attempt); that is the only repeat there can be.

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use siesta::{Context, RetryStrategy, SubType};

use crate::message::{Message, ToolSpec, Usage};
use crate::model::{Model, ModelRequest, TokenSink};

/// What a call was asked beyond what the conversation's earlier calls recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Asked {
    /// How many messages of the prompt come before [`Asked::messages`]: those the
    /// earlier calls of this conversation recorded, asked and replied, in order.
    pub since: usize,
    /// The prompt's messages from position `since` on.
    pub messages: Vec<Message>,
    /// The names of the tools the model was offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

/// One model call as the journal holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// What it was asked (only what is new since the previous call).
    pub asked: Asked,
    /// The model's answer.
    pub reply: Message,
    /// Why the model stopped (`stop`, `tool_calls`, `length`…).
    pub finish_reason: String,
    /// Tokens used.
    pub usage: Usage,
    /// The model that answered.
    pub model: String,
    /// How long the call took, in milliseconds.
    pub latency_ms: u64,
}

/// A conversation with a model, rebuilt the same way on every replay: the messages are
/// the code's own (system prompt, user input) and the journaled replies.
#[derive(Clone)]
pub struct Conversation {
    name: String,
    model: String,
    messages: Vec<Message>,
    /// How many of `messages` earlier calls recorded.
    recorded: usize,
    tools: Vec<ToolSpec>,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    retry: RetryStrategy,
    usage: Usage,
    calls: u32,
    /// The run's stream the replies' text is published on as it is produced.
    stream: Option<String>,
}

impl Conversation {
    /// A conversation with `model` (its name, e.g. `gpt-4o-mini`) whose calls are the
    /// operations `name#0`, `name#1`… of the run.
    pub fn new(name: impl Into<String>, model: impl Into<String>) -> Self {
        Conversation {
            name: name.into(),
            model: model.into(),
            messages: Vec::new(),
            recorded: 0,
            tools: Vec::new(),
            max_tokens: None,
            temperature: None,
            retry: RetryStrategy::default(),
            usage: Usage::default(),
            calls: 0,
            stream: None,
        }
    }

    /// Start with a system message.
    pub fn system(mut self, instructions: impl Into<String>) -> Self {
        self.messages.push(Message::system(instructions));
        self
    }

    /// Offer these tools to the model.
    pub fn tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }

    /// At most `max_tokens` per reply.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// How failed calls are retried (429s and 5xx wait what `Retry-After` says).
    pub fn retry(mut self, strategy: RetryStrategy) -> Self {
        self.retry = strategy;
        self
    }

    /// Publish each reply's text, as the model produces it, on the run's stream
    /// `name` (a chunk per piece of text, tagged with the call's step and attempt, so a
    /// reader drops a failed attempt's partial text). A replayed call publishes nothing.
    pub fn stream_to(mut self, name: impl Into<String>) -> Self {
        self.stream = Some(name.into());
        self
    }

    pub(crate) fn set_stream(&mut self, name: Option<String>) {
        if name.is_some() {
            self.stream = name;
        }
    }

    /// Add a message (the user's, a tool's result).
    pub fn push(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// The messages so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Tokens used by this conversation's calls so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// How many calls this conversation has made.
    pub fn calls(&self) -> u32 {
        self.calls
    }

    /// Ask the model for its next message; the reply is added to the conversation.
    pub async fn ask(
        &mut self,
        ctx: &Context,
        model: &Arc<dyn Model>,
    ) -> Result<ModelCall, siesta::Error> {
        self.call(ctx, model, None).await
    }

    /// [`Conversation::ask`], handing `tokens` the reply's text as it arrives (not on
    /// replay: a journaled reply is returned whole).
    pub async fn ask_streaming(
        &mut self,
        ctx: &Context,
        model: &Arc<dyn Model>,
        tokens: TokenSink,
    ) -> Result<ModelCall, siesta::Error> {
        self.call(ctx, model, Some(tokens)).await
    }

    async fn call(
        &mut self,
        ctx: &Context,
        model: &Arc<dyn Model>,
        tokens: Option<TokenSink>,
    ) -> Result<ModelCall, siesta::Error> {
        let asked = Asked {
            since: self.recorded,
            messages: self.messages[self.recorded..].to_vec(),
            tools: self.tools.iter().map(|t| t.name.clone()).collect(),
        };
        let request = ModelRequest {
            model: self.model.clone(),
            messages: self.messages.clone(),
            tools: self.tools.clone(),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
        };
        let model = Arc::clone(model);
        let stream = self.stream.clone();
        let call: ModelCall = ctx
            .step(&self.name, move |step| async move {
                let started = Instant::now();
                let reply = match stream {
                    None => model.complete(&request, tokens).await,
                    Some(name) => {
                        complete_publishing(&*model, &request, tokens, step.stream(&name)).await?
                    }
                }
                .map_err(|e| e.into_step_error())?;
                Ok(ModelCall {
                    asked,
                    reply: reply.message,
                    finish_reason: reply.finish_reason,
                    usage: reply.usage,
                    model: reply.model,
                    latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                })
            })
            .sub_type(SubType::ModelCall)
            .retry(self.retry.clone())
            .await?;
        self.messages.push(call.reply.clone());
        self.recorded = self.messages.len();
        self.usage += call.usage;
        self.calls += 1;
        Ok(call)
    }
}

/// Call `model`, publishing each piece of text on `stream` in order as it arrives (and
/// handing it to `tokens` too). The model's sink is synchronous, so pieces go through
/// a channel to the publisher running beside the call.
async fn complete_publishing(
    model: &dyn Model,
    request: &ModelRequest,
    tokens: Option<TokenSink>,
    stream: siesta::context::StepStream,
) -> Result<Result<crate::model::ModelReply, crate::model::ModelError>, siesta::StepError> {
    use futures::StreamExt;
    let (tx, mut rx) = futures::channel::mpsc::unbounded::<String>();
    let sink: TokenSink = Arc::new(move |text: &str| {
        if let Some(also) = &tokens {
            also(text);
        }
        // Closed only once the publisher failed; its error is returned below.
        let _ = tx.unbounded_send(text.to_owned());
    });
    let publish = async {
        while let Some(text) = rx.next().await {
            stream.publish(&text).await?;
        }
        Ok::<(), siesta::StepError>(())
    };
    // The call owns the sink, so the channel's sender is dropped when it ends: the
    // publisher drains what is left and ends.
    let call = model.complete(request, Some(sink));
    let (reply, published) = futures::join!(call, publish);
    published?;
    Ok(reply)
}

/// The prompt of each call, rebuilt from the calls' records in order (as a reader of
/// the journal does): call *n*'s prompt is every earlier call's asked and replied
/// messages, then its own.
pub fn prompts(calls: &[ModelCall]) -> Vec<Vec<Message>> {
    let mut so_far: Vec<Message> = Vec::new();
    let mut prompts = Vec::with_capacity(calls.len());
    for call in calls {
        so_far.truncate(call.asked.since);
        so_far.extend(call.asked.messages.iter().cloned());
        prompts.push(so_far.clone());
        so_far.push(call.reply.clone());
    }
    prompts
}
