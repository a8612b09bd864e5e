//! The `agent` workflow: a support agent that looks the customer's order up, asks for
//! a refund that a person must approve, and answers — every model call, tool call and
//! approval durable, the model's words streamed live.
//!
//! Input: `{"customer": string, "message": string}`. The refund waits for the event
//! named [`"approval"`](siesta_ai::APPROVAL_EVENT) with `{"approved": bool, "by":
//! string, "comment"?: string}`, for at most two days; a refusal (or no answer) goes
//! back to the model, which tells the customer. The model's text is published on the
//! stream `tokens` as it is produced.
//!
//! The model is any OpenAI-compatible endpoint when one is configured
//! (`OPENAI_BASE_URL` and/or `OPENAI_API_KEY`, model `OPENAI_MODEL`, default
//! `gpt-4o-mini`), else [`SupportDemoModel`], a built-in fake that needs no network and
//! no key and, like a real model, says a sentence before each tool call.

use std::sync::Arc;

use futures::future::BoxFuture;
use siesta::prelude::*;
use siesta_ai::{
    Agent, AgentAnswer, Conversation, Message, Model, ModelError, ModelReply, ModelRequest,
    OpenAiCompatible, Role, TokenSink, Tool, ToolCallRequest, Usage,
};

/// The stream the model's tokens are published on.
pub const TOKENS_STREAM: &str = "tokens";

/// The input of the `agent` workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentInput {
    /// Who writes.
    pub customer: String,
    /// What they wrote.
    pub message: String,
}

/// The arguments of the `lookup_order` tool.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LookupOrder {
    /// The customer whose latest order to find.
    pub customer: String,
}

/// The arguments of the `refund` tool.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Refund {
    /// The order to refund.
    pub order: String,
    /// The amount, in whole dollars.
    pub amount: u32,
    /// Why, in the customer's words.
    pub reason: String,
}

/// An order as the (pretend) order system returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// Its id.
    pub order: String,
    /// What was bought.
    pub item: String,
    /// What it cost, in whole dollars.
    pub total: u32,
    /// Where it is.
    pub status: String,
}

const SYSTEM: &str = "You are the support agent of a small shop. Look the customer's latest \
order up with lookup_order before anything else. If they ask for their money back for a \
damaged, broken or unwanted item, call refund for the order's total. Say one short sentence \
before each tool call. Answer in two sentences at most.";

/// The model the deployment configured, or the built-in fake.
pub fn configured_model() -> Arc<dyn Model> {
    match OpenAiCompatible::from_env() {
        Some(endpoint) => Arc::new(endpoint),
        None => Arc::new(SupportDemoModel),
    }
}

/// The model name asked of the endpoint: `OPENAI_MODEL`, default `gpt-4o-mini`.
fn model_name() -> String {
    std::env::var("OPENAI_MODEL")
        .ok()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "gpt-4o-mini".to_owned())
}

/// The `agent` workflow over `model`.
pub fn agent_with(
    model: Arc<dyn Model>,
) -> impl Fn(Context, AgentInput) -> BoxFuture<'static, Result<AgentAnswer, Error>> + Send + Sync + 'static
{
    move |ctx: Context, input: AgentInput| {
        let model = Arc::clone(&model);
        Box::pin(async move { agent(ctx, input, model).await })
    }
}

async fn agent(
    ctx: Context,
    input: AgentInput,
    model: Arc<dyn Model>,
) -> Result<AgentAnswer, Error> {
    let mut chat = Conversation::new("llm", model_name()).system(SYSTEM);
    chat.push(Message::user(format!(
        "I am {}. {}",
        input.customer, input.message
    )));
    Agent::new(chat)
        .tool(Tool::new(
            "lookup_order",
            "Find the customer's latest order",
            |a: LookupOrder, _| async move { Ok(lookup_order(&a.customer)) },
        ))
        .tool(
            Tool::new(
                "refund",
                "Refund an order; a person approves it first",
                |a: Refund, call| async move {
                    // The key is the call's meaning: a payment provider given it
                    // refunds once however often it is asked.
                    let key = call.idempotency_key().map(|k| k.to_string()).unwrap_or_default();
                    Ok(serde_json::json!({"refunded": a.amount, "order": a.order, "reference": &key[..key.len().min(16)]}))
                },
            )
            .needs_approval(),
        )
        .max_turns(8)
        .token_budget(50_000)
        .stream_to(TOKENS_STREAM)
        .run(&ctx, &model)
        .await
}

