//! The agent loop: ask the model, run the tools it calls (behind a person's approval
//! where a tool needs one), give it their results, until it answers — within a turn
//! budget and a token budget.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use siesta::{Context, Error, ErrorInfo, ErrorKind, JsonSchema};

use crate::call::Conversation;
use crate::message::{Message, Usage};
use crate::model::{Model, TokenSink};
use crate::tool::{Tool, ToolFailure};

/// The event name a tool call waits on for its approval, unless set otherwise.
pub const APPROVAL_EVENT: &str = "approval";
/// How long a tool call waits for its approval, unless set otherwise: two days.
pub const APPROVAL_TIMEOUT: Duration = Duration::from_secs(2 * 86_400);
/// The error kind of a run whose agent spent its turn or token budget.
pub const BUDGET_SPENT: &str = "AgentBudgetSpent";

/// A person's answer to a tool call waiting for approval: the payload of the approval
/// event, e.g. `{"approved": true, "by": "alice"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Approval {
    /// Whether the call may run.
    pub approved: bool,
    /// Who decided.
    pub by: String,
    /// Why, if they said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// What the agent ended with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentAnswer {
    /// The model's last message: its answer.
    pub answer: String,
    /// How many model calls it took.
    pub turns: u32,
    /// Tokens used in all.
    pub usage: Usage,
    /// The tool calls made, in order, with what became of each.
    pub tool_calls: Vec<ToolCallOutcome>,
}

/// One tool call of the agent and its result as the model was told it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallOutcome {
    /// The tool.
    pub tool: String,
    /// The arguments the model gave.
    pub arguments: Value,
    /// What the model was told.
    pub result: Value,
}

/// An agent: a conversation, its tools, its budgets.
pub struct Agent {
    chat: Conversation,
    tools: Vec<Tool>,
    max_turns: u32,
    token_budget: Option<u64>,
    approval_event: String,
    approval_timeout: Duration,
    tokens: Option<TokenSink>,
    stream: Option<String>,
}

impl Agent {
    /// An agent over `chat` (its system prompt and the user's message already in it),
    /// with no tools, at most 8 turns and no token budget.
    pub fn new(chat: Conversation) -> Self {
        Agent {
            chat,
            tools: Vec::new(),
            max_turns: 8,
            token_budget: None,
            approval_event: APPROVAL_EVENT.to_owned(),
            approval_timeout: APPROVAL_TIMEOUT,
            tokens: None,
            stream: None,
        }
    }

    /// Offer `tool` to the model.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// At most `turns` model calls; one more fails the run ([`BUDGET_SPENT`]).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = turns;
        self
    }

    /// At most `tokens` (input and output, all calls): a call that passes it fails the
    /// run ([`BUDGET_SPENT`]) before the next one is made.
    pub fn token_budget(mut self, tokens: u64) -> Self {
        self.token_budget = Some(tokens);
        self
    }

    /// Tool calls that need approval wait for the event `event` (an [`Approval`]) at
    /// most `timeout`; default [`APPROVAL_EVENT`], [`APPROVAL_TIMEOUT`].
    pub fn approvals(mut self, event: &str, timeout: Duration) -> Self {
        self.approval_event = event.to_owned();
        self.approval_timeout = timeout;
        self
    }

    /// Hand the model's text to `sink` as it is produced (live calls only).
    pub fn stream_tokens(mut self, sink: TokenSink) -> Self {
        self.tokens = Some(sink);
        self
    }

    /// Publish the model's text on the run's stream `name` as it is produced (see
    /// [`Conversation::stream_to`]).
    pub fn stream_to(mut self, name: impl Into<String>) -> Self {
        self.stream = Some(name.into());
        self
    }

    /// Run the loop until the model answers without calling a tool.
    pub async fn run(self, ctx: &Context, model: &Arc<dyn Model>) -> Result<AgentAnswer, Error> {
        let Agent {
            chat,
            tools,
            max_turns,
            token_budget,
            approval_event,
            approval_timeout,
            tokens,
            stream,
        } = self;
        let mut chat = chat.tools(tools.iter().map(|t| t.spec().clone()).collect());
        chat.set_stream(stream);
        let mut outcomes = Vec::new();
        loop {
            if chat.calls() >= max_turns {
                return Err(budget_spent(format!(
                    "the agent's turn budget ({max_turns} model calls) is spent without an answer"
                )));
            }
            let call = match &tokens {
                Some(sink) => chat.ask_streaming(ctx, model, sink.clone()).await?,
                None => chat.ask(ctx, model).await?,
            };
            if let Some(budget) = token_budget
                && chat.usage().total() > budget
            {
                return Err(budget_spent(format!(
                    "the agent's token budget ({budget}) is spent: {} tokens used in {} model calls",
                    chat.usage().total(),
                    chat.calls()
                )));
            }
            if call.reply.tool_calls.is_empty() {
                return Ok(AgentAnswer {
                    answer: call.reply.content,
                    turns: chat.calls(),
                    usage: chat.usage(),
                    tool_calls: outcomes,
                });
            }
            for request in call.reply.tool_calls {
                let result = match tools.iter().find(|t| t.spec().name == request.name) {
                    None => json!({"error": format!("there is no tool named '{}'", request.name)}),
                    Some(tool) => {
                        let decision = if tool.requires_approval() {
                            approve(ctx, &approval_event, approval_timeout).await?
                        } else {
                            None
                        };
                        match decision {
                            Some(refusal) => refusal,
                            None => match tool.call(ctx, request.arguments.clone()).await {
                                Ok(value) => value,
                                Err(ToolFailure::InvalidArguments(e)) => {
                                    json!({"error": format!("invalid arguments: {e}")})
                                }
                                Err(ToolFailure::Failed(e)) => {
                                    json!({"error": format!("the tool failed: {e}")})
                                }
                            },
                        }
                    }
                };
                chat.push(Message::tool_result(&request.id, result.to_string()));
                outcomes.push(ToolCallOutcome {
                    tool: request.name,
                    arguments: request.arguments,
                    result,
                });
            }
        }
    }
}

/// Wait for a person's decision: `None` when approved, else the refusal to give the
/// model as the tool's result.
async fn approve(ctx: &Context, event: &str, timeout: Duration) -> Result<Option<Value>, Error> {
    match ctx.wait_for_event::<Approval>(event).timeout(timeout).await {
        Ok(a) if a.approved => Ok(None),
        Ok(a) => Ok(Some(json!({
            "refused": true, "by": a.by, "comment": a.comment,
            "note": "a person refused this call; do not try it again"
        }))),
        Err(e) if e.kind() == ErrorKind::EventTimedOut => Ok(Some(json!({
            "refused": true,
            "note": format!("no one approved this call within {} s; it was not made", timeout.as_secs())
        }))),
        Err(e) => Err(e),
    }
}

fn budget_spent(message: String) -> Error {
    Error::new(
        ErrorKind::Workflow,
        message.clone(),
        Some(ErrorInfo::new(BUDGET_SPENT, message, false)),
    )
}