/// The pretend order system: every customer's latest order is the same espresso
/// machine.
fn lookup_order(customer: &str) -> Order {
    let digits: u32 = customer.bytes().map(u32::from).sum::<u32>() % 9000 + 1000;
    Order {
        order: format!("A-{digits}"),
        item: "espresso machine".to_owned(),
        total: 249,
        status: "delivered 3 days ago".to_owned(),
    }
}

/// The built-in fake model of the `agent` example: no network, no key. It looks the
/// order up, asks for a refund when the customer wants their money back, and answers
/// from the tools' results — saying a sentence before each tool call, word by word
/// when streamed, as a real model does.
#[derive(Debug, Clone, Copy, Default)]
pub struct SupportDemoModel;

#[async_trait::async_trait]
impl Model for SupportDemoModel {
    async fn complete(
        &self,
        request: &ModelRequest,
        tokens: Option<TokenSink>,
    ) -> Result<ModelReply, ModelError> {
        let user = request
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.to_lowercase())
            .unwrap_or_default();
        let customer = user
            .strip_prefix("i am ")
            .and_then(|rest| rest.split('.').next())
            .unwrap_or("customer")
            .to_owned();
        let result_of = |tool: &str| -> Option<serde_json::Value> {
            let id = request
                .messages
                .iter()
                .flat_map(|m| &m.tool_calls)
                .find(|c| c.name == tool)?
                .id
                .clone();
            let m = request
                .messages
                .iter()
                .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(&id))?;
            serde_json::from_str(&m.content).ok()
        };
        let wants_refund = ["refund", "broken", "damaged", "money back", "return"]
            .iter()
            .any(|w| user.contains(w));
        let (text, call) = match (result_of("lookup_order"), result_of("refund")) {
            (None, _) => (
                "Let me look up your latest order.".to_owned(),
                Some(("lookup_order", serde_json::json!({"customer": customer}))),
            ),
            (Some(order), None) if wants_refund => (
                format!(
                    "I found order {} for your {}; I am asking for a refund of ${}.",
                    order["order"].as_str().unwrap_or("?"),
                    order["item"].as_str().unwrap_or("item"),
                    order["total"]
                ),
                Some((
                    "refund",
                    serde_json::json!({"order": order["order"], "amount": order["total"], "reason": user}),
                )),
            ),
            (Some(order), None) => (
                format!(
                    "Your order {} ({}) was {}. Is there anything else I can do?",
                    order["order"].as_str().unwrap_or("?"),
                    order["item"].as_str().unwrap_or("item"),
                    order["status"].as_str().unwrap_or("shipped")
                ),
                None,
            ),
            (Some(order), Some(refund)) if refund.get("refunded").is_some() => (
                format!(
                    "Your refund of ${} for order {} is on its way; expect it within five business days.",
                    refund["refunded"],
                    order["order"].as_str().unwrap_or("?")
                ),
                None,
            ),
            (Some(order), Some(refund)) => (
                format!(
                    "I am sorry: the refund for order {} was not approved{}. A colleague will contact you.",
                    order["order"].as_str().unwrap_or("?"),
                    refund["by"]
                        .as_str()
                        .map(|by| format!(" by {by}"))
                        .unwrap_or_default()
                ),
                None,
            ),
        };
        if let Some(sink) = tokens {
            for word in text.split_inclusive(' ') {
                sink(word);
            }
        }
        let turn = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let mut message = Message::assistant(&text);
        let finish_reason = match call {
            Some((name, arguments)) => {
                message.tool_calls.push(ToolCallRequest {
                    id: format!("call_{turn}"),
                    name: name.to_owned(),
                    arguments,
                });
                "tool_calls"
            }
            None => "stop",
        };
        let chars: usize = request.messages.iter().map(|m| m.content.len()).sum();
        Ok(ModelReply {
            message,
            finish_reason: finish_reason.to_owned(),
            usage: Usage {
                input_tokens: (chars as u64).div_ceil(4),
                output_tokens: (text.len() as u64).div_ceil(4),
            },
            model: "siesta-demo".to_owned(),
        })
    }
}
